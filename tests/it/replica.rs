//! Read replicas: servers reading a PostgreSQL hot standby (`pg_basebackup -R` of the test
//! server, started by the test on a free port) while an ingest writes to the primary. Every
//! answer is the primary's at some block, never part of one, and no older than the block its
//! `X-Block-Height` names; once the standby has replayed everything, the standby's servers
//! answer as the primary's do.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use eventgen::GenerateConfig;
use http_api::AppConfig;
use ingest::IngestOptions;
use ledger_core::{ExportFilter, TimeRange};
use serde_json::Value;
use storage::{BlockRecord, ChainState, ExportSink, IngestBatch, IngestWriter, LedgerStore};
use storage_postgres::{PgConfig, PgStore};
use testdb::{Programs, Standby, TestDatabase};

use crate::live_ingest::first_config;
use crate::reference::{CSV_HEADER, Reference};
use crate::support::{Server, get};

const EXPORT: &str = "/api/v2/ledgerentry/export";
const NEWEST_PAGE: &str = "/api/v2/oracle/data?pagination.newestFirst=true&pagination.first=20";

/// How long the standby may take to replay what the primary wrote, or its servers to show it.
const REPLAY_TIMEOUT: Duration = Duration::from_secs(60);

/// The stream in parts: the first one stored before the standby is made, the others ingested
/// while the servers read.
fn parts() -> Vec<Vec<u8>> {
    let mut parts = Vec::new();
    let mut whole = Vec::new();
    let mut config = GenerateConfig {
        blocks: 30,
        ..first_config()
    };
    for seed in 0..6 {
        let mut part = Vec::new();
        eventgen::generate(&config, &mut part).unwrap();
        whole.extend_from_slice(&part);
        parts.push(part);
        let reference = Reference::from_ndjson(&whole);
        let last_time = reference
            .entries
            .iter()
            .map(|entry| entry.key.0)
            .chain(reference.oracle.iter().map(|datum| datum.key.0))
            .max()
            .unwrap();
        config = GenerateConfig {
            seed: 500 + seed,
            blocks: 10,
            start_height: config.end_height(),
            start_time_nanos: last_time,
            genesis: false,
            ..first_config()
        };
    }
    parts
}

fn ingest_into(url: &str, stream: &[u8]) {
    ingest_with(url, stream, &IngestOptions::default());
}

fn ingest_with(url: &str, stream: &[u8], options: &IngestOptions<'_>) {
    // The reader runs on threads of its own, which need the stream as their own.
    let stream = stream.to_vec();
    let mut writer = FourBatches(PgStore::writer(url).unwrap());
    ingest::ingest(io::Cursor::new(stream), &mut writer, options, &mut |_| {}).unwrap();
}

/// PostgreSQL's writer with transactions of at most the default four batches
/// ([`storage::TRANSACTION_BATCHES`]) instead of its own 32, so that a stream as small as these
/// tests' is cut into several transactions, and a party's lines into several segments, by
/// `max_batch_rows` alone.
struct FourBatches<W>(W);

impl<W: IngestWriter> IngestWriter for FourBatches<W> {
    fn chain(&mut self) -> Result<ChainState, storage::Error> {
        self.0.chain()
    }

    fn blocks(&mut self, height: u64) -> Result<Vec<BlockRecord>, storage::Error> {
        self.0.blocks(height)
    }

    fn commit(&mut self, batch: &IngestBatch) -> Result<(), storage::Error> {
        self.0.commit(batch)
    }

    fn stage(&mut self, batch: &IngestBatch) -> Result<(), storage::Error> {
        self.0.stage(batch)
    }
}

fn serve(url: &str) -> Server {
    let store = PgStore::open(url, PgConfig::default()).unwrap();
    Server::start(Arc::new(store), AppConfig::default())
}

