//! The backend-neutral suite run on PostgreSQL, and what only PostgreSQL has: the migration
//! lock, the ingest lock, a serving process that never writes, a read-only role, killed
//! connections. Each test has a database of its own (see the `testdb` crate: the local server by
//! default, skipped only with `DATANODE_TEST_PG=skip`).

mod damage;
mod fixtures;
mod partitions;
mod segments;

use postgres::Client;

use super::schema::{CREATED_BY, MIGRATIONS};
use super::{PgConfig, PgStore, map_err};
use storage::{
    CHAIN_TIP_LAG, Error, Health, IngestBatch, IngestWriter, OracleStore, Store as _, suite,
};
use testdb::TestDatabase;

/// Runs a suite test on a fresh database, or skips.
fn run(test: &str, body: impl FnOnce(&PgStore, &mut dyn IngestWriter)) {
    let Some(db) = TestDatabase::create(test) else {
        return;
    };
    let mut writer = PgStore::writer(db.url()).unwrap();
    // Chunks of one segment (its bytes pass the chunk's): every export of more reads several
    // snapshots.
    let config = PgConfig {
        export_chunk_bytes: 1,
        ..PgConfig::default()
    };
    let store = PgStore::open(db.url(), config).unwrap();
    body(&store, &mut writer);
}

suite::backend_tests!(run);

#[track_caller]
fn incompatible<T: std::fmt::Debug>(result: Result<T, Error>, wanted: &str) {
    match result {
        Err(Error::Incompatible(why)) => {
            let message = why.to_string();
            assert!(message.contains(wanted), "{message}")
        }
        other => panic!("expected Error::Incompatible ({wanted}), got {other:?}"),
    }
}

/// Writes what an earlier version left: `schema_info` at `version` with rows of `row_format`
/// (set after the first `version` migrations, which set formats of their own), then `rows`
/// (SQL). Returns a client on that database. Only for the versions of which no dump is kept:
/// the others are committed fixtures (`fixtures.rs`), which today's migrations cannot alter.
fn earlier_version(db: &TestDatabase, version: usize, row_format: u32, rows: &str) -> Client {
    let mut client = db.client();
    client
        .batch_execute(&format!(
            "CREATE TABLE schema_info (key text PRIMARY KEY, value text NOT NULL); \
             INSERT INTO schema_info VALUES ('created_by', '{CREATED_BY}'), \
             ('schema_version', '{version}'), ('row_format', '0'); {} \
             UPDATE schema_info SET value = '{row_format}' WHERE key = 'row_format'; {rows}",
            MIGRATIONS[..version]
                .iter()
                .map(|migration| migration.sql)
                .collect::<Vec<_>>()
                .join(" ")
        ))
        .unwrap();
    client
}

/// How many tables the database has: 0 before anything was created.
fn tables(db: &TestDatabase) -> i64 {
    db.client()
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'",
            &[],
        )
        .unwrap()
        .get(0)
}

/// `migrate`, the writer and a serving store all refuse the database, saying `wanted`.
fn refused_by_every_opener(url: &str, wanted: &str) {
    for refused in [
        PgStore::migrate(url).map(drop),
        PgStore::writer(url).map(drop),
        PgStore::open(url, PgConfig::default()).map(drop),
    ] {
        incompatible(refused, wanted);
    }
}

#[test]
fn serving_an_unmigrated_database_is_refused_and_writes_nothing() {
    let Some(db) = TestDatabase::create("serving_an_unmigrated_database") else {
        return;
    };
    incompatible(
        PgStore::open(db.url(), PgConfig::default()),
        "server migrate",
    );
    assert_eq!(tables(&db), 0);
    let migrated = PgStore::migrate(db.url()).unwrap();
    let latest = MIGRATIONS.len() as u32;
    assert_eq!((migrated.from, migrated.to), (0, latest));
    assert_eq!(PgStore::migrate(db.url()).unwrap().from, latest);
    PgStore::open(db.url(), PgConfig::default())
        .unwrap()
        .check()
        .unwrap();
}

