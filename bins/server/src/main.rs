//! `server`: serves the Vega data-node compatible ledger export and oracle data API, ingests
//! Vega event streams into its store, and generates synthetic streams.
//!
//! A thin composition of the workspace crates: flags and environment, logging, opening the
//! store, binding, signals and exit codes.

mod admin;
mod backend;
mod config;
mod generate;
mod ingest;
mod logging;
mod memory;
mod serve;
mod signals;

use std::process::ExitCode;

use anyhow::Result;
use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};

// mimalloc: the ingest allocates on its parser thread and frees on its writer thread, where
// glibc's allocator spent a fifth of the time on arena locks (see docs/PERFORMANCE.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Vega data-node compatible ledger export and oracle data API.
///
/// Without a command, serves (the flags of `serve` apply): on 127.0.0.1:3008 from
/// ./datanode.sqlite, which is created with a demo dataset when it does not exist yet.
/// Every flag has an environment variable, shown in brackets, and a key in the configuration
/// file (`server config --default` prints them); flags win, then the environment, then the file.
#[derive(Debug, Parser)]
#[command(
    name = "server",
    version = VERSION,
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
    /// Configuration file (TOML): `server config --default` prints one with every key.
    #[arg(long, global = true, env = config::CONFIG_ENV, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
}

/// The git commit the binary was built from, or `unknown` (see build.rs).
pub const COMMIT: &str = env!("DATANODE_COMMIT");

/// What `--version` prints after the name.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("DATANODE_COMMIT"),
    ")"
);

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
    /// does this by itself, and so does opening an SQLite file (`serve`, `check`), but for
    /// rows of an older row format: only `migrate` upgrades them (row format 4 to 5 adds a
    /// checksum to every stored blob). `serve` never changes a PostgreSQL database. On
    /// PostgreSQL, run it before the first ingest to choose the partition count.
    Migrate(admin::MigrateArgs),
    /// Check that a database can be served: schema version, row format, and a read through
    /// the oracle data and one party's export; with --deep, every stored unit verified.
    Check(admin::CheckArgs),
    /// Copy an SQLite database, as of one commit, into a new file while `serve` and `ingest`
    /// run (SQLite's online backup API); the copy is served as it is. PostgreSQL databases are
    /// backed up with PostgreSQL's own tools (pg_dump, base backups).
    Backup(admin::BackupArgs),
    /// Print the settings `serve` and `ingest` would use, as a configuration file (passwords in
    /// database URLs hidden); with --default, a complete file of the defaults.
    Config(ConfigArgs),
}

/// Flags of `config`: the settings' own flags, so that it shows what they would change.
#[derive(Debug, clap::Args)]
struct ConfigArgs {
    /// Print the built-in defaults, ignoring the file, the environment and the flags.
    #[arg(long)]
    default: bool,
    #[command(flatten)]
    serve: serve::ServeArgs,
}

/// The command line as parsed, after the configuration file's values became the defaults.
struct Parsed {
    cli: Cli,
    command: clap::Command,
    matches: clap::ArgMatches,
    file: Option<config::File>,
}

/// Parses the arguments, the environment and the configuration file. Exits as clap does on a
/// bad flag, `--help` or `--version`.
fn parse() -> Result<Parsed> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let mut command = Cli::command();
    let file = config::path(&args)
        .map(|path| config::File::load(&path, &command))
        .transpose()?;
    if let Some(file) = &file {
        command = file.apply(command);
    }
    let matches = command.clone().get_matches_from(args);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.exit());
    Ok(Parsed {
        cli,
        command,
        matches,
        file,
    })
}

fn main() -> ExitCode {
    let parsed = match parse() {
        Ok(parsed) => parsed,
        // Before the log exists: the file decides its format.
        Err(err) => {
            eprintln!("error: {err:#}");
            return ExitCode::FAILURE;
        }
    };
    let cli = parsed.cli;
    logging::init(cli.log_format);
    memory::no_huge_pages();
    let result = match cli.command {
        None => serve::serve(cli.serve),
        Some(Command::Serve(args)) => serve::serve(args),
        Some(Command::Ingest(args)) => ingest::ingest(args),
        Some(Command::Generate(args)) => generate::generate(args),
        Some(Command::Migrate(args)) => admin::migrate(args),
        Some(Command::Check(args)) => admin::check(args),
        Some(Command::Backup(args)) => admin::backup(args),
        Some(Command::Config(args)) => {
            let text = if args.default {
                config::print_defaults(&Cli::command())
            } else {
                let matches = parsed
                    .matches
                    .subcommand_matches("config")
                    .expect("the config command was parsed");
                config::print_effective(&parsed.command, matches, parsed.file.as_ref())
            };
            print!("{text}");
            Ok(())
        }
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
