//! The backend-neutral suite run on SQLite, and what only SQLite has: the file, its schema
//! version and its journal mode.

mod backup;
mod damage;
mod fixtures;

use rusqlite::Connection;
use tempfile::TempDir;

use super::schema::MIGRATIONS;
use super::{SqliteConfig, SqliteStore};
use crate::Store as _;
use crate::{Error, Health, IngestWriter, LedgerStore, OracleStore, WriterOptions, suite};

/// A fresh store in its own temporary directory, removed on drop.
struct TempStore {
    // Dropped after the store, so that the files are closed before the directory goes.
    store: SqliteStore,
    _dir: TempDir,
}

impl TempStore {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store =
            SqliteStore::open(dir.path().join("store.db"), SqliteConfig::default()).unwrap();
        Self { store, _dir: dir }
    }

    /// A store holding one ledger row, labelled "kept", of party 1; and its file's path.
    fn with_one_row() -> (Self, std::path::PathBuf) {
        let temp = Self::new();
        let path = temp.store.path().to_path_buf();
        let batch = suite::ledger_batch(vec![suite::ledger_row("kept", 1, 1, (1, 1, 1, 0))]);
        temp.store.writer().unwrap().commit(&batch).unwrap();
        (temp, path)
    }
}

/// Runs a suite test on a fresh store.
fn run(_test: &str, body: impl FnOnce(&SqliteStore, &mut dyn IngestWriter)) {
    let temp = TempStore::new();
    let mut writer = temp.store.writer().unwrap();
    body(&temp.store, &mut writer);
}

suite::backend_tests!(run);

fn pragma<T: rusqlite::types::FromSql>(conn: &Connection, name: &str) -> T {
    conn.query_row(&format!("PRAGMA {name}"), [], |row| row.get(0))
        .unwrap()
}

#[test]
fn reopening_keeps_data_and_schema_version() {
    let (_temp, path) = TempStore::with_one_row();

    for _ in 0..2 {
        let conn = reopened_with_the_row(&path);
        assert_eq!(pragma::<String>(&conn, "journal_mode"), "wal");
    }
}

/// Opens the store at `path` (migrating it), checks that it holds the row of
/// [`TempStore::with_one_row`] at the latest schema version, and returns a plain connection to
/// the file.
#[track_caller]
fn reopened_with_the_row(path: &std::path::Path) -> Connection {
    let reopened = SqliteStore::open(path, SqliteConfig::default()).unwrap();
    reopened.check().unwrap();
    let (labels, _) = suite::export(&reopened, &suite::filter(1, None, None, None));
    assert_eq!(labels, ["kept"]);
    let conn = Connection::open(path).unwrap();
    assert_eq!(
        pragma::<i64>(&conn, "user_version"),
        MIGRATIONS.len() as i64
    );
    conn
}

#[test]
fn newer_schema_version_is_refused() {
    let temp = TempStore::new();
    let path = temp.store.path().to_path_buf();
    let newer = MIGRATIONS.len() as i64 + 1;
    Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", newer)
        .unwrap();
    match SqliteStore::open(&path, SqliteConfig::default()) {
        Err(Error::Incompatible(why)) => {
            let message = why.to_string();
            assert!(message.contains(&newer.to_string()), "{message}")
        }
        other => panic!("expected Error::Incompatible, got {other:?}"),
    }
}

#[test]
fn file_that_is_not_a_database_is_refused_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-a.db");
    std::fs::write(&path, vec![b'x'; 64 * 1024]).unwrap();
    match SqliteStore::open(&path, SqliteConfig::default()) {
        Err(Error::Corrupt(_)) => {}
        other => panic!("expected Error::Corrupt, got {other:?}"),
    }
}

