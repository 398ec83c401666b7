//! Builders of event-bus lines for hand-made streams, in the wire form Vega's tools print.

use serde_json::{Value, json};

use super::line;

pub(crate) const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
pub(crate) const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
pub(crate) const C: &str = "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";
pub(crate) const ASSET: &str = "1111111111111111111111111111111111111111111111111111111111111111";
pub(crate) const MARKET: &str = "2222222222222222222222222222222222222222222222222222222222222222";
pub(crate) const SPEC: &str = "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd";

/// 2023-07-22T04:26:40.123456789Z, the vega time of block 1 in [`block`]-built streams.
pub(crate) const T1: i64 = 1_690_000_000_123_456_789;

/// One event line; `payload` is the type-specific field and its value.
pub(crate) fn event(height: u64, seq: u64, kind: &str, payload: Option<(&str, Value)>) -> String {
    let mut event = json!({
        "id": format!("{height}-{seq}"),
        "block": "ABCDEF",
        "type": format!("BUS_EVENT_TYPE_{kind}"),
        "version": 1,
        "chainId": "test-chain",
    });
    if let Some((field, value)) = payload {
        event[field] = value;
    }
    line(&event)
}

pub(crate) fn begin_block(height: u64, seq: u64, time: i64) -> String {
    let payload = json!({"height": height.to_string(), "timestamp": time.to_string()});
    event(height, seq, "BEGIN_BLOCK", Some(("beginBlock", payload)))
}

pub(crate) fn time_update(height: u64, seq: u64, time: i64) -> String {
    let payload = json!({"timestamp": time.to_string()});
    event(height, seq, "TIME_UPDATE", Some(("timeUpdate", payload)))
}

pub(crate) fn end_block(height: u64, seq: u64) -> String {
    let payload = json!({"height": height.to_string()});
    event(height, seq, "END_BLOCK", Some(("endBlock", payload)))
}

/// A LEDGER_MOVEMENTS event with one movement per element of `movements`.
pub(crate) fn ledger(height: u64, seq: u64, movements: &[&[Value]]) -> String {
    let movements: Vec<Value> = movements
        .iter()
        .map(|entries| json!({"entries": entries, "balances": []}))
        .collect();
    let payload = json!({"ledgerMovements": movements});
    event(
        height,
        seq,
        "LEDGER_MOVEMENTS",
        Some(("ledgerMovements", payload)),
    )
}

pub(crate) fn oracle_data(height: u64, seq: u64, datum: Value) -> String {
    let payload = json!({"externalData": {"data": datum}});
    event(height, seq, "ORACLE_DATA", Some(("oracleData", payload)))
}

/// An event type ingest does not keep.
pub(crate) fn account_event(height: u64, seq: u64) -> String {
    let payload = json!({"id": "x", "owner": A, "balance": "1"});
    event(height, seq, "ACCOUNT", Some(("account", payload)))
}

/// A general account in [`ASSET`]; `None` leaves the owner out.
pub(crate) fn account(owner: Option<&str>) -> Value {
    let mut account = json!({"assetId": ASSET, "type": "ACCOUNT_TYPE_GENERAL"});
    if let Some(owner) = owner {
        account["owner"] = json!(owner);
    }
    account
}

/// A deposit of `amount` between general accounts, balances 100 and 200, timestamp 5.
pub(crate) fn entry(from: Option<&str>, to: Option<&str>, amount: &str) -> Value {
    json!({
        "fromAccount": account(from),
        "toAccount": account(to),
        "amount": amount,
        "type": "TRANSFER_TYPE_DEPOSIT",
        "timestamp": "5",
        "fromAccountBalance": "100",
        "toAccountBalance": "200",
    })
}

/// A datum signed by one key, matching `specs`.
pub(crate) fn datum(broadcast_at: i64, specs: &[&str]) -> Value {
    json!({
        "signers": [{"pubKey": {"key": "0xAB"}}],
        "data": [{"name": "prices.BTC.value", "value": "1"}],
        "matchedSpecIds": specs,
        "broadcastAt": broadcast_at.to_string(),
    })
}

/// What goes between a block's time events and its END_BLOCK.
pub(crate) enum Body {
    Ledger(Vec<Value>),
    Oracle(Value),
    Account,
}

/// A whole block: BEGIN_BLOCK and TIME_UPDATE at `time`, `bodies`, END_BLOCK; sequence numbers
/// from 1.
pub(crate) fn block(height: u64, time: i64, bodies: Vec<Body>) -> Vec<String> {
    let mut lines = vec![begin_block(height, 1, time), time_update(height, 2, time)];
    let mut seq = 2;
    for body in bodies {
        seq += 1;
        lines.push(match body {
            Body::Ledger(entries) => ledger(height, seq, &[&entries]),
            Body::Oracle(datum) => oracle_data(height, seq, datum),
            Body::Account => account_event(height, seq),
        });
    }
    lines.push(end_block(height, seq + 1));
    lines
}

/// A stream of `n` blocks from height 1, one second apart from [`T1`], each with an entry from
/// A to B, one from B to C, a datum matching [`SPEC`], and an ACCOUNT event.
pub(crate) fn blocks(n: u64) -> Vec<String> {
    (1..=n)
        .flat_map(|height| {
            let time = T1 + (height as i64 - 1) * 1_000_000_000;
            let amount = height.to_string();
            block(
                height,
                time,
                vec![
                    Body::Ledger(vec![entry(Some(A), Some(B), &amount)]),
                    Body::Oracle(datum(time, &[SPEC])),
                    Body::Account,
                    Body::Ledger(vec![entry(Some(B), Some(C), &amount)]),
                ],
            )
        })
        .collect()
}

/// Lines as one input text.
pub(crate) fn text(lines: &[String]) -> String {
    let mut text = lines.join("\n");
    text.push('\n');
    text
}
