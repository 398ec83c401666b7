//! `server check --deep` on an SQLite database damaged behind the server's back: every damaged
//! unit named with what it affects, a non-zero exit, the file left as it was.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Output;

use rusqlite::Connection;

mod common;
use common::{run_ok, server};

/// A database of a generated stream of 30 blocks in `dir`.
fn database(dir: &Path) -> std::path::PathBuf {
    let events = dir.join("events.ndjson");
    run_ok(
        server()
            .args(["generate", "--blocks", "30", "--output"])
            .arg(&events),
    );
    let db = dir.join("db.sqlite");
    run_ok(server().args(["ingest", "--db"]).arg(&db).arg(&events));
    db
}

/// `server check --db DB --deep`.
fn check_deep(db: &Path) -> Output {
    server()
        .args(["check", "--deep", "--db"])
        .arg(db)
        .output()
        .unwrap()
}

/// Flips a bit in the middle of the blob `column` of the row of `table` that `row` selects,
/// its checksum left as it was.
fn flip_a_bit(db: &Path, table: &str, column: &str, row: &str) {
    let conn = Connection::open(db).unwrap();
    let mut bytes: Vec<u8> = conn
        .query_row(
            &format!("SELECT {column} FROM {table} WHERE {row}"),
            [],
            |row| row.get(0),
        )
        .unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x04;
    let changed = conn
        .execute(
            &format!("UPDATE {table} SET {column} = ?1 WHERE {row}"),
            [bytes],
        )
        .unwrap();
    assert_eq!(changed, 1);
    // Into the file itself, so that the check reads it whatever it does with the WAL.
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
}

#[test]
fn check_deep_names_every_damaged_unit_and_what_it_affects() {
    let dir = tempfile::tempdir().unwrap();
    let db = database(dir.path());
    let clean = check_deep(&db);
    let (stdout, stderr) = (
        String::from_utf8(clean.stdout).unwrap(),
        String::from_utf8(clean.stderr).unwrap(),
    );
    assert!(clean.status.success(), "{stderr}");
    assert!(stdout.contains("none damaged"), "{stdout}");
    assert!(stderr.contains("units read"), "no progress: {stderr}");

    let party: String = Connection::open(&db)
        .unwrap()
        .query_row(
            "SELECT lower(hex(p.hex)) FROM ledger_segments s JOIN parties p ON p.id = s.party \
             ORDER BY s.rowid LIMIT 1",
            [],
            |row| row.get(0),
        )
        .unwrap();
    flip_a_bit(
        &db,
        "ledger_segments",
        "csv",
        "rowid = (SELECT min(rowid) FROM ledger_segments)",
    );
    flip_a_bit(
        &db,
        "oracle_segments",
        "json",
        "rowid = (SELECT min(rowid) FROM oracle_segments WHERE spec = 0)",
    );
    let before = std::fs::read(&db).unwrap();
    let damaged = check_deep(&db);
    let stdout = String::from_utf8(damaged.stdout).unwrap();
    let stderr = String::from_utf8(damaged.stderr).unwrap();
    assert!(!damaged.status.success(), "{stdout}");
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|line| line.starts_with("damaged: "))
        .collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(
        lines[0].contains("ledger_segments party ")
            && lines[0].contains("checksum of csv")
            && lines[0].ends_with(&format!("affects the export of party {party}")),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].starts_with("damaged: oracle_segments spec 0 last (")
            && lines[1].contains("checksum of json")
            && lines[1].contains("affects the oracle data pages of all data from vega time "),
        "{}",
        lines[1]
    );
    assert!(stderr.contains("2 of "), "{stderr}");
    assert!(
        std::fs::read(&db).unwrap() == before,
        "check --deep changed the file"
    );

    // An index that no longer matches its table: SQLite's own check finds it.
    let conn = Connection::open(&db).unwrap();
    conn.execute_batch(
        "PRAGMA writable_schema = ON; \
         UPDATE sqlite_schema SET sql = replace(sql, 'last_time, last_block', \
             'last_block, last_time') WHERE name = 'ledger_segments_key'; \
         PRAGMA writable_schema = OFF;",
    )
    .unwrap();
    drop(conn);
    let output = check_deep(&db);
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(!output.status.success());
    assert!(
        stdout.contains("damaged: the store: the store reports damage: integrity_check: "),
        "{stdout}"
    );
}

/// `server backup` while `serve` runs: the copy is one whole file that passes `check --deep`;
/// an existing file is never overwritten, and a PostgreSQL URL is sent to PostgreSQL's tools.
#[test]
fn backup_makes_a_whole_copy_that_passes_check_deep() {
    let dir = tempfile::tempdir().unwrap();
    let db = database(dir.path());
    let addr_file = dir.path().join("addr");
    let _serving = Killed(
        server()
            .args(["serve", "--listen", "127.0.0.1:0", "--addr-file"])
            .arg(&addr_file)
            .arg("--db")
            .arg(&db)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let out = dir.path().join("copy.sqlite");
    let done = run_ok(server().args(["backup", "--db"]).arg(&db).arg(&out));
    let done = String::from_utf8(done.stdout).unwrap();
    assert!(
        done.contains("copied as of one commit") && done.contains("last block: "),
        "{done}"
    );
    // One whole file, nothing beside it.
    assert!(!dir.path().join("copy.sqlite-wal").exists());
    let check = check_deep(&out);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );

    let again = server()
        .args(["backup", "--db"])
        .arg(&db)
        .arg(&out)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("never overwrites"));
    let postgres = server()
        .args(["backup", "--db", "postgres://nobody@127.0.0.1:1/none"])
        .arg(dir.path().join("pg.sqlite"))
        .output()
        .unwrap();
    assert!(!postgres.status.success());
    assert!(String::from_utf8_lossy(&postgres.stderr).contains("pg_dump"));
}

/// A child process, killed on drop (a failed test leaves none behind).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
