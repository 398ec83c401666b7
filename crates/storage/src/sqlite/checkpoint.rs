//! Checkpoints of the WAL on a thread of their own, so that the ingest writer never waits for
//! the disk.
//!
//! A checkpoint copies the pages the WAL holds into the database and waits for both files to
//! reach the disk (two `fsync`s): on a bulk ingest SQLite's automatic checkpoint (run by the
//! committing connection) held the writer up for 40 % of its time. Here the writer's own
//! automatic checkpoints are off; after each commit it nudges a thread that runs a `PASSIVE`
//! checkpoint on a connection of its own, which never blocks the writer (nor readers), while
//! the writer commits the next batch. The WAL starts over from its beginning when a
//! transaction begins after a checkpoint copied all of it; should the checkpoints fall behind
//! anyway (readers holding old snapshots, a slow disk), the writer checkpoints itself once the
//! WAL passes [`WAL_BOUND_PAGES`], so the WAL stays bounded.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::thread::JoinHandle;

use rusqlite::{Connection, OpenFlags};

use super::{connect, map_err};
use crate::Error;

/// The WAL's size, in pages, past which the writer checkpoints itself: 16,384 pages of 32 KiB
/// (512 MiB), twice SQLite's automatic checkpoint as this writer set it before.
pub(super) const WAL_BOUND_PAGES: i64 = 16_384;

/// How the writer's WAL gets checkpointed.
#[derive(Debug)]
pub(super) enum Checkpoints {
    /// Nothing committed yet: the thread starts with the first commit, from the committing
    /// thread, whose scheduling priority it takes (`serve --ingest` lowers its ingest's).
    NotStarted(PathBuf),
    /// By the checkpoint thread.
    Thread(Checkpointer),
    /// By SQLite's automatic checkpoints, on the committing connection: the thread could not
    /// be started.
    Automatic,
}

impl Checkpoints {
    /// For the database at `path`.
    pub(super) fn new(path: &Path) -> Self {
        Self::NotStarted(path.to_owned())
    }

    /// Called after each commit on `writer`.
    pub(super) fn committed(&mut self, writer: &Connection) {
        if let Self::NotStarted(path) = self {
            *self = match Checkpointer::start(path) {
                Ok(thread) => Self::Thread(thread),
                Err(err) => {
                    tracing::warn!(
                        "cannot start the checkpoint thread ({err}): SQLite checkpoints"
                    );
                    if let Err(err) = writer.execute_batch("PRAGMA wal_autocheckpoint = 8192") {
                        tracing::warn!("cannot turn SQLite's checkpoints back on: {err}");
                    }
                    Self::Automatic
                }
            };
        }
        if let Self::Thread(thread) = self {
            thread.committed(writer);
        }
    }
}

/// The thread, and what the writer knows of it.
#[derive(Debug)]
pub(super) struct Checkpointer {
    nudge: Option<SyncSender<()>>,
    /// Pages in the WAL at the last checkpoint's start.
    wal_pages: Arc<AtomicI64>,
    thread: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Starts the thread, with a connection of its own to the database at `path`.
    fn start(path: &Path) -> Result<Self, Error> {
        let conn = connect(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        let (nudge, nudged) = mpsc::sync_channel::<()>(1);
        let wal_pages = Arc::new(AtomicI64::new(0));
        let seen = Arc::clone(&wal_pages);
        let thread = std::thread::Builder::new()
            .name("sqlite-checkpoint".to_owned())
            .spawn(move || {
                for () in nudged {
                    match checkpoint(&conn) {
                        Ok(pages) => seen.store(pages, Ordering::Relaxed),
                        // The writer tries itself after its next commit.
                        Err(err) => {
                            tracing::debug!("background checkpoint failed: {err}");
                            seen.store(i64::MAX, Ordering::Relaxed);
                        }
                    }
                }
            })
            .map_err(|err| Error::Unavailable(Box::new(err)))?;
        Ok(Self {
            nudge: Some(nudge),
            wal_pages,
            thread: Some(thread),
        })
    }

    /// Called after each commit: asks for a checkpoint (one asked and not yet begun is
    /// enough), and checkpoints on `writer` when the WAL has passed its bound. A failed
    /// checkpoint does not undo the commit: like SQLite's automatic checkpoint, it is logged,
    /// and tried again after the next commit.
    fn committed(&self, writer: &Connection) {
        if let Some(nudge) = &self.nudge {
            // Full: a checkpoint is asked for already. Disconnected cannot happen while `self`
            // lives, the thread ends only when `nudge` is dropped.
            let _ = nudge.try_send(());
        }
        if self.wal_pages.load(Ordering::Relaxed) >= WAL_BOUND_PAGES {
            match checkpoint(writer) {
                Ok(pages) => self.wal_pages.store(pages, Ordering::Relaxed),
                Err(err) => tracing::warn!("checkpoint of the WAL failed: {err}"),
            }
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        // Closing the channel ends the thread after the checkpoint it may be running.
        self.nudge = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A `PASSIVE` checkpoint on `conn`: returns the pages the WAL held.
fn checkpoint(conn: &Connection) -> Result<i64, Error> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| row.get(1))
        .map_err(map_err)
}
