//! An independent model of what the API must answer for an event stream.
//!
//! It reads the NDJSON stream with `serde_json::Value` only, on purpose: sharing the parsing of
//! `ledger-core`, `oracle-core` or `ingest` would let one misreading of the event format pass
//! both the code and its tests. The rules are the ones of the issues, written out plainly:
//! - the current vega time is set by TIME_UPDATE (`timeUpdate.timestamp`) and BEGIN_BLOCK
//!   (`beginBlock.timestamp`) and stamps every later ledger entry and oracle datum;
//! - a block is its height and its hash (`BusEvent.block`): a core's stream holds two blocks of
//!   its first height (the genesis block and the first real block, sequence restarting at 1),
//!   and both are kept, in stream order; a block seen before (same height and hash) adds
//!   nothing;
//! - ledger entries are the flattened `ledgerMovements.ledgerMovements[].entries[]`, ordered by
//!   (vega time, block in stream order, event seq, index in the flattened list);
//! - oracle data are ordered by (vega time, block in stream order, event seq).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{Map, Value, json};

use crate::support::{Shared, mixed, whale};

/// The CSV header line of the export.
pub const CSV_HEADER: &str = "vega_time,quantity,effect,transfer_type,asset_id,account_from_market_id,account_from_party_id,account_from_account_type,account_from_balance,account_to_market_id,account_to_party_id,account_to_account_type,account_to_balance\n";

/// Everything the model knows of a stream.
#[derive(Debug, Default)]
pub struct Reference {
    /// Ledger entries in export order.
    pub entries: Vec<Entry>,
    /// Oracle data in ascending order.
    pub oracle: Vec<Datum>,
}

/// One ledger entry.
#[derive(Debug)]
pub struct Entry {
    /// (vega time, block number in stream order, seq, index): the export order.
    pub key: (i64, u64, u64, usize),
    /// Amount as decimal text.
    pub quantity: String,
    /// Whether the amount is zero (a debit of zero is printed `0`, not `-0`).
    pub zero: bool,
    /// Full transfer type name.
    pub transfer_type: String,
    /// `fromAccount.assetId`, lowercase.
    pub asset: String,
    /// The paying account.
    pub from: Side,
    /// The receiving account.
    pub to: Side,
}

/// One account of an entry, with its balance after the entry.
#[derive(Debug)]
pub struct Side {
    /// Lowercase market id, empty when the account has none.
    pub market: String,
    /// Lowercase owner; `None` for the network.
    pub owner: Option<String>,
    /// Full account type name (`ACCOUNT_TYPE_…`).
    pub account_type: String,
    /// `fromAccountBalance` / `toAccountBalance`.
    pub balance: u128,
}

/// One oracle datum.
#[derive(Debug)]
pub struct Datum {
    /// (vega time, block number in stream order, seq): the listing order.
    pub key: (i64, u64, u64),
    /// The node as Vega renders it.
    pub node: Value,
    /// Matched spec ids, lowercase.
    pub specs: Vec<String>,
}

/// What an export selects.
#[derive(Clone, Copy, Debug, Default)]
pub struct Filter<'a> {
    /// Lowercase party id.
    pub party: &'a str,
    /// Lowercase asset id.
    pub asset: Option<&'a str>,
    /// Inclusive start, Unix nanoseconds.
    pub start: Option<i64>,
    /// Exclusive end, Unix nanoseconds.
    pub end: Option<i64>,
}

