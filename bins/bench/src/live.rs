//! `--live`: the exports of parties ingested as a node that follows the chain ingests them,
//! against the same parties bulk-loaded. Every other figure of the bench comes from a bulk
//! load, whose transactions give a busy party hundreds of kilobytes at a time; a node that
//! follows the chain commits at each quiet moment, a few blocks at a time, so its parties' lines
//! end in segments just past the small tail, several times as many (docs/PERFORMANCE.md, "Reads
//! timed on a settled database"), and what a read costs per segment shows only here.
//!
//! The stream is the dataset's first tenth (25,000 blocks of the standard 250,000), generated
//! twice straight into `server ingest`: once as fast as it takes it, once [`LINES`] lines at a
//! time with a pause of [`PAUSE`] between, longer than the ingest's quiet time (50 ms), so that
//! it commits about every nine blocks. On SQLite and, with `--db`, on PostgreSQL, whose two
//! databases are vacuumed before the reads. Both databases are then served at once, by two
//! processes of the same binary, and the whale's and party 1's exports are read from each in
//! turn, [`ROUNDS`] rounds of `--export-runs`, the order swapped every round: the ratio is the
//! live database's median time over the bulk-loaded one's. Their answers must be the same rows
//! and bytes, or the run fails.

use std::fmt::Write as _;
use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use eventgen::{GenerateConfig, party_id};
use serde::Serialize;

use crate::postgres::PgTarget;
use crate::process::{self, IngestRun, ServerProcess};
use crate::scale::{remove_sqlite, sqlite_size, sync};
use crate::stats::Summary;
use crate::{export, http_client};

/// Lines of the stream written between two pauses: about nine blocks of the standard dataset.
pub(crate) const LINES: usize = 100;

/// The pause between two writes: longer than the ingest's quiet time (50 ms), after which it
/// commits what it has.
pub(crate) const PAUSE: Duration = Duration::from_millis(80);

/// The live stream is this fraction of the dataset's blocks: paced, a stream takes about
/// `PAUSE` / `LINES` a line (3.6 minutes for the standard dataset's tenth).
const SHARE: u64 = 10;

/// Rounds of exports, the servers' order swapped every round.
const ROUNDS: u32 = 4;

/// The PostgreSQL databases the live runs own on the server `--db` names.
const DATABASES: [&str; 2] = ["datanode_bench_live", "datanode_bench_live_bulk"];

/// What the live runs measure with, from the bench's flags.
pub(crate) struct Plan<'a> {
    pub(crate) server: &'a Path,
    pub(crate) dir: &'a Path,
    /// The dataset, of which the stream is the first tenth.
    pub(crate) base: GenerateConfig,
    /// The server `--db` names, for the PostgreSQL half.
    pub(crate) pg_admin: Option<&'a str>,
    /// Exports from each server per round.
    pub(crate) export_runs: u32,
}

/// A writer that hands on what it is given and, each time `lines` more lines have passed,
/// flushes them and calls `pause`: a stream that arrives a few blocks at a time.
pub(crate) struct Paced<W, P> {
    inner: W,
    lines: usize,
    /// Lines until the next pause.
    left: usize,
    pause: P,
}

impl<W: Write, P: FnMut()> Paced<W, P> {
    pub(crate) fn new(inner: W, lines: usize, pause: P) -> Self {
        let lines = lines.max(1);
        Self {
            inner,
            lines,
            left: lines,
            pause,
        }
    }
}

impl<W: Write, P: FnMut()> Write for Paced<W, P> {
    /// Writes up to the line that completes the count, if `buf` holds it, then pauses.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        for (at, _) in buf.iter().enumerate().filter(|(_, byte)| **byte == b'\n') {
            self.left -= 1;
            if self.left == 0 {
                self.inner.write_all(&buf[..=at])?;
                self.inner.flush()?;
                (self.pause)();
                self.left = self.lines;
                return Ok(at + 1);
            }
        }
        self.inner.write_all(buf)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// One backend's figures.
#[derive(Debug, Serialize)]
struct Point {
    backend: &'static str,
    blocks: u64,
    ledger_entries: u64,
    live_ingest_secs: f64,
    bulk_ingest_secs: f64,
    live_database_bytes: u64,
    bulk_database_bytes: u64,
    whale: Pair,
    fixed_party: Pair,
}

/// One export read from both databases.
#[derive(Debug, Serialize)]
struct Pair {
    rows: u64,
    bytes: u64,
    live: Summary,
    bulk: Summary,
    /// The live database's median time over the bulk-loaded one's.
    ratio: f64,
}

/// Where one backend's two databases are.
struct Databases {
    /// The live one, then the bulk-loaded one: paths or URLs.
    urls: [std::ffi::OsString; 2],
    pg: Option<[PgTarget; 2]>,
}

