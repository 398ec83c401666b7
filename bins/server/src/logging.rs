//! Logs on standard error with `tracing`: human lines by default, JSON objects on request.

use std::io::{self, IsTerminal};

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event, coloured on a terminal.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Installs the global subscriber; `RUST_LOG` sets the level (default `info`).
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr);
    match format {
        // Colours only on a terminal: escape codes make a log file or collector hard to read.
        // (Scripts read the address from `--addr-file`, never from a log line.)
        LogFormat::Text => builder.with_ansi(io::stderr().is_terminal()).init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
