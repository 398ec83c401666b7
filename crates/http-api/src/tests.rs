//! The service called with built requests and a fake store: no socket, no database.

mod freshness;
mod limits;
mod operations;
mod page_cache;
mod properties;
mod server;
mod wire;

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use http_body_util::BodyExt;
use hyper::{Method, Request, StatusCode};
use ledger_core::{CSV_HEADER, ExportFilter, OracleSpecId};
use oracle_core::{PageRequest, Position};
use serde_json::{Value, json};
use storage::{
    ChainTip, Error, ExportSink, ExportSummary, Health, LedgerStore, OraclePage, OracleStore,
};
use tokio::sync::oneshot;

use crate::{App, AppConfig};

const PARTY: &str = "cd447e35b8b6d8fe442e3d437204e52db2221a58008a05a6c4647159c324c985";
const ASSET: &str = "6a8ac4ba05805975ed2f89d94a2f20aaf3c64af775a89294c2cd789a380208a9";

/// What a paused read tells, and what it waits for.
type Pause = (oneshot::Sender<()>, oneshot::Receiver<()>);

/// What the fake store does.
#[derive(Clone, Default)]
struct FakeStore {
    /// Rows every export yields (the filter is recorded, not applied).
    rows: Vec<String>,
    /// Fail before the export starts.
    fail_before_start: bool,
    /// Fail after this many rows.
    fail_after: Option<usize>,
    /// Fail every page read while set.
    fail_pages: Arc<AtomicBool>,
    /// Fail the health check.
    fail_health: bool,
    /// Fail with `Unavailable` rather than `Corrupt`.
    unavailable: bool,
    /// The last export filter seen.
    seen: Arc<Mutex<Option<ExportFilter>>>,
    /// The data version told; `None` (the default) cannot tell, so nothing is cached.
    version: Arc<Mutex<Option<u64>>>,
    /// How many commits [`FakeStore::commit`] made: shown in every node once above zero.
    commits: Arc<AtomicU64>,
    /// Pauses the next page read once it has taken its data: it sends on the first and waits
    /// for the second.
    pause: Arc<Mutex<Option<Pause>>>,
    /// Page reads so far.
    page_reads: Arc<AtomicUsize>,
    /// Show the spec filter in every node, and pad it with this many bytes, so that pages of
    /// different specs differ and pages are worth compressing.
    spec_and_pad: Option<usize>,
    /// The chain tip told.
    tip: Arc<Mutex<Option<ChainTip>>>,
    /// Say that pages are local ([`OracleStore::pages_are_local`]).
    local_pages: bool,
    /// The thread of every page read so far.
    read_threads: Arc<Mutex<Vec<std::thread::ThreadId>>>,
    /// Tell the data version with the chain tip (`Health::chain_tip_with_version`).
    version_with_tip: bool,
    /// Calls of `data_version` so far.
    version_asks: Arc<AtomicUsize>,
    /// Panic in every page read.
    panic_pages: bool,
}

impl FakeStore {
    fn failure(&self) -> Error {
        if self.unavailable {
            Error::Unavailable("disk on fire".into())
        } else {
            storage::Damage::Value("disk on fire".to_owned()).into()
        }
    }

    /// A store that tells its data version, starting at 0, and shows the spec and `pad` bytes
    /// in every node.
    fn versioned(pad: usize) -> Self {
        Self {
            version: Arc::new(Mutex::new(Some(0))),
            spec_and_pad: Some(pad),
            ..Self::default()
        }
    }

    /// Changes the data as a commit would: every node shows the new count, and the version
    /// (when there is one) moves on.
    fn commit(&self) {
        self.commits.fetch_add(1, Ordering::SeqCst);
        if let Some(version) = self.version.lock().unwrap().as_mut() {
            *version += 1;
        }
    }

    fn page_reads(&self) -> usize {
        self.page_reads.load(Ordering::SeqCst)
    }

    /// A store whose page reads fail until told otherwise.
    fn failing_pages() -> Self {
        Self {
            fail_pages: Arc::new(AtomicBool::new(true)),
            ..Self::default()
        }
    }
}

