//! A raw hyper service answering two operations of Vega's data-node REST API v2, wire-compatible
//! with Vega's gateway, and what operators expect around them.
//!
//! Endpoints:
//! - `GET /api/v2/ledgerentry/export?partyId=…[&assetId=…][&dateRange.startTimestamp=…]
//!   [&dateRange.endTimestamp=…]`: a party's ledger entries as a streamed CSV file, or as
//!   newline-delimited `google.api.HttpBody` messages when `Accept` prefers JSON.
//! - `GET /api/v2/oracle/data[?oracleSpecId=…][&pagination.first|after|last|before|newestFirst=…]`:
//!   a cursor-paginated page of oracle data.
//! - `GET /api/v2/openapi.json`: the OpenAPI description of the two operations.
//! - `GET /api/v2/info`: the server's version and commit, as Vega's data node answers it.
//! - `GET /health` (and `HEAD`): `ok` while the store answers and its recent reads have not
//!   kept failing, 503 otherwise.
//! - `GET /metrics`: Prometheus metrics, the process's included. When
//!   [`AppConfig::metrics_apart`] is set, the public service answers it 404 and
//!   [`App::operator`] serves it (with `/health`, and nothing else) on another listener.
//!
//! Every query parameter is read by its JSON name (above) and by its proto name (`party_id`,
//! `date_range.start_timestamp`, `oracle_spec_id`, …), as Vega's gateway reads them; one given
//! twice is refused.
//!
//! `OPTIONS` on any of them answers CORS preflights; anything else answers 404 (405 with `Allow`
//! for a known path with another method) in Vega's error shape. Every answer under `/api/v2`,
//! errors included, carries Vega's `X-Block-Height` and `X-Block-Timestamp` (`freshness.rs`). Every answer carries CORS headers, JSON
//! answers are indented with `?pretty`, and bodies are compressed (gzip, zstd or brotli) when
//! `Accept-Encoding` allows, the export as it streams. Oracle data pages are kept in memory while
//! the store's data version stays the same, so that a page asked again costs no read.
//!
//! Every request but `/health` and `/metrics` counts against its client's rate limit (a token
//! bucket per address and a ban for clients that keep asking, as Vega's data node does;
//! `rate_limit.rs`), the client being the connection's [`Peer`] or whom a trusted proxy
//! forwards for (`client.rs`). Every answer carries an `X-Request-Id`, the client's or a made
//! one, also in the access log line with the client's address (`request_id.rs`, `observe.rs`).
//!
//! The service talks to storage only through the `storage` traits; it never sees SQL. Blocking
//! store calls run on tokio's blocking threads, but for pages of a store whose pages are local
//! (`OracleStore::pages_are_local`), read on the async worker when plain and of at most 1000
//! rows, since the hand-off would cost more than the read. [`serve`] runs the service on a
//! listener with connection limits and timeouts until a shutdown future resolves, then drains
//! connections.
//!
//! This crate must not open databases, read configuration or handle signals: the binary does.

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod accept;
mod body;
mod client;
mod coding;
mod cors;
mod error;
mod export;
mod freshness;
mod health;
mod info;
mod metrics;
mod observe;
mod openapi;
mod oracle;
mod page_cache;
mod query;
mod rate_limit;
mod request_id;
mod respond;
mod server;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use storage::{Health, LedgerStore, OracleStore, ReadStore};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub use body::{Body, BodyError};
pub use client::{InvalidRange, IpRange, IpRanges, Peer};
pub use cors::AllowedOrigins;
pub use error::{ApiError, ErrorShape};
pub use info::BuildInfo;
pub use metrics::{IngestProgress, Metrics};
pub use rate_limit::{BYTES_PER_CLIENT, Clock, RateLimitConfig, SystemClock};
pub use request_id::MAX_REQUEST_ID;
pub use server::{ServeConfig, serve};

use crate::client::client_addr;
use crate::coding::Coding;
use crate::metrics::Route;
use crate::observe::Exchange;
use crate::page_cache::PageCache;
use crate::query::Query;
use crate::rate_limit::RateLimiter;
use crate::request_id::{RequestIds, X_REQUEST_ID};
use crate::respond::{Encoded, Style, whole};

/// The path of the ledger export.
pub const EXPORT_PATH: &str = "/api/v2/ledgerentry/export";
/// The path of the oracle data listing.
pub const ORACLE_DATA_PATH: &str = "/api/v2/oracle/data";
/// The path of the OpenAPI document.
pub const OPENAPI_PATH: &str = "/api/v2/openapi.json";
/// The path of the server's version and commit.
pub const INFO_PATH: &str = "/api/v2/info";
/// The path of the health check.
pub const HEALTH_PATH: &str = "/health";
/// The path of the Prometheus metrics.
pub const METRICS_PATH: &str = "/metrics";

