//! The writer: idempotent commits, block progress, failed commits, and the health check.

use super::{Store, commit, contents, ledger_row, oracle_row, spec, spec_labels};
use crate::{
    BlockRecord, BlockState, BlockTime, ChainState, ChainTip, Error, IngestBatch, IngestWriter,
};

/// The record of a block of no hash and `seq_base` 0.
pub fn block(height: u64, vega_time: Option<i64>, last_seq: u64) -> BlockRecord {
    BlockRecord {
        height,
        hash: None,
        seq_base: 0,
        state: BlockState {
            vega_time,
            last_seq,
        },
    }
}

/// What is stored of the first block at `height`.
fn block_state(writer: &mut dyn IngestWriter, height: u64) -> Option<BlockState> {
    let blocks = writer.blocks(height).unwrap();
    assert!(blocks.len() <= 1, "one block at {height}: {blocks:?}");
    blocks.first().map(|block| block.state)
}

/// Two blocks of rows: an entry between parties 1 and 2, one of party 1 alone, and oracle data
/// matching specs 1 and 2.
fn two_blocks() -> IngestBatch {
    IngestBatch {
        blocks: vec![block(10, Some(100), 4), block(11, Some(200), 2)],
        ledger_rows: vec![
            ledger_row("p1-a", 1, 1, (100, 10, 2, 0)),
            ledger_row("p2-a", 2, 1, (100, 10, 2, 0)),
            ledger_row("p1-b", 1, 2, (200, 11, 1, 0)),
        ],
        oracle_rows: vec![
            oracle_row("o1", (100, 10, 3), &[1, 2]),
            oracle_row("o2", (200, 11, 2), &[2]),
        ],
        chain_id: None,
    }
}

/// Conformance test: committing a batch twice adds nothing.
pub fn committing_a_batch_twice_adds_nothing<S: Store>(store: &S, writer: &mut dyn IngestWriter) {
    let batch = two_blocks();
    commit(writer, &batch);
    let once = contents(store, &[1, 2]);
    assert_eq!(
        once,
        (
            vec![vec!["p1-a".into(), "p1-b".into()], vec!["p2-a".into()]],
            vec![b"o2".to_vec(), b"o1".to_vec()],
        )
    );
    commit(writer, &batch);
    assert_eq!(contents(store, &[1, 2]), once);

    // A row already stored stays as it is, whatever the second copy says; a new match of a
    // stored datum is added, and reads the datum as stored.
    let mut changed = two_blocks();
    changed.ledger_rows[0].csv_line = b"p1-a changed\n".to_vec();
    changed.oracle_rows[0].json = b"o1 changed".to_vec();
    changed.oracle_rows[0].matched_specs.push(spec(3));
    changed.oracle_rows[1].json = b"o2 changed".to_vec();
    changed.oracle_rows[1].matched_specs.clear();
    commit(writer, &changed);
    assert_eq!(contents(store, &[1, 2]), once);
    for (spec_n, expected) in [(1, "o1"), (2, "o2 o1"), (3, "o1")] {
        assert_eq!(spec_labels(store, spec_n), expected, "spec {spec_n}");
    }

    // An empty batch is a no-op.
    commit(writer, &IngestBatch::default());
    assert_eq!(contents(store, &[1, 2]), once);
    assert_eq!(block_state(writer, 10), Some(block(10, Some(100), 4).state));
}

/// Conformance test: a datum twice in one batch reads as the first.
pub fn a_datum_twice_in_one_batch_reads_as_the_first<S: Store>(
    store: &S,
    writer: &mut dyn IngestWriter,
) {
    // A stream that repeats a datum with other bytes and another match, in one batch, after a
    // later datum: the first copy is the one stored, and its bytes are what every spec reads.
    let batch = IngestBatch {
        oracle_rows: vec![
            oracle_row("o1", (100, 10, 3), &[1]),
            oracle_row("o2", (200, 11, 2), &[2]),
            oracle_row("o1 again", (100, 10, 3), &[3]),
        ],
        ..IngestBatch::default()
    };
    commit(writer, &batch);
    assert_eq!(contents(store, &[]).1, [b"o2".to_vec(), b"o1".to_vec()]);
    for (spec_n, expected) in [(1, "o1"), (2, "o2"), (3, "o1")] {
        assert_eq!(spec_labels(store, spec_n), expected, "spec {spec_n}");
    }
}

