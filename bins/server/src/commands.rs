//! The commands: argument structs and what each one runs.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use http_api::{App, AppConfig, ServeConfig};
use ingest::{GenerateConfig, IngestOptions, IngestStats};
use storage::{SqliteConfig, SqliteStore};

use crate::db_path;

/// Flags of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// SQLite database to serve [default: ./datanode.sqlite, created with demo data if missing].
    /// An explicit path is never filled with demo data.
    #[arg(long, env = "DATANODE_DB")]
    db: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, env = "DATANODE_LISTEN", default_value = "127.0.0.1:3008")]
    listen: SocketAddr,
    /// Seconds that requests in flight get to finish after SIGTERM or SIGINT.
    #[arg(long, env = "DATANODE_GRACE_SECS", default_value_t = 10)]
    grace_secs: u64,
    /// Exports allowed at once; more get 503 with Retry-After.
    #[arg(long, env = "DATANODE_MAX_EXPORTS", default_value_t = 16)]
    max_exports: usize,
}

impl ServeArgs {
    /// What `cargo run --release` with no arguments does.
    pub fn default_for_quick_start() -> Self {
        Self {
            db: std::env::var_os("DATANODE_DB").map(PathBuf::from),
            listen: std::env::var("DATANODE_LISTEN")
                .ok()
                .and_then(|addr| addr.parse().ok())
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 3008))),
            grace_secs: 10,
            max_exports: 16,
        }
    }
}

/// Flags of `ingest`.
#[derive(Debug, Args)]
pub struct IngestArgs {
    /// SQLite database to write [default: ./datanode.sqlite].
    #[arg(long, env = "DATANODE_DB")]
    db: Option<PathBuf>,
    /// Event stream: a file of newline-delimited JSON bus events, or - for standard input.
    input: String,
    /// Print progress even when standard error is not a terminal.
    #[arg(long, conflicts_with = "quiet")]
    progress: bool,
    /// Print no progress, even on a terminal.
    #[arg(long)]
    quiet: bool,
}

/// Flags of `generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Seed: the same flags always give the same stream.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Blocks to generate.
    #[arg(long, default_value_t = 2000)]
    blocks: u64,
    /// Parties.
    #[arg(long, default_value_t = 50)]
    parties: u32,
    /// Assets.
    #[arg(long, default_value_t = 3)]
    assets: u32,
    /// Markets.
    #[arg(long, default_value_t = 4)]
    markets: u32,
    /// Oracle specs.
    #[arg(long, default_value_t = 20)]
    specs: u32,
    /// Ledger entries per block.
    #[arg(long, default_value_t = 20)]
    entries_per_block: u32,
    /// Oracle data per block.
    #[arg(long, default_value_t = 4)]
    oracle_data_per_block: u32,
    /// Share of entries (0 to 1) that involve party 0, to make one very large party.
    #[arg(long, default_value_t = 0.0)]
    whale_share: f64,
    /// Output file [default: standard output].
    #[arg(long, short)]
    output: Option<PathBuf>,
}

impl GenerateArgs {
    fn config(&self) -> GenerateConfig {
        GenerateConfig {
            seed: self.seed,
            blocks: self.blocks,
            parties: self.parties,
            assets: self.assets,
            markets: self.markets,
            specs: self.specs,
            entries_per_block: self.entries_per_block,
            oracle_data_per_block: self.oracle_data_per_block,
            whale_share: self.whale_share,
            ..GenerateConfig::default()
        }
    }
}

/// Logs go to standard error; `RUST_LOG` sets the level (default `info`).
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .with_ansi(io::stderr().is_terminal())
        .init();
}

/// `serve`.
pub fn serve(args: ServeArgs) -> Result<()> {
    let demo = args.db.is_none();
    let path = db_path(args.db);
    if demo && !path.exists() {
        create_demo(&path)?;
    }
    let store = Arc::new(
        SqliteStore::open(&path, SqliteConfig::default())
            .with_context(|| format!("cannot open the database {}", path.display()))?,
    );
    let examples = store.examples().context("cannot read the database")?;
    let app = App::new(
        Arc::clone(&store),
        AppConfig {
            max_concurrent_exports: args.max_exports,
        },
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let addr = listener.local_addr().context("listener has no address")?;
        tracing::info!(%addr, db = %path.display(), "serving");
        print_examples(addr, &examples);
        let config = ServeConfig {
            grace: Duration::from_secs(args.grace_secs),
        };
        http_api::serve(listener, app, config, shutdown_signal()).await;
        Ok::<_, anyhow::Error>(())
    })?;
    tracing::info!("stopped");
    Ok(())
}

