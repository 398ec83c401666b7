//! `server`: serves the Vega data-node compatible ledger export and oracle data API, ingests
//! Vega event streams into its store, and generates synthetic streams.
//!
//! A thin composition of the workspace crates: flags and environment, logging, opening the
//! store, binding, signals and exit codes.

mod admin;
mod backend;
mod generate;
mod ingest;
mod logging;
mod serve;
mod signals;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

// mimalloc: the ingest allocates on its parser thread and frees on its writer thread, where
// glibc's allocator spent a fifth of the time on arena locks (see docs/PERFORMANCE.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Vega data-node compatible ledger export and oracle data API.
///
/// Without a command, serves (the flags of `serve` apply): on 127.0.0.1:3008 from
/// ./datanode.sqlite, which is created with a demo dataset when it does not exist yet.
/// Every flag has an environment variable, shown in brackets; flags win.
#[derive(Debug, Parser)]
#[command(
    name = "server",
    version,
    propagate_version = true,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: serve::ServeArgs,
    /// Log format on standard error; the level comes from RUST_LOG (default info).
    #[arg(
        long,
        global = true,
        env = "DATANODE_LOG_FORMAT",
        value_enum,
        default_value_t = logging::LogFormat::Text
    )]
    log_format: logging::LogFormat,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the HTTP API (the default command).
    Serve(serve::ServeArgs),
    /// Load a Vega event stream (event buffer files, gzip, a directory of them, NDJSON bus
    /// events, standard input, or a core node's live socket) into the store.
    Ingest(ingest::IngestArgs),
    /// Write a synthetic, internally consistent Vega event stream.
    Generate(generate::GenerateArgs),
    /// Create or upgrade the schema of a database (safe when several run at once). `ingest`
    /// does this by itself, and so does opening an SQLite file (`serve`, `check`); `serve`
    /// never changes a PostgreSQL database.
    Migrate(admin::DbArgs),
    /// Check that a database can be served: schema version, row format, and a read through
    /// the oracle data and one party's export.
    Check(admin::DbArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(cli.log_format);
    let result = match cli.command {
        None => serve::serve(cli.serve),
        Some(Command::Serve(args)) => serve::serve(args),
        Some(Command::Ingest(args)) => ingest::ingest(args),
        Some(Command::Generate(args)) => generate::generate(args),
        Some(Command::Migrate(args)) => admin::migrate(args),
        Some(Command::Check(args)) => admin::check(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // Once, through the log, so that a JSON log keeps it and a text log reads as before.
            tracing::error!("{err:#}");
            ExitCode::FAILURE
        }
    }
}
