//! `bench --abort-storm`: oracle pages before and after a storm of aborted exports (issue 23).
//!
//! The server serves the standard dataset with its page cache (or `--page-cache-mib`). Two
//! cases are measured: the first page asked again and again (answered from the page cache) and
//! the distinct pages of the listing's round-robin case (each read from the store): latency on
//! one connection each, interleaved, and throughput at 1 and 4 clients; with the server's
//! threads that ran meanwhile, its open files and memory. Then a storm runs: [`ABORTED`]
//! exports read to their first bytes and dropped, while [`COMPLETED`] others of the same export
//! ([`STORM_WINDOW`]) are read whole, [`STORM_CLIENTS`] at a time; then the same pages are
//! measured again, at once, and the resources once the storm's threads have ended. Each round
//! repeats these steps. The figure that matters is the ratio of a case's page p50 after its
//! storm to before it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use eventgen::GenerateConfig;
use serde::Serialize;
use tokio::task::JoinSet;

use crate::export;
use crate::http_client::{Accept, Connection, FAST_BUFFER, Head};
use crate::listing::{self, DISTINCT_CASE, PageCase, PageResult};
use crate::process;

/// Exports dropped after their first bytes, per storm.
const ABORTED: u32 = 100;

/// Exports read whole, per storm.
const COMPLETED: u32 = 100;

/// Exports in flight at once during the storm: below the server's default of 16. An aborted
/// export keeps its permit until its next write fails, so a few may still be refused; they are
/// counted and asked again.
const STORM_CLIENTS: u32 = 12;

/// The export of the storm: the whale over 3 % of the dataset's time, 11 MB of the standard
/// dataset (the party of the storm exported 14.9 MB).
const STORM_WINDOW: std::ops::Range<i128> = 485..515;

/// How long a storm client waits after a refused export before it asks again.
const REFUSED_PAUSE: Duration = Duration::from_millis(20);

/// Bytes of an aborted export read before its connection is dropped.
const ABORT_AFTER_BYTES: usize = 64 * 1024;

/// How long to wait for the storm's threads to end before the settled resources are read.
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// The cases measured: one answered from the page cache, one read from the store.
const CASES: [&str; 2] = ["first page", DISTINCT_CASE];

/// Storms measured, each with the pages before and after it.
const ROUNDS: usize = 3;

/// The server's threads, open files and memory at one moment.
#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) struct Resources {
    pub(crate) threads: u64,
    pub(crate) open_files: u64,
    pub(crate) rss_kib: u64,
}

/// The pages, the server's threads that ran while they were measured, and its resources after.
#[derive(Debug, Serialize)]
pub(crate) struct Snapshot {
    /// The cases, in [`CASES`]' order.
    pub(crate) pages: Vec<PageResult>,
    /// Threads of the server whose CPU time grew while the pages were measured: the threads
    /// the pages (and the runtime) ran on.
    pub(crate) busy_threads: usize,
    pub(crate) resources: Resources,
}

/// One round: pages, storm, pages.
#[derive(Debug, Serialize)]
pub(crate) struct Round {
    pub(crate) before: Snapshot,
    pub(crate) storm_seconds: f64,
    /// Bytes of one whole export of the storm.
    pub(crate) export_bytes: u64,
    /// Exports the server refused with 503 during the storm, each asked again.
    pub(crate) refused: u32,
    pub(crate) after: Snapshot,
    /// The resources once the server's thread count is back to its count before the storm
    /// (idle threads end after their keep-alive), or after [`SETTLE_LIMIT`].
    pub(crate) settled: Resources,
    /// Per case, page p50 after the storm over before it.
    pub(crate) p50_ratios: Vec<f64>,
    /// Per case, pages per second at 4 clients after the storm over before it.
    pub(crate) rate_ratios: Vec<f64>,
}

/// Everything `--abort-storm` measured.
#[derive(Debug, Serialize)]
pub(crate) struct StormResult {
    pub(crate) export_path: String,
    pub(crate) aborted: u32,
    pub(crate) completed: u32,
    pub(crate) clients: u32,
    pub(crate) rounds: Vec<Round>,
}

