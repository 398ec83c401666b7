//! How blocks reach the store: whole, in batches, promptly on a live stream, and not at all
//! when the store refuses them.

use std::collections::BTreeMap;
use std::io::{BufReader, Write};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::time::Duration;

use storage::backend::Store as _;
use storage::{BlockRecord, ChainState, IngestBatch, IngestWriter};

use super::lines::{A, Body, T1, block, blocks, entry, text};
use super::{TempStore, export, idle_only, ingest_with, join, owned, sample_lines};
use crate::{IngestError, IngestOptions, IngestStats, ingest};

/// Passes everything on and keeps a copy of every batch written, staged or committed;
/// refuses the `fail_at`-th write as a store does, undoing what is staged.
struct Recording<'w> {
    inner: &'w mut dyn IngestWriter,
    /// What it answers to [`IngestWriter::transaction_batches`]: the inner writer's unless a
    /// test says otherwise.
    transaction_batches: usize,
    batches: Vec<IngestBatch>,
    /// For each of `batches`, whether its write committed.
    commits: Vec<bool>,
    fail_at: Option<usize>,
}

impl<'w> Recording<'w> {
    fn new(inner: &'w mut dyn IngestWriter) -> Self {
        Self {
            transaction_batches: inner.transaction_batches(),
            inner,
            batches: Vec::new(),
            commits: Vec::new(),
            fail_at: None,
        }
    }

    fn record(&mut self, batch: &IngestBatch, commit: bool) -> Result<(), storage::Error> {
        if self.fail_at == Some(self.batches.len() + 1) {
            // A height no store can hold fails the store's transaction.
            let poison = IngestBatch {
                blocks: vec![BlockRecord {
                    height: u64::MAX,
                    hash: None,
                    seq_base: 0,
                    state: storage::BlockState {
                        vega_time: None,
                        last_seq: 0,
                    },
                }],
                ..IngestBatch::default()
            };
            assert!(self.inner.commit(&poison).is_err());
            return Err(storage::Error::Unavailable("disk on fire".into()));
        }
        self.batches.push(batch.clone());
        self.commits.push(commit);
        if commit {
            self.inner.commit(batch)
        } else {
            self.inner.stage(batch)
        }
    }

    /// The batches of each committed transaction, in order; the staged batches of a
    /// transaction never committed are left out.
    fn transactions(&self) -> Vec<Vec<&IngestBatch>> {
        let mut transactions = Vec::new();
        let mut open = Vec::new();
        for (batch, commit) in self.batches.iter().zip(&self.commits) {
            open.push(batch);
            if *commit {
                transactions.push(std::mem::take(&mut open));
            }
        }
        transactions
    }
}

impl IngestWriter for Recording<'_> {
    fn chain(&mut self) -> Result<ChainState, storage::Error> {
        self.inner.chain()
    }

    fn blocks(&mut self, height: u64) -> Result<Vec<BlockRecord>, storage::Error> {
        self.inner.blocks(height)
    }

    fn commit(&mut self, batch: &IngestBatch) -> Result<(), storage::Error> {
        self.record(batch, true)
    }

    fn stage(&mut self, batch: &IngestBatch) -> Result<(), storage::Error> {
        self.record(batch, false)
    }

    fn transaction_batches(&self) -> usize {
        self.transaction_batches
    }
}

/// Every block of `batches` lies in exactly one batch, with all of its rows; returns how many
/// rows each block had.
#[track_caller]
fn check_whole_blocks(batches: &[IngestBatch]) -> BTreeMap<u64, usize> {
    let mut rows_per_block = BTreeMap::new();
    for batch in batches {
        let heights: Vec<u64> = batch.blocks.iter().map(|block| block.height).collect();
        for height in &heights {
            assert!(
                rows_per_block.insert(*height, 0).is_none(),
                "block {height} in two batches"
            );
        }
        let row_blocks = (batch.ledger_rows.iter().map(|row| row.key.block))
            .chain(batch.oracle_rows.iter().map(|row| row.position.block));
        for block in row_blocks {
            assert!(
                heights.contains(&block),
                "a row of block {block} without its block"
            );
            *rows_per_block.get_mut(&block).unwrap() += 1;
        }
    }
    rows_per_block
}

