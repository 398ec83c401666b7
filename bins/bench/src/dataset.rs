//! The dataset: its flags, its generation, and the manifest that lets a later run reuse it.
//!
//! The work directory holds `events.ndjson` (the generated stream), `bench.sqlite` (the
//! ingested database) and `dataset.json` (the manifest: the generator config, what it wrote,
//! and the ingest measurement once there is one).

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use eventgen::{Format, GenerateConfig};
use serde::{Deserialize, Serialize};

use crate::process::IngestRun;

/// The standard dataset: at 8 entries a block and a whale share of 0.55, party 0 owns about
/// 1.1 million of the 2 million entries, and 4 oracle data a block make a million. What it does
/// not set is the generator's own default.
const STANDARD: GenerateConfig = GenerateConfig {
    blocks: 250_000,
    parties: 200,
    specs: 300,
    entries_per_block: 8,
    oracle_data_per_block: 4,
    whale_share: 0.55,
    ..GenerateConfig::DEFAULT
};
/// `--small`: 1% of the standard dataset.
const SMALL_BLOCKS: u64 = STANDARD.blocks / 100;

/// Flags that shape the dataset.
#[derive(Debug, Args)]
pub(crate) struct DatasetArgs {
    /// Generator seed: the same flags always give the same dataset.
    #[arg(long, default_value_t = STANDARD.seed)]
    seed: u64,
    /// Blocks, about one a second of simulated time [default: 250000, or 2500 with --small].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    blocks: Option<u64>,
    /// Ledger entries per block.
    #[arg(long, default_value_t = STANDARD.entries_per_block)]
    entries_per_block: u32,
    /// Oracle data per block.
    #[arg(long, default_value_t = STANDARD.oracle_data_per_block)]
    oracle_data_per_block: u32,
    /// Share of ledger entries (0 to 1) that involve party 0, the party the export measures.
    #[arg(long, default_value_t = STANDARD.whale_share)]
    whale_share: f64,
    /// Oracle spec ids; spec 0 is the most frequent one.
    #[arg(long, default_value_t = STANDARD.specs)]
    specs: u32,
    /// Parties.
    #[arg(long, default_value_t = STANDARD.parties)]
    parties: u32,
    /// Share of all events (0 to below 1) of a type the server does not store, mixed in:
    /// 0.9 measures ingest of a stream shaped like a real node's (entries/s and events/s).
    #[arg(long, default_value_t = STANDARD.other_events_share)]
    other_events_share: f64,
    /// Form of the dataset's events, which `server ingest` reads: NDJSON or a Vega event buffer.
    #[arg(long, value_enum, default_value_t = Format::default())]
    pub(crate) format: Format,
    /// A 1% dataset for a quick smoke run.
    #[arg(long)]
    pub(crate) small: bool,
}

impl DatasetArgs {
    /// The generator config these flags describe.
    pub(crate) fn config(&self) -> GenerateConfig {
        let default_blocks = if self.small {
            SMALL_BLOCKS
        } else {
            STANDARD.blocks
        };
        GenerateConfig {
            seed: self.seed,
            blocks: self.blocks.unwrap_or(default_blocks),
            parties: self.parties,
            specs: self.specs,
            entries_per_block: self.entries_per_block,
            oracle_data_per_block: self.oracle_data_per_block,
            whale_share: self.whale_share,
            other_events_share: self.other_events_share,
            ..STANDARD
        }
    }
}

/// Whether two configs describe the same stream. Shares are compared with a tolerance because
/// serde_json does not promise to parse every float back to the same bits.
fn same_stream(one: &GenerateConfig, other: &GenerateConfig) -> bool {
    let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
    close(one.whale_share, other.whale_share)
        && close(one.other_events_share, other.other_events_share)
        && GenerateConfig {
            whale_share: other.whale_share,
            other_events_share: other.other_events_share,
            ..one.clone()
        } == *other
}

