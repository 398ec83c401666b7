//! The chain tip and the data version of a PostgreSQL store, kept in memory by a thread of the
//! store.
//!
//! PostgreSQL tells a client of nothing committed by others without a round trip, and one per
//! request would cost what the answer does. So the writer announces every commit: inside the
//! commit's transaction it sends `NOTIFY datanode_commits, '<last height>'`, which PostgreSQL
//! delivers only once the commit is visible. The thread holds one connection that `LISTEN`s on
//! that channel; on each notification it rereads the tip (one indexed statement) and moves the
//! data version on, so a page cache learns of a commit within a round trip of it. A server
//! that cannot receive notifications (a hot standby refuses `LISTEN`; the listening connection
//! may be lost) learns of commits by polling instead: the thread rereads the tip and the last
//! block's sequence number once per [`CHAIN_TIP_LAG`](storage::CHAIN_TIP_LAG) whatever happens, at one small query a
//! second per server, and moves the version on when they changed. The thread stops when the
//! store is dropped. A failed read keeps the last tip (and is logged at debug level): a store
//! that cannot be read shows how far it had got.
//!
//! The version and the tip change together, under one lock, and the tip a read saw is never
//! newer than the data it reads, which is what the page cache needs (see
//! `OracleStore::data_version`): a page cached at a version holds every block up to the tip
//! announced with that version; it may hold a commit not yet learnt of, never less.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use postgres::fallible_iterator::FallibleIterator;

use super::{Manager, PgConn, Pool, map_err, read_pooled};
use storage::{ChainTip, Error, tip};

/// The channel of the writer's announcements; the payload is the last stored height.
pub(crate) const CHANNEL: &str = "datanode_commits";

/// The tip query, with the last block's sequence number: a commit that adds events to the last
/// block (an ingest resuming inside it) changes that alone.
const SQL: &str = concat!(
    storage::tip_columns!(),
    ", (SELECT last_seq FROM blocks ORDER BY height DESC, seq_base DESC LIMIT 1)"
);

/// The payloads of [`TipWatch::sync`]'s markers start with this; they announce no commit.
const SYNC_PREFIX: &str = "sync ";

/// How long the thread waits for a notification at a time, between looks at whether the store
/// was dropped: the longest a drop waits for the thread.
const LISTEN_SLICE: Duration = Duration::from_millis(100);

/// What a read of the database found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Observed {
    tip: Option<ChainTip>,
    last_seq: Option<i64>,
}

/// The tip and version as last learnt; the condition variable tells each change (to tests that
/// wait for one).
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    refreshed: Condvar,
}

#[derive(Default)]
struct State {
    observed: Observed,
    /// Moves on whenever `observed` changes or a commit is announced.
    version: u64,
    /// False once the thread has ended (or never started): then no version is answered, since
    /// none would move on.
    watching: bool,
    /// The last of [`TipWatch::sync`]'s markers the thread has seen.
    synced: Option<String>,
    /// Whether the thread listens: [`TipWatch::sync`] waits for it only then.
    listening: bool,
}

/// The tip and version in memory, and the thread that keeps them.
pub(super) struct TipWatch {
    shared: Arc<Shared>,
    /// Dropped to stop the thread: it sees it within [`LISTEN_SLICE`].
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl TipWatch {
    /// Reads the tip once, so that the first answers have it, then starts the thread, which
    /// listens for the writer's announcements and polls every `poll`.
    pub(super) fn start(pool: Pool, listen: Manager, poll: Duration) -> Self {
        let shared = Arc::new(Shared::default());
        let (stop, stopped) = mpsc::channel::<()>();
        if let Err(err) = refresh(&shared, &mut |sql| poll_pooled(&pool, sql), false, None) {
            tracing::debug!(error = %err, "chain tip not read");
        }
        shared.lock().watching = true;
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("pg-chain-tip".to_owned())
                .spawn(move || {
                    let watching = Watching(&shared);
                    watch(&pool, &listen, watching.0, &stopped, poll);
                })
        };
        // Without a thread the tip stays as first read and no page is cached; serving matters
        // more.
        let thread = thread
            .map_err(|err| {
                shared.lock().watching = false;
                tracing::warn!(error = %err, "no chain tip refresh thread");
            })
            .ok();
        TipWatch {
            shared,
            stop: Some(stop),
            thread,
        }
    }

    /// The tip as last read.
    pub(super) fn current(&self) -> Option<ChainTip> {
        self.shared.lock().observed.tip
    }