impl Databases {
    fn new(plan: &Plan<'_>, backend: &str) -> Result<Self> {
        if backend == "postgres" {
            let admin = plan.pg_admin.context("no --db")?;
            let [live, bulk] = DATABASES;
            let pg = [PgTarget::named(admin, live)?, PgTarget::named(admin, bulk)?];
            return Ok(Self {
                urls: [(&pg[0].url).into(), (&pg[1].url).into()],
                pg: Some(pg),
            });
        }
        let [live, bulk] = ["live.sqlite", "live-bulk.sqlite"].map(|name| plan.dir.join(name));
        Ok(Self {
            urls: [live.into(), bulk.into()],
            pg: None,
        })
    }

    /// Empties the database `which` (0 live, 1 bulk).
    fn recreate(&self, which: usize) -> Result<()> {
        match &self.pg {
            Some(pg) => pg[which].recreate(&mut pg[which].admin()?),
            None => remove_sqlite(Path::new(&self.urls[which])),
        }
    }

    fn size(&self, which: usize) -> Result<u64> {
        match &self.pg {
            Some(pg) => pg[which].size(&mut pg[which].admin()?),
            None => Ok(sqlite_size(Path::new(&self.urls[which]))),
        }
    }

    /// Vacuums and checkpoints PostgreSQL's databases, as `--scale` does before its reads.
    fn settle(&self) -> Result<()> {
        for pg in self.pg.iter().flatten() {
            pg.settle()?;
        }
        sync()
    }

    fn remove(&self) -> Result<()> {
        match &self.pg {
            Some(pg) => pg
                .iter()
                .try_for_each(|pg| pg.drop_database(&mut pg.admin()?)),
            None => self
                .urls
                .iter()
                .try_for_each(|url| remove_sqlite(Path::new(url))),
        }
    }
}

/// Runs the live and the bulk ingest and their exports on every backend, printing each
/// backend's figures as they are measured and the table at the end; writes `<dir>/live.json`.
pub(crate) fn run(plan: &Plan<'_>) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let config = GenerateConfig {
        blocks: (plan.base.blocks / SHARE).max(1),
        ..plan.base.clone()
    };
    let mut backends = vec!["sqlite"];
    if plan.pg_admin.is_some() {
        backends.push("postgres");
    }
    let mut points = Vec::new();
    for backend in backends {
        let databases = Databases::new(plan, backend)?;
        let ingest = |which: usize, pace: Option<(usize, Duration)>| -> Result<(IngestRun, u64)> {
            let how = if pace.is_some() { "paced" } else { "bulk" };
            eprintln!(
                "bench: live, {backend}: {} blocks into the ingest, {how}",
                config.blocks
            );
            databases.recreate(which)?;
            let (run, summary) = process::run_ingest_generated(
                plan.server,
                &databases.urls[which],
                &config,
                plan.dir,
                pace,
            )?;
            Ok((run, summary.ledger_entries))
        };
        let (live, entries) = ingest(0, Some((LINES, PAUSE)))?;
        let (bulk, _) = ingest(1, None)?;
        databases.settle()?;
        let [live_bytes, bulk_bytes] = [databases.size(0)?, databases.size(1)?];
        let servers = databases
            .urls
            .iter()
            .zip(["live-serve", "live-bulk-serve"])
            .map(|(url, name)| {
                let dir = plan.dir.join(name);
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?;
                ServerProcess::start_with(plan.server, url, &dir, &[])
            })
            .collect::<Result<Vec<_>>>()?;
        let addrs = [servers[0].addr, servers[1].addr];
        let exports = runtime.block_on(async {
            let whale = export::cases(&config)[0].path.clone();
            let fixed = format!("{}?partyId={}", export::EXPORT_PATH, party_id(&config, 1));
            Ok::<_, anyhow::Error>([
                alternate(addrs, &whale, plan.export_runs).await?,
                alternate(addrs, &fixed, plan.export_runs).await?,
            ])
        });
        for server in servers {
            server.stop()?;
        }
        databases.remove()?;
        let [whale, fixed_party] = exports?;
        let point = Point {
            backend,
            blocks: config.blocks,
            ledger_entries: entries,
            live_ingest_secs: live.seconds,
            bulk_ingest_secs: bulk.seconds,
            live_database_bytes: live_bytes,
            bulk_database_bytes: bulk_bytes,
            whale,
            fixed_party,
        };
        eprintln!("bench: {point:?}");
        points.push(point);
    }
    println!("{}", render(&points));
    crate::write_json(&plan.dir.join("live.json"), &points)
}

