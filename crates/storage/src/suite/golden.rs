//! What a store answers, written down once and compared byte for byte: the answers of the
//! committed fixtures (`tests/fixtures/`, see its README), databases that released versions of
//! this program wrote and that the current code must keep reading alike.
//!
//! An answers file is text in sections, each a question and the answer's bytes:
//!
//! ```text
//! == export <party hex>
//! <the party's whole export, its CSV lines as the store hands them over>
//! == oracle
//! <cursor> <JSON node>     one line per edge of the first page of 1000, default order
//! page next=<bool> previous=<bool> start=<cursor> end=<cursor>
//! == oracle spec <spec hex>
//! <the same, for the data matched to that spec>
//! == chain
//! chain=<id> first=<height>@<vega time> last=<height>@<vega time>   as the writer finds it
//! == blocks <height>
//! height=<h> seq_base=<n> hash=<hash> vega_time=<t> last_seq=<n>   one line per stored block
//! ```
//!
//! The questions are the file's own header lines, so the file says what is asked as well as
//! what must be answered, and a party or datum missing from the store shows as a difference.

use std::io::Write as _;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use ledger_core::{ExportFilter, OracleSpecId, PartyId, TimeRange};
use oracle_core::{Page, PageRequest, PaginationParams};

use super::{Store, split_lines};
use crate::{BlockTime, ExportSink, IngestWriter, OraclePage};

/// The committed fixtures and their answers.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Asks `store` and its `writer` every question of the answers file `name` and asserts that
/// they answer each byte for byte as written there. On a difference, the answers are written
/// to a temporary file named in the failure, to compare and review.
#[track_caller]
pub fn check_answers(store: &impl Store, writer: &mut dyn IngestWriter, name: &str) {
    let expected = std::fs::read(fixture(name)).unwrap();
    let questions: Vec<&str> = expected
        .split(|b| *b == b'\n')
        .filter_map(|line| line.strip_prefix(b"== "))
        .map(|question| std::str::from_utf8(question).unwrap())
        .collect();
    assert!(!questions.is_empty(), "{name} asks nothing");
    let mut answers = Vec::new();
    for question in questions {
        writeln!(answers, "== {question}").unwrap();
        answer(store, writer, question, &mut answers);
    }
    if answers != expected {
        let (mut file, actual) = tempfile::Builder::new()
            .prefix(&format!("{name}."))
            .tempfile()
            .unwrap()
            .keep()
            .unwrap();
        file.write_all(&answers).unwrap();
        panic!(
            "the store answers otherwise than {}: see `diff {} {}`",
            fixture(name).display(),
            fixture(name).display(),
            actual.display()
        );
    }
}

/// Appends the store's answer to one question (a section header without its `== `).
fn answer(store: &impl Store, writer: &mut dyn IngestWriter, question: &str, out: &mut Vec<u8>) {
    match question.split(' ').collect::<Vec<_>>()[..] {
        ["export", party] => export(store, party.parse().unwrap(), out),
        ["oracle"] => oracle(store, None, out),
        ["oracle", "spec", spec] => oracle(store, Some(spec.parse().unwrap()), out),
        ["chain"] => chain(writer, out),
        ["blocks", height] => blocks(writer, height.parse().unwrap(), out),
        _ => panic!("unknown question {question:?}"),
    }
}

/// Collects an export's bytes, checking that each run's count is its number of lines.
#[derive(Default)]
struct Bytes {
    bytes: Vec<u8>,
    rows: u64,
}

impl ExportSink for Bytes {
    fn started(&mut self) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }

    fn rows(&mut self, csv_lines: &[u8], count: u64) -> ControlFlow<()> {
        assert_eq!(
            split_lines(csv_lines).len() as u64,
            count,
            "rows miscounted"
        );
        self.bytes.extend_from_slice(csv_lines);
        self.rows += count;
        ControlFlow::Continue(())
    }
}

fn export(store: &impl Store, party: PartyId, out: &mut Vec<u8>) {
    let filter = ExportFilter {
        party,
        asset: None,
        range: TimeRange::new(None, None).unwrap(),
    };
    let mut sink = Bytes::default();
    let summary = store.export_ledger(&filter, &mut sink).unwrap();
    assert_eq!((summary.rows, summary.stopped), (sink.rows, false));
    out.extend_from_slice(&sink.bytes);
}

fn oracle(store: &impl Store, spec: Option<OracleSpecId>, out: &mut Vec<u8>) {
    let request = PageRequest::parse(&PaginationParams {
        first: Some("1000"),
        ..PaginationParams::default()
    })
    .unwrap();
    let OraclePage {
        page: Page { edges, info },
        nodes,
        ..
    } = store.oracle_page(spec.as_ref(), &request).unwrap();
    for edge in edges {
        write!(out, "{} ", edge.cursor.as_str()).unwrap();
        out.extend_from_slice(&nodes[edge.node]);
        out.push(b'\n');
    }
    writeln!(
        out,
        "page next={} previous={} start={} end={}",
        info.has_next_page,
        info.has_previous_page,
        info.start_cursor.as_str(),
        info.end_cursor.as_str()
    )
    .unwrap();
}

/// What an ingest resuming on the store starts from.
fn chain(writer: &mut dyn IngestWriter, out: &mut Vec<u8>) {
    let chain = writer.chain().unwrap();
    let block = |block: Option<BlockTime>| match block {
        Some(BlockTime { height, vega_time }) => format!("{height}@{vega_time:?}"),
        None => "none".to_owned(),
    };
    writeln!(
        out,
        "chain={:?} first={} last={}",
        chain.chain_id,
        block(chain.first),
        block(chain.last)
    )
    .unwrap();
}

fn blocks(writer: &mut dyn IngestWriter, height: u64, out: &mut Vec<u8>) {
    for block in writer.blocks(height).unwrap() {
        writeln!(
            out,
            "height={} seq_base={} hash={:?} vega_time={:?} last_seq={}",
            block.height, block.seq_base, block.hash, block.state.vega_time, block.state.last_seq
        )
        .unwrap();
    }
}
