//! The flags of `serve`, and the configurations of the crates they become.
//!
//! Defaults are written once, in the `Default` impls of [`AppConfig`] and [`ServeConfig`]: the
//! flags read theirs from there, so that `--help` and an embedder's default cannot disagree.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use clap::builder::RangedU64ValueParser;
use http_api::{AllowedOrigins, AppConfig, BuildInfo, ServeConfig};

use super::limits::RateLimitArgs;

/// Flags of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Database to serve: an SQLite file, or a postgres:// URL [default: ./datanode.sqlite,
    /// created with demo data if missing and no --ingest is given]. An explicit path is never
    /// filled with demo data; a PostgreSQL database must have been migrated or ingested into.
    #[arg(long, env = "DATANODE_DB", value_name = "PATH|URL")]
    pub db: Option<String>,
    /// Address to listen on.
    #[arg(long, env = "DATANODE_LISTEN", default_value = "127.0.0.1:3008")]
    pub listen: SocketAddr,
    /// Once listening, write the bound address (e.g. 127.0.0.1:3008) and a newline to this file,
    /// atomically: for scripts that listen on port 0.
    #[arg(long, env = "DATANODE_ADDR_FILE", value_name = "PATH")]
    pub addr_file: Option<PathBuf>,
    /// Also ingest this event stream (as `server ingest` reads it: a buffer file, gzip, a
    /// directory, NDJSON, - for standard input, or tcp://HOST:PORT for a Vega core node's
    /// event socket) while serving; readers see each block once it is whole.
    #[arg(long, env = "DATANODE_INGEST", value_name = "PATH|-|tcp://HOST:PORT")]
    pub ingest: Option<String>,
    /// With --ingest tcp://HOST:PORT: once the event socket listens, write its bound address
    /// (e.g. tcp://127.0.0.1:3005) and a newline to this file, atomically.
    #[arg(long, env = "DATANODE_INGEST_ADDR_FILE", value_name = "PATH")]
    pub ingest_addr_file: Option<PathBuf>,
    /// With --ingest: how the stream is read and what the writer keeps.
    #[command(flatten)]
    pub tuning: crate::ingest::IngestTuning,
    /// Origins whose pages may read the answers: a comma-separated list, or * for any.
    #[arg(long, env = "DATANODE_CORS_ORIGINS", default_value = "*")]
    cors_origins: String,
    /// Exports allowed at once; more get 503 with Retry-After.
    #[arg(long, env = "DATANODE_MAX_EXPORTS",
          default_value_t = AppConfig::default().max_concurrent_exports)]
    max_exports: usize,
    /// Oracle data pages read at once; more wait up to a second, then get 503 with
    /// Retry-After.
    #[arg(long, env = "DATANODE_MAX_PAGES",
          default_value_t = AppConfig::default().max_concurrent_pages)]
    max_pages: usize,
    /// MiB of finished oracle data pages kept in memory, so that a page asked again before the
    /// next commit is answered without reading the database, and a walk's next two pages are
    /// read ahead with each page a walk asks for; 0 turns the cache off, and the reading ahead
    /// with it. On PostgreSQL the server learns of commits from the writer's
    /// announcements (a hot standby by polling, within a second).
    #[arg(long, env = "DATANODE_PAGE_CACHE_MIB",
          default_value_t = AppConfig::default().page_cache_bytes >> 20)]
    page_cache_mib: usize,
    /// Connections served at once. When all are taken, the oldest connection that has not sent a
    /// request yet is closed to make room; if every one has, new ones wait in the listen
    /// backlog.
    #[arg(long, env = "DATANODE_MAX_CONNECTIONS",
          default_value_t = ServeConfig::default().max_connections,
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    max_connections: usize,
    /// Seconds a request head may take to arrive: the first counted from the connection's
    /// accept (a connection that sends nothing is closed then), later ones from when the server
    /// waits for them.
    #[arg(long, env = "DATANODE_HEADER_TIMEOUT_SECS",
          default_value_t = ServeConfig::default().header_read_timeout.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    header_timeout_secs: u64,
    /// Seconds a connection that has sent requests may stay open with none in flight.
    #[arg(long, env = "DATANODE_IDLE_TIMEOUT_SECS",
          default_value_t = ServeConfig::default().idle_timeout.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    idle_timeout_secs: u64,
    /// Largest request head accepted, in bytes (431 beyond it).
    #[arg(long, env = "DATANODE_MAX_HEADER_BYTES",
          default_value_t = ServeConfig::default().max_header_bytes,
          value_parser = RangedU64ValueParser::<usize>::new().range(8192..))]
    max_header_bytes: usize,
    /// Seconds that requests in flight get to finish after SIGTERM or SIGINT.
    #[arg(long, env = "DATANODE_GRACE_SECS",
          default_value_t = ServeConfig::default().grace.as_secs())]
    grace_secs: u64,
    /// Serve /metrics (and /health) on this address instead of the public one, which then
    /// answers /metrics with 404 [default: off; Vega's data node uses port 2112].
    #[arg(long, env = "DATANODE_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// Once the metrics address listens, write it and a newline to this file, atomically, as
    /// --addr-file does for the public one.
    #[arg(
        long,
        env = "DATANODE_METRICS_ADDR_FILE",
        value_name = "PATH",
        requires = "metrics_listen"
    )]
    pub metrics_addr_file: Option<PathBuf>,
    /// Answer /health with 503 while the last stored block's vega time is more than this many
    /// seconds behind this machine's clock (or no block is stored), so that a load balancer
    /// drops a replica that fell behind [default: off].
    #[arg(long, env = "DATANODE_MAX_LAG_SECS", value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..))]
    max_lag_secs: Option<u64>,
    #[command(flatten)]
    rate_limit: RateLimitArgs,
}

impl ServeArgs {
    /// Reads that may run at once: an export per permit and a page per slot (this sizes the
    /// PostgreSQL connection pool).
    pub fn max_readers(&self) -> usize {
        self.max_exports.saturating_add(self.max_pages)
    }

    /// The service's configuration.
    pub fn app_config(&self) -> AppConfig {
        AppConfig {
            max_concurrent_exports: self.max_exports,
            max_concurrent_pages: self.max_pages,
            cors: AllowedOrigins::parse(&self.cors_origins),
            page_cache_bytes: self.page_cache_mib.saturating_mul(1 << 20),
            build: BuildInfo {
                version: env!("CARGO_PKG_VERSION").to_owned(),
                commit: crate::COMMIT.to_owned(),
            },
            metrics_apart: self.metrics_listen.is_some(),
            max_lag: self.max_lag_secs.map(Duration::from_secs),
            rate_limit: self.rate_limit.config(),
            trusted_proxies: self.rate_limit.trusted_proxies.clone(),
        }
    }

    /// The listener's configuration.
    pub fn serve_config(&self) -> ServeConfig {
        ServeConfig {
            grace: Duration::from_secs(self.grace_secs),
            max_connections: self.max_connections,
            header_read_timeout: Duration::from_secs(self.header_timeout_secs),
            idle_timeout: Duration::from_secs(self.idle_timeout_secs),
            max_header_bytes: self.max_header_bytes,
        }
    }
}