impl LedgerStore for FakeStore {
    fn export_ledger(
        &self,
        filter: &ExportFilter,
        sink: &mut dyn ExportSink,
    ) -> Result<ExportSummary, Error> {
        *self.seen.lock().unwrap() = Some(*filter);
        if self.fail_before_start {
            return Err(self.failure());
        }
        if sink.started().is_break() {
            return Ok(ExportSummary {
                rows: 0,
                stopped: true,
            });
        }
        let mut summary = ExportSummary::default();
        for (index, row) in self.rows.iter().enumerate() {
            if self.fail_after == Some(index) {
                return Err(self.failure());
            }
            summary.rows += 1;
            if let ControlFlow::Break(()) = sink.rows(row.as_bytes(), 1) {
                summary.stopped = true;
                break;
            }
        }
        Ok(summary)
    }
}

impl OracleStore for FakeStore {
    fn oracle_pages(
        &self,
        spec: Option<&OracleSpecId>,
        request: &PageRequest,
        ahead: usize,
    ) -> Result<OraclePage, Error> {
        self.page_reads.fetch_add(1, Ordering::SeqCst);
        (self.read_threads.lock().unwrap()).push(std::thread::current().id());
        assert!(!self.panic_pages, "a page read that panics");
        if self.fail_pages.load(Ordering::Relaxed) {
            return Err(self.failure());
        }
        let commits = self.commits.load(Ordering::SeqCst);
        let rows = (1..=3)
            .map(|seq| {
                let position = Position {
                    vega_time: 10,
                    block: 1,
                    seq,
                };
                let mut node = format!(r#"{{"n":{seq}"#);
                if commits > 0 {
                    node += &format!(r#","commits":{commits}"#);
                }
                if let Some(pad) = self.spec_and_pad {
                    let spec = spec.map(ToString::to_string).unwrap_or_default();
                    node += &format!(r#","spec":"{spec}","pad":"{}""#, "x".repeat(pad));
                }
                node.push('}');
                (position, node.into_bytes())
            })
            .collect::<Vec<_>>();
        // The main scan as a store runs it, so that `assemble` gets what it asked for.
        let scan = request.read_ahead_scan(ahead);
        let mut rows: Vec<_> = rows
            .into_iter()
            .filter(|(position, _)| match scan.after {
                None => true,
                Some(after) if *position == after => scan.inclusive,
                Some(after) => (*position < after) == scan.descending,
            })
            .collect();
        if scan.descending {
            rows.reverse();
        }
        rows.truncate(scan.limit);
        let pause = self.pause.lock().unwrap().take();
        if let Some((taken, resume)) = pause {
            taken.send(()).unwrap();
            resume.blocking_recv().unwrap();
        }
        Ok(OraclePage::assemble(request, rows, false, ahead))
    }

    fn data_version(&self) -> Result<Option<u64>, Error> {
        self.version_asks.fetch_add(1, Ordering::SeqCst);
        Ok(*self.version.lock().unwrap())
    }

    fn pages_are_local(&self) -> bool {
        self.local_pages
    }
}

impl Health for FakeStore {
    fn check(&self) -> Result<(), Error> {
        if self.fail_health {
            return Err(Error::Unavailable("disk on fire".into()));
        }
        Ok(())
    }

    fn chain_tip(&self) -> Result<Option<ChainTip>, Error> {
        Ok(*self.tip.lock().unwrap())
    }

    fn chain_tip_with_version(&self) -> Result<(Option<ChainTip>, Option<u64>), Error> {
        let version = if self.version_with_tip {
            *self.version.lock().unwrap()
        } else {
            None
        };
        Ok((self.chain_tip()?, version))
    }
}

/// A clock that moves only when told.
pub(crate) struct ManualClock(Mutex<std::time::Instant>);

impl ManualClock {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self(Mutex::new(std::time::Instant::now())))
    }

    pub(crate) fn advance(&self, by: std::time::Duration) {
        *self.0.lock().unwrap() += by;
    }
}

impl crate::Clock for ManualClock {
    fn now(&self) -> std::time::Instant {
        *self.0.lock().unwrap()
    }
}

struct Answer {
    status: StatusCode,
    headers: hyper::HeaderMap,
    body: Result<Vec<u8>, String>,
}

impl Answer {
    fn text(&self) -> String {
        String::from_utf8(self.body.clone().expect("a whole body")).unwrap()
    }
    fn json(&self) -> Value {
        serde_json::from_str(&self.text()).unwrap()
    }
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", |v| v.to_str().unwrap())
    }
}

