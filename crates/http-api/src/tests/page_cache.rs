//! The page cache through the service: a page asked again at the same data version is the
//! same answer, byte for byte, without a read; anything else reads the store.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use http_body_util::BodyExt;
use hyper::body::Body as _;
use hyper::{HeaderMap, Request, StatusCode};
use tokio::sync::oneshot;

use super::operations::sample;
use super::{FakeStore, PARTY};
use crate::{App, AppConfig};

const ORACLE: &str = "/api/v2/oracle/data";
/// Another valid spec id.
const SPEC: &str = "6a8ac4ba05805975ed2f89d94a2f20aaf3c64af775a89294c2cd789a380208a9";
/// Node padding: pages of about 6 KB, worth compressing.
const PAD: usize = 2000;

/// Everything a client receives: `length` is the body's exact size hint, which hyper sends as
/// `Content-Length`.
#[derive(Debug, PartialEq, Eq)]
struct Whole {
    status: StatusCode,
    headers: HeaderMap,
    length: Option<u64>,
    body: Vec<u8>,
}

async fn fetch(app: &App, uri: &str, headers: &[(&str, &str)]) -> Whole {
    let mut request = Request::get(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = app.handle(request.body(()).unwrap()).await;
    let (mut parts, body) = response.into_parts();
    let length = body.size_hint().exact();
    // Every answer has its own request id; the rest must be the same.
    parts.headers.remove("x-request-id");
    Whole {
        status: parts.status,
        headers: parts.headers,
        length,
        body: body.collect().await.unwrap().to_bytes().to_vec(),
    }
}

fn app(store: &FakeStore, config: AppConfig) -> App {
    App::new(Arc::new(store.clone()), config)
}

/// The same data as [`FakeStore::versioned`], from a store that cannot tell its version: the
/// answers without the cache.
fn uncached() -> App {
    let store = FakeStore::versioned(PAD);
    *store.version.lock().unwrap() = None;
    app(&store, AppConfig::default())
}

/// `(hits, misses)` of the page cache.
fn counts(app: &App) -> (f64, f64) {
    let text = String::from_utf8(app.metrics().render()).unwrap();
    let read = |name| sample(&text, name).unwrap();
    (
        read("datanode_page_cache_hits_total"),
        read("datanode_page_cache_misses_total"),
    )
}

/// Pages read ahead into the page cache.
fn pages_read_ahead(app: &App) -> f64 {
    let text = String::from_utf8(app.metrics().render()).unwrap();
    sample(&text, "datanode_pages_read_ahead_total").unwrap()
}

fn text(answer: &Whole) -> &str {
    std::str::from_utf8(&answer.body).unwrap()
}

#[tokio::test]
async fn a_repeated_page_is_the_same_answer_without_a_read() {
    let store = FakeStore::versioned(PAD);
    let app = app(&store, AppConfig::default());
    let origin = [("origin", "https://console.example")];
    let uri = format!("{ORACLE}?pagination.first=2");
    let first = fetch(&app, &uri, &origin).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first, fetch(&uncached(), &uri, &origin).await);
    let second = fetch(&app, &uri, &origin).await;
    assert_eq!(second, first);
    assert_eq!(second.headers["access-control-allow-origin"], "*");
    assert_eq!(second.length, Some(second.body.len() as u64));
    assert_eq!(store.page_reads(), 1);
    assert_eq!(counts(&app), (1.0, 1.0));
    // Another spelling of the same request is the same page.
    let respelled = format!("{ORACLE}?pagination.newestFirst=true&unknown=1&pagination.first=2");
    assert_eq!(fetch(&app, &respelled, &origin).await, first);
    assert_eq!(store.page_reads(), 1);
    // Answers from the cache are counted and timed like any other.
    let text = String::from_utf8(app.metrics().render()).unwrap();
    let requests = r#"datanode_http_requests_total{route="oracle_data",status="200"}"#;
    assert_eq!(sample(&text, requests), Some(3.0));
    let timed = r#"datanode_http_request_duration_seconds_count{route="oracle_data"}"#;
    assert_eq!(sample(&text, timed), Some(3.0));
}

