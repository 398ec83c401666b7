//! Per-client rate limits, as Vega's data node applies them (its `[API.RateLimit]`).
//!
//! Each client address (see `client.rs` for how it is found) has a token bucket of `burst`
//! tokens, full at first and refilled at `rate` tokens a second. A request takes a token; one
//! that finds the bucket empty is refused with 429. Each refusal takes a token from a second
//! bucket of the same size and rate; a refusal that finds that one empty too bans the address
//! for `ban_for`, during which every request is refused with 403 and counts for nothing. A
//! `ban_for` of zero never bans (Vega's rule).
//!
//! Memory: at most `max_clients` addresses are tracked, in least-recently-used order; a new
//! address beyond that forgets the one heard from least recently, and an address not heard from
//! for `ttl` (and not banned) is forgotten as soon as it is the least recent. Each costs at most
//! [`BYTES_PER_CLIENT`]. A forgotten address starts again with full buckets: a flood of new
//! addresses can free a limited one early, never make the memory grow.
//!
//! Time comes from a [`Clock`], so that tests move it instead of sleeping.

use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hashlink::LruCache;
use hyper::HeaderMap;
use hyper::header::{HeaderName, HeaderValue};

use crate::client::IpRanges;
use crate::error::ApiError;

/// Upper bound of the memory one tracked address takes: its entry, the map's links and its
/// slot in the hash table (a test keeps it true).
pub const BYTES_PER_CLIENT: usize = 128;

/// Where the limiter reads the time.
pub trait Clock: Send + Sync {
    /// The current instant; never goes backwards.
    fn now(&self) -> Instant;
}

/// The system's monotonic clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// Per-client rate limits.
#[derive(Clone, Debug)]
pub struct RateLimitConfig {
    /// Whether clients are limited at all.
    pub enabled: bool,
    /// Tokens added to a client's bucket each second: the sustained request rate. Positive.
    pub rate: f64,
    /// Size of a client's bucket: the requests it may make at once. At least 1.
    pub burst: u32,
    /// How long an address may stay silent before its buckets are forgotten.
    pub ttl: Duration,
    /// How long an address that kept asking while refused is banned; zero never bans.
    pub ban_for: Duration,
    /// Addresses tracked at most, each taking at most [`BYTES_PER_CLIENT`]. At least 1.
    pub max_clients: usize,
    /// Client addresses never limited: by default the machine itself (a loopback client with
    /// no forwarded address), so that local tools, tests and the benchmark are not throttled.
    pub exempt: IpRanges,
}

impl Default for RateLimitConfig {
    /// Vega's defaults (on, 20 requests a second, bursts of 100, forgotten after an hour,
    /// banned for ten minutes), room for 65 536 addresses (8 MiB), loopback exempt.
    fn default() -> Self {
        Self {
            enabled: true,
            rate: 20.0,
            burst: 100,
            ttl: Duration::from_secs(3600),
            ban_for: Duration::from_secs(600),
            max_clients: 65_536,
            exempt: IpRanges(vec![
                "127.0.0.0/8".parse().expect("a valid range"),
                "::1".parse().expect("a valid range"),
            ]),
        }
    }
}

/// What became of one request of a limited client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Served, with this many whole tokens left.
    Allowed { remaining: u32 },
    /// Refused with 429: the bucket is empty.
    Limited,
    /// Refused with 403: the address is banned.
    Banned,
}

/// The verdict on a request and what its answer tells about the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Decision {
    pub(crate) verdict: Verdict,
    /// Requests a second, for `RateLimit-Limit`.
    limit: u32,
    /// Seconds until the next token (or the end of the ban), for `RateLimit-Reset` and
    /// `Retry-After`.
    reset: u32,
}

static RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
static RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
static RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");

impl Decision {
    /// Adds `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` to an answer.
    pub(crate) fn decorate(&self, headers: &mut HeaderMap) {
        let remaining = match self.verdict {
            Verdict::Allowed { remaining } => remaining,
            Verdict::Limited | Verdict::Banned => 0,
        };
        headers.insert(&RATELIMIT_LIMIT, HeaderValue::from(self.limit));
        headers.insert(&RATELIMIT_REMAINING, HeaderValue::from(remaining));
        headers.insert(&RATELIMIT_RESET, HeaderValue::from(self.reset));
    }

