//! The ledger export of the largest party: throughput and time to first byte, and the server's
//! memory while a client reads slowly.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use eventgen::{GenerateConfig, asset_id, party_id};
use serde::Serialize;

use crate::http_client::{Accept, Connection, FAST_BUFFER};
use crate::process::{self, RssSampler};
use crate::stats::Summary;

pub(crate) const EXPORT_PATH: &str = "/api/v2/ledgerentry/export";

/// The generator's block gaps are uniform in 0.5–1.5 s, so a block is a second on average.
const AVERAGE_BLOCK_GAP_NANOS: i128 = 1_000_000_000;

/// How long one read of the slow reader may wait for the server before it counts as hung.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one fast export may take before it counts as hung: minutes even at 10 MB/s.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(600);

/// One export request to measure.
pub(crate) struct ExportCase {
    pub(crate) name: &'static str,
    pub(crate) path: String,
}

/// The exports of party 0 (the whale): all of it, one asset, and a 1% time window in the
/// middle of the dataset's span (estimated from the config: `blocks` seconds).
pub(crate) fn cases(config: &GenerateConfig) -> Vec<ExportCase> {
    let party = party_id(config, 0);
    let asset = asset_id(config, 0);
    let all = format!("{EXPORT_PATH}?partyId={party}");
    vec![
        ExportCase {
            name: "party 0, all time",
            path: all.clone(),
        },
        ExportCase {
            name: "party 0, asset 0",
            path: format!("{all}&assetId={asset}"),
        },
        ExportCase {
            name: "party 0, 1% window",
            path: window(config, 495..505),
        },
    ]
}

/// The whale's export over the time window `permille` (thousandths of the dataset's span,
/// estimated from the config: `blocks` seconds).
pub(crate) fn window(config: &GenerateConfig, permille: std::ops::Range<i128>) -> String {
    let party = party_id(config, 0);
    let span = i128::from(config.blocks) * AVERAGE_BLOCK_GAP_NANOS;
    let start = i128::from(config.start_time_nanos) + span * permille.start / 1000;
    let end = i128::from(config.start_time_nanos) + span * permille.end / 1000;
    format!(
        "{EXPORT_PATH}?partyId={party}&dateRange.startTimestamp={start}&dateRange.endTimestamp={end}"
    )
}

/// Figures of one export over several runs.
#[derive(Debug, Serialize)]
pub(crate) struct ExportResult {
    pub(crate) name: &'static str,
    pub(crate) path: String,
    /// CSV rows, header excluded.
    pub(crate) rows: u64,
    /// Body bytes (CSV), header included.
    pub(crate) bytes: u64,
    /// Whole request, from writing it to the last body byte.
    pub(crate) time: Summary,
    /// From writing the request to the first body byte (the CSV header).
    pub(crate) ttfb: Summary,
    /// From writing the request to the first byte of the first row.
    pub(crate) first_row: Summary,
    /// At the median time.
    pub(crate) rows_per_sec: f64,
    /// At the median time, in 10^6 bytes.
    pub(crate) mb_per_sec: f64,
}

/// Runs the export `runs` times, one after the other, each on a new connection.
pub(crate) async fn measure(
    addr: SocketAddr,
    case: &ExportCase,
    runs: u32,
) -> Result<ExportResult> {
    let mut times = Vec::new();
    let mut ttfbs = Vec::new();
    let mut first_rows = Vec::new();
    let mut shape: Option<(u64, u64)> = None;
    for _ in 0..runs {
        let run = tokio::time::timeout(EXPORT_TIMEOUT, once(addr, &case.path))
            .await
            .with_context(|| format!("export {}: no end after {EXPORT_TIMEOUT:?}", case.name))?
            .with_context(|| format!("export {}", case.name))?;
        let this_shape = (run.rows, run.bytes);
        if shape.is_some_and(|earlier| earlier != this_shape) {
            bail!(
                "export {}: runs differ ({shape:?} vs {this_shape:?} rows and bytes)",
                case.name
            );
        }
        shape = Some(this_shape);
        times.push(run.time);
        ttfbs.push(run.ttfb);
        first_rows.push(run.first_row);
    }
    let (rows, bytes) = shape.unwrap_or_default();
    let time = Summary::of(&times);
    let secs = (time.p50_ms / 1e3).max(1e-9);
    Ok(ExportResult {
        name: case.name,
        path: case.path.clone(),
        rows,
        bytes,
        time,
        ttfb: Summary::of(&ttfbs),
        first_row: Summary::of(&first_rows),
        rows_per_sec: rows as f64 / secs,
        mb_per_sec: bytes as f64 / secs / 1e6,
    })
}

