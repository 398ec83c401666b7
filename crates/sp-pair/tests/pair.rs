//! The pair socket over loopback: against our own sender, raw streams, and nng's `nngcat`.

#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::Duration;

use sp_pair::{
    AcceptError, Config, DialError, HandshakeError, PairConnection, PairListener, PairSender,
    Position, RecvError,
};

const PAIR_V0_HEADER: [u8; 8] = [0x00, 0x53, 0x50, 0x00, 0x00, 0x10, 0x00, 0x00];

fn listener(max_message_bytes: u64) -> PairListener {
    let config = Config {
        max_message_bytes,
        ..Config::default()
    };
    PairListener::bind_with("127.0.0.1:0", config).unwrap()
}

/// Dials from another thread (the handshake needs both sides) and accepts.
fn connect(listener: &PairListener) -> (PairConnection, PairSender) {
    let addr = listener.local_addr().unwrap();
    let dialler = thread::spawn(move || PairSender::dial(addr).unwrap());
    let connection = listener.accept().unwrap();
    (connection, dialler.join().unwrap())
}

/// A raw peer that has sent a valid header, for streams our sender would never write.
fn raw_peer(listener: &PairListener) -> (PairConnection, TcpStream) {
    let mut raw = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    raw.write_all(&PAIR_V0_HEADER).unwrap();
    let connection = listener.accept().unwrap();
    let mut header = [0; 8];
    raw.read_exact(&mut header).unwrap();
    assert_eq!(header, PAIR_V0_HEADER, "the listener's header");
    (connection, raw)
}

fn recv(connection: &mut PairConnection) -> Result<Option<Vec<u8>>, RecvError> {
    let mut buf = b"stale contents".to_vec();
    Ok(connection.recv(&mut buf)?.map(|()| buf))
}

#[test]
fn handshake_exchanges_the_pair_v0_header() {
    let listener = listener(1024);
    let (connection, sender) = connect(&listener);
    assert_eq!(sender.peer_addr(), listener.local_addr().unwrap());
    assert_eq!(connection.peer_addr().ip(), sender.peer_addr().ip());
    assert_eq!(
        connection.position(),
        Position {
            message: 0,
            offset: 8
        }
    );
}

#[test]
fn messages_arrive_whole_and_in_order() {
    let listener = listener(1 << 20);
    let (mut connection, mut sender) = connect(&listener);
    let big: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    let messages: [&[u8]; 4] = [b"first", b"", &big, b"\x00\x53\x50\x00"];
    sender.send(messages[0]).unwrap();
    sender.send_all(messages[1..].iter().copied()).unwrap();
    let mut offset = 8;
    for (index, expected) in messages.iter().enumerate() {
        assert_eq!(
            connection.position(),
            Position {
                message: index as u64,
                offset
            }
        );
        assert_eq!(recv(&mut connection).unwrap().as_deref(), Some(*expected));
        offset += 8 + expected.len() as u64;
    }
    drop(sender);
    assert_eq!(
        recv(&mut connection).unwrap(),
        None,
        "a clean close between messages"
    );
}

#[test]
fn framing_is_a_big_endian_u64_length() {
    let listener = listener(1024);
    let (mut connection, mut raw) = raw_peer(&listener);
    raw.write_all(&[
        0, 0, 0, 0, 0, 0, 0, 3, b'a', b'b', b'c', 0, 0, 0, 0, 0, 0, 1, 0,
    ])
    .unwrap();
    raw.write_all(&[b'x'; 256]).unwrap();
    assert_eq!(recv(&mut connection).unwrap().as_deref(), Some(&b"abc"[..]));
    assert_eq!(recv(&mut connection).unwrap(), Some(vec![b'x'; 256]));
}

