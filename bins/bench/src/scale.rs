//! `--scale 1,4,16`: the cost curve. The standard dataset and multiples of it (blocks and
//! parties both times the scale, so the whale grows with it while every other party keeps its
//! size), each generated straight into `server ingest`'s standard input (no event file is
//! stored), on SQLite and, with `--db`, on PostgreSQL. Per scale and backend: ingest entries/s,
//! database bytes per entry, peak RSS of the ingest and of the server, the whale's export
//! rows/s and a fixed-size party's export time, pages p50 (first, at 90 % depth, latest value
//! of a spec) and pages/s at 4 clients. PostgreSQL's database is vacuumed and checkpointed
//! before its reads are timed, and the time that took is shown: the reads are those of a
//! settled database, not of one autovacuum is working through. Each database is removed once
//! measured, so that only one scale's data is on disk at a time. With `--ingest-runs N` each scale is ingested N times
//! on each backend, each into a fresh database: the ingest's figures are then the medians, with
//! their range, and the reads are measured on the last run's database.

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
use crate::process::{self, IngestRun, ServerProcess};
use crate::stats::Spread;

/// The PostgreSQL database the scale runs own on the server `--db` names.
const SCALE_DATABASE: &str = "datanode_bench_scale";

/// What the scale runs measure with, from the bench's flags.
pub(crate) struct Plan<'a> {
    pub(crate) server: &'a Path,
    pub(crate) dir: &'a Path,
    /// The dataset at scale 1.
    pub(crate) base: GenerateConfig,
    pub(crate) scales: &'a [u32],
    /// Ingests of each scale on each backend.
    pub(crate) ingest_runs: u32,
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
    /// The median of `ingest_runs`, as are the rate and the peak RSS.
    ingest_secs: f64,
    ingest_entries_per_sec: Spread,
    ingest_peak_rss_kib: Option<Spread>,
    ingest_runs: Vec<IngestSample>,
    /// PostgreSQL's `VACUUM (ANALYZE)` and checkpoint after the last ingest, before the reads.
    vacuum_secs: Option<f64>,
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

/// One ingest of a scale's stream.
#[derive(Debug, Serialize)]
struct IngestSample {
    secs: f64,
    entries_per_sec: f64,
    peak_rss_kib: Option<u64>,
    cpu_user_secs: Option<f64>,
    cpu_system_secs: Option<f64>,
}