#[test]
fn a_second_writer_shares_the_dictionaries_and_segments() {
    let temp = TempStore::new();
    let mut first = temp.store.writer().unwrap();
    let mut second = temp.store.writer().unwrap();
    let commit = |writer: &mut dyn IngestWriter, label: &str, party: u8, seq: u64| {
        let batch = suite::ledger_batch(vec![suite::ledger_row(label, party, 1, (1, 1, seq, 0))]);
        writer.commit(&batch).unwrap();
    };
    // Each writer caches ids the other one added.
    commit(&mut first, "1a", 1, 1);
    commit(&mut second, "2a", 2, 2);
    commit(&mut second, "1b", 1, 3);
    commit(&mut first, "2b", 2, 4);
    commit(&mut first, "3a", 3, 5);
    commit(&mut second, "3b", 3, 6);
    // The first writer last saw party 1's segment before the second one grew it.
    commit(&mut first, "1c", 1, 7);
    let export = |party| suite::export(&temp.store, &suite::filter(party, None, None, None)).0;
    assert_eq!(export(1), ["1a", "1b", "1c"]);
    assert_eq!(export(2), ["2a", "2b"]);
    assert_eq!(export(3), ["3a", "3b"]);
}

/// The version is read while another connection holds the write lock with changes not yet
/// committed: it answers at once (its connection has no busy timeout, so a wait would show as
/// `None`), unchanged, and changes only when that transaction commits.
#[test]
fn data_version_does_not_wait_for_an_open_write_transaction() {
    let temp = TempStore::new();
    let store = &temp.store;
    let before = store
        .data_version()
        .unwrap()
        .expect("SQLite tells its version");
    let other = Connection::open(store.path()).unwrap();
    other
        .execute_batch("BEGIN IMMEDIATE; INSERT INTO parties (hex) VALUES (x'01');")
        .unwrap();
    assert_eq!(store.data_version().unwrap(), Some(before));
    // Readers go on meanwhile, and reading changes nothing either.
    suite::contents(store, &[1]);
    assert_eq!(store.data_version().unwrap(), Some(before));
    other.execute_batch("COMMIT").unwrap();
    let after = store.data_version().unwrap().expect("still told");
    assert_ne!(after, before);
    assert_eq!(store.data_version().unwrap(), Some(after));
}

#[test]
fn concurrent_opens_of_a_new_file_all_succeed() {
    for _ in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        let barrier = std::sync::Barrier::new(4);
        std::thread::scope(|scope| {
            let opens: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        SqliteStore::open(&path, SqliteConfig::default()).map(drop)
                    })
                })
                .collect();
            for open in opens {
                open.join().unwrap().unwrap();
            }
        });
    }
}

#[test]
fn examples_name_stored_ids() {
    let temp = TempStore::new();
    assert_eq!(temp.store.examples().unwrap(), crate::Examples::default());
    let batch = crate::IngestBatch {
        ledger_rows: vec![
            suite::ledger_row("first", 7, 8, (1, 1, 1, 0)),
            suite::ledger_row("second", 9, 10, (1, 1, 1, 0)),
        ],
        oracle_rows: vec![
            suite::oracle_row("unmatched", (1, 1, 2), &[]),
            suite::oracle_row("matched", (1, 1, 3), &[11]),
        ],
        ..crate::IngestBatch::default()
    };
    temp.store.writer().unwrap().commit(&batch).unwrap();
    let hex = |byte: u8| Some(format!("{byte:02x}").repeat(32));
    assert_eq!(
        temp.store.examples().unwrap(),
        crate::Examples {
            party: hex(7),
            asset: hex(8),
            spec: hex(11),
        }
    );
}

#[test]
fn damaged_segment_rows_are_corrupt_not_a_panic_or_a_count() {
    let temp = TempStore::new();
    let batch = crate::IngestBatch {
        ledger_rows: vec![suite::ledger_row("line", 7, 8, (1, 1, 1, 0))],
        ..crate::IngestBatch::default()
    };
    temp.store.writer().unwrap().commit(&batch).unwrap();
    let damage = |sql: &str| {
        Connection::open(temp.store.path())
            .unwrap()
            .execute(sql, [])
            .unwrap();
    };
    // A negative line count is damage: the export fails rather than report it as rows.
    damage("UPDATE ledger_segments SET lines = -1");
    let filter = suite::filter(7, None, None, None);
    let mut sink = suite::Collect::default();
    match temp.store.export_ledger(&filter, &mut sink) {
        Err(Error::Corrupt(what)) => assert!(what.to_string().contains("-1 lines"), "{what}"),
        other => panic!("expected Error::Corrupt, got {other:?}"),
    }
    // A segment without lines names no asset in the examples.
    let empty = crate::checksum::of(b"");
    damage(&format!(
        "UPDATE ledger_segments SET lines = 0, csv = x'', keys = x'', csv_sum = {empty}, \
         keys_sum = {empty}"
    ));
    let examples = temp.store.examples().unwrap();
    assert_eq!(examples.asset, None);
}