/// One export, read whole.
pub(crate) struct Run {
    pub(crate) rows: u64,
    pub(crate) bytes: u64,
    pub(crate) time: Duration,
    ttfb: Duration,
    first_row: Duration,
}

/// Reads the export at `path` once, on a new connection.
pub(crate) async fn once(addr: SocketAddr, path: &str) -> Result<Run> {
    let mut connection = Connection::connect(addr, FAST_BUFFER).await?;
    let started = Instant::now();
    connection.send(path, Accept::Csv).await?;
    let head = connection.read_head().await?;
    if head.status != 200 {
        let mut body = Vec::new();
        let _ = connection
            .read_body(&head, |data| body.extend_from_slice(data))
            .await;
        bail!(
            "status {}: {}",
            head.status,
            String::from_utf8_lossy(&body[..body.len().min(500)])
        );
    }
    let mut counter = Counter::default();
    connection
        .read_body(&head, |data| counter.add(data))
        .await?;
    let time = started.elapsed();
    let since = |at: Option<Instant>| at.map_or(time, |at| at - started);
    Ok(Run {
        // The header line is not a row; an empty export is the header alone.
        rows: counter.newlines.saturating_sub(1),
        bytes: counter.bytes,
        time,
        ttfb: since(counter.first_byte),
        first_row: since(counter.first_row),
    })
}

/// Whose CPU time an export is charged with: a server's process (with its child processes, for
/// nginx's workers) and, on PostgreSQL, every PostgreSQL process on this machine.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Meter {
    /// The server's process.
    pub(crate) pid: u32,
    /// Whether its child processes count too (nginx's workers).
    pub(crate) children: bool,
    /// Whether PostgreSQL's processes on this machine count too.
    pub(crate) database: bool,
}

/// An export read whole, and the CPU time it cost.
pub(crate) struct Costed {
    pub(crate) run: Run,
    /// The server's threads' (and its children's).
    pub(crate) server_cpu: Duration,
    /// PostgreSQL's processes'; zero unless the meter counts the database.
    pub(crate) database_cpu: Duration,
}

/// Whether PostgreSQL's processes were seen at work during `costs`: only when the meter counts
/// them and the database runs on this machine (a remote one's CPU time cannot be read here), so
/// a report shows the database's CPU time where it was measured and nowhere else.
pub(crate) fn database_measured<'c>(costs: impl IntoIterator<Item = &'c Costed>) -> bool {
    costs.into_iter().any(|cost| !cost.database_cpu.is_zero())
}

impl Meter {
    /// The CPU time run so far by the server and the database.
    fn read(self) -> Result<(Duration, Duration)> {
        let server = process::cpu_time(self.pid, self.children)?;
        let database = if self.database {
            process::postgres_cpu_time()?
        } else {
            Duration::ZERO
        };
        Ok((server, database))
    }

    /// Reads the export at `path` from `addr` once, as [`once`] does, with the CPU time it cost.
    pub(crate) async fn once(self, addr: SocketAddr, path: &str) -> Result<Costed> {
        let before = self.read()?;
        let run = once(addr, path).await?;
        let after = self.read()?;
        Ok(Costed {
            run,
            server_cpu: after.0.saturating_sub(before.0),
            database_cpu: after.1.saturating_sub(before.1),
        })
    }
}

/// Counts what the body brings, and when it starts.
#[derive(Default)]
struct Counter {
    bytes: u64,
    newlines: u64,
    first_byte: Option<Instant>,
    first_row: Option<Instant>,
}

impl Counter {
    fn add(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let now = Instant::now();
        self.first_byte.get_or_insert(now);
        if self.first_row.is_none() {
            let past_header = self.newlines > 0
                || data
                    .iter()
                    .position(|&byte| byte == b'\n')
                    .is_some_and(|end| end + 1 < data.len());
            if past_header {
                self.first_row = Some(now);
            }
        }
        self.bytes += data.len() as u64;
        // A plain filter-count compiles to vectorised code; fast enough not to matter.
        self.newlines += data.iter().filter(|&&byte| byte == b'\n').count() as u64;
    }
}

