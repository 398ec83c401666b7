//! One pass over a generated stream: parse every line with `serde_json`, check its shape,
//! replay the ledger entries and count the edge cases.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::ids::IdKind;
use crate::{GenerateConfig, GenerateSummary, asset_id, id_string, party_id, spec_id};

/// Everything the tests want to know about one stream, gathered in a single pass.
#[derive(Debug, Default)]
pub(super) struct Analysis {
    pub(super) counted: GenerateSummary,
    /// Malformed lines, envelopes, ids or accounts.
    pub(super) format_problems: Vec<String>,
    /// Emitted balances that differ from the replay, or overdrawn accounts.
    pub(super) balance_problems: Vec<String>,
    /// Block times not strictly increasing, or event times not the block's.
    pub(super) time_problems: Vec<String>,
    pub(super) big_amounts: u64,
    pub(super) same_party_entries: u64,
    pub(super) network_to_network_entries: u64,
    pub(super) uppercase_owners: u64,
    pub(super) numeric_fields: u64,
    pub(super) split_movements: u64,
    pub(super) account_events: u64,
    pub(super) oracle_errors: u64,
    pub(super) oracle_without_spec: u64,
    pub(super) oracle_tricky_values: u64,
    pub(super) whale_entries: u64,
    /// Every block, in stream order.
    pub(super) blocks: Vec<BlockSeen>,
}

/// One block as the stream holds it.
#[derive(Debug, Default)]
pub(super) struct BlockSeen {
    pub(super) height: u64,
    pub(super) hash: String,
    pub(super) time: i64,
    /// The sequence number of each event, in order.
    pub(super) seqs: Vec<u64>,
    /// Each ledger entry's transfer type and receiving account type, in order.
    pub(super) entries: Vec<(String, String)>,
    pub(super) oracle_data: u64,
}

pub(super) fn is_hex(text: &str, len: usize, upper: bool) -> bool {
    text.len() == len
        && text.bytes().all(|b| {
            b.is_ascii_digit()
                || if upper {
                    (b'A'..=b'F').contains(&b)
                } else {
                    (b'a'..=b'f').contains(&b)
                }
        })
}

/// A protobuf-JSON 64-bit integer, counting those written as bare numbers.
fn uint(value: &Value, numeric: &mut u64) -> Option<u128> {
    match value {
        Value::String(text) => text.parse().ok(),
        Value::Number(number) => {
            *numeric += 1;
            number.as_u64().map(u128::from)
        }
        _ => None,
    }
}

fn int(value: &Value, numeric: &mut u64) -> Option<i64> {
    match value {
        Value::String(text) => text.parse().ok(),
        Value::Number(number) => {
            *numeric += 1;
            number.as_i64()
        }
        _ => None,
    }
}

/// The id of market `index`: the library has no public function for it, since nothing
/// outside these tests names a market.
pub(super) fn market_id(config: &GenerateConfig, index: u32) -> String {
    id_string(config, IdKind::Market, index)
}

/// One of the public id functions.
pub(super) type IdFn = fn(&GenerateConfig, u32) -> String;

type AccountKey = (String, Option<String>, String, Option<String>);

struct Context {
    parties: HashSet<String>,
    assets: HashSet<String>,
    markets: HashSet<String>,
    specs: HashSet<String>,
    whale: String,
    chain_id: String,
    balances: HashMap<AccountKey, u128>,
    /// Whether a block is open (the last of `Analysis::blocks`).
    open: bool,
}

pub(super) fn analyse(config: &GenerateConfig, bytes: &[u8]) -> Analysis {
    let mut found = analyse_all(config, bytes);
    // A handful of problems is enough to debug and keeps a failure readable.
    for problems in [
        &mut found.format_problems,
        &mut found.balance_problems,
        &mut found.time_problems,
    ] {
        problems.truncate(10);
    }
    found
}

