//! Tests of the generator: the stream is parsed back with `serde_json` and replayed.
//!
//! The default config's output is generated and analysed once ([`DEFAULT`]) and the tests
//! assert on different parts of the analysis, which keeps the suite fast in debug builds.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use serde_json::Value;

use super::*;

/// Everything the tests want to know about one stream, gathered in a single pass.
#[derive(Debug, Default)]
struct Analysis {
    counted: GenerateSummary,
    /// Malformed lines, envelopes, ids or accounts.
    format_problems: Vec<String>,
    /// Emitted balances that differ from the replay, or overdrawn accounts.
    balance_problems: Vec<String>,
    /// Block times not strictly increasing, or event times not the block's.
    time_problems: Vec<String>,
    big_amounts: u64,
    same_party_entries: u64,
    network_to_network_entries: u64,
    uppercase_owners: u64,
    numeric_fields: u64,
    split_movements: u64,
    account_events: u64,
    oracle_errors: u64,
    oracle_without_spec: u64,
    oracle_tricky_values: u64,
    whale_entries: u64,
}

static DEFAULT: LazyLock<(GenerateSummary, Analysis)> =
    LazyLock::new(|| run(&GenerateConfig::default()));

fn output(config: &GenerateConfig) -> (GenerateSummary, Vec<u8>) {
    let mut bytes = Vec::new();
    let summary = generate(config, &mut bytes).expect("writing to a Vec cannot fail");
    (summary, bytes)
}

fn run(config: &GenerateConfig) -> (GenerateSummary, Analysis) {
    let (summary, bytes) = output(config);
    (summary, analyse(config, &bytes))
}

fn small(seed: u64) -> GenerateConfig {
    GenerateConfig {
        seed,
        blocks: 300,
        ..GenerateConfig::default()
    }
}