#[test]
fn concurrent_migrations_all_succeed() {
    let Some(db) = TestDatabase::create("concurrent_migrations_all_succeed") else {
        return;
    };
    let barrier = std::sync::Barrier::new(4);
    let from: Vec<u32> = std::thread::scope(|scope| {
        let runs: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    PgStore::migrate(db.url()).unwrap().from
                })
            })
            .collect();
        runs.into_iter().map(|run| run.join().unwrap()).collect()
    });
    // Exactly one of them created the schema.
    assert_eq!(
        from.iter().filter(|from| **from == 0).count(),
        1,
        "{from:?}"
    );
}

#[test]
fn a_second_writer_is_refused_until_the_first_is_dropped() {
    let Some(db) = TestDatabase::create("a_second_writer_is_refused") else {
        return;
    };
    let first = PgStore::writer(db.url()).unwrap();
    match PgStore::writer(db.url()) {
        Err(Error::Busy) => {}
        other => panic!("expected Error::Busy, got {other:?}"),
    }
    drop(first);
    PgStore::writer(db.url()).unwrap();
}

#[test]
fn rows_of_another_format_and_foreign_schemas_are_refused() {
    let Some(db) = TestDatabase::create("rows_of_another_format") else {
        return;
    };
    PgStore::migrate(db.url()).unwrap();
    db.client()
        .batch_execute("UPDATE schema_info SET value = '0' WHERE key = 'row_format'")
        .unwrap();
    incompatible(PgStore::open(db.url(), PgConfig::default()), "re-ingest");
    incompatible(PgStore::writer(db.url()).map(drop), "re-ingest");

    let Some(foreign) = TestDatabase::create("foreign_schema_info") else {
        return;
    };
    foreign
        .client()
        .batch_execute("CREATE TABLE schema_info (id int); INSERT INTO schema_info VALUES (1)")
        .unwrap();
    incompatible(PgStore::migrate(foreign.url()), "not ours");
    incompatible(
        PgStore::open(foreign.url(), PgConfig::default()),
        "not ours",
    );
}

#[test]
fn a_database_of_row_format_1_is_refused_and_left_as_it_is() {
    let Some(db) = TestDatabase::create("a_database_of_row_format_1") else {
        return;
    };
    // What the previous version wrote: schema 1, rows in format 1.
    let mut client = earlier_version(
        &db,
        1,
        1,
        "INSERT INTO ledger_rows VALUES (1, 1, 100, 10, 1, 0, 'kept\n')",
    );
    refused_by_every_opener(db.url(), "re-ingest");
    let row = client
        .query_one(
            "SELECT (SELECT count(*) FROM ledger_rows), \
             (SELECT string_agg(value, ' ' ORDER BY key) FROM schema_info), \
             to_regclass('ledger_segments') IS NULL",
            &[],
        )
        .unwrap();
    let (rows, info, no_segments): (i64, String, bool) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(
        (rows, info.as_str(), no_segments),
        (1, "vega-datanode-lite 1 1", true)
    );
}

#[test]
fn a_database_of_row_format_2_is_refused_and_left_as_it_is() {
    let Some(db) = TestDatabase::create("a_database_of_row_format_2") else {
        return;
    };
    // What the previous version wrote: schema 2, an uncompressed segment of format 2.
    let mut client = earlier_version(
        &db,
        2,
        2,
        "INSERT INTO ledger_segments VALUES (1, 100, 10, 1, 0, 100, 1, 'kept\n', '')",
    );
    refused_by_every_opener(db.url(), "format 2");
    let row = client
        .query_one(
            "SELECT (SELECT string_agg(csv::text, ' ') FROM ledger_segments), \
             (SELECT string_agg(value, ' ' ORDER BY key) FROM schema_info)",
            &[],
        )
        .unwrap();
    let (csv, info): (String, String) = (row.get(0), row.get(1));
    assert_eq!(
        (csv.as_str(), info.as_str()),
        ("\\x6b6570740a", "vega-datanode-lite 2 2")
    );
}

