//! Damaged stored units: every backend finds the damage on the read that reaches the unit,
//! names the unit, and answers every other read as before. Each backend damages its own
//! units (`sqlite/tests/damage.rs`, `postgres/tests/damage.rs`); these functions fill the store
//! and check the reads.

use ledger_core::{ExportFilter, PartyId, TimeRange};
use oracle_core::{PageRequest, PaginationParams};

use super::{Store, export, filter, ledger_row, oracle_row, spec_labels};
use crate::{Damage, Error, IngestBatch, IngestWriter};

/// A stored unit that a test damages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// The lines of party 1's segment.
    LedgerLines,
    /// The index of party 1's segment.
    LedgerIndex,
    /// Datum `a` (matched by spec 1), as the backend stores it under the listing of all data.
    OracleData,
    /// The index of the segment of all data.
    OracleIndex,
}

/// How a test damages a unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Harm {
    /// One bit flipped in the middle of the stored bytes.
    FlipByte,
    /// The stored bytes without their last one.
    Truncate,
    /// The length changed and the bytes kept: SQLite's blob one byte longer, a packed
    /// PostgreSQL blob's stated size one more.
    Length,
}

impl Harm {
    /// Every harm.
    pub const ALL: [Harm; 3] = [Harm::FlipByte, Harm::Truncate, Harm::Length];

    /// Does the harm to `bytes`; [`Harm::Length`] as the backend's `lengthen` does it.
    pub fn apply(self, bytes: &mut Vec<u8>, lengthen: impl FnOnce(&mut Vec<u8>)) {
        match self {
            Harm::FlipByte => {
                let middle = bytes.len() / 2;
                bytes[middle] ^= 0x04;
            }
            Harm::Truncate => {
                bytes.pop();
            }
            Harm::Length => lengthen(bytes),
        }
    }
}

/// Party 1 with lines of assets 1 and 2, party 2 with one; datum `a` matched by spec 1, `b` by
/// spec 2.
pub fn fill(writer: &mut dyn IngestWriter) {
    let batch = IngestBatch {
        ledger_rows: vec![
            ledger_row("one-a", 1, 1, (10, 1, 1, 0)),
            ledger_row("one-b", 1, 2, (11, 1, 2, 0)),
            ledger_row("one-c", 1, 1, (12, 1, 3, 0)),
            ledger_row("two-a", 2, 1, (10, 1, 1, 1)),
        ],
        oracle_rows: vec![
            oracle_row("a", (100, 1, 4), &[1]),
            oracle_row("b", (200, 1, 5), &[2]),
        ],
        ..IngestBatch::default()
    };
    writer.commit(&batch).unwrap();
}

/// The reads after `unit` was damaged: the one that reaches it fails as [`Error::Corrupt`]
/// naming `table` (and the owner, for a segment), the others answer as if nothing happened.
#[track_caller]
pub fn check(store: &impl Store, unit: Unit, table: &str) {
    let whole = filter(1, None, None, None);
    let one_asset = filter(1, Some(2), None, None);
    let all_data = PageRequest::parse(&PaginationParams::default()).unwrap();
    // The damaged segment is the party's first: the export fails before it starts, so that the
    // server can still answer with an error status rather than cut a started answer.
    let mut sink = super::Collect::default();
    let failed = match unit {
        // The whole export sends the lines as they are: checked by their checksum alone.
        Unit::LedgerLines => store.export_ledger(&whole, &mut sink).map(drop),
        // An export of one asset cuts the segment through its index.
        Unit::LedgerIndex => store.export_ledger(&one_asset, &mut sink).map(drop),
        Unit::OracleData | Unit::OracleIndex => store.oracle_page(None, &all_data).map(drop),
    };
    let place = match failed {
        Err(Error::Corrupt(corruption)) => {
            assert!(
                matches!(
                    corruption.damage,
                    Damage::Checksum { .. } | Damage::Packed(_)
                ),
                "{unit:?}: {corruption}"
            );
            corruption.place.expect("the damaged unit is named")
        }
        other => panic!("{unit:?}: expected Error::Corrupt, got {other:?}"),
    };
    assert_eq!(place.table, table, "{place}");
    assert_eq!(
        sink.started, 0,
        "{unit:?}: the export started before its first segment was read"
    );
    if matches!(unit, Unit::LedgerLines | Unit::LedgerIndex) {
        assert!(place.key.starts_with("party "), "{place}");
        if unit == Unit::LedgerIndex {
            // The whole export does not read the index.
            assert_eq!(export(store, &whole).0, ["one-a", "one-b", "one-c"]);
        }
        assert_eq!(spec_labels(store, 1), "a");
    } else {
        assert!(!place.key.is_empty(), "{place}");
        // Spec 2's listing is stored apart from the damaged unit.
        assert_eq!(spec_labels(store, 2), "b");
        assert_eq!(export(store, &whole).0, ["one-a", "one-b", "one-c"]);
    }
    assert_eq!(export(store, &filter(2, None, None, None)).0, ["two-a"]);
    store.check().unwrap();
}

/// A store in which nothing is damaged: a scrub reads at least ten units and finds nothing.
#[track_caller]
pub fn scrubs_clean(store: &impl Store) {
    let scrub = store.scrub(&mut |_| {}).unwrap();
    assert!(scrub.units >= 10 && scrub.findings.is_empty(), "{scrub:?}");
}

/// A store upgraded from a database in which one ledger segment of `party` (its 32 id bytes)
/// was damaged: the party's export still fails as [`Error::Corrupt`] for its checksum, and a
/// scrub names that segment and nothing else.
#[track_caller]
pub fn found_after_upgrade(store: &impl Store, party: &[u8]) {
    let filter = ExportFilter {
        party: PartyId::from_bytes(party.try_into().expect("32 id bytes")),
        asset: None,
        range: TimeRange::new(None, None).unwrap(),
    };
    let mut sink = super::Collect::default();
    match store.export_ledger(&filter, &mut sink) {
        Err(Error::Corrupt(what)) => assert!(what.to_string().contains("checksum"), "{what}"),
        other => panic!("expected Error::Corrupt, got {other:?}"),
    }
    let scrub = store.scrub(&mut |_| {}).unwrap();
    assert_eq!(scrub.findings.len(), 1, "{scrub:?}");
    let place = scrub.findings[0]
        .place
        .as_ref()
        .expect("the damage is placed");
    assert_eq!(place.table, "ledger_segments", "{place}");
}