impl Reference {
    /// Reads a whole NDJSON stream.
    pub fn from_ndjson(stream: &[u8]) -> Reference {
        let mut reference = Reference::default();
        let mut vega_time: Option<i64> = None;
        // Every block by (height, hash), numbered in stream order.
        let mut blocks: HashMap<(u64, String), u64> = HashMap::new();
        // The number of the open block; `None` before the first block and while a block seen
        // before is repeated (its events are stored already).
        let mut block: Option<u64> = None;
        for (line_idx, line) in stream.split(|&byte| byte == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let event: Value = serde_json::from_slice(line)
                .unwrap_or_else(|err| panic!("line {}: {err}", line_idx + 1));
            let id = event["id"].as_str().expect("every event has an id");
            let (height, seq) = id.split_once('-').expect("ids are <height>-<seq>");
            let height: u64 = height.parse().expect("numeric height");
            let seq: u64 = seq.parse().expect("numeric seq");
            let event_type = event["type"].as_str().expect("every event has a type");
            if event_type == "BUS_EVENT_TYPE_BEGIN_BLOCK" {
                let hash = event["block"]
                    .as_str()
                    .expect("every event names its block");
                let n_blocks = blocks.len() as u64;
                block = match blocks.entry((height, hash.to_ascii_lowercase())) {
                    std::collections::hash_map::Entry::Occupied(_) => None,
                    std::collections::hash_map::Entry::Vacant(new) => Some(*new.insert(n_blocks)),
                };
            }
            let Some(block) = block else {
                continue;
            };
            match event_type {
                "BUS_EVENT_TYPE_TIME_UPDATE" => {
                    vega_time = Some(int64(&event["timeUpdate"]["timestamp"]));
                }
                "BUS_EVENT_TYPE_BEGIN_BLOCK" => {
                    vega_time = Some(int64(&event["beginBlock"]["timestamp"]));
                }
                "BUS_EVENT_TYPE_LEDGER_MOVEMENTS" => {
                    let movements = event["ledgerMovements"]["ledgerMovements"]
                        .as_array()
                        .expect("ledgerMovements is a list");
                    let entries = movements.iter().flat_map(|movement| {
                        movement["entries"]
                            .as_array()
                            .expect("entries is a list")
                            .iter()
                    });
                    for (index, entry) in entries.enumerate() {
                        let time = vega_time.unwrap_or_else(|| int64(&entry["timestamp"]));
                        reference
                            .entries
                            .push(read_entry(entry, (time, block, seq, index)));
                    }
                }
                "BUS_EVENT_TYPE_ORACLE_DATA" => {
                    let time = vega_time.expect("oracle data come after a time event");
                    let data = &event["oracleData"]["externalData"]["data"];
                    reference.oracle.push(read_datum(data, (time, block, seq)));
                }
                _ => {}
            }
        }
        reference.entries.sort_by_key(|entry| entry.key);
        reference.oracle.sort_by_key(|datum| datum.key);
        reference
    }

    /// Every party owning an account of some entry.
    pub fn parties(&self) -> BTreeSet<String> {
        self.entries
            .iter()
            .flat_map(|entry| [&entry.from.owner, &entry.to.owner])
            .flatten()
            .cloned()
            .collect()
    }

    /// The entries of `party`, in export order.
    pub fn entries_of<'a>(&'a self, party: &'a str) -> impl Iterator<Item = &'a Entry> + 'a {
        self.entries
            .iter()
            .filter(move |entry| entry.touches(party))
    }

    /// The assets of `party`'s entries.
    pub fn assets_of(&self, party: &str) -> BTreeSet<String> {
        self.entries_of(party)
            .map(|entry| entry.asset.clone())
            .collect()
    }

    /// The party with the most rows.
    pub fn largest_party(&self) -> String {
        self.parties()
            .into_iter()
            .max_by_key(|party| self.entries_of(party).count())
            .expect("the stream has parties")
    }

    /// The exact CSV file of an export.
    pub fn csv(&self, filter: Filter<'_>) -> String {
        let mut out = String::from(CSV_HEADER);
        for entry in self.entries_of(filter.party) {
            let time = entry.key.0;
            if filter.asset.is_some_and(|asset| asset != entry.asset)
                || filter.start.is_some_and(|start| time < start)
                || filter.end.is_some_and(|end| time >= end)
            {
                continue;
            }
            out.push_str(&entry.csv_line(filter.party));
        }
        out
    }

    /// Final balance of every (party, asset): the balance after the last entry touching each
    /// of the party's accounts, summed over its accounts in that asset.
    pub fn final_balances(&self) -> BTreeMap<(String, String), u128> {
        // (owner, type, market, asset) → balance after the latest entry.
        let mut accounts: BTreeMap<(String, String, String, String), u128> = BTreeMap::new();
        for entry in &self.entries {
            for side in [&entry.from, &entry.to] {
                if let Some(owner) = &side.owner {
                    let account = (
                        owner.clone(),
                        side.account_type.clone(),
                        side.market.clone(),
                        entry.asset.clone(),
                    );
                    accounts.insert(account, side.balance);
                }
            }
        }
        let mut balances = BTreeMap::new();
        for ((owner, _, _, asset), balance) in accounts {
            *balances.entry((owner, asset)).or_insert(0u128) += balance;
        }
        balances
    }

    /// The oracle data matched to `spec` (all data for `None`), ascending or newest first.
    pub fn oracle_rows(&self, spec: Option<&str>, newest_first: bool) -> Vec<&Datum> {
        let mut rows: Vec<&Datum> = self
            .oracle
            .iter()
            .filter(|datum| spec.is_none_or(|spec| datum.specs.iter().any(|s| s == spec)))
            .collect();
        if newest_first {
            rows.reverse();
        }
        rows
    }

    /// Spec ids by how many data they matched, most first (ties by id).
    pub fn specs_by_frequency(&self) -> Vec<(String, usize)> {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for spec in self.oracle.iter().flat_map(|datum| &datum.specs) {
            *counts.entry(spec).or_default() += 1;
        }
        let mut specs: Vec<(String, usize)> = counts
            .into_iter()
            .map(|(spec, count)| (spec.to_owned(), count))
            .collect();
        specs.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        specs
    }
}