#[track_caller]
fn check_block(writer: &mut dyn IngestWriter, height: u64, expected: Option<(Option<i64>, u64)>) {
    let expected = expected.map(|(vega_time, last_seq)| BlockState {
        vega_time,
        last_seq,
    });
    assert_eq!(block_state(writer, height), expected);
}

/// Conformance test: block state round trips.
pub fn block_state_round_trips<S: Store>(_store: &S, writer: &mut dyn IngestWriter) {
    check_block(writer, 5, None);
    check_block(writer, u64::MAX, None);

    let commit_blocks = |writer: &mut dyn IngestWriter, blocks: Vec<BlockRecord>| {
        commit(
            writer,
            &IngestBatch {
                blocks,
                ..IngestBatch::default()
            },
        );
    };
    commit_blocks(writer, vec![block(5, None, 3), block(6, Some(-7), 0)]);
    check_block(writer, 5, Some((None, 3)));
    check_block(writer, 6, Some((Some(-7), 0)));
    check_block(writer, 4, None);

    // The first time seen stays; the sequence only grows.
    commit_blocks(writer, vec![block(5, Some(100), 2)]);
    check_block(writer, 5, Some((Some(100), 3)));
    commit_blocks(writer, vec![block(5, Some(200), 7)]);
    check_block(writer, 5, Some((Some(100), 7)));
    commit_blocks(writer, vec![block(5, None, 1)]);
    check_block(writer, 5, Some((Some(100), 7)));

    // The extremes a store must hold.
    let max = i64::MAX as u64;
    commit_blocks(
        writer,
        vec![block(max, Some(i64::MIN), max), block(0, Some(i64::MAX), 0)],
    );
    check_block(writer, max, Some((Some(i64::MIN), max)));
    // Beyond what a store holds: no block, not the highest one.
    check_block(writer, max + 1, None);
    check_block(writer, u64::MAX, None);
    check_block(writer, 0, Some((Some(i64::MAX), 0)));
    check_block(writer, 6, Some((Some(-7), 0)));
}

/// The chain tip: the lowest and highest heights stored, and the latest vega time known at or
/// below the highest one; the same answer while nothing is committed.
pub fn chain_tip_follows_commits<S: Store>(store: &S, writer: &mut dyn IngestWriter) {
    let tip = |first_height, last_height, last_vega_time| {
        Some(ChainTip {
            first_height,
            last_height,
            last_vega_time,
        })
    };
    let mut commit_then_check = |blocks: Vec<BlockRecord>, expected: Option<ChainTip>| {
        if !blocks.is_empty() {
            commit(
                writer,
                &IngestBatch {
                    blocks,
                    ..IngestBatch::default()
                },
            );
        }
        store.refresh_chain_tip().unwrap();
        assert_eq!(store.chain_tip().unwrap(), expected);
        // Asked again with nothing committed: from memory, the same.
        assert_eq!(store.chain_tip().unwrap(), expected);
        // With its version: the same tip, and a version told with it is the one asked after
        // it, nothing having been committed in between.
        let (tip, version) = store.chain_tip_with_version().unwrap();
        assert_eq!(tip, expected);
        if version.is_some() {
            assert_eq!(version, store.data_version().unwrap());
        }
    };
    commit_then_check(vec![], None);
    commit_then_check(vec![block(5, Some(100), 1)], tip(5, 5, Some(100)));
    // A last block without a time shows the latest time below it.
    commit_then_check(
        vec![block(6, Some(200), 0), block(7, None, 0)],
        tip(5, 7, Some(200)),
    );
    commit_then_check(vec![block(7, Some(300), 1)], tip(5, 7, Some(300)));
    commit_then_check(vec![block(3, Some(50), 0)], tip(3, 7, Some(300)));
    let max = i64::MAX as u64;
    commit_then_check(vec![block(max, None, 0)], tip(3, max, Some(300)));
}

