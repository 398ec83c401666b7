//! Tests of [`ingest`](crate::ingest) end to end: event-bus text in, a real SQLite store out,
//! checked through the store's read traits.
//!
//! Shared here: a store in a temporary directory, a builder of event lines, and a snapshot of
//! everything a reader can see, so that "adds nothing" and "the same as one clean run" are
//! plain equality checks.

mod chain;
mod commits;
mod decoders;
mod formats;
mod lines;
mod malformed;
mod resume;
mod rows;
mod socket;

/// `lines` (protobuf JSON events) as a buffer file.
pub(crate) fn buffer(lines: &[String]) -> Vec<u8> {
    crate::transcode::ndjson_to_buffer(&lines::text(lines)).unwrap()
}

/// One protobuf JSON event as protobuf bytes: the payload of its buffer record.
pub(crate) fn encode(line: &str) -> Vec<u8> {
    let record = buffer(&[line.to_owned()]);
    record[bus_proto::buffer::HEADER_LEN..].to_vec()
}

use std::collections::BTreeSet;
use std::ops::ControlFlow;
use std::time::Duration;

use ledger_core::{ExportFilter, OracleSpecId, PartyId, TimeRange};
use oracle_core::{PageRequest, PaginationParams, Position, decode_cursor};
use serde_json::Value;
use storage::{ExportSink, IngestWriter, LedgerStore, OracleStore, SqliteConfig, SqliteStore};
use tempfile::TempDir;

use crate::{IngestError, IngestOptions, IngestStats, ingest};

/// The sample stream of real events, kept with the tests (a copy of the project's reference
/// sample, `../shared/reference/sample-events.ndjson` beside the repository).
const SAMPLE: &str = include_str!("../testdata/sample-events.ndjson");

/// A fresh store in its own temporary directory, removed on drop.
pub(crate) struct TempStore {
    // Dropped before the directory, so that the files are closed first.
    pub(crate) store: SqliteStore,
    _dir: TempDir,
}

impl TempStore {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store =
            SqliteStore::open(dir.path().join("store.db"), SqliteConfig::default()).unwrap();
        Self { store, _dir: dir }
    }

    /// Ingests `input` with the default options through a new writer.
    pub(crate) fn ingest(&self, input: &str) -> Result<IngestStats, IngestError> {
        ingest_with(&mut self.store.writer().unwrap(), input)
    }

    /// Ingests what `socket` receives through a new writer until `stop` is set, reporting each
    /// commit to `progress`.
    pub(crate) fn ingest_socket(
        &self,
        socket: crate::Socket,
        stop: &std::sync::atomic::AtomicBool,
        progress: &mut dyn FnMut(&IngestStats),
    ) -> Result<IngestStats, IngestError> {
        let options = IngestOptions {
            stop: Some(stop),
            ..IngestOptions::default()
        };
        let input = crate::Input::frames(socket);
        ingest(input, &mut self.store.writer().unwrap(), &options, progress)
    }

    /// A store holding one clean run of `input`.
    pub(crate) fn with(input: &str) -> Self {
        let temp = Self::new();
        temp.ingest(input).unwrap();
        temp
    }

    pub(crate) fn snapshot(&self, input: &str) -> Snapshot {
        Snapshot::read(&self.store, input)
    }
}

/// `input` as an owned reader, as [`ingest`] takes it.
pub(crate) fn owned(input: &str) -> std::io::Cursor<Vec<u8>> {
    std::io::Cursor::new(input.as_bytes().to_vec())
}

/// Ingests `input` with the default options.
pub(crate) fn ingest_with(
    writer: &mut dyn IngestWriter,
    input: &str,
) -> Result<IngestStats, IngestError> {
    ingest(owned(input), writer, &IngestOptions::default(), &mut |_| {})
}

/// Everything a reader can see of the parties and specs named in an input.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// Each party's whole export, as text.
    pub(crate) exports: Vec<(PartyId, String)>,
    /// All oracle data, oldest first, with positions.
    pub(crate) oracle: Vec<(Position, String)>,
    /// Each spec's listing, as positions.
    pub(crate) specs: Vec<(OracleSpecId, Vec<Position>)>,
}

