//! The ledger export: order, filters, early stop and snapshot isolation.

use std::ops::ControlFlow;

use super::{Collect, Store, commit, export, filter, label, ledger_batch, ledger_row};
use crate::{BlockRecord, BlockState, ExportSink, IngestBatch, IngestWriter, LedgerRow};

/// (label, party, asset, (vega time, block, seq, index)).
type RowSpec = (&'static str, u8, u8, (i64, u64, u64, u32));

/// Party 1 holds rows in assets 1–3 that interleave in the total order, with ties on the time,
/// the block and the sequence broken by the next field; parties 2 and 3 share some entries.
const ROWS: &[RowSpec] = &[
    ("min", 1, 1, (i64::MIN, 1, 0, 0)),
    ("a", 1, 1, (100, 10, 1, 0)),
    ("b", 1, 2, (100, 10, 2, 0)),
    ("c", 1, 1, (100, 10, 2, 1)),
    ("d", 1, 3, (100, 11, 0, 0)),
    ("e", 1, 2, (150, 12, 5, 0)),
    ("f", 1, 1, (200, 13, 1, 0)),
    ("g", 1, 3, (200, 13, 1, 1)),
    ("h", 1, 1, (250, 14, 0, 0)),
    ("max", 1, 2, (i64::MAX, 99, 0, 0)),
    ("x", 2, 1, (100, 10, 1, 0)),
    ("y", 2, 2, (150, 12, 5, 0)),
    ("z", 3, 3, (300, 15, 0, 0)),
];

const ALL_OF_PARTY_1: &str = "min a b c d e f g h max";

fn rows(specs: &[RowSpec]) -> Vec<LedgerRow> {
    specs
        .iter()
        .map(|(label, party, asset, key)| ledger_row(label, *party, *asset, *key))
        .collect()
}

/// Stores [`ROWS`] in two batches, each in reverse order, so that no order comes for free.
fn fill(writer: &mut dyn IngestWriter) {
    let (first, second) = ROWS.split_at(ROWS.len() / 2);
    for half in [second, first] {
        let mut batch = rows(half);
        batch.reverse();
        commit(writer, &ledger_batch(batch));
    }
}

#[track_caller]
fn check(
    store: &impl Store,
    (party, asset, start, end): (u8, Option<u8>, Option<i64>, Option<i64>),
    expected: &str,
) {
    let (labels, summary) = export(store, &filter(party, asset, start, end));
    assert_eq!(labels.join(" "), expected);
    assert_eq!(summary.rows, labels.len() as u64);
    assert!(!summary.stopped);
}

/// Conformance test: export orders rows across assets.
pub fn export_orders_rows_across_assets<S: Store>(store: &S, writer: &mut dyn IngestWriter) {
    fill(writer);
    check(store, (1, None, None, None), ALL_OF_PARTY_1);
    check(store, (2, None, None, None), "x y");
    check(store, (3, None, None, None), "z");
}

/// Conformance test: export filters by party asset and half open time range.
pub fn export_filters_by_party_asset_and_half_open_time_range<S: Store>(
    store: &S,
    writer: &mut dyn IngestWriter,
) {
    check(store, (1, None, None, None), "");
    fill(writer);

    check(store, (1, Some(1), None, None), "min a c f h");
    check(store, (1, Some(2), None, None), "b e max");
    check(store, (1, Some(3), None, None), "d g");
    check(store, (2, Some(3), None, None), "");
    check(store, (3, Some(3), None, None), "z");
    // Unknown party, unknown asset.
    check(store, (9, None, None, None), "");
    check(store, (1, Some(9), None, None), "");

    // [start, end): a row exactly at the start is in, one exactly at the end is out.
    check(store, (1, None, Some(100), Some(200)), "a b c d e");
    check(store, (1, None, Some(101), Some(201)), "e f g");
    check(store, (1, Some(1), Some(100), Some(250)), "a c f");
    check(store, (1, None, Some(200), None), "f g h max");
    check(store, (1, None, None, Some(100)), "min");
    check(store, (1, None, None, Some(101)), "min a b c d");
    check(store, (1, None, Some(100), Some(100)), "");
    check(store, (1, None, Some(150), Some(150)), "");
    check(store, (1, None, Some(151), Some(199)), "");

    // The extremes of the time axis.
    check(store, (1, None, Some(i64::MIN), None), ALL_OF_PARTY_1);
    check(
        store,
        (1, None, Some(i64::MIN), Some(i64::MAX)),
        "min a b c d e f g h",
    );
    check(store, (1, None, Some(i64::MIN), Some(i64::MIN)), "");
    check(store, (1, None, None, Some(i64::MIN)), "");
    check(store, (1, None, None, Some(i64::MIN + 1)), "min");
    check(store, (1, None, Some(i64::MAX), None), "max");
    check(store, (1, None, Some(i64::MAX), Some(i64::MAX)), "");
    check(store, (1, Some(2), Some(i64::MAX - 1), None), "max");
}

/// Stops the export of party 1 (of `asset`, if given) after `stop_after` rows: a store hands
/// rows over in runs, so it stops at the end of the run holding that row. What was delivered
/// must be a prefix of the whole export that reaches that row, and counted as such.
#[track_caller]
fn check_stop(store: &impl Store, asset: Option<u8>, stop_after: usize) {
    let (whole, _) = export(store, &filter(1, asset, None, None));
    let mut sink = Collect {
        stop_after: Some(stop_after),
        ..Collect::default()
    };
    let summary = store
        .export_ledger(&filter(1, asset, None, None), &mut sink)
        .unwrap();
    assert_eq!(sink.started, 1);
    assert!(sink.labels.len() >= stop_after.min(whole.len()));
    assert_eq!(sink.labels, whole[..sink.labels.len()]);
    assert_eq!(summary.rows, sink.labels.len() as u64);
    assert_eq!(summary.stopped, stop_after <= sink.labels.len());
}

/// Conformance test: export stops when the sink breaks.
pub fn export_stops_when_the_sink_breaks<S: Store>(store: &S, writer: &mut dyn IngestWriter) {
    fill(writer);
    for stop_after in [1, 3, 5] {
        check_stop(store, Some(1), stop_after);
    }
    for stop_after in [1, 4, 10] {
        check_stop(store, None, stop_after);
    }
    // Asking to stop after more rows than there are is no stop at all.
    check_stop(store, None, 11);

    let mut sink = Collect {
        stop_at_start: true,
        ..Collect::default()
    };
    let summary = store
        .export_ledger(&filter(1, None, None, None), &mut sink)
        .unwrap();
    assert_eq!((sink.started, sink.labels.len()), (1, 0));
    assert_eq!((summary.rows, summary.stopped), (0, true));

    // A stopped export leaves the store as usable as before.
    check(store, (1, None, None, None), ALL_OF_PARTY_1);
}

/// Commits `late` from inside the export's first row.
struct CommitDuringExport<'w> {
    writer: &'w mut dyn IngestWriter,
    late: &'static [RowSpec],
    labels: Vec<String>,
    committed: bool,
}

