//! `--against OTHER`: two server binaries serving the same database at once, the client
//! alternating between them request by request, the order swapped every round, so that the
//! noise of a shared machine and the operating system's cache fall on both alike. It sets apart
//! what one change costs, a few percent that separate runs of the bench cannot resolve: the
//! checksum check of every read against a build without it (docs/PERFORMANCE.md, "Checksums on
//! every read").
//!
//! Both serve with the page cache off, so that every page is read from the store. Measured: the
//! whale's export read whole, with the CPU time it cost the server and, when the database runs
//! on this machine, PostgreSQL's processes; and each page case's latency on one keep-alive
//! connection per server. Ratios are ours over the other's: rows/s for the export, 1/p50 for
//! pages and for CPU time, so below 1.0 means ours is slower or costs more.
//!
//! The CPU times are the export's cost wherever its bottleneck is: the servers are pinned to one
//! CPU and the client and the database run on the others, so an export's wall time is often
//! bound by the client's and the database's CPU instead, and a change to the server's own work
//! shows in its CPU time first.
//!
//! Two things made the same binary measured against itself differ by up to 15 % from one run to
//! the next, each lasting as long as the server processes do (docs/PERFORMANCE.md, "Checksums
//! on every read"): where the scheduler puts each server's threads beside the client's, and,
//! for exports, something of each process's own memory. So both servers run on the machine's
//! last CPU (`taskset`, when there are two CPUs or more and it is installed), the client left
//! the others, and the measurements are made in [`ROUNDS`] rounds, each with two new server
//! processes, their samples pooled.

use std::ffi::OsStr;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::dataset::Manifest;
use crate::http_client::{self, Connection, FAST_BUFFER};
use crate::listing::{self, PageCase};
use crate::process::ServerProcess;
use crate::stats::Summary;
use crate::{export, process};

/// Rounds of measurement, each with two new server processes.
pub(crate) const ROUNDS: u32 = 5;

/// What to compare.
pub(crate) struct Plan<'a> {
    /// The binary measured (`--server`).
    pub(crate) ours: &'a Path,
    /// The binary it is measured against (`--against`).
    pub(crate) other: &'a Path,
    /// The database both serve: a path or a URL.
    pub(crate) db: &'a OsStr,
    /// The backend's name, for the report.
    pub(crate) backend: &'static str,
    /// Where each server's log and address file go (a directory each below it).
    pub(crate) dir: &'a Path,
    /// Flags both servers get besides the page cache's.
    pub(crate) flags: &'a [String],
    /// Whole exports of the whale from each, per round.
    pub(crate) export_runs: u32,
    /// Timed requests of each page case to each, per round.
    pub(crate) page_requests: u32,
}

/// One figure of both servers.
#[derive(Debug, Serialize)]
pub(crate) struct Pair {
    pub(crate) name: String,
    pub(crate) path: String,
    pub(crate) ours: Summary,
    pub(crate) other: Summary,
    /// The other's p50 over ours: ours' rows/s (or requests/s) over the other's.
    pub(crate) ratio: f64,
}

impl Pair {
    fn new(name: &str, path: &str, samples: [Vec<Duration>; 2]) -> Self {
        let [ours, other] = samples.map(|samples| Summary::of(&samples));
        Self {
            name: name.to_owned(),
            path: path.to_owned(),
            ratio: other.p50_ms / ours.p50_ms.max(1e-9),
            ours,
            other,
        }
    }
}

/// The comparison on one backend.
#[derive(Debug, Serialize)]
pub(crate) struct Comparison {
    pub(crate) backend: &'static str,
    pub(crate) ours: String,
    pub(crate) other: String,
    /// The command both servers ran under (`taskset -c N`), if any.
    pub(crate) pinned: Option<String>,
    /// Rounds, each with two new server processes; the samples of all are pooled.
    pub(crate) rounds: u32,
    /// The whale's export, its bytes (the same from both, or the run fails).
    pub(crate) export_bytes: u64,
    pub(crate) export: Pair,
    /// The CPU time of the server's threads during each export.
    pub(crate) export_server_cpu: Pair,
    /// The CPU time of every process named `postgres` on this machine during each export, on
    /// PostgreSQL when it runs here.
    pub(crate) export_database_cpu: Option<Pair>,
    pub(crate) pages: Vec<Pair>,
}

