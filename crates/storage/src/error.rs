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
    /// The stored data are damaged: a read found what no writer of this program stores (a
    /// checksum that does not match, an index that does not fit its lines). Never served: an
    /// export that has not started answers 500, one that has is cut.
    #[error("storage corrupt: {0}")]
    Corrupt(Corruption),
    /// The store is not one this program may use as it is: someone else's database, a schema
    /// not created yet, a newer schema version, or rows in another row format, or the settings
    /// naming it cannot be used. The message says what to do (migrate, ingest, re-ingest);
    /// nothing was changed.
    #[error("{0}")]
    Incompatible(Incompatible),
    /// A value that a store cannot hold: heights, sequence numbers and times are signed 64-bit
    /// integers in every backend, so an unsigned value above `i64::MAX` is refused whole.
    #[error("{what} {value} is out of range: stores hold at most {max}", max = i64::MAX)]
    OutOfRange {
        /// What the value is (`"block height"`, `"sequence number"`).
        what: &'static str,
        /// The value refused.
        value: u64,
    },
    /// Another writer holds the store (PostgreSQL's ingest lock); a second one is refused rather
    /// than interleaved. (SQLite's writers take turns instead.)
    #[error(
        "another ingest is writing to this database (it holds the ingest lock); wait for it to \
         finish or stop it, then run this one again"
    )]
    Busy,
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