impl ExportSink for CommitDuringExport<'_> {
    fn started(&mut self) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }

    fn rows(&mut self, csv_lines: &[u8], _count: u64) -> ControlFlow<()> {
        self.labels
            .extend(super::split_lines(csv_lines).into_iter().map(label));
        if !self.committed {
            self.committed = true;
            commit(self.writer, &ledger_batch(rows(self.late)));
        }
        ControlFlow::Continue(())
    }
}

/// Conformance test: export reads one snapshot while a batch commits.
pub fn export_reads_one_snapshot_while_a_batch_commits<S: Store>(
    store: &S,
    writer: &mut dyn IngestWriter,
) {
    fill(writer);
    // A single scan, then a merge of scans; the late rows land before, between and after the
    // rows already read, and in an asset the party did not have.
    let rounds: [(Option<u8>, &[RowSpec], &str, &str); 2] = [
        (
            Some(1),
            &[
                ("r1-early", 1, 1, (50, 5, 0, 0)),
                ("r1-other-asset", 1, 2, (120, 12, 0, 0)),
                ("r1-late", 1, 1, (400, 16, 0, 0)),
            ],
            "min a c f h",
            "min r1-early a c f h r1-late",
        ),
        (
            None,
            &[
                ("r2-early", 1, 3, (60, 6, 0, 0)),
                ("r2-mid", 1, 2, (120, 12, 1, 0)),
                ("r2-new-asset", 1, 4, (130, 12, 2, 0)),
                ("r2-last", 1, 1, (500, 17, 0, 0)),
            ],
            "min r1-early a b c d r1-other-asset e f g h r1-late max",
            "min r1-early r2-early a b c d r1-other-asset r2-mid r2-new-asset e f g h r1-late \
             r2-last max",
        ),
    ];
    for (asset, late, during, after) in rounds {
        let mut sink = CommitDuringExport {
            writer: &mut *writer,
            late,
            labels: Vec::new(),
            committed: false,
        };
        let summary = store
            .export_ledger(&filter(1, asset, None, None), &mut sink)
            .unwrap();
        assert!(sink.committed);
        assert_eq!(sink.labels.join(" "), during);
        assert_eq!(summary.rows, sink.labels.len() as u64);
        check(store, (1, asset, None, None), after);
    }
}

