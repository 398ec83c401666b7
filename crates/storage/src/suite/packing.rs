//! How a stream of small batches is packed into a party's ledger segments, alike on every
//! backend: each backend's test commits [`small_batch`]es (restarting its writer now and then,
//! so that the run is read back from the store as well as remembered) and checks the stored
//! sizes with [`assert_packed`] and the export with [`assert_small_batches_exported`]; and
//! stages them for several parties ([`stage_small_batches`]) through a writer that keeps runs
//! whole and one that remembers them by their shape, which must store the same segments.

use std::ops::Range;

use crate::segment::{RUN_SEGMENTS, SMALL_TAIL_BYTES};
use crate::{IngestBatch, IngestWriter, LedgerRow, Store};

/// Lines in each [`small_batch`].
const LINES: u64 = 3;

/// Bytes of each line of a [`small_batch`], its newline included.
const WIDTH: usize = 100;

/// Batch `n` of a stream committed a block at a time, as the live socket commits: three
/// 100-byte lines of party 1, asset 1, at vega times `3n` to `3n + 2`, each labelled with its
/// line number.
pub fn small_batch(n: u64) -> IngestBatch {
    super::ledger_batch(small_rows(1, n))
}

/// The lines of party `party` in [`small_batch`] `n`.
fn small_rows(party: u8, n: u64) -> Vec<LedgerRow> {
    (n * LINES..(n + 1) * LINES)
        .map(|line| {
            let time = i64::try_from(line).unwrap();
            let label = format!("{line:0>width$}", width = WIDTH - 1);
            super::ledger_row(&label, party, 1, (time, n, line, 0))
        })
        .collect()
}

/// The parties of [`stage_small_batches`].
pub const PARTIES: [u8; 3] = [1, 2, 3];

/// The batches [`stage_small_batches`] writes: 120 kB of lines a party.
const STAGED: Range<u64> = 0..400;

/// Writes the [`small_batch`]es of [`STAGED`], each holding the lines of every one of
/// [`PARTIES`], through `writer` as an ingest does: staged, three batches to a transaction, so
/// that segments are held across batches and runs both grow and merge.
pub fn stage_small_batches(writer: &mut dyn IngestWriter) {
    for n in STAGED {
        let rows = PARTIES
            .iter()
            .flat_map(|party| small_rows(*party, n))
            .collect();
        let batch = super::ledger_batch(rows);
        if n % 3 == 2 {
            writer.commit(&batch).unwrap();
        } else {
            writer.stage(&batch).unwrap();
        }
    }
    writer.commit(&IngestBatch::default()).unwrap();
}

/// Checks what [`stage_small_batches`] stored through a writer keeping every run whole and
/// through one keeping none (every run remembered by its shape): each store with each of
/// [`PARTIES`]' segments' sizes in key order. The same segments, packed, and the same answers.
pub fn assert_stored_alike(
    (whole, whole_sizes): (&impl Store, &[Vec<usize>]),
    (shaped, shaped_sizes): (&impl Store, &[Vec<usize>]),
) {
    for sizes in whole_sizes {
        // Three segments of at least 32 KiB, then a run.
        assert_packed(sizes, 3);
    }
    assert_eq!(shaped_sizes, whole_sizes);
    assert_eq!(
        super::contents(shaped, &PARTIES),
        super::contents(whole, &PARTIES)
    );
    assert_small_batches_exported(shaped, STAGED);
}

/// Checks that party 1 exports every line of the small batches `batches`, in order.
pub fn assert_small_batches_exported(store: &impl Store, batches: Range<u64>) {
    let (labels, _) = super::export(store, &super::filter(1, None, None, None));
    let lines = batches.start * LINES..batches.end * LINES;
    let expected: Vec<String> = lines
        .map(|line| format!("{line:0>width$}", width = WIDTH - 1))
        .collect();
    assert_eq!(labels, expected);
}

/// Checks how one party's segments are packed, given each one's lines' bytes in key order: the
/// small ones (under [`SMALL_TAIL_BYTES`]) only at the end, at most [`RUN_SEGMENTS`] of them
/// and fewer than [`SMALL_TAIL_BYTES`] bytes together, after at least `sealed` others.
pub fn assert_packed(sizes: &[usize], sealed: usize) {
    let large = sizes
        .iter()
        .position(|size| *size < SMALL_TAIL_BYTES)
        .unwrap_or(sizes.len());
    let run = &sizes[large..];
    assert!(
        large >= sealed,
        "{large} segments before the run: {sizes:?}"
    );
    assert!(
        run.iter().all(|size| *size < SMALL_TAIL_BYTES),
        "a small segment before a large one: {sizes:?}"
    );
    assert!(
        run.len() <= RUN_SEGMENTS,
        "a run of {}: {sizes:?}",
        run.len()
    );
    assert!(
        run.iter().sum::<usize>() < SMALL_TAIL_BYTES,
        "a run of {} bytes: {sizes:?}",
        run.iter().sum::<usize>()
    );
}