/// A batch that fails after its first rows went in: the dictionaries got new entries inside the
/// transaction that the rollback removes again.
#[track_caller]
fn check_failed_commit(store: &impl Store, writer: &mut dyn IngestWriter, failing: IngestBatch) {
    let before = contents(store, &[1, 2, 3, 4]);
    match writer.commit(&failing) {
        Err(Error::OutOfRange { value, .. }) => assert_eq!(value, u64::MAX),
        other => panic!("expected Error::OutOfRange, got {other:?}"),
    }
    assert_eq!(contents(store, &[1, 2, 3, 4]), before);
    for block in &failing.blocks {
        assert_eq!(block_state(writer, block.height), None);
    }
}

/// Conformance test: failed commit leaves nothing and the writer usable.
pub fn failed_commit_leaves_nothing_and_the_writer_usable<S: Store>(
    store: &S,
    writer: &mut dyn IngestWriter,
) {
    commit(writer, &two_blocks());
    // A block height beyond a signed 64-bit integer cannot be stored, neither in an entry key
    // nor in an oracle position; it comes after rows of new parties, assets and specs.
    check_failed_commit(
        store,
        writer,
        IngestBatch {
            blocks: vec![block(20, Some(300), 1)],
            ledger_rows: vec![
                ledger_row("p3-lost", 3, 3, (300, 20, 1, 0)),
                ledger_row("p3-huge", 3, 3, (300, u64::MAX, 1, 0)),
            ],
            ..IngestBatch::default()
        },
    );
    check_failed_commit(
        store,
        writer,
        IngestBatch {
            blocks: vec![block(21, Some(300), 2)],
            // Stored before the oracle data fail: a writer that remembered it (its party's last
            // segment, say) must forget it with the transaction.
            ledger_rows: vec![ledger_row("p1-lost", 1, 3, (300, 20, 1, 5))],
            oracle_rows: vec![
                oracle_row("o-lost", (300, 21, 1), &[3]),
                oracle_row("o-huge", (300, u64::MAX, 2), &[3]),
            ],
            chain_id: None,
        },
    );

    // The writer goes on; ids handed out by the failed transactions are not reused for the
    // wrong party, asset or spec.
    commit(
        writer,
        &IngestBatch {
            blocks: vec![block(20, Some(300), 2)],
            ledger_rows: vec![
                ledger_row("p4-a", 4, 4, (300, 20, 1, 0)),
                ledger_row("p3-a", 3, 3, (300, 20, 2, 0)),
                ledger_row("p1-c", 1, 3, (300, 20, 2, 0)),
            ],
            oracle_rows: vec![oracle_row("o3", (300, 20, 3), &[4, 3])],
            chain_id: None,
        },
    );
    let (exports, oracle) = contents(store, &[1, 2, 3, 4]);
    assert_eq!(
        exports,
        [
            vec!["p1-a", "p1-b", "p1-c"],
            vec!["p2-a"],
            vec!["p3-a"],
            vec!["p4-a"]
        ]
    );
    assert_eq!(oracle, [&b"o3"[..], b"o2", b"o1"]);
    for (spec_n, expected) in [(1, "o1"), (2, "o2 o1"), (3, "o3"), (4, "o3")] {
        assert_eq!(spec_labels(store, spec_n), expected, "spec {spec_n}");
    }
    assert_eq!(block_state(writer, 20), Some(block(20, Some(300), 2).state));
}