/// Tuning of the service.
#[derive(Clone, Debug)]
pub struct AppConfig {
    /// Exports allowed to run at once; more are refused with 503 and `Retry-After`, so that
    /// exports cannot take every blocking thread and connection from the listing.
    pub max_concurrent_exports: usize,
    /// Oracle data pages read at once; more wait up to [`PAGE_WAIT`], then are refused with
    /// 503 and `Retry-After`, so that a burst of pages cannot take every blocking thread.
    pub max_concurrent_pages: usize,
    /// Origins whose pages may read the answers.
    pub cors: AllowedOrigins,
    /// Bytes of finished oracle data pages kept to answer the same page again until the next
    /// commit (bodies plus a small overhead per page); 0 disables the cache. Only stores that
    /// tell their data version (SQLite) are cached.
    pub page_cache_bytes: usize,
    /// Per-client rate limits.
    pub rate_limit: RateLimitConfig,
    /// Proxies whose `X-Forwarded-For` names the client (Vega's `TrustedProxies`); nobody
    /// else's is believed.
    pub trusted_proxies: IpRanges,
    /// What is running, for `/api/v2/info` and `datanode_build_info`.
    pub build: BuildInfo,
    /// Metrics are served on a listener of their own ([`App::operator`]), so the public service
    /// answers `/metrics` with 404: what the process does is not shown to every client.
    pub metrics_apart: bool,
    /// `/health` answers 503 while the last stored block's vega time is further behind the
    /// wall clock than this (or no block with a time is stored), so that a load balancer drops
    /// a replica that fell behind; `None` (the default) never.
    pub max_lag: Option<Duration>,
}

impl Default for AppConfig {
    fn default() -> Self {
        Self {
            max_concurrent_exports: 16,
            max_concurrent_pages: 32,
            cors: AllowedOrigins::Any,
            page_cache_bytes: 8 << 20,
            rate_limit: RateLimitConfig::default(),
            trusted_proxies: IpRanges(vec!["127.0.0.1".parse().expect("a valid address")]),
            build: BuildInfo::default(),
            metrics_apart: false,
            max_lag: None,
        }
    }
}

/// How long a page waits for one of the [`AppConfig::max_concurrent_pages`] slots before it is
/// refused: pages take milliseconds, so a short wait rides out a burst without queueing clients
/// behind a store that has stalled.
pub const PAGE_WAIT: Duration = Duration::from_secs(1);

/// Seconds a refused client is asked to wait before retrying.
const BUSY_RETRY_AFTER: u32 = 1;

/// The service: cheap to clone, one per connection.
#[derive(Clone)]
pub struct App {
    inner: Arc<Inner>,
    surface: Surface,
}

/// Which routes an [`App`] answers; the others answer 404 as unknown paths do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Surface {
    /// Every route: one listener serves everything.
    All,
    /// Every route but `/metrics`, which another listener serves.
    Public,
    /// `/metrics` and `/health` only: the operator's listener.
    Operator,
}

impl Surface {
    fn serves(self, route: Route) -> bool {
        match self {
            Surface::All => true,
            Surface::Public => route != Route::Metrics,
            Surface::Operator => matches!(route, Route::Metrics | Route::Health),
        }
    }
}

struct Inner {
    ledger: Arc<dyn LedgerStore>,
    oracle: Arc<dyn OracleStore>,
    health: Arc<dyn Health>,
    export_permits: Arc<Semaphore>,
    page_permits: Arc<Semaphore>,
    read_health: health::ReadHealth,
    metrics: Arc<Metrics>,
    cors: AllowedOrigins,
    page_cache: PageCache,
    limiter: RateLimiter,
    trusted_proxies: IpRanges,
    request_ids: RequestIds,
    build: BuildInfo,
    max_lag: Option<Duration>,
}

impl Route {
    fn of(path: &str) -> Route {
        match path {
            EXPORT_PATH => Route::Export,
            ORACLE_DATA_PATH => Route::OracleData,
            HEALTH_PATH => Route::Health,
            METRICS_PATH => Route::Metrics,
            OPENAPI_PATH => Route::OpenApi,
            INFO_PATH => Route::Info,
            _ => Route::Other,
        }
    }

    /// Whether the route's requests count against the client's rate limit: all but the
    /// health check and the metrics, which monitors poll.
    fn limited(self) -> bool {
        !matches!(self, Route::Health | Route::Metrics)
    }

    /// The error envelope of the route: the export streams, everything else is unary.
    fn error_shape(self) -> ErrorShape {
        match self {
            Route::Export => ErrorShape::Stream,
            _ => ErrorShape::Bare,
        }
    }
}

impl App {
    /// A service over `store`.
    pub fn new(store: Arc<dyn ReadStore>, config: AppConfig) -> Self {
        Self::with_clock(store, config, Arc::new(SystemClock))
    }