#[test]
fn a_message_over_the_bound_is_refused_from_its_prefix() {
    let listener = listener(16);
    let (mut connection, mut raw) = raw_peer(&listener);
    raw.write_all(&16u64.to_be_bytes()).unwrap();
    raw.write_all(&[7; 16]).unwrap();
    assert_eq!(
        recv(&mut connection).unwrap(),
        Some(vec![7; 16]),
        "exactly the bound"
    );
    // Only the prefix is sent: the refusal cannot have waited for (or buffered) a body.
    raw.write_all(&u64::MAX.to_be_bytes()).unwrap();
    let error = recv(&mut connection).unwrap_err();
    assert!(
        matches!(
            error,
            RecvError::TooLarge {
                length: u64::MAX,
                max: 16
            }
        ),
        "{error:?}"
    );
    assert_eq!(
        connection.position(),
        Position {
            message: 1,
            offset: 8 + 8 + 16
        }
    );
    assert!(
        matches!(recv(&mut connection), Err(RecvError::TooLarge { .. })),
        "stays refused"
    );
}

#[test]
fn one_byte_over_the_bound_is_refused() {
    let listener = listener(16);
    let (mut connection, mut sender) = connect(&listener);
    sender.send(&[1; 17]).unwrap();
    let error = recv(&mut connection).unwrap_err();
    assert_eq!(
        error.to_string(),
        "a message of 17 bytes is over the bound of 16 bytes"
    );
}

#[track_caller]
fn check_closed_mid_message(sent: &[u8], expected: &str) {
    let listener = listener(1024);
    let (mut connection, mut raw) = raw_peer(&listener);
    raw.write_all(&[0, 0, 0, 0, 0, 0, 0, 2, b'o', b'k'])
        .unwrap();
    raw.write_all(sent).unwrap();
    drop(raw);
    assert_eq!(recv(&mut connection).unwrap().as_deref(), Some(&b"ok"[..]));
    let error = recv(&mut connection).unwrap_err();
    assert!(
        matches!(error, RecvError::ClosedMidMessage { .. }),
        "{error:?}"
    );
    assert_eq!(error.to_string(), expected);
    assert_eq!(
        connection.position(),
        Position {
            message: 1,
            offset: 18
        }
    );
}

#[test]
fn a_peer_closing_mid_message_is_an_error_not_a_message() {
    check_closed_mid_message(
        &[0, 0, 0],
        "the peer closed the connection 3 bytes into a message",
    );
    check_closed_mid_message(
        &[0, 0, 0, 0, 0, 0, 0, 10],
        "the peer closed the connection 8 bytes into a message of 10 bytes",
    );
    check_closed_mid_message(
        &[0, 0, 0, 0, 0, 0, 0, 10, 1, 2, 3, 4],
        "the peer closed the connection 12 bytes into a message of 10 bytes",
    );
}

#[test]
fn a_timeout_keeps_the_partial_message() {
    let listener = listener(1024);
    let (mut connection, mut raw) = raw_peer(&listener);
    connection
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    assert!(
        matches!(recv(&mut connection), Err(RecvError::TimedOut)),
        "idle"
    );
    raw.write_all(&[0, 0, 0, 0, 0]).unwrap();
    assert!(
        matches!(recv(&mut connection), Err(RecvError::TimedOut)),
        "in the prefix"
    );
    raw.write_all(&[0, 0, 5, b'h', b'e']).unwrap();
    assert!(
        matches!(recv(&mut connection), Err(RecvError::TimedOut)),
        "in the body"
    );
    raw.write_all(b"llo").unwrap();
    assert_eq!(
        recv(&mut connection).unwrap().as_deref(),
        Some(&b"hello"[..])
    );
}

#[track_caller]
fn check_header_refused(header: &[u8], expected: &str) {
    let listener = listener(1024);
    let mut raw = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    raw.write_all(header).unwrap();
    raw.shutdown(std::net::Shutdown::Write).unwrap();
    let error = listener.accept().unwrap_err();
    let AcceptError::Handshake { peer, source } = &error else {
        panic!("{error:?}")
    };
    assert_eq!(*peer, raw.local_addr().unwrap());
    assert_eq!(source.to_string(), expected);
    // The listener closed the connection after sending its own header.
    let mut rest = Vec::new();
    let _ = raw.read_to_end(&mut rest);
    assert_eq!(rest, PAIR_V0_HEADER);
}

