//! `server`: serves the Vega data-node compatible ledger export and oracle data API, ingests
//! Vega event streams into its store, and generates synthetic streams.
//!
//! A thin composition of the workspace crates: flags and environment, logging, opening the
//! store, binding, signals and exit codes.

mod commands;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

// mimalloc: the ingest allocates on its parser thread and frees on its writer thread, where
// glibc's allocator spent a fifth of the time on arena locks (see docs/PERFORMANCE.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The database used when `--db` is not given.
const DEFAULT_DB: &str = "datanode.sqlite";

/// Vega data-node compatible ledger export and oracle data API.
///
/// With no command, serves on 127.0.0.1:3008 from ./datanode.sqlite, creating it with a demo
/// dataset when it does not exist yet.
#[derive(Debug, Parser)]
#[command(name = "server", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the HTTP API.
    Serve(commands::ServeArgs),
    /// Load a Vega event stream (newline-delimited JSON bus events) into the store.
    Ingest(commands::IngestArgs),
    /// Write a synthetic, internally consistent Vega event stream.
    Generate(commands::GenerateArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    commands::init_logging();
    let result = match cli.command {
        None => commands::serve(commands::ServeArgs::default_for_quick_start()),
        Some(Command::Serve(args)) => commands::serve(args),
        Some(Command::Ingest(args)) => commands::ingest(args),
        Some(Command::Generate(args)) => commands::generate(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// The database path: the explicit one, or the default.
fn db_path(explicit: Option<PathBuf>) -> PathBuf {
    explicit.unwrap_or_else(|| PathBuf::from(DEFAULT_DB))
}
