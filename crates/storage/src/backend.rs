//! What a backend is, as the programs that compose one see it, and what backend implementations
//! share.
//!
//! A program picks its backend once, from the database's URL or path, as a [`Backend`]; from
//! then on it sees only a [`Store`] to read and a boxed [`IngestWriter`] to write. A backend
//! crate (SQLite here, PostgreSQL in `storage-postgres`) implements both traits and runs the
//! conformance suite (`suite`, behind the `suite` feature) against its store and writer.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use ledger_core::TimeRange;

use crate::{ChainState, Error, Examples, Health, IngestBatch, IngestWriter, LedgerStore};
use crate::{OracleStore, Scrub, ScrubProgress, WriterOptions};

/// Everything the HTTP layer reads, in one bound: implemented by every type that implements the
/// three read traits, so that one `Arc<dyn ReadStore>` stands for all three.
pub trait ReadStore: LedgerStore + OracleStore + Health {}

impl<T: LedgerStore + OracleStore + Health> ReadStore for T {}

/// A store opened to serve: everything the HTTP layer reads, and what operators' commands ask
/// of the stored chain.
pub trait Store: ReadStore {
    /// The chain id and the first and last stored blocks, read in one snapshot.
    fn chain(&self) -> Result<ChainState, Error>;

    /// Real ids to show in example URLs; all `None` for an empty store.
    fn examples(&self) -> Result<Examples, Error>;

    /// Reads and verifies everything the store holds (`server check --deep`), reporting each
    /// unit read to `progress`; damage found is a [`Finding`](crate::Finding) of the answer, not
    /// an error.
    fn scrub(&self, progress: &mut dyn FnMut(ScrubProgress)) -> Result<Scrub, Error>;

    /// Makes [`Health::chain_tip`] and [`OracleStore::data_version`] show every commit made so
    /// far, where they may lag (a store whose tip never lags does nothing).
    fn refresh_chain_tip(&self) -> Result<(), Error> {
        Ok(())
    }
}

/// One database of one backend, not opened yet: what `serve`, `ingest`, `migrate` and `check`
/// open it as.
pub trait Backend: Send + Sync {
    /// What to call the database in messages and logs (never a password).
    fn describe(&self) -> String;

    /// Whether there is a database to open. A file-backed store answers whether its file
    /// exists; a server-backed one says `true` and lets [`open_store`](Self::open_store) fail.
    fn exists(&self) -> bool;

    /// Opens the store to serve, allowing `max_readers` reads at once (export permits plus page
    /// slots), which sizes a pool where the backend has one. It checks the schema version and
    /// row format; whether it also creates or migrates the schema is the backend's to say.
    fn open_store(&self, max_readers: usize) -> Result<Arc<dyn Store>, Error>;

    /// Opens the database's single writer with `options`, creating or migrating the schema
    /// first.
    fn open_writer(&self, options: &WriterOptions) -> Result<Box<dyn IngestWriter>, Error>;

    /// Creates or upgrades the schema; says what was done.
    fn migrate(&self) -> Result<Migrated, Error>;

    /// Copies the database as of one commit into the new file `out` while it is served and
    /// written, and says which blocks the copy holds; a backend whose own tools back it up
    /// better refuses ([`Incompatible::Backup`](crate::Incompatible::Backup)), naming them.
    fn backup(&self, out: &Path) -> Result<ChainState, Error>;
}

/// What [`Backend::migrate`] did: the schema version before and after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Migrated {
    /// The schema version found (0 for a database without our schema).
    pub from: u32,
    /// The schema version now.
    pub to: u32,
}

impl std::fmt::Display for Migrated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.from == self.to {
            write!(f, "schema up to date (version {})", self.to)
        } else {
            write!(
                f,
                "schema migrated from version {} to {}",
                self.from, self.to
            )
        }
    }
}

/// Appends `node` to `nodes` and returns where it lies there (an [`OraclePage`](crate::OraclePage)'s
/// nodes share one buffer).
pub fn push_node(nodes: &mut Vec<u8>, node: &[u8]) -> Range<usize> {
    let start = nodes.len();
    nodes.extend_from_slice(node);
    start..nodes.len()
}

/// Makes room in a page's `nodes` before a segment's data are cut into it, when it has less
/// than the segment's `bytes` of JSON (`data` data) free: segments are alike, so room at once
/// for the `rest` data the scan still wants (at most 1024), half as long again as this
/// segment's mean. The buffer then grows once or twice a page rather than at every doubling,
/// each a copy of the nodes so far.
pub fn reserve_nodes(nodes: &mut Vec<u8>, bytes: usize, data: usize, rest: usize) {
    if nodes.capacity() - nodes.len() < bytes {
        let mean = bytes / data.max(1);
        nodes.reserve(mean * rest.min(1024) * 3 / 2);
    }
}

/// The half-open range as inclusive bounds, `None` when it holds no time at all: an open end
/// must still include a row at `i64::MAX`, which no exclusive bound can.
pub fn inclusive_bounds(range: &TimeRange) -> Option<(i64, i64)> {
    let low = range.start().unwrap_or(i64::MIN);
    let high = match range.end() {
        Some(end) => end.checked_sub(1)?,
        None => i64::MAX,
    };
    (low <= high).then_some((low, high))
}

/// What a backend's writer does after writing a batch: commit its transaction
/// ([`IngestWriter::commit`]), or keep it open for the next batch
/// ([`IngestWriter::stage`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Then {
    /// Commit the transaction.
    Commit,
    /// Leave it open.
    KeepOpen,
}

/// The `commit` and `stage` of every backend's writer: `write` writes the batch into the open
/// transaction (beginning one) and does what `then` says; when it fails, `undo` rolls the open
/// transaction back and drops what the writer cached from it (dictionary keys, segments), since
/// all of it is gone with the transaction.
pub fn write_whole<W>(
    writer: &mut W,
    batch: &IngestBatch,
    then: Then,
    write: fn(&mut W, &IngestBatch, Then) -> Result<(), Error>,
    undo: fn(&mut W),
) -> Result<(), Error> {
    let result = write(writer, batch, then);
    if result.is_err() {
        undo(writer);
    }
    result
}
