//! How whole response bodies are finished: pretty-printed JSON on request (`?pretty`, as Vega's
//! gateway offers) and compression when the client accepts it.

use bytes::Bytes;
use hyper::header::{CONTENT_ENCODING, CONTENT_TYPE, HeaderValue, VARY};
use hyper::{Response, StatusCode};

use crate::body::{Body, full};
use crate::coding::{Coding, Encoder};

/// Bodies smaller than this are sent as they are: compression would barely shrink them.
const MIN_COMPRESSED_BYTES: usize = 1024;

/// How the client wants its answers written, read from the request once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Style {
    /// The negotiated content coding.
    pub(crate) coding: Coding,
    /// Indent JSON answers.
    pub(crate) pretty: bool,
}

impl Default for Style {
    fn default() -> Self {
        Style {
            coding: Coding::Identity,
            pretty: false,
        }
    }
}

/// A finished body and the coding it was compressed with; cheap to clone, so that the page
/// cache can send the same bytes again.
#[derive(Clone, Debug)]
pub(crate) struct Encoded {
    pub(crate) bytes: Bytes,
    pub(crate) coding: Coding,
}

impl Encoded {
    /// `body`, in a block not much larger than itself: the page cache counts the lengths of the
    /// bodies it keeps, so that count must be close to the memory they hold. A body with more
    /// than an eighth of spare capacity (a compressor's output grows by doubling) is copied to
    /// a block of its size; `shrink_to_fit` would not do, since mimalloc keeps a block that
    /// shrinks by less than half where it is. The copy costs far less than the compression or
    /// rendering that made the body.
    pub(crate) fn new(body: Vec<u8>, coding: Coding) -> Encoded {
        let body = if body.capacity() - body.len() > body.len() / 8 {
            body.as_slice().to_vec()
        } else {
            body
        };
        Encoded {
            bytes: Bytes::from(body),
            coding,
        }
    }
}

impl Style {
    /// True when a body is sent as it was made: neither compressed nor re-indented.
    pub(crate) fn is_plain(&self) -> bool {
        self.coding == Coding::Identity && !self.pretty
    }

    /// Finishes a JSON body: indented when asked, then compressed when worth it. CPU work for
    /// large bodies, so callers run it where blocking is fine.
    pub(crate) fn json(&self, json: Vec<u8>) -> Encoded {
        let json = if self.pretty { pretty(json) } else { json };
        self.compress(json)
    }

    /// Compresses `body` with the negotiated coding when it is large enough to gain.
    pub(crate) fn compress(&self, body: Vec<u8>) -> Encoded {
        if self.coding == Coding::Identity || body.len() < MIN_COMPRESSED_BYTES {
            return Encoded::new(body, Coding::Identity);
        }
        // Compressed from a borrow: the plain body stays at hand for the fallback, uncopied.
        match Encoder::whole(self.coding, &body) {
            Ok(bytes) => Encoded::new(bytes, self.coding),
            Err(err) => {
                // In-memory compression does not fail in practice; an answer without it is
                // still an answer.
                tracing::warn!(error = %err, "compression failed; answering uncompressed");
                Encoded::new(body, Coding::Identity)
            }
        }
    }
}

/// Re-indents compact JSON, keeping field order and every value's text; the input as it is if
/// it does not parse (it always does: it is ours).
pub(crate) fn pretty(json: Vec<u8>) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len() * 2);
    let mut deserializer = serde_json::Deserializer::from_slice(&json);
    let mut serializer = serde_json::Serializer::pretty(&mut out);
    match serde_transcode::transcode(&mut deserializer, &mut serializer) {
        Ok(()) => {
            out.push(b'\n');
            out
        }
        Err(_) => json,
    }
}

/// A whole response with `content_type`, its coding announced and `Vary: Accept-Encoding`.
pub(crate) fn whole(
    status: StatusCode,
    content_type: &'static str,
    body: Encoded,
) -> Response<Body> {
    let mut response = Response::new(full(body.bytes));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(VARY, HeaderValue::from_static("Accept-Encoding"));
    if let Some(token) = body.coding.token() {
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static(token));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pretty_keeps_order_and_values() {
        let compact =
            br#"{"b":{"z":[1,"x\"y",true,null],"a":{}},"a":"1690000001264036759","e":[]}"#;
        let expected = r#"{
  "b": {
    "z": [
      1,
      "x\"y",
      true,
      null
    ],
    "a": {}
  },
  "a": "1690000001264036759",
  "e": []
}
"#;
        assert_eq!(
            String::from_utf8(pretty(compact.to_vec())).unwrap(),
            expected
        );
        assert_eq!(pretty(b"{oops".to_vec()), b"{oops");
    }

    #[test]
    fn small_bodies_are_not_compressed() {
        let style = Style {
            coding: Coding::Gzip,
            pretty: false,
        };
        let small = style.compress(vec![b'a'; MIN_COMPRESSED_BYTES - 1]);
        assert_eq!(small.coding, Coding::Identity);
        let large = style.compress(vec![b'a'; MIN_COMPRESSED_BYTES]);
        assert_eq!(large.coding, Coding::Gzip);
        assert!(large.bytes.len() < 100);
    }
}