/// Serves the database with both binaries and measures them alternately, in [`ROUNDS`] rounds.
pub(crate) async fn run(plan: &Plan<'_>, manifest: &Manifest) -> Result<Comparison> {
    let mut flags = plan.flags.to_vec();
    flags.extend(["--page-cache-mib".to_owned(), "0".to_owned()]);
    let launcher = pinned_launcher();
    if launcher.is_empty() {
        eprintln!("bench: note: the servers are not pinned to a CPU (one CPU, or no taskset)");
    }
    let start = |binary: &Path, name: &str| -> Result<ServerProcess> {
        let dir: PathBuf = plan.dir.join(format!("against-{}-{name}", plan.backend));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        ServerProcess::start_under(&launcher, binary, plan.db, &dir, &flags)
    };
    let whale = &export::cases(&manifest.dataset)[0];
    let mut export_costs: [Vec<export::Costed>; 2] = [Vec::new(), Vec::new()];
    let database = plan.db.to_str().is_some_and(storage::is_url);
    let mut export_bytes = 0;
    let mut pages: Vec<(&'static str, String, [Vec<Duration>; 2])> = Vec::new();
    let mut commands = [String::new(), String::new()];
    let mut cases = None;
    for round in 1..=ROUNDS {
        eprintln!(
            "bench: {} round {round} of {ROUNDS}: {} against {}",
            plan.backend,
            plan.ours.display(),
            plan.other.display()
        );
        let servers = [start(plan.ours, "ours")?, start(plan.other, "other")?];
        let addrs = [servers[0].addr, servers[1].addr];
        for addr in addrs {
            http_client::wait_until_ready(addr, Duration::from_secs(30)).await?;
        }
        // One untimed export from each first, for the operating system's cache.
        let mut bytes = [0; 2];
        for (addr, bytes) in addrs.iter().zip(&mut bytes) {
            *bytes = export::once(*addr, &whale.path).await?.bytes;
        }
        if bytes[0] != bytes[1] {
            bail!(
                "the two servers' exports differ: {} and {} bytes",
                bytes[0],
                bytes[1]
            );
        }
        export_bytes = bytes[0];
        let meters = [0, 1].map(|which| export::Meter {
            pid: servers[which].pid(),
            children: false,
            database,
        });
        let costs = alternately(plan.export_runs, |which| {
            meters[which].once(addrs[which], &whale.path)
        })
        .await?;
        pool(&mut export_costs, costs);
        if cases.is_none() {
            let walk = listing::walk(addrs[0], manifest.generated.oracle_data).await?;
            cases = Some(listing::cases(&manifest.dataset, &walk));
        }
        for (index, case) in cases.iter().flatten().enumerate() {
            let samples = page_pair(addrs, case, plan.page_requests).await?;
            match pages.get_mut(index) {
                Some((_, _, pooled)) => pool(pooled, samples),
                None => pages.push((case.name, case.path().to_owned(), samples)),
            }
        }
        if round == 1 {
            // Every round starts the same two commands.
            commands = [0, 1].map(|which| servers[which].command.clone());
        }
        for server in servers {
            server.stop()?;
        }
    }
    let [ours, other] = commands;
    let export_pair = |name: &str, figure: fn(&export::Costed) -> Duration| {
        let samples = export_costs
            .each_ref()
            .map(|costs| costs.iter().map(figure).collect());
        Pair::new(name, &whale.path, samples)
    };
    let database_ran_here = export::database_measured(export_costs.iter().flatten());
    Ok(Comparison {
        backend: plan.backend,
        ours,
        other,
        pinned: (!launcher.is_empty()).then(|| launcher.join(" ")),
        rounds: ROUNDS,
        export_bytes,
        export: export_pair(whale.name, |cost| cost.run.time),
        export_server_cpu: export_pair("server CPU an export", |cost| cost.server_cpu),
        export_database_cpu: database_ran_here
            .then(|| export_pair("database CPU an export", |cost| cost.database_cpu)),
        pages: pages
            .into_iter()
            .map(|(name, path, samples)| Pair::new(name, &path, samples))
            .collect(),
    })
}

/// Adds a round's samples of both servers to those pooled so far.
fn pool<T>(pooled: &mut [Vec<T>; 2], round: [Vec<T>; 2]) {
    for (pooled, round) in pooled.iter_mut().zip(round) {
        pooled.extend(round);
    }
}

/// `taskset -c N`, N the machine's last CPU, when there are two or more and `taskset` runs;
/// otherwise nothing.
fn pinned_launcher() -> Vec<String> {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let runs = Command::new("taskset")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if cpus < 2 || !runs {
        return Vec::new();
    }
    vec![
        "taskset".to_owned(),
        "-c".to_owned(),
        (cpus - 1).to_string(),
    ]
}

/// `rounds` runs of `once` on each of two targets (`once(0)` and `once(1)`), alternating, the
/// order swapped every round so that neither always goes first; each target's results.
pub(crate) async fn alternately<T, F, Fut>(rounds: u32, mut once: F) -> Result<[Vec<T>; 2]>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut samples = [Vec::new(), Vec::new()];
    for round in 0..rounds as usize {
        for turn in 0..2 {
            let which = (round + turn) % 2;
            samples[which].push(once(which).await?);
        }
    }
    Ok(samples)
}