/// What the generator wrote.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Generated {
    pub(crate) events: u64,
    pub(crate) blocks: u64,
    pub(crate) ledger_entries: u64,
    pub(crate) oracle_data: u64,
    /// Events of types the server does not store; absent from manifests older than the field.
    #[serde(default)]
    pub(crate) other_events: u64,
    /// The form of `events.*`; NDJSON in manifests older than the field.
    #[serde(default)]
    pub(crate) format: Format,
    pub(crate) bytes: u64,
    pub(crate) seconds: f64,
}

/// How the database was filled.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct IngestRecord {
    pub(crate) command: String,
    pub(crate) seconds: f64,
    pub(crate) entries_per_sec: f64,
    pub(crate) events_per_sec: f64,
    pub(crate) peak_rss_kib: Option<u64>,
    /// CPU seconds of the ingest process: with the wall time they tell CPU-bound from I/O.
    pub(crate) cpu_user_secs: Option<f64>,
    pub(crate) cpu_system_secs: Option<f64>,
    pub(crate) db_bytes: u64,
    pub(crate) measured_at: String,
    /// Size and modification time of the server binary that ingested.
    pub(crate) server_fingerprint: String,
}

impl IngestRecord {
    pub(crate) fn new(
        run: &IngestRun,
        generated: &Generated,
        db: &Path,
        server_fingerprint: String,
    ) -> Result<Self> {
        Ok(Self::from_run(
            run,
            generated,
            db_bytes(db)?,
            server_fingerprint,
        ))
    }

    /// The record of `run`, into a database of `db_bytes` bytes.
    pub(crate) fn from_run(
        run: &IngestRun,
        generated: &Generated,
        db_bytes: u64,
        server_fingerprint: String,
    ) -> Self {
        let secs = run.seconds.max(1e-9);
        Self {
            command: run.command.clone(),
            seconds: run.seconds,
            entries_per_sec: generated.ledger_entries as f64 / secs,
            events_per_sec: generated.events as f64 / secs,
            peak_rss_kib: run.peak_rss_kib,
            cpu_user_secs: run.cpu_user_secs,
            cpu_system_secs: run.cpu_system_secs,
            db_bytes,
            measured_at: crate::report::now(),
            server_fingerprint,
        }
    }
}

/// The manifest, `dataset.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Manifest {
    pub(crate) dataset: GenerateConfig,
    pub(crate) generated: Generated,
    pub(crate) ingest: Option<IngestRecord>,
}

/// A dataset ready in the work directory.
pub(crate) struct Prepared {
    pub(crate) manifest: Manifest,
    /// Whether it was there already.
    pub(crate) reused: bool,
}

/// A dataset and its database.
pub(crate) struct Ingested {
    /// Always has `ingest` set.
    pub(crate) manifest: Manifest,
    pub(crate) dataset_reused: bool,
    pub(crate) ingest_reused: bool,
}

pub(crate) fn events_path(dir: &Path, format: Format) -> PathBuf {
    dir.join(match format {
        Format::Ndjson => "events.ndjson",
        Format::VegaBuffer => "events.vegabuf",
    })
}

pub(crate) fn db_path(dir: &Path) -> PathBuf {
    dir.join("bench.sqlite")
}

fn manifest_path(dir: &Path) -> PathBuf {
    dir.join("dataset.json")
}

/// Reuses the dataset in `dir` when it was made from `config` and is complete, else writes it.
pub(crate) fn prepare(
    dir: &Path,
    config: &GenerateConfig,
    format: Format,
    fresh: bool,
) -> Result<Prepared> {
    if !fresh && let Some(manifest) = load_manifest(dir) {
        let events_len = std::fs::metadata(events_path(dir, format)).map(|meta| meta.len());
        if same_stream(&manifest.dataset, config)
            && manifest.generated.format == format
            && events_len.ok() == Some(manifest.generated.bytes)
        {
            eprintln!(
                "bench: reusing the dataset in {} (--fresh to regenerate)",
                dir.display()
            );
            return Ok(Prepared {
                manifest,
                reused: true,
            });
        }
    }
    // The manifest goes first: a run interrupted from here on leaves nothing to reuse.
    let _ = std::fs::remove_file(manifest_path(dir));
    remove_db(dir)?;
    eprintln!(
        "bench: generating {} blocks into {}",
        config.blocks,
        dir.display()
    );
    let generated = generate(dir, config, format)?;
    let manifest = Manifest {
        dataset: config.clone(),
        generated,
        ingest: None,
    };
    save_manifest(dir, &manifest)?;
    Ok(Prepared {
        manifest,
        reused: false,
    })
}

