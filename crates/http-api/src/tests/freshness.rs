//! `X-Block-Height` and `X-Block-Timestamp` on every API answer, from the store's memory.

use super::*;

const TIP: ChainTip = ChainTip {
    first_height: 3,
    last_height: 1234,
    last_vega_time: Some(1_690_000_001_000_000_007),
};

fn store_at(tip: Option<ChainTip>) -> FakeStore {
    let store = FakeStore {
        rows: rows(),
        ..FakeStore::default()
    };
    *store.tip.lock().unwrap() = tip;
    store
}

/// Requests under `/api/v2` and the status each answers, errors included.
fn api_requests() -> Vec<(Method, String, StatusCode)> {
    let export = format!("/api/v2/ledgerentry/export?partyId={PARTY}");
    vec![
        (Method::GET, export, StatusCode::OK),
        (
            Method::GET,
            "/api/v2/ledgerentry/export".to_owned(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::GET,
            "/api/v2/oracle/data".to_owned(),
            StatusCode::OK,
        ),
        (
            Method::GET,
            "/api/v2/oracle/data?pagination.first=0".to_owned(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::GET,
            "/api/v2/openapi.json".to_owned(),
            StatusCode::OK,
        ),
        (Method::GET, "/api/v2/info".to_owned(), StatusCode::OK),
        (
            Method::GET,
            "/api/v2/nope".to_owned(),
            StatusCode::NOT_FOUND,
        ),
        (
            Method::POST,
            "/api/v2/oracle/data".to_owned(),
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            Method::OPTIONS,
            "/api/v2/oracle/data".to_owned(),
            StatusCode::NO_CONTENT,
        ),
    ]
}

async fn call(app: &App, method: Method, uri: &str) -> Answer {
    let response = app
        .handle(Request::builder().method(method).uri(uri).body(()).unwrap())
        .await;
    let (parts, body) = response.into_parts();
    let body = body.collect().await.map(|body| body.to_bytes().to_vec());
    Answer {
        status: parts.status,
        headers: parts.headers,
        body: body.map_err(|err| err.to_string()),
    }
}

#[tokio::test]
async fn every_api_answer_carries_the_block_headers_errors_included() {
    let app = App::new(Arc::new(store_at(Some(TIP))), AppConfig::default());
    for (method, uri, status) in api_requests() {
        let answer = call(&app, method.clone(), &uri).await;
        assert_eq!(answer.status, status, "{method} {uri}");
        assert_eq!(answer.header("x-block-height"), "1234", "{method} {uri}");
        assert_eq!(
            answer.header("x-block-timestamp"),
            "1690000001000000007",
            "{method} {uri}"
        );
    }
    for uri in ["/health", "/metrics"] {
        let answer = call(&app, Method::GET, uri).await;
        assert_eq!(answer.status, StatusCode::OK, "{uri}");
        assert!(answer.headers.get("x-block-height").is_none(), "{uri}");
        assert!(answer.headers.get("x-block-timestamp").is_none(), "{uri}");
    }
}

#[tokio::test]
async fn the_headers_are_omitted_while_no_block_is_stored() {
    let app = App::new(Arc::new(store_at(None)), AppConfig::default());
    for (method, uri, status) in api_requests() {
        let answer = call(&app, method.clone(), &uri).await;
        assert_eq!(answer.status, status, "{method} {uri}");
        assert!(answer.headers.get("x-block-height").is_none(), "{uri}");
        assert!(answer.headers.get("x-block-timestamp").is_none(), "{uri}");
    }
    // Blocks without a time: the height alone.
    let untimed = ChainTip {
        last_vega_time: None,
        ..TIP
    };
    let app = App::new(Arc::new(store_at(Some(untimed))), AppConfig::default());
    let answer = call(&app, Method::GET, "/api/v2/oracle/data").await;
    assert_eq!(answer.header("x-block-height"), "1234");
    assert!(answer.headers.get("x-block-timestamp").is_none());
}

#[tokio::test]
async fn the_headers_and_metrics_follow_the_store() {
    let store = store_at(None);
    let tip = Arc::clone(&store.tip);
    let app = App::new(Arc::new(store), AppConfig::default());
    let metrics = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|line| {
                line.starts_with("datanode_first_block") || line.starts_with("datanode_last_block")
            })
            .map(str::to_owned)
            .collect()
    };
    let answer = call(&app, Method::GET, "/metrics").await;
    assert_eq!(
        metrics(&answer.text()),
        [
            "datanode_first_block_height 0",
            "datanode_last_block_height 0",
            "datanode_last_block_vega_time_seconds 0"
        ]
    );
    for last_height in [7, 8, 20] {
        *tip.lock().unwrap() = Some(ChainTip {
            first_height: 1,
            last_height,
            last_vega_time: Some(last_height as i64 * 10),
        });
        // A page the cache would answer carries the new headers too.
        let answer = call(&app, Method::GET, "/api/v2/oracle/data").await;
        assert_eq!(answer.header("x-block-height"), last_height.to_string());
        assert_eq!(
            answer.header("x-block-timestamp"),
            (last_height * 10).to_string()
        );
        let answer = call(&app, Method::GET, "/metrics").await;
        assert_eq!(
            metrics(&answer.text()),
            [
                "datanode_first_block_height 1".to_owned(),
                format!("datanode_last_block_height {last_height}"),
                format!(
                    "datanode_last_block_vega_time_seconds {}",
                    (last_height * 10) as f64 / 1e9
                )
            ]
        );
    }
}

#[tokio::test]
async fn health_turns_503_while_the_last_block_is_too_far_behind_the_clock() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let now = i64::try_from(now.as_nanos()).unwrap();
    let store = store_at(None);
    let tip = Arc::clone(&store.tip);
    let config = AppConfig {
        max_lag: Some(std::time::Duration::from_secs(60)),
        ..AppConfig::default()
    };
    let app = App::new(Arc::new(store), config);
    let behind = |secs: i64| {
        *tip.lock().unwrap() = Some(ChainTip {
            first_height: 1,
            last_height: 9,
            last_vega_time: Some(now - secs * 1_000_000_000),
        });
    };
    let reason = |answer: &Answer| answer.json()["details"][0]["inner"].to_string();

    let answer = call(&app, Method::GET, "/health").await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(reason(&answer).contains("no block"), "{}", answer.text());
    behind(3_600);
    let answer = call(&app, Method::GET, "/health").await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        reason(&answer).contains("the last block, 9, is 36"),
        "{}",
        answer.text()
    );
    // Caught up: healthy again, and the API answers all along.
    behind(5);
    let answer = call(&app, Method::GET, "/health").await;
    assert_eq!(
        (answer.status, answer.text().as_str()),
        (StatusCode::OK, "ok")
    );
    behind(3_600);
    let answer = call(&app, Method::GET, "/api/v2/oracle/data").await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.header("x-block-height"), "9");

    // Off by default: a store years behind the clock is healthy.
    let app = App::new(Arc::new(store_at(Some(TIP))), AppConfig::default());
    let answer = call(&app, Method::GET, "/health").await;
    assert_eq!(answer.status, StatusCode::OK);
}
