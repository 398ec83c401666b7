//! The nanomsg scalability-protocols (SP) "pair" protocol, version 0, over TCP, with blocking
//! `std::net` sockets: the socket a Vega core node streams its events to.
//!
//! Wire format (nng's `sp-tcp` and `sp-pair` RFCs, which Vega's mangos and nng both speak):
//! on connect each side sends the 8-byte header `00 53 50 00 00 10 00 00` (`\0SP\0`, protocol 16
//! = pair v0, two reserved zero bytes) and checks the other's; then every message is an 8-byte
//! big-endian length followed by that many bytes of body. Pair has one peer at a time.
//!
//! Main types:
//! - [`PairListener`] binds, [`accept`](PairListener::accept)s one peer (handshake included),
//!   and lets the caller turn extra peers away with
//!   [`refuse_pending`](PairListener::refuse_pending) while one is connected;
//! - [`PairConnection`] receives messages into a caller's buffer, refuses a message longer than
//!   [`Config::max_message_bytes`] before buffering any of it, and returns on a read timeout
//!   without losing a partly received message, so that a caller can check a stop flag;
//! - [`PairSender`] dials a listener and sends messages: the peer of tests, benchmarks and the
//!   generator.
//!
//! The usual receiving loop, which commits idle work on timeouts and refuses a second peer:
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use sp_pair::{PairListener, RecvError};
//!
//! let listener = PairListener::bind("127.0.0.1:3005")?;
//! let mut connection = listener.accept()?;
//! connection.set_read_timeout(Some(Duration::from_millis(200)))?;
//! let mut message = Vec::new();
//! loop {
//!     match connection.recv(&mut message) {
//!         Ok(Some(())) => { /* decode `message` */ }
//!         Ok(None) => break, // the peer closed between two messages
//!         Err(RecvError::TimedOut) => { /* idle: check a stop flag, commit */ }
//!         Err(error) => return Err(error.into()), // drop the connection
//!     }
//!     for peer in listener.refuse_pending()? {
//!         eprintln!("refused {peer}: a peer is already connected");
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Why not a library: the crates that speak SP (`nng`, `runng`, `nanomsg`) bind the C
//! libraries, and the pure-Rust `scaproust` has been unmaintained since 2017 and offers neither a
//! bound on message size before buffering nor control over a second peer. The protocol is two
//! fixed-size reads per message.
//!
//! This crate must not know what a message contains (that is `bus-proto`'s work), must not
//! spawn threads, and must never buffer a message over the bound.
//!
//! See: <https://github.com/nanomsg/nng/blob/master/docs/rfc/sp-tcp.txt>

#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod connection;
mod handshake;
mod listener;
mod sender;

use std::time::Duration;

pub use connection::{PairConnection, Position, RecvError};
pub use handshake::HandshakeError;
pub use listener::{AcceptError, PairListener};
pub use sender::{DialError, PairSender};

/// The SP protocol number of pair v0, which is also the protocol its peer must speak.
pub const PAIR_V0: u16 = 0x10;

/// The length of the connection header and of each message's length prefix, in bytes.
pub const HEADER_BYTES: usize = 8;

/// Limits of a connection, shared by [`PairListener`] and [`PairSender`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The longest message body [`PairConnection::recv`] accepts; a longer one is refused
    /// with [`RecvError::TooLarge`] before any of its body is read.
    pub max_message_bytes: u64,
    /// How long the peer may take to send its header; a peer that connects and stays silent
    /// must not hold the only pair slot forever.
    pub handshake_timeout: Duration,
}

impl Config {
    /// The default [`Config::max_message_bytes`]: 8 MiB, far above any single Vega event.
    pub const DEFAULT_MAX_MESSAGE_BYTES: u64 = 8 << 20;
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_message_bytes: Self::DEFAULT_MAX_MESSAGE_BYTES,
            handshake_timeout: Duration::from_secs(5),
        }
    }
}