#[test]
fn a_new_database_records_this_programs_row_format() {
    let Some(db) = TestDatabase::create("a_new_database_records") else {
        return;
    };
    PgStore::migrate(db.url()).unwrap();
    let format: String = db
        .client()
        .query_one(
            "SELECT value FROM schema_info WHERE key = 'row_format'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(format, storage::ROW_FORMAT.to_string());
    PgStore::writer(db.url()).unwrap();
}

#[test]
fn a_database_of_schema_3_gets_its_oracle_data_in_segments() {
    let Some(db) = TestDatabase::create("a_database_of_schema_3") else {
        return;
    };
    // What an earlier version wrote: schema 3, oracle data in rows, matches without their
    // JSON; the first datum matches both specs, the last none. Its rows were of format 3,
    // which is refused since; labelled with today's, it shows what the migrations do.
    let hex = |n: u8| format!("\\x{}", format!("{n:02x}").repeat(32));
    let mut client = earlier_version(
        &db,
        3,
        storage::ROW_FORMAT,
        &format!(
            "INSERT INTO oracle_specs (hex) VALUES ('{}'), ('{}'); \
             INSERT INTO oracle_data VALUES (100, 10, 1, 'first'), (200, 11, 1, 'second'), \
             (300, 12, 1, 'unmatched'); \
             INSERT INTO oracle_spec_data VALUES (1, 100, 10, 1), (2, 100, 10, 1), \
             (2, 200, 11, 1)",
            hex(1),
            hex(2)
        ),
    );
    let migrated = PgStore::migrate(db.url()).unwrap();
    assert_eq!((migrated.from, migrated.to), (3, MIGRATIONS.len() as u32));
    let row = client
        .query_one(
            "SELECT (SELECT string_agg(value, ' ' ORDER BY key) FROM schema_info), \
             to_regclass('oracle_data') IS NULL AND to_regclass('oracle_spec_data') IS NULL, \
             (SELECT string_agg(spec || ':' || lines, ' ' ORDER BY spec) FROM oracle_segments)",
            &[],
        )
        .unwrap();
    let (info, dropped, segments): (String, bool, String) = (row.get(0), row.get(1), row.get(2));
    let latest = MIGRATIONS.len();
    assert_eq!(
        (info.as_str(), dropped, segments.as_str()),
        (
            format!("vega-datanode-lite {} {latest}", storage::ROW_FORMAT).as_str(),
            true,
            "0:3 1:1 2:2"
        )
    );
    let store = PgStore::open(db.url(), PgConfig::default()).unwrap();
    for (spec_n, expected) in [(1, "first"), (2, "second first")] {
        assert_eq!(
            suite::spec_labels(&store, spec_n),
            expected,
            "spec {spec_n}"
        );
    }
    assert_eq!(
        suite::contents(&store, &[]).1,
        [&b"unmatched"[..], b"second", b"first"]
    );
    // The writer appends to the moved segments.
    let mut writer = PgStore::writer(db.url()).unwrap();
    let mut batch = IngestBatch::default();
    batch
        .oracle_rows
        .push(suite::oracle_row("newer", (400, 13, 1), &[1]));
    writer.commit(&batch).unwrap();
    assert_eq!(suite::spec_labels(&store, 1), "newer first");
}

#[test]
fn examples_name_the_first_party_and_the_asset_of_its_first_line() {
    let Some(db) = TestDatabase::create("examples_name_the_first_party") else {
        return;
    };
    let mut writer = PgStore::writer(db.url()).unwrap();
    let store = PgStore::open(db.url(), PgConfig::default()).unwrap();
    assert_eq!(store.examples().unwrap(), storage::Examples::default());
    // Party 7 gets the first dictionary id; its first line in the total order is in asset 8,
    // though a later one of asset 9 was committed first.
    let mut batch = suite::ledger_batch(vec![suite::ledger_row("later", 7, 9, (5, 2, 1, 0))]);
    batch
        .oracle_rows
        .push(suite::oracle_row("matched", (5, 2, 2), &[11]));
    writer.commit(&batch).unwrap();
    writer
        .commit(&suite::ledger_batch(vec![
            suite::ledger_row("first", 7, 8, (1, 1, 1, 0)),
            suite::ledger_row("other", 6, 6, (1, 1, 1, 0)),
        ]))
        .unwrap();
    let hex = |byte: u8| Some(format!("{byte:02x}").repeat(32));
    assert_eq!(
        store.examples().unwrap(),
        storage::Examples {
            party: hex(7),
            asset: hex(8),
            spec: hex(11),
        }
    );
}

#[test]
fn serving_works_with_a_read_only_role() {
    let Some(db) = TestDatabase::create("serving_works_with_a_read_only_role") else {
        return;
    };
    let mut writer = PgStore::writer(db.url()).unwrap();
    writer
        .commit(&suite::ledger_batch(vec![suite::ledger_row(
            "kept",
            1,
            1,
            (1, 1, 1, 0),
        )]))
        .unwrap();
    // Every transaction of the role is read-only, as on a hot standby.
    let role = format!("{}_reader", db.name());
    let mut admin = db.client();
    admin
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN; GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}; \
             ALTER ROLE {role} SET default_transaction_read_only = on"
        ))
        .unwrap();
    let url = db.url().replacen("://postgres@", &format!("://{role}@"), 1);
    let store = PgStore::open(&url, PgConfig::default()).unwrap();
    store.check().unwrap();
    let (labels, _) = suite::export(&store, &suite::filter(1, None, None, None));
    assert_eq!(labels, ["kept"]);
    // The role cannot ingest.
    assert!(PgStore::writer(&url).is_err());
    drop(store);
    let _ = admin.batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE IF EXISTS {role}"));
}

