//! What an event becomes: export rows per owning party, the accepted spellings of the wire
//! form, and the vega time every row and datum is filed under.

use ledger_core::{ExportFilter, PartyId, TimeRange};
use oracle_core::Position;
use serde_json::{Value, json};

use super::lines::{
    A, ASSET, B, Body, C, MARKET, SPEC, T1, begin_block, block, datum, end_block, entry, ledger,
    oracle_data, text, time_update,
};
use storage::LedgerStore;

use super::{Snapshot, TempStore, Text, export, oracle};

/// `T1` as the CSV writes it: as Vega does, to the microsecond.
const T1_TEXT: &str = "2023-07-22 04:26:40.123456+00";

/// The CSV line of a [`entry`]-built deposit of 7, as seen with `effect`.
fn row(effect: &str, from: &str, to: &str) -> String {
    format!(
        "{T1_TEXT},7,{effect},TRANSFER_TYPE_DEPOSIT,{ASSET},,{from},GENERAL,100,,{to},GENERAL,200\n"
    )
}

fn party(hex: &str) -> PartyId {
    hex.parse().unwrap()
}

/// Ingests one block at `T1` whose single ledger event holds `movements`, and compares the
/// exports of A, B and C with `expected` (A's, B's and C's rows).
#[track_caller]
fn check(movements: &[&[Value]], expected: [&str; 3]) {
    let mut lines = vec![begin_block(1, 1, T1), time_update(1, 2, T1)];
    lines.push(ledger(1, 3, movements));
    lines.push(end_block(1, 4));
    let temp = TempStore::new();
    let stats = temp.ingest(&text(&lines)).unwrap();
    let exports = [A, B, C].map(|hex| export(&temp.store, party(hex)));
    assert_eq!(exports, expected.map(str::to_owned));
    let n_rows = expected
        .iter()
        .map(|rows| rows.lines().count())
        .sum::<usize>();
    assert_eq!(stats.ledger_rows, n_rows as u64);
    let n_entries = movements.iter().map(|entries| entries.len()).sum::<usize>();
    assert_eq!(stats.ledger_entries, n_entries as u64);
}

#[test]
fn entry_gives_one_row_per_owning_party() {
    check(
        &[&[entry(Some(A), Some(B), "7")]],
        [&row("-7", A, B), &row("7", A, B), ""],
    );
    check(
        &[&[entry(Some(A), Some(A), "7")]],
        [&row("0", A, A), "", ""],
    );
    check(&[&[entry(None, None, "7")]], ["", "", ""]);
    check(
        &[&[entry(Some(A), None, "7")]],
        [&row("-7", A, "network"), "", ""],
    );
    check(
        &[&[entry(None, Some(B), "7")]],
        ["", &row("7", "network", B), ""],
    );
    // A debit of zero is written 0, not -0.
    let zero = row("0", A, B).replace(",7,0,", ",0,0,");
    check(&[&[entry(Some(A), Some(B), "0")]], [&zero, &zero, ""]);
    // Entries of one event, across movements, keep their order.
    check(
        &[
            &[entry(Some(A), Some(B), "7")],
            &[entry(Some(B), Some(A), "7"), entry(Some(B), Some(C), "7")],
        ],
        [
            &(row("-7", A, B) + &row("7", B, A)),
            &(row("7", A, B) + &row("-7", B, A) + &row("-7", B, C)),
            &row("7", B, C),
        ],
    );
}

/// `pointer` (a JSON pointer into [`entry`]'s value) set to `value`.
fn spelled(mut entry: Value, pointer: &str, value: Value) -> Value {
    match entry.pointer_mut(pointer) {
        Some(slot) => *slot = value,
        None => {
            let (parent, field) = pointer.rsplit_once('/').unwrap();
            entry.pointer_mut(parent).unwrap()[field] = value;
        }
    }
    entry
}

/// `pointer` removed from [`entry`]'s value.
fn without(mut entry: Value, pointer: &str) -> Value {
    let (parent, field) = pointer.rsplit_once('/').unwrap();
    entry
        .pointer_mut(parent)
        .unwrap()
        .as_object_mut()
        .unwrap()
        .remove(field);
    entry
}

/// A canonical entry's rows, to compare other spellings with.
struct Canonical {
    input: String,
    snapshot: Snapshot,
}

impl Canonical {
    fn new(entry: Value) -> Self {
        let input = entry_stream(entry);
        let snapshot = TempStore::with(&input).snapshot(&input);
        assert!(snapshot.ledger_rows() > 0);
        Self { input, snapshot }
    }
}

