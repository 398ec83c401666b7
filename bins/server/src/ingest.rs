//! `server ingest`, and the ingest thread that `serve --ingest` runs beside the API.

use std::fs::File;
use std::io::{self, BufRead, BufReader, IsTerminal};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use http_api::{IngestProgress, Metrics};
use ingest::{IngestOptions, IngestStats};
use storage::{IngestWriter, SqliteConfig, SqliteStore};

use crate::db_path;

/// Flags of `ingest`.
#[derive(Debug, Args)]
pub struct IngestArgs {
    /// SQLite database to write [default: ./datanode.sqlite].
    #[arg(long, env = "DATANODE_DB")]
    db: Option<PathBuf>,
    /// Event stream: a file of newline-delimited JSON bus events, or - for standard input
    /// (read until it ends, committing as it goes).
    input: String,
    /// Print progress even when standard error is not a terminal.
    #[arg(long, conflicts_with = "quiet")]
    progress: bool,
    /// Print no progress, even on a terminal.
    #[arg(long)]
    quiet: bool,
}

/// `ingest`: runs until the input ends, a line is malformed, or SIGINT/SIGTERM (which stops at
/// the next block boundary; a second signal stops at once).
pub fn ingest(args: IngestArgs) -> Result<()> {
    let path = db_path(args.db);
    let store = SqliteStore::open(&path, SqliteConfig::default())
        .with_context(|| format!("cannot open the database {}", path.display()))?;
    let mut writer = store.writer()?;
    let stop = Arc::new(AtomicBool::new(false));
    crate::signals::stop_on_signal(&stop)?;
    let show_progress = args.progress || (!args.quiet && io::stderr().is_terminal());
    let mut reporter = Progress::new(show_progress);
    let stats = run(&args.input, &mut writer, &stop, &mut |stats| {
        reporter.report(stats)
    })?;
    tracing::info!(
        "ingest done: {}",
        summary(&stats, reporter.started.elapsed())
    );
    if stop.load(Ordering::Relaxed) {
        tracing::info!("stopped by a signal at a block boundary; run again to resume");
    }
    if stats.incomplete_events > 0 {
        tracing::warn!(
            events = stats.incomplete_events,
            "the input ended inside a block; that block was not stored (ingest the rest of it to complete it)"
        );
    }
    Ok(())
}

/// Ingests the stream named `input` (a path, or `-` for standard input) until it ends or
/// `stop` is set.
pub fn run(
    input: &str,
    writer: &mut dyn IngestWriter,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&IngestStats),
) -> Result<IngestStats> {
    let reader = open(input)?;
    let options = IngestOptions {
        stop: Some(stop),
        ..IngestOptions::default()
    };
    ingest::ingest(reader, writer, &options, progress)
        .with_context(|| format!("ingest of {input} stopped"))
}

/// A large buffer: lines are parsed in place in it, and fewer reads mean fewer system calls.
const READ_BUFFER: usize = 1 << 20;

fn open(input: &str) -> Result<Box<dyn BufRead + Send>> {
    if input == "-" {
        return Ok(Box::new(BufReader::with_capacity(READ_BUFFER, io::stdin())));
    }
    let file = File::open(input).with_context(|| format!("cannot open {input}"))?;
    Ok(Box::new(BufReader::with_capacity(READ_BUFFER, file)))
}

/// Runs `server ingest`'s loop on its own thread, reporting to the metrics and the log.
pub fn spawn(
    input: String,
    store: &SqliteStore,
    metrics: Arc<Metrics>,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>> {
    let mut writer = store.writer()?;
    std::thread::Builder::new()
        .name("ingest".to_owned())
        .spawn(move || {
            let started = Instant::now();
            let mut last_log = Instant::now();
            metrics.ingest_running(true);
            tracing::info!(input = %input, "ingest started");
            let result = run(&input, &mut writer, &stop, &mut |stats| {
                metrics.ingest_progress(&progress(stats));
                if last_log.elapsed() >= Duration::from_secs(10) {
                    last_log = Instant::now();
                    tracing::info!("ingest: {}", summary(stats, started.elapsed()));
                }
            });
            metrics.ingest_running(false);
            match result {
                Ok(stats) => tracing::info!("ingest done: {}", summary(&stats, started.elapsed())),
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

/// One line on what an ingest has done.
pub fn summary(stats: &IngestStats, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64().max(1e-9);
    format!(
        "{} events ({:.0}/s), {} ledger entries ({:.0}/s), {} oracle data, {} blocks, {} skipped as already stored, last block {}",
        stats.events,
        stats.events as f64 / secs,
        stats.ledger_entries,
        stats.ledger_entries as f64 / secs,
        stats.oracle_data,
        stats.blocks,
        stats.skipped_events,
        stats.last_height.map_or("-".to_owned(), |h| h.to_string()),
    )
}

/// Progress lines on standard error, at most one a second.
pub struct Progress {
    enabled: bool,
    pub started: Instant,
    last: Option<Instant>,
}

impl Progress {
    pub fn new(enabled: bool) -> Self {
        Self {
            enabled,
            started: Instant::now(),
            last: None,
        }
    }

    pub fn report(&mut self, stats: &IngestStats) {
        let due = self
            .last
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(1));
        if self.enabled && due {
            self.last = Some(Instant::now());
            eprintln!("{}", summary(stats, self.started.elapsed()));
        }
    }
}