async fn call_with(store: FakeStore, config: AppConfig, request: Request<()>) -> Answer {
    let app = App::new(Arc::new(store), config);
    let response = app.handle(request).await;
    let (parts, body) = response.into_parts();
    let body = body
        .collect()
        .await
        .map(|collected| collected.to_bytes().to_vec())
        .map_err(|err| err.to_string());
    Answer {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

async fn get(store: FakeStore, uri: &str) -> Answer {
    call_with(
        store,
        AppConfig::default(),
        Request::get(uri).body(()).unwrap(),
    )
    .await
}

fn rows() -> Vec<String> {
    (0..3).map(|i| format!("row {i}\n")).collect()
}

fn invalid(detail: u32, message: &str, inner: &str) -> Value {
    json!({"code": 3, "message": "InvalidArgument error", "details": [
        {"@type": "type.googleapis.com/vega.ErrorDetail", "code": detail, "message": message, "inner": inner}
    ]})
}

#[track_caller]
fn check_export_error(answer: &Answer, detail: u32, message: &str, inner: &str) {
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.header("content-type"), "application/json");
    assert_eq!(
        answer.json(),
        json!({"error": invalid(detail, message, inner)})
    );
}

#[tokio::test]
async fn export_rejects_bad_requests_in_the_stream_error_shape() {
    let export = "/api/v2/ledgerentry/export";
    let cases: &[(&str, u32, &str, &str)] = &[
        ("", 10014, "missing party id", ""),
        ("?partyId=", 10014, "missing party id", ""),
        ("?assetId=x", 10014, "missing party id", ""),
        (
            "?partyId=abc",
            10000,
            "invalid party id",
            r#"invalid party id: "abc""#,
        ),
    ];
    for (query, detail, message, inner) in cases {
        let answer = get(FakeStore::default(), &format!("{export}{query}")).await;
        check_export_error(&answer, *detail, message, inner);
    }
    let party = format!("{export}?partyId={PARTY}");
    let answer = get(FakeStore::default(), &format!("{party}&assetId=zz")).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.json()["error"]["details"][0]["code"], 10038);
    assert_eq!(
        answer.json()["error"]["details"][0]["message"],
        "invalid asset ID"
    );

    for name in ["dateRange.startTimestamp", "dateRange.endTimestamp"] {
        for bad in ["abc", "1.5", "99999999999999999999", "1e9"] {
            let answer = get(FakeStore::default(), &format!("{party}&{name}={bad}")).await;
            let detail = &answer.json()["error"]["details"][0];
            assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{name}={bad}");
            assert_eq!(detail["code"], 10015);
            assert_eq!(detail["message"], "malformed request");
            assert!(
                detail["inner"].as_str().unwrap().starts_with(name),
                "{detail}"
            );
        }
    }
    let answer = get(
        FakeStore::default(),
        &format!("{party}&dateRange.startTimestamp=2&dateRange.endTimestamp=1"),
    )
    .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        answer.json()["error"]["details"][0]["message"],
        "invalid date range"
    );
    assert_eq!(answer.json()["error"]["details"][0]["code"], 10000);
}

#[tokio::test]
async fn export_streams_the_header_then_the_rows_as_csv() {
    let store = FakeStore {
        rows: rows(),
        ..FakeStore::default()
    };
    let seen = Arc::clone(&store.seen);
    let uri = format!(
        "/api/v2/ledgerentry/export?partyId={}&assetId={ASSET}&dateRange.startTimestamp=1690000001000000000&dateRange.endTimestamp=1690000002000000000&unknown=1",
        PARTY.to_uppercase()
    );
    let answer = get(store, &uri).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.header("content-type"), "text/csv");
    assert_eq!(
        answer.header("content-disposition"),
        format!(
            "attachment;filename=ledger_entries_{PARTY}_{ASSET}_2023-07-22T04_26_41Z-2023-07-22T04_26_42Z.csv"
        )
    );
    assert_eq!(answer.text(), format!("{CSV_HEADER}row 0\nrow 1\nrow 2\n"));
    let filter = seen.lock().unwrap().unwrap();
    assert_eq!(filter.party.to_string(), PARTY);
    assert_eq!(filter.range.start(), Some(1_690_000_001_000_000_000));
    assert_eq!(filter.range.end(), Some(1_690_000_002_000_000_000));
}