    /// The data version, `None` once nothing keeps it.
    pub(super) fn version(&self) -> Option<u64> {
        let state = self.shared.lock();
        state.watching.then_some(state.version)
    }

    /// Waits until the tip and version satisfy `done`, for at most `timeout`; returns the tip.
    #[cfg(test)]
    pub(super) fn wait_until(
        &self,
        timeout: Duration,
        done: impl Fn(&Option<ChainTip>, u64) -> bool,
    ) -> Option<ChainTip> {
        let state = self.shared.lock();
        let (state, _) = self
            .shared
            .refreshed
            .wait_timeout_while(state, timeout, |state| {
                !done(&state.observed.tip, state.version)
            })
            .unwrap();
        state.observed.tip
    }

    /// Waits until the thread listens, for at most `timeout`; whether it does.
    #[cfg(test)]
    pub(super) fn wait_listening(&self, timeout: Duration) -> bool {
        let state = self.shared.lock();
        let (state, _) = self
            .shared
            .refreshed
            .wait_timeout_while(state, timeout, |state| !state.listening)
            .unwrap();
        state.listening
    }

    /// Brings the tip and version up to every commit made so far: announces a marker of its own
    /// on the channel and waits for the thread to see it, which it does after every earlier
    /// announcement (PostgreSQL delivers them in commit order); without a listening thread, or
    /// if the marker does not come within `wait`, reads the tip here and moves the version on.
    pub(super) fn sync(&self, pool: &Pool, wait: Duration) -> Result<(), Error> {
        static MARKERS: AtomicU64 = AtomicU64::new(0);
        if self.shared.lock().listening {
            let marker = format!(
                "{SYNC_PREFIX}{}-{}",
                std::process::id(),
                MARKERS.fetch_add(1, Ordering::Relaxed)
            );
            let sent = read_pooled(
                pool,
                |conn| {
                    conn.client
                        .batch_execute(&format!("NOTIFY {CHANNEL}, '{marker}'"))
                        .map_err(map_err)
                },
                || true,
            );
            if sent.is_ok() {
                let state = self.shared.lock();
                let (state, _) = self
                    .shared
                    .refreshed
                    .wait_timeout_while(state, wait, |state| {
                        state.listening && state.synced.as_deref() != Some(&marker)
                    })
                    .unwrap_or_else(PoisonError::into_inner);
                if state.synced.as_deref() == Some(&marker) {
                    return Ok(());
                }
            }
        }
        refresh(&self.shared, &mut |sql| poll_pooled(pool, sql), true, None)
    }
}

impl Drop for TipWatch {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            // It ends after at most a slice or the read under way; a panic in it was already
            // reported.
            let _ = thread.join();
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Clears `watching` when the thread ends, however it ends.
struct Watching<'a>(&'a Shared);

impl Drop for Watching<'_> {
    fn drop(&mut self) {
        self.0.lock().watching = false;
        self.0.refreshed.notify_all();
    }
}

/// The thread: a listening connection when one can be had, a poll every `poll` in any case.
fn watch(
    pool: &Pool,
    listen: &Manager,
    shared: &Shared,
    stopped: &mpsc::Receiver<()>,
    poll: Duration,
) {
    let mut listener: Option<Listener> = None;
    // A hot standby refuses `LISTEN` as long as it is one: asked again once a minute.
    let mut next_listen = Instant::now();
    let mut next_poll = Instant::now() + poll;
    loop {
        if listener.is_none() && Instant::now() >= next_listen {
            match Listener::new(listen) {
                Ok(new) => {
                    let mut new = new;
                    // Commits made before the `LISTEN` took effect were not announced to it.
                    refresh_logged(shared, Some(&mut new), pool, Heard::default());
                    listener = Some(new);
                    set_listening(shared, true);
                }
                Err(err) => {
                    tracing::debug!(error = %err, "not listening for commits; polling");
                    next_listen = Instant::now() + LISTEN_RETRY;
                }
            }
        }
        let wait = next_poll
            .saturating_duration_since(Instant::now())
            .min(LISTEN_SLICE);
        let heard = match &mut listener {
            Some(conn) => match conn.wait(wait) {
                Ok(heard) => heard,
                Err(err) => {
                    tracing::debug!(error = %err, "listening connection lost; polling");
                    listener = None;
                    set_listening(shared, false);
                    Heard::default()
                }
            },
            None => match stopped.recv_timeout(wait) {
                Err(RecvTimeoutError::Timeout) => Heard::default(),
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            },
        };
        if !matches!(stopped.try_recv(), Err(TryRecvError::Empty)) {
            return;
        }
        let due = Instant::now() >= next_poll;
        if heard.commit || heard.marker.is_some() || due {
            refresh_logged(shared, listener.as_mut(), pool, heard);
        }
        if due {
            next_poll = Instant::now() + poll;
        }
    }
}