/// Why a store is not one this program may use as it is ([`Error::Incompatible`]); each says
/// what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Incompatible {
    /// A PostgreSQL database without our schema: `serve` and `check` never create it.
    #[error(
        "the database has no datanode schema yet: run `server migrate --db URL` (or `server \
         ingest --db URL`, which migrates) first"
    )]
    NoSchema,
    /// An SQLite file holding another program's tables and no `schema_info` of ours.
    #[error(
        "not a datanode database: it holds {objects} tables or indexes of another program and \
         no schema_info of ours; it was left untouched (give --db a new file)"
    )]
    ForeignFile {
        /// The tables and indexes found.
        objects: i64,
    },
    /// A PostgreSQL database whose `schema_info` is another program's.
    #[error(
        "the database has a schema_info table that is not ours: it belongs to another program; \
         use a database of its own"
    )]
    ForeignSchema,
    /// A schema version above this program's.
    #[error(
        "database schema version {found} is newer than this program's {known}: use a newer \
         version of this program"
    )]
    NewerSchema {
        /// The database's schema version.
        found: i64,
        /// The newest this program knows.
        known: i64,
    },
    /// A PostgreSQL schema below this program's, which `serve` does not migrate.
    #[error(
        "the database schema is at version {found}, this program needs {needed}: run `server \
         migrate --db URL` first"
    )]
    OldSchema {
        /// The database's schema version.
        found: u32,
        /// The version this program needs.
        needed: u32,
    },
    /// Rows of another row format, which no migration converts.
    #[error(
        "the database holds rows in format {found}, this program writes and reads format \
         {ROW_FORMAT}: re-ingest the event stream into a new database"
    )]
    RowFormat {
        /// The row format recorded.
        found: String,
    },
    /// Rows of one of the [`UPGRADABLE_FORMATS`], opened by a command that does not upgrade them.
    #[error(
        "the database holds rows in format {found}, without the checksums this program \
         verifies (format {ROW_FORMAT}): run `{migrate}` to upgrade them (it keeps every row), \
         then start again; the database was left untouched"
    )]
    Upgradable {
        /// The row format recorded.
        found: String,
        /// The command that upgrades them, naming the database.
        migrate: String,
    },
    /// A count of PostgreSQL partitions out of range.
    #[error("cannot make {asked} partitions: the count must be between 1 and {most}")]
    PartitionCount {
        /// The count asked for.
        asked: u32,
        /// The most that can be made.
        most: u32,
    },
    /// A count of PostgreSQL partitions other than the database has: the count is chosen
    /// once, when the tables are partitioned.
    #[error(
        "cannot make {asked} partitions: the database's tables of segments are partitioned into \
         {found} already, and the count is chosen once, before the first migration: leave \
         --partitions out, or ingest into a new database"
    )]
    Partitioned {
        /// The count asked for.
        asked: u32,
        /// The database's count.
        found: i64,
    },
    /// A PostgreSQL URL that does not parse.
    #[error("invalid PostgreSQL URL {url}: {reason}")]
    Url {
        /// The URL, its password hidden.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A TLS setting of a PostgreSQL URL that cannot be used (`sslmode`, `sslrootcert`).
    #[error("{setting} in {url}")]
    TlsSetting {
        /// What is wrong.
        setting: String,
        /// The URL, its password hidden.
        url: String,
    },
    /// `sslmode` `verify-ca` or `verify-full` without a CA file to verify against.
    #[error(
        "sslmode verify-ca and verify-full need sslrootcert (or HOME, for libpq's \
         ~/.postgresql/root.crt)"
    )]
    NoRootCert,
    /// `server backup` of a PostgreSQL database: its own tools back it up consistently and
    /// incrementally, which a copy through this program could not.
    #[error(
        "server backup copies SQLite files only: back up a PostgreSQL database with \
         PostgreSQL's tools, `pg_dump --format=custom` of the database (a logical copy) or a \
         base backup (`pg_basebackup`) with WAL archiving, as README's Backups describes"
    )]
    Backup,
    /// A CA file that cannot be read or holds no certificate.
    #[error("cannot use sslrootcert file {file}: {reason}", file = file.display())]
    RootCert {
        /// The file.
        file: std::path::PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

impl From<Incompatible> for Error {
    fn from(why: Incompatible) -> Error {
        Error::Incompatible(why)
    }
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
    /// A segment held for the transaction's end is no longer in the writer's memory.
    #[error("a held segment was forgotten before it was written")]
    HeldForgotten,
    /// A run remembered by its shape alone was to be merged without being read back.
    #[error("a run remembered by its shape was merged without its segments")]
    ShapeMerged,
}

impl From<Bug> for Error {
    fn from(bug: Bug) -> Error {
        Error::Internal(Box::new(bug))
    }
}

/// What [`Error::Corrupt`] found: the damage, and where when the reader knows it.
#[derive(Debug, thiserror::Error)]
#[error("{}{damage}", place.as_ref().map(|place| format!("{place}: ")).unwrap_or_default())]
pub struct Corruption {
    /// The stored unit found damaged: its table and key.
    pub place: Option<Place>,
    /// What is wrong with it.
    pub damage: Damage,
}

/// A stored unit: the table and the key of its row.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{table} {key}")]
pub struct Place {
    /// The table (`ledger_segments`, `oracle_data`, `oracle_segments`, …).
    pub table: &'static str,
    /// The row's key, as the table's key columns name it (`party 3 last (t, b, s, i)`).
    pub key: String,
}

/// The kinds of damage a read recognises.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Damage {
    /// A blob's bytes do not match the checksum written with them at ingest.
    #[error("checksum of {blob} is {computed:08x}, {stored:08x} was stored")]
    Checksum {
        /// The blob's column (`csv`, `keys`, `json`).
        blob: &'static str,
        /// The checksum stored with it.
        stored: u32,
        /// The checksum of the bytes read.
        computed: u32,
    },
    /// A segment's index does not describe its lines.
    #[error("segment: {0}")]
    Segment(&'static str),
    /// A compressed blob that does not decode to the size it states.
    #[error("compressed blob: {0}")]
    Packed(String),
    /// A stored value that no writer stores (a negative count or height, an id of the wrong
    /// length).
    #[error("{0}")]
    Value(String),
    /// The backend itself reports its file damaged (SQLite's `SQLITE_CORRUPT`, `SQLITE_NOTADB`).
    #[error("the store reports damage: {0}")]
    Store(#[source] Box<dyn StdError + Send + Sync>),
}

impl From<Damage> for Error {
    fn from(damage: Damage) -> Error {
        Error::Corrupt(Corruption {
            place: None,
            damage,
        })
    }
}

impl Error {
    /// Names the stored unit a [`Error::Corrupt`] was found in, unless it is named already;
    /// any other error is returned as it is. `key` is only called for damage.
    pub fn at(self, table: &'static str, key: impl FnOnce() -> String) -> Error {
        match self {
            Error::Corrupt(Corruption {
                place: None,
                damage,
            }) => Error::Corrupt(Corruption {
                place: Some(Place { table, key: key() }),
                damage,
            }),
            other => other,
        }
    }

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
/// Format 5: every stored blob carries a checksum written at ingest and verified on every read
/// (`checksum.rs`): SQLite in columns beside the blobs, PostgreSQL inside each packed blob.
/// Format 6: the checksum is XXH3's instead of CRC32C, half the cost of the check on every read.
/// The bytes of the lines are those of format 4 in all three, so `server migrate` upgrades a
/// database of format 4 or 5 by computing the checksums ([`UPGRADABLE_FORMATS`]); every other
/// format is refused.
pub const ROW_FORMAT: u32 = 6;

/// The older row formats that `migrate` upgrades in place: format 4 is format 6 without
/// checksums, format 5 is format 6 with CRC32C ones. Every other command refuses them, naming
/// the migration to run.
pub const UPGRADABLE_FORMATS: [u32; 2] = [4, 5];

/// Whether the recorded row format `found` is one of the [`UPGRADABLE_FORMATS`].
pub fn upgradable(found: &str) -> bool {
    UPGRADABLE_FORMATS
        .iter()
        .any(|format| found == format.to_string())
}

/// Whether a migration may upgrade rows of the [`UPGRADABLE_FORMATS`] (`server migrate`), or
/// refuses them naming the command that does (every other command).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upgrade {
    /// Upgrade them.
    Rows,
    /// Refuse them.
    Refuse,
}

/// The refusal of a store in the upgradable row format `found` ([`UPGRADABLE_FORMATS`]) by a
/// command that does not upgrade: `migrate` is the command to run (with the database's path or
/// `URL`).
pub fn upgrade_needed(found: &str, migrate: &str) -> Error {
    Incompatible::Upgradable {
        found: found.to_owned(),
        migrate: migrate.to_owned(),
    }
    .into()
}

/// The refusal of a store written in another row format.
pub fn row_format_mismatch(found: &str) -> Error {
    Incompatible::RowFormat {
        found: found.to_owned(),
    }
    .into()
}
