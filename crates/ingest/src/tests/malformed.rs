//! A malformed line stops the ingest with its line number; the complete blocks before it stay,
//! nothing of its block is stored, and the fixed input completes with no duplicates.

use serde_json::{Value, json};
use storage::IngestWriter;

use super::lines::{self, A, B, Body, SPEC, T1, block, datum, entry, ledger, oracle_data, text};
use super::{Snapshot, TempStore, line};
use crate::IngestError;

/// Block 1 (lines 1–6), then block 2 whose fourth event (line 10) is `bad`, then block 3
/// (lines 13–16).
fn stream(bad: &str) -> Vec<String> {
    let mut lines = block(
        1,
        T1,
        vec![
            Body::Ledger(vec![entry(Some(A), Some(B), "1")]),
            Body::Oracle(datum(0, &[SPEC])),
            Body::Account,
        ],
    );
    lines.push(lines::begin_block(2, 1, T1 + 1));
    lines.push(lines::time_update(2, 2, T1 + 1));
    lines.push(ledger(2, 3, &[&[entry(Some(A), Some(B), "2")]]));
    lines.push(bad.to_owned());
    lines.push(oracle_data(2, 5, datum(0, &[SPEC])));
    lines.push(lines::end_block(2, 6));
    lines.extend(block(
        3,
        T1 + 2,
        vec![Body::Ledger(vec![entry(Some(B), Some(A), "3")])],
    ));
    lines
}

const BAD_LINE: u64 = 10;

/// The good event at the bad line's place: an entry from A to B.
fn good_entry() -> Value {
    entry(Some(A), Some(B), "4")
}

fn ledger_line(entry: Value) -> String {
    ledger(2, 4, &[&[entry]])
}

/// `good_entry` with `pointer` (a JSON pointer into the entry) set to `value`.
fn bad_entry(pointer: &str, value: Value) -> String {
    let mut entry = good_entry();
    let (parent, field) = pointer.rsplit_once('/').unwrap();
    entry.pointer_mut(parent).unwrap()[field] = value;
    ledger_line(entry)
}

/// A datum whose first signer is `signer`.
fn bad_signer(signer: Value) -> String {
    let mut datum = datum(0, &[]);
    datum["signers"] = json!([signer]);
    oracle_data(2, 4, datum)
}

/// What the store holds after the bad input (block 1 only) and after the fixed one.
struct Expected {
    block_1: Snapshot,
    fixed: Snapshot,
}

impl Expected {
    fn new() -> Self {
        let good = text(&stream(&ledger_line(good_entry())));
        let block_1 = text(&stream("")[..6]);
        Self {
            block_1: TempStore::with(&block_1).snapshot(&good),
            fixed: TempStore::with(&good).snapshot(&good),
        }
    }
}

#[track_caller]
fn check(expected: &Expected, bad: &str, expected_reason: &str) {
    let good = stream(&ledger_line(good_entry()));
    let (good_text, bad_text) = (text(&good), text(&stream(bad)));

    let temp = TempStore::new();
    match temp.ingest(&bad_text) {
        Err(IngestError::Record { location, cause }) => {
            let (line, reason) = (location.line.unwrap(), cause.to_string());
            assert_eq!(line, BAD_LINE, "{reason}");
            assert!(
                reason.starts_with(expected_reason),
                "reason {reason:?} does not start with {expected_reason:?}"
            );
        }
        other => panic!("expected a line error, got {other:?}"),
    }
    // Block 1 is stored, nothing of block 2 (its entry before the bad line included).
    assert_eq!(temp.snapshot(&good_text), expected.block_1);
    assert_eq!(temp.store.writer().unwrap().blocks(2).unwrap(), []);

    // Fixed, the input completes, and ends as one clean run would.
    let stats = temp.ingest(&good_text).unwrap();
    assert_eq!(stats.skipped_events, 6);
    assert_eq!(stats.events, good.len() as u64 - 6);
    assert_eq!(temp.snapshot(&good_text), expected.fixed);
}