#[test]
fn blocks_commit_whole_whatever_the_batch_size() {
    let input = join(&sample_lines());
    let reference = TempStore::with(&input).snapshot(&input);
    // With no size, age or idle limit the whole input is one batch, committed at its end.
    let temp = TempStore::new();
    let mut writer = temp.store.writer().unwrap();
    let mut one_batch = Recording::new(&mut writer);
    let options = IngestOptions {
        max_batch_rows: usize::MAX,
        ..idle_only(Duration::from_secs(3600))
    };
    ingest(owned(&input), &mut one_batch, &options, &mut |_| {}).unwrap();
    assert_eq!(one_batch.batches.len(), 1);
    let expected = check_whole_blocks(&one_batch.batches);
    assert_eq!(expected.len(), 30);

    for (max_batch_rows, max_batch_age) in [
        (1, Duration::from_secs(60)),
        (7, Duration::ZERO),
        (50, Duration::from_secs(60)),
    ] {
        let temp = TempStore::new();
        let mut writer = temp.store.writer().unwrap();
        let mut recording = Recording::new(&mut writer);
        let options = IngestOptions {
            max_batch_rows,
            max_batch_age,
            ..IngestOptions::default()
        };
        ingest(owned(&input), &mut recording, &options, &mut |_| {}).unwrap();
        assert!(recording.batches.len() > 1, "batch size {max_batch_rows}");
        assert_eq!(check_whole_blocks(&recording.batches), expected);
        assert_eq!(temp.snapshot(&input), reference);
    }
}

/// The rows of each batch `ingest` writes of `lines` with batches of `max_batch_rows`, by
/// transaction, to a writer whose transactions span at most `transaction_batches`; every block
/// whole.
fn transaction_rows(
    lines: &[String],
    max_batch_rows: usize,
    transaction_batches: usize,
) -> Vec<Vec<usize>> {
    let temp = TempStore::new();
    let mut writer = temp.store.writer().unwrap();
    let mut recording = Recording::new(&mut writer);
    recording.transaction_batches = transaction_batches;
    let options = IngestOptions {
        max_batch_rows,
        ..idle_only(Duration::from_secs(3600))
    };
    ingest(owned(&text(lines)), &mut recording, &options, &mut |_| {}).unwrap();
    check_whole_blocks(&recording.batches);
    assert_eq!(recording.commits.last(), Some(&true), "all committed");
    let rows = |batch: &&IngestBatch| batch.ledger_rows.len() + batch.oracle_rows.len();
    let transactions = recording.transactions();
    transactions
        .iter()
        .map(|batches| batches.iter().map(rows).collect())
        .collect()
}

#[test]
fn transactions_of_many_parties_span_the_writers_batches_and_those_of_few_do_not() {
    let four = storage::TRANSACTION_BATCHES;
    assert_eq!(four, 4);
    // Few parties (three, five rows a block, 200 rows at least ROWS_PER_PARTY for each of the
    // batches a transaction may span): a batch and its commit at the first block boundary past
    // the size.
    assert_eq!(
        transaction_rows(&blocks(100), 200, four),
        [vec![200], vec![200], vec![100]]
    );
    // Two new parties a block, one row each: a commit would rewrite a party's newest page for
    // each row, so a transaction spans four batches of the size, no batch larger.
    let party = |n: u64| format!("{n:064x}");
    let thin: Vec<String> = (1..=1000)
        .flat_map(|height| {
            let (from, to) = (party(2 * height), party(2 * height + 1));
            let entry = entry(Some(&from), Some(&to), "1");
            let time = T1 + height as i64;
            block(height, time, vec![Body::Ledger(vec![entry])])
        })
        .collect();
    // The input's end commits the last two batches staged with an empty one.
    let full = |batches| vec![200; batches];
    assert_eq!(
        transaction_rows(&thin, 200, four),
        [full(four), full(four), vec![200, 200, 0]]
    );
    // A writer whose transactions may span eight batches gets them.
    assert_eq!(
        transaction_rows(&thin, 200, 8),
        [full(8), vec![200, 200, 0]]
    );
}

#[test]
fn progress_reports_follow_every_commit() {
    let input = join(&sample_lines());
    let temp = TempStore::new();
    let mut writer = temp.store.writer().unwrap();
    let mut recording = Recording::new(&mut writer);
    let options = IngestOptions {
        max_batch_rows: 20,
        ..idle_only(Duration::from_secs(3600))
    };
    let mut reports = Vec::new();
    let stats = ingest(owned(&input), &mut recording, &options, &mut |stats| {
        reports.push(stats.clone())
    })
    .unwrap();
    let transactions = recording.transactions();
    assert!(transactions.iter().any(|batches| batches.len() > 1));
    assert_eq!(reports.len(), transactions.len());
    let mut blocks = 0;
    for (report, batches) in reports.iter().zip(&transactions) {
        let heights = batches.iter().flat_map(|batch| &batch.blocks);
        blocks += heights.clone().count() as u64;
        assert_eq!(report.blocks, blocks);
        assert_eq!(report.last_height, heights.last().map(|block| block.height));
    }
    assert_eq!(reports.last(), Some(&stats));
}

