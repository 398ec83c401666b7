//! Storage for the ledger export and the oracle data listing.
//!
//! The crate has two halves:
//! - backend-neutral traits and query types ([`LedgerStore`], [`OracleStore`], [`IngestWriter`],
//!   [`Health`]) that the HTTP layer and the ingest pipeline program against;
//! - [`SqliteStore`], the embedded SQLite implementation (schema, migrations, row mapping), behind
//!   the `sqlite` cargo feature (on by default) so that users of the traits alone never link it.
//!
//! Values are encoded once, at ingest: a ledger row is stored as the finished CSV line as seen by
//! one party, an oracle datum as its finished Vega JSON node. Reads only copy bytes.
//!
//! The traits are synchronous: every backend call blocks, and async callers run it on a blocking
//! thread. Backend errors never appear in signatures; they are mapped to [`Error`].
//!
//! This crate must not know HTTP, JSON over HTTP, or the event-bus format.

// Tests may unwrap (STYLE.md); the library itself is still linted without `cfg(test)`.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod error;
mod model;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(all(test, feature = "sqlite"))]
mod suite;

pub use error::Error;
pub use model::{
    BlockRecord, BlockState, ExportSink, ExportSummary, Health, IngestBatch, IngestWriter,
    LedgerRow, LedgerStore, OracleRow, OracleStore,
};
#[cfg(feature = "sqlite")]
pub use sqlite::{Examples, SqliteConfig, SqliteStore, SqliteWriter};