#[test]
fn killed_connections_are_unavailable_then_replaced() {
    let Some(db) = TestDatabase::create("killed_connections") else {
        return;
    };
    PgStore::migrate(db.url()).unwrap();
    let store = PgStore::open(db.url(), PgConfig::default()).unwrap();
    store.check().unwrap();
    let kill = || {
        db.admin()
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE datname = $1",
                &[&db.name()],
            )
            .unwrap();
    };
    kill();
    // The pool tests a connection before handing it out and replaces a dead one.
    store.check().unwrap();
    let filter = suite::filter(1, None, None, None);
    assert_eq!(suite::export(&store, &filter).0, Vec::<String>::new());
    // The database refusing connections: unavailable, not an internal error.
    db.admin()
        .batch_execute(&format!(
            "ALTER DATABASE {} ALLOW_CONNECTIONS false",
            db.name()
        ))
        .unwrap();
    kill();
    match store.check() {
        Err(Error::Unavailable(_)) => {}
        other => panic!("expected Error::Unavailable, got {other:?}"),
    }
    db.admin()
        .batch_execute(&format!(
            "ALTER DATABASE {} ALLOW_CONNECTIONS true",
            db.name()
        ))
        .unwrap();
    store.check().unwrap();
}

/// A block at `height` with a vega time of ten times it.
fn block(height: u64) -> storage::BlockRecord {
    storage::BlockRecord {
        height,
        hash: None,
        seq_base: 0,
        state: storage::BlockState {
            vega_time: Some(height as i64 * 10),
            last_seq: 1,
        },
    }
}

/// The tip of a chain of blocks `first..=last`.
fn tip(first: u64, last: u64) -> Option<storage::ChainTip> {
    Some(storage::ChainTip {
        first_height: first,
        last_height: last,
        last_vega_time: Some(last as i64 * 10),
    })
}

/// A bound on waits for what must happen at once, so that a broken build fails, not hangs.
const NEVER: std::time::Duration = std::time::Duration::from_secs(30);

/// Polls an hour apart: what such a store learns, it learns from the writer's announcements.
const HOURLY: std::time::Duration = std::time::Duration::from_secs(3600);

