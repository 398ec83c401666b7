//! `server ingest`, and the ingest that `serve --ingest` runs beside the API.

use std::fs::File;
use std::io::{self, BufRead, BufReader, IsTerminal};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use ingest::{IngestOptions, IngestStats};
use storage::IngestWriter;

use crate::backend::Db;

/// Flags of `ingest`.
#[derive(Debug, Args)]
pub struct IngestArgs {
    /// Database to write: an SQLite file, or a postgres:// URL (its schema is created or
    /// upgraded first) [default: ./datanode.sqlite].
    #[arg(long, env = "DATANODE_DB", value_name = "PATH|URL")]
    db: Option<String>,
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
    let mut writer = Db::from_flag(args.db).open_writer()?;
    let stop = Arc::new(AtomicBool::new(false));
    stop_on_signal(Arc::clone(&stop))?;
    let show_progress = args.progress || (!args.quiet && io::stderr().is_terminal());
    let mut reporter = Progress::new(show_progress);
    let stats = run(&args.input, &mut *writer, &stop, &mut |stats| {
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

/// Sets `stop` on the first SIGINT or SIGTERM; a second one ends the process at once.
fn stop_on_signal(stop: Arc<AtomicBool>) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the signal handler")?;
    std::thread::Builder::new()
        .name("signals".to_owned())
        .spawn(move || {
            runtime.block_on(async {
                crate::serve::shutdown_signal().await;
                stop.store(true, Ordering::Relaxed);
                tracing::info!("stopping at the next block boundary (signal again to stop now)");
                crate::serve::shutdown_signal().await;
                std::process::exit(130);
            });
        })
        .context("cannot start the signal handler")?;
    Ok(())
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
