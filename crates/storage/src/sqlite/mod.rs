//! The embedded SQLite backend.
//!
//! Layout (see `schema.rs`): `ledger_segments` holds each party's finished CSV lines in the
//! total order across its assets, in segments of about 256 KiB (`segment.rs`), a rowid table
//! found through the unique index `ledger_segments_key` on (party, last line's key) (schema 5),
//! so an export is one ordered range search over that party's segments only, most of them
//! copied whole. Unlike PostgreSQL's, the segments are stored
//! uncompressed: the file is local, so there is no wire to spare, and the export already runs as
//! fast as nginx serves the same bytes from a file; decompressing would only cost time.
//! `oracle_segments` holds the oracle data the same way (schema 9, `segments.rs`): per spec the
//! data that matched it, and under spec 0 every datum, each line a datum's finished JSON node,
//! in segments of about 16 KiB found through `oracle_segments_key` on (spec, last datum's
//! position), so a page is one range search reading three or four segments, never an `OFFSET`
//! nor a row per datum. `blocks` records each block by (height,
//! `seq_base`) with its hash, and `schema_info` the chain id (schema 6).
//!
//! Concurrency: WAL mode; one writer connection (`SqliteWriter`) and a pool of read-only
//! connections. Readers work on snapshots and never block the writer. One more read-only
//! connection answers the data version (`version.rs`).

mod backup;
mod checkpoint;
mod export;
mod ingest;
mod oracle;
mod pool;
#[cfg(test)]
mod query_plans;
mod schema;
mod scrub;
mod segments;
#[cfg(test)]
mod tests;
mod version;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, OptionalExtension};

use crate::error::Damage;
use crate::segment::SegmentRef;
use crate::{
    Backend, ChainState, ChainTip, Error, Examples, Health, IngestWriter, Migrated, Scrub,
    ScrubProgress, Store, WriterOptions, checksum,
};
pub use ingest::SqliteWriter;
use pool::Pool;
use segments::LEDGER;
use version::DataVersion;

/// Tuning of an [`SqliteStore`].
#[derive(Clone, Debug)]
pub struct SqliteConfig {
    /// Page cache of each read connection, in KiB. Kept small: the OS page cache does the heavy
    /// lifting and per-connection caches multiply with concurrency.
    pub reader_cache_kib: u32,
    /// Read connections kept open while idle.
    pub max_idle_readers: usize,
}

impl Default for SqliteConfig {
    fn default() -> Self {
        Self {
            reader_cache_kib: 8 * 1024,
            max_idle_readers: 8,
        }
    }
}

/// A store in one SQLite database file.
#[derive(Debug)]
pub struct SqliteStore {
    path: PathBuf,
    readers: Pool,
    version: DataVersion,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    ///
    /// A file that holds another program's tables is refused with [`Error::Incompatible`] and
    /// left untouched; so is one whose rows are in another row format.
    /// Rows of the [`UPGRADABLE_FORMATS`](crate::UPGRADABLE_FORMATS) (format 4, without
    /// checksums, and 5, with CRC32C ones) are refused too, the message naming
    /// [`SqliteStore::migrate`]'s command: only that upgrades them.
    pub fn open(path: impl AsRef<Path>, config: SqliteConfig) -> Result<Self, Error> {
        let path = path.as_ref().to_path_buf();
        migrate_file(&path, crate::error::Upgrade::Refuse)?;
        let readers = Pool::new(path.clone(), config);
        let version = DataVersion::open(&path)?;
        Ok(Self {
            path,
            readers,
            version,
        })
    }

    /// Creates or upgrades the database at `path` (`server migrate`), and says from which
    /// schema version: as [`SqliteStore::open`], and rows of the
    /// [`UPGRADABLE_FORMATS`](crate::UPGRADABLE_FORMATS) are upgraded to
    /// [`ROW_FORMAT`](crate::ROW_FORMAT) by computing their checksums (schema migration 7 from
    /// format 4, which copies every segment and datum once; migration 8 from format 5, which
    /// rewrites their checksums in place).
    pub fn migrate(path: impl AsRef<Path>) -> Result<Migrated, Error> {
        migrate_file(path.as_ref(), crate::error::Upgrade::Rows)
    }

