//! The one error type of the storage layer.

use std::error::Error as StdError;

/// A storage failure, independent of the backend that produced it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The store cannot be reached or used right now (I/O, locked, cannot open, connection
    /// lost); retrying later may succeed, and a server answers 503 with `Retry-After`.
    #[error("storage unavailable")]
    Unavailable(#[source] Box<dyn StdError + Send + Sync>),
    /// The stored data are damaged: a read found what no writer of this program stores.
    #[error("storage corrupt: {0}")]
    Corrupt(String),
    /// The store is not one this program may use as it is: someone else's database, a schema
    /// not created yet, a newer schema version, or rows in another row format. The message says
    /// what to do (migrate, ingest, re-ingest); nothing was changed.
    #[error("{0}")]
    Incompatible(String),
    /// A value that a store cannot hold: heights, sequence numbers and times are signed 64-bit
    /// integers in every backend, so an unsigned value above `i64::MAX` is refused whole.
    #[error("{what} {value} is out of range: stores hold at most {max}", max = i64::MAX)]
    OutOfRange {
        /// What the value is (`"block height"`, `"sequence number"`).
        what: &'static str,
        /// The value refused.
        value: u64,
    },
    /// Another writer holds the store; a second one is refused rather than interleaved.
    #[error("{0}")]
    Busy(String),
    /// A batch of another chain than the one the store holds: one store holds one chain.
    #[error("the database holds chain {stored:?}, the stream is of chain {found:?}")]
    OtherChain {
        /// The chain id stored.
        stored: String,
        /// The chain id of the batch.
        found: String,
    },
    /// Any other backend failure: a bug or an unexpected state.
    #[error("storage failure")]
    Internal(#[source] Box<dyn StdError + Send + Sync>),
}

/// The cause of an [`Error::Internal`] raised by this crate's own checks rather than by a
/// backend's library: each is a bug of the writer, named so that a test or a log can tell them
/// apart.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Bug {
    /// A segment's lines reached 4 GiB, beyond what its index can address.
    #[error("a segment outgrew 4 GiB")]
    SegmentTooLarge,
    /// A writer asked to store a segment without lines.
    #[error("an empty segment to store")]
    EmptySegment,
    /// A segment's line count does not fit its column.
    #[error("a segment of too many lines")]
    TooManyLines,
    /// A line pushed at or before the key of the line before it.
    #[error("segment line {next:?} pushed after line {previous:?}: keys must ascend")]
    OutOfOrder {
        /// The key of the last line of the segment.
        previous: (i64, i64, i64, i64),
        /// The key pushed.
        next: (i64, i64, i64, i64),
    },
    /// A read made of several statements ended before its last one answered.
    #[error("a scan of several statements stopped after one")]
    ScanStopped,
}

impl From<Bug> for Error {
    fn from(bug: Bug) -> Error {
        Error::Internal(Box::new(bug))
    }
}

impl Error {
    /// A height or sequence number as the signed 64-bit integer every store holds.
    pub fn signed(what: &'static str, value: u64) -> Result<i64, Error> {
        i64::try_from(value).map_err(|_| Error::OutOfRange { what, value })
    }
}

/// The version of the stored rows' format: the finished CSV lines and JSON nodes are wire
/// bytes, so a change to what they hold (a column, a number format) makes every stored row
/// stale. Every backend records the version it wrote beside its schema version and refuses to
/// append to or serve rows of another one.
///
/// Format 2 stores a party's ledger lines in segments (`segment.rs`) instead of a row each.
/// Format 3: PostgreSQL segment lines are LZ4-compressed (and so are their indexes); SQLite's
/// stored bytes are those of format 2, so a SQLite database of format 2 was migrated in place.
/// Format 4: the ledger lines' `vega_time` column is written as Vega's export writes it
/// (`2023-03-10 10:24:30.507963+00`, PostgreSQL's text of a `timestamptz`) instead of RFC 3339
/// with nine fraction digits; every database of an earlier format is refused.
pub const ROW_FORMAT: u32 = 4;
