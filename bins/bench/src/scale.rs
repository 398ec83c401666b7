//! `--scale 1,4,16`: the cost curve. The standard dataset and multiples of it (blocks and
//! parties both times the scale, so the whale grows with it while every other party keeps its
//! size), each generated straight into `server ingest`'s standard input (no event file is
//! stored), on SQLite and, with `--db`, on PostgreSQL. Per scale and backend: ingest entries/s,
//! database bytes per entry, peak RSS of the ingest and of the server, the whale's export
//! rows/s and a fixed-size party's export time, pages p50 (first, at 90 % depth, latest value
//! of a spec) and pages/s at 4 clients. Each database is removed once measured, so that only
//! one scale's data is on disk at a time.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use eventgen::{GenerateConfig, party_id};
use serde::Serialize;

use crate::export::{self, ExportCase};
use crate::http_client;
use crate::listing::{self, PageResult};
use crate::postgres::PgTarget;
use crate::process::{self, ServerProcess};

/// The PostgreSQL database the scale runs own on the server `--db` names.
const SCALE_DATABASE: &str = "datanode_bench_scale";

/// What the scale runs measure with, from the bench's flags.
pub(crate) struct Plan<'a> {
    pub(crate) server: &'a Path,
    pub(crate) dir: &'a Path,
    /// The dataset at scale 1.
    pub(crate) base: GenerateConfig,
    pub(crate) scales: &'a [u32],
    /// The server `--db` names, for the PostgreSQL half.
    pub(crate) pg_admin: Option<&'a str>,
    pub(crate) export_runs: u32,
    pub(crate) pages: listing::Plan,
}

/// The figures of one scale on one backend.
#[derive(Debug, Serialize)]
struct Point {
    scale: u32,
    backend: &'static str,
    ledger_entries: u64,
    oracle_data: u64,
    ingest_secs: f64,
    ingest_entries_per_sec: f64,
    ingest_peak_rss_kib: Option<u64>,
    database_bytes: u64,
    bytes_per_entry: f64,
    serve_peak_rss_kib: Option<u64>,
    whale_rows: u64,
    whale_rows_per_sec: f64,
    fixed_party_rows: u64,
    fixed_party_ms: f64,
    page_first_p50_ms: f64,
    page_deep_p50_ms: f64,
    latest_value_p50_ms: f64,
    pages_per_sec_4_clients: f64,
}

/// The dataset at `scale`: `scale` times the blocks and the parties.
fn scaled(base: &GenerateConfig, scale: u32) -> GenerateConfig {
    GenerateConfig {
        blocks: base.blocks * u64::from(scale),
        parties: base.parties * scale,
        ..base.clone()
    }
}

