//! Signals: the only place the binary listens for them.
//!
//! `serve` waits for SIGINT or SIGTERM on its tokio runtime and then drains connections.
//! `ingest` has no runtime: `signal-hook` sets a flag that the ingest reads at each block
//! boundary, and exits the process on a second signal.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result};
use signal_hook::consts::TERM_SIGNALS;
use signal_hook::flag;

/// Exit status after a second signal, as a shell reports a process ended by SIGINT.
const EXIT_INTERRUPTED: i32 = 130;

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown() {
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

/// Sets `stop` on the first SIGINT, SIGTERM or SIGQUIT; a second one ends the process at once.
pub fn stop_on_signal(stop: &Arc<AtomicBool>) -> Result<()> {
    for &signal in TERM_SIGNALS {
        // Registered first, so that it sees the flag as the previous signal left it: the first
        // signal only sets the flag, the second finds it set and exits.
        flag::register_conditional_shutdown(signal, EXIT_INTERRUPTED, Arc::clone(stop))
            .context("cannot install the signal handler")?;
        flag::register(signal, Arc::clone(stop)).context("cannot install the signal handler")?;
    }
    Ok(())
}
