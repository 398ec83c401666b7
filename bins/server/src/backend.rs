//! The one place that knows which storage backend a `--db` names.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use ingest::{GenerateConfig, IngestOptions};
use storage::{SqliteConfig, SqliteStore};

/// Fills a new SQLite database at `path` with the built-in demo dataset, all or nothing (see
/// [`SqliteStore::create_new`]).
pub fn create_demo(path: &Path) -> Result<()> {
    tracing::info!(db = %path.display(), "creating a demo database");
    let started = Instant::now();
    let mut events = Vec::new();
    ingest::generate(&GenerateConfig::default(), &mut events)
        .context("cannot generate demo data")?;
    let stats = SqliteStore::create_new(path, SqliteConfig::default(), |store| {
        let mut writer = store.writer()?;
        ingest::ingest(
            std::io::Cursor::new(events),
            &mut writer,
            &IngestOptions::default(),
            &mut |_| {},
        )
        .map_err(anyhow::Error::from)
    })
    .with_context(|| format!("cannot create {}", path.display()))?;
    tracing::info!(
        entries = stats.ledger_entries,
        oracle_data = stats.oracle_data,
        elapsed = ?started.elapsed(),
        "demo database ready"
    );
    Ok(())
}
