//! `server serve`: the HTTP API, with the demo database of the quick start and, on request, an
//! ingest running beside it.

mod examples;
mod flags;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use anyhow::{Context, Result};
use eventgen::GenerateConfig;
use http_api::App;
use ingest::IngestOptions;
use storage::{SqliteConfig, SqliteStore};

pub use flags::ServeArgs;

use crate::db_path;

/// `serve`.
pub fn serve(args: ServeArgs) -> Result<()> {
    let demo = args.db.is_none() && args.ingest.is_none();
    let path = db_path(args.db.clone());
    if demo && !path.exists() {
        create_demo(&path)?;
    }
    let store = Arc::new(
        SqliteStore::open(&path, SqliteConfig::default())
            .with_context(|| format!("cannot open the database {}", path.display()))?,
    );
    let examples = store.examples().context("cannot read the database")?;
    let app = App::new(Arc::clone(&store), args.app_config());
    let stop_ingest = Arc::new(AtomicBool::new(false));
    let ingest_thread = match &args.ingest {
        Some(input) => Some(crate::ingest::spawn(
            input.clone(),
            &store,
            app.metrics(),
            Arc::clone(&stop_ingest),
        )?),
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let served = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let addr = listener.local_addr().context("listener has no address")?;
        tracing::info!(%addr, db = %path.display(), "serving");
        if let Some(addr_file) = &args.addr_file {
            write_addr_file(addr_file, addr)?;
        }
        examples::print_examples(addr, &examples);
        let shutdown = async {
            crate::signals::shutdown().await;
            stop_ingest.store(true, Ordering::Relaxed);
        };
        http_api::serve(listener, app, args.serve_config(), shutdown).await;
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

/// Writes `addr` and a newline to `path` through a temporary file and a rename, so that a
/// reader never sees a partial address.
fn write_addr_file(path: &Path, addr: SocketAddr) -> Result<()> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    std::fs::write(&partial, format!("{addr}\n"))
        .and_then(|()| std::fs::rename(&partial, path))
        .with_context(|| format!("cannot write the address file {}", path.display()))
}

/// Fills a new database with the built-in demo dataset.
fn create_demo(path: &Path) -> Result<()> {
    tracing::info!(db = %path.display(), "creating a demo database");
    let started = Instant::now();
    let mut events = Vec::new();
    eventgen::generate(&GenerateConfig::DEFAULT, &mut events)
        .context("cannot generate demo data")?;
    // Write to a temporary file first, so that an interrupted creation leaves no half database
    // that the next start would take for a real one.
    let partial = path.with_extension("sqlite.partial");
    let _ = std::fs::remove_file(&partial);
    let store = SqliteStore::open(&partial, SqliteConfig::default())
        .with_context(|| format!("cannot create {}", partial.display()))?;
    let mut writer = store.writer()?;
    let stats = ingest::ingest(
        std::io::Cursor::new(events),
        &mut writer,
        &IngestOptions::default(),
        &mut |_| {},
    )?;
    drop(writer);
    drop(store);
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", partial.display()));
    }
    std::fs::rename(&partial, path).with_context(|| format!("cannot create {}", path.display()))?;
    tracing::info!(
        entries = stats.ledger_entries,
        oracle_data = stats.oracle_data,
        elapsed = ?started.elapsed(),
        "demo database ready"
    );
    Ok(())
}
