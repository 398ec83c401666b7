//! Framing: an input cut into records, one event's bytes each, with their positions.
//!
//! Implementations: [`lines`] (NDJSON), [`records`] (Vega's length-prefixed buffer records),
//! and [`directory`], a directory of files read one after the other. A socket source is a
//! further implementation of [`Frames`]: one message per record, and [`Step::PeerGone`] when
//! its peer goes away.

pub(crate) mod directory;
pub(crate) mod lines;
pub(crate) mod records;
pub(crate) mod socket;

use std::io::{BufRead, BufReader, ErrorKind, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{IngestError, Location};

/// How a record's bytes encode its event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Encoding {
    /// Protobuf JSON, as Vega's tools print events.
    Json,
    /// Protobuf, as Vega's core writes buffer files and sends events over its socket.
    Protobuf,
}

/// What [`Frames::advance`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// A record: its bytes are [`Frames::record`], its position [`Frames::location`].
    Record(Encoding),
    /// Everything buffered is handed out and the next call may wait for input: the moment to
    /// pass on what is decoded, so that a quiet live stream is still committed.
    Drained,
    /// The peer of a live source went away: the block being assembled is incomplete and must
    /// not be committed yet. Its rest may come on the next connection (resent events are
    /// skipped by their id); when that connection begins with another block instead, the
    /// interrupted block is dropped.
    PeerGone,
    /// A live source received what cannot be an event (a message over the bound) and closed
    /// its connection: the block being assembled is dropped whole, as a file's would be, and
    /// comes again whole on a new connection.
    Refused,
    /// The input ended.
    End,
}

/// A source of records.
///
/// `advance` and `record` are two calls, not one returning a borrow, so that implementations
/// and callers can loop over steps without holding a record across iterations.
pub trait Frames: Send {
    /// Moves to the next record, or says why there is none now.
    ///
    /// # Errors
    /// A record that cannot be framed (truncated, too large), or an input that cannot be read.
    fn advance(&mut self) -> Result<Step, IngestError>;

    /// The bytes of the record the last [`advance`](Self::advance) stopped at; empty when it
    /// did not stop at one.
    fn record(&self) -> &[u8];

    /// Where the current record is (or would begin, after an error).
    fn location(&self) -> Location;

    /// Told that the current record is not a valid event. A file stops the ingest with
    /// `error` (the default); a live source may instead drop what the record belonged to (a
    /// socket logs it and closes the connection) and return `Ok`: the block in progress is
    /// then dropped, as after [`Step::Refused`].
    ///
    /// # Errors
    /// `error`, when the ingest must stop.
    fn reject(&mut self, error: IngestError) -> Result<(), IngestError> {
        Err(error)
    }

    /// For a live source: the handle through which the ingest asks it to close a connection
    /// whose stream broke the chain's rules (a missing block, another chain). `None` (the
    /// default) for a source that has no connections to close.
    fn peer_control(&self) -> Option<PeerControl> {
        None
    }
}

/// Asks a live source, from the ingest's other threads, to close one of its connections.
///
/// Both sides number connections alike, from 0, by counting the steps that end them
/// ([`Step::PeerGone`] and [`Step::Refused`], one per connection closed): the source as it
/// answers them, the ingest as it reads them. A request for a connection that has already
/// ended therefore closes nothing.
#[derive(Clone, Debug, Default)]
pub struct PeerControl(Arc<AtomicU64>);

impl PeerControl {
    /// Asks for connection number `connection` to be closed.
    pub(crate) fn close(&self, connection: u64) {
        self.0.store(connection + 1, Ordering::Relaxed);
    }

    /// Whether connection number `connection` should be closed: a source calls this before
    /// each read and, when it answers true, closes it and answers [`Step::Refused`].
    pub fn close_requested(&self, connection: u64) -> bool {
        self.0.load(Ordering::Relaxed) == connection + 1
    }
}

/// A large buffer: records are framed in place in it, and fewer reads mean fewer system calls.
pub(crate) const READ_BUFFER: usize = 1 << 20;

