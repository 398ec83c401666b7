//! The data version of the store: `PRAGMA data_version` on a connection of its own.
//!
//! SQLite's counter is per connection: it changes whenever the connection sees that another
//! connection (of this process or another) has committed since its previous look. So the same
//! connection must always answer, and it must never write itself (its own commits would not
//! count). In WAL mode the pragma is a read transaction that reads the shared-memory index
//! header and takes a reader slot: no page of the database is read unless the data changed
//! (then the first page, once), and a reader never waits for the writer. It runs on async
//! worker threads, so it must not wait for anything else either: the connection has no busy
//! timeout, and the rare lock it cannot take at once (WAL recovery after a crash) answers "cannot
//! tell" rather than an error.
//!
//! See: <https://www.sqlite.org/pragma.html#pragma_data_version>

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags};

use super::{connect, map_err};
use crate::Error;

/// The connection that answers `PRAGMA data_version`.
#[derive(Debug)]
pub(super) struct DataVersion {
    /// Boxed: a connection with its statement cache is large, and `AnyStore` holds a store
    /// inline beside the much smaller PostgreSQL one.
    conn: Box<Mutex<Connection>>,
}

impl DataVersion {
    pub(super) fn open(path: &Path) -> Result<Self, Error> {
        let conn = connect(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(Duration::ZERO).map_err(map_err)?;
        Ok(Self {
            conn: Box::new(Mutex::new(conn)),
        })
    }

    /// The current version; `None` when a lock could not be had at once.
    pub(super) fn current(&self) -> Result<Option<u64>, Error> {
        // A panic cannot leave the connection half-used: the statement is reset when its
        // handle drops, so a poisoned lock is recovered.
        let conn = self
            .conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // `query_row` steps once and resets the statement, which ends the read transaction:
        // a statement left open would pin the connection to one snapshot, and its version would
        // never change again.
        let version = conn
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut stmt| stmt.query_row([], |row| row.get::<_, i64>(0)));
        match version {
            // Only equality matters, and the cast keeps distinct values distinct.
            Ok(version) => Ok(Some(version as u64)),
            Err(err)
                if matches!(
                    err.sqlite_error_code(),
                    Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
                ) =>
            {
                Ok(None)
            }
            Err(err) => Err(map_err(err)),
        }
    }
}
