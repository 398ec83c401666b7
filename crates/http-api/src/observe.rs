//! One access-log line and one set of metrics per request, written when its response body has
//! been sent (or abandoned), so that a streamed export is logged with its real duration and
//! size.

use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, SizeHint};
use hyper::header::HeaderValue;
use hyper::{Method, Response};

use crate::body::{Body, BodyError};
use crate::metrics::{Metrics, Route};

/// Longest request target logged; the rest is cut, so that a hostile URL cannot bloat the log.
const MAX_LOGGED_TARGET: usize = 512;

/// What is known of a request when its answer begins.
pub(crate) struct Exchange {
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) route: Route,
    pub(crate) method: Method,
    pub(crate) target: String,
    /// Who asked: the peer, or the client a trusted proxy forwards for.
    pub(crate) client: IpAddr,
    /// The request's id, as sent back in `X-Request-Id`.
    pub(crate) request_id: HeaderValue,
    pub(crate) started: Instant,
}

impl Exchange {
    /// The request target (path and query) as logged.
    pub(crate) fn target(uri: &hyper::Uri) -> String {
        let target = uri.path_and_query().map_or("/", |target| target.as_str());
        let mut end = target.len().min(MAX_LOGGED_TARGET);
        while !target.is_char_boundary(end) {
            end -= 1;
        }
        target[..end].to_owned()
    }
}

/// Wraps the response body so that the exchange is recorded when the body ends.
pub(crate) fn observe(response: Response<Body>, exchange: Exchange) -> Response<Body> {
    let status = response.status().as_u16();
    response.map(|inner| {
        Observed {
            inner,
            record: Some(Record { exchange, status }),
            bytes: 0,
        }
        .boxed_unsync()
    })
}

struct Record {
    exchange: Exchange,
    status: u16,
}

struct Observed {
    inner: Body,
    record: Option<Record>,
    bytes: u64,
}

/// How a response body ended.
#[derive(Clone, Copy)]
enum Outcome {
    Complete,
    /// The body itself failed (an export cut by a storage failure).
    Aborted,
    /// The connection dropped the body before its end: the client went away.
    Abandoned,
}

impl Observed {
    fn finish(&mut self, outcome: Outcome) {
        let Some(Record { exchange, status }) = self.record.take() else {
            return;
        };
        let elapsed = exchange.started.elapsed();
        exchange
            .metrics
            .request(exchange.route, status, elapsed.as_secs_f64());
        let outcome = match outcome {
            Outcome::Complete => "complete",
            Outcome::Aborted => "aborted",
            Outcome::Abandoned => "client gone",
        };
        tracing::info!(
            target: "access",
            method = %exchange.method,
            path = %exchange.target,
            client = %exchange.client,
            // Visible ASCII: the id is checked or made so.
            request_id = %exchange.request_id.to_str().unwrap_or_default(),
            status,
            duration_ms = elapsed.as_secs_f64() * 1e3,
            bytes = self.bytes,
            outcome,
            "request"
        );
    }
}

impl hyper::body::Body for Observed {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.bytes += data.len() as u64;
                }
            }
            Poll::Ready(Some(Err(_))) => self.finish(Outcome::Aborted),
            Poll::Ready(None) => self.finish(Outcome::Complete),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Observed {
    fn drop(&mut self) {
        // hyper need not poll a body it knows to be empty, nor any body of a HEAD request.
        let head = self
            .record
            .as_ref()
            .is_some_and(|record| record.exchange.method == Method::HEAD);
        let outcome = if head || hyper::body::Body::is_end_stream(&self.inner) {
            Outcome::Complete
        } else {
            Outcome::Abandoned
        };
        self.finish(outcome);
    }
}
