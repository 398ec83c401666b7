//! Messages of the SP pair socket (`sp-pair`) that a Vega core node streams its events on.
//!
//! Input: the bytes a peer sends after a valid handshake, then it closes the connection. The
//! receiver's bound is 4 KiB, so that over-long prefixes are common.
//! Checks: no panic and no hang; `recv` yields exactly the messages a model of the framing
//! (8-byte big-endian length, then the body) reads from the input, then ends as the model
//! says: cleanly at a message boundary, `TooLarge` for a prefix over the bound, or
//! `ClosedMidMessage` with the bytes received and the announced length.

#![no_main]

use std::sync::LazyLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use sp_pair::{Config, HEADER_BYTES, PairListener, PairSender, RecvError};

const MAX_MESSAGE_BYTES: u64 = 4096;

static LISTENER: LazyLock<PairListener> = LazyLock::new(|| {
    let config = Config {
        max_message_bytes: MAX_MESSAGE_BYTES,
        ..Config::default()
    };
    PairListener::bind_with("127.0.0.1:0", config).expect("a loopback listener")
});

/// How the model says the stream ends.
#[derive(Debug, PartialEq)]
enum End {
    Clean,
    TooLarge(u64),
    ClosedMidMessage { received: u64, length: Option<u64> },
}

fuzz_target!(|data: &[u8]| {
    let listener = &*LISTENER;
    let addr = listener.local_addr().expect("a bound address");
    let bytes = data.to_vec();
    // The peer runs beside the receiver: the handshake needs both sides, and a large input
    // would fill the socket buffers before the receiver reads.
    let peer = std::thread::spawn(move || {
        let mut sender = PairSender::dial(addr).expect("the handshake succeeds");
        // Refused once the receiver stops reading (a message over the bound): not a failure.
        let _ = sender.send_raw(&bytes);
    });
    let mut connection = listener.accept().expect("a valid handshake is accepted");
    connection
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a read timeout");
    let (expected, expected_end) = model(data);
    let mut received = Vec::new();
    let mut message = Vec::new();
    let end = loop {
        match connection.recv(&mut message) {
            Ok(Some(())) => received.push(message.clone()),
            Ok(None) => break End::Clean,
            Err(RecvError::TooLarge { length, max }) => {
                assert_eq!(max, MAX_MESSAGE_BYTES);
                break End::TooLarge(length);
            }
            Err(RecvError::ClosedMidMessage { received, length }) => {
                break End::ClosedMidMessage { received, length };
            }
            Err(other) => panic!("unexpected error: {other:?}"),
        }
    };
    drop(connection);
    peer.join().expect("the peer thread ends");
    assert_eq!(received, expected);
    assert_eq!(end, expected_end);
});

/// The messages in `data` and how the stream ends, read by the framing's definition.
fn model(mut data: &[u8]) -> (Vec<Vec<u8>>, End) {
    let mut messages = Vec::new();
    loop {
        if data.is_empty() {
            return (messages, End::Clean);
        }
        let Some((prefix, rest)) = data.split_first_chunk::<HEADER_BYTES>() else {
            let received = data.len() as u64;
            return (
                messages,
                End::ClosedMidMessage {
                    received,
                    length: None,
                },
            );
        };
        let length = u64::from_be_bytes(*prefix);
        if length > MAX_MESSAGE_BYTES {
            return (messages, End::TooLarge(length));
        }
        let length_usize = length as usize;
        if rest.len() < length_usize {
            let received = (HEADER_BYTES + rest.len()) as u64;
            let length = Some(length);
            return (messages, End::ClosedMidMessage { received, length });
        }
        messages.push(rest[..length_usize].to_vec());
        data = &rest[length_usize..];
    }
}
