//! The same events fed as NDJSON, as a Vega event buffer file and over Vega's event socket give
//! byte-identical answers from both endpoints.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use eventgen::{Format, GenerateConfig};
use http_api::AppConfig;
use ingest::{IngestOptions, Input, Socket};
use sp_pair::PairSender;
use storage::{SqliteConfig, SqliteStore};

use crate::support::{Dataset, Server, get};

/// How long a test waits for something that normally takes milliseconds, on a busy machine.
const PATIENCE: Duration = Duration::from_secs(90);

#[test]
fn ndjson_buffer_file_and_socket_give_byte_identical_answers() {
    let config = GenerateConfig {
        seed: 7,
        blocks: 60,
        parties: 4,
        assets: 2,
        markets: 2,
        specs: 3,
        entries_per_block: 6,
        oracle_data_per_block: 3,
        other_events_share: 0.5,
        ..GenerateConfig::default()
    };
    let dataset = Dataset::build(config);
    let mut buffer = Vec::new();
    eventgen::generate_as(&dataset.config, Format::VegaBuffer, &mut buffer).unwrap();
    let dir = tempfile::tempdir().unwrap();

    let from_buffer = open(dir.path(), "buffer");
    let stats = ingest::ingest(
        std::io::Cursor::new(buffer.clone()),
        &mut from_buffer.writer().unwrap(),
        &IngestOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(stats.ledger_entries, dataset.summary.ledger_entries);

    let from_socket = open(dir.path(), "socket");
    let messages = buffer_records(&buffer);
    let lines: Vec<&[u8]> = dataset.stream.split(|&b| b == b'\n').collect();
    // The buffer file holds the NDJSON stream's events in the same order.
    assert_eq!(messages.len(), dataset.summary.events as usize);
    let begins: Vec<usize> = (0..messages.len())
        .filter(|&idx| contains(lines[idx], b"BUS_EVENT_TYPE_BEGIN_BLOCK"))
        .collect();
    // The first peer goes away three events into a block in the middle; the next one resends
    // from the block before it, whose events are stored already.
    let cut_block = begins.len() / 2;
    let plan = Resend {
        cut_at: begins[cut_block] + 3,
        resume_from: begins[cut_block - 1],
    };
    let last_height = dataset.config.end_height() - 1;
    let stats = ingest_over_socket(&from_socket, &messages, plan, last_height);
    assert_eq!(stats.ledger_entries, dataset.summary.ledger_entries);
    assert!(stats.skipped_events > 0, "{stats:?}");

    let from_ndjson = Server::start(dataset.store.clone(), AppConfig::default());
    let from_buffer = Server::start(Arc::new(from_buffer), AppConfig::default());
    let from_socket = Server::start(Arc::new(from_socket), AppConfig::default());
    let reference = &dataset.reference;
    let mut targets = Vec::new();
    for party in reference.parties() {
        targets.push(format!("/api/v2/ledgerentry/export?partyId={party}"));
        for asset in reference.assets_of(&party) {
            targets.push(format!(
                "/api/v2/ledgerentry/export?partyId={party}&assetId={asset}"
            ));
        }
    }
    let mut specs: Vec<&String> = reference.oracle.iter().flat_map(|d| &d.specs).collect();
    specs.sort();
    specs.dedup();
    for spec in specs {
        targets.push(format!(
            "/api/v2/oracle/data?oracleSpecId={spec}&pagination.first=1000"
        ));
    }
    targets.push("/api/v2/oracle/data?pagination.first=1000".to_owned());
    targets.push("/api/v2/oracle/data?pagination.last=7".to_owned());
    for target in &targets {
        let expected = get(from_ndjson.addr, target, &[]);
        assert_eq!(expected.status, 200, "{target}");
        assert!(!expected.body.is_empty(), "{target}");
        for (source, server) in [("buffer file", &from_buffer), ("socket", &from_socket)] {
            let found = get(server.addr, target, &[]);
            assert_eq!(found.status, expected.status, "{source}: {target}");
            assert!(
                found.body == expected.body,
                "{source}: {target}: the bodies differ"
            );
        }
    }
}

fn open(dir: &std::path::Path, name: &str) -> SqliteStore {
    SqliteStore::open(dir.join(format!("{name}.sqlite")), SqliteConfig::default())
        .expect("open store")
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// The protobuf `BusEvent`s of a buffer file: each record is a 4-byte big-endian size (8 plus
/// the payload's length), an 8-byte sequence number, and the payload.
fn buffer_records(buffer: &[u8]) -> Vec<&[u8]> {
    let mut records = Vec::new();
    let mut rest = buffer;
    while !rest.is_empty() {
        let size = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        records.push(&rest[4 + 8..4 + size]);
        rest = &rest[4 + size..];
    }
    records
}

/// A peer that goes away before message `cut_at` and whose successor starts again at
/// `resume_from`, as Vega's core resends after a reconnection.
#[derive(Clone, Copy)]
struct Resend {
    cut_at: usize,
    resume_from: usize,
}

/// Sends `messages` to a socket ingest into `store` over two connections, as `plan` says, and
/// waits until block `last_height` is stored.
fn ingest_over_socket(
    store: &SqliteStore,
    messages: &[&[u8]],
    plan: Resend,
    last_height: u64,
) -> ingest::IngestStats {
    let socket = Socket::bind("127.0.0.1:0", 1 << 20).unwrap();
    let address = socket.address().strip_prefix("tcp://").unwrap().to_owned();
    let stop = AtomicBool::new(false);
    // The ingest reports each commit's height: the test waits on those reports, not the clock.
    let (committed, heights) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        let ingest = scope.spawn(|| {
            let options = IngestOptions {
                stop: Some(&stop),
                ..IngestOptions::default()
            };
            ingest::ingest(
                Input::frames(socket),
                &mut store.writer().unwrap(),
                &options,
                &mut |stats| {
                    let _ = committed.send(stats.last_height.unwrap_or(0));
                },
            )
        });
        let mut first = dial(&address);
        first
            .send_all(messages[..plan.cut_at].iter().copied())
            .unwrap();
        drop(first);
        let mut second = dial(&address);
        second
            .send_all(messages[plan.resume_from..].iter().copied())
            .unwrap();
        while heights
            .recv()
            .expect("the ingest ended before it stored the socket's blocks")
            < last_height
        {}
        stop.store(true, Ordering::Relaxed);
        let stats = ingest.join().unwrap().unwrap();
        drop(second);
        stats
    })
}

/// Dials until the socket takes this peer, as Vega's core does: the socket refuses a peer
/// while the previous one's connection is still open.
fn dial(address: &str) -> PairSender {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match PairSender::dial(address) {
            Ok(sender) => return sender,
            Err(error) => assert!(Instant::now() < deadline, "cannot connect: {error}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
