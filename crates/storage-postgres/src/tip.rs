//! The chain tip of a PostgreSQL store, kept in memory by a thread of the store.
//!
//! PostgreSQL tells a client of nothing committed by others without a round trip, and one per
//! request would cost what the answer does; `LISTEN`/`NOTIFY` would need the writer's help and
//! a connection held for it. So a thread rereads the tip once per [`CHAIN_TIP_LAG`] on a
//! pooled connection (one indexed statement), and requests read what it last found: at most
//! about a second behind the database, at one small query a second per server whatever the
//! load. The thread stops when the store is dropped. A failed read keeps the last tip (and is
//! logged at debug level): a store that cannot be read shows how far it had got.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use super::{Pool, map_err, read_pooled};
use storage::{CHAIN_TIP_LAG, ChainTip, Error, tip};

/// The tip as last read; the condition variable tells each refresh (to tests that wait for
/// one).
#[derive(Default)]
struct Shared {
    tip: Mutex<Option<ChainTip>>,
    refreshed: Condvar,
}

/// The tip in memory, and the thread that refreshes it.
pub(super) struct TipWatch {
    tip: Arc<Shared>,
    /// Dropped to stop the thread: its wait ends at once.
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl TipWatch {
    /// Reads the tip once, so that the first answers have it, then starts the refresh.
    pub(super) fn start(pool: Pool) -> Self {
        let tip = Arc::new(Shared::default());
        let (stop, stopped) = mpsc::channel::<()>();
        refresh_logged(&pool, &tip);
        let shared = Arc::clone(&tip);
        let thread = std::thread::Builder::new()
            .name("pg-chain-tip".to_owned())
            .spawn(move || {
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(CHAIN_TIP_LAG) {
                    refresh_logged(&pool, &tip);
                }
            });
        // Without a thread the tip stays as first read; serving matters more.
        let thread = thread
            .map_err(|err| tracing::warn!(error = %err, "no chain tip refresh thread"))
            .ok();
        TipWatch {
            tip: shared,
            stop: Some(stop),
            thread,
        }
    }

    /// The tip as last read.
    pub(super) fn current(&self) -> Option<ChainTip> {
        *self.tip.tip.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until a refresh finds a tip that `done` accepts, for at most `timeout`.
    #[cfg(test)]
    pub(super) fn wait_until(
        &self,
        timeout: std::time::Duration,
        done: impl Fn(&Option<ChainTip>) -> bool,
    ) -> Option<ChainTip> {
        let tip = self.tip.tip.lock().unwrap();
        let (tip, _) = self
            .tip
            .refreshed
            .wait_timeout_while(tip, timeout, |tip| !done(tip))
            .unwrap();
        *tip
    }

    /// Reads the tip now.
    pub(super) fn refresh(&self, pool: &Pool) -> Result<(), Error> {
        refresh(pool, &self.tip)
    }
}

impl Drop for TipWatch {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            // It ends after at most the read under way; a panic in it was already reported.
            let _ = thread.join();
        }
    }
}

fn refresh(pool: &Pool, shared: &Shared) -> Result<(), Error> {
    let read = read_pooled(
        pool,
        |conn| {
            let (client, mut statements) = conn.autocommit();
            let statement = statements.get(client, tip::SQL)?;
            let row = client.query_one(&statement, &[]).map_err(map_err)?;
            tip::from_row(row.get(0), row.get(1), row.get(2))
        },
        || true,
    )?;
    *shared.tip.lock().unwrap_or_else(PoisonError::into_inner) = read;
    shared.refreshed.notify_all();
    Ok(())
}

fn refresh_logged(pool: &Pool, tip: &Shared) {
    if let Err(err) = refresh(pool, tip) {
        tracing::debug!(error = %err, "chain tip not refreshed");
    }
}
