//! A small pool of read-only connections.
//!
//! Opening an SQLite connection costs a file open and a schema parse, too much per page of
//! oracle data. The pool keeps a few idle connections; it has no upper bound of its own because
//! the HTTP layer already bounds concurrency (exports and pages have their own limits), and a
//! connection goes back to the pool the moment its guard drops, whatever path the caller took.
//! A crate like r2d2 adds a reaper thread and timeouts that this use does not need.

use std::ops::Deref;
use std::path::PathBuf;
use std::sync::Mutex;

use rusqlite::{Connection, OpenFlags};

use super::{SqliteConfig, connect, map_err};
use crate::Error;

#[derive(Debug)]
pub(super) struct Pool {
    path: PathBuf,
    config: SqliteConfig,
    idle: Mutex<Vec<Connection>>,
}

/// A pooled connection; returns to the pool on drop.
pub(super) struct Pooled<'a> {
    pool: &'a Pool,
    conn: Option<Connection>,
}

impl Pool {
    pub(super) fn new(path: PathBuf, config: SqliteConfig) -> Self {
        Self {
            path,
            config,
            idle: Mutex::new(Vec::new()),
        }
    }

    pub(super) fn get(&self) -> Result<Pooled<'_>, Error> {
        let idle = self.lock().pop();
        let conn = match idle {
            Some(conn) => conn,
            None => self.open()?,
        };
        Ok(Pooled {
            pool: self,
            conn: Some(conn),
        })
    }

    fn open(&self) -> Result<Connection, Error> {
        let conn = connect(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.execute_batch(&format!(
            "PRAGMA cache_size = -{}; PRAGMA query_only = ON;",
            self.config.reader_cache_kib
        ))
        .map_err(map_err)?;
        Ok(conn)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        // A panic while holding this lock cannot leave the Vec half-updated: recover it.
        self.idle
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Deref for Pooled<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn
            .as_ref()
            .expect("a pooled connection is present until drop")
    }
}

impl Pooled<'_> {
    /// Starts a deferred read transaction: the snapshot is taken by the first read, and every
    /// later statement sees the same one until [`Snapshot::commit`].
    ///
    /// `BEGIN` and `COMMIT` are cached statements of the connection: `Connection::transaction`
    /// parses both again on every read, 3 % of a page's instructions.
    pub(super) fn snapshot(&mut self) -> Result<Snapshot<'_>, Error> {
        let conn: &Connection = self;
        conn.prepare_cached("BEGIN DEFERRED")
            .and_then(|mut begin| begin.execute([]))
            .map_err(map_err)?;
        Ok(Snapshot { conn })
    }
}

/// A read transaction on a pooled connection, rolled back on drop unless committed.
pub(super) struct Snapshot<'a> {
    conn: &'a Connection,
}

impl Snapshot<'_> {
    /// Ends the read transaction.
    pub(super) fn commit(self) -> Result<(), Error> {
        let result = self.end("COMMIT");
        // Committed or not, the transaction is over: a failed COMMIT rolls back in Drop.
        if result.is_ok() {
            std::mem::forget(self);
        }
        result
    }

    fn end(&self, sql: &str) -> Result<(), Error> {
        self.conn
            .prepare_cached(sql)
            .and_then(|mut end| end.execute([]))
            .map(drop)
            .map_err(map_err)
    }
}

impl Deref for Snapshot<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for Snapshot<'_> {
    fn drop(&mut self) {
        // An error path: a connection left in a transaction is not reused by the pool anyway.
        if !self.conn.is_autocommit() {
            let _ = self.end("ROLLBACK");
        }
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        // A connection that still has a transaction open (a panic mid-read) is not reused.
        if !conn.is_autocommit() {
            return;
        }
        let mut idle = self.pool.lock();
        if idle.len() < self.pool.config.max_idle_readers {
            idle.push(conn);
        }
    }
}