    /// Creates a new database at `path` filled by `fill`, all or nothing: it is built in a
    /// temporary file beside `path`, checkpointed into one self-contained file (no `-wal` left to
    /// lose), and only then renamed to `path`. An interrupted creation leaves no half database
    /// that a later start would take for a real one. `path` must not exist yet.
    pub fn create_new<T, E: From<Error>>(
        path: impl AsRef<Path>,
        config: SqliteConfig,
        fill: impl FnOnce(&SqliteStore) -> Result<T, E>,
    ) -> Result<T, E> {
        let path = path.as_ref();
        let partial = partial_of(path);
        let store = SqliteStore::open(&partial, config)?;
        let value = fill(&store)?;
        drop(store);
        seal(&partial, path)?;
        Ok(value)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the single writer of this store. SQLite admits one writer at a time; a second one
    /// waits for the first one's transaction to end.
    pub fn writer(&self) -> Result<SqliteWriter, Error> {
        self.writer_with(&WriterOptions::default())
    }

    /// [`writer`](Self::writer), opened with `options`.
    pub fn writer_with(&self, options: &WriterOptions) -> Result<SqliteWriter, Error> {
        SqliteWriter::open(&self.path, options)
    }
}

impl Store for SqliteStore {
    /// The chain id and the first and last stored blocks, read in one snapshot.
    fn chain(&self) -> Result<ChainState, Error> {
        ingest::chain_state(&*self.readers.get()?)
    }

    fn scrub(&self, progress: &mut dyn FnMut(ScrubProgress)) -> Result<Scrub, Error> {
        self.scrub_all(progress)
    }

    /// Real ids to show in example URLs; all `None` for an empty store.
    fn examples(&self) -> Result<Examples, Error> {
        let conn = self.readers.get()?;
        let hex = |sql: &str| -> Result<Option<String>, Error> {
            let bytes: Option<Vec<u8>> = conn
                .query_row(sql, [], |row| row.get(0))
                .optional()
                .map_err(map_err)?;
            Ok(bytes.map(|bytes| ledger_core::hex::to_lower(&bytes)))
        };
        let party = hex(
            "SELECT p.hex FROM ledger_segments s JOIN parties p ON p.id = s.party \
             ORDER BY s.party LIMIT 1",
        )?;
        // The asset of the party's first line, from its first segment's index.
        let first = conn
            .prepare(
                "SELECT csv, keys, csv_sum, keys_sum, party, last_time, last_block, last_seq, \
                 last_idx FROM ledger_segments \
                 ORDER BY party, last_time, last_block, last_seq, last_idx LIMIT 1",
            )
            .map_err(map_err)?
            .query_map([], |row| {
                let party = row.get(4)?;
                let blobs = verified(row, (0, "csv"), 2)
                    .and_then(|csv| Ok((csv.to_vec(), verified(row, (1, "keys"), 3)?.to_vec())));
                Ok(blobs.map_err(|err| LEDGER.at_segment(err, party, row, 5)))
            })
            .map_err(map_err)?
            .next()
            .transpose()
            .map_err(map_err)?
            .transpose()?;
        // A stored segment without lines is damage, not a panic: it names no asset.
        let first = match first {
            Some((csv, keys)) => Some(SegmentRef::new(&csv, &keys)?)
                .filter(|segment| !segment.is_empty())
                .map(|segment| segment.line(0).asset),
            None => None,
        };
        let asset = match first {
            Some(id) => conn
                .query_row("SELECT hex FROM assets WHERE id = ?1", [id], |row| {
                    row.get::<_, Vec<u8>>(0)
                })
                .optional()
                .map_err(map_err)?
                .map(|bytes| ledger_core::hex::to_lower(&bytes)),
            None => None,
        };
        Ok(Examples {
            party,
            asset,
            spec: hex(
                "SELECT s.hex FROM oracle_segments d JOIN oracle_specs s ON s.id = d.spec \
                 ORDER BY d.spec LIMIT 1",
            )?,
        })
    }
}

impl Health for SqliteStore {
    fn check(&self) -> Result<(), Error> {
        let conn = self.readers.get()?;
        conn.query_row("SELECT count(*) FROM schema_info", [], |_| Ok(()))
            .map_err(map_err)
    }

    /// From the data-version connection, read again only after a commit (see `version.rs`).
    fn chain_tip(&self) -> Result<Option<ChainTip>, Error> {
        self.version.chain_tip()
    }

    /// One `PRAGMA data_version` for both while nothing was committed (see `version.rs`).
    fn chain_tip_with_version(&self) -> Result<(Option<ChainTip>, Option<u64>), Error> {
        self.version.chain_tip_with_version()
    }
}

/// An SQLite database file as a [`Backend`]: opening it to serve creates or migrates it (the
/// file is the server's own).
#[derive(Clone, Debug)]
pub struct SqliteBackend {
    /// The database file.
    pub path: PathBuf,
    /// The readers' tuning.
    pub config: SqliteConfig,
}

impl Backend for SqliteBackend {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn exists(&self) -> bool {
        self.path.exists()
    }

    fn open_store(&self, _max_readers: usize) -> Result<Arc<dyn Store>, Error> {
        Ok(Arc::new(SqliteStore::open(
            &self.path,
            self.config.clone(),
        )?))
    }