impl Entry {
    /// Whether `party` owns either side.
    pub fn touches(&self, party: &str) -> bool {
        self.from.owner.as_deref() == Some(party) || self.to.owner.as_deref() == Some(party)
    }

    /// The CSV line as `party` sees it.
    pub fn csv_line(&self, party: &str) -> String {
        let from = self.from.owner.as_deref() == Some(party);
        let to = self.to.owner.as_deref() == Some(party);
        let effect = match (from, to) {
            (false, true) => self.quantity.clone(),
            (true, false) if !self.zero => format!("-{}", self.quantity),
            _ => "0".to_owned(),
        };
        format!(
            "{},{},{effect},{},{},{},{},{},{},{},{},{},{}\n",
            format_time(self.key.0),
            self.quantity,
            self.transfer_type,
            self.asset,
            self.from.market,
            self.from.owner.as_deref().unwrap_or("network"),
            short_type(&self.from.account_type),
            self.from.balance,
            self.to.market,
            self.to.owner.as_deref().unwrap_or("network"),
            short_type(&self.to.account_type),
            self.to.balance,
        )
    }
}

/// As Vega's export prints a `timestamptz`: `2023-07-22 04:26:41.123456+00`, the time floored
/// to the microsecond, the fraction's trailing zeros and a bare dot dropped.
pub fn format_time(nanos: i64) -> String {
    let micros = chrono::DateTime::from_timestamp_micros(nanos.div_euclid(1_000))
        .expect("every i64 of nanoseconds is within chrono's range")
        .format("%Y-%m-%d %H:%M:%S%.6f")
        .to_string();
    format!("{}+00", micros.trim_end_matches('0').trim_end_matches('.'))
}

/// The file-name form of a bound: RFC 3339 in whole seconds, `:` replaced by `_`.
pub fn file_time(nanos: i64) -> String {
    chrono::DateTime::from_timestamp_nanos(nanos)
        .format("%Y-%m-%dT%H_%M_%SZ")
        .to_string()
}

fn short_type(account_type: &str) -> &str {
    account_type
        .strip_prefix("ACCOUNT_TYPE_")
        .unwrap_or_else(|| panic!("unexpected account type {account_type:?}"))
}

fn read_entry(entry: &Value, key: (i64, u64, u64, usize)) -> Entry {
    let amount = uint(&entry["amount"]);
    let transfer_type = entry["type"]
        .as_str()
        .expect("the generator names transfer types");
    assert!(
        transfer_type.starts_with("TRANSFER_TYPE_"),
        "{transfer_type}"
    );
    Entry {
        key,
        quantity: amount.to_string(),
        zero: amount == 0,
        transfer_type: transfer_type.to_owned(),
        asset: entry["fromAccount"]["assetId"]
            .as_str()
            .expect("fromAccount.assetId")
            .to_ascii_lowercase(),
        from: read_side(&entry["fromAccount"], &entry["fromAccountBalance"]),
        to: read_side(&entry["toAccount"], &entry["toAccountBalance"]),
    }
}

