//! Listening for the one peer a pair socket has.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};

use crate::handshake::{self, HandshakeError};
use crate::{Config, PairConnection};

/// Why [`PairListener::accept`] returned no connection.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AcceptError {
    /// Accepting on the listening socket failed.
    #[error("accepting a connection failed")]
    Listener(#[source] io::Error),
    /// A peer connected but the handshake failed; its connection is closed, the listener is fine.
    #[error("the handshake with {peer} failed")]
    Handshake {
        /// The peer's address.
        peer: SocketAddr,
        /// What went wrong.
        #[source]
        source: HandshakeError,
    },
}

/// A listening pair v0 socket: one peer at a time, the others refused by the caller through
/// [`refuse_pending`](Self::refuse_pending).
#[derive(Debug)]
pub struct PairListener {
    listener: TcpListener,
    config: Config,
}

impl PairListener {
    /// Binds with the default [`Config`].
    pub fn bind(addr: impl ToSocketAddrs) -> io::Result<PairListener> {
        Self::bind_with(addr, Config::default())
    }

    /// Binds with the given limits.
    pub fn bind_with(addr: impl ToSocketAddrs, config: Config) -> io::Result<PairListener> {
        Ok(PairListener {
            listener: TcpListener::bind(addr)?,
            config,
        })
    }

    /// The bound address (useful after binding port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Waits for a peer and exchanges headers with it (within
    /// [`Config::handshake_timeout`]).
    ///
    /// A peer that fails the handshake is disconnected and reported as
    /// [`AcceptError::Handshake`]; the caller logs it and accepts again.
    pub fn accept(&self) -> Result<PairConnection, AcceptError> {
        self.listener
            .set_nonblocking(false)
            .map_err(AcceptError::Listener)?;
        let (stream, peer) = self.listener.accept().map_err(AcceptError::Listener)?;
        self.handshake(stream, peer)
    }

    /// Like [`accept`](Self::accept) but returns `Ok(None)` at once when no peer is waiting,
    /// so that a caller can also watch a stop flag.
    pub fn try_accept(&self) -> Result<Option<PairConnection>, AcceptError> {
        match self.accept_nonblocking().map_err(AcceptError::Listener)? {
            Some((stream, peer)) => self.handshake(stream, peer).map(Some),
            None => Ok(None),
        }
    }

    /// Accepts every peer waiting now and closes it at once, returning their addresses for the
    /// caller to log: pair has one peer at a time, so while one is connected the caller calls
    /// this between messages or timeouts. Never waits.
    pub fn refuse_pending(&self) -> io::Result<Vec<SocketAddr>> {
        let mut refused = Vec::new();
        while let Some((stream, peer)) = self.accept_nonblocking()? {
            // Closing without a header: the peer's handshake fails and it dials again later.
            drop(stream);
            refused.push(peer);
        }
        Ok(refused)
    }

    fn accept_nonblocking(&self) -> io::Result<Option<(TcpStream, SocketAddr)>> {
        self.listener.set_nonblocking(true)?;
        loop {
            match self.listener.accept() {
                Ok(accepted) => return Ok(Some(accepted)),
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
    }

    fn handshake(
        &self,
        mut stream: TcpStream,
        peer: SocketAddr,
    ) -> Result<PairConnection, AcceptError> {
        let handshake_failed = |source| AcceptError::Handshake { peer, source };
        // An accepted socket may inherit the listener's non-blocking mode on some platforms.
        stream
            .set_nonblocking(false)
            .map_err(|error| handshake_failed(HandshakeError::Io(error)))?;
        handshake::exchange(&mut stream, self.config.handshake_timeout)
            .map_err(handshake_failed)?;
        Ok(PairConnection::new(
            stream,
            peer,
            self.config.max_message_bytes,
        ))
    }
}