/// The writer announces each commit and a listening store hears it without polling: the tip
/// and the data version move on together. The thread stops with the store.
#[test]
fn a_commit_is_announced_and_heard_without_a_poll() {
    let Some(db) = TestDatabase::create("a_commit_is_announced_and_heard_without_a_poll") else {
        return;
    };
    let mut writer = PgStore::writer(db.url()).unwrap();
    let store = PgStore::open_polling(db.url(), PgConfig::default(), HOURLY).unwrap();
    assert!(store.tip.wait_listening(NEVER), "the store never listened");
    assert_eq!(store.chain_tip().unwrap(), None);
    let before = store.data_version().unwrap().expect("a version");
    suite::commit(
        &mut writer,
        &IngestBatch {
            blocks: vec![block(9)],
            ..IngestBatch::default()
        },
    );
    let seen = store.tip.wait_until(NEVER, |seen, _| *seen == tip(9, 9));
    assert_eq!(seen, tip(9, 9));
    assert_ne!(store.data_version().unwrap(), Some(before));
    // Dropping the store joins its thread: the database has no connection of it left.
    drop(store);
    // A backend leaves `pg_stat_activity` only once it has read its client's hang-up, a moment
    // after the socket closed: asked again until it has (a leaked connection never leaves).
    let mut admin = Client::connect(db.url(), postgres::NoTls).unwrap();
    let others = |admin: &mut Client| -> i64 {
        admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid() \
                 AND application_name = 'vega-datanode-lite'",
                &[],
            )
            .unwrap()
            .get(0)
    };
    let mut left = others(&mut admin);
    for _ in 0..1000 {
        if left == 1 {
            break;
        }
        std::thread::yield_now();
        left = others(&mut admin);
    }
    drop(writer);
    assert_eq!(left, 1, "only the writer's connection is left");
}

/// The pool's connections run the generic plans that `query_plans.rs` pins, planned once per
/// connection rather than at every page.
#[test]
fn readers_run_the_pinned_generic_plans() {
    let Some(db) = TestDatabase::create("readers_run_the_pinned_generic_plans") else {
        return;
    };
    drop(PgStore::writer(db.url()).unwrap());
    let store = PgStore::open_polling(db.url(), PgConfig::default(), HOURLY).unwrap();
    let mode: String = store
        .read(
            |conn| {
                let row = conn.client.query_one("SHOW plan_cache_mode", &[]);
                Ok(row.map_err(map_err)?.get(0))
            },
            || true,
        )
        .unwrap();
    assert_eq!(mode, "force_generic_plan");
}

/// An announced commit moves the version on even when the tip stays the same (rows added to
/// the last block), since the store cannot see what it changed without reading it.
#[test]
fn an_announcement_moves_the_version_on_whatever_the_tip() {
    let Some(db) = TestDatabase::create("an_announcement_moves_the_version_on_whatever_the_tip")
    else {
        return;
    };
    drop(PgStore::writer(db.url()).unwrap());
    let store = PgStore::open_polling(db.url(), PgConfig::default(), HOURLY).unwrap();
    assert!(store.tip.wait_listening(NEVER), "the store never listened");
    let before = store.data_version().unwrap().expect("a version");
    let mut admin = Client::connect(db.url(), postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!("NOTIFY {}, '1'", super::tip::CHANNEL))
        .unwrap();
    store.tip.wait_until(NEVER, |_, version| version != before);
    assert_ne!(store.data_version().unwrap(), Some(before));
    assert_eq!(store.chain_tip().unwrap(), None);
}

/// A store that hears no announcement (a hot standby cannot `LISTEN`; here the commit is made
/// without one) finds a commit by its poll, within about [`CHAIN_TIP_LAG`].
#[test]
fn without_an_announcement_the_poll_finds_a_commit_within_a_second() {
    let Some(db) =
        TestDatabase::create("without_an_announcement_the_poll_finds_a_commit_within_a_second")
    else {
        return;
    };
    let mut writer = PgStore::writer(db.url()).unwrap();
    suite::commit(
        &mut writer,
        &IngestBatch {
            blocks: vec![block(9)],
            ..IngestBatch::default()
        },
    );
    let store = PgStore::open(db.url(), PgConfig::default()).unwrap();
    assert_eq!(store.chain_tip().unwrap(), tip(9, 9));
    let before = store.data_version().unwrap().expect("a version");
    let mut admin = Client::connect(db.url(), postgres::NoTls).unwrap();
    // Another event in the last block: the tip's heights and time stay, its sequence moves.
    admin
        .batch_execute("UPDATE blocks SET last_seq = 2 WHERE height = 9")
        .unwrap();
    let started = std::time::Instant::now();
    store
        .tip
        .wait_until(CHAIN_TIP_LAG * 3, |_, version| version != before);
    assert_ne!(store.data_version().unwrap(), Some(before));
    let moved = store.data_version().unwrap();
    admin
        .batch_execute(
            "INSERT INTO blocks (height, seq_base, vega_time, last_seq) VALUES (10, 0, 100, 1)",
        )
        .unwrap();
    let seen = store
        .tip
        .wait_until(CHAIN_TIP_LAG * 3, |seen, _| *seen == tip(9, 10));
    assert_eq!(seen, tip(9, 10));
    assert_ne!(store.data_version().unwrap(), moved);
    assert!(
        started.elapsed() < CHAIN_TIP_LAG * 4,
        "{:?}",
        started.elapsed()
    );
}