#[test]
fn rows_of_another_format_are_refused_with_a_re_ingest_message() {
    let temp = TempStore::new();
    let path = temp.store.path().to_path_buf();
    Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE schema_info SET value = '0' WHERE key = 'row_format'",
            [],
        )
        .unwrap();
    match SqliteStore::open(&path, SqliteConfig::default()) {
        Err(Error::Incompatible(why)) => {
            let message = why.to_string();
            assert!(message.contains("re-ingest"), "{message}")
        }
        other => panic!("expected Error::Incompatible, got {other:?}"),
    }
}

#[test]
fn ledger_rows_of_format_1_are_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    // A database as the previous version left it: schema 2, one ledger row of format 1.
    let conn = Connection::open(&path).unwrap();
    for sql in &MIGRATIONS[..2] {
        conn.execute_batch(sql).unwrap();
    }
    conn.execute_batch(
        "PRAGMA user_version = 2; \
         INSERT INTO ledger_rows VALUES (1, 1, 1, 1, 1, 0, CAST('line' AS BLOB));",
    )
    .unwrap();
    drop(conn);
    match SqliteStore::open(&path, SqliteConfig::default()) {
        Err(Error::Incompatible(why)) => {
            let message = why.to_string();
            assert!(
                message.contains("format 1") && message.contains("re-ingest"),
                "{message}"
            )
        }
        other => panic!("expected Error::Incompatible, got {other:?}"),
    }
    let conn = Connection::open(&path).unwrap();
    assert_eq!(pragma::<i64>(&conn, "user_version"), 2);
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM ledger_rows", [], |row| row.get(0))
        .unwrap();
    assert_eq!(rows, 1);
}

/// The `row_format` a database at `path` records.
fn recorded_row_format(path: &std::path::Path) -> String {
    Connection::open(path)
        .unwrap()
        .query_row(
            "SELECT value FROM schema_info WHERE key = 'row_format'",
            [],
            |row| row.get(0),
        )
        .unwrap()
}

#[test]
fn a_new_database_records_this_programs_row_format() {
    let (_temp, path) = TempStore::with_one_row();
    assert_eq!(recorded_row_format(&path), crate::ROW_FORMAT.to_string());
    reopened_with_the_row(&path);
    assert_eq!(recorded_row_format(&path), crate::ROW_FORMAT.to_string());
}

#[test]
fn databases_of_row_formats_2_and_3_are_refused_and_left_as_they_are() {
    // As earlier versions left them: schema 3 in row format 2 (which migration 4 relabelled 3
    // before `vega_time` changed form), and schema 4 in row format 3, with one row of the old
    // form each. Rebuilt, since no file of those versions is kept; schema 5 in row format 3 is
    // a committed fixture (`fixtures.rs`).
    for (schema, format) in [(3, 2), (4, 3)] {
        let (_temp, path) = TempStore::with_one_row();
        Connection::open(&path)
            .unwrap()
            .execute_batch(&format!(
                "PRAGMA user_version = {schema}; \
                 UPDATE schema_info SET value = '{format}' WHERE key = 'row_format';"
            ))
            .unwrap();
        match SqliteStore::open(&path, SqliteConfig::default()) {
            Err(Error::Incompatible(why)) => {
                let message = why.to_string();
                assert!(
                    message.contains(&format!("format {format}")) && message.contains("re-ingest"),
                    "{message}"
                )
            }
            other => panic!("expected Error::Incompatible, got {other:?}"),
        }
        assert_eq!(recorded_row_format(&path), format.to_string());
        let conn = Connection::open(&path).unwrap();
        assert_eq!(pragma::<i64>(&conn, "user_version"), schema);
    }
}