fn analyse_all(config: &GenerateConfig, bytes: &[u8]) -> Analysis {
    let ids = |f: IdFn, n| (0..n).map(|i| f(config, i)).collect();
    let mut cx = Context {
        parties: ids(party_id, config.parties),
        assets: ids(asset_id, config.assets),
        markets: ids(market_id, config.markets),
        specs: ids(spec_id, config.specs),
        whale: party_id(config, 0),
        chain_id: config.chain_id.to_string(),
        balances: HashMap::new(),
        open: false,
    };
    let mut found = Analysis::default();
    let Some(body) = bytes.strip_suffix(b"\n") else {
        assert!(bytes.is_empty(), "output ends with a newline");
        return found;
    };
    for line in body.split(|&b| b == b'\n') {
        match serde_json::from_slice::<Value>(line) {
            Ok(event) => check_event(&mut cx, &mut found, &event),
            Err(err) => found.format_problems.push(format!("invalid JSON: {err}")),
        }
        found.counted.events += 1;
    }
    if cx.open {
        found.format_problems.push("last block not closed".into());
    }
    found
}

fn check_event(cx: &mut Context, found: &mut Analysis, event: &Value) {
    let mut problem = |text: String| found.format_problems.push(text);
    let id = event["id"].as_str().unwrap_or_default();
    let Some((height, seq)) = id
        .split_once('-')
        .and_then(|(h, s)| Some((h.parse::<u64>().ok()?, s.parse::<u64>().ok()?)))
    else {
        return problem(format!("bad id {id:?}"));
    };
    let hash = event["block"].as_str().unwrap_or_default().to_owned();
    if !is_hex(&hash, 64, true) || event["version"] != 1 || event["chainId"] != *cx.chain_id {
        problem(format!("bad envelope in {id}"));
    }
    let event_type = event["type"].as_str().unwrap_or_default();
    let has_tx = matches!(
        event_type,
        "BUS_EVENT_TYPE_LEDGER_MOVEMENTS" | "BUS_EVENT_TYPE_ORACLE_DATA"
    );
    if has_tx != is_hex(event["txHash"].as_str().unwrap_or_default(), 64, true) {
        problem(format!("txHash presence wrong in {id}"));
    }
    if event_type == "BUS_EVENT_TYPE_BEGIN_BLOCK" {
        let body = &event["beginBlock"];
        let time = int(&body["timestamp"], &mut found.numeric_fields).unwrap_or_default();
        if seq != 1 || cx.open || body["hash"] != hash.as_str() {
            found
                .format_problems
                .push(format!("misplaced or bad BEGIN_BLOCK {id}"));
        }
        if uint(&body["height"], &mut found.numeric_fields) != Some(height.into()) {
            found.format_problems.push(format!("bad height in {id}"));
        }
        check_block_order(found, height, &hash, time, id);
        cx.open = true;
        found.blocks.push(BlockSeen {
            height,
            hash,
            time,
            seqs: vec![seq],
            ..BlockSeen::default()
        });
        return;
    }
    let Some(block) = found.blocks.last_mut().filter(|_| cx.open) else {
        return problem(format!("{id} outside a block"));
    };
    let time = block.time;
    if block.height != height
        || block.hash != hash
        || block.seqs.last().map(|last| last + 1) != Some(seq)
    {
        found.format_problems.push(format!("{id} out of sequence"));
    }
    block.seqs.push(seq);
    if event_type == "BUS_EVENT_TYPE_ORACLE_DATA" {
        block.oracle_data += 1;
    }
    match event_type {
        "BUS_EVENT_TYPE_TIME_UPDATE" => {
            let stamp = int(&event["timeUpdate"]["timestamp"], &mut found.numeric_fields);
            if seq != 2 || stamp != Some(time) {
                found.time_problems.push(format!("bad TIME_UPDATE {id}"));
            }
        }
        "BUS_EVENT_TYPE_END_BLOCK" => {
            if uint(&event["endBlock"]["height"], &mut found.numeric_fields) != Some(height.into())
            {
                found.format_problems.push(format!("bad END_BLOCK {id}"));
            }
            cx.open = false;
            found.counted.blocks += 1;
        }
        "BUS_EVENT_TYPE_ACCOUNT" => {
            found.account_events += 1;
            found.counted.other_events += 1;
        }
        "BUS_EVENT_TYPE_ORACLE_DATA" => check_oracle(cx, found, id, time, event),
        "BUS_EVENT_TYPE_LEDGER_MOVEMENTS" => {
            let movements = event["ledgerMovements"]["ledgerMovements"].as_array();
            let movements = movements.map(Vec::as_slice).unwrap_or_default();
            if movements.len() > 1 {
                found.split_movements += 1;
            }
            let mut n_entries = 0;
            for movement in movements {
                let entries = movement["entries"].as_array().map(Vec::as_slice);
                for entry in entries.unwrap_or_default() {
                    check_entry(cx, found, id, time, entry);
                    n_entries += 1;
                }
            }
            if !(1..=4).contains(&n_entries) {
                found
                    .format_problems
                    .push(format!("{n_entries} entries in {id}"));
            }
        }
        other => found
            .format_problems
            .push(format!("unexpected type {other:?} in {id}")),
    }
}

