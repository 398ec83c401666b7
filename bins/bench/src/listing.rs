//! Pages of the oracle data listing: latency percentiles on one keep-alive connection, and
//! throughput at 1 and 4 concurrent clients.
//!
//! Most cases ask for one page again and again, which the server's page cache answers from
//! memory after the first time. The cases of distinct pages ask for the pages that follow
//! thousands of a walk's cursors in turn, as an indexer or an explorer paging through the data
//! would: far more bytes than the page cache holds by default, so none is asked again while it
//! is cached. Round-robin, the clients share one walk, each asking for the next page not asked
//! yet: a page is asked before the page ending at its cursor was answered, which no real client
//! can do, and pages read ahead (see the server's `oracle.rs`) seldom arrive in time. In the
//! walks case each client follows its own share of the cursors in order, as independent
//! walkers do.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use eventgen::{GenerateConfig, spec_id};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;

use crate::http_client::{Accept, Connection, FAST_BUFFER};
use crate::stats::Summary;

const ORACLE_PATH: &str = "/api/v2/oracle/data";

/// Page size of the walk to 90% depth: the largest the API allows, to walk in few requests.
const WALK_PAGE: u64 = 5000;

/// Page size measured, as a UI would ask for.
const PAGE: u32 = 100;

/// A latency run stops after this long even if it has not made its requests.
const LATENCY_TIME_LIMIT: Duration = Duration::from_secs(60);

/// Requests of each case before the timed ones, so that the first samples do not pay for cold
/// caches.
pub(crate) const WARM_UP: u32 = 10;

/// Bound on one client's requests in a throughput run, besides its deadline.
const MAX_REQUESTS_PER_CLIENT: u64 = 10_000_000;

/// How long one request may take before it counts as hung.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Distinct pages of the round-robin case: at least 3,000 (issue 26), each page of 100 after
/// one of a walk's cursors, 300,000 data in all (the standard dataset has a million).
pub(crate) const DISTINCT_PAGES: usize = 3000;

/// The name of the round-robin case, for the targets.
pub(crate) const DISTINCT_CASE: &str = "distinct pages, round-robin";

/// The name of the case of the same pages asked by independent walkers.
pub(crate) const WALKS_CASE: &str = "distinct pages, a walk per client";

/// One page request to measure, or several asked in turn.
pub(crate) struct PageCase {
    pub(crate) name: &'static str,
    /// Asked in turn; never empty.
    pub(crate) paths: Arc<[String]>,
    /// Whether each client of a throughput run asks for its own share of `paths` in order
    /// (a walk per client) rather than for the next path not asked yet by any.
    pub(crate) walks: bool,
}

impl PageCase {
    fn one(name: &'static str, path: String) -> Self {
        PageCase {
            name,
            paths: Arc::from([path]),
            walks: false,
        }
    }

    /// Where the case's latency requests start among its paths: a walks case asks for the
    /// second half of the pages, which the round-robin case's latency requests (interleaved
    /// with its own, from the first) have not read.
    fn latency_start(&self) -> usize {
        if self.walks { self.paths.len() / 2 } else { 0 }
    }

    /// The first of its paths: the one whose answer is copied for nginx.
    pub(crate) fn path(&self) -> &str {
        &self.paths[0]
    }
}

/// The pages measured: the first page, a page at 90% depth (after the walk's deep cursor), the
/// first page of the most frequent spec, the latest value of that spec, and the pages of 100
/// after each of the walk's page cursors in turn, round-robin and a walk per client.
pub(crate) fn cases(config: &GenerateConfig, walk: &Walk) -> Vec<PageCase> {
    let spec = spec_id(config, 0);
    let after =
        |cursor: &str| format!("{ORACLE_PATH}?pagination.first={PAGE}&pagination.after={cursor}");
    let distinct: Arc<[String]> = walk.page_cursors.iter().map(|c| after(c)).collect();
    vec![
        PageCase::one(
            "first page",
            format!("{ORACLE_PATH}?pagination.first={PAGE}"),
        ),
        PageCase::one("page at 90% depth", after(&walk.deep_cursor)),
        PageCase::one(
            "spec 0, first page",
            format!("{ORACLE_PATH}?oracleSpecId={spec}&pagination.first={PAGE}"),
        ),
        PageCase::one(
            "spec 0, latest value",
            format!("{ORACLE_PATH}?oracleSpecId={spec}&pagination.first=1"),
        ),
        PageCase {
            name: DISTINCT_CASE,
            paths: Arc::clone(&distinct),
            walks: false,
        },
        PageCase {
            name: WALKS_CASE,
            paths: distinct,
            walks: true,
        },
    ]
}

