//! What operators and browsers rely on: health, metrics, CORS, compression, `?pretty`, the
//! OpenAPI document. The access log is checked from outside the process, in
//! `bins/server/tests/cli.rs`, where no other test shares the global subscriber.

use std::io::Read;
use std::sync::Arc;

use http_body_util::BodyExt;
use hyper::{Request, StatusCode};
use serde_json::{Value, json};

use super::{Answer, FakeStore, PARTY, call_with, get, rows};
use ledger_core::CSV_HEADER;

use crate::{AllowedOrigins, App, AppConfig, BuildInfo};

const EXPORT: &str = "/api/v2/ledgerentry/export";
const ORACLE: &str = "/api/v2/oracle/data";

pub(super) async fn get_with(store: FakeStore, uri: &str, headers: &[(&str, &str)]) -> Answer {
    let mut request = Request::get(uri);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    call_with(store, AppConfig::default(), request.body(()).unwrap()).await
}

#[tokio::test]
async fn health_answers_ok_while_the_store_answers() {
    let answer = get(FakeStore::default(), "/health").await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.text(), "ok");
    assert!(answer.header("content-type").starts_with("text/plain"));

    let failing = FakeStore {
        fail_health: true,
        ..FakeStore::default()
    };
    let answer = get(failing, "/health").await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.header("content-type"), "application/json");
    assert_eq!(
        answer.json(),
        json!({"code": 14, "message": "Unavailable error", "details": [{
            "@type": "type.googleapis.com/vega.ErrorDetail", "code": 10000,
            "message": "store unavailable", "inner": "storage unavailable: disk on fire"
        }]})
    );
}

