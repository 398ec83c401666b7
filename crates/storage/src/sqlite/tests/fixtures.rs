//! The committed SQLite fixtures (`tests/fixtures/`, see its README): files that released
//! versions of this program wrote, opened by today's code on a temporary copy. Migrations and
//! refusals are tested on them, not on schemas rebuilt from today's migration list, so an edited
//! old migration or a changed reading of an old format shows here.

use std::path::{Path, PathBuf};

use tempfile::TempDir;

use super::files;
use crate::sqlite::{SqliteConfig, SqliteStore};
use crate::suite::damage;
use crate::suite::golden::{check_answers, fixture};
use crate::{Error, Health};

/// A copy of the fixture `name` in a temporary directory of its own, and the copy's path.
fn temp_copy(name: &str) -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::copy(fixture(name), &path).unwrap();
    (dir, path)
}

/// Opening the fixture `name`, whose rows are of row format `format`, is refused with the advice
/// to re-ingest, and leaves every file of its directory byte for byte as it was (no WAL left
/// behind either).
#[track_caller]
fn refused_and_left_as_it_is(name: &str, format: u32) {
    let (dir, path) = temp_copy(name);
    let before = files(dir.path());
    match SqliteStore::open(&path, SqliteConfig::default()) {
        Err(Error::Incompatible(why)) => {
            let message = why.to_string();
            assert!(
                message.contains(&format!("rows in format {format}"))
                    && message.contains("re-ingest"),
                "{message}"
            )
        }
        other => panic!("expected Error::Incompatible, got {other:?}"),
    }
    assert!(files(dir.path()) == before, "{name} was changed");
}

/// Opens a copy of the fixture `name` and checks its answers against the answers file
/// `answers`.
#[track_caller]
fn answers_as_it_did(name: &str, answers: &str) {
    let (_dir, path) = temp_copy(name);
    answers_from(&path, answers);
}

/// Opens the database at `path` and checks its answers against the answers file `answers`.
#[track_caller]
fn answers_from(path: &Path, answers: &str) {
    let store = SqliteStore::open(path, SqliteConfig::default()).unwrap();
    store.check().unwrap();
    check_answers(&store, &mut store.writer().unwrap(), answers);
    assert_opened_at(path);
}

/// The file at `path` is at this program's schema version.
#[track_caller]
fn assert_opened_at(path: &Path) {
    let conn = rusqlite::Connection::open(path).unwrap();
    assert_eq!(
        super::pragma::<i64>(&conn, "user_version"),
        super::MIGRATIONS.len() as i64
    );
}

#[test]
fn a_database_of_schema_5_in_row_format_3_is_refused_and_left_as_it_is() {
    refused_and_left_as_it_is("schema5-format3.sqlite", 3);
}

/// Opening a copy of the fixture `name`, whose rows are of the upgradable row format `format`, is
/// refused naming the command that upgrades it, and leaves every file as it was; the copy and its
/// directory are returned for the upgrade.
#[track_caller]
fn refused_until_migrated(name: &str, format: u32) -> (TempDir, PathBuf) {
    let (dir, path) = temp_copy(name);
    let before = files(dir.path());
    match SqliteStore::open(&path, SqliteConfig::default()) {
        Err(Error::Incompatible(why)) => {
            let message = why.to_string();
            assert!(
                message.contains(&format!("rows in format {format}"))
                    && message.contains(&format!("run `server migrate --db {}`", path.display())),
                "{message}"
            )
        }
        other => panic!("expected Error::Incompatible, got {other:?}"),
    }
    assert!(files(dir.path()) == before, "the fixture was changed");
    (dir, path)
}

/// `server migrate` takes the file at `path` from schema `schema` to this program's, and then it
/// answers `format4.answers` and a scrub finds nothing damaged.
#[track_caller]
fn upgraded_from(path: &Path, schema: u32) {
    let migrated = SqliteStore::migrate(path).unwrap();
    assert_eq!(
        (migrated.from, migrated.to),
        (schema, super::MIGRATIONS.len() as u32)
    );
    answers_from(path, "format4.answers");
    damage::scrubs_clean(&SqliteStore::open(path, SqliteConfig::default()).unwrap());
}

/// Row format 4 is format 6 without checksums: every command but `migrate` refuses it untouched,
/// naming the command that upgrades it; once upgraded it answers as it did, and its checksums
/// are verified by every read (`check_answers` reads every party's export and the pages).
#[test]
fn a_database_of_schema_6_in_row_format_4_is_refused_until_migrated_then_answers_as_it_did() {
    let (_dir, path) = refused_until_migrated("schema6-format4.sqlite", 4);
    upgraded_from(&path, 6);
}