/// How much to measure per page.
pub(crate) struct Plan {
    /// Sequential requests for the latency percentiles.
    pub(crate) requests: u32,
    /// Length of each throughput run.
    pub(crate) throughput: Duration,
}

/// Figures of one page request.
#[derive(Debug, Serialize)]
pub(crate) struct PageResult {
    pub(crate) name: &'static str,
    /// The first of the case's paths.
    pub(crate) path: String,
    /// The distinct pages asked in turn.
    pub(crate) distinct_paths: usize,
    /// The body of the last answer (of one page of the case).
    pub(crate) body_bytes: usize,
    /// One client, sequential requests on a keep-alive connection.
    pub(crate) latency: Summary,
    pub(crate) throughput: Vec<Throughput>,
}

/// Requests per second with `clients` keep-alive connections asking back to back.
#[derive(Debug, Serialize)]
pub(crate) struct Throughput {
    pub(crate) clients: u32,
    pub(crate) requests: u64,
    pub(crate) seconds: f64,
    pub(crate) per_sec: f64,
}

/// The clients of the throughput runs.
pub(crate) const CLIENTS: [u32; 2] = [1, 4];

/// Measures every case: first the latencies, the cases' requests interleaved (one of each in
/// turn, each case on its own keep-alive connection) so that the noise of a shared machine
/// falls on all of them alike and their ratios hold; then each case's throughput.
pub(crate) async fn measure(
    addr: SocketAddr,
    cases: &[PageCase],
    plan: &Plan,
) -> Result<Vec<PageResult>> {
    let mut connections = Vec::with_capacity(cases.len());
    let mut bodies = vec![Vec::new(); cases.len()];
    for (case, body) in cases.iter().zip(&mut bodies) {
        let mut connection = Connection::connect(addr, FAST_BUFFER).await?;
        for round in 0..WARM_UP as usize {
            let path = nth(&case.paths, case.latency_start() + round);
            request(&mut connection, path, body).await?;
        }
        connections.push(connection);
    }
    let mut samples = vec![Vec::with_capacity(plan.requests as usize); cases.len()];
    let started = Instant::now();
    // The warm-up asked the first pages of a round-robin case; the timed requests go on after.
    for round in WARM_UP as usize..(WARM_UP + plan.requests) as usize {
        if started.elapsed() > LATENCY_TIME_LIMIT {
            break;
        }
        for (idx, case) in cases.iter().enumerate() {
            let path = nth(&case.paths, case.latency_start() + round);
            let sent = Instant::now();
            request(&mut connections[idx], path, &mut bodies[idx]).await?;
            samples[idx].push(sent.elapsed());
        }
    }
    drop(connections);

    let mut results = Vec::with_capacity(cases.len());
    for ((case, body), samples) in cases.iter().zip(bodies).zip(samples) {
        eprintln!("bench: oracle page {} (throughput)", case.name);
        let mut throughput = Vec::new();
        for clients in CLIENTS {
            let run = throughput_run(addr, &case.paths, case.walks, clients, plan.throughput);
            throughput.push(run.await?);
        }
        results.push(PageResult {
            name: case.name,
            path: case.path().to_owned(),
            distinct_paths: case.paths.len(),
            body_bytes: body.len(),
            latency: Summary::of(&samples),
            throughput,
        });
    }
    Ok(results)
}

/// The path of a round-robin case's `round`th request.
fn nth(paths: &[String], round: usize) -> &str {
    &paths[round % paths.len()]
}