/// The export at `path` from the live database's server and the bulk-loaded one's in turn,
/// `runs` times each in each of [`ROUNDS`] rounds, the order swapped every round, after one
/// untimed export from each. Both must answer the same rows and bytes.
async fn alternate(addrs: [std::net::SocketAddr; 2], path: &str, runs: u32) -> Result<Pair> {
    let mut samples: [Vec<Duration>; 2] = Default::default();
    let mut answer = None;
    for addr in addrs {
        http_client::wait_until_ready(addr, Duration::from_secs(30)).await?;
    }
    for round in 0..=ROUNDS {
        for _ in 0..if round == 0 { 1 } else { runs } {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for which in order {
                let run = export::once(addrs[which], path).await?;
                match answer {
                    None => answer = Some((run.rows, run.bytes)),
                    Some(seen) if seen != (run.rows, run.bytes) => bail!(
                        "{path}: {} rows and {} bytes from one database, {} and {} from the other",
                        seen.0,
                        seen.1,
                        run.rows,
                        run.bytes
                    ),
                    Some(_) => {}
                }
                if round > 0 {
                    samples[which].push(run.time);
                }
            }
        }
    }
    let (rows, bytes) = answer.context("no export")?;
    let [live, bulk] = samples.map(|samples| Summary::of(&samples));
    Ok(Pair {
        rows,
        bytes,
        ratio: live.p50_ms / bulk.p50_ms.max(1e-9),
        live,
        bulk,
    })
}

/// The table of every backend's figures.
fn render(points: &[Point]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "live stream: {} lines at a time, {} ms apart (a commit every few blocks), against the \
         same blocks bulk-loaded; p50 of the exports, live over bulk",
        LINES,
        PAUSE.as_millis()
    );
    let _ = writeln!(
        out,
        "backend | blocks | ingest s, live / bulk | database MB, live / bulk | whale's export ms, \
         live / bulk | ratio | party 1's export ms, live / bulk | ratio"
    );
    for point in points {
        let mb = |bytes: u64| bytes as f64 / 1e6;
        let _ = writeln!(
            out,
            "{} | {} | {:.1} / {:.1} | {:.0} / {:.0} | {:.1} / {:.1} | {:.2} | {:.2} / {:.2} | {:.2}",
            point.backend,
            point.blocks,
            point.live_ingest_secs,
            point.bulk_ingest_secs,
            mb(point.live_database_bytes),
            mb(point.bulk_database_bytes),
            point.whale.live.p50_ms,
            point.whale.bulk.p50_ms,
            point.whale.ratio,
            point.fixed_party.live.p50_ms,
            point.fixed_party.bulk.p50_ms,
            point.fixed_party.ratio,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a paced writer passed on, cut where it paused.
    fn paced(lines: usize, writes: &[&[u8]]) -> Vec<Vec<u8>> {
        let pauses = std::cell::RefCell::new(Vec::new());
        let mut out = Vec::new();
        {
            let mut writer = Paced::new(&mut out, lines, || pauses.borrow_mut().push(()));
            for bytes in writes {
                writer.write_all(bytes).unwrap();
            }
            writer.flush().unwrap();
        }
        let mut pieces = Vec::new();
        let mut at = 0;
        let newlines: Vec<usize> = out
            .iter()
            .enumerate()
            .filter(|(_, byte)| **byte == b'\n')
            .map(|(i, _)| i + 1)
            .collect();
        for end in newlines.iter().skip(lines - 1).step_by(lines) {
            pieces.push(out[at..*end].to_vec());
            at = *end;
        }
        pieces.push(out[at..].to_vec());
        assert_eq!(pauses.borrow().len(), pieces.len() - 1);
        pieces
    }

    #[test]
    fn a_paced_writer_pauses_after_every_so_many_lines_and_changes_no_byte() {
        // Lines split across writes and several lines in one write alike.
        let writes: [&[u8]; 4] = [b"a\nb", b"\nc\nd\ne", b"\n", b"f\ng"];
        let pieces = paced(2, &writes);
        assert_eq!(
            pieces,
            [
                b"a\nb\n".to_vec(),
                b"c\nd\n".to_vec(),
                b"e\nf\n".to_vec(),
                b"g".to_vec()
            ]
        );
        assert_eq!(pieces.concat(), writes.concat());
        // One line at a time, and never a pause before a line is complete.
        assert_eq!(
            paced(1, &[b"x\ny\n"]),
            [b"x\n".to_vec(), b"y\n".to_vec(), vec![]]
        );
        assert_eq!(paced(5, &[b"x\ny\n"]), [b"x\ny\n".to_vec()]);
    }

    #[test]
    fn the_table_shows_live_over_bulk() {
        let summary = |p50_ms| Summary {
            count: 1,
            min_ms: p50_ms,
            p50_ms,
            p99_ms: p50_ms,
            max_ms: p50_ms,
            mean_ms: p50_ms,
        };
        let pair = |live, bulk| Pair {
            rows: 1,
            bytes: 1,
            live: summary(live),
            bulk: summary(bulk),
            ratio: live / bulk,
        };
        let table = render(&[Point {
            backend: "postgres",
            blocks: 25_000,
            ledger_entries: 200_000,
            live_ingest_secs: 214.0,
            bulk_ingest_secs: 1.5,
            live_database_bytes: 350_000_000,
            bulk_database_bytes: 70_000_000,
            whale: pair(60.0, 50.0),
            fixed_party: pair(2.0, 2.0),
        }]);
        assert!(
            table.ends_with(
                "postgres | 25000 | 214.0 / 1.5 | 350 / 70 | 60.0 / 50.0 | 1.20 | 2.00 / 2.00 | 1.00\n"
            ),
            "{table}"
        );
    }
}
