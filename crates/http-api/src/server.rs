//! Serving the [`App`] on a listener with graceful shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use crate::App;

/// How connections are served.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// How long requests in flight may take to finish once shutdown begins.
    pub grace: Duration,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            grace: Duration::from_secs(10),
        }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then stops accepting and lets requests
/// in flight finish within the grace period.
pub async fn serve(
    listener: TcpListener,
    app: App,
    config: ServeConfig,
    shutdown: impl Future<Output = ()>,
) {
    let builder = auto::Builder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
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
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service = service_fn(move |request| {
            let app = app.clone();
            async move { Ok::<_, Infallible>(app.handle(request).await) }
        });
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(%peer, error = %err, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections closed"),
        () = tokio::time::sleep(config.grace) => {
            tracing::warn!(grace = ?config.grace, "grace period over; closing remaining connections");
        }
    }
}
