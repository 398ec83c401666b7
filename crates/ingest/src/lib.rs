//! Ingest of Vega's event bus into a store.
//!
//! Input is newline-delimited JSON, one protobuf-JSON `BusEvent` per line, as Vega's tools print
//! it. [`ingest`] reads it to its end, keeps the events that matter (time updates, begin and end
//! of blocks, ledger movements, oracle data), encodes every value once into the form the API
//! serves, and commits whole blocks through a [`storage::IngestWriter`]. It is idempotent: a
//! block already stored, or the stored part of a block, is skipped, so overlapping inputs and
//! re-runs after a failure add nothing twice.
//!
//! The synthetic streams of the demo database, the tests and the benchmarks come from the
//! `eventgen` crate, so that the server's ingest does not link a random number generator.
//!
//! This crate must not know SQL or HTTP: it talks to storage through its traits.

// Tests may unwrap (STYLE.md); the library itself is still linted without `cfg(test)`.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod event;
mod pipeline;
#[cfg(test)]
mod tests;

use std::io;

pub use pipeline::{IngestOptions, ingest};

/// Why an ingest stopped.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// A line is not a valid event; nothing of its block was stored.
    #[error("line {line}: {reason}")]
    Line {
        /// 1-based line number in the input.
        line: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// The input could not be read.
    #[error("cannot read the input")]
    Read(#[source] io::Error),
    /// The store refused the write.
    #[error("cannot write to the store")]
    Store(#[from] storage::Error),
}

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
