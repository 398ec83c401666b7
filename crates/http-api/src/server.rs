//! Serving the [`App`] on a listener: connection limits, timeouts and graceful shutdown.
//!
//! Each connection runs in its own task, which also enforces two timeouts of its own:
//! - the header timeout, from accept until the first request head: a peer that connects and
//!   sends nothing (or never finishes its first head) is dropped then. hyper's header read
//!   timeout bounds the heads of later requests (for HTTP/1, counted from when the server waits
//!   for them), but its clock only starts once the first bytes arrive.
//! - the idle timeout: a connection with no request in flight for that long is asked to close
//!   (HTTP/2 gets a GOAWAY), and is dropped if it has not within a second.
//!
//! Connection table: at most `max_connections` are served at once. When the table is full, the
//! oldest connection that has not yet sent a request head is dropped to make room, so that
//! silent peers cannot queue a real client behind them; only when every connection has sent a
//! request does a new one wait for a free slot.
//!
//! Shutdown: the listener closes, every connection is asked to finish what it is doing and
//! close, and the grace period bounds the wait; what is left then is cut.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::Request;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::{App, Peer, body};

/// How connections are served.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// How long requests in flight may take to finish once shutdown begins.
    pub grace: Duration,
    /// Connections served at once. Beyond it the oldest connection that has not sent a request
    /// head is dropped to make room; when every connection has sent one, new ones wait in the
    /// listen backlog until one closes.
    pub max_connections: usize,
    /// How long a request head may take to arrive: the first from accept, later ones (HTTP/1)
    /// from when the server starts waiting for them.
    pub header_read_timeout: Duration,
    /// How long a connection may stay open with no request in flight.
    pub idle_timeout: Duration,
    /// The largest request head accepted, in bytes; HTTP/1 answers 431 beyond it.
    pub max_header_bytes: usize,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            grace: Duration::from_secs(10),
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(60),
            max_header_bytes: 64 * 1024,
        }
    }
}

/// After asking an idle connection to close, how long it gets before it is dropped.
const IDLE_CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Serves `app` on `listener` until `shutdown` resolves, then stops accepting and lets requests
/// in flight finish within the grace period.
pub async fn serve(
    listener: TcpListener,
    app: App,
    config: ServeConfig,
    shutdown: impl Future<Output = ()>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout)
        // hyper's floor for the read buffer is 8 KiB.
        .max_buf_size(config.max_header_bytes.max(8192));
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(config.max_header_bytes).unwrap_or(u32::MAX));
    let permits = Arc::new(Semaphore::new(config.max_connections));
    let silent = Arc::new(Silent::default());
    let (stop, stopping) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = pin!(shutdown);
    loop {
        // Reap finished connection tasks so that the set does not grow with every connection.
        while connections.try_join_next().is_some() {}
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let permit = match Arc::clone(&permits).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                if silent.shed_oldest() {
                    tracing::debug!("connection table full; dropped the oldest silent connection");
                }
                tokio::select! {
                    permit = Arc::clone(&permits).acquire_owned() => {
                        permit.expect("the semaphore is never closed")
                    }
                    () = &mut shutdown => break,
                }
            }
        };
        let _ = stream.set_nodelay(true);
        let (id, shed) = silent.register();
        connections.spawn(connection(
            stream,
            peer,
            builder.clone(),
            app.clone(),
            config.clone(),
            stopping.clone(),
            Slot {
                _permit: permit,
                id,
                shed,
                silent: Arc::clone(&silent),
            },
        ));
    }
    drop(listener);
    let _ = stop.send(true);
    let drained = tokio::time::timeout(config.grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    match drained {
        Ok(()) => tracing::info!("all connections closed"),
        Err(_) => {
            tracing::warn!(grace = ?config.grace, remaining = connections.len(), "grace period over; closing remaining connections");
            connections.shutdown().await;
        }
    }
}

