//! The committed PostgreSQL fixtures (`tests/fixtures/`, see its README): plain-SQL dumps of
//! databases that released versions of this program wrote, loaded into a test database of
//! their own and opened by today's code as `server migrate`, `server ingest` and `serve` open
//! them. Migrations and refusals are tested on them, not on schemas rebuilt from today's
//! migration list.

use super::partitions::{block_partitions, partitions};
use super::{CREATED_BY, TestDatabase, refused_by_every_opener};
use crate::schema::MIGRATIONS;
use crate::segments::{LEDGER, ORACLE, Table};
use crate::{PgConfig, PgStore};
use storage::Error;
use storage::suite::damage;
use storage::suite::golden::{check_answers, fixture};

/// A new test database holding the dump `name`, or `None` when the test skips.
fn load(test: &str, name: &str) -> Option<TestDatabase> {
    let db = TestDatabase::create(test)?;
    // pg_dump 15.14 and later bracket a dump with `\restrict KEY` and `\unrestrict KEY`,
    // meta-commands that psql alone knows; the rest is plain SQL (the data as INSERTs, see the
    // README: COPY … FROM stdin cannot be sent as a query string).
    let sql: String = std::fs::read_to_string(fixture(name))
        .unwrap()
        .lines()
        .filter(|line| !line.starts_with("\\restrict ") && !line.starts_with("\\unrestrict "))
        .flat_map(|line| [line, "\n"])
        .collect();
    db.client().batch_execute(&sql).unwrap();
    Some(db)
}

