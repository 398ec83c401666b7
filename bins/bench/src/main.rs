//! `bench`: the end-to-end benchmark of the server, one command with a fixed seed.
//!
//! 1. Generates a synthetic event stream in process (`eventgen::generate`) into a work directory,
//!    with one very large party (party 0) and about a million oracle data.
//! 2. Ingests it by running the real `server ingest` as a child process: wall time and peak RSS.
//! 3. Runs `server serve` as a child process and measures it from this process over loopback:
//!    the ledger export of the largest party (whole, one asset, a 1% time window, and a slow
//!    reader while the server's memory is sampled) and pages of the oracle data listing (latency
//!    percentiles, throughput at 1 and 4 clients).
//! 4. Compares the server with nginx serving a copy of the same answers (the whale's export and
//!    a page of 100), the requests of both interleaved: the machine's own limit, as a ratio.
//! 5. Prints a table and writes the same figures as JSON to `<dir>/results.json`.
//!
//! The dataset and database are reused by the next run with the same flags, so that repeated
//! runs measure the server rather than the generator. The `server` binary is looked up next to
//! this executable: build both with `cargo build --release -p server -p bench`.
//!
//! The HTTP clients are hand-written over `TcpStream` on purpose: the benchmark must measure
//! the server, so the client does no more than count bytes and newlines.

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod against;
mod dataset;
mod export;
mod http_client;
mod ingest_formats;
mod listing;
mod live;
mod nginx;
mod postgres;
mod process;
mod render;
mod report;
mod scale;
mod socket;
mod stats;
mod storm;

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;

use crate::dataset::{DatasetArgs, Prepared};
use crate::process::ServerProcess;

