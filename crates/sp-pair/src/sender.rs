//! The dialling side: a peer for tests, benchmarks and the generator.

use std::io::{self, BufWriter, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};

use crate::handshake::{self, HandshakeError};
use crate::{Config, HEADER_BYTES};

/// Why [`PairSender::dial`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DialError {
    /// The TCP connection could not be made (Vega's core retries every few seconds).
    #[error("connecting failed")]
    Connect(#[source] io::Error),
    /// The listener answered, but not as a pair v0 socket, or closed at once (it already has
    /// a peer).
    #[error("the handshake failed")]
    Handshake(#[source] HandshakeError),
}

/// A dialled pair v0 socket that sends messages, as Vega's core does.
///
/// Messages are buffered; [`send`](Self::send) flushes each one, [`send_all`](Self::send_all)
/// flushes once after many.
#[derive(Debug)]
pub struct PairSender {
    writer: BufWriter<TcpStream>,
    peer: SocketAddr,
}

impl PairSender {
    /// Connects and exchanges headers (within [`Config::handshake_timeout`] of the default
    /// [`Config`]).
    pub fn dial(addr: impl ToSocketAddrs) -> Result<PairSender, DialError> {
        Self::over(TcpStream::connect(addr).map_err(DialError::Connect)?)
    }

    /// Exchanges headers over a connection already made (within
    /// [`Config::handshake_timeout`] of the default [`Config`]): a caller that must know the
    /// connection is made (queued by the listener's kernel) before the handshake answers
    /// connects first.
    pub fn over(mut stream: TcpStream) -> Result<PairSender, DialError> {
        let peer = stream.peer_addr().map_err(DialError::Connect)?;
        handshake::exchange(&mut stream, Config::default().handshake_timeout)
            .map_err(DialError::Handshake)?;
        // Small messages must leave at once, not wait for an acknowledgement (Nagle).
        stream.set_nodelay(true).map_err(DialError::Connect)?;
        Ok(PairSender {
            writer: BufWriter::with_capacity(64 << 10, stream),
            peer,
        })
    }

    /// Sends one message and flushes it.
    pub fn send(&mut self, message: &[u8]) -> io::Result<()> {
        self.write(message)?;
        self.writer.flush()
    }

    /// Sends many messages and flushes once at the end: one system call per 64 KiB.
    pub fn send_all<'m>(&mut self, messages: impl IntoIterator<Item = &'m [u8]>) -> io::Result<()> {
        for message in messages {
            self.write(message)?;
        }
        self.writer.flush()
    }

    /// Writes raw bytes without framing and flushes them: for tests that need a malformed or
    /// truncated stream.
    pub fn send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.writer.write_all(bytes)?;
        self.writer.flush()
    }

    fn write(&mut self, message: &[u8]) -> io::Result<()> {
        let length: [u8; HEADER_BYTES] = (message.len() as u64).to_be_bytes();
        self.writer.write_all(&length)?;
        self.writer.write_all(message)
    }

    /// The listener's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }
}
