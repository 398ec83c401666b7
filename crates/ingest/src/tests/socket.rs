//! The live socket: a peer that goes away mid-block, a second peer, a bad message, and a stop
//! at a block boundary; the store ends as one clean run of the events would leave it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sp_pair::PairSender;

use super::TempStore;
use super::encode;
use super::formats::three_blocks;
use super::lines::text;
use crate::Socket;

/// Dials until the socket takes this peer, as Vega's core does: it refuses a peer while the
/// previous one is still connected.
fn dial(address: &str) -> PairSender {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match PairSender::dial(address) {
            Ok(sender) => return sender,
            Err(error) => assert!(Instant::now() < deadline, "cannot connect: {error}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn send(sender: &mut PairSender, lines: &[String]) {
    for line in lines {
        sender.send(&encode(line)).unwrap();
    }
}

#[test]
fn socket_ingest_survives_peers_that_go_away_and_bad_messages() {
    let lines = three_blocks();
    let good = text(&lines);
    let expected = TempStore::with(&good).snapshot(&good);
    let temp = TempStore::new();
    let socket = Socket::bind("127.0.0.1:0", 1 << 20).unwrap();
    let address = socket.address().strip_prefix("tcp://").unwrap().to_owned();
    let stop = AtomicBool::new(false);
    // The ingest reports each commit: the test waits on those reports, not on the clock.
    let (committed, commits) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        let ingest = scope.spawn(|| {
            temp.ingest_socket(socket, &stop, &mut |stats| {
                let _ = committed.send(stats.blocks);
            })
        });
        // Block 1 whole and block 2 cut after its ledger event, then the peer goes away.
        let mut first = PairSender::dial(&address).unwrap();
        send(&mut first, &lines[..8]);
        // A second peer while the first is connected is refused: its handshake fails. The first
        // one's dial returned after its handshake, which the socket answers as it accepts it.
        assert!(
            PairSender::dial(&address).is_err(),
            "a second peer must be refused"
        );
        drop(first);
        // A peer sends block 2 again and a message that is not an event: it is dropped.
        let mut third = dial(&address);
        send(&mut third, &lines[5..9]);
        third.send(&[0xff, 0xff]).unwrap();
        drop(third);
        // The next peer sends block 2 from its start and block 3; duplicates are skipped.
        let mut fourth = dial(&address);
        send(&mut fourth, &lines[5..]);
        while temp.snapshot(&good) != expected {
            commits
                .recv()
                .expect("the ingest ended before it stored the socket's blocks");
        }
        stop.store(true, Ordering::Relaxed);
        let stats = ingest.join().unwrap().unwrap();
        assert_eq!(stats.blocks, 3);
        assert_eq!(stats.events, 15);
        // Block 2 waited for its rest when the first peer left, took the third peer's one new
        // event after three resent ones, and was dropped with its 4 events at the bad message.
        assert_eq!(stats.incomplete_events, 4);
        drop(fourth);
    });
    assert_eq!(temp.snapshot(&good), expected);
}