/// End-to-end benchmark of the ledger export and the oracle data listing.
///
/// Generates a dataset (reused when the work directory already holds one made with the same
/// flags), ingests it with `server ingest`, serves it with `server serve` and measures both
/// endpoints over loopback. Build first: `cargo build --release -p server -p bench`.
#[derive(Debug, Parser)]
#[command(name = "bench", version)]
struct Cli {
    #[command(flatten)]
    dataset: DatasetArgs,
    /// Work directory for the dataset, database, logs and results [default: target/bench-data,
    /// or target/bench-data-small with --small].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Regenerate the dataset and ingest it again even if the work directory holds a match.
    #[arg(long)]
    fresh: bool,
    /// Ingest the existing dataset again (to measure the ingest) without regenerating it.
    #[arg(long)]
    reingest: bool,
    /// Measure only the ingest: the dataset as NDJSON, as a Vega event buffer file, and as a
    /// buffer file where 90% of the events are of types the server skips, side by side.
    #[arg(long)]
    ingest_formats: bool,
    /// Measure only Vega's event socket: a continuation of the dataset sent over the socket
    /// of `serve --ingest` as fast as it takes it, page latency idle and under that ingest.
    #[arg(long, conflicts_with = "ingest_formats")]
    socket: bool,
    /// The server binary [default: `server` next to this executable].
    #[arg(long)]
    server: Option<PathBuf>,
    /// The nginx binary of the baseline (Debian: `apt-get install -y nginx-light`); without
    /// it the ratios against nginx are skipped.
    #[arg(long, default_value = nginx::DEFAULT_BINARY)]
    nginx: PathBuf,
    /// Also write the results as JSON to this file (they always go to `<dir>/results.json`).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Runs of each export; the table shows the median.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    export_runs: u32,
    /// Seconds the slow reader reads the export for.
    #[arg(long, default_value_t = 5.0)]
    slow_secs: f64,
    /// Bytes per second the slow reader accepts.
    #[arg(long, default_value_t = 2_000_000)]
    slow_rate: u64,
    /// Requests per oracle page kind for the latency percentiles.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    requests: u32,
    /// Seconds of each throughput measurement (per page kind, at 1 and at 4 clients).
    #[arg(long, default_value_t = 3.0)]
    throughput_secs: f64,
    /// Also measure PostgreSQL, beside SQLite: `postgres://USER@HOST:PORT/DB` names the server
    /// and a database to connect to for administration. The bench ingests into a database of
    /// its own there, `datanode_bench`, which it creates, and reuses on the next run as it
    /// reuses the SQLite file.
    #[arg(long, value_name = "URL")]
    db: Option<String>,
    /// Serve with the per-client rate limits applied to loopback too (no address exempt), at a
    /// rate and burst no client of the bench reaches: the figures then include the limiter's
    /// cost on every request.
    #[arg(long)]
    rate_limited: bool,
    /// Serve with this page cache, in MiB, instead of the server's default (0 turns it off:
    /// every page is then read from the store, as before the cache).
    #[arg(long, value_name = "MIB")]
    page_cache_mib: Option<u32>,
    /// Measure only the cost curve: the dataset times each of these scales (blocks and parties
    /// both multiplied), generated straight into `server ingest` with no event file, on SQLite
    /// and with --db on PostgreSQL; see docs/PERFORMANCE.md "Scale".
    #[arg(long, value_delimiter = ',', value_name = "LIST",
          value_parser = clap::value_parser!(u32).range(1..=1000),
          conflicts_with_all = ["ingest_formats", "socket"])]
    scale: Option<Vec<u32>>,
    /// With --scale: ingest each scale this many times on each backend, each into a fresh
    /// database, and report the median ingest time and peak memory with their range (runs of
    /// one binary spread by about a tenth); the reads are measured on the last run's database.
    #[arg(long, default_value_t = 1, requires = "scale",
          value_parser = clap::value_parser!(u32).range(1..=9))]
    ingest_runs: u32,
    /// Measure only pages before and after a storm of aborted exports (issue 23): a page
    /// asked again and again and the distinct pages, a storm of exports half of them dropped
    /// after their first bytes, the same pages again; three rounds, on SQLite.
    #[arg(long, conflicts_with_all = ["ingest_formats", "socket", "scale", "db"])]
    abort_storm: bool,
    /// Measure only the exports of parties ingested as a node following the chain ingests them
    /// (the dataset's first tenth, a hundred lines at a time, 80 ms apart, so a commit every
    /// few blocks) against the same blocks bulk-loaded, on SQLite and with --db on PostgreSQL;
    /// see docs/PERFORMANCE.md "A live stream, in the bench".
    #[arg(long, conflicts_with_all = ["ingest_formats", "socket", "scale", "abort_storm"])]
    live: bool,
    /// Measure only this server binary against another one: both serve the database (the one
    /// `--server` ingested; with --db PostgreSQL's too) at once, page cache off, pinned to the
    /// last CPU, and the client alternates between them request by request for the whale's
    /// export (--export-runs) and each page case (--requests), in five rounds of two new server
    /// processes: what a change costs, set apart from the machine's drift (`against.rs`).
    #[arg(long, value_name = "SERVER", conflicts_with_all =
          ["ingest_formats", "socket", "scale", "abort_storm", "page_cache_mib", "live"])]
    against: Option<PathBuf>,
}