/// Conformance test: batches staged in the writer's transaction are invisible to readers
/// (rows, chain tip, data version) until a commit, visible to the writer's own block lookups,
/// and undone with the transaction when a later batch fails, after which the writer goes on.
pub fn staged_batches_commit_as_one_transaction<S: Store>(
    store: &S,
    writer: &mut dyn IngestWriter,
) {
    commit(writer, &two_blocks());
    let committed = contents(store, &[1, 2, 3]);
    store.refresh_chain_tip().unwrap();
    let (tip, version) = store.chain_tip_with_version().unwrap();
    let invisible = || {
        assert_eq!(contents(store, &[1, 2, 3]), committed);
        store.refresh_chain_tip().unwrap();
        assert_eq!(store.chain_tip_with_version().unwrap(), (tip, version));
    };
    // Party 1's lines follow its stored ones in two staged batches: its newest segments are
    // written twice inside the one transaction.
    let staged = [
        IngestBatch {
            blocks: vec![block(20, Some(300), 2)],
            ledger_rows: vec![
                ledger_row("p1-c", 1, 1, (300, 20, 1, 0)),
                ledger_row("p3-a", 3, 3, (300, 20, 1, 0)),
            ],
            oracle_rows: vec![oracle_row("o3", (300, 20, 2), &[3])],
            chain_id: None,
        },
        IngestBatch {
            blocks: vec![block(21, Some(400), 1)],
            ledger_rows: vec![ledger_row("p1-d", 1, 1, (400, 21, 1, 0))],
            ..IngestBatch::default()
        },
    ];
    for batch in &staged {
        writer.stage(batch).unwrap();
        invisible();
    }
    assert_eq!(block_state(writer, 21), Some(block(21, Some(400), 1).state));
    // An empty commit commits what is staged.
    commit(writer, &IngestBatch::default());
    let (exports, oracle) = contents(store, &[1, 2, 3]);
    assert_eq!(
        exports,
        [
            vec!["p1-a", "p1-b", "p1-c", "p1-d"],
            vec!["p2-a"],
            vec!["p3-a"]
        ]
    );
    assert_eq!(oracle, [&b"o3"[..], b"o2", b"o1"]);
    store.refresh_chain_tip().unwrap();
    assert_eq!(
        store.chain_tip().unwrap().map(|tip| tip.last_height),
        Some(21)
    );

    // A staged batch, then a commit that fails: both are gone.
    let committed = contents(store, &[1, 2, 3]);
    // Party 1's line `label` at block 22, with a datum of spec 4 when `datum` names one.
    let at_22 = |label: &str, datum: Option<&str>| IngestBatch {
        blocks: vec![block(22, Some(500), 1)],
        ledger_rows: vec![ledger_row(label, 1, 1, (500, 22, 1, 0))],
        oracle_rows: datum
            .map(|datum| oracle_row(datum, (500, 22, 2), &[4]))
            .into_iter()
            .collect(),
        chain_id: None,
    };
    // Fails: its height does not fit a signed 64-bit integer.
    let huge = IngestBatch {
        ledger_rows: vec![ledger_row("p2-huge", 2, 1, (600, u64::MAX, 1, 0))],
        ..IngestBatch::default()
    };
    writer.stage(&at_22("p1-lost", Some("o-lost"))).unwrap();
    match writer.commit(&huge) {
        Err(Error::OutOfRange { value, .. }) => assert_eq!(value, u64::MAX),
        other => panic!("expected Error::OutOfRange, got {other:?}"),
    }
    assert_eq!(contents(store, &[1, 2, 3]), committed);
    assert_eq!(block_state(writer, 22), None);
    // A staged batch that fails undoes the ones staged before it too.
    writer.stage(&at_22("p1-lost", None)).unwrap();
    assert!(writer.stage(&huge).is_err());
    assert_eq!(contents(store, &[1, 2, 3]), committed);
    assert_eq!(block_state(writer, 22), None);

    // The writer goes on: what it remembered of party 1's segments went with the transaction.
    writer.stage(&at_22("p1-e", Some("o4"))).unwrap();
    commit(
        writer,
        &IngestBatch {
            blocks: vec![block(23, Some(600), 1)],
            ledger_rows: vec![ledger_row("p2-b", 2, 1, (600, 23, 1, 0))],
            ..IngestBatch::default()
        },
    );
    let (exports, oracle) = contents(store, &[1, 2, 3, 4]);
    assert_eq!(
        exports,
        [
            vec!["p1-a", "p1-b", "p1-c", "p1-d", "p1-e"],
            vec!["p2-a", "p2-b"],
            vec!["p3-a"],
            Vec::<&str>::new(),
        ]
    );
    assert_eq!(oracle, [&b"o4"[..], b"o3", b"o2", b"o1"]);
    assert_eq!(spec_labels(store, 4), "o4");
}

