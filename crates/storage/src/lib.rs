//! Storage for the ledger export and the oracle data listing.
//!
//! The crate holds:
//! - backend-neutral traits and query types ([`LedgerStore`], [`OracleStore`], [`IngestWriter`],
//!   [`Health`]) that the HTTP layer and the ingest pipeline program against, and the two a
//!   program composing a backend sees ([`Backend`], [`Store`]);
//! - what every backend shares: the stored format ([`ROW_FORMAT`], [`segment`]: the layout of a
//!   segment and the engine that lays lines into segments), the chain's queries ([`tip`]),
//!   typed errors, and the conformance suite (`suite`, behind the `suite` feature) that every
//!   backend's tests run;
//! - [`SqliteStore`], the embedded SQLite implementation (schema, migrations, row mapping), behind
//!   the `sqlite` cargo feature (on by default) so that users of the traits alone never link it.
//!
//! The PostgreSQL implementation (many servers over one database) is the crate
//! `storage-postgres`, so that a program embedding only SQLite links none of its dependencies.
//!
//! Values are encoded once, at ingest: a ledger row is stored as the finished CSV line as seen by
//! one party, back to back with that party's other lines in segments of about 256 KiB in export
//! order (`segment.rs`), an oracle datum as its finished Vega JSON node. Reads only copy bytes,
//! an export mostly whole segments at a time.
//!
//! The traits are synchronous: every backend call blocks, and async callers run it on a blocking
//! thread. Backend errors never appear in signatures; they are mapped to [`Error`].
//!
//! This crate must not know HTTP, JSON over HTTP, or the event-bus format.
//!
//! # The rules every backend follows
//!
//! The conformance suite (`src/suite.rs`) checks each of them against every backend.
//!
//! - **Ranges.** Heights, sequence numbers and vega times are stored as signed 64-bit integers:
//!   a batch holding a height or sequence number above `i64::MAX` is refused whole with
//!   [`Error::OutOfRange`], and a lookup of such a height finds nothing.
//! - **Blocks.** A block is its height and its `seq_base` (0, or after the first block of the
//!   same height: a real stream has two blocks of its first height); [`IngestWriter::blocks`]
//!   answers both. The chain id of the first batch naming one is recorded, and a batch of
//!   another chain is refused whole ([`Error::OtherChain`]).
//! - **Block records merge.** Committing a [`BlockRecord`] for a stored block keeps the first
//!   vega time seen (a later one never replaces it, a missing one never erases it) and the
//!   highest sequence number of the two.
//! - **Rows are immutable.** A row already stored at a key is left as it is; committing the same
//!   batch twice adds nothing.
//! - **One consistent cut per read.** A page reads one snapshot. An export answers what the
//!   store held when it started, byte for byte: batches committed while it runs, appending to
//!   the party's rows (as an ingest's next blocks do), never show in it, wholly or in part.
//!   SQLite reads an export in one snapshot; PostgreSQL in chunks of segments, each in a short
//!   snapshot of its own, bounded by the party's last line when the export started, so that no
//!   snapshot is held for as long as a slow client takes (a hot standby cancels one held past
//!   `max_standby_streaming_delay`). A batch that lands rows among the party's stored ones
//!   while a PostgreSQL export runs, which no ingest of one stream does, may show in its rest.
//! - **Data version.** [`OracleStore::data_version`] answers `None` (cannot tell, the default)
//!   or a version that moves with [`Health::chain_tip`]: a read begun after a version was
//!   answered sees at least the blocks of the tip answered with it, so the HTTP layer may serve
//!   a page read at that version again while it stays. It answers from memory: SQLite asks a
//!   connection kept for it (`PRAGMA data_version`), which changes with every commit;
//!   PostgreSQL counts what a thread of the store learns: the writer's announcement of each
//!   commit (`NOTIFY`, which that thread `LISTEN`s for), or a poll of the tip once per
//!   [`CHAIN_TIP_LAG`] where no announcement comes (a hot standby).
//! - **Chain tip.** [`Health::chain_tip`] answers from memory too, at most [`CHAIN_TIP_LAG`]
//!   behind the database: SQLite rereads the `blocks` table on the data-version connection when
//!   the version changed; PostgreSQL rereads it on that thread when a commit is announced and
//!   once per [`CHAIN_TIP_LAG`], which stops with the store.
//! - **Release on drop.** A read that stops early (the sink breaks, the caller panics or drops
//!   it) releases its snapshot and its connection; a writer releases its lock when dropped.
//! - **Row format.** Stored rows are finished wire bytes: a backend records [`ROW_FORMAT`] beside
//!   its schema version and refuses ([`Error::Incompatible`]) to serve or append to rows of
//!   another format, and never changes a database that is not its own. The older formats it
//!   upgrades, [`UPGRADABLE_FORMATS`], only an explicit migration upgrades; every other command
//!   refuses them, naming that migration.
//! - **Checksums.** Every stored blob carries a checksum written with it (`checksum.rs`), and
//!   every read compares it before a byte of the blob is used: a mismatch is
//!   [`Error::Corrupt`] naming the table and key ([`Place`]), never data.

// Tests may unwrap (STYLE.md); the library itself is still linted without `cfg(test)`.
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod backend;
pub mod checksum;
mod error;
mod model;
mod scrub;
pub mod segment;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(any(test, feature = "suite"))]
pub mod suite;
pub mod tip;
mod url;

pub use backend::{Backend, Migrated, ReadStore, Store};
pub use error::{
    Bug, Corruption, Damage, Error, Incompatible, Place, ROW_FORMAT, UPGRADABLE_FORMATS, Upgrade,
    row_format_mismatch, upgradable, upgrade_needed,
};
pub use model::{
    BlockRecord, BlockState, BlockTime, CHAIN_TIP_LAG, ChainState, ChainTip, Examples, ExportSink,
    ExportSummary, Health, IngestBatch, IngestWriter, LedgerRow, LedgerStore, OraclePage,
    OracleRow, OracleStore, TRANSACTION_BATCHES, WriterOptions,
};
pub use scrub::{Affects, Finding, SCRUB_SOURCES, Scrub, ScrubProgress, ScrubSource};
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteBackend, SqliteConfig, SqliteStore, SqliteWriter};
pub use url::{is_url, redact};
