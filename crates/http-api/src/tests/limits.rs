//! Per-client rate limits and request ids, through the service.

use std::net::SocketAddr;
use std::time::Duration;

use super::*;
use crate::{Peer, RateLimitConfig};

const EXPORT: &str = "/api/v2/ledgerentry/export";

/// Two requests at once, bursts of three, banned for a minute.
fn small() -> AppConfig {
    AppConfig {
        rate_limit: RateLimitConfig {
            rate: 2.0,
            burst: 3,
            ban_for: Duration::from_secs(60),
            ..RateLimitConfig::default()
        },
        ..AppConfig::default()
    }
}

/// A service with `config`, its clock, and a way to call it from an address.
struct Limited {
    app: App,
    clock: Arc<ManualClock>,
}

impl Limited {
    fn new(config: AppConfig) -> Self {
        let clock = ManualClock::new();
        let app = App::with_clock(Arc::new(FakeStore::default()), config, clock.clone());
        Limited { app, clock }
    }

    async fn call(&self, peer: &str, uri: &str, headers: &[(&str, &str)]) -> Answer {
        let mut request = Request::get(uri).extension(Peer(peer.parse::<SocketAddr>().unwrap()));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = self.app.handle(request.body(()).unwrap()).await;
        let (parts, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .map(|c| c.to_bytes().to_vec())
            .map_err(|e| e.to_string());
        Answer {
            status: parts.status,
            headers: parts.headers,
            body,
        }
    }

    async fn statuses(&self, peer: &str, uri: &str, n: usize) -> Vec<u16> {
        let mut statuses = Vec::new();
        for _ in 0..n {
            statuses.push(self.call(peer, uri, &[]).await.status.as_u16());
        }
        statuses
    }
}

const OUTSIDE: &str = "203.0.113.9:50000";

#[tokio::test]
async fn every_answer_of_a_limited_client_tells_its_limit() {
    let limited = Limited::new(small());
    for (remaining, uri) in [("2", ORACLE_DATA), ("1", "/api/v2/nothing"), ("0", OPENAPI)] {
        let answer = limited.call(OUTSIDE, uri, &[]).await;
        assert_eq!(answer.header("ratelimit-limit"), "2", "{uri}");
        assert_eq!(answer.header("ratelimit-remaining"), remaining, "{uri}");
        assert_eq!(answer.header("ratelimit-reset"), "1", "{uri}");
        assert_eq!(answer.header("retry-after"), "", "{uri}");
    }
    // Loopback is exempt: no headers, never refused.
    for _ in 0..10 {
        let answer = limited.call("127.0.0.1:1", ORACLE_DATA, &[]).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.header("ratelimit-limit"), "");
    }
}

const ORACLE_DATA: &str = "/api/v2/oracle/data";
const OPENAPI: &str = "/api/v2/openapi.json";

#[tokio::test]
async fn an_empty_bucket_is_429_with_retry_after_in_both_error_shapes() {
    let limited = Limited::new(small());
    let rate_limited =
        json!({"code": 14, "message": "api request rate limit exceeded", "details": []});
    assert_eq!(limited.statuses(OUTSIDE, ORACLE_DATA, 3).await, [200; 3]);
    let answer = limited.call(OUTSIDE, ORACLE_DATA, &[]).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(answer.header("retry-after"), "1");
    assert_eq!(answer.header("ratelimit-remaining"), "0");
    assert_eq!(answer.json(), rate_limited);
    let export = format!("{EXPORT}?partyId={PARTY}");
    let answer = limited.call(OUTSIDE, &export, &[]).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(answer.header("retry-after"), "1");
    assert_eq!(answer.json(), json!({"error": rate_limited}));
    // Health checks and metrics are never counted nor refused.
    for uri in ["/health", "/metrics"] {
        let answer = limited.call(OUTSIDE, uri, &[]).await;
        assert_eq!(answer.status, StatusCode::OK, "{uri}");
        assert_eq!(answer.header("ratelimit-limit"), "", "{uri}");
    }
    // Another address has its own bucket; time refills this one.
    assert_eq!(
        limited.statuses("198.51.100.1:1", ORACLE_DATA, 1).await,
        [200]
    );
    limited.clock.advance(Duration::from_millis(500));
    assert_eq!(limited.statuses(OUTSIDE, ORACLE_DATA, 2).await, [200, 429]);
}