    /// The error a refused request is answered with.
    pub(crate) fn refusal(&self) -> Option<ApiError> {
        let retry_after = self.reset;
        match self.verdict {
            Verdict::Allowed { .. } => None,
            Verdict::Limited => Some(ApiError::RateLimited { retry_after }),
            Verdict::Banned => Some(ApiError::Banned { retry_after }),
        }
    }
}

/// The buckets of every tracked client.
pub(crate) struct RateLimiter {
    config: RateLimitConfig,
    clock: Arc<dyn Clock>,
    clients: Mutex<LruCache<IpAddr, Client>>,
}

/// One address's two buckets, refilled together when it is heard from.
#[derive(Debug)]
struct Client {
    /// Tokens for requests.
    served: f64,
    /// Tokens for refusals; an empty bucket bans.
    refused: f64,
    /// When the buckets were last refilled: when the address was last heard from.
    at: Instant,
    banned_until: Option<Instant>,
}

impl RateLimiter {
    pub(crate) fn new(config: RateLimitConfig, clock: Arc<dyn Clock>) -> Self {
        let clients = Mutex::new(LruCache::new(config.max_clients.max(1)));
        Self {
            config,
            clock,
            clients,
        }
    }

    /// The verdict on a request from `addr`; `None` when the limits are off or the address is
    /// exempt.
    pub(crate) fn check(&self, addr: IpAddr) -> Option<Decision> {
        if !self.config.enabled || self.config.exempt.contains(addr) {
            return None;
        }
        let now = self.clock.now();
        let rate = self.config.rate;
        let burst = f64::from(self.config.burst);
        let mut clients = self.lock();
        self.forget_silent(&mut clients, now);
        if clients.get_mut(&addr).is_none() {
            let full = Client {
                served: burst,
                refused: burst,
                at: now,
                banned_until: None,
            };
            clients.insert(addr, full);
        }
        let client = clients
            .get_mut(&addr)
            .expect("the address was just inserted");
        let gained = now.saturating_duration_since(client.at).as_secs_f64() * rate;
        client.served = (client.served + gained).min(burst);
        client.refused = (client.refused + gained).min(burst);
        client.at = client.at.max(now);
        let limit = whole_seconds(rate.round()).max(1);
        if let Some(until) = client.banned_until {
            if now < until {
                return Some(Decision {
                    verdict: Verdict::Banned,
                    limit,
                    reset: whole_seconds((until - now).as_secs_f64()),
                });
            }
            client.banned_until = None;
        }
        let verdict = if client.served >= 1.0 {
            client.served -= 1.0;
            Verdict::Allowed {
                remaining: whole_tokens(client.served),
            }
        } else if self.config.ban_for.is_zero() || client.refused >= 1.0 {
            client.refused = (client.refused - 1.0).max(0.0);
            Verdict::Limited
        } else {
            client.banned_until = Some(now + self.config.ban_for);
            tracing::info!(client = %addr, ban_secs = self.config.ban_for.as_secs(), "banned for requesting past the rate limit");
            return Some(Decision {
                verdict: Verdict::Banned,
                limit,
                reset: whole_seconds(self.config.ban_for.as_secs_f64()),
            });
        };
        // The time until the bucket holds a whole token more than now.
        let to_next = (1.0 - client.served.fract()) / rate;
        Some(Decision {
            verdict,
            limit,
            reset: whole_seconds(to_next),
        })
    }

    /// Forgets the least recent addresses while they have been silent for the TTL and are not
    /// banned: the list is in the order they were heard from, so the first that is not done
    /// ends the walk.
    fn forget_silent(&self, clients: &mut LruCache<IpAddr, Client>, now: Instant) {
        while let Some((_, oldest)) = clients.iter().next() {
            let silent = now.saturating_duration_since(oldest.at) >= self.config.ttl;
            let banned = oldest.banned_until.is_some_and(|until| now < until);
            if !silent || banned {
                break;
            }
            clients.remove_lru();
        }
    }

