//! `SqliteStore::backup`: a consistent copy of a database that is being served and written,
//! through SQLite's online backup API.
//!
//! The copy is taken in one backup step over every page, which holds one read transaction on
//! the source from its first page to its last: the copy is the database as of one commit,
//! never a torn mix of two, and in WAL mode neither the readers nor the writer wait for it.
//! (Copying a few pages per step instead lets the writer go on between steps, and SQLite then
//! restarts the backup at every commit of another connection: under a live ingest it might never
//! finish.) `VACUUM INTO` would also copy one snapshot, but rebuilds every b-tree on the way,
//! which costs more than copying pages and makes a copy whose pages differ from the source's.

use std::path::Path;
use std::time::Duration;

use rusqlite::OpenFlags;
use rusqlite::backup::{Backup, StepResult};

use super::{SqliteStore, connect, ingest, map_err, partial_of, seal};
use crate::{ChainState, Error};

/// How long a backup waits before trying again when the source is locked (a checkpoint
/// restarting the WAL), and how often.
const RETRY: (Duration, u32) = (Duration::from_millis(10), 500);

impl SqliteStore {
    /// Copies the database, as of one commit, into a new file at `out` (which must not exist)
    /// while it is served and written: the copy is built beside `out` and renamed to it whole,
    /// so `out` is a complete database or absent. Returns the copy's chain, whose last block is
    /// the last one the copy holds.
    pub fn backup(&self, out: &Path) -> Result<ChainState, Error> {
        if out.exists() {
            return Err(Error::Unavailable(
                format!("{} exists: a backup never overwrites a file", out.display()).into(),
            ));
        }
        let partial = partial_of(out);
        let source = connect(&self.path, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
        let mut copy = connect(
            &partial,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE,
        )?;
        {
            let backup = Backup::new(&source, &mut copy).map_err(map_err)?;
            let mut tries = 0;
            loop {
                // -1: every page in this one step, in one read transaction of the source.
                match backup.step(-1).map_err(map_err)? {
                    StepResult::Done => break,
                    StepResult::More => {}
                    StepResult::Busy | StepResult::Locked if tries < RETRY.1 => {
                        tries += 1;
                        std::thread::sleep(RETRY.0);
                    }
                    _ => {
                        return Err(Error::Unavailable(
                            format!("{} stayed locked; the backup gave up", self.path.display())
                                .into(),
                        ));
                    }
                }
            }
        }
        drop(source);
        let chain = ingest::chain_state(&copy)?;
        copy.close().map_err(|(_, err)| map_err(err))?;
        seal(&partial, out)?;
        Ok(chain)
    }
}
