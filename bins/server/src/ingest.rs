//! `server ingest`, and the ingest thread that `serve --ingest` runs beside the API.

use std::io::{self, IsTerminal};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use http_api::{IngestProgress, Metrics};
use ingest::{DEFAULT_MAX_RECORD_BYTES, Format, IngestOptions, IngestStats, Input, Socket};
use storage::{IngestWriter, Store, WriterOptions};

use crate::backend;

/// Flags of `ingest`.
#[derive(Debug, Args)]
pub struct IngestArgs {
    /// Database to write: an SQLite file, or a postgres:// URL (its schema is created or
    /// upgraded first) [default: ./datanode.sqlite].
    #[arg(long, env = "DATANODE_DB", value_name = "PATH|URL")]
    db: Option<String>,
    /// Event stream: a Vega event buffer file, a gzip-compressed one, a directory of them
    /// (read in file-name order), a file of newline-delimited JSON bus events, - for standard
    /// input (read until it ends, committing as it goes), or tcp://HOST:PORT to listen for a
    /// Vega core node's event socket (until SIGINT/SIGTERM; Vega's port is 3005). In the
    /// configuration file it is `[ingest] input`, the key `serve --ingest` reads too.
    #[arg(id = "ingest", value_name = "PATH|-|tcp://HOST:PORT")]
    input: String,
    #[command(flatten)]
    tuning: IngestTuning,
    /// Once the event socket (tcp://HOST:PORT) listens, write its bound address (e.g.
    /// tcp://127.0.0.1:3005) and a newline to this file, atomically: for scripts and tests that
    /// listen on port 0.
    #[arg(long, env = "DATANODE_INGEST_ADDR_FILE", value_name = "PATH")]
    ingest_addr_file: Option<PathBuf>,
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
    let db = backend::backend(args.db.as_deref())?;
    let mut writer = backend::open_writer(&*db, &args.tuning.writer_options())?;
    let stop = Arc::new(AtomicBool::new(false));
    crate::signals::stop_on_signal(&stop)?;
    let show_progress = args.progress || (!args.quiet && io::stderr().is_terminal());
    let mut reporter = Progress::new(show_progress);
    let stats = run(
        &args.input,
        &args.tuning,
        args.ingest_addr_file.as_deref(),
        &mut *writer,
        &stop,
        &mut |stats| reporter.report(stats),
    )?;
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

/// How an ingest reads its input's records, and how much its writer keeps of what it stored:
/// the flags `ingest` and `serve --ingest` share beside the input itself.
#[derive(Clone, Debug, Args)]
pub struct IngestTuning {
    /// The input's format, detected from its first bytes unless given: gzip is always
    /// recognised; `{` or whitespace first means NDJSON, anything else buffer records.
    #[arg(long, value_enum)]
    format: Option<FormatArg>,
    /// A record (buffer record or NDJSON line) longer than this is an error, refused before
    /// it is read: it bounds the memory whatever the input.
    #[arg(long, default_value_t = DEFAULT_MAX_RECORD_BYTES)]
    max_record_bytes: usize,
    /// MiB of parties' last small segments the writer keeps in memory, so that a batch that
    /// adds to them reads nothing back; a party beyond it costs a read now and then instead.
    /// The stored data are the same whatever it is: it trades the ingest's memory, which grows
    /// with the number of parties up to it, for reads.
    #[arg(long, default_value_t = WriterOptions::default().remembered_bytes >> 20)]
    remembered_mib: usize,
    /// While the input keeps coming (a bulk load, a catch-up), commit at least this often, so
    /// that readers see new blocks this late at most; a live stream commits whenever it goes
    /// quiet whatever this is. Longer lets PostgreSQL's transactions of many parties grow
    /// (fewer, larger segments: a faster bulk load), and a crash re-ingests up to this much.
    #[arg(
        long,
        default_value_t = IngestOptions::default().max_batch_age.as_secs(),
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    max_batch_age_secs: u64,
}

impl IngestTuning {
    /// The writer's options these flags give.
    pub fn writer_options(&self) -> WriterOptions {
        WriterOptions {
            remembered_bytes: self.remembered_mib.saturating_mul(1 << 20),
        }
    }
}

/// `--format` values.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum FormatArg {
    /// Newline-delimited protobuf JSON.
    Ndjson,
    /// Vega's event buffer file (length-prefixed protobuf records).
    VegaBuffer,
}