#[test]
fn a_wrong_header_is_refused_and_the_connection_closed() {
    check_header_refused(
        &[0, b'S', b'P', 0, 0, 0x11, 0, 0],
        "the peer speaks SP protocol 17, not pair v0 (16)",
    );
    check_header_refused(
        b"GET / HT",
        "the peer sent [47, 45, 54, 20, 2f, 20, 48, 54], not a scalability-protocols header",
    );
    check_header_refused(
        &[0, b'S'],
        "the peer closed the connection after 2 of the 8 header bytes",
    );
}

#[test]
fn a_silent_peer_times_out_in_the_handshake() {
    let config = Config {
        handshake_timeout: Duration::from_millis(50),
        ..Config::default()
    };
    let listener = PairListener::bind_with("127.0.0.1:0", config).unwrap();
    let _silent = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let error = listener.accept().unwrap_err();
    assert!(
        matches!(
            &error,
            AcceptError::Handshake {
                source: HandshakeError::Io(_),
                ..
            }
        ),
        "{error:?}"
    );
}

#[test]
fn a_second_peer_is_refused_while_one_is_connected() {
    let listener = listener(1024);
    assert_eq!(listener.refuse_pending().unwrap(), Vec::<SocketAddr>::new());
    assert!(listener.try_accept().unwrap().is_none(), "nobody waiting");
    let (mut connection, mut sender) = connect(&listener);

    // `connect` returns once the kernel has queued the connection, so it is pending now.
    let mut second = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    assert_eq!(
        listener.refuse_pending().unwrap(),
        vec![second.local_addr().unwrap()]
    );
    let mut received = Vec::new();
    let _ = second.read_to_end(&mut received);
    assert_eq!(received, b"", "closed without a header");

    // A dialling sender sees its handshake fail. Connected here, so that it is pending before
    // the refusal; the handshake, which waits for the listener's answer, on a thread.
    let third = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let third_addr = third.local_addr().unwrap();
    let third = thread::spawn(move || PairSender::over(third));
    assert_eq!(listener.refuse_pending().unwrap(), vec![third_addr]);
    let error = third.join().unwrap().unwrap_err();
    assert!(matches!(error, DialError::Handshake(_)), "{error:?}");

    sender.send(b"still here").unwrap();
    assert_eq!(
        recv(&mut connection).unwrap().as_deref(),
        Some(&b"still here"[..])
    );
}

#[test]
fn a_peer_reconnects_after_closing() {
    let listener = listener(1024);
    for round in 0..3u8 {
        let (mut connection, mut sender) = connect(&listener);
        sender.send(&[round; 3]).unwrap();
        drop(sender);
        assert_eq!(recv(&mut connection).unwrap(), Some(vec![round; 3]));
        assert_eq!(recv(&mut connection).unwrap(), None);
    }
}

#[test]
fn dialling_a_closed_port_fails_to_connect() {
    let addr = listener(1).local_addr().unwrap();
    let error = PairSender::dial(addr).unwrap_err();
    assert!(matches!(error, DialError::Connect(_)), "{error:?}");
}

/// nng's `nngcat`: a peer we did not write.
mod nngcat {
    use std::io::{BufRead, BufReader};
    use std::process::{Child, ChildStdout, Command, Stdio};

    use super::*;

    /// Kills the child when the test ends, whatever happened.
    struct Peer(Child);

    impl Drop for Peer {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// Starts `nngcat` with `args`, or says why the test is skipped; under CI a missing
    /// `nngcat` fails the test.
    fn nngcat(args: &[&str]) -> Option<Peer> {
        spawn(Command::new("nngcat").args(args))
    }