#[tokio::test]
async fn health_turns_503_after_repeated_read_failures_until_a_read_succeeds() {
    let store = FakeStore::failing_pages();
    let fail_pages = Arc::clone(&store.fail_pages);
    let app = App::new(Arc::new(store), AppConfig::default());
    let health = || Request::get("/health").body(()).unwrap();
    let page = || Request::get(ORACLE).body(()).unwrap();
    // Two failures are bad luck; the third in a row says the store is unwell.
    for _ in 0..2 {
        assert_eq!(
            through(&app, page()).await.0,
            StatusCode::INTERNAL_SERVER_ERROR
        );
        assert_eq!(through(&app, health()).await.0, StatusCode::OK);
    }
    assert_eq!(
        through(&app, page()).await.0,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    let (status, body) = through(&app, health()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["code"], 14);
    assert_eq!(
        body["details"][0]["inner"],
        "the last 3 reads of the store failed"
    );
    let (_, metrics) = through(&app, Request::get("/metrics").body(()).unwrap()).await;
    let metrics = String::from_utf8(metrics).unwrap();
    assert_eq!(
        sample(
            &metrics,
            r#"datanode_storage_failures_total{kind="corrupt"}"#
        ),
        Some(3.0)
    );
    // One good read is enough to call the store healthy again.
    fail_pages.store(false, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(through(&app, page()).await.0, StatusCode::OK);
    assert_eq!(through(&app, health()).await.0, StatusCode::OK);
}

/// Reads a whole response from an app shared between requests.
async fn through(app: &App, request: Request<()>) -> (StatusCode, Vec<u8>) {
    let response = app.handle(request).await;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes().to_vec());
    (status, body.unwrap_or_default())
}

/// The value of one sample line of the Prometheus text, by its name and labels.
pub(super) fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn metrics_count_requests_and_exported_rows() {
    let store = FakeStore {
        rows: rows(),
        ..FakeStore::default()
    };
    let app = App::new(Arc::new(store), AppConfig::default());
    let page = || Request::get(ORACLE).body(()).unwrap();
    through(&app, page()).await;
    through(&app, page()).await;
    through(
        &app,
        Request::get(format!("{ORACLE}?pagination.first=0"))
            .body(())
            .unwrap(),
    )
    .await;
    let (_, csv) = through(
        &app,
        Request::get(format!("{EXPORT}?partyId={PARTY}"))
            .body(())
            .unwrap(),
    )
    .await;
    through(&app, Request::get("/nowhere").body(()).unwrap()).await;

    let (status, text) = through(&app, Request::get("/metrics").body(()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    let text = String::from_utf8(text).unwrap();
    let check = |series: &str, expected: f64| {
        assert_eq!(sample(&text, series), Some(expected), "{series} in\n{text}");
    };
    check(
        r#"datanode_http_requests_total{route="oracle_data",status="200"}"#,
        2.0,
    );
    check(
        r#"datanode_http_requests_total{route="oracle_data",status="400"}"#,
        1.0,
    );
    check(
        r#"datanode_http_requests_total{route="ledgerentry_export",status="200"}"#,
        1.0,
    );
    check(
        r#"datanode_http_requests_total{route="other",status="404"}"#,
        1.0,
    );
    check(
        r#"datanode_http_request_duration_seconds_count{route="oracle_data"}"#,
        3.0,
    );
    check("datanode_export_rows_total", 3.0);
    check("datanode_export_bytes_total", csv.len() as f64);
    check("datanode_exports_in_flight", 0.0);
    check("datanode_ingest_running", 0.0);

    app.metrics().ingest_progress(&crate::IngestProgress {
        events: 10,
        ledger_entries: 7,
        oracle_data: 2,
        last_block_height: Some(1_000_002),
        last_vega_time: Some(1_690_000_001_500_000_000),
    });
    app.metrics().ingest_progress(&crate::IngestProgress {
        events: 15,
        ledger_entries: 9,
        oracle_data: 2,
        last_block_height: Some(1_000_003),
        last_vega_time: Some(1_690_000_002_000_000_000),
    });
    let (_, text) = through(&app, Request::get("/metrics").body(()).unwrap()).await;
    let text = String::from_utf8(text).unwrap();
    assert_eq!(sample(&text, "datanode_ingest_events_total"), Some(15.0));
    assert_eq!(
        sample(&text, "datanode_ingest_ledger_entries_total"),
        Some(9.0)
    );
    assert_eq!(
        sample(&text, "datanode_ingest_last_block_height"),
        Some(1_000_003.0)
    );
    assert_eq!(
        sample(&text, "datanode_ingest_last_vega_time_seconds"),
        Some(1_690_000_002.0)
    );
}

#[tokio::test]
async fn cors_lets_other_origins_read_answers_and_the_file_name() {
    let origin = ("origin", "https://console.example");
    let answer = get_with(
        FakeStore::default(),
        &format!("{EXPORT}?partyId={PARTY}"),
        &[origin],
    )
    .await;
    assert_eq!(answer.header("access-control-allow-origin"), "*");
    assert_eq!(
        answer.header("access-control-expose-headers"),
        "Content-Disposition, X-Block-Height, X-Block-Timestamp, X-Request-Id, RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset, Retry-After"
    );
    let error = get_with(FakeStore::default(), ORACLE.to_owned().as_str(), &[origin]).await;
    assert_eq!(error.header("access-control-allow-origin"), "*");

    let preflight = Request::builder()
        .method("OPTIONS")
        .uri(EXPORT)
        .header("origin", "https://console.example")
        .header("access-control-request-method", "GET")
        .header("access-control-request-headers", "accept")
        .body(())
        .unwrap();
    let answer = call_with(FakeStore::default(), AppConfig::default(), preflight).await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT);
    assert_eq!(
        answer.header("access-control-allow-methods"),
        "GET, OPTIONS"
    );
    assert_eq!(answer.header("access-control-allow-headers"), "accept");

    let only = AppConfig {
        cors: AllowedOrigins::parse("https://console.example"),
        ..AppConfig::default()
    };
    for (from, allowed) in [
        ("https://console.example", true),
        ("https://evil.example", false),
    ] {
        let request = Request::get(ORACLE)
            .header("origin", from)
            .body(())
            .unwrap();
        let answer = call_with(FakeStore::default(), only.clone(), request).await;
        let allow = answer.header("access-control-allow-origin");
        assert_eq!(allow == from, allowed, "{from}: {allow:?}");
        assert!(answer.header("vary").contains("Origin"));
    }
    let nowhere = Request::builder()
        .method("OPTIONS")
        .uri("/nowhere")
        .body(())
        .unwrap();
    assert_eq!(
        call_with(FakeStore::default(), AppConfig::default(), nowhere)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
}

pub(super) fn decode(coding: &str, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        "gzip" => {
            flate2::read::GzDecoder::new(body)
                .read_to_end(&mut out)
                .unwrap();
        }
        "zstd" => out = zstd::stream::decode_all(body).unwrap(),
        "br" => {
            brotli::Decompressor::new(body, 4096)
                .read_to_end(&mut out)
                .unwrap();
        }
        "" => out.extend_from_slice(body),
        other => panic!("unexpected coding {other}"),
    }
    out
}

#[tokio::test]
async fn answers_are_compressed_as_the_client_accepts() {
    let store = || FakeStore {
        rows: (0..2000)
            .map(|i| format!("row {i},{}\n", "x".repeat(40)))
            .collect(),
        ..FakeStore::default()
    };
    let export = format!("{EXPORT}?partyId={PARTY}");
    let plain_csv = get(store(), &export).await.body.unwrap();
    assert!(plain_csv.starts_with(CSV_HEADER.as_bytes()));
    let plain_page = get(store(), ORACLE).await.body.unwrap();
    for (accept, coding) in [
        ("gzip", "gzip"),
        ("zstd, gzip", "zstd"),
        ("br", "br"),
        ("identity", ""),
    ] {
        let answer = get_with(store(), &export, &[("accept-encoding", accept)]).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.header("content-encoding"), coding, "{accept}");
        assert_eq!(answer.header("vary"), "Accept-Encoding");
        let body = answer.body.unwrap();
        if !coding.is_empty() {
            assert!(body.len() < plain_csv.len() / 4, "{coding}: {}", body.len());
        }
        assert_eq!(decode(coding, &body), plain_csv, "{coding}");

        // The page is small: it is compressed only when large enough to gain.
        let answer = get_with(store(), ORACLE, &[("accept-encoding", accept)]).await;
        let expected = if plain_page.len() >= 1024 { coding } else { "" };
        assert_eq!(answer.header("content-encoding"), expected);
        assert_eq!(decode(expected, &answer.body.unwrap()), plain_page);
    }
}

#[tokio::test]
async fn pretty_indents_json_answers() {
    let compact = get(FakeStore::default(), ORACLE).await;
    let pretty = get(FakeStore::default(), &format!("{ORACLE}?pretty")).await;
    assert_eq!(pretty.json(), compact.json());
    assert!(
        pretty
            .text()
            .starts_with("{\n  \"oracleData\": {\n    \"edges\": [")
    );
    assert!(!compact.text().contains('\n'));

    let error = get(FakeStore::default(), &format!("{EXPORT}?pretty=true")).await;
    assert_eq!(error.status, StatusCode::BAD_REQUEST);
    assert!(
        error
            .text()
            .starts_with("{\n  \"error\": {\n    \"code\": 3,")
    );
    assert_eq!(error.json()["error"]["details"][0]["code"], 10014);
}

#[tokio::test]
async fn openapi_document_describes_both_operations() {
    let answer = get(FakeStore::default(), "/api/v2/openapi.json").await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.header("content-type"), "application/json");
    let document: Value = answer.json();
    assert_eq!(document["openapi"], "3.0.3");
    let paths = document["paths"].as_object().unwrap();
    let mut names: Vec<&str> = paths.keys().map(String::as_str).collect();
    names.sort_unstable();
    assert_eq!(names, ["/api/v2/info", EXPORT, ORACLE]);
    // Every reference resolves within the document.
    let text = answer.text();
    for reference in text.split("\"$ref\": \"#/components/schemas/").skip(1) {
        let name = &reference[..reference.find('"').unwrap()];
        assert!(
            document["components"]["schemas"].get(name).is_some(),
            "dangling $ref {name}"
        );
    }
}