/// Everything a refusal must leave as it was: every column and index of the schema, then every
/// table's rows as text, in order.
fn contents(db: &TestDatabase) -> Vec<String> {
    let mut client = db.client();
    let mut contents: Vec<String> = client
        .query(
            "SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable \
             FROM information_schema.columns WHERE table_schema = 'public' \
             UNION ALL SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    let tables: Vec<String> = client
        .query(
            "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public' ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    for table in tables {
        contents.push(rows(&mut client, &table));
    }
    contents
}

/// The rows of `table` as text, in order, after its name.
fn rows(client: &mut postgres::Client, table: &str) -> String {
    client
        .query_one(
            &format!(
                "SELECT '{table}: ' || coalesce(string_agg(t::text, ' ' ORDER BY t::text), '') \
                 FROM public.{table} t"
            ),
            &[],
        )
        .unwrap()
        .get(0)
}

/// The fixture `name`, of schema version `schema` and row format `format`, is refused by
/// `server migrate`, the writer and a serving store with the advice to re-ingest, and left as
/// it was.
fn refused_and_left_as_it_is(test: &str, name: &str, schema: u32, format: u32) {
    let Some(db) = load(test, name) else {
        return;
    };
    let before = contents(&db);
    let recorded = format!(
        "schema_info: (created_by,{CREATED_BY}) (row_format,{format}) (schema_version,{schema})"
    );
    assert!(before.contains(&recorded), "{name}: {before:?}");
    refused_by_every_opener(db.url(), &format!("rows in format {format}"));
    refused_by_every_opener(db.url(), "re-ingest");
    assert!(contents(&db) == before, "{name} was changed");
}

/// The fixture `name`, migrated as `server migrate` does, answers as written in the answers file
/// `answers`: the same file as SQLite's fixture of the same stream and format, so that both
/// backends answer byte for byte alike.
fn answers_as_it_did(test: &str, name: &str, answers: &str) {
    let Some(db) = load(test, name) else {
        return;
    };
    PgStore::migrate(db.url()).unwrap();
    check_migrated(&db, answers);
}

/// The migrated database `db` answers as written in the answers file `answers`.
fn check_migrated(db: &TestDatabase, answers: &str) {
    let store = PgStore::open(db.url(), PgConfig::default()).unwrap();
    check_answers(&store, &mut PgStore::writer(db.url()).unwrap(), answers);
}

#[test]
fn a_database_of_schema_5_in_row_format_3_is_refused_and_left_as_it_is() {
    refused_and_left_as_it_is(
        "a_database_of_schema_5_in_row_format_3",
        "schema5-format3.pg.sql",
        5,
        3,
    );
}

/// The fixture `name`, of the upgradable row format `format`, is refused by the writer (`server
/// ingest`) and a serving store, naming `server migrate`, and left as it was; the loaded
/// database is returned for the upgrade.
fn refused_until_migrated(test: &str, name: &str, format: u32) -> Option<TestDatabase> {
    let db = load(test, name)?;
    let before = contents(&db);
    for refused in [
        PgStore::writer(db.url()).map(drop),
        PgStore::open(db.url(), PgConfig::default()).map(drop),
    ] {
        match refused {
            Err(Error::Incompatible(why)) => {
                let message = why.to_string();
                assert!(
                    message.contains(&format!("rows in format {format}"))
                        && message.contains("run `server migrate --db URL`"),
                    "{message}"
                )
            }
            other => panic!("expected Error::Incompatible, got {other:?}"),
        }
    }
    assert!(contents(&db) == before, "the fixture was changed");
    Some(db)
}

/// `server migrate` takes the fixture loaded in `db` from schema `schema` to this program's,
/// and then it answers `format4.answers` and a scrub finds nothing damaged.
#[track_caller]
fn upgraded_from(db: &TestDatabase, schema: u32) {
    let migrated = PgStore::migrate(db.url()).unwrap();
    assert_eq!(
        (migrated.from, migrated.to),
        (schema, MIGRATIONS.len() as u32)
    );
    check_migrated(db, "format4.answers");
    damage::scrubs_clean(&PgStore::open(db.url(), PgConfig::default()).unwrap());
}

/// Row format 4 is format 6 without checksums: refused until `server migrate` upgrades it, then
/// it answers as it did.
#[test]
fn a_database_of_schema_6_in_row_format_4_is_refused_until_migrated_then_answers_as_it_did() {
    let test = "a_database_of_schema_6_in_row_format_4";
    let Some(db) = refused_until_migrated(test, "schema6-format4.pg.sql", 4) else {
        return;
    };
    upgraded_from(&db, 6);
}

/// Row format 5 is format 6 with CRC32C checksums: refused until `server migrate` replaces them
/// (and partitions the tables, migration 8), then it answers as it did.
#[test]
fn a_database_of_schema_7_in_row_format_5_is_refused_until_migrated_then_answers_as_it_did() {
    let test = "a_database_of_schema_7_in_row_format_5";
    let Some(db) = refused_until_migrated(test, "schema7-format5.pg.sql", 5) else {
        return;
    };
    upgraded_from(&db, 7);
}

/// A partitioned database of row format 5 (16 partitions, the default): the same.
#[test]
fn a_database_of_schema_8_in_row_format_5_is_refused_until_migrated_then_answers_as_it_did() {
    let test = "a_database_of_schema_8_in_row_format_5";
    let Some(db) = refused_until_migrated(test, "schema8-format5.pg.sql", 5) else {
        return;
    };
    assert_eq!(partitions(&db), [16, 16]);
    upgraded_from(&db, 8);
}

/// A blob of format 5 damaged before the upgrade (its CRC32C no longer matches) is never vouched
/// for by a new checksum: after `migrate` the export that reads it still fails, and the scrub
/// names it and nothing else.
#[test]
fn damage_in_row_format_5_is_still_found_after_the_upgrade() {
    let Some(db) = load("damage_in_row_format_5", "schema8-format5.pg.sql") else {
        return;
    };
    let mut client = db.client();
    let row = client
        .query_one(
            "SELECT p.hex, s.last_time, s.csv FROM ledger_segments s \
             JOIN parties p ON p.id = s.party ORDER BY p.hex, s.last_time LIMIT 1",
            &[],
        )
        .unwrap();
    let (party, last_time, mut csv): (Vec<u8>, i64, Vec<u8>) = (row.get(0), row.get(1), row.get(2));
    let at = csv.len() - 1;
    csv[at] ^= 0x01;
    let changed = client
        .execute(
            "UPDATE ledger_segments SET csv = $1 \
             WHERE party = (SELECT id FROM parties WHERE hex = $2) AND last_time = $3",
            &[&csv, &party, &last_time],
        )
        .unwrap();
    assert_eq!(changed, 1);
    PgStore::migrate(db.url()).unwrap();
    let store = PgStore::open(db.url(), PgConfig::default()).unwrap();
    damage::found_after_upgrade(&store, &party);
}

/// Row format 6, as this version writes it (partitioned, 16 partitions).
#[test]
fn a_database_of_schema_9_in_row_format_6_answers_as_it_did() {
    let test = "a_database_of_schema_9_in_row_format_6";
    let Some(db) = load(test, "schema9-format6.pg.sql") else {
        return;
    };
    assert_eq!(partitions(&db), [16, 16]);
    drop(db);
    answers_as_it_did(test, "schema9-format6.pg.sql", "format4.answers");
}

/// The rows of a table of segments as text, in order, each packed blob's checksum (its bytes 5
/// to 8) zeroed: what an upgrade that replaces the checksums keeps.
fn segments_without_sums(client: &mut postgres::Client, table: &Table) -> String {
    let (name, lines) = (table.name, table.lines);
    let zeroed = |column: &str| {
        format!("to_jsonb(overlay({column} placing '\\x00000000'::bytea from 5 for 4))")
    };
    client
        .query_one(
            &format!(
                "SELECT '{name}: ' || coalesce(string_agg(r, ' ' ORDER BY r), '') FROM ( \
                 SELECT jsonb_set(jsonb_set(to_jsonb(s), '{{{lines}}}', {}), '{{keys}}', {})::text \
                 AS r FROM {name} s) t",
                zeroed(lines),
                zeroed("keys"),
            ),
            &[],
        )
        .unwrap()
        .get(0)
}

/// Migration 8 moves every segment of a database of schema 7 into the partitions asked for,
/// each stored row as it was but for the checksums migration 9 replaces, and the database
/// answers as it did.
#[test]
fn a_database_of_schema_7_is_partitioned_as_asked_keeping_every_segment() {
    let Some(db) = load(
        "a_database_of_schema_7_partitioned",
        "schema7-format5.pg.sql",
    ) else {
        return;
    };
    let segments = |db: &TestDatabase| {
        let mut client = db.client();
        [&LEDGER, &ORACLE].map(|table| segments_without_sums(&mut client, table))
    };
    let before = segments(&db);
    assert!(before.iter().all(|rows| rows.len() > 1000), "{before:?}");
    let blocks_before = blocks(&db);
    let migrated = PgStore::migrate_with(db.url(), Some(3)).unwrap();
    assert_eq!((migrated.from, migrated.to), (7, MIGRATIONS.len() as u32));
    assert_eq!(partitions(&db), [3, 3]);
    assert!(segments(&db) == before, "a segment changed");
    // Migration 10 moved every block into the range partitions of its heights.
    assert!(blocks(&db) == blocks_before, "a block changed");
    assert_eq!(
        block_partitions(&db),
        ["blocks_from_0"],
        "the fixture's heights are all under the first partition's end"
    );
    check_migrated(&db, "format4.answers");
}

/// Every stored block as text, in key order.
fn blocks(db: &TestDatabase) -> String {
    db.client()
        .query_one(
            "SELECT count(*)::text || ': ' || string_agg(to_jsonb(b)::text, ' ' \
             ORDER BY height, seq_base) FROM blocks b",
            &[],
        )
        .unwrap()
        .get(0)
}