    /// Starts `nngcat` with `args`, which listen on port 0 (`--verbose` added), and waits for
    /// it to say where it listens: no free port picked beforehand, so none to lose to another
    /// process, and no dialling until it listens. Its standard output comes line-buffered
    /// (`stdbuf`), since nngcat would otherwise hold the line until it exits; the reader holds
    /// the rest of it.
    fn nngcat_listening(args: &[&str]) -> Option<(Peer, SocketAddr, BufReader<ChildStdout>)> {
        let mut peer = spawn(
            Command::new("stdbuf")
                .args(["-oL", "nngcat", "--verbose"])
                .args(args),
        )?;
        let mut stdout = BufReader::new(peer.0.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let addr = line
            .trim_end()
            .strip_prefix("Listening at: tcp://")
            .unwrap_or_else(|| panic!("nngcat said {line:?}, not where it listens"))
            .parse()
            .unwrap();
        Some((peer, addr, stdout))
    }

    /// Starts `command`, or says why the test is skipped; under CI a missing `nngcat` fails.
    fn spawn(command: &mut Command) -> Option<Peer> {
        let spawned = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        match spawned {
            Ok(child) => Some(Peer(child)),
            Err(error) if std::env::var("CI").is_ok_and(|ci| ci == "true") => {
                panic!("nngcat is required under CI (Debian package nng-utils): {error}")
            }
            Err(error) => {
                eprintln!("skipped: nngcat (Debian package nng-utils) did not start: {error}");
                None
            }
        }
    }

    fn url(addr: SocketAddr) -> String {
        format!("tcp://{addr}")
    }

    #[test]
    fn nngcat_pair0_dials_sends_and_reconnects() {
        let listener = listener(1 << 20);
        let url = url(listener.local_addr().unwrap());
        for round in 0..2u8 {
            let message: Vec<u8> = (round..=255).cycle().take(3000).collect();
            let file = tempfile_with(round, &message);
            // `--recv-timeout 1`: nngcat sends the file as one message, waits a second, closes.
            let Some(_peer) = nngcat(&[
                "--pair0",
                "--dial",
                &url,
                "--file",
                &file.path,
                "--recv-timeout",
                "1",
            ]) else {
                return;
            };
            let mut connection = listener.accept().unwrap();
            assert_eq!(
                recv(&mut connection).unwrap(),
                Some(message),
                "round {round}"
            );
            assert_eq!(
                recv(&mut connection).unwrap(),
                None,
                "nngcat closes cleanly"
            );
        }
    }

    #[test]
    fn nngcat_pair1_is_refused() {
        let listener = listener(1024);
        let url = url(listener.local_addr().unwrap());
        let Some(_peer) = nngcat(&["--pair1", "--dial", &url, "--data", "x"]) else {
            return;
        };
        let error = listener.accept().unwrap_err();
        assert!(
            matches!(
                error,
                AcceptError::Handshake {
                    source: HandshakeError::WrongProtocol { protocol: 17 },
                    ..
                }
            ),
            "{error:?}"
        );
    }

    #[test]
    fn nngcat_pair0_listens_and_receives_ours() {
        let Some((_peer, addr, mut output)) = nngcat_listening(&[
            "--pair0",
            "--listen",
            "tcp://127.0.0.1:0",
            "--raw",
            "--recv-timeout",
            "2",
        ]) else {
            return;
        };
        let mut sender = PairSender::dial(addr).unwrap();
        sender.send_all([&b"one "[..], b"two ", b"three"]).unwrap();
        let mut received = Vec::new();
        output.read_to_end(&mut received).unwrap();
        assert_eq!(String::from_utf8_lossy(&received), "one two three");
    }

    /// A temporary file removed on drop (no tempfile crate for one file).
    struct TempFile {
        path: String,
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    fn tempfile_with(round: u8, contents: &[u8]) -> TempFile {
        let name = format!("sp-pair-nngcat-{}-{round}", std::process::id());
        let path = std::env::temp_dir().join(name);
        std::fs::write(&path, contents).unwrap();
        TempFile {
            path: path.to_str().unwrap().to_owned(),
        }
    }
}