fn generate(dir: &Path, config: &GenerateConfig, format: Format) -> Result<Generated> {
    let path = events_path(dir, format);
    let mut partial = path.clone().into_os_string();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let started = Instant::now();
    let summary = write_events(&partial, config, format)?;
    std::fs::rename(&partial, &path)
        .with_context(|| format!("cannot rename {}", partial.display()))?;
    let bytes = std::fs::metadata(&path)
        .with_context(|| format!("cannot stat {}", path.display()))?
        .len();
    Ok(Generated {
        events: summary.events,
        blocks: summary.blocks,
        ledger_entries: summary.ledger_entries,
        oracle_data: summary.oracle_data,
        other_events: summary.other_events,
        format,
        bytes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Generates the events of `config` into a new file at `path`, and waits until the file is on
/// disk: otherwise the kernel writes gigabytes of it back while the ingest that follows is
/// timed, and the ingest's own writes queue behind them (a fresh dataset's ingest measured
/// 11–15 s of system time against 4 s for the same ingest of a dataset already on disk).
pub(crate) fn write_events(
    path: &Path,
    config: &GenerateConfig,
    format: Format,
) -> Result<eventgen::GenerateSummary> {
    let file = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    // The generator buffers by itself; this only makes its 64 KiB hand-offs into 1 MiB writes.
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let summary = eventgen::generate_as(config, format, &mut out)
        .with_context(|| format!("cannot generate {}", path.display()))?;
    out.into_inner()
        .map_err(|err| err.into_error())
        .and_then(|file| file.sync_all())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(summary)
}

/// A missing or unreadable manifest just means there is nothing to reuse.
fn load_manifest(dir: &Path) -> Option<Manifest> {
    let text = std::fs::read(manifest_path(dir)).ok()?;
    serde_json::from_slice(&text).ok()
}

pub(crate) fn save_manifest(dir: &Path, manifest: &Manifest) -> Result<()> {
    let path = manifest_path(dir);
    let json = serde_json::to_vec_pretty(manifest).context("cannot encode the manifest")?;
    std::fs::write(&path, json).with_context(|| format!("cannot write {}", path.display()))
}

/// Removes the database and its WAL files: ingest skips what is stored, so an old database
/// would turn the next ingest into a no-op.
pub(crate) fn remove_db(dir: &Path) -> Result<()> {
    let db = db_path(dir);
    for suffix in ["", "-wal", "-shm"] {
        let path = with_suffix(&db, suffix);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => {
                return Err(err).with_context(|| format!("cannot remove {}", path.display()));
            }
        }
    }
    Ok(())
}

/// The database's size on disk, WAL included.
fn db_bytes(db: &Path) -> Result<u64> {
    let main = std::fs::metadata(db)
        .with_context(|| format!("cannot stat {}", db.display()))?
        .len();
    let wal = std::fs::metadata(with_suffix(db, "-wal")).map_or(0, |meta| meta.len());
    Ok(main + wal)
}

/// `path` with `suffix` appended to its file name, as SQLite names its side files.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A dataset written before the generator's genesis block (its manifest has no `genesis`)
    /// is a different stream: it is regenerated, not measured as if it were today's.
    #[test]
    fn a_dataset_from_before_the_genesis_block_is_not_reused() {
        let today = STANDARD;
        let mut recorded = serde_json::to_value(&today).unwrap();
        assert!(same_stream(
            &serde_json::from_value(recorded.clone()).unwrap(),
            &today
        ));
        recorded.as_object_mut().unwrap().remove("genesis");
        recorded.as_object_mut().unwrap().remove("chain_id");
        let old: GenerateConfig = serde_json::from_value(recorded).unwrap();
        assert_eq!(old.chain_id, today.chain_id);
        assert!(!old.genesis);
        assert!(!same_stream(&old, &today));
    }
}
