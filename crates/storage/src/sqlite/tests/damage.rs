//! SQLite's stored units damaged in the file, byte by byte, behind the store's back: each read
//! that reaches one fails and names it, the others answer (`suite::damage`).

use rusqlite::Connection;

use super::TempStore;
use crate::suite::damage::{self, Harm, Unit};
use crate::suite::party;

/// `harm` done to `unit` in the file at `path`, the checksums left as they were.
fn damage(path: &std::path::Path, unit: Unit, harm: Harm) {
    let conn = Connection::open(path).unwrap();
    let (table, column, row) = match unit {
        Unit::LedgerLines | Unit::LedgerIndex => {
            let party: i64 = conn
                .query_row(
                    "SELECT id FROM parties WHERE hex = ?1",
                    [&party(1).as_bytes()[..]],
                    |row| row.get(0),
                )
                .unwrap();
            let column = if unit == Unit::LedgerLines {
                "csv"
            } else {
                "keys"
            };
            ("ledger_segments", column, format!("party = {party}"))
        }
        Unit::OracleData => ("oracle_segments", "json", "spec = 0".to_owned()),
        Unit::OracleIndex => ("oracle_segments", "keys", "spec = 0".to_owned()),
    };
    let mut bytes: Vec<u8> = conn
        .query_row(
            &format!("SELECT {column} FROM {table} WHERE {row}"),
            [],
            |row| row.get(0),
        )
        .unwrap();
    harm.apply(&mut bytes, |bytes| bytes.push(b'\n'));
    let changed = conn
        .execute(
            &format!("UPDATE {table} SET {column} = ?1 WHERE {row}"),
            [bytes],
        )
        .unwrap();
    assert_eq!(changed, 1);
}

#[test]
fn a_damaged_unit_fails_the_reads_that_reach_it_and_no_other() {
    for unit in [
        Unit::LedgerLines,
        Unit::LedgerIndex,
        Unit::OracleData,
        Unit::OracleIndex,
    ] {
        for harm in Harm::ALL {
            let temp = TempStore::new();
            damage::fill(&mut temp.store.writer().unwrap());
            damage(temp.store.path(), unit, harm);
            let table = match unit {
                Unit::OracleData | Unit::OracleIndex => "oracle_segments",
                _ => "ledger_segments",
            };
            damage::check(&temp.store, unit, table);
        }
    }
}
