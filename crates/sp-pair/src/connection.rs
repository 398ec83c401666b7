//! Receiving messages: the length prefix, the bound, the body, resumable across timeouts.

use std::io::{self, BufReader, Read};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::HEADER_BYTES;

/// Why [`PairConnection::recv`] returned without a message.
///
/// After [`RecvError::TimedOut`] the connection stays usable and a partly received message is
/// kept; after any other error the caller should drop the connection (calling `recv` again
/// returns the same error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecvError {
    /// The read timeout passed before a whole message arrived; call `recv` again to go on.
    #[error("no whole message arrived within the read timeout")]
    TimedOut,
    /// The message's length prefix is over the bound; none of its body was read.
    #[error("a message of {length} bytes is over the bound of {max} bytes")]
    TooLarge {
        /// The length the prefix announced.
        length: u64,
        /// [`Config::max_message_bytes`](crate::Config::max_message_bytes).
        max: u64,
    },
    /// The peer closed the connection in the middle of a message (its prefix or its body).
    #[error("the peer closed the connection {received} bytes into a message{}", announced(*.length))]
    ClosedMidMessage {
        /// Bytes of this message received, its 8-byte length prefix included.
        received: u64,
        /// The body length the prefix announced, when the whole prefix arrived.
        length: Option<u64>,
    },
    /// Reading from the socket failed.
    #[error("reading from the peer failed")]
    Io(#[source] io::Error),
}

fn announced(length: Option<u64>) -> String {
    length.map_or_else(String::new, |length| format!(" of {length} bytes"))
}

/// Where a message sits in the connection's byte stream, for error reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    /// The message's number, counting from 0.
    pub message: u64,
    /// The byte offset of its length prefix in what the peer sent (its header included).
    pub offset: u64,
}

/// One accepted or dialled peer, after a successful handshake.
///
/// Dropping it closes the connection.
#[derive(Debug)]
pub struct PairConnection {
    reader: BufReader<TcpStream>,
    peer: SocketAddr,
    max_message_bytes: u64,
    /// The length prefix of the message being received and how much of it has arrived.
    prefix: [u8; HEADER_BYTES],
    prefix_filled: usize,
    /// The body being received, sized once its prefix is whole; swapped into the caller's buffer.
    body: Vec<u8>,
    body_filled: usize,
    position: Position,
}

impl PairConnection {
    /// Wraps a stream whose handshake has succeeded.
    pub(crate) fn new(stream: TcpStream, peer: SocketAddr, max_message_bytes: u64) -> Self {
        PairConnection {
            // 64 KiB: a few hundred typical events per read system call.
            reader: BufReader::with_capacity(64 << 10, stream),
            peer,
            max_message_bytes,
            prefix: [0; HEADER_BYTES],
            prefix_filled: 0,
            body: Vec::new(),
            body_filled: 0,
            position: Position {
                message: 0,
                offset: HEADER_BYTES as u64,
            },
        }
    }

    /// Receives the next message into `buf` (replacing its contents).
    ///
    /// Returns `Ok(Some(()))` with a message, `Ok(None)` when the peer closed the connection
    /// cleanly between two messages, [`RecvError::TimedOut`] when the read timeout passed first
    /// (the partial message is kept for the next call), or another error, after which the
    /// connection should be dropped. A message over [`Config::max_message_bytes`] is refused
    /// from its prefix alone.
    ///
    /// [`Config::max_message_bytes`]: crate::Config::max_message_bytes
    pub fn recv(&mut self, buf: &mut Vec<u8>) -> Result<Option<()>, RecvError> {
        while self.prefix_filled < HEADER_BYTES {
            let n = read_some(&mut self.reader, &mut self.prefix[self.prefix_filled..])?;
            if n == 0 {
                if self.prefix_filled == 0 {
                    return Ok(None);
                }
                return Err(RecvError::ClosedMidMessage {
                    received: self.prefix_filled as u64,
                    length: None,
                });
            }
            self.prefix_filled += n;
            if self.prefix_filled == HEADER_BYTES {
                let length = self.body_length()?;
                // Within the bound, so the allocation is bounded too.
                self.body.clear();
                self.body.resize(length, 0);
                self.body_filled = 0;
            }
        }
        // The prefix was checked when it completed; this only repeats a refusal.
        self.body_length()?;
        while self.body_filled < self.body.len() {
            let n = read_some(&mut self.reader, &mut self.body[self.body_filled..])?;
            if n == 0 {
                return Err(RecvError::ClosedMidMessage {
                    received: (HEADER_BYTES + self.body_filled) as u64,
                    length: Some(self.body.len() as u64),
                });
            }
            self.body_filled += n;
        }
        std::mem::swap(buf, &mut self.body);
        self.position.message += 1;
        self.position.offset += (HEADER_BYTES + buf.len()) as u64;
        self.prefix_filled = 0;
        Ok(Some(()))
    }

    /// The body length in the whole prefix, checked against the bound.
    fn body_length(&self) -> Result<usize, RecvError> {
        let length = u64::from_be_bytes(self.prefix);
        let too_large = RecvError::TooLarge {
            length,
            max: self.max_message_bytes,
        };
        if length > self.max_message_bytes {
            return Err(too_large);
        }
        usize::try_from(length).map_err(|_| too_large)
    }

    /// Where the next message (or the one partly received) starts.
    pub fn position(&self) -> Position {
        self.position
    }

    /// Sets how long [`recv`](Self::recv) waits for data before returning
    /// [`RecvError::TimedOut`]; `None` waits forever. A zero duration is an error.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.reader.get_ref().set_read_timeout(timeout)
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }
}

/// One read, retried when interrupted; a timeout is [`RecvError::TimedOut`].
fn read_some(reader: &mut impl Read, into: &mut [u8]) -> Result<usize, RecvError> {
    loop {
        match reader.read(into) {
            Ok(n) => return Ok(n),
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            // A socket read timeout is `WouldBlock` on Unix and `TimedOut` on Windows.
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(RecvError::TimedOut);
            }
            Err(error) => return Err(RecvError::Io(error)),
        }
    }
}
