//! The body of ORACLE_DATA events.

use rand::Rng;

use super::ids::IdTable;
use super::json::{one_percent, push_decimal, push_i64, push_quoted};

/// Price feeds the oracle reports on, as `prices.<symbol>.value`.
const SYMBOLS: [&str; 6] = ["BTC", "ETH", "SOL", "TSLA", "AAPL", "EURUSD"];

/// Properties whose JSON text needs unescaping (quotes, backslashes, control characters,
/// `\u` escapes including a surrogate pair) or holds raw multi-byte UTF-8; written
/// pre-escaped, so the slice is exactly what goes on the wire.
pub(super) const TRICKY_PROPERTIES: [&str; 6] = [
    r#"{"name":"comment","value":"say \"hi\" \\ bye"}"#,
    r#"{"name":"city","value":"Zürich"}"#,
    r#"{"name":"city","value":"Z\u00fcrich"}"#,
    r#"{"name":"price.€","value":"12€ \u20ac"}"#,
    r#"{"name":"note","value":"tab\there\nnext line \u0001"}"#,
    r#"{"name":"emoji","value":"\ud83d\ude80 to the moon"}"#,
];

/// Error texts of failed external data, pre-escaped like [`TRICKY_PROPERTIES`].
const ERRORS: [&str; 4] = [
    r#"unexpected status 502, \"bad gateway\""#,
    "timeout after 5s waiting for ethereum block",
    "invalid signature: expected signer 0x…",
    r#"feed C:\\oracle\\prices not found"#,
];

/// State carried between oracle events: the Ethereum height only moves forward.
pub(super) struct OracleFeed {
    eth_height: u64,
}

impl OracleFeed {
    pub(super) fn new(rng: &mut impl Rng) -> OracleFeed {
        OracleFeed {
            eth_height: rng.random_range(1_000_000..2_000_000),
        }
    }

    /// Appends `"oracleData":{…}` for one datum written at `block_time`.
    pub(super) fn write_body(
        &mut self,
        buf: &mut Vec<u8>,
        rng: &mut impl Rng,
        ids: &IdTable,
        block_time: i64,
    ) {
        buf.extend_from_slice(br#""oracleData":{"externalData":{"data":{"signers":["#);
        let n_signers = if rng.random_ratio(1, 10) { 2 } else { 1 };
        for signer_idx in 0..n_signers {
            if signer_idx > 0 {
                buf.push(b',');
            }
            if rng.random_ratio(11, 20) {
                let key = pick(rng, &ids.signer_keys);
                buf.extend_from_slice(br#"{"pubKey":{"key":"0x"#);
                buf.extend_from_slice(key);
            } else {
                let address = pick(rng, &ids.eth_addresses);
                buf.extend_from_slice(br#"{"ethAddress":{"address":"0x"#);
                buf.extend_from_slice(address);
            }
            buf.extend_from_slice(br#""}}"#);
        }

        buf.extend_from_slice(br#"],"data":[{"name":"prices."#);
        buf.extend_from_slice(pick(rng, &SYMBOLS).as_bytes());
        buf.extend_from_slice(br#".value","value":""#);
        push_decimal(buf, rng.random_range(1_000_000_u64..1_000_000_000));
        buf.extend_from_slice(b"\"}");
        let block_seconds = block_time.div_euclid(1_000_000_000);
        if rng.random_ratio(3, 10) {
            buf.extend_from_slice(br#",{"name":"timestamp","value":"#);
            push_i64(buf, block_seconds, false);
            buf.push(b'}');
        }
        if rng.random_ratio(3, 200) {
            buf.push(b',');
            let tricky = *pick(rng, &TRICKY_PROPERTIES);
            buf.extend_from_slice(tricky.as_bytes());
        }

        buf.extend_from_slice(br#"],"matchedSpecIds":["#);
        let n_matched = match rng.random_range(0..20) {
            0..7 => 0,
            7..15 => 1,
            15..19 => 2,
            _ => 3,
        };
        let n_matched = n_matched.min(ids.specs.len());
        let mut matched = [usize::MAX; 3];
        for slot_idx in 0..n_matched {
            let spec_idx = skewed_spec(rng, ids.specs.len(), &matched[..slot_idx]);
            matched[slot_idx] = spec_idx;
            if slot_idx > 0 {
                buf.push(b',');
            }
            push_quoted(buf, &ids.specs[spec_idx]);
        }
        buf.extend_from_slice(br#"],"broadcastAt":"#);
        // Vega leaves broadcastAt unset (0) when no spec matched the data.
        let broadcast_at = if n_matched == 0 { 0 } else { block_time };
        push_i64(buf, broadcast_at, one_percent(rng.random()));

        if rng.random_ratio(11, 20) {
            self.eth_height += rng.random_range(0..=2);
            buf.extend_from_slice(br#","metaData":[{"name":"eth-block-height","value":""#);
            push_decimal(buf, self.eth_height);
            buf.extend_from_slice(br#""},{"name":"eth-block-time","value":"#);
            push_i64(buf, block_seconds, false);
            buf.extend_from_slice(b"}]");
        }
        if rng.random_ratio(1, 50) {
            buf.extend_from_slice(br#","error":""#);
            buf.extend_from_slice(pick(rng, &ERRORS).as_bytes());
            buf.push(b'"');
        }
        buf.extend_from_slice(b"}}}");
    }
}

/// A spec index not in `taken`, skewed towards low indices (the minimum of three uniform
/// draws) so that a few specs see most of the data, as popular markets' specs do.
fn skewed_spec(rng: &mut impl Rng, n_specs: usize, taken: &[usize]) -> usize {
    let mut spec_idx = (0..3)
        .map(|_| rng.random_range(0..n_specs as u64) as usize)
        .min()
        .unwrap_or(0);
    // Probing upwards on a clash keeps the draw count fixed; `taken` is shorter than
    // `n_specs`, so a free index exists.
    while taken.contains(&spec_idx) {
        spec_idx = (spec_idx + 1) % n_specs;
    }
    spec_idx
}

/// A uniformly chosen element; drawing a `u32` index keeps the stream identical on 32- and
/// 64-bit targets.
fn pick<'a, T>(rng: &mut impl Rng, items: &'a [T]) -> &'a T {
    &items[rng.random_range(0..items.len() as u32) as usize]
}