/// How the slow reader reads.
pub(crate) struct SlowReaderConfig {
    /// Bytes per second.
    pub(crate) rate: u64,
    pub(crate) duration: Duration,
}

/// The server's memory while a client reads an export slowly.
#[derive(Debug, Serialize)]
pub(crate) struct SlowReaderResult {
    pub(crate) path: String,
    pub(crate) target_bytes_per_sec: u64,
    pub(crate) seconds: f64,
    pub(crate) bytes_read: u64,
    pub(crate) rss_before_kib: u64,
    /// Highest of the 100 ms samples taken during the read.
    pub(crate) peak_rss_kib: u64,
    /// The server's lifetime peak (VmHWM) once the reader is gone.
    pub(crate) hwm_after_kib: u64,
    /// Half a second after the reader hung up.
    pub(crate) rss_after_close_kib: u64,
    pub(crate) samples_kib: Vec<u64>,
}

/// Reads the export at `path` at `config.rate` for `config.duration`, sampling the server's
/// RSS every 100 ms, then hangs up.
pub(crate) async fn slow_reader(
    addr: SocketAddr,
    path: &str,
    pid: u32,
    config: &SlowReaderConfig,
) -> Result<SlowReaderResult> {
    let before = process::memory(pid)?;
    let sampler = RssSampler::start(pid, Duration::from_millis(100));
    let outcome = read_slowly(addr, path, config).await;
    let samples_kib = sampler.finish()?;
    let (bytes_read, seconds) = outcome.context("slow reader")?;
    let after = process::memory(pid)?;
    // Time for the server to notice the hang-up and drop the export's buffers.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after_close = process::memory(pid)?;
    Ok(SlowReaderResult {
        path: path.to_owned(),
        target_bytes_per_sec: config.rate,
        seconds,
        bytes_read,
        rss_before_kib: before.rss_kib,
        peak_rss_kib: samples_kib.iter().copied().max().unwrap_or(before.rss_kib),
        hwm_after_kib: after.hwm_kib,
        rss_after_close_kib: after_close.rss_kib,
        samples_kib,
    })
}

async fn read_slowly(
    addr: SocketAddr,
    path: &str,
    config: &SlowReaderConfig,
) -> Result<(u64, f64)> {
    // Small reads, so that the pace is even rather than a burst then a long sleep.
    const SLOW_READ: usize = 16 * 1024;
    let mut connection = Connection::connect(addr, SLOW_READ).await?;
    connection.send_last(path, Accept::Csv).await?;
    let head = connection.read_head().await?;
    if head.status != 200 {
        bail!("status {}", head.status);
    }
    let mut buf = vec![0; SLOW_READ];
    let started = Instant::now();
    let mut bytes_read = 0;
    while started.elapsed() < config.duration {
        let n = tokio::time::timeout(READ_TIMEOUT, connection.read_raw(&mut buf))
            .await
            .context("the server sent nothing for 30 s")??;
        if n == 0 {
            break;
        }
        bytes_read += n as u64;
        let due = Duration::from_secs_f64(bytes_read as f64 / config.rate as f64);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            tokio::time::sleep(wait.min(config.duration)).await;
        }
    }
    Ok((bytes_read, started.elapsed().as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costed(database_ms: u64) -> Costed {
        Costed {
            run: Run {
                rows: 1,
                bytes: 10,
                time: Duration::from_millis(5),
                ttfb: Duration::from_millis(1),
                first_row: Duration::from_millis(1),
            },
            server_cpu: Duration::from_millis(10),
            database_cpu: Duration::from_millis(database_ms),
        }
    }

    #[test]
    fn the_database_counts_where_its_processes_were_seen_at_work() {
        // SQLite, or a PostgreSQL on another machine: no row for the database in either report.
        assert!(!database_measured(&[costed(0), costed(0)]));
        assert!(!database_measured(&[]));
        // One export of several may fall between two of the clock's 10 ms ticks.
        assert!(database_measured(&[costed(0), costed(10)]));
    }
}