/// One page case on a keep-alive connection to each server, its paths asked in turn, the two
/// servers alternately; the durations of each server's requests.
async fn page_pair(
    addrs: [SocketAddr; 2],
    case: &PageCase,
    requests: u32,
) -> Result<[Vec<Duration>; 2]> {
    let mut connections = [
        Connection::connect(addrs[0], FAST_BUFFER).await?,
        Connection::connect(addrs[1], FAST_BUFFER).await?,
    ];
    let mut bodies = [Vec::new(), Vec::new()];
    let nth = |round: usize| case.paths[round % case.paths.len()].as_str();
    for round in 0..listing::WARM_UP as usize {
        for (connection, body) in connections.iter_mut().zip(&mut bodies) {
            listing::request(connection, nth(round), body).await?;
        }
    }
    let mut samples = [Vec::new(), Vec::new()];
    let first = listing::WARM_UP as usize;
    for round in first..first + requests as usize {
        for turn in 0..2 {
            let which = (round + turn) % 2;
            let sent = Instant::now();
            listing::request(&mut connections[which], nth(round), &mut bodies[which]).await?;
            samples[which].push(sent.elapsed());
        }
        if bodies[0] != bodies[1] {
            bail!("the two servers answered {} differently", nth(round));
        }
    }
    Ok(samples)
}

/// The comparison as a table.
pub(crate) fn render(comparison: &Comparison) -> String {
    let mut out = format!(
        "{}: ours = {}\n{}  other = {}\n{} rounds of two new servers{}\n",
        comparison.backend,
        comparison.ours,
        " ".repeat(comparison.backend.len()),
        comparison.other,
        comparison.rounds,
        comparison
            .pinned
            .as_ref()
            .map_or(String::new(), |launcher| format!(
                ", both run by `{launcher}`"
            )),
    );
    out.push_str(
        "case | ours p50 [min] (ms) | other p50 [min] (ms) | ours/other (rows/s, 1/p50)\n",
    );
    let export_name = format!(
        "{} ({:.1} MB)",
        comparison.export.name,
        comparison.export_bytes as f64 / 1e6
    );
    let rest = std::iter::once(&comparison.export_server_cpu)
        .chain(&comparison.export_database_cpu)
        .chain(&comparison.pages)
        .map(|pair| (pair.name.as_str(), pair));
    for (name, pair) in std::iter::once((export_name.as_str(), &comparison.export)).chain(rest) {
        out.push_str(&format!(
            "{name} | {:.3} [{:.3}] | {:.3} [{:.3}] | {:.3}\n",
            pair.ours.p50_ms, pair.ours.min_ms, pair.other.p50_ms, pair.other.min_ms, pair.ratio
        ));
    }
    out
}

/// Says so when both binaries are the same build: allowed (the ratios then measure the method's
/// own noise), but rarely what was meant.
pub(crate) fn warn_if_same(ours: &Path, other: &Path) -> Result<()> {
    if process::fingerprint(ours)? == process::fingerprint(other)? {
        eprintln!(
            "bench: note: {} and {} are the same build: the ratios measure the method's noise",
            ours.display(),
            other.display()
        );
    }
    Ok(())
}