/// Measures [`ROUNDS`] rounds against the server at `addr` (process `pid`).
pub(crate) async fn measure(
    addr: SocketAddr,
    pid: u32,
    config: &GenerateConfig,
    oracle_data: u64,
    plan: &listing::Plan,
) -> Result<StormResult> {
    let walk = listing::walk(addr, oracle_data).await?;
    let cases: Vec<PageCase> = listing::cases(config, &walk)
        .into_iter()
        .filter(|case| CASES.contains(&case.name))
        .collect();
    anyhow::ensure!(
        cases.len() == CASES.len(),
        "the bench lacks a case of {CASES:?}"
    );
    let export_path = export::window(config, STORM_WINDOW);
    let mut rounds = Vec::with_capacity(ROUNDS);
    for round in 1..=ROUNDS {
        eprintln!("bench: abort storm, round {round} of {ROUNDS}: pages before");
        let before = snapshot(addr, pid, &cases, plan).await?;
        eprintln!(
            "bench: abort storm, round {round}: {ABORTED} aborted and {COMPLETED} whole exports"
        );
        let started = Instant::now();
        let (export_bytes, refused) = storm(addr, &export_path).await?;
        let storm_seconds = started.elapsed().as_secs_f64();
        eprintln!("bench: abort storm, round {round}: pages after");
        let after = snapshot(addr, pid, &cases, plan).await?;
        let settled = settle(pid, before.resources.threads).await?;
        rounds.push(Round {
            p50_ratios: ratios(&before, &after, |pages| pages.latency.p50_ms),
            rate_ratios: ratios(&before, &after, rate_at_4),
            before,
            storm_seconds,
            export_bytes,
            refused,
            after,
            settled,
        });
    }
    Ok(StormResult {
        export_path,
        aborted: ABORTED,
        completed: COMPLETED,
        clients: STORM_CLIENTS,
        rounds,
    })
}

/// The pages' figures, then the resources (read after, so that they include what the pages'
/// own reads keep).
async fn snapshot(
    addr: SocketAddr,
    pid: u32,
    cases: &[PageCase],
    plan: &listing::Plan,
) -> Result<Snapshot> {
    let ticks = thread_ticks(pid)?;
    let pages = listing::measure(addr, cases, plan).await?;
    let busy_threads = thread_ticks(pid)?
        .iter()
        .filter(|(tid, now)| ticks.get(tid).is_none_or(|then| now > &then))
        .count();
    Ok(Snapshot {
        pages,
        busy_threads,
        resources: resources(pid)?,
    })
}

/// Each thread's CPU time so far, in clock ticks (`/proc/PID/task/TID/stat`, user + system).
fn thread_ticks(pid: u32) -> Result<HashMap<u32, u64>> {
    let dir = format!("/proc/{pid}/task");
    let mut ticks = HashMap::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("cannot list {dir}"))? {
        let entry = entry.with_context(|| format!("cannot list {dir}"))?;
        let Some(tid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse().ok())
        else {
            continue;
        };
        // A thread that ended since the listing has no stat any more.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The name in parentheses may hold spaces: the fields counted are after its end;
        // utime and stime are the 14th and 15th fields, the 12th and 13th after the name.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let field = |at: usize| fields.get(at).and_then(|value| value.parse::<u64>().ok());
        if let (Some(user), Some(system)) = (field(11), field(12)) {
            ticks.insert(tid, user + system);
        }
    }
    Ok(ticks)
}

