//! PostgreSQL's stored units damaged in the database behind the store's back, byte by byte
//! inside the packed blobs: each read that reaches one fails and names it, the others answer
//! (`suite::damage`).

use super::{PgConfig, PgStore, TestDatabase};
use storage::suite::damage::{self, Harm, Unit};
use storage::suite::party;

/// `harm` done to `unit`'s packed blob: a bit flipped in its middle, its last byte cut, or its
/// stated size (the first four bytes) one more.
fn damage(db: &TestDatabase, unit: Unit, harm: Harm) {
    let mut client = db.client();
    let (table, column, row) = match unit {
        Unit::LedgerLines | Unit::LedgerIndex => {
            let party: i32 = client
                .query_one(
                    "SELECT id FROM parties WHERE hex = $1",
                    &[&&party(1).as_bytes()[..]],
                )
                .unwrap()
                .get(0);
            let column = if unit == Unit::LedgerLines {
                "csv"
            } else {
                "keys"
            };
            ("ledger_segments", column, format!("party = {party}"))
        }
        // The segment of all data: it holds datum `a`.
        Unit::OracleData => ("oracle_segments", "json", "spec = 0".to_owned()),
        Unit::OracleIndex => ("oracle_segments", "keys", "spec = 0".to_owned()),
    };
    let mut bytes: Vec<u8> = client
        .query_one(&format!("SELECT {column} FROM {table} WHERE {row}"), &[])
        .unwrap()
        .get(0);
    harm.apply(&mut bytes, |bytes| {
        let size = u32::from_be_bytes(bytes[..4].try_into().unwrap()) + 1;
        bytes[..4].copy_from_slice(&size.to_be_bytes());
    });
    let changed = client
        .execute(
            &format!("UPDATE {table} SET {column} = $1 WHERE {row}"),
            &[&bytes],
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
            let Some(db) = TestDatabase::create("a_damaged_unit_fails_its_reads") else {
                return;
            };
            damage::fill(&mut PgStore::writer(db.url()).unwrap());
            damage(&db, unit, harm);
            let store = PgStore::open(db.url(), PgConfig::default()).unwrap();
            let table = match unit {
                Unit::OracleData | Unit::OracleIndex => "oracle_segments",
                _ => "ledger_segments",
            };
            damage::check(&store, unit, table);
        }
    }
}
