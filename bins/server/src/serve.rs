//! `server serve`: the HTTP API, with the demo database of the quick start and, on request, an
//! ingest running beside it.

mod examples;
mod flags;
mod limits;

use std::fmt::Display;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use http_api::App;

pub use flags::ServeArgs;

use crate::backend;

/// `serve`.
pub fn serve(args: ServeArgs) -> Result<()> {
    let demo = args.db.is_none() && args.ingest.is_none();
    if demo && !Path::new(backend::DEFAULT_DB).exists() {
        backend::create_demo(Path::new(backend::DEFAULT_DB))?;
    }
    let db = backend::backend(args.db.as_deref())?;
    // The writer first: with PostgreSQL it creates the schema the server then checks.
    let writer = match &args.ingest {
        Some(_) => Some(backend::open_writer(&*db, &args.tuning.writer_options())?),
        None => None,
    };
    let store = backend::open_store(&*db, args.max_readers())?;
    let examples = store.examples().context("cannot read the database")?;
    let app = App::new(store.clone(), args.app_config());
    let stop_ingest = Arc::new(AtomicBool::new(false));
    let ingest_thread = match (&args.ingest, writer) {
        (Some(input), Some(writer)) => Some(crate::ingest::spawn(
            input.clone(),
            args.tuning.clone(),
            args.ingest_addr_file.clone(),
            writer,
            Arc::clone(&store),
            app.metrics(),
            Arc::clone(&stop_ingest),
        )?),
        _ => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let served = runtime.block_on(async {
        // The metrics listener first: the public address file then says everything listens.
        let metrics_listener = match args.metrics_listen {
            Some(metrics_addr) => {
                let (listener, addr) =
                    bind(metrics_addr, args.metrics_addr_file.as_deref()).await?;
                tracing::info!(%addr, "serving metrics");
                Some(listener)
            }
            None => None,
        };
        let (listener, addr) = bind(args.listen, args.addr_file.as_deref()).await?;
        tracing::info!(%addr, db = %db.describe(), "serving");
        examples::print_examples(addr, &examples);
        // One signal stops both listeners.
        let (stopping, stopped) = tokio::sync::watch::channel(false);
        let shutdown = || {
            let mut stopped = stopped.clone();
            async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            }
        };
        let signals = async {
            crate::signals::shutdown().await;
            stop_ingest.store(true, Ordering::Relaxed);
            let _ = stopping.send(true);
        };
        let operator = app.operator();
        let public = http_api::serve(listener, app, args.serve_config(), shutdown());
        let metrics = async {
            if let Some(listener) = metrics_listener {
                http_api::serve(listener, operator, args.serve_config(), shutdown()).await;
            }
        };
        // The servers return once the signal has been sent and their connections drained.
        tokio::join!(signals, public, metrics);
        Ok::<_, anyhow::Error>(())
    });
    // A bind failure must not leave the ingest running: stop it either way.
    stop_ingest.store(true, Ordering::Relaxed);
    if let Some(thread) = ingest_thread {
        let _ = thread.join();
    }
    served?;
    tracing::info!("stopped");
    Ok(())
}

/// Listens on `addr`, and writes the bound address to `addr_file` if one is given.
async fn bind(
    addr: SocketAddr,
    addr_file: Option<&Path>,
) -> Result<(tokio::net::TcpListener, SocketAddr)> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let bound = listener.local_addr().context("listener has no address")?;
    if let Some(addr_file) = addr_file {
        write_addr_file(addr_file, bound)?;
    }
    Ok((listener, bound))
}

/// Writes `addr` and a newline to `path` through a temporary file and a rename, so that a
/// reader never sees a partial address.
pub(crate) fn write_addr_file(path: &Path, addr: impl Display) -> Result<()> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    std::fs::write(&partial, format!("{addr}\n"))
        .and_then(|()| std::fs::rename(&partial, path))
        .with_context(|| format!("cannot write the address file {}", path.display()))
}
