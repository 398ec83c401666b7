//! Per-client rate limits and request ids over real sockets: the peer address reaches the
//! limiter, trusted proxies name the client, refusals keep both of Vega's error shapes, and time
//! is a clock the test moves.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_api::{App, AppConfig, Clock, IpRanges, RateLimitConfig, ServeConfig};
use serde_json::json;

use crate::support::{Server, get, mixed};

const ORACLE: &str = "/api/v2/oracle/data?pagination.first=2";

/// A clock that moves only when told.
struct ManualClock(Mutex<Instant>);

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        *self.0.lock().unwrap()
    }
}

impl ManualClock {
    fn advance(&self, by: Duration) {
        *self.0.lock().unwrap() += by;
    }
}

/// A server over the mixed dataset with bursts of `burst`, one token a second and a 30 s ban,
/// whose limiter reads `clock`.
fn limited(burst: u32, exempt: IpRanges) -> (Server, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock(Mutex::new(Instant::now())));
    let config = AppConfig {
        rate_limit: RateLimitConfig {
            rate: 1.0,
            burst,
            ban_for: Duration::from_secs(30),
            exempt,
            ..RateLimitConfig::default()
        },
        ..AppConfig::default()
    };
    let app = App::with_clock(mixed().dataset.store.clone(), config, clock.clone());
    (Server::start_app(app, ServeConfig::default()), clock)
}

#[test]
fn loopback_is_exempt_by_default_and_limited_when_told() {
    let server = &mixed().server;
    for _ in 0..3 {
        let answer = get(server.addr, ORACLE, &[]);
        assert_eq!(answer.status, 200);
        assert_eq!(answer.header("ratelimit-limit"), None);
    }
    let (server, _clock) = limited(2, IpRanges::default());
    let statuses: Vec<u16> = (0..3)
        .map(|_| get(server.addr, ORACLE, &[]).status)
        .collect();
    assert_eq!(statuses, [200, 200, 429]);
}

#[test]
fn clients_behind_the_trusted_proxy_get_their_own_buckets_and_bans() {
    let (server, clock) = limited(2, RateLimitConfig::default().exempt);
    let from = |client: &'static str| [("X-Forwarded-For", client)];
    let alice = from("198.51.100.1");
    let first = get(server.addr, ORACLE, &alice);
    assert_eq!(first.status, 200);
    assert_eq!(first.header("ratelimit-limit"), Some("1"));
    assert_eq!(first.header("ratelimit-remaining"), Some("1"));
    assert_eq!(first.header("ratelimit-reset"), Some("1"));
    assert_eq!(get(server.addr, ORACLE, &alice).status, 200);
    let refused = get(server.addr, ORACLE, &alice);
    assert_eq!(refused.status, 429);
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert_eq!(
        refused.json(),
        json!({"code": 14, "message": "api request rate limit exceeded", "details": []})
    );
    let export = "/api/v2/ledgerentry/export?partyId=0000000000000000000000000000000000000000000000000000000000000000";
    let refused = get(server.addr, export, &alice);
    assert_eq!(refused.status, 429);
    assert_eq!(refused.json()["error"]["code"], 14);
    // Bob, behind the same proxy, is not Alice.
    assert_eq!(get(server.addr, ORACLE, &from("198.51.100.2")).status, 200);
    // Health checks and metrics never count.
    assert_eq!(get(server.addr, "/health", &alice).status, 200);
    assert_eq!(get(server.addr, "/metrics", &alice).status, 200);
    // Her two refusals emptied the bucket of refusals: the next request bans her.
    let banned = get(server.addr, ORACLE, &alice);
    assert_eq!(banned.status, 403);
    assert_eq!(banned.header("retry-after"), Some("30"));
    assert_eq!(
        banned.json()["message"],
        "temporarily banned for continuing to request while rate limited"
    );
    clock.advance(Duration::from_secs(29));
    assert_eq!(get(server.addr, ORACLE, &alice).status, 403);
    clock.advance(Duration::from_secs(1));
    assert_eq!(get(server.addr, ORACLE, &alice).status, 200);
    // The proxy itself, forwarding nobody, stays exempt.
    assert_eq!(
        get(server.addr, ORACLE, &[]).header("ratelimit-limit"),
        None
    );
}

#[test]
fn an_untrusted_peer_cannot_name_another_client() {
    // With no proxy trusted, loopback's header is just a header: the peer (loopback, exempt)
    // is the client.
    let clock = Arc::new(ManualClock(Mutex::new(Instant::now())));
    let config = AppConfig {
        trusted_proxies: IpRanges::default(),
        ..AppConfig::default()
    };
    let app = App::with_clock(mixed().dataset.store.clone(), config, clock);
    let server = Server::start_app(app, ServeConfig::default());
    let answer = get(server.addr, ORACLE, &[("X-Forwarded-For", "198.51.100.1")]);
    assert_eq!(answer.header("ratelimit-limit"), None);
}

#[test]
fn request_ids_come_back() {
    let server = &mixed().server;
    let given = get(server.addr, ORACLE, &[("X-Request-Id", "trace-42")]);
    assert_eq!(given.header("x-request-id"), Some("trace-42"));
    let long = "x".repeat(http_api::MAX_REQUEST_ID + 1);
    for bad in [long.as_str(), "a b"] {
        let replaced = get(server.addr, ORACLE, &[("X-Request-Id", bad)]);
        let made = replaced.header("x-request-id").unwrap();
        assert_ne!(made, bad);
        assert!(made.len() <= http_api::MAX_REQUEST_ID, "{made}");
    }
    let first = get(server.addr, "/health", &[]);
    let second = get(server.addr, "/health", &[]);
    assert_ne!(first.header("x-request-id"), second.header("x-request-id"));
}
