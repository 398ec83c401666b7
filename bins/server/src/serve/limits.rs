//! The flags of `serve` for per-client rate limits and trusted proxies.
//!
//! Defaults come from [`RateLimitConfig`]'s and [`AppConfig`]'s `Default` impls, as the other
//! flags' do.

use std::time::Duration;

use clap::builder::RangedU64ValueParser;
use clap::{ArgAction, Args};
use http_api::{AppConfig, IpRanges, RateLimitConfig};

/// Flags of the rate limits, flattened into `serve`'s.
#[derive(Debug, Args)]
pub struct RateLimitArgs {
    /// Limit each client address's requests with a token bucket (every path but /health and
    /// /metrics): true or false.
    #[arg(long, env = "DATANODE_RATE_LIMIT", value_name = "BOOL",
          action = ArgAction::Set,
          default_value_t = RateLimitConfig::default().enabled)]
    rate_limit: bool,
    /// Requests a second a client may make on average (the bucket's refill rate).
    #[arg(long, env = "DATANODE_RATE_LIMIT_RATE", value_name = "PER_SEC",
          default_value_t = RateLimitConfig::default().rate,
          value_parser = positive_rate)]
    rate_limit_rate: f64,
    /// Requests a client may make at once (the bucket's size).
    #[arg(long, env = "DATANODE_RATE_LIMIT_BURST",
          default_value_t = RateLimitConfig::default().burst,
          value_parser = clap::value_parser!(u32).range(1..))]
    rate_limit_burst: u32,
    /// Seconds after which a silent client's buckets are forgotten.
    #[arg(long, env = "DATANODE_RATE_LIMIT_TTL_SECS",
          default_value_t = RateLimitConfig::default().ttl.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    rate_limit_ttl_secs: u64,
    /// Seconds a client that keeps asking while refused is banned (403); 0 never bans.
    #[arg(long, env = "DATANODE_RATE_LIMIT_BAN_SECS",
          default_value_t = RateLimitConfig::default().ban_for.as_secs())]
    rate_limit_ban_secs: u64,
    /// Client addresses tracked at most (128 bytes each); beyond it the least recent is
    /// forgotten.
    #[arg(long, env = "DATANODE_RATE_LIMIT_MAX_CLIENTS",
          default_value_t = RateLimitConfig::default().max_clients,
          value_parser = RangedU64ValueParser::<usize>::new().range(1..))]
    rate_limit_max_clients: usize,
    /// Client addresses and CIDR blocks never limited, comma-separated; empty for none.
    #[arg(long, env = "DATANODE_RATE_LIMIT_EXEMPT", value_name = "LIST",
          default_value_t = RateLimitConfig::default().exempt)]
    rate_limit_exempt: IpRanges,
    /// Proxies (addresses and CIDR blocks, comma-separated) whose X-Forwarded-For names the
    /// client; nobody else's is believed. Empty for none.
    #[arg(long, env = "DATANODE_TRUSTED_PROXIES", value_name = "LIST",
          default_value_t = AppConfig::default().trusted_proxies)]
    pub trusted_proxies: IpRanges,
}

impl RateLimitArgs {
    /// The limits' configuration.
    pub fn config(&self) -> RateLimitConfig {
        RateLimitConfig {
            enabled: self.rate_limit,
            rate: self.rate_limit_rate,
            burst: self.rate_limit_burst,
            ttl: Duration::from_secs(self.rate_limit_ttl_secs),
            ban_for: Duration::from_secs(self.rate_limit_ban_secs),
            max_clients: self.rate_limit_max_clients,
            exempt: self.rate_limit_exempt.clone(),
        }
    }
}

/// A rate: a finite number above zero.
fn positive_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate > 0.0 => Ok(rate),
        _ => Err(format!("{text:?} is not a number above 0")),
    }
}