/// One entry in a block at `T1`.
fn entry_stream(entry: Value) -> String {
    text(&block(1, T1, vec![Body::Ledger(vec![entry])]))
}

/// Stores `variant` and expects the canonical rows for every party.
#[track_caller]
fn check_reads_like(variant: Value, canonical: &Canonical) {
    let variant = entry_stream(variant);
    assert_eq!(
        TempStore::with(&variant).snapshot(&canonical.input),
        canonical.snapshot
    );
}

#[test]
fn wire_spellings_read_alike() {
    let base = || entry(Some(A), Some(B), "7");
    let canonical = &Canonical::new(base());
    // int64 and uint64 as strings or numbers.
    check_reads_like(spelled(base(), "/amount", json!(7)), canonical);
    check_reads_like(spelled(base(), "/timestamp", json!(5)), canonical);
    check_reads_like(
        spelled(base(), "/fromAccountBalance", json!(100)),
        canonical,
    );
    check_reads_like(spelled(base(), "/toAccountBalance", json!(200)), canonical);
    check_reads_like(spelled(base(), "/amount", json!("0007")), canonical);
    // Enums by name or by code, as a string or a number.
    check_reads_like(spelled(base(), "/fromAccount/type", json!("4")), canonical);
    check_reads_like(spelled(base(), "/toAccount/type", json!(4)), canonical);
    check_reads_like(spelled(base(), "/type", json!("19")), canonical);
    check_reads_like(spelled(base(), "/type", json!(19)), canonical);
    // Ids in any case; the export writes lowercase.
    let upper_a = A.to_uppercase();
    check_reads_like(
        spelled(base(), "/fromAccount/owner", json!(upper_a)),
        canonical,
    );
    check_reads_like(
        spelled(base(), "/toAccount/assetId", json!(ASSET.to_uppercase())),
        canonical,
    );
    // No market: absent, "" or "!".
    let market = |entry: Value, id: &str| spelled(entry, "/fromAccount/marketId", json!(id));
    check_reads_like(market(base(), ""), canonical);
    check_reads_like(market(base(), "!"), canonical);
    // Unknown fields are ignored.
    check_reads_like(
        spelled(base(), "/extra", json!({"nested": [1, 2]})),
        canonical,
    );

    let with_market = &Canonical::new(market(base(), MARKET));
    check_reads_like(market(base(), &MARKET.to_uppercase()), with_market);

    // The network owner: absent, "", "network" or "*".
    let network = &Canonical::new(without(base(), "/toAccount/owner"));
    for spelling in ["", "network", "*"] {
        check_reads_like(
            spelled(base(), "/toAccount/owner", json!(spelling)),
            network,
        );
    }
}

#[test]
fn absent_balances_read_as_zero_and_markets_are_written() {
    let mut entry = without(
        without(entry(Some(A), Some(B), "7"), "/fromAccountBalance"),
        "/toAccountBalance",
    );
    entry["fromAccount"]["marketId"] = json!(MARKET);
    entry["transferId"] = json!("ignored-by-the-export");
    let expected = |effect: &str| {
        format!(
            "{T1_TEXT},7,{effect},TRANSFER_TYPE_DEPOSIT,{ASSET},{MARKET},{A},GENERAL,0,,{B},GENERAL,0\n"
        )
    };
    check(&[&[entry]], [&expected("-7"), &expected("7"), ""]);
}

/// The vega-time column of each of `party`'s rows.
fn row_times(temp: &TempStore, party: &str) -> Vec<String> {
    export(&temp.store, self::party(party))
        .lines()
        .map(|line| line.split(',').next().unwrap().to_owned())
        .collect()
}