#[tokio::test]
async fn export_of_nothing_is_the_header_alone() {
    let answer = get(
        FakeStore::default(),
        &format!("/api/v2/ledgerentry/export?partyId={PARTY}"),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.text(), CSV_HEADER);
}

/// Decodes the message form into (CSV bytes, extensions of each message).
fn decode_messages(text: &str) -> (String, Vec<Value>) {
    let mut csv = Vec::new();
    let mut extensions = Vec::new();
    for line in text.lines() {
        let message: Value = serde_json::from_str(line).unwrap();
        let result = &message["result"];
        assert_eq!(result["contentType"], "text/csv");
        let data = base64::engine::general_purpose::STANDARD
            .decode(result["data"].as_str().unwrap())
            .unwrap();
        csv.extend(data);
        extensions.push(result["extensions"].clone());
    }
    (String::from_utf8(csv).unwrap(), extensions)
}

#[tokio::test]
async fn export_answers_the_message_stream_when_json_is_preferred() {
    let store = FakeStore {
        rows: rows(),
        ..FakeStore::default()
    };
    let uri = format!("/api/v2/ledgerentry/export?partyId={PARTY}&dateRange.endTimestamp=5");
    let request = Request::get(&uri)
        .header("accept", "application/json")
        .body(())
        .unwrap();
    let answer = call_with(store, AppConfig::default(), request).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.header("content-type"), "application/x-ndjson");
    let (csv, extensions) = decode_messages(&answer.text());
    assert_eq!(csv, format!("{CSV_HEADER}row 0\nrow 1\nrow 2\n"));
    assert_eq!(
        extensions[0],
        json!([{
            "@type": "type.googleapis.com/datanode.api.v2.ExportLedgerEntriesRequest",
            "partyId": PARTY,
            "dateRange": {"endTimestamp": "5"}
        }])
    );
    assert!(
        extensions.len() >= 2,
        "header and rows are separate messages"
    );
    assert!(extensions[1..].iter().all(|e| e == &json!([])));
}

#[tokio::test]
async fn export_storage_failure_before_the_body_is_a_status() {
    // (unavailable, status, Retry-After, gRPC code, gRPC message, cause)
    let cases = [
        (
            false,
            StatusCode::INTERNAL_SERVER_ERROR,
            "",
            13,
            "Internal error",
            "corrupt",
        ),
        (
            true,
            StatusCode::SERVICE_UNAVAILABLE,
            "1",
            14,
            "Unavailable error",
            "unavailable",
        ),
    ];
    for (unavailable, status, retry_after, code, message, cause) in cases {
        let store = FakeStore {
            fail_before_start: true,
            unavailable,
            ..FakeStore::default()
        };
        let answer = get(
            store,
            &format!("/api/v2/ledgerentry/export?partyId={PARTY}"),
        )
        .await;
        assert_eq!(answer.status, status);
        assert_eq!(answer.header("retry-after"), retry_after);
        assert_eq!(
            answer.json(),
            json!({"error": {"code": code, "message": message, "details": [{
                "@type": "type.googleapis.com/vega.ErrorDetail", "code": 260002,
                "message": "failed to export ledger entries",
                "inner": format!("storage {cause}: disk on fire")
            }]}})
        );
    }
}