    fn open_writer(&self, options: &WriterOptions) -> Result<Box<dyn IngestWriter>, Error> {
        let store = SqliteStore::open(&self.path, self.config.clone())?;
        Ok(Box::new(store.writer_with(options)?))
    }

    fn migrate(&self) -> Result<Migrated, Error> {
        SqliteStore::migrate(&self.path)
    }

    fn backup(&self, out: &Path) -> Result<ChainState, Error> {
        SqliteStore::open(&self.path, self.config.clone())?.backup(out)
    }
}

/// Makes the database at `partial`, closed by everyone, one self-contained file (every
/// committed page copied from the WAL into it, no `-wal` left to lose) and renames it to
/// `path`: a reader of `path` finds a whole database or none.
fn seal(partial: &Path, path: &Path) -> Result<(), Error> {
    // With the last connection closed the WAL and shared-memory files go too.
    let conn = connect(partial, OpenFlags::SQLITE_OPEN_READ_WRITE)?;
    let busy: i64 = conn
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| row.get(0))
        .map_err(map_err)?;
    if busy != 0 {
        return Err(Error::Unavailable(
            format!(
                "{} is in use; the checkpoint could not finish",
                partial.display()
            )
            .into(),
        ));
    }
    conn.close().map_err(|(_, err)| map_err(err))?;
    let wal = &sidecars(partial)[1];
    if std::fs::metadata(wal).is_ok_and(|meta| meta.len() > 0) {
        return Err(Error::Unavailable(
            format!("{} still holds pages after the checkpoint", wal.display()).into(),
        ));
    }
    std::fs::rename(partial, path).map_err(|err| Error::Unavailable(Box::new(err)))?;
    for empty in &sidecars(partial)[1..] {
        let _ = std::fs::remove_file(empty);
    }
    Ok(())
}

/// `path` with `.partial` appended: where a new database is built before it is renamed, its
/// stale files (left by an interrupted build; nobody else uses the name) removed.
fn partial_of(path: &Path) -> PathBuf {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    for stale in sidecars(&partial) {
        let _ = std::fs::remove_file(stale);
    }
    partial
}

/// The database file and the files SQLite keeps beside it: the file, its WAL and shared memory.
fn sidecars(path: &Path) -> [PathBuf; 3] {
    let with = |suffix: &str| {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    [path.to_path_buf(), with("-wal"), with("-shm")]
}

/// Creates or migrates the file at `path` on a connection of its own.
fn migrate_file(path: &Path, upgrade: crate::error::Upgrade) -> Result<Migrated, Error> {
    let mut conn = connect(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    schema::migrate(&mut conn, upgrade, path)
}

/// A blob of the current row, its checksum (column `sum`) verified: the bytes borrowed from
/// SQLite's row buffer, or the damage found.
pub(crate) fn verified<'a>(
    row: &'a rusqlite::Row<'_>,
    blob: (usize, &'static str),
    sum: usize,
) -> Result<&'a [u8], Error> {
    let bytes = row
        .get_ref(blob.0)
        .and_then(|value| Ok(value.as_blob()?))
        .map_err(map_err)?;
    let stored = checksum::from_sql(blob.1, row.get(sum).map_err(map_err)?)?;
    checksum::verify(blob.1, bytes, stored)?;
    Ok(bytes)
}

/// Opens a connection with the settings every connection shares.
fn connect(path: &Path, flags: OpenFlags) -> Result<Connection, Error> {
    let conn = Connection::open_with_flags(path, flags).map_err(map_err)?;
    // Waiting briefly beats failing when a checkpoint or the schema migration holds a lock.
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(map_err)?;
    // The bundled SQLite is built with STAT4, under which a statement whose range bounds are
    // parameters is compiled again whenever their values change, in case a plan would suit them
    // better: a tenth of a page's time, and 7 % of the ingest writer's, went there. Our plans
    // never depend on the values (query_plans.rs pins them), so the query planner stability
    // guarantee is on for every connection.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .map_err(map_err)?;
    Ok(conn)
}

/// Maps a rusqlite error to the backend-neutral [`Error`].
pub(crate) fn map_err(err: rusqlite::Error) -> Error {
    use rusqlite::ErrorCode::*;
    match err.sqlite_error_code() {
        Some(DatabaseCorrupt | NotADatabase) => Damage::Store(Box::new(err)).into(),
        Some(
            DatabaseBusy | DatabaseLocked | CannotOpen | SystemIoFailure | DiskFull
            | PermissionDenied | ReadOnly | OutOfMemory,
        ) => Error::Unavailable(Box::new(err)),
        _ => Error::Internal(Box::new(err)),
    }
}