fn is_hex(text: &str, len: usize, upper: bool) -> bool {
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

type AccountKey = (String, Option<String>, String, Option<String>);

struct Context {
    assets: HashSet<String>,
    markets: HashSet<String>,
    specs: HashSet<String>,
    whale: String,
    balances: HashMap<AccountKey, u128>,
    /// Height, time, hash and last sequence number of the open block.
    block: Option<(u64, i64, String, u64)>,
    last_time: Option<i64>,
}

fn analyse(config: &GenerateConfig, bytes: &[u8]) -> Analysis {
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
    let ids = |f: fn(&GenerateConfig, u32) -> String, n| (0..n).map(|i| f(config, i)).collect();
    let mut cx = Context {
        assets: ids(asset_id, config.assets),
        markets: ids(market_id, config.markets),
        specs: ids(spec_id, config.specs),
        whale: party_id(config, 0),
        balances: HashMap::new(),
        block: None,
        last_time: None,
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
    if cx.block.is_some() {
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
    if !is_hex(&hash, 64, true) || event["version"] != 1 || event["chainId"] != CHAIN_ID {
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
        if seq != 1 || cx.block.is_some() || body["hash"] != hash.as_str() {
            found
                .format_problems
                .push(format!("misplaced or bad BEGIN_BLOCK {id}"));
        }
        if uint(&body["height"], &mut found.numeric_fields) != Some(height.into()) {
            found.format_problems.push(format!("bad height in {id}"));
        }
        if cx.last_time.is_some_and(|last| last >= time) {
            found
                .time_problems
                .push(format!("time not increasing at {id}"));
        }
        cx.last_time = Some(time);
        cx.block = Some((height, time, hash, 1));
        return;
    }
    let Some((open_height, time, open_hash, last_seq)) = cx.block.as_mut() else {
        return problem(format!("{id} outside a block"));
    };
    let time = *time;
    if *open_height != height || *open_hash != hash || *last_seq + 1 != seq {
        problem(format!("{id} out of sequence"));
    }
    *last_seq = seq;
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
            cx.block = None;
            found.counted.blocks += 1;
        }
        "BUS_EVENT_TYPE_ACCOUNT" => found.account_events += 1,
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
        other => problem(format!("unexpected type {other:?} in {id}")),
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
        let owner_ok = owner.as_deref().is_some_and(|o| is_hex(o, 64, false)) == wants_owner;
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
    found.big_amounts += u64::from(amount > u128::from(u64::MAX));
    found.same_party_entries += u64::from(from.1.is_some() && from.1 == to.1);
    let network = |key: &AccountKey| key.1.is_none() && !external(key);
    found.network_to_network_entries += u64::from(network(&from) && network(&to));
    let whale = Some(cx.whale.as_str());
    found.whale_entries += u64::from(from.1.as_deref() == whale || to.1.as_deref() == whale);
}

#[test]
fn same_config_gives_identical_bytes() {
    assert_eq!(output(&small(7)), output(&small(7)));
}

#[test]
fn different_seed_gives_different_bytes() {
    assert_ne!(output(&small(7)).1, output(&small(8)).1);
    assert_ne!(party_id(&small(7), 0), party_id(&small(8), 0));
}

#[test]
fn every_line_is_a_well_formed_event() {
    let (_, found) = &*DEFAULT;
    assert_eq!(found.format_problems, Vec::<String>::new());
}

#[test]
fn emitted_balances_match_a_replay() {
    let (_, found) = &*DEFAULT;
    assert_eq!(found.balance_problems, Vec::<String>::new());
}

#[test]
fn block_times_strictly_increase() {
    let (_, found) = &*DEFAULT;
    assert_eq!(found.time_problems, Vec::<String>::new());
}

#[test]
fn summary_matches_parsed_counts() {
    let (summary, found) = &*DEFAULT;
    let config = GenerateConfig::default();
    assert_eq!(summary.blocks, config.blocks);
    assert_eq!(
        summary.ledger_entries,
        config.blocks * u64::from(config.entries_per_block)
    );
    assert_eq!(
        summary.oracle_data,
        config.blocks * u64::from(config.oracle_data_per_block)
    );
    assert_eq!(&found.counted, summary);
}

#[test]
fn default_config_has_every_edge_case() {
    let (_, found) = &*DEFAULT;
    let counts = [
        ("amounts above u64", found.big_amounts),
        ("same-party entries", found.same_party_entries),
        (
            "network to network entries",
            found.network_to_network_entries,
        ),
        ("uppercase owners", found.uppercase_owners),
        ("integers as JSON numbers", found.numeric_fields),
        ("movements split in two", found.split_movements),
        ("ACCOUNT events", found.account_events),
        ("oracle data with an error", found.oracle_errors),
        ("oracle data without a spec", found.oracle_without_spec),
        ("values needing unescaping", found.oracle_tricky_values),
    ];
    let missing: Vec<_> = counts.iter().filter(|(_, count)| *count == 0).collect();
    assert!(missing.is_empty(), "missing: {missing:?}");
}

#[test]
fn whale_share_sets_party_zero_involvement() {
    let config = GenerateConfig {
        whale_share: 0.5,
        ..small(3)
    };
    let (_, found) = run(&config);
    assert_eq!(found.balance_problems, Vec::<String>::new());
    let share = found.whale_entries as f64 / found.counted.ledger_entries as f64;
    assert!(
        (0.45..0.55).contains(&share),
        "party 0 in {share} of entries"
    );
}

#[test]
fn ids_are_distinct_and_well_formed() {
    let config = &GenerateConfig::default();
    let kinds: [(fn(&GenerateConfig, u32) -> String, u32); 4] = [
        (party_id, config.parties),
        (asset_id, config.assets),
        (market_id, config.markets),
        (spec_id, config.specs),
    ];
    let all: Vec<String> = kinds
        .iter()
        .flat_map(|&(id, count)| (0..count).map(move |index| id(config, index)))
        .collect();
    assert!(all.iter().all(|id| is_hex(id, 64, false)), "{all:?}");
    assert_eq!(all.iter().collect::<HashSet<_>>().len(), all.len());
}

#[test]
fn invalid_configs_are_rejected_before_writing() {
    let cases = [
        GenerateConfig {
            parties: 1,
            ..small(1)
        },
        GenerateConfig {
            assets: 0,
            ..small(1)
        },
        GenerateConfig {
            markets: 0,
            ..small(1)
        },
        GenerateConfig {
            whale_share: 1.5,
            ..small(1)
        },
        GenerateConfig {
            whale_share: f64::NAN,
            ..small(1)
        },
        GenerateConfig {
            start_height: u64::MAX,
            ..small(1)
        },
        GenerateConfig {
            start_time_nanos: i64::MAX - 1,
            ..small(1)
        },
    ];
    for config in cases {
        let mut bytes = Vec::new();
        let err = generate(&config, &mut bytes).expect_err("config must be rejected");
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{config:?}");
        assert!(bytes.is_empty());
    }
}

#[test]
fn edge_sizes_still_produce_consistent_streams() {
    let cases = [
        GenerateConfig {
            parties: 2,
            assets: 1,
            markets: 1,
            specs: 0,
            blocks: 50,
            ..small(5)
        },
        GenerateConfig {
            parties: 2,
            whale_share: 1.0,
            blocks: 50,
            ..small(5)
        },
        GenerateConfig {
            entries_per_block: 0,
            oracle_data_per_block: 0,
            blocks: 5,
            ..small(5)
        },
        GenerateConfig {
            blocks: 0,
            ..small(5)
        },
    ];
    for config in cases {
        let (summary, found) = run(&config);
        assert_eq!(found.format_problems, Vec::<String>::new(), "{config:?}");
        assert_eq!(found.balance_problems, Vec::<String>::new(), "{config:?}");
        assert_eq!(summary.blocks, config.blocks);
    }
}

/// Records the largest single write, to show output is streamed in bounded chunks.
struct ChunkWriter {
    largest: usize,
    total: usize,
}

impl Write for ChunkWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.largest = self.largest.max(bytes.len());
        self.total += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn output_is_streamed_in_bounded_chunks() {
    let mut writer = ChunkWriter {
        largest: 0,
        total: 0,
    };
    generate(&small(9), &mut writer).expect("writer never fails");
    assert!(writer.total > 4 * FLUSH_AT);
    assert!(writer.largest < FLUSH_AT + 16 * 1024, "{}", writer.largest);
}
