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
//! the version whose state holds it, and reads `blocks` again only when the version moved on,
//! so a request costs one pragma until something is committed, for the tip and the version
//! together (`Health::chain_tip_with_version`).
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
        self.chain_tip_with_version().map(|(tip, _)| tip)
    }

    /// The chain tip and the version it belongs to: one `PRAGMA data_version` while nothing
    /// was committed since the tip was read (`Health::chain_tip_with_version`).
    ///
    /// A tip is kept with a version only when the version asked again after reading it is the
    /// same: nothing was committed between the two looks, so that version's state holds every
    /// block up to the tip. (A tip read just after a commit that the first look missed would
    /// otherwise be kept with the older version, and a page cached under that version, which
    /// lacks the commit, would be served under a tip that announces it.) When the two looks
    /// differ, the tip is answered without a version, and the caller asks for one after it.
    pub(super) fn chain_tip_with_version(&self) -> Result<(Option<ChainTip>, Option<u64>), Error> {
        let mut watch = self.lock();
        let before = version(&watch.conn)?;
        match (before, watch.tip) {
            (Some(version), Some((seen, tip))) if version == seen => {
                return Ok((tip, Some(version)));
            }
            (None, Some((_, tip))) => return Ok((tip, None)),
            _ => {}
        }
        let row = watch.conn.prepare_cached(tip::SQL).and_then(|mut stmt| {
            stmt.query_row([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
        });
        let tip = match row {
            Ok((first, last, time)) => tip::from_row(first, last, time)?,
            Err(err) if is_busy(&err) => return Ok((watch.tip.and_then(|(_, tip)| tip), None)),
            Err(err) => return Err(map_err(err)),
        };
        let after = version(&watch.conn)?;
        match before {
            Some(version) if after == Some(version) => {
                watch.tip = Some((version, tip));
                Ok((tip, Some(version)))
            }
            _ => Ok((tip, None)),
        }
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    use rusqlite::trace::{TraceEvent, TraceEventCodes};

    use super::*;
    use crate::sqlite::{SqliteConfig, SqliteStore};

    /// A commit that lands after the version's first look but before the tip is read: the tip
    /// then shows a state the version first seen does not name, so it is answered without a
    /// version (the caller asks for one after it), and kept with none. The next quiet look
    /// answers both again, the version the one asked after it.
    #[test]
    fn a_tip_read_after_a_commit_the_version_missed_comes_without_that_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        let store = SqliteStore::open(&path, SqliteConfig::default()).unwrap();
        let watch = DataVersion::open(&path).unwrap();
        let other = Arc::new(Mutex::new(Connection::open(&path).unwrap()));
        let write = |other: &Mutex<Connection>, hex: &str| {
            let sql = format!("INSERT INTO parties (hex) VALUES (x'{hex}')");
            other.lock().unwrap().execute_batch(&sql).unwrap();
        };
        let (_, first) = watch.chain_tip_with_version().unwrap();
        let first = first.expect("a quiet store tells its version with the tip");
        // A commit, so that the next look reads the tip again; and another one, landed when
        // the tip's statement starts, before it takes its snapshot.
        write(&other, "01");
        let armed = Arc::new(AtomicBool::new(true));
        let trace = {
            let (armed, other) = (Arc::clone(&armed), Arc::clone(&other));
            move |event: TraceEvent<'_>| {
                if let TraceEvent::Stmt(_, sql) = event
                    && sql.contains("blocks")
                    && armed.swap(false, Ordering::SeqCst)
                {
                    write(&other, "02");
                }
            }
        };
        watch
            .lock()
            .conn
            .trace_v2(TraceEventCodes::SQLITE_TRACE_STMT, Some(trace))
            .unwrap();
        let (_, version) = watch.chain_tip_with_version().unwrap();
        assert!(!armed.load(Ordering::SeqCst), "the tip was not read again");
        assert_eq!(
            version, None,
            "answered with the version the tip's read missed"
        );
        let (_, version) = watch.chain_tip_with_version().unwrap();
        let version = version.expect("a quiet store tells its version with the tip");
        assert_ne!(version, first);
        assert_eq!(watch.current().unwrap(), Some(version));
        drop(store);
    }
}