fn print_examples(addr: SocketAddr, examples: &storage::Examples) {
    let base = format!("http://{addr}");
    if let (Some(party), Some(asset)) = (&examples.party, &examples.asset) {
        tracing::info!("try: curl -OJ '{base}/api/v2/ledgerentry/export?partyId={party}'");
        tracing::info!(
            "try: curl '{base}/api/v2/ledgerentry/export?partyId={party}&assetId={asset}&dateRange.startTimestamp=1690000000000000000&dateRange.endTimestamp=1690000600000000000'"
        );
    }
    tracing::info!("try: curl '{base}/api/v2/oracle/data?pagination.first=10'");
    if let Some(spec) = &examples.spec {
        tracing::info!(
            "try: curl '{base}/api/v2/oracle/data?oracleSpecId={spec}&pagination.first=1'"
        );
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
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
    tracing::info!("shutdown signal received; finishing requests in flight");
}

/// Fills a new database with the built-in demo dataset.
fn create_demo(path: &std::path::Path) -> Result<()> {
    tracing::info!(db = %path.display(), "creating a demo database");
    let started = Instant::now();
    let mut events = Vec::new();
    ingest::generate(&GenerateConfig::default(), &mut events)
        .context("cannot generate demo data")?;
    // Write to a temporary file first, so that an interrupted creation leaves no half database
    // that the next start would take for a real one.
    let partial = path.with_extension("sqlite.partial");
    let _ = std::fs::remove_file(&partial);
    let store = SqliteStore::open(&partial, SqliteConfig::default())
        .with_context(|| format!("cannot create {}", partial.display()))?;
    let mut writer = store.writer()?;
    let stats = ingest::ingest(
        events.as_slice(),
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

/// `ingest`.
pub fn ingest(args: IngestArgs) -> Result<()> {
    let path = db_path(args.db);
    let store = SqliteStore::open(&path, SqliteConfig::default())
        .with_context(|| format!("cannot open the database {}", path.display()))?;
    let mut writer = store.writer()?;
    let show_progress = args.progress || (!args.quiet && io::stderr().is_terminal());
    let mut reporter = Progress::new(show_progress);
    let options = IngestOptions::default();
    let result = if args.input == "-" {
        ingest::ingest(
            BufReader::with_capacity(1 << 20, io::stdin()),
            &mut writer,
            &options,
            &mut |s| reporter.report(s, false),
        )
    } else {
        let file =
            File::open(&args.input).with_context(|| format!("cannot open {}", args.input))?;
        let input = BufReader::with_capacity(1 << 20, file);
        ingest::ingest(input, &mut writer, &options, &mut |s| {
            reporter.report(s, false)
        })
    };
    let stats = result.with_context(|| format!("ingest of {} stopped", args.input))?;
    reporter.report(&stats, true);
    if stats.incomplete_events > 0 {
        tracing::warn!(
            events = stats.incomplete_events,
            "the input ended inside a block; that block was not stored (ingest the rest of it to complete it)"
        );
    }
    Ok(())
}

/// Progress lines on standard error, at most one a second.
struct Progress {
    enabled: bool,
    started: Instant,
    last: Option<Instant>,
}

impl Progress {
    fn new(enabled: bool) -> Self {
        Self {
            enabled,
            started: Instant::now(),
            last: None,
        }
    }

    fn report(&mut self, stats: &IngestStats, last: bool) {
        let due = self
            .last
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(1));
        let print = last || (self.enabled && due);
        if !print {
            return;
        }
        self.last = Some(Instant::now());
        let secs = self.started.elapsed().as_secs_f64().max(1e-9);
        let line = format!(
            "{} events ({:.0}/s), {} ledger entries ({:.0}/s), {} oracle data, {} blocks, {} skipped as already stored, last block {}",
            stats.events,
            stats.events as f64 / secs,
            stats.ledger_entries,
            stats.ledger_entries as f64 / secs,
            stats.oracle_data,
            stats.blocks,
            stats.skipped_events,
            stats.last_height.map_or("-".to_owned(), |h| h.to_string()),
        );
        if last {
            tracing::info!("ingest done: {line}");
        } else {
            eprintln!("{line}");
        }
    }
}

/// `generate`.
pub fn generate(args: GenerateArgs) -> Result<()> {
    let config = args.config();
    let summary = match &args.output {
        Some(path) => {
            let file =
                File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
            let mut out = BufWriter::with_capacity(1 << 20, file);
            let summary = ingest::generate(&config, &mut out)?;
            out.flush()?;
            summary
        }
        None => {
            let stdout = io::stdout();
            let mut out = BufWriter::with_capacity(1 << 20, stdout.lock());
            let summary = ingest::generate(&config, &mut out)?;
            out.flush()?;
            summary
        }
    };
    tracing::info!(
        events = summary.events,
        blocks = summary.blocks,
        ledger_entries = summary.ledger_entries,
        oracle_data = summary.oracle_data,
        "generated"
    );
    Ok(())
}