/// On the database's own host, a URL whose host is the server's socket directory
/// (percent-encoded) connects over its Unix socket, without TLS or TCP: the writer, the
/// readers and the announcements work there as over TCP, and read the same answers.
#[test]
fn every_connection_works_over_the_unix_socket() {
    let Some(db) = TestDatabase::create("every_connection_works_over_the_unix_socket") else {
        return;
    };
    let socket_url = unix_socket_url(&db);
    let mut writer = PgStore::writer(&socket_url).unwrap();
    writer
        .commit(&IngestBatch {
            blocks: vec![block(1)],
            oracle_rows: vec![suite::oracle_row("datum", (10, 1, 2), &[3])],
            ..suite::ledger_batch(vec![suite::ledger_row("entry", 1, 1, (10, 1, 1, 0))])
        })
        .unwrap();
    let over_tcp = PgStore::open(db.url(), PgConfig::default()).unwrap();
    let over_socket = PgStore::open_polling(&socket_url, PgConfig::default(), HOURLY).unwrap();
    assert!(
        over_socket.tip.wait_listening(NEVER),
        "the store never listened"
    );
    over_socket.check().unwrap();
    let local: bool = over_socket
        .read(
            |conn| {
                let row = conn
                    .client
                    .query_one("SELECT inet_client_addr() IS NULL", &[]);
                Ok(row.map_err(map_err)?.get(0))
            },
            || true,
        )
        .unwrap();
    assert!(local, "the reader connected over TCP, not the socket");
    let contents = suite::contents(&over_socket, &[1]);
    assert_eq!(contents.0, [["entry"]]);
    assert_eq!(contents.1, [b"datum"]);
    assert_eq!(contents, suite::contents(&over_tcp, &[1]));
    assert_eq!(over_socket.chain_tip().unwrap(), tip(1, 1));
    // The next commit is announced and heard over the socket too, without a poll.
    let version = over_socket.data_version().unwrap();
    suite::commit(
        &mut writer,
        &IngestBatch {
            blocks: vec![block(2)],
            ..IngestBatch::default()
        },
    );
    let seen = over_socket
        .tip
        .wait_until(NEVER, |seen, _| *seen == tip(1, 2));
    assert_eq!(seen, tip(1, 2));
    assert_ne!(over_socket.data_version().unwrap(), version);
}

/// The test database's URL through the server's first Unix socket directory, as its own user
/// and port (the socket's name holds the port).
fn unix_socket_url(db: &TestDatabase) -> String {
    let row = db
        .client()
        .query_one(
            "SELECT current_user::text, current_setting('port'), \
             current_setting('unix_socket_directories')",
            &[],
        )
        .unwrap();
    let (user, port, directories): (String, String, String) = (row.get(0), row.get(1), row.get(2));
    let directory = directories
        .split(',')
        .map(str::trim)
        .find(|directory| directory.starts_with('/'))
        .unwrap_or_else(|| {
            panic!(
                "the test server has no Unix socket directory (unix_socket_directories = \
                 '{directories}'): the socket cannot be tested"
            )
        });
    let host = percent_encoding::utf8_percent_encode(directory, percent_encoding::NON_ALPHANUMERIC);
    format!("postgresql://{user}@{host}:{port}/{}", db.name())
}