/// The `serve` flags of `--rate-limited`: nobody exempt, a billion requests a second.
const RATE_LIMITED_FLAGS: [&str; 6] = [
    "--rate-limit-exempt",
    "",
    "--rate-limit-rate",
    "1000000000",
    "--rate-limit-burst",
    "1000000000",
];

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    // Checked up front, so that a bad flag does not cost a dataset generation first.
    for (name, secs) in [
        ("--slow-secs", cli.slow_secs),
        ("--throughput-secs", cli.throughput_secs),
    ] {
        anyhow::ensure!(
            secs.is_finite() && (0.1..=600.0).contains(&secs),
            "{name} must be between 0.1 and 600 seconds, got {secs}"
        );
    }
    anyhow::ensure!(cli.slow_rate > 0, "--slow-rate must be positive");

    let dir = cli.dir.clone().unwrap_or_else(|| {
        PathBuf::from(if cli.dataset.small {
            "target/bench-data-small"
        } else {
            "target/bench-data"
        })
    });
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let server = process::locate_server(cli.server.as_deref())?;
    let config = cli.dataset.config();
    if cli.ingest_formats {
        return ingest_formats::run(&dir, &server, &config);
    }
    if cli.socket {
        return socket::run(&dir, &server, &config);
    }
    if let Some(scales) = &cli.scale {
        return scale::run(&scale::Plan {
            server: &server,
            dir: &dir,
            base: config,
            scales,
            ingest_runs: cli.ingest_runs,
            pg_admin: cli.db.as_deref(),
            export_runs: cli.export_runs,
            pages: listing::Plan {
                requests: cli.requests,
                throughput: Duration::from_secs_f64(cli.throughput_secs),
            },
        });
    }

    if cli.live {
        return live::run(&live::Plan {
            server: &server,
            dir: &dir,
            base: config,
            pg_admin: cli.db.as_deref(),
            export_runs: cli.export_runs,
        });
    }

    let pg = cli.db.as_deref().map(postgres::PgTarget::new).transpose()?;
    let prepared = dataset::prepare(&dir, &config, cli.dataset.format, cli.fresh)?;
    let ingest = ingest_step(&dir, &server, prepared, cli.reingest)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    if cli.abort_storm {
        return abort_storm(&cli, &runtime, &server, &dir, &ingest.manifest);
    }
    if let Some(other) = &cli.against {
        return against(&cli, &runtime, [&server, other], &dir, ingest, pg.as_ref());
    }
    let (manifest, dataset_reused) = (ingest.manifest.clone(), ingest.dataset_reused);
    let db = dataset::db_path(&dir);
    let mut backends = vec![(
        "sqlite",
        serve_and_measure(&cli, &runtime, &server, db.as_os_str(), &dir, ingest)?,
    )];
    if let Some(pg) = &pg {
        let ingest =
            postgres::ingest_step(&dir, &server, pg, &manifest, dataset_reused, cli.reingest)?;
        let measured =
            serve_and_measure(&cli, &runtime, &server, OsStr::new(&pg.url), &dir, ingest)?;
        backends.push(("postgres", measured));
    }

    let mut all = Vec::new();
    for (backend, (serve_command, ingest, measured)) in backends {
        let results = report::Results::new(report::Inputs {
            backend,
            bench_command: std::env::args().collect::<Vec<_>>().join(" "),
            serve_command,
            dir: dir.clone(),
            ingest,
            measured,
        });
        println!("{backend}\n{}", render::render(&results));
        let name = match backend {
            "sqlite" => "results.json".to_owned(),
            other => format!("results-{other}.json"),
        };
        write_json(&dir.join(name), &results)?;
        all.push(results);
    }
    if all.len() > 1 {
        println!("{}", render::side_by_side(&all));
    }
    if let Some(path) = &cli.json {
        // One backend: its results, as in `<dir>/results.json`; with --db, a list of both.
        match all.as_slice() {
            [results] => write_json(path, results)?,
            _ => write_json(path, &all)?,
        }
    }
    Ok(())
}

/// Writes `value` as pretty JSON to `path`, and says where.
pub(crate) fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<()> {
    let json = serde_json::to_vec_pretty(value).context("cannot encode the results")?;
    std::fs::write(path, &json).with_context(|| format!("cannot write {}", path.display()))?;
    eprintln!("bench: results written to {}", path.display());
    Ok(())
}

/// `--abort-storm`: serves the SQLite database and measures the pages around storms of
/// exports (`storm.rs`).
fn abort_storm(
    cli: &Cli,
    runtime: &tokio::runtime::Runtime,
    server: &Path,
    dir: &Path,
    manifest: &dataset::Manifest,
) -> Result<()> {
    let db = dataset::db_path(dir);
    let flags: Vec<String> = cli
        .page_cache_mib
        .map(|mib| vec!["--page-cache-mib".to_owned(), mib.to_string()])
        .unwrap_or_default();
    let server_process = ServerProcess::start_with(server, db.as_os_str(), dir, &flags)?;
    let plan = listing::Plan {
        requests: cli.requests,
        throughput: Duration::from_secs_f64(cli.throughput_secs),
    };
    let result = runtime.block_on(async {
        http_client::wait_until_ready(server_process.addr, Duration::from_secs(30)).await?;
        storm::measure(
            server_process.addr,
            server_process.pid(),
            &manifest.dataset,
            manifest.generated.oracle_data,
            &plan,
        )
        .await
    })?;
    server_process.stop()?;
    println!("{}", storm::render(&result));
    write_json(&dir.join("storm.json"), &result)?;
    if let Some(path) = &cli.json {
        write_json(path, &result)?;
    }
    Ok(())
}

