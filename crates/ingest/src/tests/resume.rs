//! Idempotence: re-runs, overlapping inputs and inputs cut inside a block add nothing twice.

use super::{Snapshot, TempStore, event_type, join, sample_lines};

const SAMPLE_EVENTS: u64 = 221;
const SAMPLE_BLOCKS: u64 = 30;
const SAMPLE_ENTRIES: u64 = 131;
const SAMPLE_ORACLE_DATA: u64 = 64;

#[test]
fn sample_stream_ingests_and_a_rerun_adds_nothing() {
    let lines = sample_lines();
    assert_eq!(lines.len() as u64, SAMPLE_EVENTS);
    let input = join(&lines);
    let temp = TempStore::new();

    let stats = temp.ingest(&input).unwrap();
    assert_eq!(
        (
            stats.events,
            stats.blocks,
            stats.ledger_entries,
            stats.oracle_data
        ),
        (
            SAMPLE_EVENTS,
            SAMPLE_BLOCKS,
            SAMPLE_ENTRIES,
            SAMPLE_ORACLE_DATA
        )
    );
    assert_eq!((stats.skipped_events, stats.incomplete_events), (0, 0));
    assert_eq!(stats.last_height, Some(1_000_030));
    let snapshot = temp.snapshot(&input);
    assert_eq!(snapshot.ledger_rows() as u64, stats.ledger_rows);
    assert_eq!(snapshot.oracle.len() as u64, SAMPLE_ORACLE_DATA);
    assert!(snapshot.specs.iter().all(|(_, data)| !data.is_empty()));

    let rerun = temp.ingest(&input).unwrap();
    assert_eq!(rerun.skipped_events, SAMPLE_EVENTS);
    // Blocks stored whole are not even written again: the re-run commits nothing.
    assert_eq!(rerun.blocks, 0);
    assert_eq!(
        (
            rerun.events,
            rerun.ledger_entries,
            rerun.ledger_rows,
            rerun.oracle_data
        ),
        (0, 0, 0, 0)
    );
    assert_eq!(temp.snapshot(&input), snapshot);
}

#[test]
fn overlapping_input_adds_only_new_events() {
    let lines = sample_lines();
    let full = join(&lines);
    let reference = TempStore::with(&full).snapshot(&full);
    let third = lines.len() / 3;
    // Both cuts fall inside blocks: the first input's last block is cut off and the second
    // input starts inside a block the first one stored.
    let (first, second) = (join(&lines[..2 * third]), join(&lines[third..]));
    for cut in [third, 2 * third] {
        assert_ne!(event_type(lines[cut - 1]), "BUS_EVENT_TYPE_END_BLOCK");
    }

    let temp = TempStore::new();
    let before = temp.ingest(&first).unwrap();
    assert!(before.incomplete_events > 0);
    let after = temp.ingest(&second).unwrap();
    assert_eq!(before.events + after.events, SAMPLE_EVENTS);
    assert_eq!(after.skipped_events, before.events - third as u64);
    assert_eq!(temp.snapshot(&full), reference);

    // The same inputs back to back, as one: the cut block is completed when it comes again.
    let temp = TempStore::new();
    let stats = temp.ingest(&(first + &second)).unwrap();
    assert_eq!((stats.events, stats.incomplete_events), (SAMPLE_EVENTS, 0));
    assert_eq!(temp.snapshot(&full), reference);
}

/// Ingests the first `cut` lines of `lines`, then the lines from `rest_from` on, and compares
/// the store with `reference`, one clean run of all lines.
#[track_caller]
fn check_cut(
    (lines, reference): (&[&str], &Snapshot),
    cut: usize,
    rest_from: usize,
    expected_incomplete: u64,
) {
    let full = join(lines);
    let temp = TempStore::new();
    let first = temp.ingest(&join(&lines[..cut])).unwrap();
    assert_eq!(first.incomplete_events, expected_incomplete, "cut at {cut}");
    let second = temp.ingest(&join(&lines[rest_from..])).unwrap();
    assert_eq!(
        first.events + second.events,
        lines.len() as u64,
        "cut at {cut}"
    );
    assert_eq!(&temp.snapshot(&full), reference, "cut at {cut}");
    if rest_from == 0 {
        assert_eq!(second.skipped_events, first.events, "cut at {cut}");
    } else {
        // A last full run finds everything stored.
        let rerun = temp.ingest(&full).unwrap();
        assert_eq!(rerun.events, 0);
        assert_eq!(rerun.skipped_events, lines.len() as u64);
    }
}

#[test]
fn block_cut_by_the_end_of_input_is_stored_once_by_a_full_rerun() {
    let lines = sample_lines();
    let full = join(&lines);
    let reference = TempStore::with(&full).snapshot(&full);
    let stream = (&lines[..], &reference);
    // Lines 7.. are block 1_000_002: BEGIN_BLOCK, TIME_UPDATE, data, ..., END_BLOCK.
    let block_2 = 6;
    assert_eq!(event_type(lines[block_2]), "BUS_EVENT_TYPE_BEGIN_BLOCK");
    let block_2_len = lines[block_2..]
        .iter()
        .position(|line| event_type(line) == "BUS_EVENT_TYPE_END_BLOCK")
        .unwrap()
        + 1;
    // Cut after each event of block 2: all but the last cut leave it incomplete.
    for in_block in 0..=block_2_len {
        let expected_incomplete = if in_block == block_2_len {
            0
        } else {
            in_block as u64
        };
        check_cut(stream, block_2 + in_block, 0, expected_incomplete);
    }
    // Cut before the last END_BLOCK: the last block's other events are left out.
    let last_block = lines
        .iter()
        .rposition(|line| event_type(line) == "BUS_EVENT_TYPE_BEGIN_BLOCK")
        .unwrap();
    check_cut(
        stream,
        lines.len() - 1,
        0,
        (lines.len() - 1 - last_block) as u64,
    );
}

#[test]
fn block_cut_in_a_stream_without_end_block_resumes_where_it_stopped() {
    // Without END_BLOCK events a stream cannot tell a cut block from a whole one: the last block
    // is stored as far as it goes and the rest of it follows with the next input.
    let lines: Vec<&str> = sample_lines()
        .into_iter()
        .filter(|line| event_type(line) != "BUS_EVENT_TYPE_END_BLOCK")
        .collect();
    let full = join(&lines);
    let reference = TempStore::with(&full).snapshot(&full);
    for cut in [1, 2, 3, 5, 7, 40, lines.len() - 1] {
        // The rest alone, or the whole input again.
        check_cut((&lines, &reference), cut, cut, 0);
        check_cut((&lines, &reference), cut, 0, 0);
    }
}

#[test]
fn lines_straddling_buffer_fills_and_a_missing_last_newline_read_the_same() {
    let input = join(&sample_lines());
    let reference = TempStore::with(&input).snapshot(&input);
    let unterminated = input.trim_end_matches('\n');
    for capacity in [1, 7, 64, 4096] {
        for text in [input.as_str(), unterminated] {
            let temp = TempStore::new();
            let stats = crate::ingest(
                std::io::BufReader::with_capacity(capacity, super::owned(text)),
                &mut temp.store.writer().unwrap(),
                &crate::IngestOptions::default(),
                &mut |_| {},
            )
            .unwrap();
            assert_eq!(stats.events, SAMPLE_EVENTS, "capacity {capacity}");
            assert_eq!(temp.snapshot(&input), reference, "capacity {capacity}");
        }
    }
}