#[test]
fn rows_and_data_take_the_current_vega_time() {
    // Entry timestamps (5) and broadcast times (77, 78) are ignored once a time event was seen.
    let (t2, t3, t4) = (T1 + 1_000, T1 + 2_000, T1 + 3_000);
    let entry = || vec![entry(Some(A), Some(B), "7")];
    let lines = vec![
        // Before any time event: the entry's own timestamp, the datum's broadcast time.
        ledger(1, 1, &[&entry()]),
        oracle_data(1, 2, datum(66, &[SPEC])),
        begin_block(1, 3, T1),
        ledger(1, 4, &[&entry()]),
        oracle_data(1, 5, datum(77, &[SPEC])),
        time_update(1, 6, t2),
        ledger(1, 7, &[&entry()]),
        oracle_data(1, 8, datum(78, &[])),
        end_block(1, 9),
        // The time carries into the next block until its own time event.
        ledger(2, 1, &[&entry()]),
        begin_block(2, 2, t3),
        ledger(2, 3, &[&entry()]),
        time_update(2, 4, t4),
        oracle_data(2, 5, datum(79, &[SPEC])),
        end_block(2, 6),
    ];
    let input = text(&lines);
    let temp = TempStore::with(&input);
    // The times of 5, T1, t2, t2 and t3 ns: the column changes width as rows are stamped.
    let expected = [
        "1970-01-01 00:00:00+00",
        T1_TEXT,
        "2023-07-22 04:26:40.123457+00",
        "2023-07-22 04:26:40.123457+00",
        "2023-07-22 04:26:40.123458+00",
    ];
    assert_eq!(row_times(&temp, A), expected);
    assert_eq!(row_times(&temp, B), expected);
    let position = |vega_time, block, seq| Position {
        vega_time,
        block,
        seq,
    };
    let positions: Vec<Position> = oracle(&temp.store, None)
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    assert_eq!(
        positions,
        [
            position(66, 1, 2),
            position(T1, 1, 5),
            position(t2, 1, 8),
            position(t4, 2, 5)
        ]
    );
    // The datum's own broadcast time stays in its JSON.
    let nodes: Vec<String> = oracle(&temp.store, None)
        .into_iter()
        .map(|(_, node)| node)
        .collect();
    assert!(nodes[1].contains(r#""broadcastAt":"77""#), "{}", nodes[1]);
}

/// `party`'s rows from `start` (Unix nanoseconds) on.
fn export_from(temp: &TempStore, party: &str, start: i64) -> String {
    let filter = ExportFilter {
        party: self::party(party),
        asset: None,
        range: TimeRange::new(Some(start), None).unwrap(),
    };
    let mut sink = Text::default();
    temp.store.export_ledger(&filter, &mut sink).unwrap();
    sink.0
}

#[test]
fn time_filters_tell_apart_nanoseconds_the_column_does_not_show() {
    // Two blocks a nanosecond apart, within one microsecond: their rows read alike.
    let lines = [(1, T1), (2, T1 + 1)].map(|(height, time)| {
        block(
            height,
            time,
            vec![Body::Ledger(vec![entry(
                Some(A),
                Some(B),
                &height.to_string(),
            )])],
        )
    });
    let temp = TempStore::with(&text(&lines.concat()));
    let all = export(&temp.store, party(A));
    let rows: Vec<&str> = all.lines().collect();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|row| row.starts_with(T1_TEXT)), "{all}");
    // The bound is compared with the stored nanoseconds, not with the text.
    assert_eq!(export_from(&temp, A, T1), all);
    assert_eq!(export_from(&temp, A, T1 + 1), format!("{}\n", rows[1]));
    assert_eq!(export_from(&temp, A, T1 + 2), "");
}

#[test]
fn time_and_oracle_fields_read_alike_as_strings_or_numbers() {
    let numbers = |line: String, pointer: &str| {
        let mut event: Value = serde_json::from_str(&line).unwrap();
        let slot = event.pointer_mut(pointer).unwrap();
        *slot = json!(slot.as_str().unwrap().parse::<i64>().unwrap());
        super::line(&event)
    };
    let canonical = vec![
        begin_block(1, 1, T1),
        time_update(1, 2, T1 + 5),
        oracle_data(1, 3, datum(-12, &[SPEC])),
        ledger(1, 4, &[&[entry(Some(A), Some(B), "7")]]),
        end_block(1, 5),
    ];
    let mut upper_spec = datum(-12, &[&SPEC.to_uppercase()]);
    upper_spec["broadcastAt"] = json!(-12);
    let variant = vec![
        numbers(canonical[0].clone(), "/beginBlock/timestamp"),
        numbers(canonical[1].clone(), "/timeUpdate/timestamp"),
        oracle_data(1, 3, upper_spec),
        canonical[3].clone(),
        canonical[4].clone(),
    ];
    let (canonical, variant) = (text(&canonical), text(&variant));
    let expected = TempStore::with(&canonical).snapshot(&canonical);
    assert_eq!(expected.specs.len(), 1);
    assert_eq!(TempStore::with(&variant).snapshot(&canonical), expected);
}