/// `--against`: measures `servers[0]` against `servers[1]` on SQLite's database and, with
/// `--db`, on PostgreSQL's (`against.rs`).
fn against(
    cli: &Cli,
    runtime: &tokio::runtime::Runtime,
    servers: [&Path; 2],
    dir: &Path,
    ingest: dataset::Ingested,
    pg: Option<&postgres::PgTarget>,
) -> Result<()> {
    let other = process::locate_server(Some(servers[1]))?;
    against::warn_if_same(servers[0], &other)?;
    let flags: Vec<String> = if cli.rate_limited {
        RATE_LIMITED_FLAGS.map(String::from).to_vec()
    } else {
        Vec::new()
    };
    let db = dataset::db_path(dir);
    let mut targets = vec![("sqlite", db.into_os_string())];
    if let Some(pg) = pg {
        postgres::ingest_step(
            dir,
            servers[0],
            pg,
            &ingest.manifest,
            ingest.dataset_reused,
            cli.reingest,
        )?;
        targets.push(("postgres", pg.url.clone().into()));
    }
    let mut all = Vec::new();
    for (backend, db) in &targets {
        let plan = against::Plan {
            ours: servers[0],
            other: &other,
            db,
            backend,
            dir,
            flags: &flags,
            export_runs: cli.export_runs,
            page_requests: cli.requests,
        };
        let comparison = runtime.block_on(against::run(&plan, &ingest.manifest))?;
        println!("{}", against::render(&comparison));
        all.push(comparison);
    }
    write_json(&dir.join("against.json"), &all)?;
    if let Some(path) = &cli.json {
        write_json(path, &all)?;
    }
    Ok(())
}

/// Serves `db` (a path or a URL) with `server serve` and measures it; returns the serve command.
fn serve_and_measure(
    cli: &Cli,
    runtime: &tokio::runtime::Runtime,
    server: &Path,
    db: &OsStr,
    dir: &Path,
    ingest: dataset::Ingested,
) -> Result<(String, dataset::Ingested, Measured)> {
    let shown = storage::redact(&db.to_string_lossy());
    eprintln!("bench: starting {} serve --db {shown}", server.display());
    let mut flags: Vec<String> = if cli.rate_limited {
        RATE_LIMITED_FLAGS.map(String::from).to_vec()
    } else {
        Vec::new()
    };
    if let Some(mib) = cli.page_cache_mib {
        flags.extend(["--page-cache-mib".to_owned(), mib.to_string()]);
    }
    let server_process = ServerProcess::start_with(server, db, dir, &flags)?;
    let database = db.to_str().is_some_and(storage::is_url);
    let measured = runtime.block_on(measure(
        cli,
        dir,
        &ingest.manifest,
        &server_process,
        database,
    ))?;
    // A URL's password stays out of the results.
    let serve_command = server_process
        .command
        .replace(&*db.to_string_lossy(), &shown);
    server_process.stop()?;
    Ok((serve_command, ingest, measured))
}

