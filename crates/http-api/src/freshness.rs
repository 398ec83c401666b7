//! `X-Block-Height` and `X-Block-Timestamp`: how far the store's chain goes, on every API answer.
//!
//! Vega's data node sets both on its answers (the last stored block's height, and its time in
//! Unix nanoseconds, decimal), and the Vega console compares them across nodes to judge which
//! one is fresh. They come from the store's memory (`Health::chain_tip`), never from a read per
//! request, and are taken before the request is served: the answer holds at least the data up
//! to that height.

use hyper::HeaderMap;
use hyper::header::{HeaderName, HeaderValue};
use storage::ChainTip;

/// The last stored block's height.
pub(crate) const BLOCK_HEIGHT: HeaderName = HeaderName::from_static("x-block-height");
/// The last stored block's vega time in Unix nanoseconds.
pub(crate) const BLOCK_TIMESTAMP: HeaderName = HeaderName::from_static("x-block-timestamp");

/// The path prefix of the answers that carry the headers; `/health` and `/metrics` do not.
const API_PREFIX: &str = "/api/v2";

/// Whether the answer to `path` carries the headers.
pub(crate) fn applies_to(path: &str) -> bool {
    path.strip_prefix(API_PREFIX)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Adds the headers of `tip`; the timestamp only when a block had a time.
pub(crate) fn decorate(tip: &ChainTip, headers: &mut HeaderMap) {
    headers.insert(BLOCK_HEIGHT, HeaderValue::from(tip.last_height));
    if let Some(nanos) = tip.last_vega_time {
        headers.insert(BLOCK_TIMESTAMP, HeaderValue::from(nanos));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_api_paths_carry_the_headers() {
        for path in ["/api/v2", "/api/v2/", "/api/v2/oracle/data", "/api/v2/nope"] {
            assert!(applies_to(path), "{path}");
        }
        for path in ["/health", "/metrics", "/", "/api/v20", "/api", "/api/v1/x"] {
            assert!(!applies_to(path), "{path}");
        }
    }
}
