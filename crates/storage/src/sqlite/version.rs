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
//! The same connection answers the chain tip (`crate::tip`): it keeps the last tip read with
//! the version it was read at, and reads `blocks` again only when the version moved on, so a
//! request costs the pragma alone until something is committed.
//!
//! See: <https://www.sqlite.org/pragma.html#pragma_data_version>

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags};

use super::{connect, map_err};
use crate::{ChainTip, Error, tip};

/// The connection that answers `PRAGMA data_version` and the chain tip.
#[derive(Debug)]
pub(super) struct DataVersion {
    /// Boxed: a connection with its statement cache is large, and the store is moved around
    /// while it is built.
    watch: Box<Mutex<Watch>>,
}

#[derive(Debug)]
struct Watch {
    conn: Connection,
    /// The last tip read, and the data version it was read at.
    tip: Option<(u64, Option<ChainTip>)>,
}

impl DataVersion {
    pub(super) fn open(path: &Path) -> Result<Self, Error> {
        let conn = connect(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(Duration::ZERO).map_err(map_err)?;
        Ok(Self {
            watch: Box::new(Mutex::new(Watch { conn, tip: None })),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Watch> {
        // A panic cannot leave the connection half-used: the statement is reset when its
        // handle drops, so a poisoned lock is recovered.
        self.watch
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The current version; `None` when a lock could not be had at once.
    pub(super) fn current(&self) -> Result<Option<u64>, Error> {
        version(&self.lock().conn)
    }

    /// The chain tip, read again only when the data version changed since the last read. When
    /// the version cannot be had at once, the last tip read stands.
    pub(super) fn chain_tip(&self) -> Result<Option<ChainTip>, Error> {
        let mut watch = self.lock();
        let version = version(&watch.conn)?;
        match (version, watch.tip) {
            (Some(version), Some((seen, tip))) if version == seen => return Ok(tip),
            (None, Some((_, tip))) => return Ok(tip),
            _ => {}
        }
        // Read after the version: the tip is at least as new as the version it is kept with,
        // so a later commit always changes the version and is read.
        let row = watch.conn.prepare_cached(tip::SQL).and_then(|mut stmt| {
            stmt.query_row([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        });
        let tip = match row {
            Ok((first, last, time)) => tip::from_row(first, last, time)?,
            Err(err) if is_busy(&err) => return Ok(watch.tip.and_then(|(_, tip)| tip)),
            Err(err) => return Err(map_err(err)),
        };
        if let Some(version) = version {
            watch.tip = Some((version, tip));
        }
        Ok(tip)
    }
}

/// `PRAGMA data_version` on `conn`; `None` when a lock could not be had at once.
fn version(conn: &Connection) -> Result<Option<u64>, Error> {
    // `query_row` steps once and resets the statement, which ends the read transaction:
    // a statement left open would pin the connection to one snapshot, and its version would
    // never change again.
    let version = conn
        .prepare_cached("PRAGMA data_version")
        .and_then(|mut stmt| stmt.query_row([], |row| row.get::<_, i64>(0)));
    match version {
        // Only equality matters, and the cast keeps distinct values distinct.
        Ok(version) => Ok(Some(version as u64)),
        Err(err) if is_busy(&err) => Ok(None),
        Err(err) => Err(map_err(err)),
    }
}

/// The rare lock that cannot be had at once (WAL recovery after a crash).
fn is_busy(err: &rusqlite::Error) -> bool {
    matches!(
        err.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}