/// Ingests the dataset unless the database of an earlier run can be reused: same dataset,
/// ingest completed, and the same server binary (a rebuilt server may store data differently).
fn ingest_step(
    dir: &Path,
    server: &Path,
    prepared: Prepared,
    reingest: bool,
) -> Result<dataset::Ingested> {
    let Prepared {
        mut manifest,
        reused,
    } = prepared;
    let fingerprint = process::fingerprint(server)?;
    let db = dataset::db_path(dir);
    if reused
        && !reingest
        && db.exists()
        && let Some(record) = &manifest.ingest
        && record.server_fingerprint == fingerprint
    {
        eprintln!(
            "bench: reusing the database ingested at {} (--reingest to measure again)",
            record.measured_at
        );
        return Ok(dataset::Ingested {
            manifest,
            dataset_reused: true,
            ingest_reused: true,
        });
    }
    dataset::remove_db(dir)?;
    eprintln!(
        "bench: ingesting {} ledger entries with {} ingest",
        manifest.generated.ledger_entries,
        server.display()
    );
    let run = process::run_ingest(
        server,
        db.as_os_str(),
        &dataset::events_path(dir, manifest.generated.format),
        dir,
    )?;
    manifest.ingest = Some(dataset::IngestRecord::new(
        &run,
        &manifest.generated,
        &db,
        fingerprint,
    )?);
    dataset::save_manifest(dir, &manifest)?;
    Ok(dataset::Ingested {
        manifest,
        dataset_reused: reused,
        ingest_reused: false,
    })
}

/// Everything measured over HTTP.
pub(crate) struct Measured {
    pub(crate) server_addr: SocketAddr,
    pub(crate) slow_reader: export::SlowReaderResult,
    pub(crate) exports: Vec<export::ExportResult>,
    pub(crate) pages: Vec<listing::PageResult>,
    pub(crate) deep_depth: u64,
    pub(crate) memory_at_end: Option<process::Memory>,
    pub(crate) nginx: nginx::Baseline,
}

/// Measures `server`, whose database runs in PostgreSQL when `database` is true (its processes'
/// CPU time is then counted with each export's).
async fn measure(
    cli: &Cli,
    dir: &Path,
    manifest: &dataset::Manifest,
    server: &ServerProcess,
    database: bool,
) -> Result<Measured> {
    let addr = server.addr;
    let config = &manifest.dataset;
    http_client::wait_until_ready(addr, Duration::from_secs(30)).await?;
    let cases = export::cases(config);

    // The slow reader goes first so that the server's high-water mark (VmHWM) afterwards
    // reflects that export alone, not the fast exports and page bursts.
    eprintln!(
        "bench: slow reader ({} B/s for {} s)",
        cli.slow_rate, cli.slow_secs
    );
    let slow = export::SlowReaderConfig {
        rate: cli.slow_rate,
        duration: Duration::from_secs_f64(cli.slow_secs),
    };
    let slow_reader = export::slow_reader(addr, &cases[0].path, server.pid(), &slow).await?;

    let mut exports = Vec::new();
    for case in &cases {
        eprintln!("bench: export {} x{}", case.name, cli.export_runs);
        exports.push(export::measure(addr, case, cli.export_runs).await?);
    }

    eprintln!("bench: walking the oracle listing to 90% depth");
    let walk = listing::walk(addr, manifest.generated.oracle_data).await?;
    let page_cases = listing::cases(config, &walk);
    let plan = listing::Plan {
        requests: cli.requests,
        throughput: Duration::from_secs_f64(cli.throughput_secs),
    };
    eprintln!(
        "bench: oracle pages, {} latency rounds over the {} cases ({} distinct pages round-robin)",
        plan.requests,
        page_cases.len(),
        walk.page_cursors.len()
    );
    let pages = listing::measure(addr, &page_cases, &plan).await?;
    let memory_at_end = process::memory(server.pid()).ok();

    // Last, so that the figures above are measured as they always were.
    let nginx_plan = nginx::Plan {
        binary: &cli.nginx,
        dir: dir.join("nginx"),
        // Our server's runtime has a worker thread per core.
        workers: std::thread::available_parallelism().map_or(1, usize::from),
        export: &cases[0],
        export_runs: cli.export_runs,
        ours: export::Meter {
            pid: server.pid(),
            children: false,
            database,
        },
        pages: [
            &page_cases[0],
            &page_cases[page_cases.len() - 2],
            &page_cases[page_cases.len() - 1],
        ],
        throughput: plan.throughput,
    };
    let nginx = nginx::compare(addr, &nginx_plan).await;
    Ok(Measured {
        server_addr: addr,
        slow_reader,
        exports,
        pages,
        deep_depth: walk.walked,
        memory_at_end,
        nginx,
    })
}