fn set_listening(shared: &Shared, listening: bool) {
    shared.lock().listening = listening;
    shared.refreshed.notify_all();
}

/// What the listening connection heard.
#[derive(Debug, Default)]
struct Heard {
    /// A commit was announced.
    commit: bool,
    /// The last of [`TipWatch::sync`]'s markers.
    marker: Option<String>,
}

/// How long the thread waits before asking to `LISTEN` again after it was refused.
const LISTEN_RETRY: Duration = Duration::from_secs(60);

/// A connection of its own (not the pool's, whose size is the reads') kept for `LISTEN`.
struct Listener(PgConn);

impl Listener {
    fn new(manager: &Manager) -> Result<Listener, Error> {
        let conn = r2d2::ManageConnection::connect(manager).map_err(map_err)?;
        let mut conn = Listener(conn);
        conn.0
            .client
            .batch_execute(&format!("LISTEN {CHANNEL}"))
            .map_err(map_err)?;
        Ok(conn)
    }

    /// Waits up to `timeout` for announcements, and takes every one that came.
    fn wait(&mut self, timeout: Duration) -> Result<Heard, Error> {
        let mut heard = Heard::default();
        let mut take = |notification: postgres::Notification| match notification
            .payload()
            .strip_prefix(SYNC_PREFIX)
        {
            Some(_) => heard.marker = Some(notification.payload().to_owned()),
            None => heard.commit = true,
        };
        let first = self
            .0
            .client
            .notifications()
            .timeout_iter(timeout)
            .next()
            .map_err(map_err)?;
        let Some(first) = first else {
            if self.0.client.is_closed() {
                return Err(Error::Unavailable("the listening connection closed".into()));
            }
            return Ok(heard);
        };
        take(first);
        // Announcements that came together make one refresh.
        let mut notifications = self.0.client.notifications();
        while let Some(next) = notifications.iter().next().map_err(map_err)? {
            take(next);
        }
        Ok(heard)
    }

    fn read(&mut self, sql: &str) -> Result<postgres::Row, Error> {
        let (client, mut statements) = self.0.autocommit();
        let statement = statements.get(client, sql)?;
        client.query_one(&statement, &[]).map_err(map_err)
    }
}

/// Reads `sql`'s row on a pooled connection.
fn poll_pooled(pool: &Pool, sql: &str) -> Result<postgres::Row, Error> {
    read_pooled(
        pool,
        |conn: &mut PgConn| {
            let (client, mut statements) = conn.autocommit();
            let statement = statements.get(client, sql)?;
            client.query_one(&statement, &[]).map_err(map_err)
        },
        || true,
    )
}

/// Reads the tip with `read` and publishes it: the version moves on when it changed, or
/// always when a commit was `announced` (it may have changed nothing the query sees); `marker`
/// is recorded once the tip is published.
fn refresh(
    shared: &Shared,
    read: &mut dyn FnMut(&str) -> Result<postgres::Row, Error>,
    announced: bool,
    marker: Option<String>,
) -> Result<(), Error> {
    let row = read(SQL)?;
    let observed = Observed {
        tip: tip::from_row(row.get(0), row.get(1), row.get(2))?,
        last_seq: row.get(3),
    };
    let mut state = shared.lock();
    if announced || state.observed != observed {
        state.observed = observed;
        state.version += 1;
    }
    if marker.is_some() {
        state.synced = marker;
    }
    drop(state);
    shared.refreshed.notify_all();
    Ok(())
}

/// [`refresh`] on the listening connection when there is one, else on a pooled one; a
/// failure is logged.
fn refresh_logged(shared: &Shared, listener: Option<&mut Listener>, pool: &Pool, heard: Heard) {
    let result = match listener {
        Some(conn) => refresh(
            shared,
            &mut |sql| conn.read(sql),
            heard.commit,
            heard.marker,
        ),
        None => refresh(
            shared,
            &mut |sql| poll_pooled(pool, sql),
            heard.commit,
            heard.marker,
        ),
    };
    if let Err(err) = result {
        tracing::debug!(error = %err, "chain tip not refreshed");
    }
}
