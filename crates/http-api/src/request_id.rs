//! The request id: the client's `X-Request-Id` when it is well-formed, one made here otherwise;
//! logged with the request and sent back on its answer, so that a client, a proxy and this
//! log can name the same request.
//!
//! Well-formed: 1 to [`MAX_REQUEST_ID`] bytes of visible ASCII (`!` to `~`), which holds UUIDs,
//! W3C trace ids and what proxies make, and keeps spaces, control bytes and long strings out of
//! the log. A made id is a random per-process prefix and a counter (`5f0c9a1e2b7d4c36-42`):
//! unique across restarts without a random draw per request.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

use hyper::HeaderMap;
use hyper::header::{HeaderName, HeaderValue};

/// The longest `X-Request-Id` kept, in bytes; a longer one is replaced.
pub const MAX_REQUEST_ID: usize = 128;

/// The header that carries the id, both ways.
pub(crate) static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Makes the ids of requests that bring none.
pub(crate) struct RequestIds {
    prefix: u64,
    next: AtomicU64,
}

impl RequestIds {
    pub(crate) fn new() -> Self {
        // The standard library seeds each `RandomState` from the system's randomness: a
        // random number without a dependency for it.
        let prefix = RandomState::new().hash_one(std::process::id());
        Self {
            prefix,
            next: AtomicU64::new(0),
        }
    }

    /// The id of a request with these headers.
    pub(crate) fn of(&self, headers: &HeaderMap) -> HeaderValue {
        match headers.get(&X_REQUEST_ID) {
            Some(given) if well_formed(given.as_bytes()) => given.clone(),
            _ => {
                let n = self.next.fetch_add(1, Ordering::Relaxed);
                HeaderValue::from_str(&format!("{:016x}-{n}", self.prefix))
                    .expect("hex digits, a dash and digits are a valid header value")
            }
        }
    }
}

fn well_formed(id: &[u8]) -> bool {
    (1..=MAX_REQUEST_ID).contains(&id.len()) && id.iter().all(|byte| byte.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_of(ids: &RequestIds, given: Option<&[u8]>) -> String {
        let mut headers = HeaderMap::new();
        if let Some(given) = given {
            headers.insert(&X_REQUEST_ID, HeaderValue::from_bytes(given).unwrap());
        }
        ids.of(&headers).to_str().unwrap().to_owned()
    }

    #[test]
    fn well_formed_ids_are_kept_others_replaced() {
        let ids = RequestIds::new();
        let longest = "x".repeat(MAX_REQUEST_ID);
        for kept in [
            "a",
            "550e8400-e29b-41d4-a716-446655440000",
            "~!#$%&'*+",
            &longest,
        ] {
            assert_eq!(id_of(&ids, Some(kept.as_bytes())), kept);
        }
        let too_long = "x".repeat(MAX_REQUEST_ID + 1);
        let replaced: [&[u8]; 5] = [
            b"",
            b"with space",
            b"tab\there",
            "é".as_bytes(),
            too_long.as_bytes(),
        ];
        for bad in replaced {
            let made = id_of(&ids, Some(bad));
            assert_ne!(made.as_bytes(), bad);
            assert!(well_formed(made.as_bytes()), "{made}");
        }
    }

    #[test]
    fn made_ids_share_a_prefix_and_never_repeat() {
        let ids = RequestIds::new();
        let first = id_of(&ids, None);
        let second = id_of(&ids, None);
        assert_ne!(first, second);
        let (prefix, n) = first.split_once('-').unwrap();
        assert_eq!(prefix.len(), 16);
        assert_eq!(
            second,
            format!("{prefix}-{}", n.parse::<u64>().unwrap() + 1)
        );
        // Another process (here: another maker) draws another prefix.
        assert_ne!(
            id_of(&RequestIds::new(), None).split_once('-').unwrap().0,
            prefix
        );
    }
}
