//! `X-Block-Height` and `X-Block-Timestamp`: how far the store's chain goes, on every API answer.
//!
//! Vega's data node sets both on its answers (the last stored block's height, and its time in
//! Unix nanoseconds, decimal), and the Vega console compares them across nodes to judge which
//! one is fresh. They come from the store's memory (`Health::chain_tip`), never from a read per
//! request, and are taken before the request is served: the answer holds at least the data up
//! to that height.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// Whether the last stored block is at most `max_lag` behind `now`: `Err` says why not (no
/// block with a time stored, or how far behind it is), for `/health`'s 503. A block time ahead
/// of the clock counts as no lag.
pub(crate) fn within(
    tip: Option<&ChainTip>,
    max_lag: Duration,
    now: SystemTime,
) -> Result<(), String> {
    let Some((height, nanos)) = tip.and_then(|tip| Some((tip.last_height, tip.last_vega_time?)))
    else {
        return Err("no block with a vega time is stored yet (--max-lag-secs)".to_owned());
    };
    let block = UNIX_EPOCH + Duration::from_nanos(u64::try_from(nanos).unwrap_or(0));
    let lag = now.duration_since(block).unwrap_or(Duration::ZERO);
    if lag <= max_lag {
        return Ok(());
    }
    Err(format!(
        "the last block, {height}, is {} s behind the clock, more than the {} s allowed \
         (--max-lag-secs)",
        lag.as_secs(),
        max_lag.as_secs()
    ))
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

    #[test]
    fn lag_is_the_last_block_time_behind_the_clock() {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_100);
        let tip = |secs: i64| ChainTip {
            first_height: 1,
            last_height: 42,
            last_vega_time: Some(secs * 1_000_000_000),
        };
        let max = Duration::from_secs(30);
        assert_eq!(within(Some(&tip(1_700_000_070)), max, now), Ok(()));
        assert_eq!(within(Some(&tip(1_700_000_200)), max, now), Ok(()));
        let behind = within(Some(&tip(1_700_000_069)), max, now).unwrap_err();
        assert!(
            behind.contains("the last block, 42, is 31 s behind"),
            "{behind}"
        );
        let untimed = ChainTip {
            last_vega_time: None,
            ..tip(0)
        };
        assert!(within(Some(&untimed), max, now).is_err());
        assert!(within(None, max, now).unwrap_err().contains("no block"));
        // A time before 1970 is as far behind as can be.
        assert!(within(Some(&tip(-5)), max, now).is_err());
    }
}
