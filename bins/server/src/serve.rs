//! `server serve`: the HTTP API, with the demo database of the quick start and, on request, an
//! ingest running beside it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use http_api::{AllowedOrigins, App, AppConfig, IngestProgress, Metrics, ServeConfig};
use ingest::IngestStats;

use crate::backend::Db;

/// Flags of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Database to serve: an SQLite file, or a postgres:// URL [default: ./datanode.sqlite,
    /// created with demo data if missing and no --ingest is given]. An explicit path is never
    /// filled with demo data; a PostgreSQL database must have been migrated or ingested into.
    #[arg(long, env = "DATANODE_DB", value_name = "PATH|URL")]
    db: Option<String>,
    /// Address to listen on.
    #[arg(long, env = "DATANODE_LISTEN", default_value = "127.0.0.1:3008")]
    listen: SocketAddr,
    /// Also ingest this event stream (a file, or - for standard input) while serving; readers
    /// see each block once it is whole.
    #[arg(long, env = "DATANODE_INGEST", value_name = "FILE|-")]
    ingest: Option<String>,
    /// Origins whose pages may read the answers: a comma-separated list, or * for any.
    #[arg(long, env = "DATANODE_CORS_ORIGINS", default_value = "*")]
    cors_origins: String,
    /// Exports allowed at once; more get 503 with Retry-After.
    #[arg(long, env = "DATANODE_MAX_EXPORTS", default_value_t = 16)]
    max_exports: usize,
    /// Connections served at once; more wait in the listen backlog.
    #[arg(long, env = "DATANODE_MAX_CONNECTIONS", default_value_t = 1024,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
    /// Seconds a request head may take to arrive (HTTP/1.1: counted from when the server waits
    /// for it, so it also closes keep-alive connections idle that long).
    #[arg(long, env = "DATANODE_HEADER_TIMEOUT_SECS", default_value_t = 15,
          value_parser = clap::value_parser!(u64).range(1..))]
    header_timeout_secs: u64,
    /// Seconds a connection may stay open with no request in flight.
    #[arg(long, env = "DATANODE_IDLE_TIMEOUT_SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..))]
    idle_timeout_secs: u64,
    /// Largest request head accepted, in bytes (431 beyond it).
    #[arg(long, env = "DATANODE_MAX_HEADER_BYTES", default_value_t = 65536,
          value_parser = clap::value_parser!(u32).range(8192..))]
    max_header_bytes: u32,
    /// Seconds that requests in flight get to finish after SIGTERM or SIGINT.
    #[arg(long, env = "DATANODE_GRACE_SECS", default_value_t = 10)]
    grace_secs: u64,
}

impl ServeArgs {
    fn app_config(&self) -> AppConfig {
        AppConfig {
            max_concurrent_exports: self.max_exports,
            cors: AllowedOrigins::parse(&self.cors_origins),
        }
    }

    fn serve_config(&self) -> ServeConfig {
        ServeConfig {
            grace: Duration::from_secs(self.grace_secs),
            max_connections: self.max_connections as usize,
            header_read_timeout: Duration::from_secs(self.header_timeout_secs),
            idle_timeout: Duration::from_secs(self.idle_timeout_secs),
            max_header_bytes: self.max_header_bytes as usize,
        }
    }
}

/// `serve`.
pub fn serve(args: ServeArgs) -> Result<()> {
    let demo = args.db.is_none() && args.ingest.is_none();
    let db = Db::from_flag(args.db.clone());
    if let Db::Sqlite(path) = &db
        && demo
        && !path.exists()
    {
        crate::backend::create_demo(path)?;
    }
    // The writer first: with PostgreSQL it creates the schema the server then checks.
    let writer = match &args.ingest {
        Some(_) => Some(db.open_writer()?),
        None => None,
    };
    let store = Arc::new(db.open_to_serve(args.max_exports)?);
    let examples = store.examples().context("cannot read the database")?;
    let app = App::new(Arc::clone(&store), args.app_config());
    let stop_ingest = Arc::new(AtomicBool::new(false));
    let ingest_thread = match (&args.ingest, writer) {
        (Some(input), Some(writer)) => Some(spawn_ingest(
            input.clone(),
            writer,
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
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let addr = listener.local_addr().context("listener has no address")?;
        tracing::info!(%addr, db = %db.describe(), "serving");
        print_examples(addr, &examples);
        let shutdown = async {
            shutdown_signal().await;
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

/// Runs `server ingest`'s loop on its own thread, reporting to the metrics and the log.
fn spawn_ingest(
    input: String,
    mut writer: Box<dyn storage::IngestWriter>,
    metrics: Arc<Metrics>,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("ingest".to_owned())
        .spawn(move || {
            let started = Instant::now();
            let mut last_log = Instant::now();
            metrics.ingest_running(true);
            tracing::info!(input = %input, "ingest started");
            let result = crate::ingest::run(&input, &mut *writer, &stop, &mut |stats| {
                metrics.ingest_progress(&progress(stats));
                if last_log.elapsed() >= Duration::from_secs(10) {
                    last_log = Instant::now();
                    tracing::info!(
                        "ingest: {}",
                        crate::ingest::summary(stats, started.elapsed())
                    );
                }
            });
            metrics.ingest_running(false);
            match result {
                Ok(stats) => tracing::info!(
                    "ingest done: {}",
                    crate::ingest::summary(&stats, started.elapsed())
                ),
                // The API keeps serving what is stored; the log and the metrics say the ingest
                // stopped.
                Err(err) => tracing::error!("{err:#}; serving what is stored"),
            }
        })
        .context("cannot start the ingest thread")
}

fn progress(stats: &IngestStats) -> IngestProgress {
    IngestProgress {
        events: stats.events,
        ledger_entries: stats.ledger_entries,
        oracle_data: stats.oracle_data,
        last_block_height: stats.last_height,
        last_vega_time: stats.last_vega_time,
    }
}

fn print_examples(addr: SocketAddr, examples: &storage::Examples) {
    let base = format!("http://{addr}");
    if let (Some(party), Some(asset)) = (&examples.party, &examples.asset) {
        tracing::info!("try: curl -OJ '{base}/api/v2/ledgerentry/export?partyId={party}'");
        tracing::info!(
            "try: curl -OJ '{base}/api/v2/ledgerentry/export?partyId={party}&assetId={asset}&dateRange.startTimestamp=1690000000000000000&dateRange.endTimestamp=1690000600000000000'"
        );
    }
    tracing::info!("try: curl '{base}/api/v2/oracle/data?pagination.first=10&pretty'");
    if let Some(spec) = &examples.spec {
        tracing::info!(
            "try: curl '{base}/api/v2/oracle/data?oracleSpecId={spec}&pagination.first=1&pretty'"
        );
    }
    tracing::info!("try: curl '{base}/health' '{base}/metrics' '{base}/api/v2/openapi.json'");
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutdown signal received; finishing what is in flight");
}
