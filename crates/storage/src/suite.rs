//! The conformance suite: the behaviour every backend must show, written once against the store
//! traits, for the tests of every backend crate (this crate's `cfg(test)`, or the `suite`
//! feature).
//!
//! Each public function taking a store and a writer is one test: it takes a fresh, empty store
//! and that store's writer, fills the store through the writer and checks the answers through
//! the read traits only. Each backend instantiates the suite with [`backend_tests`], one
//! `#[test]` per function, so SQLite and PostgreSQL run the very same checks. It is test code:
//! a failed check panics, and it unwraps.

#![allow(clippy::unwrap_used)]

pub mod damage;
mod export;
pub mod golden;
mod oracle;
pub mod packing;
mod writer;

use std::ops::{ControlFlow, Range};

use ledger_core::{AssetId, EntryKey, ExportFilter, OracleSpecId, PartyId, TimeRange, VegaTime};
use oracle_core::{Edge, Page, PageRequest, PaginationParams, Position};

pub use crate::Store;
use crate::{
    ExportSink, ExportSummary, IngestBatch, IngestWriter, LedgerRow, OraclePage, OracleRow,
};

pub use export::{
    export_filters_by_party_asset_and_half_open_time_range,
    export_is_one_cut_while_batches_commit_between_chunks, export_orders_rows_across_assets,
    export_reads_one_snapshot_while_a_batch_commits,
    export_spans_many_segments_committed_in_any_order, export_stops_when_the_sink_breaks,
};
pub use oracle::{
    oracle_cursor_between_or_beyond_rows, oracle_data_version_changes_with_every_commit,
    oracle_latest_value_of_a_spec, oracle_pages_read_ahead_are_the_walks_next_pages,
    oracle_pages_walk_data_of_many_kilobytes, oracle_pages_walk_every_dataset_in_both_directions,
    oracle_unknown_spec_has_an_empty_page,
};
pub use writer::{
    a_datum_twice_in_one_batch_reads_as_the_first, block, block_state_round_trips,
    chain_tip_follows_commits, committing_a_batch_twice_adds_nothing, empty_store_is_healthy,
    failed_commit_leaves_nothing_and_the_writer_usable, staged_batches_commit_as_one_transaction,
    two_blocks_of_one_height_and_one_chain,
};

/// One `#[test]` per suite function for a backend. `$run` is a function
/// `fn(test: &str, body: impl FnOnce(&Store, &mut dyn IngestWriter))` that makes a fresh, empty
/// store and its writer (or skips, printing why) and runs `body` on them.
#[macro_export]
macro_rules! backend_tests {
    ($run:path) => {
        $crate::backend_tests!(
            @each $run;
            export_orders_rows_across_assets,
            export_filters_by_party_asset_and_half_open_time_range,
            export_stops_when_the_sink_breaks,
            export_reads_one_snapshot_while_a_batch_commits,
            export_is_one_cut_while_batches_commit_between_chunks,
            export_spans_many_segments_committed_in_any_order,
            oracle_pages_walk_every_dataset_in_both_directions,
            oracle_pages_walk_data_of_many_kilobytes,
            oracle_pages_read_ahead_are_the_walks_next_pages,
            oracle_unknown_spec_has_an_empty_page,
            oracle_latest_value_of_a_spec,
            oracle_cursor_between_or_beyond_rows,
            oracle_data_version_changes_with_every_commit,
            committing_a_batch_twice_adds_nothing,
            a_datum_twice_in_one_batch_reads_as_the_first,
            block_state_round_trips,
            two_blocks_of_one_height_and_one_chain,
            chain_tip_follows_commits,
            failed_commit_leaves_nothing_and_the_writer_usable,
            staged_batches_commit_as_one_transaction,
            empty_store_is_healthy,
        );
    };
    (@each $run:path; $($name:ident),+ $(,)?) => {$(
        #[test]
        fn $name() {
            $run(stringify!($name), |store, writer| $crate::suite::$name(store, writer));
        }
    )+};
}
pub use crate::backend_tests;

/// The party whose 32 id bytes are all `n`.
pub fn party(n: u8) -> PartyId {
    PartyId::from_bytes([n; 32])
}

/// The asset whose 32 id bytes are all `n`.
pub fn asset(n: u8) -> AssetId {
    AssetId::from_bytes([n; 32])
}

/// The oracle spec whose 32 id bytes are all `n`.
pub fn spec(n: u8) -> OracleSpecId {
    OracleSpecId::from_bytes([n; 32])
}

/// A ledger row whose CSV line is just `label`, so that an export reads as a list of labels.
pub fn ledger_row(
    label: &str,
    party_n: u8,
    asset_n: u8,
    (vega_time, block, seq, index): (i64, u64, u64, u32),
) -> LedgerRow {
    LedgerRow {
        party: party(party_n),
        asset: asset(asset_n),
        key: EntryKey {
            vega_time: VegaTime::from_nanos(vega_time),
            block,
            seq,
            index,
        },
        csv_line: format!("{label}\n").into_bytes(),
    }
}

