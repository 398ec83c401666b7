//! One chain in one database: the first height's two blocks, the chain id, and holes, over
//! files and the live socket.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use serde_json::Value;
use sp_pair::PairSender;
use storage::IngestWriter;

use super::TempStore;
use super::encode;
use super::lines::{self, A, B, Body, block, entry, text};
use crate::{IngestError, Socket, StreamError};

/// `lines` with every event's block hash set to `hash` and its chain id to `chain`.
fn relabel(lines: Vec<String>, hash: &str, chain: &str) -> Vec<String> {
    lines
        .into_iter()
        .map(|line| {
            let mut event: Value = serde_json::from_str(&line).unwrap();
            event["block"] = Value::from(hash);
            event["chainId"] = Value::from(chain);
            if let Some(begin) = event.get_mut("beginBlock") {
                begin["hash"] = Value::from(hash);
            }
            serde_json::to_string(&event).unwrap()
        })
        .collect()
}

/// Block `height` of chain `chain` with hash `hash`: a deposit of `amount` from A to B.
fn deposit_block(height: u64, hash: &str, chain: &str, amount: &str) -> Vec<String> {
    let time = lines::T1 + height as i64 * 1_000_000_000;
    let bodies = vec![Body::Ledger(vec![entry(Some(A), Some(B), amount)])];
    relabel(block(height, time, bodies), hash, chain)
}

/// A stream as a real core writes it: the genesis block and the first real block, both of
/// height 1 (their sequences both start at 1), then heights 2 to `last`.
fn core_stream(chain: &str, last: u64) -> Vec<Vec<String>> {
    let mut blocks = vec![
        deposit_block(1, "GENESIS", chain, "7"),
        deposit_block(1, "FIRST", chain, "11"),
    ];
    blocks.extend((2..=last).map(|height| {
        deposit_block(
            height,
            &format!("H{height}"),
            chain,
            &(100 + height).to_string(),
        )
    }));
    blocks
}

fn flat(blocks: &[Vec<String>]) -> Vec<String> {
    blocks.concat()
}

/// The amounts in A's export, in its order.
fn amounts(temp: &TempStore, input: &str) -> Vec<String> {
    let snapshot = temp.snapshot(input);
    let (_, export) = snapshot
        .exports
        .iter()
        .find(|(party, _)| party.to_string() == A)
        .expect("A has an export");
    export
        .lines()
        .map(|line| line.split(',').nth(1).unwrap().to_owned())
        .collect()
}

#[test]
fn both_blocks_of_the_first_height_are_stored_in_stream_order() {
    let blocks = core_stream("chain-1", 3);
    let input = text(&flat(&blocks));
    let temp = TempStore::new();
    let stats = temp.ingest(&input).unwrap();
    assert_eq!(stats.blocks, 4);
    assert_eq!(amounts(&temp, &input), ["7", "11", "102", "103"]);
    let mut writer = temp.store.writer().unwrap();
    let first = writer.blocks(1).unwrap();
    let hashes: Vec<_> = first.iter().map(|block| block.hash.as_deref()).collect();
    assert_eq!(hashes, [Some("GENESIS"), Some("FIRST")]);
    // The second block's rows follow the first one's: it has 4 events.
    assert_eq!(first[1].seq_base, first[0].state.last_seq);
    assert_eq!(first[0].state.last_seq, 4);
    let chain = writer.chain().unwrap();
    assert_eq!(chain.chain_id.as_deref(), Some("chain-1"));
    assert_eq!(
        (chain.first.unwrap().height, chain.last.unwrap().height),
        (1, 3)
    );
    drop(writer);

    // Idempotent: a re-run, and a run from the second block, add nothing.
    let once = temp.snapshot(&input);
    let again = temp.ingest(&input).unwrap();
    assert_eq!((again.events, again.blocks), (0, 0));
    temp.ingest(&text(&flat(&blocks[1..]))).unwrap();
    assert_eq!(temp.snapshot(&input), once);

    // The stream in two runs (the genesis block alone first) ends as one run does.
    let halves = TempStore::new();
    halves.ingest(&text(&blocks[0])).unwrap();
    halves.ingest(&input).unwrap();
    assert_eq!(halves.snapshot(&input), once);
}

#[test]
fn another_chain_is_refused_and_nothing_is_stored() {
    let input = text(&flat(&core_stream("chain-1", 3)));
    let temp = TempStore::with(&input);
    let before = temp.snapshot(&input);
    let other = text(&flat(&core_stream("chain-2", 5)));
    match temp.ingest(&other) {
        Err(IngestError::Stream(StreamError::OtherChain { stored, found })) => {
            assert_eq!((stored.as_str(), found.as_str()), ("chain-1", "chain-2"));
        }
        other => panic!("expected another chain, got {other:?}"),
    }
    assert_eq!(temp.snapshot(&input), before);
    let mut writer = temp.store.writer().unwrap();
    assert_eq!(writer.chain().unwrap().last.unwrap().height, 3);
    assert_eq!(writer.blocks(4).unwrap(), []);
}

