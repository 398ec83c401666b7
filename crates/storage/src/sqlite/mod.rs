//! The embedded SQLite backend.
//!
//! Layout (see `schema.rs`): `ledger_rows` is clustered by (party, asset, vega time, block,
//! sequence, index), so the export of a party and asset is one ordered range scan over that
//! party's rows only, and the export of a party is an ordered merge of one such scan per asset.
//! `oracle_data` is clustered by its position, and `oracle_spec_data` by (spec, position), so a
//! page is a keyset range scan and never an `OFFSET`.
//!
//! Concurrency: WAL mode; one writer connection (`SqliteWriter`) and a pool of read-only
//! connections. Readers work on snapshots and never block the writer.

mod export;
mod ingest;
mod oracle;
mod pool;
#[cfg(test)]
mod query_plans;
mod schema;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, OptionalExtension};

use crate::{Error, Health};
pub use ingest::SqliteWriter;
use pool::Pool;

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
}

/// Real ids from the store, for ready-to-paste example URLs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Examples {
    /// The party with ledger rows found first.
    pub party: Option<String>,
    /// An asset of that party.
    pub asset: Option<String>,
    /// An oracle spec that matched some data.
    pub spec: Option<String>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    pub fn open(path: impl AsRef<Path>, config: SqliteConfig) -> Result<Self, Error> {
        let path = path.as_ref().to_path_buf();
        let mut conn = Connection::open(&path).map_err(map_err)?;
        schema::migrate(&mut conn)?;
        drop(conn);
        let readers = Pool::new(path.clone(), config);
        Ok(Self { path, readers })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the single writer of this store. SQLite admits one writer at a time; a second one
    /// waits for the first one's transaction to end.
    pub fn writer(&self) -> Result<SqliteWriter, Error> {
        SqliteWriter::open(&self.path)
    }

    /// Real ids to show in example URLs; all `None` for an empty store.
    pub fn examples(&self) -> Result<Examples, Error> {
        let conn = self.readers.get()?;
        let hex = |sql: &str| -> Result<Option<String>, Error> {
            let bytes: Option<Vec<u8>> = conn
                .query_row(sql, [], |row| row.get(0))
                .optional()
                .map_err(map_err)?;
            Ok(bytes.map(|bytes| ledger_core::hex::to_lower(&bytes)))
        };
        Ok(Examples {
            party: hex(
                "SELECT p.hex FROM ledger_rows r JOIN parties p ON p.id = r.party \
                 ORDER BY r.party LIMIT 1",
            )?,
            asset: hex(
                "SELECT a.hex FROM ledger_rows r JOIN assets a ON a.id = r.asset \
                 ORDER BY r.party LIMIT 1",
            )?,
            spec: hex(
                "SELECT s.hex FROM oracle_spec_data d JOIN oracle_specs s ON s.id = d.spec \
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
}

/// Opens a connection with the settings every connection shares.
fn connect(path: &Path, flags: OpenFlags) -> Result<Connection, Error> {
    let conn = Connection::open_with_flags(path, flags).map_err(map_err)?;
    // Waiting briefly beats failing when a checkpoint or the schema migration holds a lock.
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(map_err)?;
    Ok(conn)
}

/// Maps a rusqlite error to the backend-neutral [`Error`].
pub(crate) fn map_err(err: rusqlite::Error) -> Error {
    use rusqlite::ErrorCode::*;
    match err.sqlite_error_code() {
        Some(DatabaseCorrupt | NotADatabase) => Error::Corrupt(err.to_string()),
        Some(
            DatabaseBusy | DatabaseLocked | CannotOpen | SystemIoFailure | DiskFull
            | PermissionDenied | ReadOnly | OutOfMemory,
        ) => Error::Unavailable(Box::new(err)),
        _ => Error::Internal(Box::new(err)),
    }
}