/// A row of the many-segment test: `(label, asset, key)`.
type ManyRow = (String, u8, (i64, u64, u64, u32));

/// An export's filter on party 1 (asset, start, end) and the labels it must give.
type Case = ((Option<u8>, Option<i64>, Option<i64>), Vec<String>);

/// Party 1's rows of the many-segment test, in the total order. Each label is padded to 200
/// bytes, so that they fill several stored segments.
fn many_rows() -> Vec<ManyRow> {
    (0..3_000u32)
        .map(|i| {
            let label = format!("{i:05}{}", "x".repeat(194));
            let asset = (i % 3 + 1) as u8;
            // Three rows a time and a block, told apart by the sequence number.
            let key = (i64::from(i / 3) * 10, u64::from(i / 3), u64::from(i % 3), 0);
            (label, asset, key)
        })
        .collect()
}

/// Conformance test: export spans many segments committed in any order.
pub fn export_spans_many_segments_committed_in_any_order<S: Store>(
    store: &S,
    writer: &mut dyn IngestWriter,
) {
    let all = many_rows();
    let row = |(label, asset, key): &ManyRow| ledger_row(label, 1, *asset, *key);
    // Every seventh row is held back and committed last, into the middle of what is stored.
    let (late, early): (Vec<_>, Vec<_>) = all.iter().enumerate().partition(|(i, _)| i % 7 == 3);
    let early: Vec<LedgerRow> = early.into_iter().map(|(_, r)| row(r)).collect();
    // One large batch, then small ones (a stream committed a block at a time), then the rest;
    // another party's rows ride along.
    let (large, rest) = early.split_at(1_000);
    let (small, last) = rest.split_at(500);
    commit(writer, &ledger_batch(large.to_vec()));
    for chunk in small.chunks(5) {
        let mut batch = chunk.to_vec();
        let key = chunk[0].key;
        let key = (key.vega_time.nanos(), key.block, key.seq, key.index);
        batch.push(ledger_row("other", 2, 1, key));
        commit(writer, &ledger_batch(batch));
    }
    commit(writer, &ledger_batch(last.to_vec()));
    let late: Vec<LedgerRow> = late.into_iter().map(|(_, r)| row(r)).collect();
    commit(writer, &ledger_batch(late.clone()));
    // Committed again, and a large batch again: nothing is added.
    commit(writer, &ledger_batch(late));
    commit(writer, &ledger_batch(large.to_vec()));

    let labels = |keep: &dyn Fn(u8, i64) -> bool| -> Vec<String> {
        all.iter()
            .filter(|(_, asset, key)| keep(*asset, key.0))
            .map(|(label, ..)| label.clone())
            .collect()
    };
    let cases: [Case; 5] = [
        ((None, None, None), labels(&|_, _| true)),
        ((Some(2), None, None), labels(&|asset, _| asset == 2)),
        (
            (None, Some(1_234), Some(7_890)),
            labels(&|_, time| (1_234..7_890).contains(&time)),
        ),
        (
            (Some(3), Some(2_000), Some(6_000)),
            labels(&|asset, time| asset == 3 && (2_000..6_000).contains(&time)),
        ),
        ((None, Some(10_000), None), Vec::new()),
    ];
    for ((asset, start, end), expected) in cases {
        let (got, summary) = export(store, &filter(1, asset, start, end));
        assert_eq!(got.len(), expected.len(), "{asset:?} {start:?} {end:?}");
        assert!(
            got == expected,
            "{asset:?} {start:?} {end:?}: order or content"
        );
        assert_eq!(summary.rows, expected.len() as u64);
    }
    let (other, _) = export(store, &filter(2, None, None, None));
    assert_eq!(other.len(), 100);
}