/// `clients` keep-alive connections asking back to back for `duration`: for the next of
/// `paths` in turn, shared by all clients, so that with several paths no two clients ask for
/// the same page at once and every page is asked once per round; or, with `walks`, each
/// client for the next of its own share of `paths` (the `c`th of `clients` starts at the
/// `c`th share and goes on in order).
pub(crate) async fn throughput_run(
    addr: SocketAddr,
    paths: &Arc<[String]>,
    walks: bool,
    clients: u32,
    duration: Duration,
) -> Result<Throughput> {
    let started = Instant::now();
    let deadline = started + duration;
    let shared = Arc::new(AtomicUsize::new(0));
    let mut tasks = JoinSet::new();
    for client in 0..clients as usize {
        let paths = Arc::clone(paths);
        let next = if walks {
            Arc::new(AtomicUsize::new(client * paths.len() / clients as usize))
        } else {
            Arc::clone(&shared)
        };
        tasks.spawn(async move {
            let mut connection = Connection::connect(addr, FAST_BUFFER).await?;
            let mut body = Vec::new();
            let mut n_requests = 0u64;
            while Instant::now() < deadline && n_requests < MAX_REQUESTS_PER_CLIENT {
                let path = nth(&paths, next.fetch_add(1, Ordering::Relaxed));
                request(&mut connection, path, &mut body).await?;
                n_requests += 1;
            }
            Ok::<_, anyhow::Error>(n_requests)
        });
    }
    let mut requests = 0;
    while let Some(joined) = tasks.join_next().await {
        requests += joined.context("a client task failed")??;
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(Throughput {
        clients,
        requests,
        seconds,
        per_sec: requests as f64 / seconds.max(1e-9),
    })
}

/// One GET that must answer 200.
pub(crate) async fn request(
    connection: &mut Connection,
    path: &str,
    body: &mut Vec<u8>,
) -> Result<()> {
    let status = tokio::time::timeout(REQUEST_TIMEOUT, connection.get(path, Accept::Json, body))
        .await
        .with_context(|| format!("{path}: no answer within {REQUEST_TIMEOUT:?}"))??;
    if status != 200 {
        bail!(
            "{path}: status {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(500)])
        );
    }
    Ok(())
}

/// `v2ListOracleDataResponse`, reduced to what the walk needs.
#[derive(Deserialize)]
struct ListResponse {
    #[serde(rename = "oracleData")]
    oracle_data: OracleConnection,
}

#[derive(Deserialize)]
struct OracleConnection {
    edges: Vec<EdgeCursor>,
    #[serde(rename = "pageInfo")]
    page_info: PageInfo,
}

/// An edge, reduced to its cursor.
#[derive(Deserialize)]
struct EdgeCursor {
    #[serde(rename = "node")]
    _node: IgnoredAny,
    cursor: String,
}

#[derive(Deserialize)]
struct PageInfo {
    #[serde(rename = "hasNextPage")]
    has_next_page: bool,
    #[serde(rename = "endCursor")]
    end_cursor: String,
}

/// What the walk through the listing found.
pub(crate) struct Walk {
    /// The cursor at 90% depth.
    pub(crate) deep_cursor: String,
    /// The rows walked to reach it.
    pub(crate) walked: u64,
    /// The cursor of every [`PAGE`]th row from the start, at most [`DISTINCT_PAGES`]: each
    /// starts another page of [`PAGE`].
    pub(crate) page_cursors: Vec<String>,
}

/// Walks the listing (newest first) in pages of 5000 until 90% of `total` rows, and returns
/// the cursor there, the rows walked and the cursors of the pages of [`PAGE`] on the way.
pub(crate) async fn walk(addr: SocketAddr, total: u64) -> Result<Walk> {
    let target = total * 9 / 10;
    anyhow::ensure!(target > 0, "the dataset has too few oracle data to walk");
    let mut connection = Connection::connect(addr, FAST_BUFFER).await?;
    let mut body = Vec::new();
    let mut cursor: Option<String> = None;
    let mut walked = 0;
    let mut page_cursors = Vec::with_capacity(DISTINCT_PAGES);
    // A few pages of slack: a short page before the end would not stop the walk early.
    for _ in 0..target.div_ceil(WALK_PAGE) + 10 {
        // The last page is cut to land on the target exactly.
        let size = (target - walked).min(WALK_PAGE);
        let path = match &cursor {
            None => format!("{ORACLE_PATH}?pagination.first={size}"),
            Some(after) => {
                format!("{ORACLE_PATH}?pagination.first={size}&pagination.after={after}")
            }
        };
        request(&mut connection, &path, &mut body).await?;
        let page: ListResponse = serde_json::from_slice(&body)
            .with_context(|| format!("{path}: unexpected response"))?;
        for edge in page.oracle_data.edges {
            walked += 1;
            if walked % u64::from(PAGE) == 0 && page_cursors.len() < DISTINCT_PAGES {
                page_cursors.push(edge.cursor);
            }
        }
        cursor = Some(page.oracle_data.page_info.end_cursor);
        if !page.oracle_data.page_info.has_next_page || walked >= target {
            break;
        }
    }
    let cursor = cursor
        .filter(|cursor| !cursor.is_empty())
        .context("the oracle listing is empty")?;
    if walked < target {
        eprintln!("bench: warning: the listing ended after {walked} rows, short of 90% of {total}");
    }
    anyhow::ensure!(
        !page_cursors.is_empty(),
        "the listing holds too few data for a page after a cursor"
    );
    Ok(Walk {
        deep_cursor: cursor,
        walked,
        page_cursors,
    })
}