fn read_side(account: &Value, balance: &Value) -> Side {
    let owner = match account.get("owner").and_then(Value::as_str) {
        None | Some("" | "network" | "*") => None,
        Some(owner) => Some(owner.to_ascii_lowercase()),
    };
    Side {
        market: account
            .get("marketId")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_ascii_lowercase(),
        owner,
        account_type: account["type"]
            .as_str()
            .expect("the generator names account types")
            .to_owned(),
        balance: if balance.is_null() { 0 } else { uint(balance) },
    }
}

fn read_datum(data: &Value, key: (i64, u64, u64)) -> Datum {
    let list = |name: &str| data.get(name).cloned().unwrap_or_else(|| json!([]));
    let specs: Vec<String> = data
        .get("matchedSpecIds")
        .and_then(Value::as_array)
        .map(|specs| {
            specs
                .iter()
                .map(|spec| {
                    spec.as_str()
                        .expect("spec ids are strings")
                        .to_ascii_lowercase()
                })
                .collect()
        })
        .unwrap_or_default();
    let broadcast_at = data.get("broadcastAt").map_or(0, int64);
    let mut node = Map::new();
    node.insert("signers".into(), list("signers"));
    node.insert("data".into(), list("data"));
    node.insert("matchedSpecIds".into(), json!(specs));
    node.insert("broadcastAt".into(), json!(broadcast_at.to_string()));
    node.insert("metaData".into(), list("metaData"));
    if let Some(error) = data.get("error") {
        node.insert("error".into(), error.clone());
    }
    Datum {
        key,
        node: json!({ "externalData": { "data": node } }),
        specs,
    }
}

/// A protobuf-JSON integer: a string or a number.
fn integer_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Number(number) => number.to_string(),
        other => panic!("not an integer: {other}"),
    }
}

fn int64(value: &Value) -> i64 {
    let text = integer_text(value);
    text.parse()
        .unwrap_or_else(|_| panic!("not an int64: {text}"))
}

fn uint(value: &Value) -> u128 {
    let text = integer_text(value);
    text.parse()
        .unwrap_or_else(|_| panic!("not an unsigned integer: {text}"))
}

#[track_caller]
fn check_model(set: &Shared) {
    let config = &set.dataset.config;
    let summary = &set.dataset.summary;
    let reference = &set.dataset.reference;
    assert_eq!(reference.entries.len() as u64, summary.ledger_entries);
    assert_eq!(reference.oracle.len() as u64, summary.oracle_data);
    let known: BTreeSet<String> = (0..config.parties)
        .map(|idx| eventgen::party_id(config, idx))
        .collect();
    let parties = reference.parties();
    assert!(parties.is_subset(&known), "{parties:?}");
    let specs: BTreeSet<String> = (0..config.specs)
        .map(|idx| eventgen::spec_id(config, idx))
        .collect();
    for (spec, _) in reference.specs_by_frequency() {
        assert!(specs.contains(&spec), "{spec}");
    }
    // The generator's balances are a replay of its amounts: the model agrees with itself.
    for ((party, asset), balance) in reference.final_balances() {
        let mut sum: i128 = 0;
        for entry in reference.entries_of(&party).filter(|e| e.asset == asset) {
            let amount: i128 = entry.quantity.parse().expect("fits i128");
            match (
                entry.from.owner.as_deref() == Some(party.as_str()),
                entry.to.owner.as_deref() == Some(party.as_str()),
            ) {
                (true, false) => sum -= amount,
                (false, true) => sum += amount,
                _ => {}
            }
        }
        assert_eq!(sum, balance as i128, "{party} {asset}");
    }
}

#[test]
fn reference_model_agrees_with_the_generator() {
    check_model(mixed());
    check_model(whale());
}

#[test]
fn reference_formats_times_like_vega() {
    for (nanos, expected) in [
        (1_690_000_001_000_000_007, "2023-07-22 04:26:41+00"),
        (1_690_000_001_123_456_789, "2023-07-22 04:26:41.123456+00"),
        (1_690_000_001_120_000_000, "2023-07-22 04:26:41.12+00"),
        (-1, "1969-12-31 23:59:59.999999+00"),
    ] {
        assert_eq!(format_time(nanos), expected);
    }
    assert_eq!(file_time(1_690_000_001_999_999_999), "2023-07-22T04_26_41Z");
}