#[tokio::test]
async fn export_failure_mid_stream_aborts_the_csv_body() {
    let store = FakeStore {
        rows: rows(),
        fail_after: Some(2),
        ..FakeStore::default()
    };
    let answer = get(
        store,
        &format!("/api/v2/ledgerentry/export?partyId={PARTY}"),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    let err = answer.body.expect_err("a cut export must not end cleanly");
    assert!(err.contains("disk on fire"), "{err}");
}

#[tokio::test]
async fn export_failure_mid_stream_ends_the_message_form_with_an_error_line() {
    let store = FakeStore {
        rows: rows(),
        fail_after: Some(2),
        ..FakeStore::default()
    };
    let request = Request::get(format!("/api/v2/ledgerentry/export?partyId={PARTY}"))
        .header("accept", "application/x-ndjson")
        .body(())
        .unwrap();
    let answer = call_with(store, AppConfig::default(), request).await;
    let text = answer.text();
    let (last, data) = text
        .trim_end()
        .rsplit_once('\n')
        .map(|(d, l)| (l, d))
        .unwrap();
    let error: Value = serde_json::from_str(last).unwrap();
    assert_eq!(error["error"]["code"], 13);
    assert_eq!(
        error["error"]["details"][0]["inner"],
        "storage corrupt: disk on fire"
    );
    let (csv, _) = decode_messages(data);
    assert_eq!(csv, format!("{CSV_HEADER}row 0\nrow 1\n"));
}

#[tokio::test]
async fn exports_beyond_the_cap_get_503_with_retry_after() {
    let config = AppConfig {
        max_concurrent_exports: 0,
        ..AppConfig::default()
    };
    let request = Request::get(format!("/api/v2/ledgerentry/export?partyId={PARTY}"))
        .body(())
        .unwrap();
    let answer = call_with(FakeStore::default(), config, request).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.header("retry-after"), "1");
    assert_eq!(answer.json()["error"]["code"], 14);
}

#[tokio::test]
async fn oracle_listing_renders_vega_json_around_stored_nodes() {
    let answer = get(
        FakeStore::default(),
        "/api/v2/oracle/data?pagination.first=2",
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.header("content-type"), "application/json");
    let body = answer.json();
    let edges = body["oracleData"]["edges"].as_array().unwrap();
    assert_eq!(edges.len(), 2);
    assert_eq!(edges[0]["node"], json!({"n": 3}));
    assert_eq!(edges[1]["node"], json!({"n": 2}));
    let info = &body["oracleData"]["pageInfo"];
    assert_eq!(info["hasNextPage"], true);
    assert_eq!(info["hasPreviousPage"], false);
    assert_eq!(info["startCursor"], edges[0]["cursor"]);
    assert_eq!(info["endCursor"], edges[1]["cursor"]);
}

// The default runtime of a test has one thread: a page read on a blocking thread is read on
// another one.
#[tokio::test]
async fn local_pages_are_read_on_the_worker_unless_large_compressed_or_pretty() {
    let cases = [
        ("", None, true),
        ("?pagination.first=2", None, true),
        ("?pagination.last=1000", None, true),
        ("?pagination.first=1001", None, false),
        ("?pagination.first=2&pretty=true", None, false),
        ("?pagination.first=2", Some("gzip"), false),
    ];
    for (query, coding, inline) in cases {
        let uri = format!("/api/v2/oracle/data{query}");
        let mut answers = Vec::new();
        for local_pages in [false, true] {
            let store = FakeStore {
                local_pages,
                spec_and_pad: Some(300),
                ..FakeStore::default()
            };
            let threads = Arc::clone(&store.read_threads);
            let mut request = Request::get(&uri);
            if let Some(coding) = coding {
                request = request.header("accept-encoding", coding);
            }
            let answer = call_with(store, AppConfig::default(), request.body(()).unwrap()).await;
            assert_eq!(answer.status, StatusCode::OK, "{uri}");
            let threads = threads.lock().unwrap().clone();
            let here = std::thread::current().id();
            assert_eq!(threads.len(), 1, "{uri}");
            assert_eq!(
                threads[0] == here,
                local_pages && inline,
                "{uri} {coding:?}, local pages: {local_pages}"
            );
            answers.push((answer.header("content-encoding").to_owned(), answer.body));
        }
        // Read on either thread, the answer is the same.
        assert_eq!(answers[0], answers[1], "{uri} {coding:?}");
    }
}