/// Conformance test: empty store is healthy.
pub fn empty_store_is_healthy<S: Store>(store: &S, writer: &mut dyn IngestWriter) {
    store.check().unwrap();
    commit(writer, &two_blocks());
    store.check().unwrap();
}

/// A block of `height` with a hash and a `seq_base`.
fn hashed(height: u64, hash: Option<&str>, seq_base: u64, last_seq: u64) -> BlockRecord {
    BlockRecord {
        hash: hash.map(str::to_owned),
        seq_base,
        ..block(height, Some(height as i64 * 10), last_seq)
    }
}

/// Conformance test: two blocks of one height and one chain.
pub fn two_blocks_of_one_height_and_one_chain<S: Store>(_store: &S, writer: &mut dyn IngestWriter) {
    assert_eq!(writer.chain().unwrap(), ChainState::default());
    // The genesis block and the first real block share height 1; the second one's rows are
    // keyed after the first one's.
    let genesis = hashed(1, Some("AA"), 0, 4);
    let first = hashed(1, Some("BB"), 4, 3);
    commit(
        writer,
        &IngestBatch {
            chain_id: Some("chain-a".into()),
            blocks: vec![genesis.clone(), first.clone(), hashed(2, Some("CC"), 0, 9)],
            ledger_rows: vec![
                ledger_row("genesis", 1, 1, (10, 1, 2, 0)),
                ledger_row("first", 1, 1, (10, 1, 4 + 2, 0)),
            ],
            ..IngestBatch::default()
        },
    );
    assert_eq!(writer.blocks(1).unwrap(), [genesis.clone(), first.clone()]);
    let at = |height: u64| BlockTime {
        height,
        vega_time: Some(height as i64 * 10),
    };
    let expected = ChainState {
        chain_id: Some("chain-a".into()),
        first: Some(at(1)),
        last: Some(at(2)),
    };
    assert_eq!(writer.chain().unwrap(), expected);

    // A record without a hash merges with the stored block, whose hash stays.
    commit(
        writer,
        &IngestBatch {
            chain_id: Some("chain-a".into()),
            blocks: vec![hashed(1, None, 4, 5)],
            ..IngestBatch::default()
        },
    );
    let merged = BlockRecord {
        state: BlockState {
            last_seq: 5,
            ..first.state
        },
        ..first
    };
    assert_eq!(writer.blocks(1).unwrap(), [genesis, merged]);

    // Another chain is refused whole.
    let before = writer.blocks(3).unwrap();
    match writer.commit(&IngestBatch {
        chain_id: Some("chain-b".into()),
        blocks: vec![hashed(3, Some("DD"), 0, 1)],
        ..IngestBatch::default()
    }) {
        Err(Error::OtherChain { stored, found }) => {
            assert_eq!((stored.as_str(), found.as_str()), ("chain-a", "chain-b"));
        }
        other => panic!("expected Error::OtherChain, got {other:?}"),
    }
    assert_eq!(writer.blocks(3).unwrap(), before);
    assert_eq!(writer.chain().unwrap(), expected);
}