/// Rebuilt, not a fixture: every database that a version of schema 4 wrote holds row format 3
/// and is refused before any migration, so migration 5 only ever copies segments of a file
/// labelled with format 4 (by a format-4 build that stopped creating it), as this one.
#[test]
fn segments_of_schema_4_move_to_a_rowid_table_with_their_bytes() {
    let (_temp, path) = TempStore::with_one_row();
    // As schema 4 left them: the segments keyed by their primary key, WITHOUT ROWID, and the
    // oracle data in rows (none here).
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TABLE old (party INTEGER NOT NULL, last_time INTEGER NOT NULL, \
             last_block INTEGER NOT NULL, last_seq INTEGER NOT NULL, last_idx INTEGER NOT NULL, \
             first_time INTEGER NOT NULL, lines INTEGER NOT NULL, csv BLOB NOT NULL, \
             keys BLOB NOT NULL, \
             PRIMARY KEY (party, last_time, last_block, last_seq, last_idx)) WITHOUT ROWID; \
         INSERT INTO old SELECT party, last_time, last_block, last_seq, last_idx, \
             first_time, lines, csv, keys FROM ledger_segments; \
         DROP TABLE ledger_segments; \
         ALTER TABLE old RENAME TO ledger_segments; \
         DROP TABLE oracle_segments; \
         CREATE TABLE oracle_data (vega_time INTEGER NOT NULL, block INTEGER NOT NULL, \
             seq INTEGER NOT NULL, json BLOB NOT NULL, PRIMARY KEY (vega_time, block, seq)) \
             WITHOUT ROWID; \
         CREATE TABLE oracle_spec_data (spec INTEGER NOT NULL, vega_time INTEGER NOT NULL, \
             block INTEGER NOT NULL, seq INTEGER NOT NULL, \
             PRIMARY KEY (spec, vega_time, block, seq)) WITHOUT ROWID; \
         UPDATE schema_info SET value = '4' WHERE key = 'row_format'; \
         PRAGMA user_version = 4;",
    )
    .unwrap();
    drop(conn);
    // Rows of format 4: only `migrate` takes them on, through migration 7.
    SqliteStore::migrate(&path).unwrap();
    let conn = reopened_with_the_row(&path);
    let sql = |name: &str| -> String {
        conn.query_row(
            "SELECT sql FROM sqlite_schema WHERE name = ?1",
            [name],
            |row| row.get(0),
        )
        .unwrap()
    };
    let table = sql("ledger_segments");
    assert!(!table.contains("WITHOUT ROWID"), "{table}");
    let index = sql("ledger_segments_key");
    assert!(index.contains("CREATE UNIQUE INDEX"), "{index}");
}

#[test]
fn commits_reach_the_database_file_through_background_checkpoints() {
    let temp = TempStore::new();
    let path = temp.store.path().to_path_buf();
    // Open and reading, so that the writer's closing does not checkpoint the WAL in the
    // background's place (the last connection to close does).
    let other = Connection::open(&path).unwrap();
    let _: i64 = other
        .query_row("SELECT count(*) FROM schema_info", [], |row| row.get(0))
        .unwrap();
    let file_len = || std::fs::metadata(&path).unwrap().len();
    let before = file_len();
    let label = "x".repeat(1000);
    let rows = (0..2000)
        .map(|n| suite::ledger_row(&label, 1 + (n % 7) as u8, 1, (n, n as u64, 1, 0)))
        .collect();
    let mut writer = temp.store.writer().unwrap();
    writer.commit(&suite::ledger_batch(rows)).unwrap();
    // Dropping the writer waits for the checkpoint its commit asked for.
    drop(writer);
    assert!(
        file_len() > before + 1_000_000,
        "{} -> {}",
        before,
        file_len()
    );
    drop(other);
}

/// The bytes of every file in `dir`, by name.
fn files(dir: &std::path::Path) -> Vec<(std::ffi::OsString, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            (entry.file_name(), std::fs::read(entry.path()).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn a_foreign_database_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    // Someone else's tables, with and without a user_version of their own.
    for user_version in [0, 3] {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(&format!(
            "DROP TABLE IF EXISTS users; CREATE TABLE users (name TEXT); \
             INSERT INTO users VALUES ('ada'); PRAGMA user_version = {user_version};"
        ))
        .unwrap();
        drop(conn);
        let before = files(dir.path());
        match SqliteStore::open(&path, SqliteConfig::default()) {
            Err(Error::Incompatible(why)) => {
                let message = why.to_string();
                assert!(message.contains("not a datanode database"), "{message}")
            }
            other => panic!("expected Error::Incompatible, got {other:?}"),
        }
        assert_eq!(files(dir.path()), before);
    }
}

#[test]
fn an_empty_file_gets_our_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.db");
    std::fs::write(&path, b"").unwrap();
    SqliteStore::open(&path, SqliteConfig::default())
        .unwrap()
        .check()
        .unwrap();
}