/// Commits a batch of `party`'s rows after its last one (and one of another party's) each time
/// it receives rows, the first `commits` times: between the chunks of a backend that reads an
/// export in several snapshots.
struct CommitBetweenChunks<'w> {
    writer: &'w mut dyn IngestWriter,
    /// The next appended row's number, which also makes its key.
    next: u32,
    commits: u32,
    labels: Vec<String>,
}

impl CommitBetweenChunks<'_> {
    /// Rows keyed after every row of [`many_rows`], in blocks after its own, each batch with its
    /// block record, as an ingest commits a stream's next blocks; some in an asset new to the
    /// party.
    fn late_batch(&mut self) -> IngestBatch {
        let mut rows = Vec::new();
        for _ in 0..600 {
            let n = self.next;
            self.next += 1;
            let block = 10_000 + u64::from(n / 3);
            let key = (100_000 + i64::from(n / 3) * 10, block, u64::from(n % 3), 0);
            let label = format!("late{n:05}{}", "y".repeat(190));
            rows.push(ledger_row(&label, 1, (n % 4 + 1) as u8, key));
            rows.push(ledger_row(&label, 2, 1, key));
        }
        let mut batch = ledger_batch(rows);
        let last = batch.ledger_rows.last().expect("rows").key.block;
        batch.blocks.push(BlockRecord {
            height: last,
            hash: None,
            seq_base: 0,
            state: BlockState {
                vega_time: None,
                last_seq: 2,
            },
        });
        batch
    }
}

impl ExportSink for CommitBetweenChunks<'_> {
    fn started(&mut self) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }

    fn rows(&mut self, csv_lines: &[u8], _count: u64) -> ControlFlow<()> {
        self.labels
            .extend(super::split_lines(csv_lines).into_iter().map(label));
        if self.commits > 0 {
            self.commits -= 1;
            let batch = self.late_batch();
            commit(self.writer, &batch);
        }
        ControlFlow::Continue(())
    }
}

/// "One consistent cut": batches committed while an export runs, between the chunks of a
/// backend that reads one in several snapshots, never show in it; the answer is byte for byte
/// what the store held when the export started.
pub fn export_is_one_cut_while_batches_commit_between_chunks<S: Store>(
    store: &S,
    writer: &mut dyn IngestWriter,
) {
    let stored: Vec<LedgerRow> = many_rows()
        .iter()
        .chain(many_rows().iter())
        .enumerate()
        .map(|(i, (label, asset, (time, block, seq, idx)))| {
            // Twice the many-segment rows: enough for several chunks of two segments.
            let n = i as u64 / 3;
            let key = (*time, *block, *seq, *idx);
            let key = (n as i64 * 10, n, key.2, key.3);
            ledger_row(&format!("{i:05}{label}"), 1, *asset, key)
        })
        .collect();
    for part in stored.chunks(1_500) {
        commit(writer, &ledger_batch(part.to_vec()));
    }
    let mut next = 0;
    for (asset, start, end) in [
        (None, None, None),
        (Some(2), None, None),
        (None, Some(1_234), None),
        (Some(3), Some(2_000), Some(19_000)),
    ] {
        let filter = filter(1, asset, start, end);
        let (before, _) = export(store, &filter);
        let mut sink = CommitBetweenChunks {
            writer: &mut *writer,
            next,
            commits: 3,
            labels: Vec::new(),
        };
        let summary = store.export_ledger(&filter, &mut sink).unwrap();
        assert_eq!(
            sink.commits, 0,
            "{filter:?}: a batch committed after each of three runs"
        );
        next = sink.next;
        assert_eq!(sink.labels.len(), before.len(), "{filter:?}");
        assert!(
            sink.labels == before,
            "{filter:?}: the answer is the cut at the start"
        );
        assert_eq!(summary.rows, before.len() as u64);
        // The batches did land, and the next export shows them.
        let (after, _) = export(store, &filter);
        assert!(after.len() > before.len() || end.is_some(), "{filter:?}");
        assert_eq!(after[..before.len()], before[..], "{filter:?}");
    }
}
