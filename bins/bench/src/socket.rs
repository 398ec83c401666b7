//! `bench --socket`: Vega's event socket under load while pages are served.
//!
//! The dataset is ingested from a file first (so that pages have something to show), then
//! `server serve --ingest tcp://127.0.0.1:PORT` starts on it and page latency is measured idle.
//! Then a continuation of the stream (the same shape, at the following heights) is sent over a
//! pair socket as fast as the server takes it, while the same pages are requested again: the
//! report gives the sustained events/s end to end (first message sent to last block visible in
//! `/metrics`) and the page p50/p99 idle and under ingest.
//!
//! The ingest listens on port 0, a port the system picks, and the server writes which one to
//! the file `--ingest-addr-file` names.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use eventgen::{Format, GenerateConfig};
use sp_pair::PairSender;

use crate::http_client::{Accept, Connection};
use crate::process::{self, ServerProcess};
use crate::stats::Summary;

/// The page measured: the first page of 100 oracle data, newest first.
const PAGE: &str = "/api/v2/oracle/data?pagination.first=100";

/// Page requests measured on the idle server.
const IDLE_REQUESTS: usize = 2000;

/// Ingests `config`'s stream, serves it with a socket ingest, and measures.
pub(crate) fn run(dir: &Path, server: &Path, config: &GenerateConfig) -> Result<()> {
    let dir = dir.join("socket");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let db = dir.join("socket.sqlite");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
    }
    let prefill = dir.join("prefill.ndjson");
    let file = std::fs::File::create(&prefill)
        .with_context(|| format!("cannot create {}", prefill.display()))?;
    eventgen::generate(config, &mut std::io::BufWriter::new(file))
        .context("cannot generate the dataset")?;
    process::run_ingest(server, db.as_os_str(), &prefill, &dir)?;
    std::fs::remove_file(&prefill).ok();

    // The continuation: the same shape at the following heights, later in time, without a
    // genesis block of its own.
    let live = GenerateConfig {
        start_height: config.end_height(),
        start_time_nanos: config.start_time_nanos + 2 * config.blocks as i64 * 1_000_000_000,
        genesis: false,
        ..config.clone()
    };
    let mut buffer = Vec::new();
    let summary = eventgen::generate_as(&live, Format::VegaBuffer, &mut buffer)
        .context("cannot generate the live stream")?;
    let last_height = live.end_height() - 1;

    let ingest_addr_file = dir.join("ingest.addr");
    let _ = std::fs::remove_file(&ingest_addr_file);
    let mut serving = ServerProcess::start_with(
        server,
        db.as_os_str(),
        &dir,
        &[
            "--ingest".to_owned(),
            "tcp://127.0.0.1:0".to_owned(),
            "--ingest-addr-file".to_owned(),
            ingest_addr_file.display().to_string(),
        ],
    )?;
    let ingest_addr = serving.address_in(&ingest_addr_file)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let addr = serving.addr;
    let idle = runtime.block_on(pages(addr, |done| done >= IDLE_REQUESTS))?;

    let started = Instant::now();
    let sender = std::thread::spawn(move || send(ingest_addr, &buffer_messages(&buffer)));
    let (busy, elapsed) = runtime.block_on(async {
        let mut metrics = Connection::connect(addr, 64 << 10).await?;
        let mut body = Vec::new();
        let mut samples = Vec::new();
        let mut page = Connection::connect(addr, 64 << 10).await?;
        loop {
            for _ in 0..50 {
                let at = Instant::now();
                page.get(PAGE, Accept::Json, &mut body).await?;
                samples.push(at.elapsed());
            }
            metrics.get("/metrics", Accept::Json, &mut body).await?;
            if last_block(&body) >= Some(last_height) {
                return Ok::<_, anyhow::Error>((Summary::of(&samples), started.elapsed()));
            }
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(600),
                "the live stream was not stored within 10 minutes"
            );
        }
    })?;
    sender
        .join()
        .map_err(|_| anyhow::anyhow!("the sender panicked"))??;
    serving.stop()?;

    let secs = elapsed.as_secs_f64();
    println!(
        "socket: {} events ({} ledger entries) in {secs:.2} s: {:.0} events/s, {:.0} entries/s",
        summary.events,
        summary.ledger_entries,
        summary.events as f64 / secs,
        summary.ledger_entries as f64 / secs,
    );
    for (name, stats) in [("idle", &idle), ("under ingest", &busy)] {
        println!(
            "page of 100, {name:<12}: {} requests, p50 {:.3} ms, p99 {:.3} ms",
            stats.count, stats.p50_ms, stats.p99_ms
        );
    }
    println!(
        "page p99 under ingest / idle: {:.2}",
        busy.p99_ms / idle.p99_ms
    );
    Ok(())
}

/// Measures sequential page requests on one keep-alive connection until `enough(count)`.
async fn pages(addr: SocketAddr, enough: impl Fn(usize) -> bool) -> Result<Summary> {
    let mut connection = Connection::connect(addr, 64 << 10).await?;
    let mut body = Vec::new();
    let mut samples = Vec::new();
    while !enough(samples.len()) {
        let at = Instant::now();
        connection.get(PAGE, Accept::Json, &mut body).await?;
        samples.push(at.elapsed());
    }
    Ok(Summary::of(&samples))
}

/// Dials as Vega's core does (until the socket listens) and sends every message.
fn send(addr: SocketAddr, messages: &[&[u8]]) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut sender = loop {
        match PairSender::dial(addr) {
            Ok(sender) => break sender,
            Err(error) if Instant::now() > deadline => {
                return Err(error).context("cannot connect to the ingest socket");
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    sender
        .send_all(messages.iter().copied())
        .context("cannot send the stream")
}

/// The protobuf events of a buffer file: a 4-byte size (8 plus the payload's length), an
/// 8-byte sequence number, the event.
fn buffer_messages(buffer: &[u8]) -> Vec<&[u8]> {
    let (mut rest, mut messages) = (buffer, Vec::new());
    while rest.len() >= 4 {
        let size = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        messages.push(&rest[12..4 + size]);
        rest = &rest[4 + size..];
    }
    messages
}

/// `datanode_ingest_last_block_height` in a metrics body.
fn last_block(metrics: &[u8]) -> Option<u64> {
    String::from_utf8_lossy(metrics)
        .lines()
        .find_map(|line| line.strip_prefix("datanode_ingest_last_block_height "))
        .and_then(|value| value.trim().parse().ok())
}
