//! The ingest's errors: where a bad record is, and what is wrong with it, as types.

use std::fmt;
use std::io;
use std::sync::Arc;

/// Why an ingest stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IngestError {
    /// A record (an NDJSON line, a buffer-file record) is not a valid event, or cannot be
    /// framed; nothing of its block was stored, every complete block before it was.
    #[error("{location}: {cause}")]
    Record {
        /// Where the record is.
        location: Location,
        /// What is wrong with it.
        cause: RecordError,
    },
    /// The input could not be read.
    #[error("cannot read {source_name}")]
    Read {
        /// The file (or `standard input`) that failed.
        source_name: Arc<str>,
        /// Why.
        #[source]
        error: io::Error,
    },
    /// The stream breaks the rules of one chain in one database: nothing of the block that
    /// broke them was stored, every complete block before it was.
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// The store refused the write.
    #[error("cannot write to the store")]
    Store(#[from] storage::Error),
    /// The system would not start one of the ingest's threads.
    #[error("cannot start an ingest thread")]
    Thread(#[source] io::Error),
    /// The thread that writes to the store stopped before the ingest did.
    #[error("the store writer thread stopped")]
    WriterGone,
}

/// How a stream breaks the rules of one chain in one database: heights rise by one from the last
/// stored block (a chain's first height comes twice: the genesis or checkpoint block, then the
/// first real block), every block of one chain, one block per height and hash.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// The stream skips a height.
    #[error("block {missing} is missing: the stream went from {from} to {to}")]
    Missing {
        /// The first height missing.
        missing: u64,
        /// The height before the hole.
        from: u64,
        /// The height after it.
        to: u64,
    },
    /// The stream begins above the block after the last stored one.
    #[error(
        "block {missing} is missing: the database ends at block {stored} and the stream \
         starts at {to}"
    )]
    MissingAfterStored {
        /// The first height missing.
        missing: u64,
        /// The last stored height.
        stored: u64,
        /// The stream's first height.
        to: u64,
    },
    /// The stream goes back to a height it has not stored.
    #[error("block {height} came after block {after}, and is not stored: heights rise by one")]
    WentBack {
        /// The height.
        height: u64,
        /// The height before it in the stream.
        after: u64,
    },
    /// The stream is of another chain than the database.
    #[error(
        "the stream is of chain {found:?}, the database holds chain {stored:?}: one database \
         holds one chain"
    )]
    OtherChain {
        /// The chain id stored (or of the stream's first block).
        stored: String,
        /// The chain id of the stream.
        found: String,
    },
    /// A block whose height is stored with another hash, beyond the first height's two blocks.
    #[error(
        "block {height} has hash {found}, the database holds block {height} with hash {stored}"
    )]
    OtherBlock {
        /// The height.
        height: u64,
        /// The stored block's hash.
        stored: String,
        /// The stream block's hash.
        found: String,
    },
}

/// Where a record is: the same shape for every input format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// The file the record is in (`standard input` for `-`).
    pub source: Arc<str>,
    /// The record's number in its file, counted from 1 (NDJSON: non-blank lines).
    pub record: u64,
    /// The byte offset of the record's first byte in its file (after decompression).
    pub offset: u64,
    /// The record's line number, for NDJSON.
    pub line: Option<u64>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: record {}", self.source, self.record)?;
        if let Some(line) = self.line {
            write!(f, " (line {line})")?;
        }
        write!(f, " at byte offset {}", self.offset)
    }
}

/// What is wrong with a record.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The input ends inside the record (a buffer file still being written ends this way).
    #[error("truncated record: {needed} bytes needed, the input ends after {available}")]
    Truncated {
        /// Bytes the record's header announces (header included).
        needed: u64,
        /// Bytes left in the input.
        available: u64,
    },
    /// The record is longer than the bound (`--max-record-bytes`); it was not read.
    #[error("record of {size} bytes is larger than the limit of {max} bytes")]
    TooLarge {
        /// Its size (a buffer record's payload; an NDJSON line's bytes so far).
        size: u64,
        /// The bound.
        max: usize,
    },
    /// A buffer record whose size field cannot hold even its sequence number.
    #[error("record size field {size} is smaller than the 8 bytes of its sequence number")]
    InvalidSize {
        /// The size field.
        size: u32,
    },
    /// An NDJSON line that is not UTF-8.
    #[error("line is not valid UTF-8")]
    NotUtf8,
    /// An NDJSON line that is not a JSON event.
    #[error("invalid JSON event: {0}")]
    Json(#[source] serde_json::Error),
    /// A buffer record that is not a protobuf `BusEvent`.
    #[error("invalid protobuf BusEvent: {0}")]
    Protobuf(#[source] prost::DecodeError),
    /// A well-formed event whose content is not valid.
    #[error(transparent)]
    Event(#[from] EventError),
}

/// What is wrong with a well-formed event, whatever its encoding.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    /// The event has no id.
    #[error("event has no id")]
    MissingId,
    /// The id is not `"<block height>-<sequence>"` within signed 64-bit integers.
    #[error("invalid event id {0:?}: expected \"<block height>-<sequence>\"")]
    InvalidId(String),
    /// The event's type names a payload that the event lacks.
    #[error("{event_type} event has no {payload}")]
    MissingPayload {
        /// The event's type (`BUS_EVENT_TYPE_…`).
        event_type: &'static str,
        /// The payload's name (protobuf JSON spelling).
        payload: &'static str,
    },
    /// A ledger entry has an invalid value.
    #[error("ledger entry {index}: {field}: {source}")]
    LedgerEntry {
        /// The entry's index in its event, across movements.
        index: usize,
        /// The field (protobuf JSON spelling, `fromAccount` for the account's fields).
        field: &'static str,
        /// What is wrong with it.
        #[source]
        source: ledger_core::Error,
    },
    /// A ledger entry lacks one of its accounts.
    #[error("ledger entry {index}: no {field}")]
    MissingAccount {
        /// The entry's index in its event.
        index: usize,
        /// `fromAccount` or `toAccount`.
        field: &'static str,
    },
    /// An oracle signer is neither a public key nor an Ethereum address, or both.
    #[error("oracle signer {0} must have exactly one of pubKey and ethAddress")]
    OracleSigner(usize),
    /// An oracle datum matched a spec whose id is invalid.
    #[error("matchedSpecIds: {0}")]
    MatchedSpecId(#[source] ledger_core::Error),
}