/// Waits (polling, this is a benchmark) until the server has at most `threads` threads again
/// or [`SETTLE_LIMIT`] passed; returns its resources then.
async fn settle(pid: u32, threads: u64) -> Result<Resources> {
    let started = Instant::now();
    loop {
        let now = resources(pid)?;
        if now.threads <= threads || started.elapsed() > SETTLE_LIMIT {
            return Ok(now);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Per case, `figure` after over before.
fn ratios(before: &Snapshot, after: &Snapshot, figure: impl Fn(&PageResult) -> f64) -> Vec<f64> {
    before
        .pages
        .iter()
        .zip(&after.pages)
        .map(|(before, after)| figure(after) / figure(before).max(1e-9))
        .collect()
}

fn rate_at_4(pages: &PageResult) -> f64 {
    pages
        .throughput
        .iter()
        .find(|run| run.clients == 4)
        .map_or(0.0, |run| run.per_sec)
}

/// The storm: [`ABORTED`] and [`COMPLETED`] exports of `path` interleaved, [`STORM_CLIENTS`]
/// at a time; returns the bytes of a whole one and the times the server refused an export
/// (503: an aborted export keeps its permit until its next write fails), each asked again.
async fn storm(addr: SocketAddr, path: &str) -> Result<(u64, u32)> {
    let next = Arc::new(AtomicU32::new(0));
    let refused = Arc::new(AtomicU32::new(0));
    let mut clients = JoinSet::new();
    for _ in 0..STORM_CLIENTS {
        let (next, refused, path) = (Arc::clone(&next), Arc::clone(&refused), path.to_owned());
        clients.spawn(async move {
            let mut whole_bytes = 0;
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= ABORTED + COMPLETED {
                    return Ok::<_, anyhow::Error>(whole_bytes);
                }
                let (mut connection, head) = open_export(addr, &path, &refused).await?;
                if n % 2 == 0 {
                    // Aborted: the first bytes, then the connection is dropped.
                    let mut buf = vec![0; ABORT_AFTER_BYTES];
                    let mut read = 0;
                    while read < ABORT_AFTER_BYTES {
                        let n = connection.read_raw(&mut buf[read..]).await?;
                        if n == 0 {
                            break;
                        }
                        read += n;
                    }
                } else {
                    let mut bytes = 0;
                    connection
                        .read_body(&head, |data| bytes += data.len() as u64)
                        .await?;
                    whole_bytes = bytes;
                }
            }
        });
    }
    let mut bytes = 0;
    while let Some(joined) = clients.join_next().await {
        bytes = bytes.max(joined.context("a storm client failed")??);
    }
    Ok((bytes, refused.load(Ordering::Relaxed)))
}

/// Asks for the export until the server takes it; returns the connection after the head.
async fn open_export(
    addr: SocketAddr,
    path: &str,
    refused: &AtomicU32,
) -> Result<(Connection, Head)> {
    loop {
        let mut connection = Connection::connect(addr, FAST_BUFFER).await?;
        connection.send(path, Accept::Csv).await?;
        let head = connection.read_head().await?;
        match head.status {
            200 => return Ok((connection, head)),
            503 => {
                refused.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(REFUSED_PAUSE).await;
            }
            status => bail!("{path}: status {status}"),
        }
    }
}

/// The server's threads and RSS (`/proc/PID/status`) and open files (`/proc/PID/fd`).
fn resources(pid: u32) -> Result<Resources> {
    let [threads, rss_kib] = process::status(pid, ["Threads", "VmRSS"])?;
    let fd_dir = format!("/proc/{pid}/fd");
    let open_files = std::fs::read_dir(&fd_dir)
        .with_context(|| format!("cannot list {fd_dir}"))?
        .count() as u64;
    Ok(Resources {
        threads,
        open_files,
        rss_kib,
    })
}

/// The rounds as a table.
pub(crate) fn render(result: &StormResult) -> String {
    let mut out = format!(
        "abort storm: {} aborted + {} whole exports of {} ({} at a time)\n",
        result.aborted, result.completed, result.export_path, result.clients
    );
    out.push_str(
        "round | case | page p50 before → after (ms) | ratio | 4 clients before → after (req/s) \
         | ratio\n",
    );
    for (index, round) in result.rounds.iter().enumerate() {
        let (before, after) = (&round.before, &round.after);
        for (case, (was, is)) in before.pages.iter().zip(&after.pages).enumerate() {
            out.push_str(&format!(
                "{} | {} | {:.3} → {:.3} | {:.2} | {:.0} → {:.0} | {:.2}\n",
                index + 1,
                was.name,
                was.latency.p50_ms,
                is.latency.p50_ms,
                round.p50_ratios[case],
                rate_at_4(was),
                rate_at_4(is),
                round.rate_ratios[case],
            ));
        }
    }
    out.push_str(
        "round | refused | threads that ran the pages | threads | open files | RSS MiB \
         | settled: threads, files, RSS MiB\n",
    );
    for (index, round) in result.rounds.iter().enumerate() {
        let (before, after, settled) = (&round.before, &round.after, &round.settled);
        out.push_str(&format!(
            "{} | {} | {} → {} | {} → {} | {} → {} | {:.1} → {:.1} | {}, {}, {:.1}\n",
            index + 1,
            round.refused,
            before.busy_threads,
            after.busy_threads,
            before.resources.threads,
            after.resources.threads,
            before.resources.open_files,
            after.resources.open_files,
            mib(before.resources.rss_kib),
            mib(after.resources.rss_kib),
            settled.threads,
            settled.open_files,
            mib(settled.rss_kib),
        ));
    }
    out
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}