impl From<FormatArg> for Format {
    fn from(format: FormatArg) -> Format {
        match format {
            FormatArg::Ndjson => Format::Ndjson,
            FormatArg::VegaBuffer => Format::VegaBuffer,
        }
    }
}

/// Ingests the stream named `input` (a file or directory, `-` for standard input, or
/// `tcp://HOST:PORT` for a socket, whose bound address goes to `addr_file` when given) until it
/// ends or `stop` is set.
pub fn run(
    input: &str,
    tuning: &IngestTuning,
    addr_file: Option<&Path>,
    writer: &mut dyn IngestWriter,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(&IngestStats),
) -> Result<IngestStats> {
    let source = if input == "-" {
        Input::stdin()
    } else if let Some(address) = input.strip_prefix("tcp://") {
        let socket = Socket::bind(address, tuning.max_record_bytes)
            .with_context(|| format!("cannot listen on {input}"))?;
        tracing::info!(
            address = socket.address(),
            "waiting for a Vega core node to connect"
        );
        if let Some(path) = addr_file {
            crate::serve::write_addr_file(path, socket.address())?;
        }
        Input::frames(socket)
    } else {
        Input::path(input)
    };
    let options = IngestOptions {
        stop: Some(stop),
        format: tuning.format.map(Format::from),
        max_record_bytes: tuning.max_record_bytes,
        max_batch_age: Duration::from_secs(tuning.max_batch_age_secs),
        ..IngestOptions::default()
    };
    ingest::ingest(source, writer, &options, progress)
        .with_context(|| format!("ingest of {input} stopped"))
}

/// Runs `server ingest`'s loop on its own thread, reporting to the metrics and the log, and
/// bringing `store`'s chain tip up to each commit.
pub fn spawn(
    input: String,
    tuning: IngestTuning,
    ingest_addr_file: Option<PathBuf>,
    mut writer: Box<dyn IngestWriter>,
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("ingest".to_owned())
        .spawn(move || {
            background_priority();
            let started = Instant::now();
            let mut last_log = Instant::now();
            metrics.ingest_running(true);
            tracing::info!(input = %input, "ingest started");
            let addr_file = ingest_addr_file.as_deref();
            let result = run(
                &input,
                &tuning,
                addr_file,
                &mut *writer,
                &stop,
                &mut |stats| {
                    metrics.ingest_progress(&progress(stats));
                    // The block headers show this server's own commits at once, not up to a second
                    // later (PostgreSQL's tip is otherwise reread in the background).
                    if let Err(err) = store.refresh_chain_tip() {
                        tracing::warn!(error = %err, "cannot read the chain tip after a commit");
                    }
                    if last_log.elapsed() >= Duration::from_secs(10) {
                        last_log = Instant::now();
                        tracing::info!("ingest: {}", summary(stats, started.elapsed()));
                    }
                },
            );
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

/// The nice value of the ingest's threads inside `serve`.
const INGEST_NICE: i32 = 10;

/// Lowers the calling thread's scheduling priority to [`INGEST_NICE`], so that when the cores
/// are busy a page request runs before the ingest's parsing and commits (measured in
/// docs/PERFORMANCE.md, "The socket"). On Linux the nice value belongs to the thread, and the
/// threads the ingest starts inherit it; the rest of the server keeps its own.
fn background_priority() {
    if let Err(err) = rustix::process::setpriority_process(None, INGEST_NICE) {
        tracing::warn!(error = %err, "cannot lower the ingest's priority");
    }
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