/// A failed page read on the worker answers as one on a blocking thread, and so does one that
/// panics.
#[tokio::test]
async fn a_local_page_that_fails_or_panics_is_a_500_in_the_bare_shape() {
    let mut answers = Vec::new();
    for local_pages in [false, true] {
        let failing = FakeStore {
            local_pages,
            ..FakeStore::failing_pages()
        };
        let panicking = FakeStore {
            local_pages,
            panic_pages: true,
            ..FakeStore::default()
        };
        for store in [failing, panicking] {
            let answer = get(store, "/api/v2/oracle/data").await;
            assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
            assert_eq!(answer.json()["code"], 13);
            answers.push(answer.json()["details"][0]["message"].clone());
        }
    }
    assert!(
        answers.iter().all(|message| message == &answers[0]),
        "{answers:?}"
    );
}

#[tokio::test]
async fn oracle_listing_rejects_bad_requests_in_the_bare_shape() {
    let cases: &[(&str, u32, &str)] = &[
        ("oracleSpecId=nope", 10000, "invalid oracle spec ID"),
        ("pagination.first=0", 10028, "invalid pagination"),
        ("pagination.first=", 10028, "invalid pagination"),
        (
            "pagination.first=1&pagination.last=1",
            10028,
            "invalid pagination",
        ),
        ("pagination.after=garbage", 10028, "invalid pagination"),
        ("pagination.newestFirst=maybe", 10028, "invalid pagination"),
    ];
    for (query, detail, message) in cases {
        let answer = get(
            FakeStore::default(),
            &format!("/api/v2/oracle/data?{query}"),
        )
        .await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{query}");
        let body = answer.json();
        assert_eq!(body["code"], 3, "{query}");
        assert_eq!(body["details"][0]["code"], *detail, "{query}");
        assert_eq!(body["details"][0]["message"], *message, "{query}");
        assert!(
            !body["details"][0]["inner"].as_str().unwrap().is_empty(),
            "{query}"
        );
    }
}

#[tokio::test]
async fn oracle_storage_failure_is_a_500_in_the_bare_shape() {
    let answer = get(FakeStore::failing_pages(), "/api/v2/oracle/data").await;
    assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(answer.json()["code"], 13);
    assert_eq!(answer.json()["details"][0]["code"], 190003);

    let unavailable = FakeStore {
        unavailable: true,
        ..FakeStore::failing_pages()
    };
    let answer = get(unavailable, "/api/v2/oracle/data").await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.header("retry-after"), "1");
    assert_eq!(
        answer.json(),
        json!({"code": 14, "message": "Unavailable error", "details": [{
            "@type": "type.googleapis.com/vega.ErrorDetail", "code": 190003,
            "message": "failed retrieve data for oracle data",
            "inner": "storage unavailable: disk on fire"
        }]})
    );
}

// Paused time: the page's wait for a slot passes at once.
#[tokio::test(start_paused = true)]
async fn pages_beyond_their_cap_get_503_with_retry_after() {
    let config = AppConfig {
        max_concurrent_pages: 0,
        ..AppConfig::default()
    };
    let request = Request::get("/api/v2/oracle/data").body(()).unwrap();
    let answer = call_with(FakeStore::default(), config, request).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(answer.header("retry-after"), "1");
    assert_eq!(answer.json()["code"], 14);
    assert_eq!(answer.json()["details"][0]["message"], "server busy");
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_in_vega_shape() {
    let answer = get(FakeStore::default(), "/api/v2/nothing").await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(
        answer.text(),
        r#"{"code":5,"message":"Not Found","details":[]}"#
    );
    let cases = [
        (Method::POST, "/api/v2/oracle/data", "GET, OPTIONS"),
        (Method::POST, "/api/v2/ledgerentry/export", "GET, OPTIONS"),
        (Method::HEAD, "/api/v2/ledgerentry/export", "GET, OPTIONS"),
        (Method::DELETE, "/health", "GET, HEAD, OPTIONS"),
        (Method::PUT, "/metrics", "GET, OPTIONS"),
    ];
    for (method, path, allow) in cases {
        let request = Request::builder()
            .method(&method)
            .uri(path)
            .body(())
            .unwrap();
        let answer = call_with(FakeStore::default(), AppConfig::default(), request).await;
        assert_eq!(
            answer.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path}"
        );
        assert_eq!(answer.header("allow"), allow, "{method} {path}");
    }
    let head = Request::head("/health").body(()).unwrap();
    let answer = call_with(FakeStore::default(), AppConfig::default(), head).await;
    assert_eq!(answer.status, StatusCode::OK);
}
