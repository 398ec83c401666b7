//! `bench --ingest-formats`: the ingest alone, of the same events as NDJSON and as a Vega event
//! buffer file, and of a buffer file where 90% of the events are of types the server skips (the
//! shape of a real node's stream), side by side in entries/s and events/s.
//!
//! Each stream is generated into `<dir>/ingest-formats/` and ingested by the real `server
//! ingest` into a fresh database, so the figures are those of the command users run.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use eventgen::{Format, GenerateConfig};

use crate::{dataset, process};

/// The share of other events in the stream shaped like a real node's.
const REAL_OTHER_SHARE: f64 = 0.9;

/// Generates and ingests the three streams of `config`, printing one line each.
pub(crate) fn run(dir: &Path, server: &Path, config: &GenerateConfig) -> Result<()> {
    let dir = dir.join("ingest-formats");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mostly_other = GenerateConfig {
        other_events_share: REAL_OTHER_SHARE,
        ..config.clone()
    };
    let streams = [
        ("ndjson", config, Format::Ndjson),
        ("vega-buffer", config, Format::VegaBuffer),
        (
            "vega-buffer, 90% other events",
            &mostly_other,
            Format::VegaBuffer,
        ),
    ];
    println!(
        "{:<31} {:>12} {:>12} {:>9} {:>12} {:>12}",
        "stream", "events", "entries", "seconds", "entries/s", "events/s"
    );
    for (idx, (name, config, format)) in streams.into_iter().enumerate() {
        let events = dir.join(format!("stream-{idx}"));
        let generated = Instant::now();
        let summary = dataset::write_events(&events, config, format)?;
        eprintln!(
            "bench: generated {name} in {:.1} s",
            generated.elapsed().as_secs_f64()
        );
        let db = dir.join("ingest.sqlite");
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
        let run = process::run_ingest(server, db.as_os_str(), &events, &dir)?;
        println!(
            "{name:<31} {:>12} {:>12} {:>9.2} {:>12.0} {:>12.0}",
            summary.events,
            summary.ledger_entries,
            run.seconds,
            summary.ledger_entries as f64 / run.seconds,
            summary.events as f64 / run.seconds,
        );
        std::fs::remove_file(&events)
            .with_context(|| format!("cannot remove {}", events.display()))?;
    }
    Ok(())
}