/// Serves one connection until it ends, goes idle for too long, or shutdown drains it.
async fn connection(
    stream: TcpStream,
    peer: std::net::SocketAddr,
    builder: auto::Builder<TokioExecutor>,
    app: App,
    config: ServeConfig,
    mut stopping: watch::Receiver<bool>,
    mut slot: Slot,
) {
    let activity = Arc::new(Activity::new());
    let service = {
        let activity = Arc::clone(&activity);
        let silent = Arc::clone(&slot.silent);
        let id = slot.id;
        service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(Peer(peer));
            if !activity.requested.swap(true, Ordering::AcqRel) {
                silent.heard_from(id);
            }
            let app = app.clone();
            let active = Active::new(Arc::clone(&activity));
            async move {
                let response = app.handle(request).await;
                // The request counts as in flight for as long as its body lives.
                Ok::<_, Infallible>(response.map(|body| body::with_guard(body, active)))
            }
        })
    };
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), service);
    let mut conn = pin!(conn);
    // Shutdown asked the connection to finish its requests and close.
    let mut draining = false;
    // When set, the idle connection was asked to close and is dropped if still open then.
    let mut closing_deadline: Option<Instant> = None;
    let header_deadline = Instant::now() + config.header_read_timeout;
    // Set once the table can no longer ask this connection to go.
    let mut heard = false;
    loop {
        if *stopping.borrow_and_update() && !draining {
            // Requests in flight finish; the server's grace period bounds the wait.
            conn.as_mut().graceful_shutdown();
            draining = true;
        }
        let idle_deadline = activity.idle_deadline(config.idle_timeout);
        let first_head_deadline =
            (!activity.requested.load(Ordering::Acquire)).then_some(header_deadline);
        let deadline = [
            closing_deadline,
            idle_deadline.filter(|_| !draining),
            first_head_deadline,
        ]
        .into_iter()
        .flatten()
        .min();
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(err) = result {
                    tracing::debug!(%peer, error = %err, "connection ended with an error");
                }
                return;
            }
            changed = stopping.changed(), if !draining => {
                // A closed channel means the server is gone: drain as for a stop.
                if changed.is_err() {
                    conn.as_mut().graceful_shutdown();
                    draining = true;
                }
            }
            shed = &mut slot.shed, if !heard => {
                if shed.is_ok() {
                    tracing::debug!(%peer, "dropping a silent connection to make room");
                    return;
                }
                // The connection sent a request head: it is no longer one to drop.
                heard = true;
            }
            () = sleep_until(deadline) => {
                if !activity.requested.load(Ordering::Acquire) && Instant::now() >= header_deadline {
                    tracing::debug!(%peer, "no request head within the header timeout; dropping the connection");
                    return;
                }
                if closing_deadline.is_some_and(|at| Instant::now() >= at) {
                    tracing::debug!(%peer, "connection did not close in time; dropping it");
                    return;
                }
                if activity.idle_deadline(config.idle_timeout).is_some_and(|at| Instant::now() >= at) {
                    tracing::debug!(%peer, "closing an idle connection");
                    conn.as_mut().graceful_shutdown();
                    closing_deadline = Some(Instant::now() + IDLE_CLOSE_GRACE);
                }
            }
        }
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The connections that have not sent a request head yet, oldest first: the ones dropped to
/// make room when the table is full.
#[derive(Default)]
struct Silent {
    connections: Mutex<Registry>,
}

#[derive(Default)]
struct Registry {
    next_id: u64,
    /// Tells each silent connection, by the order of accept, to go away.
    waiting: BTreeMap<u64, oneshot::Sender<()>>,
}

impl Silent {
    /// Adds a new connection: its id, and what tells it to go.
    fn register(&self) -> (u64, oneshot::Receiver<()>) {
        let (sender, receiver) = oneshot::channel();
        let mut registry = self.lock();
        let id = registry.next_id;
        registry.next_id += 1;
        registry.waiting.insert(id, sender);
        (id, receiver)
    }

    /// The connection `id` sent a request head, or ended: it is no longer one to drop.
    fn heard_from(&self, id: u64) {
        self.lock().waiting.remove(&id);
    }

    /// Tells the oldest silent connection to go; false when there is none.
    fn shed_oldest(&self) -> bool {
        let oldest = self.lock().waiting.pop_first();
        oldest.is_some_and(|(_, shed)| shed.send(()).is_ok())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        // Every change to the registry is a single insert or remove: a panic cannot leave it
        // half-written.
        self.connections
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A connection's place in the table: released (and its registry entry removed) when the
/// connection task ends, however it ends.
struct Slot {
    _permit: OwnedSemaphorePermit,
    id: u64,
    /// Resolves when the table needs the slot of this silent connection.
    shed: oneshot::Receiver<()>,
    silent: Arc<Silent>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.silent.heard_from(self.id);
    }
}

/// Requests in flight on a connection, and since when it has had none.
struct Activity {
    /// Whether the connection has sent a request head.
    requested: AtomicBool,
    in_flight: AtomicUsize,
    idle_since: Mutex<Instant>,
}

impl Activity {
    fn new() -> Self {
        Self {
            requested: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
        }
    }

    /// When the connection will have been idle for `timeout`; `None` while requests are in
    /// flight.
    fn idle_deadline(&self, timeout: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(*self.lock() + timeout)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Instant> {
        // The guarded value is a plain Instant: a panic cannot leave it half-written.
        self.idle_since
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// One request in flight, from its head to the end (or drop) of its response body.
struct Active(Arc<Activity>);

impl Active {
    fn new(activity: Arc<Activity>) -> Self {
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        Active(activity)
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        *self.0.lock() = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}