#[tokio::test]
async fn asking_on_while_refused_bans_with_403_until_ban_for_passes() {
    let limited = Limited::new(small());
    // Three served, three refused, then banned.
    assert_eq!(
        limited.statuses(OUTSIDE, ORACLE_DATA, 7).await,
        [200, 200, 200, 429, 429, 429, 403]
    );
    let banned = json!({"code": 14, "message": "temporarily banned for continuing to request while rate limited", "details": []});
    let answer = limited.call(OUTSIDE, ORACLE_DATA, &[]).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(answer.header("retry-after"), "60");
    assert_eq!(answer.json(), banned);
    let answer = limited
        .call(OUTSIDE, &format!("{EXPORT}?partyId={PARTY}"), &[])
        .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(answer.json(), json!({"error": banned}));
    limited.clock.advance(Duration::from_secs(45));
    let answer = limited.call(OUTSIDE, ORACLE_DATA, &[]).await;
    assert_eq!(answer.header("retry-after"), "15");
    limited.clock.advance(Duration::from_secs(15));
    assert_eq!(limited.statuses(OUTSIDE, ORACLE_DATA, 1).await, [200]);
}

#[tokio::test]
async fn forwarded_clients_are_believed_from_trusted_proxies_only() {
    let limited = Limited::new(small());
    let forwarded = [("x-forwarded-for", "6.6.6.6, 198.51.100.7")];
    // Through the trusted proxy (loopback), the forwarded client is limited, not exempt.
    for remaining in ["2", "1", "0"] {
        let answer = limited.call("127.0.0.1:9", ORACLE_DATA, &forwarded).await;
        assert_eq!(answer.header("ratelimit-remaining"), remaining);
    }
    let answer = limited.call("127.0.0.1:9", ORACLE_DATA, &forwarded).await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    // Its bucket is 198.51.100.7's, whoever carries it.
    let through_another = [("x-forwarded-for", "198.51.100.7")];
    let answer = limited
        .call("127.0.0.1:10", ORACLE_DATA, &through_another)
        .await;
    assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
    // The proxy itself, without the header, is still exempt.
    assert_eq!(
        limited.statuses("127.0.0.1:9", ORACLE_DATA, 5).await,
        [200; 5]
    );
    // An untrusted peer's header is ignored: its own address is counted.
    let answer = limited.call(OUTSIDE, ORACLE_DATA, &through_another).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.header("ratelimit-remaining"), "2");
    // Nor may a client dress up as loopback.
    let spoof = [("x-forwarded-for", "127.0.0.1")];
    let answer = limited.call(OUTSIDE, ORACLE_DATA, &spoof).await;
    assert_eq!(answer.header("ratelimit-remaining"), "1");
}

#[tokio::test]
async fn limits_off_or_no_exemption_as_configured() {
    let off = Limited::new(AppConfig {
        rate_limit: RateLimitConfig {
            enabled: false,
            ..small().rate_limit
        },
        ..small()
    });
    assert_eq!(off.statuses(OUTSIDE, ORACLE_DATA, 10).await, [200; 10]);
    assert_eq!(
        off.call(OUTSIDE, ORACLE_DATA, &[])
            .await
            .header("ratelimit-limit"),
        ""
    );
    let everyone = Limited::new(AppConfig {
        rate_limit: RateLimitConfig {
            exempt: crate::IpRanges::default(),
            ..small().rate_limit
        },
        ..small()
    });
    assert_eq!(
        everyone.statuses("127.0.0.1:1", ORACLE_DATA, 4).await,
        [200, 200, 200, 429]
    );
    // Requests that name no peer count as loopback.
    let answer = call_with(
        FakeStore::default(),
        small(),
        Request::get(ORACLE_DATA).body(()).unwrap(),
    )
    .await;
    assert_eq!(answer.header("ratelimit-limit"), "");
}

#[tokio::test]
async fn request_ids_are_echoed_made_or_replaced() {
    let limited = Limited::new(small());
    let given = "550e8400-e29b-41d4-a716-446655440000";
    let answer = limited
        .call("127.0.0.1:1", "/health", &[("x-request-id", given)])
        .await;
    assert_eq!(answer.header("x-request-id"), given);
    let made = limited.call("127.0.0.1:1", ORACLE_DATA, &[]).await;
    let made = made.header("x-request-id").to_owned();
    assert!(made.len() > 16 && made.is_ascii(), "{made}");
    let replaced = limited
        .call("127.0.0.1:1", ORACLE_DATA, &[("x-request-id", "two words")])
        .await;
    let replaced = replaced.header("x-request-id");
    assert_ne!(replaced, "two words");
    assert_ne!(replaced, made);
    assert_eq!(
        replaced.split_once('-').unwrap().0,
        made.split_once('-').unwrap().0
    );
    // Refusals carry one too.
    let _ = limited.statuses(OUTSIDE, ORACLE_DATA, 3).await;
    let refused = limited
        .call(OUTSIDE, "/api/v2/nothing", &[("x-request-id", "abc")])
        .await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.header("x-request-id"), "abc");
}