/// An oracle datum whose JSON node is just `label`.
pub fn oracle_row(
    label: &str,
    (vega_time, block, seq): (i64, u64, u64),
    specs: &[u8],
) -> OracleRow {
    OracleRow {
        position: Position {
            vega_time,
            block,
            seq,
        },
        matched_specs: specs.iter().map(|n| spec(*n)).collect(),
        json: label.as_bytes().to_vec(),
    }
}

/// A batch of `rows` and nothing else.
pub fn ledger_batch(rows: Vec<LedgerRow>) -> IngestBatch {
    IngestBatch {
        ledger_rows: rows,
        ..IngestBatch::default()
    }
}

/// Collects an export, checking the sink protocol as it goes.
#[derive(Default)]
pub struct Collect {
    /// How many times the export started.
    pub started: u32,
    /// The rows received, as labels (see [`label`]).
    pub labels: Vec<String>,
    /// Break once this many rows came (at the end of the run holding that row).
    pub stop_after: Option<usize>,
    /// Break at the start, before any row.
    pub stop_at_start: bool,
}

impl ExportSink for Collect {
    fn started(&mut self) -> ControlFlow<()> {
        assert!(self.labels.is_empty(), "started after a row");
        self.started += 1;
        if self.stop_at_start {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }

    fn rows(&mut self, csv_lines: &[u8], count: u64) -> ControlFlow<()> {
        assert_eq!(self.started, 1, "a row before started");
        assert!(
            self.stop_after.is_none_or(|n| self.labels.len() < n),
            "a row after Break"
        );
        let lines = split_lines(csv_lines);
        assert_eq!(lines.len() as u64, count, "rows miscounted");
        self.labels.extend(lines.into_iter().map(label));
        if self.stop_after.is_some_and(|n| self.labels.len() >= n) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

/// The lines of a run handed to a sink, each with its `\n`.
pub fn split_lines(csv_lines: &[u8]) -> Vec<&[u8]> {
    assert!(csv_lines.ends_with(b"\n"), "a run ends with a whole line");
    csv_lines.split_inclusive(|b| *b == b'\n').collect()
}

/// The label of a row written by [`ledger_row`].
pub fn label(csv_line: &[u8]) -> String {
    let line = std::str::from_utf8(csv_line).unwrap();
    line.strip_suffix('\n')
        .expect("every csv line ends with a newline")
        .to_owned()
}

/// The export of party `party_n`, of asset `asset_n` when given, over `[start, end)`.
pub fn filter(
    party_n: u8,
    asset_n: Option<u8>,
    start: Option<i64>,
    end: Option<i64>,
) -> ExportFilter {
    ExportFilter {
        party: party(party_n),
        asset: asset_n.map(asset),
        range: TimeRange::new(start, end).unwrap(),
    }
}

/// The whole export of `filter` as labels, with its summary.
pub fn export(store: &impl Store, filter: &ExportFilter) -> (Vec<String>, ExportSummary) {
    let mut sink = Collect::default();
    let summary = store.export_ledger(filter, &mut sink).unwrap();
    assert_eq!(sink.started, 1);
    (sink.labels, summary)
}

/// One page of oracle data.
pub fn page(store: &impl Store, spec_n: Option<u8>, params: PaginationParams<'_>) -> Page<Vec<u8>> {
    let request = PageRequest::parse(&params).unwrap();
    let OraclePage { page, nodes, .. } = store
        .oracle_page(spec_n.map(spec).as_ref(), &request)
        .unwrap();
    owned(page, &nodes)
}

/// A page whose nodes are ranges of `nodes`, with each node's bytes instead.
pub fn owned(page: Page<Range<usize>>, nodes: &[u8]) -> Page<Vec<u8>> {
    Page {
        edges: page
            .edges
            .into_iter()
            .map(|edge| Edge {
                cursor: edge.cursor,
                node: nodes[edge.node].to_vec(),
            })
            .collect(),
        info: page.info,
    }
}

/// The nodes of the first page of `spec_n`'s data, newest first, joined by spaces: the labels
/// of data written by [`oracle_row`].
pub fn spec_labels(store: &impl Store, spec_n: u8) -> String {
    let page = page(store, Some(spec_n), PaginationParams::default());
    let labels: Vec<String> = page
        .edges
        .into_iter()
        .map(|edge| String::from_utf8(edge.node).unwrap())
        .collect();
    labels.join(" ")
}

/// Everything a reader can see: the exports of `parties` and all oracle data, newest first.
pub fn contents(store: &impl Store, parties: &[u8]) -> (Vec<Vec<String>>, Vec<Vec<u8>>) {
    let exports = parties
        .iter()
        .map(|n| export(store, &filter(*n, None, None, None)).0)
        .collect();
    let oracle = page(
        store,
        None,
        PaginationParams {
            first: Some("5000"),
            ..PaginationParams::default()
        },
    );
    assert!(!oracle.info.has_next_page, "the test data fit one page");
    let oracle = oracle.edges.into_iter().map(|edge| edge.node).collect();
    (exports, oracle)
}

/// Commits `batch`, panicking when the writer refuses it.
pub fn commit(writer: &mut dyn IngestWriter, batch: &IngestBatch) {
    writer.commit(batch).unwrap();
}