/// A store that tells its data version with the chain tip is asked once for both on a page
/// from the cache; one that does not is asked for its version after the tip. The answers are
/// the same, and a commit is seen either way.
#[tokio::test]
async fn a_version_told_with_the_tip_saves_asking_for_it() {
    let mut answers = Vec::new();
    for version_with_tip in [false, true] {
        let store = FakeStore {
            version_with_tip,
            ..FakeStore::versioned(0)
        };
        let app = app(&store, AppConfig::default());
        let first = fetch(&app, ORACLE, &[]).await;
        let asked = store.version_asks.load(Ordering::SeqCst);
        assert_eq!(fetch(&app, ORACLE, &[]).await, first);
        let per_hit = store.version_asks.load(Ordering::SeqCst) - asked;
        assert_eq!(
            per_hit,
            usize::from(!version_with_tip),
            "{version_with_tip}"
        );
        store.commit();
        let after = fetch(&app, ORACLE, &[]).await;
        assert!(text(&after).contains(r#""commits":1"#), "{}", text(&after));
        assert_eq!(store.page_reads(), 2);
        answers.push((first, after));
    }
    assert_eq!(answers[0], answers[1]);
}

#[tokio::test]
async fn a_commit_makes_the_next_page_read_the_store_again() {
    let store = FakeStore::versioned(0);
    let app = app(&store, AppConfig::default());
    let before = fetch(&app, ORACLE, &[]).await;
    assert!(!text(&before).contains("commits"));
    assert_eq!(fetch(&app, ORACLE, &[]).await, before);
    store.commit();
    let after = fetch(&app, ORACLE, &[]).await;
    assert!(text(&after).contains(r#""commits":1"#), "{}", text(&after));
    assert_eq!(store.page_reads(), 2);
    assert_eq!(fetch(&app, ORACLE, &[]).await, after);
    assert_eq!(store.page_reads(), 2);
    assert_eq!(counts(&app), (2.0, 2.0));
}

#[tokio::test]
async fn a_store_that_cannot_tell_its_version_is_read_every_time() {
    let store = FakeStore::default();
    let app = app(&store, AppConfig::default());
    for _ in 0..3 {
        assert_eq!(fetch(&app, ORACLE, &[]).await.status, StatusCode::OK);
    }
    assert_eq!(store.page_reads(), 3);
    assert_eq!(counts(&app), (0.0, 3.0));
}

/// A commit lands while a read has taken its data but not ended, and a request after the
/// commit reads and keeps the new data: the slow read's page, of the data before the commit,
/// must replace nothing.
#[tokio::test]
async fn a_page_read_while_the_version_changed_is_not_kept() {
    let store = FakeStore::versioned(0);
    let (taken, read_has_data) = oneshot::channel();
    let (resume, paused) = oneshot::channel();
    *store.pause.lock().unwrap() = Some((taken, paused));
    let app = app(&store, AppConfig::default());
    let slow = tokio::spawn({
        let app = app.clone();
        async move { fetch(&app, ORACLE, &[]).await }
    });
    read_has_data.await.unwrap();
    store.commit();
    let fresh = fetch(&app, ORACLE, &[]).await;
    assert!(text(&fresh).contains(r#""commits":1"#), "{}", text(&fresh));
    resume.send(()).unwrap();
    let stale = slow.await.unwrap();
    assert!(!text(&stale).contains("commits"));
    assert_eq!(fetch(&app, ORACLE, &[]).await, fresh);
    assert_eq!(store.page_reads(), 2);
}

#[tokio::test]
async fn failed_reads_are_not_kept() {
    let store = FakeStore {
        fail_pages: Arc::new(true.into()),
        ..FakeStore::versioned(0)
    };
    let app = app(&store, AppConfig::default());
    for _ in 0..2 {
        let failed = fetch(&app, ORACLE, &[]).await;
        assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR);
    }
    store.fail_pages.store(false, Ordering::Relaxed);
    let answer = fetch(&app, ORACLE, &[]).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(fetch(&app, ORACLE, &[]).await, answer);
    assert_eq!(store.page_reads(), 3);
}

#[tokio::test]
async fn each_spec_page_and_style_has_its_own_entry() {
    let cases: &[(String, &[(&str, &str)])] = &[
        (ORACLE.to_owned(), &[]),
        (format!("{ORACLE}?pagination.first=2"), &[]),
        (
            format!("{ORACLE}?pagination.first=2&pagination.newestFirst=false"),
            &[],
        ),
        (format!("{ORACLE}?oracleSpecId={SPEC}"), &[]),
        (format!("{ORACLE}?oracleSpecId={PARTY}"), &[]),
        (format!("{ORACLE}?pretty"), &[]),
        (ORACLE.to_owned(), &[("accept-encoding", "gzip")]),
        (ORACLE.to_owned(), &[("accept-encoding", "zstd")]),
        (ORACLE.to_owned(), &[("accept-encoding", "br")]),
        (format!("{ORACLE}?pretty"), &[("accept-encoding", "gzip")]),
    ];
    let uncached = uncached();
    let mut expected = Vec::new();
    for (uri, headers) in cases {
        let answer = fetch(&uncached, uri, headers).await;
        assert_eq!(answer.status, StatusCode::OK, "{uri} {headers:?}");
        assert!(
            !expected.contains(&answer),
            "{uri} {headers:?} is like another"
        );
        expected.push(answer);
    }
    let store = FakeStore::versioned(PAD);
    let app = app(&store, AppConfig::default());
    for round in 0..2 {
        for ((uri, headers), expected) in cases.iter().zip(&expected) {
            let answer = fetch(&app, uri, headers).await;
            assert_eq!(&answer, expected, "round {round}: {uri} {headers:?}");
        }
        assert_eq!(store.page_reads(), cases.len());
    }
    let n = cases.len() as f64;
    assert_eq!(counts(&app), (n, n));
}

#[tokio::test]
async fn the_byte_bound_evicts_the_least_recently_used_page() {
    let size = fetch(&uncached(), ORACLE, &[]).await.body.len();
    // Room for one page and its overhead, not for two.
    let config = AppConfig {
        page_cache_bytes: size * 3 / 2,
        ..AppConfig::default()
    };
    let store = FakeStore::versioned(PAD);
    let bounded = app(&store, config);
    let (one, two) = (ORACLE.to_owned(), format!("{ORACLE}?pagination.first=2"));
    for uri in [&one, &two, &one, &one] {
        fetch(&bounded, uri, &[]).await;
    }
    assert_eq!(store.page_reads(), 3);

    let off = AppConfig {
        page_cache_bytes: 0,
        ..AppConfig::default()
    };
    let without_cache = app(&store, off);
    fetch(&without_cache, ORACLE, &[]).await;
    fetch(&without_cache, ORACLE, &[]).await;
    assert_eq!(store.page_reads(), 5);
    assert_eq!(counts(&without_cache), (0.0, 0.0));
}

/// The `endCursor` of a page's answer.
fn end_cursor(answer: &Whole) -> String {
    let page: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
    page["oracleData"]["pageInfo"]["endCursor"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn a_walks_next_pages_come_from_the_read_of_the_page_before() {
    let store = FakeStore::versioned(PAD);
    let app = app(&store, AppConfig::default());
    let walk = |cursor: &str| format!("{ORACLE}?pagination.first=1&pagination.after={cursor}");
    // The first page has no cursor: nothing is read ahead of it.
    let first = fetch(&app, &format!("{ORACLE}?pagination.first=1"), &[]).await;
    let second_uri = walk(&end_cursor(&first));
    let second = fetch(&app, &second_uri, &[]).await;
    assert_eq!(store.page_reads(), 2);
    // The third page, the walk's last, was read with the second.
    let third_uri = walk(&end_cursor(&second));
    let third = fetch(&app, &third_uri, &[]).await;
    assert_eq!(store.page_reads(), 2);
    assert_eq!(counts(&app), (1.0, 2.0));
    assert_eq!(pages_read_ahead(&app), 1.0);
    assert_eq!(third, fetch(&uncached(), &third_uri, &[]).await);
    assert!(
        text(&third).contains(r#""hasNextPage":false"#),
        "{}",
        text(&third)
    );
    // Past the walk's end nothing was read ahead.
    fetch(&app, &walk(&end_cursor(&third)), &[]).await;
    assert_eq!(store.page_reads(), 3);
    // Indented or compressed pages are not read ahead, nor served from plain pages.
    for headers in [&[("accept-encoding", "gzip")][..], &[]] {
        let pretty = if headers.is_empty() {
            "&pretty=true"
        } else {
            ""
        };
        let reads = store.page_reads();
        fetch(&app, &format!("{second_uri}{pretty}"), headers).await;
        fetch(&app, &format!("{third_uri}{pretty}"), headers).await;
        assert_eq!(store.page_reads(), reads + 2, "{headers:?}{pretty}");
    }
    // A page read ahead at another data version is not served.
    let reads = store.page_reads();
    store.commit();
    assert_eq!(fetch(&app, &third_uri, &[]).await.status, StatusCode::OK);
    assert_eq!(store.page_reads(), reads + 1);
}

#[tokio::test]
async fn a_page_after_a_cursor_not_expected_by_a_walk_reads_nothing_ahead() {
    let store = FakeStore::versioned(PAD);
    let app = app(&store, AppConfig::default());
    // A cursor kept from elsewhere: this server served no page ending at it.
    let kept = end_cursor(&fetch(&uncached(), &format!("{ORACLE}?pagination.first=1"), &[]).await);
    let walk = |cursor: &str| format!("{ORACLE}?pagination.first=1&pagination.after={cursor}");
    let second = fetch(&app, &walk(&kept), &[]).await;
    assert_eq!(store.page_reads(), 1);
    // Its next page was not read with it; once it is asked, the walk is known and goes on.
    fetch(&app, &walk(&end_cursor(&second)), &[]).await;
    assert_eq!(store.page_reads(), 2);
    assert_eq!(counts(&app), (0.0, 2.0));
    assert_eq!(pages_read_ahead(&app), 0.0);
}