impl IngestSample {
    fn of(run: &IngestRun, entries: u64) -> Self {
        Self {
            secs: run.seconds,
            entries_per_sec: entries as f64 / run.seconds.max(1e-9),
            peak_rss_kib: run.peak_rss_kib,
            cpu_user_secs: run.cpu_user_secs,
            cpu_system_secs: run.cpu_system_secs,
        }
    }
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
            let mut runs = Vec::new();
            let mut generated = None;
            for run in 1..=plan.ingest_runs {
                eprintln!(
                    "bench: scale {scale}, {backend}: generating into the ingest ({run} of {})",
                    plan.ingest_runs
                );
                match &pg {
                    Some(pg) if backend == "postgres" => pg.recreate(&mut pg.admin()?)?,
                    _ => remove_sqlite(&sqlite)?,
                }
                let (ingest, summary) =
                    process::run_ingest_generated(plan.server, db, &config, plan.dir, None)?;
                runs.push(IngestSample::of(&ingest, summary.ledger_entries));
                generated = Some(summary);
            }
            let generated = generated.context("no ingest run")?;
            let database_bytes = match &pg {
                Some(pg) if backend == "postgres" => pg.size(&mut pg.admin()?)?,
                _ => sqlite_size(&sqlite),
            };
            // What the ingest left to do is done before anything is timed: PostgreSQL's
            // vacuum of the ingest's dead versions and its checkpoint (a spread one was still
            // running when the pages were measured), and the kernel's writeback of either
            // database. Otherwise the reads at 16× share the two cores with vacuuming and
            // writing gigabytes, and those at 1× with megabytes.
            let vacuum_secs = match pg.as_ref().filter(|_| backend == "postgres") {
                Some(pg) => Some(pg.settle()?.as_secs_f64()),
                None => None,
            };
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
                ingest_secs: Spread::of(runs.iter().map(|run| run.secs))
                    .context("no ingest run")?
                    .median,
                ingest_entries_per_sec: Spread::of(runs.iter().map(|run| run.entries_per_sec))
                    .context("no ingest run")?,
                ingest_peak_rss_kib: runs
                    .iter()
                    .map(|run| run.peak_rss_kib.map(|kib| kib as f64))
                    .collect::<Option<Vec<f64>>>()
                    .and_then(Spread::of),
                ingest_runs: runs,
                vacuum_secs,
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
    crate::write_json(&plan.dir.join("scale.json"), &points)
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

pub(crate) fn remove_sqlite(path: &Path) -> Result<()> {
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
pub(crate) fn sqlite_size(path: &Path) -> u64 {
    ["", "-wal"]
        .iter()
        .filter_map(|suffix| {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            std::fs::metadata(name).ok().map(|meta| meta.len())
        })
        .sum()
}

/// A figure measured once or more, `unit` times its value: the median, then the range when the
/// measurements differ.
fn spread_cell(spread: &Spread, unit: f64) -> String {
    let median = format!("{:.0}", spread.median * unit);
    if spread.varies() {
        format!(
            "{median} [{:.0}–{:.0}]",
            spread.min * unit,
            spread.max * unit
        )
    } else {
        median
    }
}

/// The curve as a table, one line per scale and backend, with each figure's ratio to the
/// backend's first scale (of the medians, for the ingest's).
fn render(points: &[Point]) -> String {
    let mut out = String::from(
        "| scale | backend | entries | ingest entries/s | bytes/entry | ingest RSS MiB | serve RSS MiB \
         | whale rows | whale rows/s | party 1 rows, ms | page p50 first / 90 % / latest ms | pages/s, 4 clients | vacuum s |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    let mib =
        |kib: Option<u64>| kib.map_or("?".to_owned(), |kib| format!("{:.0}", kib as f64 / 1024.0));
    let median_kib = |point: &Point| point.ingest_peak_rss_kib.map_or(0.0, |kib| kib.median);
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
            "| {}× | {} | {} | {}{} | {:.0}{} | {}{} | {} | {} | {:.2} M{} | {}, {:.1}{} | {:.3}{} / {:.3}{} / {:.3}{} | {:.0}{} | {} |",
            point.scale,
            point.backend,
            point.ledger_entries,
            spread_cell(&point.ingest_entries_per_sec, 1.0),
            ratio(
                point.ingest_entries_per_sec.median,
                base.ingest_entries_per_sec.median
            ),
            point.bytes_per_entry,
            ratio(point.bytes_per_entry, base.bytes_per_entry),
            point
                .ingest_peak_rss_kib
                .map_or("?".to_owned(), |kib| spread_cell(&kib, 1.0 / 1024.0)),
            ratio(median_kib(point), median_kib(base)),
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
            point
                .vacuum_secs
                .map_or("–".to_owned(), |secs| format!("{secs:.1}")),
        );
    }
    out
}

/// Writes every file's dirty pages to disk (`sync(1)`), and waits for it.
pub(crate) fn sync() -> Result<()> {
    let status = std::process::Command::new("sync")
        .status()
        .context("cannot run sync")?;
    anyhow::ensure!(status.success(), "sync failed: {status}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A point whose ingest ran at these rates with these peaks (KiB), the reads all 1.
    fn point(scale: u32, rates: &[f64], peaks_kib: &[u64]) -> Point {
        let entries = 1_000_000;
        let runs: Vec<IngestSample> = rates
            .iter()
            .zip(peaks_kib)
            .map(|(&rate, &kib)| IngestSample {
                secs: entries as f64 / rate,
                entries_per_sec: rate,
                peak_rss_kib: Some(kib),
                cpu_user_secs: None,
                cpu_system_secs: None,
            })
            .collect();
        Point {
            scale,
            backend: "sqlite",
            ledger_entries: entries,
            oracle_data: 1,
            ingest_secs: 1.0,
            ingest_entries_per_sec: Spread::of(rates.iter().copied()).unwrap(),
            ingest_peak_rss_kib: Spread::of(peaks_kib.iter().map(|&kib| kib as f64)),
            ingest_runs: runs,
            vacuum_secs: None,
            database_bytes: 1,
            bytes_per_entry: 1.0,
            serve_peak_rss_kib: Some(1024),
            whale_rows: 1,
            whale_rows_per_sec: 1.0,
            fixed_party_rows: 1,
            fixed_party_ms: 1.0,
            page_first_p50_ms: 1.0,
            page_deep_p50_ms: 1.0,
            latest_value_p50_ms: 1.0,
            pages_per_sec_4_clients: 1.0,
        }
    }

    #[test]
    fn repeated_ingests_show_their_median_and_range_and_compare_medians() {
        let table = render(&[
            point(1, &[200_000.0], &[150 * 1024]),
            point(
                16,
                &[190_000.0, 150_000.0, 170_000.0],
                &[215 * 1024, 180 * 1024, 200 * 1024],
            ),
        ]);
        let rows: Vec<&str> = table.lines().skip(2).collect();
        assert_eq!(rows.len(), 2, "{table}");
        // One run: its figures alone, no range and no ratio.
        assert!(rows[0].starts_with("| 1× | sqlite | 1000000 | 200000 | 1 | 150 | 1 |"));
        // Three: the median with the range, the ratio of the medians.
        assert!(
            rows[1].starts_with(
                "| 16× | sqlite | 1000000 | 170000 [150000–190000] (0.85×) | 1 (1.00×) \
                 | 200 [180–215] (1.33×) | 1 |"
            ),
            "{table}"
        );
    }

    #[test]
    fn the_vacuum_time_is_shown_where_there_was_one() {
        let mut settled = point(1, &[200_000.0], &[150 * 1024]);
        settled.backend = "postgres";
        settled.vacuum_secs = Some(12.34);
        let table = render(&[point(1, &[200_000.0], &[150 * 1024]), settled]);
        let rows: Vec<&str> = table.lines().skip(2).collect();
        assert!(
            table.lines().next().unwrap().ends_with("| vacuum s |"),
            "{table}"
        );
        assert!(rows[0].ends_with("| – |"), "{table}");
        assert!(rows[1].ends_with("| 12.3 |"), "{table}");
    }

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
