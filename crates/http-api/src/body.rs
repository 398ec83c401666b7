//! The response body type: whole bodies and channel-fed streams behind one boxed type.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full, combinators::UnsyncBoxBody};
use hyper::body::{Frame, SizeHint};
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
///
/// An `Err` is held back for one poll. hyper buffers the response head and the chunks it polls
/// in one go, and a body error closes the connection without flushing that buffer: an export
/// whose header row and failure were both queued when hyper first polled sent no status line at
/// all. Answering `Pending` once (and waking at once) lets hyper flush what it has buffered
/// before it sees the error, so the client always gets the status, the header row and a cut
/// chunked body.
pub(crate) fn channel(receiver: mpsc::Receiver<Result<Bytes, BodyError>>) -> Body {
    ChannelBody {
        receiver,
        held: None,
    }
    .boxed_unsync()
}

struct ChannelBody {
    receiver: mpsc::Receiver<Result<Bytes, BodyError>>,
    /// An error received and held back until the next poll.
    held: Option<BodyError>,
}

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        if let Some(err) = self.held.take() {
            return Poll::Ready(Some(Err(err)));
        }
        match self.receiver.poll_recv(cx) {
            Poll::Ready(Some(Err(err))) => {
                self.held = Some(err);
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            polled => polled.map(|chunk| chunk.map(|result| result.map(Frame::data))),
        }
    }
}

/// `body`, keeping `guard` alive until the body is dropped: whatever the guard counts (a request
/// in flight, say) lasts exactly as long as the response is being sent. Unlike
/// `BodyExt::map_frame`, this keeps the size hint, so whole bodies keep their
/// `Content-Length`.
pub(crate) fn with_guard<G: Send + Unpin + 'static>(body: Body, guard: G) -> Body {
    Guarded {
        body,
        _guard: guard,
    }
    .boxed_unsync()
}

struct Guarded<G> {
    body: Body,
    _guard: G,
}

impl<G: Unpin> hyper::body::Body for Guarded<G> {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