/// A buffered input that counts what it consumed and tells a read that may wait from one that
/// will not.
pub(crate) struct Reader {
    input: BufReader<Box<dyn Read + Send>>,
    source: Arc<str>,
    /// Bytes consumed so far: the offset of the next byte.
    offset: u64,
    /// Whether [`Fill::Drained`] was answered since the last read.
    drained: bool,
}

/// What [`Reader::fill`] found.
pub(crate) enum Fill {
    /// Bytes are buffered.
    Data,
    /// Nothing is buffered and the next call reads.
    Drained,
    /// The input ended.
    End,
}

impl Reader {
    pub(crate) fn new(input: BufReader<Box<dyn Read + Send>>, source: Arc<str>) -> Self {
        Self {
            input,
            source,
            offset: 0,
            drained: false,
        }
    }

    /// Makes bytes available in [`buffer`](Self::buffer), reading if none are.
    pub(crate) fn fill(&mut self) -> Result<Fill, IngestError> {
        if !self.input.buffer().is_empty() {
            return Ok(Fill::Data);
        }
        if !self.drained {
            self.drained = true;
            return Ok(Fill::Drained);
        }
        loop {
            match self.input.fill_buf() {
                Ok([]) => return Ok(Fill::End),
                Ok(_) => {
                    self.drained = false;
                    return Ok(Fill::Data);
                }
                Err(err) if err.kind() == ErrorKind::Interrupted => {}
                Err(error) => {
                    return Err(IngestError::Read {
                        source_name: Arc::clone(&self.source),
                        error,
                    });
                }
            }
        }
    }

    /// The buffered bytes.
    pub(crate) fn buffer(&self) -> &[u8] {
        self.input.buffer()
    }

    pub(crate) fn consume(&mut self, len: usize) {
        self.input.consume(len);
        self.offset += len as u64;
    }

    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    pub(crate) fn source(&self) -> &Arc<str> {
        &self.source
    }
}

/// Where the current record is held: at the start of the reader's buffer, or copied aside
/// because it straddled two reads.
#[derive(Clone, Copy)]
pub(crate) enum Held {
    /// Nothing: the last step was not a record.
    Nothing,
    /// `buffer()[start..end]`; `consume` bytes are consumed on the next step.
    Buffer {
        start: usize,
        end: usize,
        consume: usize,
    },
    /// `carry[start..]`.
    Carry { start: usize },
}

/// What the framings share: the reader, the record they hold, and its position.
pub(crate) struct Framed {
    pub(crate) reader: Reader,
    /// The start of a record that the buffer cut off, or the whole current record if it was.
    pub(crate) carry: Vec<u8>,
    pub(crate) held: Held,
    /// Records begun.
    pub(crate) record: u64,
    /// Offset of the current record's first byte.
    pub(crate) start: u64,
}

impl Framed {
    pub(crate) fn new(reader: Reader) -> Self {
        Self {
            reader,
            carry: Vec::new(),
            held: Held::Nothing,
            record: 0,
            start: 0,
        }
    }

    /// Lets go of the last step's record, and notes where the next one starts.
    pub(crate) fn release(&mut self) {
        match std::mem::replace(&mut self.held, Held::Nothing) {
            Held::Nothing => {}
            Held::Buffer { consume, .. } => self.reader.consume(consume),
            Held::Carry { .. } => self.carry.clear(),
        }
        if self.carry.is_empty() {
            self.start = self.reader.offset();
        }
    }

    pub(crate) fn record(&self) -> &[u8] {
        match self.held {
            Held::Nothing => &[],
            Held::Buffer { start, end, .. } => &self.reader.buffer()[start..end],
            Held::Carry { start } => &self.carry[start..],
        }
    }

    pub(crate) fn location(&self, line: Option<u64>) -> Location {
        Location {
            source: Arc::clone(self.reader.source()),
            record: self.record,
            offset: self.start,
            line,
        }
    }
}