    /// A service over `store` whose rate limits read the time from `clock`: tests move it
    /// instead of sleeping.
    pub fn with_clock(store: Arc<dyn ReadStore>, config: AppConfig, clock: Arc<dyn Clock>) -> Self {
        let metrics = Arc::new(Metrics::new());
        metrics.build(&config.build);
        Self {
            surface: if config.metrics_apart {
                Surface::Public
            } else {
                Surface::All
            },
            inner: Arc::new(Inner {
                ledger: store.clone(),
                oracle: store.clone(),
                health: store,
                export_permits: Arc::new(Semaphore::new(config.max_concurrent_exports)),
                page_permits: Arc::new(Semaphore::new(config.max_concurrent_pages)),
                read_health: health::ReadHealth::default(),
                metrics,
                cors: config.cors,
                page_cache: PageCache::new(config.page_cache_bytes),
                limiter: RateLimiter::new(config.rate_limit, clock),
                trusted_proxies: config.trusted_proxies,
                request_ids: RequestIds::new(),
                build: config.build,
                max_lag: config.max_lag,
            }),
        }
    }

    /// The same service for the operator's listener: `/metrics` and `/health` only, sharing
    /// this one's metrics and store.
    pub fn operator(&self) -> App {
        App {
            inner: Arc::clone(&self.inner),
            surface: Surface::Operator,
        }
    }