/// Heights rise by one and times strictly increase, except that the second block of a stream
/// may repeat the first one's height and time with another hash, as a core's genesis block and
/// first block do.
fn check_block_order(found: &mut Analysis, height: u64, hash: &str, time: i64, id: &str) {
    let Some(last) = found.blocks.last() else {
        return;
    };
    let genesis_pair = found.blocks.len() == 1 && last.height == height;
    if genesis_pair {
        if last.hash == hash || last.time != time {
            found.format_problems.push(format!(
                "first-height pair without its own hash or time at {id}"
            ));
        }
        return;
    }
    if last.height + 1 != height {
        found.format_problems.push(format!("height jumps at {id}"));
    }
    if last.time >= time {
        found
            .time_problems
            .push(format!("time not increasing at {id}"));
    }
}

fn check_oracle(cx: &Context, found: &mut Analysis, id: &str, time: i64, event: &Value) {
    found.counted.oracle_data += 1;
    let data = &event["oracleData"]["externalData"]["data"];
    let signers = data["signers"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let signer_ok = |signer: &Value| match (
        signer["pubKey"]["key"].as_str(),
        signer["ethAddress"]["address"].as_str(),
    ) {
        (Some(key), None) => key
            .strip_prefix("0x")
            .is_some_and(|hex| is_hex(hex, 64, true)),
        (None, Some(address)) => address
            .strip_prefix("0x")
            .is_some_and(|hex| is_hex(hex, 40, false)),
        _ => false,
    };
    let properties = data["data"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let specs = data["matchedSpecIds"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let distinct: HashSet<&str> = specs.iter().filter_map(Value::as_str).collect();
    if signers.is_empty()
        || !signers.iter().all(signer_ok)
        || properties.is_empty()
        || specs.len() > 3
        || distinct.len() != specs.len()
        || !distinct.iter().all(|spec| cx.specs.contains(*spec))
    {
        found
            .format_problems
            .push(format!("bad oracle data in {id}"));
    }
    let broadcast_at = int(&data["broadcastAt"], &mut found.numeric_fields);
    let expected = if specs.is_empty() { 0 } else { time };
    if broadcast_at != Some(expected) {
        found
            .time_problems
            .push(format!("broadcastAt {broadcast_at:?} in {id}"));
    }
    found.oracle_without_spec += u64::from(specs.is_empty());
    found.oracle_errors += u64::from(data["error"].as_str().is_some_and(|e| !e.is_empty()));
    let tricky = |text: &str| text.contains(['"', '\\', '\n', 'ü', '€', '🚀', '\u{1}']);
    found.oracle_tricky_values += properties
        .iter()
        .filter(|p| tricky(p["value"].as_str().unwrap_or_default()))
        .count() as u64;
}

fn check_entry(cx: &mut Context, found: &mut Analysis, id: &str, time: i64, entry: &Value) {
    let mut account = |side: &str| -> Option<AccountKey> {
        let details = &entry[side];
        let account_type = details["type"].as_str()?.to_owned();
        let asset = details["assetId"]
            .as_str()
            .filter(|a| cx.assets.contains(*a))?;
        let owner = details["owner"].as_str().map(|owner| {
            found.uppercase_owners += u64::from(owner.bytes().any(|b| b.is_ascii_uppercase()));
            owner.to_ascii_lowercase()
        });
        let market = details["marketId"].as_str().map(str::to_owned);
        let wants_owner = matches!(
            account_type.as_str(),
            "ACCOUNT_TYPE_GENERAL" | "ACCOUNT_TYPE_MARGIN"
        );
        let wants_market = matches!(
            account_type.as_str(),
            "ACCOUNT_TYPE_MARGIN"
                | "ACCOUNT_TYPE_FEES_MAKER"
                | "ACCOUNT_TYPE_SETTLEMENT"
                | "ACCOUNT_TYPE_INSURANCE"
        );
        let owner_ok = owner.as_deref().is_some_and(|o| cx.parties.contains(o)) == wants_owner;
        let market_ok = market.as_deref().is_some_and(|m| cx.markets.contains(m)) == wants_market;
        (owner_ok && market_ok).then(|| (account_type, owner, asset.to_owned(), market))
    };
    let (Some(from), Some(to)) = (account("fromAccount"), account("toAccount")) else {
        return found.format_problems.push(format!("bad account in {id}"));
    };
    let numeric = &mut found.numeric_fields;
    let amount = uint(&entry["amount"], numeric).unwrap_or_default();
    let emitted_from = uint(&entry["fromAccountBalance"], numeric);
    let emitted_to = uint(&entry["toAccountBalance"], numeric);
    let stamp = int(&entry["timestamp"], numeric);
    let transfer_type = entry["type"].as_str().unwrap_or_default();
    let transfer_id_ok = entry
        .get("transferId")
        .is_none_or(|t| is_hex(t.as_str().unwrap_or_default(), 64, false));
    if amount == 0
        || !transfer_type.starts_with("TRANSFER_TYPE_")
        || !transfer_id_ok
        || from.2 != to.2
    {
        found.format_problems.push(format!("bad entry in {id}"));
    }
    if stamp != Some(time) {
        found
            .time_problems
            .push(format!("entry timestamp {stamp:?} in {id}"));
    }

    let external = |key: &AccountKey| key.0 == "ACCOUNT_TYPE_EXTERNAL";
    let from_after = if external(&from) {
        Some(0)
    } else {
        let balance = cx.balances.entry(from.clone()).or_default();
        let after = balance.checked_sub(amount);
        *balance = after.unwrap_or_default();
        after
    };
    let to_after = if external(&to) {
        0
    } else {
        let balance = cx.balances.entry(to.clone()).or_default();
        *balance += amount;
        *balance
    };
    if from_after.is_none() || emitted_from != from_after || emitted_to != Some(to_after) {
        found.balance_problems.push(format!(
            "{id}: emitted {emitted_from:?}/{emitted_to:?}, replayed {from_after:?}/{to_after}"
        ));
    }

    found.counted.ledger_entries += 1;
    if let Some(block) = found.blocks.last_mut() {
        block.entries.push((transfer_type.to_owned(), to.0.clone()));
    }
    found.big_amounts += u64::from(amount > u128::from(u64::MAX));
    found.same_party_entries += u64::from(from.1.is_some() && from.1 == to.1);
    let network = |key: &AccountKey| key.1.is_none() && !external(key);
    found.network_to_network_entries += u64::from(network(&from) && network(&to));
    let whale = Some(cx.whale.as_str());
    found.whale_entries += u64::from(from.1.as_deref() == whale || to.1.as_deref() == whale);
}