impl Snapshot {
    pub(crate) fn read(store: &SqliteStore, input: &str) -> Self {
        let (parties, specs) = ids(input);
        Self {
            exports: parties
                .into_iter()
                .map(|party| (party, export(store, party)))
                .collect(),
            oracle: oracle(store, None),
            specs: specs
                .into_iter()
                .map(|spec| {
                    let positions = oracle(store, Some(spec)).into_iter().map(|(p, _)| p);
                    (spec, positions.collect())
                })
                .collect(),
        }
    }

    /// Export rows across all parties.
    pub(crate) fn ledger_rows(&self) -> usize {
        self.exports
            .iter()
            .map(|(_, text)| text.lines().count())
            .sum()
    }
}

/// Every valid party id that owns an account, and every valid matched spec id, in `input`.
fn ids(input: &str) -> (BTreeSet<PartyId>, BTreeSet<OracleSpecId>) {
    let mut parties = BTreeSet::new();
    let mut specs = BTreeSet::new();
    for line in input.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let movements = &event["ledgerMovements"]["ledgerMovements"];
        for movement in movements.as_array().into_iter().flatten() {
            for entry in movement["entries"].as_array().into_iter().flatten() {
                for side in ["fromAccount", "toAccount"] {
                    if let Some(Ok(party)) = entry[side]["owner"].as_str().map(str::parse) {
                        parties.insert(party);
                    }
                }
            }
        }
        let matched = &event["oracleData"]["externalData"]["data"]["matchedSpecIds"];
        for spec in matched.as_array().into_iter().flatten() {
            if let Some(Ok(spec)) = spec.as_str().map(str::parse) {
                specs.insert(spec);
            }
        }
    }
    (parties, specs)
}

/// A sink that keeps the export as text.
#[derive(Default)]
struct Text(String);

impl ExportSink for Text {
    fn started(&mut self) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }

    fn rows(&mut self, csv_lines: &[u8], _count: u64) -> ControlFlow<()> {
        self.0.push_str(std::str::from_utf8(csv_lines).unwrap());
        ControlFlow::Continue(())
    }
}

/// The whole export of `party`.
pub(crate) fn export(store: &SqliteStore, party: PartyId) -> String {
    let filter = ExportFilter {
        party,
        asset: None,
        range: TimeRange::ALL,
    };
    let mut sink = Text::default();
    store.export_ledger(&filter, &mut sink).unwrap();
    sink.0
}

/// All oracle data (of `spec`), oldest first.
pub(crate) fn oracle(store: &SqliteStore, spec: Option<OracleSpecId>) -> Vec<(Position, String)> {
    let mut all = Vec::new();
    let mut after = String::new();
    loop {
        let request = PageRequest::parse(&PaginationParams {
            first: Some("5000"),
            after: Some(&after),
            newest_first: Some("false"),
            ..PaginationParams::default()
        })
        .unwrap();
        let page = store.oracle_page(spec.as_ref(), &request).unwrap();
        for edge in &page.page.edges {
            let node = String::from_utf8(page.node(edge).to_vec()).unwrap();
            all.push((decode_cursor(&edge.cursor).unwrap(), node));
        }
        if !page.page.info.has_next_page {
            return all;
        }
        after = page.page.info.end_cursor.to_string();
    }
}

/// The sample stream's lines, without the blank ones.
pub(crate) fn sample_lines() -> Vec<&'static str> {
    SAMPLE
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect()
}

pub(crate) fn join(lines: &[&str]) -> String {
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

/// Options that commit only when the input goes quiet, after `idle`.
pub(crate) fn idle_only(idle: Duration) -> IngestOptions<'static> {
    IngestOptions {
        idle_commit: idle,
        max_batch_age: Duration::from_secs(3600),
        ..IngestOptions::default()
    }
}

/// The `type` of an event line, for picking lines out of a stream.
pub(crate) fn event_type(line: &str) -> String {
    let event: Value = serde_json::from_str(line).unwrap();
    event["type"].as_str().unwrap_or_default().to_owned()
}

/// A JSON value as one line.
pub(crate) fn line(value: &Value) -> String {
    serde_json::to_string(value).unwrap()
}
