//! Ingest of Vega's event bus into a store.
//!
//! Input is Vega's event stream in any of its forms: an event buffer file as Vega's core
//! writes it (length-prefixed protobuf `BusEvent` records), maybe gzip-compressed, a
//! directory of them, newline-delimited protobuf JSON as Vega's tools print it, or records a
//! caller frames itself (a socket). [`ingest`] reads it to its end, keeps the events that
//! matter (time updates, begin and end of blocks, ledger movements, oracle data), encodes
//! every value once into the form the API serves, and commits whole blocks through a
//! [`storage::IngestWriter`]. It is idempotent: a block already stored, or the stored part of
//! a block, is skipped, so overlapping inputs and re-runs after a failure add nothing twice.
//!
//! The stages have a module each: framing (`frames`: lines, buffer records, directories),
//! decoding (`decode`: protobuf JSON, protobuf) into one format-neutral event, encoding of
//! the values (`prepare`), the reader that runs those (`reader`: a framing thread and decoder threads), the assembler of
//! blocks and batches (`assembler`) and the writer thread (`writer`), joined in `pipeline`.
//! Errors ([`IngestError`]) name a record's [`Location`] with a typed [`RecordError`].
//!
//! The synthetic streams of the demo database, the tests and the benchmarks come from the
//! `eventgen` crate, so that the server's ingest does not link a random number generator.
//!
//! This crate must not know SQL or HTTP: it talks to storage through its traits.

// Tests may unwrap (STYLE.md); the library itself is still linted without `cfg(test)`.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod assembler;
mod decode;
mod error;
mod frames;
mod input;
mod pipeline;
mod prepare;
mod reader;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod transcode;
mod writer;

pub use error::{EventError, IngestError, Location, RecordError, StreamError};
pub use frames::socket::Socket;
pub use frames::{Encoding, Frames, PeerControl, Step};
pub use input::{Format, Input};
pub use pipeline::{DEFAULT_MAX_RECORD_BYTES, IngestOptions, ROWS_PER_PARTY, ingest};

/// Counters of an ingest: what was committed so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IngestStats {
    /// Events stored (skipped duplicates excluded).
    pub events: u64,
    /// Complete blocks committed.
    pub blocks: u64,
    /// Ledger entries stored.
    pub ledger_entries: u64,
    /// Export rows written (one per entry and owning party).
    pub ledger_rows: u64,
    /// Oracle data stored.
    pub oracle_data: u64,
    /// Events already stored by an earlier run, skipped.
    pub skipped_events: u64,
    /// Events of a last block that the input cut off before its end, not stored.
    pub incomplete_events: u64,
    /// Height of the last committed block.
    pub last_height: Option<u64>,
    /// Vega time at the last committed block.
    pub last_vega_time: Option<i64>,
}

impl IngestStats {
    fn absorb(&mut self, more: &IngestStats) {
        self.events += more.events;
        self.blocks += more.blocks;
        self.ledger_entries += more.ledger_entries;
        self.ledger_rows += more.ledger_rows;
        self.oracle_data += more.oracle_data;
        self.skipped_events += more.skipped_events;
        self.incomplete_events += more.incomplete_events;
        self.last_height = more.last_height.or(self.last_height);
        self.last_vega_time = more.last_vega_time.or(self.last_vega_time);
    }
}