    /// The service's metrics, for the binary to add the progress of an ingest it runs.
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.inner.metrics)
    }

    /// Answers one request. Never fails: every error becomes a response in Vega's shape.
    ///
    /// The client is the request's [`Peer`] ([`Peer::LOCAL`] without one), or the address it
    /// forwards when it is a trusted proxy.
    pub async fn handle<B>(&self, request: Request<B>) -> Response<Body> {
        let started = Instant::now();
        let route = Some(Route::of(request.uri().path()))
            .filter(|route| self.surface.serves(*route))
            .unwrap_or(Route::Other);
        let peer = request
            .extensions()
            .get::<Peer>()
            .map_or(Peer::LOCAL, |peer| peer.0.ip());
        let client = client_addr(peer, request.headers(), &self.inner.trusted_proxies);
        let request_id = self.inner.request_ids.of(request.headers());
        let limit = route
            .limited()
            .then(|| self.inner.limiter.check(client))
            .flatten();
        let query = Query::parse(request.uri().query());
        let style = Style {
            coding: Coding::negotiate(request.headers()),
            pretty: query.has("pretty"),
        };
        // Taken before the request is served: the answer holds at least the data up to it.
        // With it, in the same look where the store can, the data version a page's cache
        // lookup needs.
        let (tip, tip_version) = if freshness::applies_to(request.uri().path()) {
            self.chain_tip_with_version()
        } else {
            (None, None)
        };
        let mut response = match limit.and_then(|limit| limit.refusal()) {
            Some(refusal) => refusal.into_response(route.error_shape(), style),
            None => {
                self.route(&request, route, &query, style, tip_version)
                    .await
            }
        };
        let headers = response.headers_mut();
        if let Some(tip) = &tip {
            freshness::decorate(tip, headers);
        }
        if let Some(limit) = &limit {
            limit.decorate(headers);
        }
        headers.insert(&X_REQUEST_ID, request_id.clone());
        cors::decorate(&self.inner.cors, request.headers(), headers);
        let exchange = Exchange {
            metrics: self.metrics(),
            route,
            method: request.method().clone(),
            target: Exchange::target(request.uri()),
            client,
            request_id,
            started,
        };
        observe::observe(response, exchange)
    }

    async fn route<B>(
        &self,
        request: &Request<B>,
        route: Route,
        query: &Query<'_>,
        style: Style,
        tip_version: Option<u64>,
    ) -> Response<Body> {
        let method = request.method();
        match (method, route) {
            (_, Route::Other) => ApiError::NotFound.into_response(ErrorShape::Bare, style),
            (&Method::OPTIONS, _) => cors::options(&self.inner.cors, request.headers()),
            (&Method::GET, Route::Export) => export::export(self, request, query, style)
                .await
                .unwrap_or_else(|err| err.into_response(ErrorShape::Stream, style)),
            (&Method::GET, Route::OracleData) => {
                oracle::oracle_data(self, query, style, tip_version)
                    .await
                    .unwrap_or_else(|err| err.into_response(ErrorShape::Bare, style))
            }
            (&Method::GET | &Method::HEAD, Route::Health) => self
                .health_response()
                .await
                .unwrap_or_else(|err| err.into_response(ErrorShape::Bare, style)),
            (&Method::GET, Route::Metrics) => {
                self.inner.metrics.stored_chain(self.chain_tip().as_ref());
                let body = style.compress(self.inner.metrics.render());
                whole(StatusCode::OK, metrics::CONTENT_TYPE, body)
            }
            (&Method::GET, Route::OpenApi) => whole(
                StatusCode::OK,
                "application/json",
                style.json(openapi::document()),
            ),
            (&Method::GET, Route::Info) => whole(
                StatusCode::OK,
                "application/json",
                style.json(self.inner.build.json()),
            ),
            (_, Route::Export) => ApiError::MethodNotAllowed { allow: ALLOW_GET }
                .into_response(ErrorShape::Stream, style),
            (_, Route::Health) => ApiError::MethodNotAllowed {
                allow: "GET, HEAD, OPTIONS",
            }
            .into_response(ErrorShape::Bare, style),
            (_, _) => ApiError::MethodNotAllowed { allow: ALLOW_GET }
                .into_response(ErrorShape::Bare, style),
        }
    }

    /// Whether the store answers.
    pub async fn healthy(&self) -> Result<(), storage::Error> {
        let health = Arc::clone(&self.inner.health);
        tokio::task::spawn_blocking(move || health.check())
            .await
            .map_err(|join| storage::Error::Internal(join.into()))?
    }

    async fn health_response(&self) -> Result<Response<Body>, ApiError> {
        let unhealthy = |reason| ApiError::Unavailable {
            detail: error::detail::NOT_MAPPED,
            message: "store unavailable",
            reason,
            retry_after: None,
        };
        if let Some(failing) = self.inner.read_health.failing() {
            return Err(unhealthy(format!(
                "the last {failing} reads of the store failed"
            )));
        }
        if let Some(max_lag) = self.inner.max_lag
            && let Err(reason) =
                freshness::within(self.chain_tip().as_ref(), max_lag, SystemTime::now())
        {
            return Err(unhealthy(reason));
        }
        self.healthy()
            .await
            .map_err(|err| unhealthy(error::chain(&err)))?;
        let body = Encoded {
            bytes: Bytes::from_static(b"ok"),
            coding: Coding::Identity,
        };
        Ok(whole(StatusCode::OK, "text/plain; charset=utf-8", body))
    }

    fn try_export_permit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        Arc::clone(&self.inner.export_permits)
            .try_acquire_owned()
            .map_err(|_| {
                self.inner.metrics.exports_refused.inc();
                busy("too many exports in progress, retry shortly")
            })
    }

    /// One of the page slots, waiting at most [`PAGE_WAIT`] for it.
    async fn page_permit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        let permits = Arc::clone(&self.inner.page_permits);
        match tokio::time::timeout(PAGE_WAIT, permits.acquire_owned()).await {
            Ok(permit) => Ok(permit.expect("the semaphore is never closed")),
            Err(_) => {
                self.inner.metrics.pages_refused.inc();
                Err(busy(
                    "too many oracle data pages in progress, retry shortly",
                ))
            }
        }
    }

    /// The store's data version, asked inline on the async worker: a store answers it from
    /// memory in microseconds without waiting for its writer (the rule of
    /// `OracleStore::data_version`), less than a hand-off to a blocking thread would cost. A
    /// store that fails to tell is treated as one that cannot: the page is read as without a
    /// cache, and that read reports what is wrong with the store.
    fn data_version(&self) -> Option<u64> {
        self.inner.oracle.data_version().unwrap_or_else(|err| {
            tracing::debug!(error = %err, "no data version; the page is not cached");
            None
        })
    }

    /// How far the store's chain goes, from its memory, inline like [`App::data_version`]
    /// (the rule of `Health::chain_tip`). A store that fails to tell is answered without the
    /// headers: the answer itself reports what is wrong with the store.
    fn chain_tip(&self) -> Option<storage::ChainTip> {
        self.chain_tip_with_version().0
    }

    /// [`App::chain_tip`] and, when the store tells it in the same look, the data version it
    /// belongs to (`Health::chain_tip_with_version`, as fast as `chain_tip`). A store that
    /// fails to tell answers neither.
    fn chain_tip_with_version(&self) -> (Option<storage::ChainTip>, Option<u64>) {
        self.inner
            .health
            .chain_tip_with_version()
            .unwrap_or_else(|err| {
                tracing::debug!(error = %err, "no chain tip; the answer has no block headers");
                (None, None)
            })
    }

    /// Records how a read of the store ended, for `/health` and the metrics.
    fn record_read<T>(&self, result: &Result<T, storage::Error>) {
        self.inner.read_health.record(&self.inner.metrics, result);
    }
}

/// The `Allow` header of the GET-only routes.
const ALLOW_GET: &str = "GET, OPTIONS";

/// The refusal of a request that found every slot of its kind taken.
fn busy(reason: &str) -> ApiError {
    ApiError::Unavailable {
        detail: error::detail::NOT_MAPPED,
        message: "server busy",
        reason: reason.to_owned(),
        retry_after: Some(BUSY_RETRY_AFTER),
    }
}