/// Row format 5 is format 6 with CRC32C checksums: refused the same way, then upgraded in place
/// (migration 8), every segment and datum verified by its new checksum (`check_answers` reads
/// them all, and so does the scrub).
#[test]
fn a_database_of_schema_7_in_row_format_5_is_refused_until_migrated_then_answers_as_it_did() {
    let (_dir, path) = refused_until_migrated("schema7-format5.sqlite", 5);
    upgraded_from(&path, 7);
}

/// A blob of format 5 damaged before the upgrade (its CRC32C no longer matches) is never vouched
/// for by a new checksum: after `migrate` the export that reads it still fails, and the scrub
/// names it and nothing else.
#[test]
fn damage_in_row_format_5_is_still_found_after_the_upgrade() {
    let (_dir, path) = temp_copy("schema7-format5.sqlite");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let (rowid, party, mut csv): (i64, Vec<u8>, Vec<u8>) = conn
        .query_row(
            "SELECT s.rowid, p.hex, s.csv FROM ledger_segments s JOIN parties p ON p.id = s.party \
             ORDER BY s.rowid LIMIT 1",
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .unwrap();
    let at = csv.len() / 2;
    csv[at] ^= 0x01;
    conn.execute(
        "UPDATE ledger_segments SET csv = ?1 WHERE rowid = ?2",
        rusqlite::params![csv, rowid],
    )
    .unwrap();
    drop(conn);
    SqliteStore::migrate(&path).unwrap();
    let store = SqliteStore::open(&path, SqliteConfig::default()).unwrap();
    damage::found_after_upgrade(&store, &party);
}

/// Row format 6, as this version writes it: the lines of format 4 with XXH3 checksums.
#[test]
fn a_database_of_schema_8_in_row_format_6_answers_as_it_did() {
    answers_as_it_did("schema8-format6.sqlite", "format4.answers");
}

/// Migration 9 moves the oracle data into segments under new checksums, comparing every
/// datum's checksum on the way: a datum damaged before the move is never vouched for. After
/// it, the first page of all data, which holds the datum, fails as corrupt naming the segment
/// of all data, and the scrub names that segment and the segments of the specs the datum
/// matched, nothing else.
#[test]
fn an_oracle_datum_damaged_before_schema_9_is_still_found_after_it() {
    let (_dir, path) = temp_copy("schema8-format6.sqlite");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let (time, block, seq, mut json): (i64, i64, i64, Vec<u8>) = conn
        .query_row(
            "SELECT vega_time, block, seq, json FROM oracle_data \
             ORDER BY vega_time, block, seq LIMIT 1",
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
        )
        .unwrap();
    let matches: i64 = conn
        .query_row(
            "SELECT count(*) FROM oracle_spec_data WHERE vega_time = ?1 AND block = ?2 \
             AND seq = ?3",
            [time, block, seq],
            |row| row.get(0),
        )
        .unwrap();
    let at = json.len() / 2;
    json[at] ^= 0x01;
    conn.execute(
        "UPDATE oracle_data SET json = ?1 WHERE vega_time = ?2 AND block = ?3 AND seq = ?4",
        rusqlite::params![json, time, block, seq],
    )
    .unwrap();
    drop(conn);
    let store = SqliteStore::open(&path, SqliteConfig::default()).unwrap();
    let first = oracle_core::PageRequest::parse(&Default::default()).unwrap();
    match crate::OracleStore::oracle_page(&store, None, &first) {
        Err(Error::Corrupt(what)) => {
            let place = what.place.as_ref().expect("the damage is placed");
            assert_eq!(place.table, "oracle_segments", "{what}");
            assert!(what.to_string().contains("checksum of json"), "{what}");
        }
        other => panic!("expected Error::Corrupt, got {other:?}"),
    }
    let scrub = crate::Store::scrub(&store, &mut |_| {}).unwrap();
    assert_eq!(scrub.findings.len() as i64, 1 + matches, "{scrub:?}");
    let mut all_data = 0;
    for finding in &scrub.findings {
        let place = finding.place.as_ref().expect("the damage is placed");
        assert_eq!(place.table, "oracle_segments", "{place}");
        let affects = &finding.affects;
        if affects.starts_with("the oracle data pages of all data from vega time ") {
            all_data += 1;
        } else {
            // A spec named by its id's 64 hex digits.
            let spec = affects
                .strip_prefix("the oracle data pages of spec ")
                .and_then(|rest| rest.split(' ').next())
                .unwrap_or_default();
            assert!(
                spec.len() == 64 && spec.bytes().all(|b| b.is_ascii_hexdigit()),
                "{affects}"
            );
        }
    }
    assert_eq!(all_data, 1, "{scrub:?}");
}

/// Schema 9, as this version writes it: the oracle data in segments.
#[test]
fn a_database_of_schema_9_in_row_format_6_answers_as_it_did() {
    answers_as_it_did("schema9-format6.sqlite", "format4.answers");
}