/// The height an answer says it holds at least.
fn block_height(response: &crate::support::Response, context: &str) -> u64 {
    response
        .header("x-block-height")
        .unwrap_or_else(|| panic!("{context}: no X-Block-Height"))
        .parse()
        .unwrap()
}

/// The block the model numbers as the last one at `height` (it numbers blocks in stream
/// order from 0: the genesis block and the first one share the first height).
fn block_at(height: u64) -> u64 {
    height - first_config().start_height + 1
}

/// Checks an export of `party` against the model: it must be the export at one block, at or
/// after its `X-Block-Height`; answers that block.
fn check_export(
    reference: &Reference,
    party: &str,
    addr: SocketAddr,
    context: &str,
) -> (u64, String) {
    let response = get(addr, &format!("{EXPORT}?partyId={party}"), &[]);
    assert_eq!(response.status, 200, "{context}: {}", response.text());
    let at_least = block_at(block_height(&response, context));
    let rows: Vec<_> = reference.entries_of(party).collect();
    let n_rows = response.text().lines().count() - 1;
    assert!(
        n_rows <= rows.len(),
        "{context}: {n_rows} rows, more than the stream's"
    );
    let last = n_rows.checked_sub(1).map_or(0, |last| rows[last].key.1);
    let block = last.max(at_least);
    let mut expected = String::from(CSV_HEADER);
    for entry in rows.iter().filter(|entry| entry.key.1 <= block) {
        expected.push_str(&entry.csv_line(party));
    }
    assert!(
        response.text() == expected,
        "{context}: {n_rows} rows, not the export at block {block} (X-Block-Height at block {at_least}), \
         which has {} rows",
        expected.lines().count() - 1
    );
    (block, expected)
}