#[test]
fn malformed_line_stops_with_its_number_and_reason() {
    let expected = &Expected::new();
    let two_256 = "115792089237316195423570985008687907853269984665640564039457584007913129639936";
    let ledger_event = |payload: Value| {
        let mut event: Value =
            serde_json::from_str(&lines::event(2, 4, "LEDGER_MOVEMENTS", None)).unwrap();
        event["ledgerMovements"] = payload;
        line(&event)
    };
    let with_id = |id: Value| {
        let mut event: Value = serde_json::from_str(&ledger_line(good_entry())).unwrap();
        event["id"] = id;
        line(&event)
    };
    let without_id = {
        let mut event: Value = serde_json::from_str(&ledger_line(good_entry())).unwrap();
        event.as_object_mut().unwrap().remove("id");
        line(&event)
    };

    check(expected, "{not json", "invalid JSON event: ");
    check(expected, "[]", "invalid JSON event: ");
    check(expected, &without_id, "event has no id");
    check(expected, &with_id(json!(null)), "event has no id");
    check(expected, &with_id(json!(24)), "invalid JSON event: ");
    check(
        expected,
        &with_id(json!("2")),
        r#"invalid event id "2": expected "<block height>-<sequence>""#,
    );
    check(expected, &with_id(json!("2-")), r#"invalid event id "2-""#);
    check(expected, &with_id(json!("-4")), r#"invalid event id "-4""#);
    check(
        expected,
        &with_id(json!("2-4-1")),
        r#"invalid event id "2-4-1""#,
    );
    check(
        expected,
        &with_id(json!("2-+4")),
        r#"invalid event id "2-+4""#,
    );
    check(
        expected,
        &with_id(json!("9223372036854775808-4")),
        r#"invalid event id "9223372036854775808-4""#,
    );
    check(
        expected,
        &ledger_event(json!(null)),
        "BUS_EVENT_TYPE_LEDGER_MOVEMENTS event has no ledgerMovements",
    );
    check(
        expected,
        &bad_entry("/fromAccount/type", json!("ACCOUNT_TYPE_NOPE")),
        r#"ledger entry 0: fromAccount: unknown account type: "ACCOUNT_TYPE_NOPE""#,
    );
    check(
        expected,
        &bad_entry("/type", json!("TRANSFER_TYPE_NOPE")),
        r#"ledger entry 0: type: unknown transfer type: "TRANSFER_TYPE_NOPE""#,
    );
    check(
        expected,
        &bad_entry("/amount", json!("-5")),
        r#"ledger entry 0: amount: invalid amount: "-5""#,
    );
    check(
        expected,
        &bad_entry("/amount", json!("1.5")),
        r#"ledger entry 0: amount: invalid amount: "1.5""#,
    );
    check(
        expected,
        &bad_entry("/amount", json!("")),
        r#"ledger entry 0: amount: invalid amount: """#,
    );
    check(
        expected,
        &bad_entry("/amount", json!(-5)),
        r#"ledger entry 0: amount: invalid amount: "-5""#,
    );
    check(
        expected,
        &bad_entry("/amount", json!(1.5)),
        "invalid JSON event: ",
    );
    check(
        expected,
        &bad_entry("/amount", json!(two_256)),
        &format!(r#"ledger entry 0: amount: invalid amount: "{two_256}""#),
    );
    check(
        expected,
        &bad_entry("/toAccountBalance", json!(two_256)),
        &format!(r#"ledger entry 0: toAccountBalance: invalid amount: "{two_256}""#),
    );
    check(
        expected,
        &bad_entry("/timestamp", json!("soon")),
        "invalid JSON event: ",
    );
    check(
        expected,
        &bad_entry("/fromAccount/owner", json!("abc")),
        r#"ledger entry 0: fromAccount: invalid party id: "abc""#,
    );
    check(
        expected,
        &bad_entry("/toAccount/owner", json!(&B[1..])),
        &format!(
            r#"ledger entry 0: toAccount: invalid party id: "{}""#,
            &B[1..]
        ),
    );
    let not_hex = format!("{}g", &A[1..]);
    check(
        expected,
        &bad_entry("/fromAccount/owner", json!(not_hex)),
        &format!(r#"ledger entry 0: fromAccount: invalid party id: "{not_hex}""#),
    );
    check(
        expected,
        &bad_entry("/fromAccount/assetId", json!("xyz")),
        r#"ledger entry 0: fromAccount: invalid asset id: "xyz""#,
    );
    check(
        expected,
        &bad_entry("/toAccount/marketId", json!("?")),
        r#"ledger entry 0: toAccount: invalid market id: "?""#,
    );
    check(
        expected,
        &bad_signer(json!({})),
        "oracle signer 0 must have exactly one of pubKey and ethAddress",
    );
    check(
        expected,
        &bad_signer(json!({"pubKey": {"key": "0x1"}, "ethAddress": {"address": "0x2"}})),
        "oracle signer 0 must have exactly one of pubKey and ethAddress",
    );
    let mut bad_spec = datum(0, &["not-a-spec"]);
    bad_spec["broadcastAt"] = json!("1");
    check(
        expected,
        &oracle_data(2, 4, bad_spec),
        r#"matchedSpecIds: invalid oracle spec id: "not-a-spec""#,
    );
}

#[test]
fn malformed_line_keeps_every_complete_block_before_it() {
    let lines = stream(&ledger_line(good_entry()));
    let good = text(&lines);
    let fixed = TempStore::with(&good).snapshot(&good);
    // (bad line index, blocks stored before it)
    for (bad_idx, stored_blocks) in [
        (0, 0),
        (5, 0),
        (6, 1),
        (11, 1),
        (12, 2),
        (lines.len() - 1, 2),
    ] {
        let mut bad = lines.clone();
        bad[bad_idx] = "{".to_owned();
        let temp = TempStore::new();
        match temp.ingest(&text(&bad)) {
            Err(IngestError::Record { location, .. }) => {
                assert_eq!(location.line.unwrap(), bad_idx as u64 + 1)
            }
            other => panic!("expected a line error, got {other:?}"),
        }
        let mut writer = temp.store.writer().unwrap();
        for height in 1..=3 {
            let stored = writer.blocks(height).unwrap();
            assert_eq!(
                !stored.is_empty(),
                height <= stored_blocks,
                "bad line {bad_idx}, block {height}"
            );
        }
        temp.ingest(&good).unwrap();
        assert_eq!(temp.snapshot(&good), fixed);
    }
}

#[test]
fn line_numbers_count_blank_lines() {
    let mut lines = stream(&ledger_line(good_entry()));
    lines.insert(2, String::new());
    lines.insert(3, "   ".to_owned());
    lines[BAD_LINE as usize + 1] = "{".to_owned();
    match TempStore::new().ingest(&text(&lines)) {
        Err(IngestError::Record { location, .. }) => {
            assert_eq!(location.line.unwrap(), BAD_LINE + 2)
        }
        other => panic!("expected a line error, got {other:?}"),
    }
}

#[test]
fn line_that_is_not_utf8_is_a_line_error() {
    let lines = stream(&ledger_line(good_entry()));
    let mut input = Vec::new();
    for (idx, line) in lines.iter().enumerate() {
        if idx + 1 == BAD_LINE as usize {
            input.extend_from_slice(b"{\"id\":\"2-4\",\"type\":\"\xff\"}");
        } else {
            input.extend_from_slice(line.as_bytes());
        }
        input.push(b'\n');
    }
    let temp = TempStore::new();
    let result = crate::ingest(
        std::io::Cursor::new(input),
        &mut temp.store.writer().unwrap(),
        &crate::IngestOptions::default(),
        &mut |_| {},
    );
    match result {
        Err(IngestError::Record { location, cause }) => {
            let (line, reason) = (location.line.unwrap(), cause.to_string());
            assert_eq!(line, BAD_LINE);
            assert_eq!(reason, "line is not valid UTF-8");
        }
        other => panic!("expected a line error, got {other:?}"),
    }
    let mut writer = temp.store.writer().unwrap();
    assert!(!writer.blocks(1).unwrap().is_empty());
}

#[test]
fn line_longer_than_the_limit_is_a_line_error() {
    let lines = stream(&ledger_line(good_entry()));
    let longest = lines.iter().map(String::len).max().unwrap();
    let mut long = lines.clone();
    long[BAD_LINE as usize - 1] = format!("{{\"id\":\"2-4\",\"pad\":\"{}\"}}", "x".repeat(longest));
    let options = crate::IngestOptions {
        max_record_bytes: longest + 10,
        ..crate::IngestOptions::default()
    };
    // A small buffer makes every line straddle several fills, the case the limit guards.
    let temp = TempStore::new();
    let result = crate::ingest(
        std::io::BufReader::with_capacity(16, super::owned(&text(&long))),
        &mut temp.store.writer().unwrap(),
        &options,
        &mut |_| {},
    );
    match result {
        Err(IngestError::Record {
            location,
            cause: crate::RecordError::TooLarge { size, max },
        }) => {
            assert_eq!(location.line, Some(BAD_LINE));
            assert_eq!(location.record, BAD_LINE);
            assert_eq!(max, longest + 10);
            assert!(size > max as u64 && size < 2 * max as u64, "{size}");
        }
        other => panic!("expected a line error, got {other:?}"),
    }
    // The limit counts bytes, not lines: the good stream passes under it.
    let temp = TempStore::new();
    crate::ingest(
        std::io::BufReader::with_capacity(16, super::owned(&text(&lines))),
        &mut temp.store.writer().unwrap(),
        &options,
        &mut |_| {},
    )
    .unwrap();
}