#[test]
fn create_new_leaves_one_self_contained_file_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("demo.db");
    let batch = suite::ledger_batch(vec![suite::ledger_row("demo", 1, 1, (1, 1, 1, 0))]);
    SqliteStore::create_new(&path, SqliteConfig::default(), |store| {
        store.writer()?.commit(&batch)
    })
    .unwrap();
    let names: Vec<_> = files(dir.path())
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(names, ["demo.db"]);
    let store = SqliteStore::open(&path, SqliteConfig::default()).unwrap();
    assert_eq!(
        suite::export(&store, &suite::filter(1, None, None, None)).0,
        ["demo"]
    );

    // A failed fill leaves no database behind at the final path.
    let failed = dir.path().join("failed.db");
    let result = SqliteStore::create_new(&failed, SqliteConfig::default(), |_| {
        Err::<(), _>(Error::from(crate::Damage::Value("fill failed".into())))
    });
    assert!(matches!(result, Err(Error::Corrupt(_))));
    assert!(!failed.exists());
}

/// Party 1's segments' lines' bytes, in key order.
fn segment_sizes(path: &std::path::Path) -> Vec<usize> {
    party_segment_sizes(path, 1)
}

/// Party `party`'s segments' lines' bytes, in key order.
fn party_segment_sizes(path: &std::path::Path, party: u8) -> Vec<usize> {
    let conn = Connection::open(path).unwrap();
    let mut statement = conn
        .prepare(
            "SELECT length(csv) FROM ledger_segments s JOIN parties p ON p.id = s.party \
             WHERE p.hex = ?1 ORDER BY last_time, last_block, last_seq, last_idx",
        )
        .unwrap();
    statement
        .query_map([&suite::party(party).as_bytes()[..]], |row| {
            row.get::<_, i64>(0)
        })
        .unwrap()
        .map(|size| usize::try_from(size.unwrap()).unwrap())
        .collect()
}

#[test]
fn a_stream_of_small_batches_fills_segments() {
    let temp = TempStore::new();
    // One writer remembers its run; then a writer every seven batches (an ingest restarted)
    // reads it back from the file.
    let mut writer = temp.store.writer().unwrap();
    for n in 0..300 {
        writer.commit(&suite::packing::small_batch(n)).unwrap();
    }
    drop(writer);
    for batches in (300..500).collect::<Vec<u64>>().chunks(7) {
        let mut writer = temp.store.writer().unwrap();
        for n in batches {
            writer.commit(&suite::packing::small_batch(*n)).unwrap();
        }
    }
    // 150 kB of lines: four segments of at least 32 KiB.
    suite::packing::assert_packed(&segment_sizes(temp.store.path()), 4);
    suite::packing::assert_small_batches_exported(&temp.store, 0..500);
}

#[test]
fn runs_remembered_by_their_shape_are_stored_as_runs_kept_whole() {
    let (whole, shaped) = (TempStore::new(), TempStore::new());
    suite::packing::stage_small_batches(&mut whole.store.writer().unwrap());
    // No run kept whole: every party's is remembered by its shape and read back to merge.
    let nothing_whole = WriterOptions {
        remembered_bytes: 0,
    };
    suite::packing::stage_small_batches(&mut shaped.store.writer_with(&nothing_whole).unwrap());
    let sizes = |temp: &TempStore| -> Vec<Vec<usize>> {
        let parties = suite::packing::PARTIES.iter();
        parties
            .map(|party| party_segment_sizes(temp.store.path(), *party))
            .collect()
    };
    suite::packing::assert_stored_alike(
        (&whole.store, &sizes(&whole)),
        (&shaped.store, &sizes(&shaped)),
    );
}