/// Checks the newest page of oracle data against the model, as [`check_export`] does.
fn check_page(reference: &Reference, addr: SocketAddr, context: &str) -> (u64, Vec<Value>) {
    let response = get(addr, NEWEST_PAGE, &[]);
    assert_eq!(response.status, 200, "{context}: {}", response.text());
    let at_least = block_at(block_height(&response, context));
    let nodes: Vec<Value> = response.json()["oracleData"]["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|edge| edge["node"].clone())
        .collect();
    let newest = nodes.first().map_or(0, |node| {
        reference
            .oracle
            .iter()
            .find(|datum| &datum.node == node)
            .unwrap_or_else(|| panic!("{context}: a datum the stream does not hold"))
            .key
            .1
    });
    let block = newest.max(at_least);
    let expected: Vec<Value> = reference
        .oracle_rows(None, true)
        .into_iter()
        .filter(|datum| datum.key.1 <= block)
        .take(20)
        .map(|datum| datum.node.clone())
        .collect();
    assert!(
        nodes == expected,
        "{context}: not the newest page at block {block} (X-Block-Height at block {at_least})"
    );
    (block, nodes)
}

/// What the servers answered, by block: answers of one block must be equal.
#[derive(Default)]
struct Seen {
    exports: HashMap<u64, String>,
    pages: HashMap<u64, Vec<Value>>,
}

impl Seen {
    fn round(&mut self, reference: &Reference, party: &str, servers: &[(&str, SocketAddr)]) {
        for (name, addr) in servers {
            let (block, export) = check_export(reference, party, *addr, name);
            let first = self.exports.entry(block).or_insert_with(|| export.clone());
            assert!(*first == export, "{name}: another export at block {block}");
            let (block, page) = check_page(reference, *addr, name);
            let first = self.pages.entry(block).or_insert_with(|| page.clone());
            assert!(*first == page, "{name}: another page at block {block}");
        }
    }
}

#[test]
fn servers_on_a_hot_standby_answer_as_the_primary_at_the_same_block() {
    let Some(db) = TestDatabase::create("replica") else {
        return;
    };
    let Some(programs) = Programs::find("the read-replica test") else {
        return;
    };
    let parts = parts();
    let whole: Vec<u8> = parts.concat();
    let reference = Reference::from_ndjson(&whole);
    let party = reference.largest_party();
    let final_block = reference
        .entries
        .iter()
        .map(|entry| entry.key.1)
        .max()
        .unwrap();

    ingest_into(db.url(), &parts[0]);
    let dir = tempfile::tempdir().unwrap();
    let Some(standby) = Standby::start(&programs, db.admin_url(), dir.path()) else {
        return;
    };
    let primary = serve(db.url());
    let replicas = [
        serve(&standby.url(db.name())),
        serve(&standby.url(db.name())),
    ];
    let servers = [
        ("primary", primary.addr),
        ("standby server 1", replicas[0].addr),
        ("standby server 2", replicas[1].addr),
    ];

    // The ingest writes each part once the readers have finished a round since the last one,
    // so that reads and writes overlap whatever the machine's speed.
    let (round_done, rounds) = mpsc::channel::<()>();
    let url = db.url().to_owned();
    let ingest = std::thread::spawn(move || {
        for part in &parts[1..] {
            if rounds.recv().is_err() {
                return;
            }
            ingest_into(&url, part);
        }
    });
    let mut seen = Seen::default();
    while !ingest.is_finished() {
        seen.round(&reference, &party, &servers);
        let _ = round_done.send(());
    }
    ingest.join().unwrap();

    // Caught up: the standby's servers show the last block, and answer as the primary does.
    standby.wait_replayed(&mut db.admin(), REPLAY_TIMEOUT);
    for (name, addr) in &servers {
        let deadline = std::time::Instant::now() + REPLAY_TIMEOUT;
        // The event: the server's chain tip (refreshed once a second) reaching the last block.
        while block_at(block_height(&get(*addr, NEWEST_PAGE, &[]), name)) < final_block {
            assert!(
                std::time::Instant::now() < deadline,
                "{name}: behind the standby"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    seen.round(&reference, &party, &servers);
    assert!(seen.exports.contains_key(&final_block));
    // The metrics show each server's own last block too.
    let final_height = first_config().start_height + final_block - 1;
    for (name, addr) in &servers {
        let metrics = get(*addr, "/metrics", &[]);
        let wanted = format!("datanode_last_block_height {final_height}");
        assert!(
            metrics.text().lines().any(|line| line == wanted),
            "{name}: no {wanted} in /metrics"
        );
    }
    assert!(
        seen.exports.len() > 1,
        "every answer was at one block: the reads did not overlap the ingest"
    );
    drop(replicas);
    drop(standby);
}

/// A sink that runs `pause` once, on the first rows it is handed, as a client that stops
/// reading for as long as it likes would; then takes the rest.
struct PausingSink<F: FnMut()> {
    csv: Vec<u8>,
    pause: Option<F>,
}

impl<F: FnMut()> ExportSink for PausingSink<F> {
    fn started(&mut self) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }

    fn rows(&mut self, csv_lines: &[u8], _count: u64) -> ControlFlow<()> {
        self.csv.extend_from_slice(csv_lines);
        if let Some(mut pause) = self.pause.take() {
            pause();
        }
        ControlFlow::Continue(())
    }
}

/// The sessions of `database` on the standby, other than the asking one, that hold a snapshot
/// or run a statement.
fn busy_sessions(standby: &mut postgres::Client, database: &str) -> i64 {
    standby
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 \
             AND pid <> pg_backend_pid() AND (state <> 'idle' OR backend_xmin IS NOT NULL)",
            &[&database],
        )
        .unwrap()
        .get(0)
}

/// A client that stops reading an export from the standby while the primary rewrites and
/// vacuums rows does not get its export cut: the export holds no snapshot while the client
/// reads (issue 24). The standby here cancels a conflicting snapshot at once
/// (`max_standby_streaming_delay = 0`, not its 30 s default), and the test shows that the
/// primary's work does conflict: a snapshot the test holds over it is cancelled.
#[test]
fn a_paused_export_on_the_standby_outlives_the_primarys_vacuum() {
    let Some(db) = TestDatabase::create("replica_paused_export") else {
        return;
    };
    let Some(programs) = Programs::find("the read-replica export test") else {
        return;
    };
    let parts = parts();
    let reference = Reference::from_ndjson(&parts[0]);
    let party = reference.largest_party();
    // Small batches: the party's lines in several segments, so its export reads several chunks.
    let small_batches = IngestOptions {
        max_batch_rows: 40,
        ..IngestOptions::default()
    };
    ingest_with(db.url(), &parts[0], &small_batches);
    let segments: i64 = db
        .client()
        .query_one(
            "SELECT count(*) FROM ledger_segments s JOIN parties p ON p.id = s.party \
             WHERE p.hex = decode($1, 'hex')",
            &[&party],
        )
        .unwrap()
        .get(0);
    assert!(
        segments >= 3,
        "{segments} segments: the export would be one chunk"
    );

    let dir = tempfile::tempdir().unwrap();
    let Some(standby) = Standby::start(&programs, db.admin_url(), dir.path()) else {
        return;
    };
    let mut watcher = postgres::Client::connect(&standby.url(db.name()), postgres::NoTls).unwrap();
    watcher
        .batch_execute("ALTER SYSTEM SET max_standby_streaming_delay = 0")
        .unwrap();
    watcher.batch_execute("SELECT pg_reload_conf()").unwrap();
    // A snapshot held over the primary's work: the control, which must be cancelled.
    let mut holder = postgres::Client::connect(&standby.url(db.name()), postgres::NoTls).unwrap();
    holder
        .batch_execute(
            "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM ledger_segments",
        )
        .unwrap();

    // One segment a chunk: every chunk after the first is read while the client pauses.
    let store = PgStore::open(
        &standby.url(db.name()),
        PgConfig {
            export_chunk_bytes: 1,
            ..PgConfig::default()
        },
    )
    .unwrap();
    let url = db.url().to_owned();
    let mut sink = PausingSink {
        csv: Vec::new(),
        pause: Some(|| {
            // The export's sessions on the standby settle: the chunk read ahead is read and
            // its snapshot ended. One held while the client reads never settles.
            let mut settled = false;
            for _ in 0..2000 {
                // The holder is the one busy session allowed.
                if busy_sessions(&mut watcher, db.name()) == 1 {
                    settled = true;
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            assert!(
                settled,
                "the export holds a snapshot on the standby while its client waits"
            );
            ingest_with(&url, &parts[1], &small_batches);
            db.client().batch_execute("VACUUM").unwrap();
            standby.wait_replayed(&mut db.admin(), REPLAY_TIMEOUT);
        }),
    };
    let filter = ExportFilter {
        party: party.parse().unwrap(),
        asset: None,
        range: TimeRange::ALL,
    };
    let summary = store
        .export_ledger(&filter, &mut sink)
        .expect("the paused export was cut");
    assert!(sink.pause.is_none(), "the export never paused");

    // The control: the primary's rewrites and vacuum did conflict with a held snapshot.
    let control = holder.simple_query("SELECT count(*) FROM ledger_segments");
    let cancelled = control
        .as_ref()
        .err()
        .and_then(|err| err.as_db_error())
        .is_some_and(|err| err.message().contains("conflict with recovery"))
        || control.as_ref().is_err_and(|err| err.is_closed());
    assert!(
        cancelled,
        "a snapshot held over the primary's work was not cancelled ({control:?}): the test \
         shows nothing"
    );

    // The export is the party's at the block it started at, byte for byte.
    let expected: String = reference
        .entries_of(&party)
        .map(|entry| entry.csv_line(&party))
        .collect();
    assert_eq!(summary.rows as usize, expected.lines().count());
    assert!(
        sink.csv == expected.as_bytes(),
        "the paused export is not the export at its first block"
    );
    drop(store);
    drop(standby);
}