/// Runs every scale on every backend, printing each point as it is measured and the curve at
/// the end; writes `<dir>/scale.json`.
pub(crate) fn run(plan: &Plan<'_>) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let pg = plan
        .pg_admin
        .map(|url| PgTarget::named(url, SCALE_DATABASE))
        .transpose()?;
    let mut points = Vec::new();
    for &scale in plan.scales {
        let config = scaled(&plan.base, scale);
        let sqlite = plan.dir.join("scale.sqlite");
        let mut backends: Vec<(&'static str, &OsStr)> = vec![("sqlite", sqlite.as_os_str())];
        if let Some(pg) = &pg {
            backends.push(("postgres", OsStr::new(&pg.url)));
        }
        for (backend, db) in backends {
            eprintln!("bench: scale {scale}, {backend}: generating into the ingest");
            match &pg {
                Some(pg) if backend == "postgres" => pg.recreate(&mut pg.admin()?)?,
                _ => remove_sqlite(&sqlite)?,
            }
            let (ingest, generated) =
                process::run_ingest_generated(plan.server, db, &config, plan.dir)?;
            let database_bytes = match &pg {
                Some(pg) if backend == "postgres" => pg.size(&mut pg.admin()?)?,
                _ => sqlite_size(&sqlite),
            };
            // What the ingest left to write goes to disk before anything is timed: PostgreSQL's
            // checkpoint of it (a spread one was still running when the pages were measured)
            // and the kernel's writeback of either database. Otherwise the pages at 16× share
            // the two cores with writing gigabytes, and those at 1× with writing megabytes.
            if let Some(pg) = pg.as_ref().filter(|_| backend == "postgres") {
                pg.admin()?
                    .batch_execute("CHECKPOINT")
                    .context("cannot checkpoint the bench database")?;
            }
            sync()?;
            let server = ServerProcess::start_with(plan.server, db, plan.dir, &[])?;
            let served = runtime.block_on(measure(plan, &config, generated.oracle_data, &server));
            let serve_peak_rss_kib = process::memory(server.pid()).ok().map(|m| m.hwm_kib);
            server.stop()?;
            match &pg {
                Some(pg) if backend == "postgres" => pg.drop_database(&mut pg.admin()?)?,
                _ => remove_sqlite(&sqlite)?,
            }
            let served = served?;
            let entries = generated.ledger_entries;
            let point = Point {
                scale,
                backend,
                ledger_entries: entries,
                oracle_data: generated.oracle_data,
                ingest_secs: ingest.seconds,
                ingest_entries_per_sec: entries as f64 / ingest.seconds.max(1e-9),
                ingest_peak_rss_kib: ingest.peak_rss_kib,
                database_bytes,
                bytes_per_entry: database_bytes as f64 / entries.max(1) as f64,
                serve_peak_rss_kib,
                whale_rows: served.whale.rows,
                whale_rows_per_sec: served.whale.rows_per_sec,
                fixed_party_rows: served.fixed.rows,
                fixed_party_ms: served.fixed.time.p50_ms,
                page_first_p50_ms: served.pages[0].latency.p50_ms,
                page_deep_p50_ms: served.pages[1].latency.p50_ms,
                latest_value_p50_ms: served.pages[2].latency.p50_ms,
                pages_per_sec_4_clients: four_clients(&served.pages[0]),
            };
            eprintln!("bench: {point:?}");
            points.push(point);
        }
    }
    println!("{}", render(&points));
    let path = plan.dir.join("scale.json");
    let json = serde_json::to_vec_pretty(&points).context("cannot encode the results")?;
    std::fs::write(&path, json).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("bench: results written to {}", path.display());
    Ok(())
}

/// What one served database answered.
struct Served {
    whale: export::ExportResult,
    fixed: export::ExportResult,
    /// The first page, the page at 90 % depth, the latest value of spec 0.
    pages: Vec<PageResult>,
}

async fn measure(
    plan: &Plan<'_>,
    config: &GenerateConfig,
    oracle_data: u64,
    server: &ServerProcess,
) -> Result<Served> {
    let addr = server.addr;
    http_client::wait_until_ready(addr, Duration::from_secs(30)).await?;
    let whale = &export::cases(config)[0];
    eprintln!("bench: export {} x{}", whale.name, plan.export_runs);
    let whale = export::measure(addr, whale, plan.export_runs).await?;
    // Party 1 has about the same number of entries at every scale (the parties grow with it).
    let fixed = ExportCase {
        name: "party 1, all time",
        path: format!("{}?partyId={}", export::EXPORT_PATH, party_id(config, 1)),
    };
    let fixed = export::measure(addr, &fixed, plan.export_runs).await?;
    eprintln!("bench: walking the oracle listing to 90% depth");
    let walk = listing::walk(addr, oracle_data).await?;
    let mut cases = listing::cases(config, &walk);
    // First page, 90 % depth, latest value: the spec's first page and the distinct pages are
    // the bench's other tables.
    cases.remove(2);
    cases.truncate(3);
    let pages = listing::measure(addr, &cases, &plan.pages).await?;
    Ok(Served {
        whale,
        fixed,
        pages,
    })
}

/// Pages a second of the 4-client run.
fn four_clients(page: &PageResult) -> f64 {
    page.throughput
        .iter()
        .find(|run| run.clients == 4)
        .map_or(0.0, |run| run.per_sec)
}

fn remove_sqlite(path: &Path) -> Result<()> {
    for suffix in ["", "-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        match std::fs::remove_file(&name) {
            Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
                return Err(err).with_context(|| format!("cannot remove {}", path.display()));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The SQLite database's bytes, its WAL included.
fn sqlite_size(path: &Path) -> u64 {
    ["", "-wal"]
        .iter()
        .filter_map(|suffix| {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            std::fs::metadata(name).ok().map(|meta| meta.len())
        })
        .sum()
}

/// The curve as a table, one line per scale and backend, with each figure's ratio to the
/// backend's first scale.
fn render(points: &[Point]) -> String {
    let mut out = String::from(
        "| scale | backend | entries | ingest entries/s | bytes/entry | ingest RSS MiB | serve RSS MiB \
         | whale rows | whale rows/s | party 1 rows, ms | page p50 first / 90 % / latest ms | pages/s, 4 clients |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    let mib =
        |kib: Option<u64>| kib.map_or("?".to_owned(), |kib| format!("{:.0}", kib as f64 / 1024.0));
    for point in points {
        let base = points
            .iter()
            .find(|other| other.backend == point.backend)
            .expect("the point itself");
        let ratio = |value: f64, at_base: f64| {
            if at_base > 0.0 && !std::ptr::eq(base, point) {
                format!(" ({:.2}×)", value / at_base)
            } else {
                String::new()
            }
        };
        let _ = writeln!(
            out,
            "| {}× | {} | {} | {:.0}{} | {:.0}{} | {} | {} | {} | {:.2} M{} | {}, {:.1}{} | {:.3}{} / {:.3}{} / {:.3}{} | {:.0}{} |",
            point.scale,
            point.backend,
            point.ledger_entries,
            point.ingest_entries_per_sec,
            ratio(point.ingest_entries_per_sec, base.ingest_entries_per_sec),
            point.bytes_per_entry,
            ratio(point.bytes_per_entry, base.bytes_per_entry),
            mib(point.ingest_peak_rss_kib),
            mib(point.serve_peak_rss_kib),
            point.whale_rows,
            point.whale_rows_per_sec / 1e6,
            ratio(point.whale_rows_per_sec, base.whale_rows_per_sec),
            point.fixed_party_rows,
            point.fixed_party_ms,
            ratio(point.fixed_party_ms, base.fixed_party_ms),
            point.page_first_p50_ms,
            ratio(point.page_first_p50_ms, base.page_first_p50_ms),
            point.page_deep_p50_ms,
            ratio(point.page_deep_p50_ms, base.page_deep_p50_ms),
            point.latest_value_p50_ms,
            ratio(point.latest_value_p50_ms, base.latest_value_p50_ms),
            point.pages_per_sec_4_clients,
            ratio(point.pages_per_sec_4_clients, base.pages_per_sec_4_clients),
        );
    }
    out
}

/// Writes every file's dirty pages to disk (`sync(1)`), and waits for it.
fn sync() -> Result<()> {
    let status = std::process::Command::new("sync")
        .status()
        .context("cannot run sync")?;
    anyhow::ensure!(status.success(), "sync failed: {status}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scale_multiplies_blocks_and_parties_only() {
        let base = GenerateConfig {
            blocks: 100,
            parties: 7,
            ..GenerateConfig::DEFAULT
        };
        let four = scaled(&base, 4);
        assert_eq!((four.blocks, four.parties), (400, 28));
        assert_eq!(
            GenerateConfig {
                blocks: 100,
                parties: 7,
                ..four
            },
            base
        );
    }
}
