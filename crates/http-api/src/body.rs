//! The response body type: whole bodies and channel-fed streams behind one boxed type.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full, combinators::UnsyncBoxBody};
use hyper::body::Frame;
use tokio::sync::mpsc;

/// Why a streamed body was cut short.
#[derive(Debug, thiserror::Error)]
#[error("response aborted: {0}")]
pub struct BodyError(pub String);

/// Every response body of the service.
pub type Body = UnsyncBoxBody<Bytes, BodyError>;

/// A whole body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// An empty body.
pub fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

/// A body fed by a bounded channel: the producer waits while the client is slow (back-pressure),
/// an `Err` aborts the response, and dropping the body (client gone) makes the producer's next
/// send fail, which is how it learns to stop.
pub(crate) fn channel(receiver: mpsc::Receiver<Result<Bytes, BodyError>>) -> Body {
    ChannelBody { receiver }.boxed_unsync()
}

struct ChannelBody {
    receiver: mpsc::Receiver<Result<Bytes, BodyError>>,
}

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        self.receiver
            .poll_recv(cx)
            .map(|chunk| chunk.map(|result| result.map(Frame::data)))
    }
}