fn built(version: &str, commit: &str) -> AppConfig {
    AppConfig {
        build: BuildInfo {
            version: version.to_owned(),
            commit: commit.to_owned(),
        },
        ..AppConfig::default()
    }
}

#[tokio::test]
async fn info_answers_the_version_and_commit_in_vegas_shape() {
    let config = built("1.2.3", "0123456789ab");
    let request = || Request::get("/api/v2/info").body(()).unwrap();
    let answer = call_with(FakeStore::default(), config.clone(), request()).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.header("content-type"), "application/json");
    assert_eq!(
        answer.text(),
        r#"{"version":"1.2.3","commitHash":"0123456789ab"}"#
    );
    let post = Request::post("/api/v2/info").body(()).unwrap();
    let answer = call_with(FakeStore::default(), config, post).await;
    assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(answer.header("allow"), "GET, OPTIONS");
}

#[tokio::test]
async fn metrics_carry_the_build_and_the_process() {
    let app = App::new(
        Arc::new(FakeStore::default()),
        built("1.2.3", "0123456789ab"),
    );
    let (status, text) = through(&app, Request::get("/metrics").body(()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    let text = String::from_utf8(text).unwrap();
    assert_eq!(
        sample(
            &text,
            r#"datanode_build_info{commit="0123456789ab",version="1.2.3"}"#
        ),
        Some(1.0),
        "{text}"
    );
    for name in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        let value = sample(&text, name).unwrap_or_else(|| panic!("no {name} in\n{text}"));
        assert!(value >= 0.0, "{name} {value}");
    }
    assert!(sample(&text, "process_resident_memory_bytes").unwrap() > 0.0);
    assert!(sample(&text, "process_open_fds").unwrap() >= 1.0);
}

#[tokio::test]
async fn metrics_apart_are_served_only_by_the_operator_service() {
    let config = AppConfig {
        metrics_apart: true,
        ..AppConfig::default()
    };
    let public = App::new(Arc::new(FakeStore::default()), config);
    let operator = public.operator();
    let status = |app: &App, path: &str| {
        let app = app.clone();
        let request = Request::get(path).body(()).unwrap();
        async move { through(&app, request).await.0 }
    };
    for (path, on_public, on_operator) in [
        ("/metrics", StatusCode::NOT_FOUND, StatusCode::OK),
        ("/health", StatusCode::OK, StatusCode::OK),
        ("/api/v2/info", StatusCode::OK, StatusCode::NOT_FOUND),
        (ORACLE, StatusCode::OK, StatusCode::NOT_FOUND),
        (
            "/api/v2/openapi.json",
            StatusCode::OK,
            StatusCode::NOT_FOUND,
        ),
    ] {
        assert_eq!(status(&public, path).await, on_public, "public {path}");
        assert_eq!(
            status(&operator, path).await,
            on_operator,
            "operator {path}"
        );
    }
    // One registry: the operator's scrape counts the public service's requests.
    let (_, text) = through(&operator, Request::get("/metrics").body(()).unwrap()).await;
    let text = String::from_utf8(text).unwrap();
    assert_eq!(
        sample(
            &text,
            r#"datanode_http_requests_total{route="oracle_data",status="200"}"#
        ),
        Some(1.0),
        "{text}"
    );
}