    fn lock(&self) -> MutexGuard<'_, LruCache<IpAddr, Client>> {
        // Every change to an entry is a few plain stores: a panic cannot leave it half-written.
        self.clients
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    #[cfg(test)]
    pub(crate) fn tracked(&self) -> usize {
        self.lock().len()
    }
}

/// Seconds, rounded up, at least 1: what `Retry-After` and `RateLimit-Reset` can say.
fn whole_seconds(seconds: f64) -> u32 {
    // `as` saturates, and turns NaN into 0.
    (seconds.ceil() as u32).max(1)
}

/// Whole tokens in a bucket.
fn whole_tokens(tokens: f64) -> u32 {
    tokens.floor() as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::ManualClock;
    use std::net::Ipv4Addr;

    fn limiter(config: RateLimitConfig) -> (RateLimiter, Arc<ManualClock>) {
        let clock = ManualClock::new();
        (RateLimiter::new(config, clock.clone()), clock)
    }

    fn small() -> RateLimitConfig {
        RateLimitConfig {
            rate: 2.0,
            burst: 3,
            ban_for: Duration::from_secs(60),
            ..RateLimitConfig::default()
        }
    }

    const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 9));

    fn verdicts(limiter: &RateLimiter, n: usize) -> Vec<Verdict> {
        (0..n)
            .map(|_| limiter.check(CLIENT).unwrap().verdict)
            .collect()
    }

    #[test]
    fn a_burst_passes_then_the_bucket_refills_at_the_rate() {
        let (limiter, clock) = limiter(small());
        let allowed = |remaining| Verdict::Allowed { remaining };
        assert_eq!(
            verdicts(&limiter, 4),
            [allowed(2), allowed(1), allowed(0), Verdict::Limited]
        );
        let refused = limiter.check(CLIENT).unwrap();
        assert_eq!(refused.refusal().unwrap().to_string(), "rate limited");
        // Half a second brings one token at 2 a second.
        clock.advance(Duration::from_millis(500));
        assert_eq!(verdicts(&limiter, 2), [allowed(0), Verdict::Limited]);
        // Long silence fills the bucket, no more.
        clock.advance(Duration::from_secs(30));
        assert_eq!(
            verdicts(&limiter, 4),
            [allowed(2), allowed(1), allowed(0), Verdict::Limited]
        );
    }

    #[test]
    fn headers_tell_the_limit_what_is_left_and_when_more_comes() {
        let config = RateLimitConfig {
            rate: 0.25,
            burst: 2,
            ..small()
        };
        let (limiter, _clock) = limiter(config);
        let mut headers = HeaderMap::new();
        limiter.check(CLIENT).unwrap().decorate(&mut headers);
        assert_eq!(headers["ratelimit-limit"], "1");
        assert_eq!(headers["ratelimit-remaining"], "1");
        assert_eq!(headers["ratelimit-reset"], "4");
        limiter.check(CLIENT).unwrap();
        let refused = limiter.check(CLIENT).unwrap();
        refused.decorate(&mut headers);
        assert_eq!(headers["ratelimit-remaining"], "0");
        assert_eq!(headers["ratelimit-reset"], "4");
        assert!(matches!(
            refused.refusal(),
            Some(ApiError::RateLimited { retry_after: 4 })
        ));

        let (vega, _clock) = limiter_default();
        vega.check(CLIENT).unwrap().decorate(&mut headers);
        assert_eq!(headers["ratelimit-limit"], "20");
        assert_eq!(headers["ratelimit-remaining"], "99");
        assert_eq!(headers["ratelimit-reset"], "1");
    }

    fn limiter_default() -> (RateLimiter, Arc<ManualClock>) {
        limiter(RateLimitConfig::default())
    }

    #[test]
    fn refusing_to_stop_bans_until_ban_for_has_passed() {
        let (limiter, clock) = limiter(small());
        // Three served, three refused (the second bucket), then the ban.
        let mut seen = verdicts(&limiter, 7);
        assert_eq!(seen.pop(), Some(Verdict::Banned));
        assert_eq!(seen[3..], [Verdict::Limited; 3]);
        let banned = limiter.check(CLIENT).unwrap();
        assert_eq!(banned.verdict, Verdict::Banned);
        assert!(matches!(
            banned.refusal(),
            Some(ApiError::Banned { retry_after: 60 })
        ));
        // A ban outlasts refilled buckets.
        clock.advance(Duration::from_secs(59));
        let banned = limiter.check(CLIENT).unwrap();
        assert_eq!((banned.verdict, banned.reset), (Verdict::Banned, 1));
        clock.advance(Duration::from_secs(1));
        assert_eq!(
            limiter.check(CLIENT).unwrap().verdict,
            Verdict::Allowed { remaining: 2 }
        );
    }

    #[test]
    fn no_ban_when_ban_for_is_zero() {
        let config = RateLimitConfig {
            ban_for: Duration::ZERO,
            ..small()
        };
        let (limiter, _clock) = limiter(config);
        assert!(
            verdicts(&limiter, 50)[3..]
                .iter()
                .all(|v| *v == Verdict::Limited)
        );
    }

    #[test]
    fn exempt_addresses_and_disabled_limits_are_not_counted() {
        let (limiter, _clock) = limiter(small());
        for addr in ["127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"] {
            for _ in 0..10 {
                assert_eq!(limiter.check(addr.parse().unwrap()), None, "{addr}");
            }
        }
        assert_eq!(limiter.tracked(), 0);
        let off = RateLimitConfig {
            enabled: false,
            ..small()
        };
        let (limiter, _clock) = self::limiter(off);
        assert_eq!(limiter.check(CLIENT), None);
        let none_exempt = RateLimitConfig {
            exempt: IpRanges::default(),
            ..small()
        };
        let (limiter, _clock) = self::limiter(none_exempt);
        assert!(limiter.check("127.0.0.1".parse().unwrap()).is_some());
    }

    #[test]
    fn memory_is_bounded_by_max_clients_and_silence_forgets() {
        let config = RateLimitConfig {
            max_clients: 100,
            ttl: Duration::from_secs(10),
            ..small()
        };
        let (limiter, clock) = limiter(config);
        // The first client spends its bucket.
        let _ = verdicts(&limiter, 4);
        for n in 0..10_000u32 {
            limiter.check(IpAddr::from(n.to_be_bytes())).unwrap();
            assert!(limiter.tracked() <= 100);
        }
        // Pushed out by newer addresses, it starts again with a full bucket.
        assert_eq!(verdicts(&limiter, 1), [Verdict::Allowed { remaining: 2 }]);
        // Silence for the TTL forgets everyone but the address heard from now.
        clock.advance(Duration::from_secs(10));
        assert_eq!(verdicts(&limiter, 1), [Verdict::Allowed { remaining: 2 }]);
        assert_eq!(limiter.tracked(), 1);
    }

    #[test]
    fn silence_does_not_forget_a_ban() {
        let config = RateLimitConfig {
            ttl: Duration::from_secs(1),
            ..small()
        };
        let (limiter, clock) = limiter(config);
        let _ = verdicts(&limiter, 7);
        clock.advance(Duration::from_secs(30));
        let other = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 1));
        limiter.check(other).unwrap();
        assert_eq!(limiter.tracked(), 2);
        assert_eq!(limiter.check(CLIENT).unwrap().verdict, Verdict::Banned);
    }

    #[test]
    fn bytes_per_client_bounds_an_entry() {
        // The entry and the linked map's two links, in one allocation rounded up to 16 bytes;
        // the hash table's pointer and control byte, in a table at least 7/16 full (it doubles
        // when 7/8 full).
        let node = (size_of::<(IpAddr, Client)>() + 2 * size_of::<usize>()).next_multiple_of(16);
        let slot = (size_of::<usize>() + 1) * 16 / 7 + 1;
        assert!(node + slot <= BYTES_PER_CLIENT, "{node} + {slot}");
    }
}