#[test]
fn refused_commit_stops_the_ingest_and_a_rerun_completes() {
    let input = join(&sample_lines());
    let reference = TempStore::with(&input).snapshot(&input);
    let options = IngestOptions {
        max_batch_rows: 1,
        ..IngestOptions::default()
    };
    for fail_at in [1, 2, 10] {
        let temp = TempStore::new();
        let mut writer = temp.store.writer().unwrap();
        let mut recording = Recording::new(&mut writer);
        recording.fail_at = Some(fail_at);
        let mut reports = 0;
        let result = ingest(owned(&input), &mut recording, &options, &mut |_| {
            reports += 1
        });
        assert!(
            matches!(
                result,
                Err(IngestError::Store(storage::Error::Unavailable(_)))
            ),
            "{result:?}"
        );
        // Reported: the transactions committed before the failure; stored: their blocks, none
        // of the batches staged after them.
        let transactions = recording.transactions();
        assert_eq!(reports, transactions.len());
        let stored: u64 = (transactions.iter().flatten())
            .map(|batch| batch.blocks.len() as u64)
            .sum();
        assert_eq!(temp.store.chain().unwrap().last.is_some(), stored > 0);
        drop(recording);

        let stats = ingest_with(&mut writer, &input).unwrap();
        assert_eq!(stats.events + stats.skipped_events, 221);
        assert_eq!(stats.skipped_events > 0, stored > 0);
        assert_eq!(temp.snapshot(&input), reference);
    }
}

#[test]
fn stop_flag_ends_the_ingest_at_a_block_boundary() {
    let input = text(&blocks(3));
    let stop = AtomicBool::new(true);
    let options = IngestOptions {
        stop: Some(&stop),
        ..IngestOptions::default()
    };
    let temp = TempStore::new();
    let stats = ingest(
        owned(&input),
        &mut temp.store.writer().unwrap(),
        &options,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!((stats.blocks, stats.last_height), (1, Some(1)));
    let rest = temp.ingest(&input).unwrap();
    assert_eq!((rest.events, rest.skipped_events), (14, 7));
    assert_eq!(
        temp.snapshot(&input),
        TempStore::with(&input).snapshot(&input)
    );
}

#[test]
fn live_stream_commits_complete_blocks_when_the_input_goes_quiet() {
    let lines = blocks(3);
    // Blocks of `blocks` are 7 lines long; block 3 is left without its END_BLOCK.
    let (complete, cut) = (&lines[..14], &lines[14..20]);
    let temp = TempStore::new();
    let (reader, mut input) = std::io::pipe().unwrap();
    let options = idle_only(Duration::from_millis(20));
    let (committed, heights) = mpsc::channel();
    let stats: IngestStats = std::thread::scope(|scope| {
        let store = &temp.store;
        let running = scope.spawn(move || {
            ingest(
                BufReader::new(reader),
                &mut store.writer().unwrap(),
                &options,
                &mut |stats| committed.send(stats.last_height).unwrap(),
            )
        });
        input.write_all(text(complete).as_bytes()).unwrap();
        input.write_all(text(cut).as_bytes()).unwrap();
        input.flush().unwrap();

        // A's rows of blocks 1 and 2 appear without the input ending: the ingest reports the
        // commit of block 2 while the input is still open.
        while heights.recv().unwrap() != Some(2) {}
        assert!(!running.is_finished());
        assert_eq!(export(store, A.parse().unwrap()).lines().count(), 2);

        drop(input);
        running.join().unwrap().unwrap()
    });
    assert_eq!(stats.blocks, 2);
    assert_eq!(stats.incomplete_events, 6);
    assert_eq!(export(&temp.store, A.parse().unwrap()).lines().count(), 2);
}

#[test]
fn stop_flag_ends_an_ingest_waiting_on_a_quiet_stream() {
    let lines = blocks(3);
    let temp = TempStore::new();
    let (reader, mut input) = std::io::pipe().unwrap();
    let stop = AtomicBool::new(false);
    let options = IngestOptions {
        stop: Some(&stop),
        ..idle_only(Duration::from_millis(20))
    };
    let (committed, heights) = mpsc::channel();
    std::thread::scope(|scope| {
        let store = &temp.store;
        let options = &options;
        let running = scope.spawn(move || {
            ingest(
                BufReader::new(reader),
                &mut store.writer().unwrap(),
                options,
                &mut |stats| committed.send(stats.last_height).unwrap(),
            )
        });
        input.write_all(text(&lines[..14]).as_bytes()).unwrap();
        input.flush().unwrap();
        while heights.recv().unwrap() != Some(2) {}
        assert_eq!(export(store, A.parse().unwrap()).lines().count(), 2);
        // The input stays open: the reader is blocked on it when the stop comes.
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let stats = running.join().unwrap().unwrap();
        assert_eq!((stats.blocks, stats.last_height), (2, Some(2)));
        drop(input);
    });
}