#[test]
fn a_hole_stops_the_ingest_and_a_complete_stream_fills_it() {
    let blocks = core_stream("chain-1", 6);
    let complete = text(&flat(&blocks));
    let expected = TempStore::with(&complete).snapshot(&complete);
    // Block 4 (the fifth block: two of height 1) is missing.
    let mut holed = blocks.clone();
    holed.remove(4);
    let temp = TempStore::new();
    match temp.ingest(&text(&flat(&holed))) {
        Err(err @ IngestError::Stream(StreamError::Missing { .. })) => {
            assert_eq!(
                err.to_string(),
                "block 4 is missing: the stream went from 3 to 5"
            );
        }
        other => panic!("expected a hole, got {other:?}"),
    }
    assert_eq!(amounts(&temp, &complete), ["7", "11", "102", "103"]);
    // A stream that starts beyond the block after the last stored one leaves a hole too.
    match temp.ingest(&text(&flat(&blocks[5..]))) {
        Err(err @ IngestError::Stream(StreamError::MissingAfterStored { .. })) => {
            assert_eq!(
                err.to_string(),
                "block 4 is missing: the database ends at block 3 and the stream starts at 5"
            );
        }
        other => panic!("expected a hole, got {other:?}"),
    }
    temp.ingest(&complete).unwrap();
    assert_eq!(temp.snapshot(&complete), expected);
    // An empty database takes any first height.
    TempStore::new().ingest(&text(&flat(&blocks[5..]))).unwrap();
}

#[test]
fn a_stored_height_with_another_hash_is_refused() {
    let blocks = core_stream("chain-1", 3);
    let input = text(&flat(&blocks));
    let temp = TempStore::with(&input);
    let before = temp.snapshot(&input);
    for (height, stored) in [(1, "GENESIS"), (2, "H2")] {
        let forged = deposit_block(height, "FORGED", "chain-1", "1");
        match temp.ingest(&text(&forged)) {
            Err(IngestError::Stream(StreamError::OtherBlock {
                height: found_height,
                stored: stored_hash,
                found,
            })) => {
                assert_eq!(
                    (found_height, stored_hash.as_str(), found.as_str()),
                    (height, stored, "FORGED")
                );
            }
            other => panic!("expected another block at {height}, got {other:?}"),
        }
    }
    // A stream that goes back to a height it has not stored.
    let back = [
        blocks[3].clone(),
        deposit_block(2, "H2-NEW", "chain-1", "1"),
    ]
    .concat();
    let fresh = TempStore::new();
    match fresh.ingest(&text(&back)) {
        Err(IngestError::Stream(StreamError::WentBack { height, after })) => {
            assert_eq!((height, after), (2, 3));
        }
        other => panic!("expected a step back, got {other:?}"),
    }
    assert_eq!(temp.snapshot(&input), before);
}

/// Sends `lines` to a new peer of `address`, dialling until the socket takes it.
fn send(address: &str, lines: &[String]) -> PairSender {
    let mut sender = loop {
        if let Ok(sender) = PairSender::dial(address) {
            break sender;
        }
        std::thread::yield_now();
    };
    for line in lines {
        sender.send(&encode(line)).unwrap();
    }
    sender
}

#[test]
fn a_socket_stream_with_a_hole_is_cut_and_the_next_connection_goes_on() {
    let blocks = core_stream("chain-1", 4);
    let complete = text(&flat(&blocks));
    let expected = TempStore::with(&complete).snapshot(&complete);
    let temp = TempStore::new();
    let socket = Socket::bind("127.0.0.1:0", 1 << 20).unwrap();
    let address = socket.address().strip_prefix("tcp://").unwrap().to_owned();
    let stop = AtomicBool::new(false);
    let (heights, committed) = mpsc::channel();
    std::thread::scope(|scope| {
        let ingest = scope.spawn(|| {
            temp.ingest_socket(socket, &stop, &mut |stats| {
                heights.send(stats.last_height).unwrap();
            })
        });
        // Heights 1, 1 and 2, then 4: block 3 is missing, so the connection is closed.
        let holed = [&blocks[..3], &blocks[4..]].concat();
        let first = send(&address, &flat(&holed));
        // The socket takes the next peer only once the first one is closed: then the rest.
        let second = send(&address, &flat(&blocks[3..]));
        while committed.recv().unwrap() != Some(4) {}
        stop.store(true, Ordering::Relaxed);
        ingest.join().unwrap().unwrap();
        drop((first, second));
    });
    assert_eq!(temp.snapshot(&complete), expected);
}
