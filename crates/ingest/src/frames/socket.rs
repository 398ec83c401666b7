//! Vega core's live event socket: one protobuf `BusEvent` per nanomsg pair message.
//!
//! The socket listens for one peer (core dials the data node and retries when refused);
//! messages become records. When the peer goes away, [`Step::PeerGone`] tells the assembler
//! that the block in progress waits for its rest from the next peer; when it sends a message
//! that cannot be an event, the connection is closed and [`Step::Refused`] drops that block.
//! Then the next peer is accepted. A second peer while one is connected is refused and logged.

use std::sync::Arc;
use std::time::Duration;

use sp_pair::{AcceptError, Config, PairConnection, PairListener, Position, RecvError};

use super::{Encoding, Frames, PeerControl, Step};
use crate::error::{IngestError, Location};

/// How long a read waits before the reader hands on what it decoded: a quiet stream is still
/// committed, and a stop is noticed.
const READ_TIMEOUT: Duration = Duration::from_millis(100);

/// Messages between two checks for a second peer while messages keep coming.
const REFUSE_EVERY: u64 = 1024;

/// A listening pair socket as a source of records.
pub struct Socket {
    listener: PairListener,
    address: Arc<str>,
    connection: Option<Connection>,
    message: Vec<u8>,
    held: bool,
    /// Where the current message starts in its connection.
    position: Position,
    /// Connections ended so far: the number of the current one.
    ended: u64,
    /// The ingest's requests to close a connection.
    control: PeerControl,
}

struct Connection {
    pair: PairConnection,
    source: Arc<str>,
}

impl Socket {
    /// Listens on `address` (`HOST:PORT`); messages over `max_message_bytes` are refused
    /// before they are read, and close the connection.
    ///
    /// # Errors
    /// When the address cannot be bound.
    pub fn bind(address: &str, max_message_bytes: usize) -> std::io::Result<Socket> {
        let config = Config {
            max_message_bytes: max_message_bytes as u64,
            ..Config::default()
        };
        let listener = PairListener::bind_with(address, config)?;
        let address = format!("tcp://{}", listener.local_addr()?).into();
        Ok(Socket {
            listener,
            address,
            connection: None,
            message: Vec::new(),
            held: false,
            position: Position {
                message: 0,
                offset: 0,
            },
            ended: 0,
            control: PeerControl::default(),
        })
    }

    /// The bound address, `tcp://HOST:PORT` (the real port when 0 was asked).
    pub fn address(&self) -> &str {
        &self.address
    }

    fn refuse_pending(&self) {
        match self.listener.refuse_pending() {
            Ok(refused) => {
                for peer in refused {
                    tracing::warn!(%peer, "refused a second peer: one is already connected");
                }
            }
            Err(error) => tracing::warn!(%error, "cannot check for a second peer"),
        }
    }

    /// Closes the connection, whose peer went away or sent what cannot be read.
    fn close(&mut self) {
        if self.connection.take().is_some() {
            self.ended += 1;
        }
    }
}

impl Frames for Socket {
    fn advance(&mut self) -> Result<Step, IngestError> {
        self.held = false;
        if self.connection.is_some() && self.control.close_requested(self.ended) {
            // The ingest has logged why (a missing block, another chain).
            let location = self.location();
            tracing::warn!("{location}: closing the connection: its stream was refused");
            self.close();
            return Ok(Step::Refused);
        }
        let Some(connection) = &mut self.connection else {
            return match self.listener.accept() {
                Ok(pair) => {
                    let source: Arc<str> = format!("tcp://{}", pair.peer_addr()).into();
                    pair.set_read_timeout(Some(READ_TIMEOUT)).map_err(|error| {
                        IngestError::Read {
                            source_name: Arc::clone(&source),
                            error,
                        }
                    })?;
                    tracing::info!(peer = %source, "event source connected");
                    self.connection = Some(Connection { pair, source });
                    Ok(Step::Drained)
                }
                Err(AcceptError::Listener(error)) => Err(IngestError::Read {
                    source_name: Arc::clone(&self.address),
                    error,
                }),
                Err(error) => {
                    tracing::warn!(error = %error, cause = ?std::error::Error::source(&error), "rejected a peer");
                    Ok(Step::Drained)
                }
            };
        };
        self.position = connection.pair.position();
        match connection.pair.recv(&mut self.message) {
            Ok(Some(())) => {
                if connection.pair.position().message % REFUSE_EVERY == 0 {
                    self.refuse_pending();
                }
                self.held = true;
                Ok(Step::Record(Encoding::Protobuf))
            }
            Ok(None) => {
                tracing::info!(peer = %connection.source, "event source disconnected");
                self.close();
                Ok(Step::PeerGone)
            }
            Err(RecvError::TimedOut) => {
                self.refuse_pending();
                Ok(Step::Drained)
            }
            Err(error @ RecvError::TooLarge { .. }) => {
                let location = self.location();
                tracing::error!("{location}: {error}; closing the connection");
                self.close();
                Ok(Step::Refused)
            }
            Err(error) => {
                // Cut off mid-message or a failed read: the peer went away, and the part of a
                // message it left is not an event.
                let location = self.location();
                tracing::warn!("{location}: {error}; closing the connection");
                self.close();
                Ok(Step::PeerGone)
            }
        }
    }

    fn record(&self) -> &[u8] {
        if self.held { &self.message } else { &[] }
    }

    fn location(&self) -> Location {
        match &self.connection {
            Some(connection) => Location {
                source: Arc::clone(&connection.source),
                // The connection counts messages from 0.
                record: self.position.message + 1,
                offset: self.position.offset,
                line: None,
            },
            None => Location {
                source: Arc::clone(&self.address),
                record: 0,
                offset: 0,
                line: None,
            },
        }
    }

    fn reject(&mut self, error: IngestError) -> Result<(), IngestError> {
        tracing::error!("{error}; closing the connection");
        self.close();
        Ok(())
    }

    fn peer_control(&self) -> Option<PeerControl> {
        Some(self.control.clone())
    }
}
