//! The whole request path of the HTTP service: routing, query strings of both endpoints,
//! cursors, `Accept` and `Accept-Encoding` negotiation, compression and the error envelopes.
//!
//! The service runs in-process over an SQLite store in a temporary directory holding the sample
//! event stream of the ingest tests, so valid requests reach real rows.
//!
//! Input: UTF-8 text, first line `METHOD TARGET`, then `name: value` header lines; requests
//! that `hyper` could not represent are skipped, since a client cannot send them.
//! Checks: no panic and no 5xx; the body reads to its end; every 4xx body, once decompressed
//! per its `Content-Encoding`, is Vega's `google.rpc.Status` JSON (`code`, `message`,
//! `details`), wrapped as `{"error":…}` on the export path; JSON answers of 200 parse.

#![no_main]

use std::io::Read as _;
use std::sync::{Arc, LazyLock};

use http_api::{App, AppConfig, EXPORT_PATH};
use http_body_util::BodyExt as _;
use hyper::header::{CONTENT_ENCODING, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use storage::{SqliteConfig, SqliteStore};

/// The sample stream of the ingest tests.
const SAMPLE: &[u8] = include_bytes!("../../crates/ingest/testdata/sample-events.ndjson");

struct Harness {
    runtime: tokio::runtime::Runtime,
    app: App,
    // Kept for the process's life: the store's files live here.
    _dir: tempfile::TempDir,
}

static HARNESS: LazyLock<Harness> = LazyLock::new(|| {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = SqliteStore::open(dir.path().join("fuzz.db"), SqliteConfig::default())
        .expect("a new store");
    let mut writer = store.writer().expect("a writer");
    ingest::ingest(
        std::io::Cursor::new(SAMPLE),
        &mut writer,
        &ingest::IngestOptions::default(),
        &mut |_| {},
    )
    .expect("the sample ingests");
    drop(writer);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let app = App::new(Arc::new(store), AppConfig::default());
    Harness {
        runtime,
        app,
        _dir: dir,
    }
});

fuzz_target!(|data: &[u8]| {
    let Some(request) = request_of(data) else {
        return;
    };
    let export = request.uri().path() == EXPORT_PATH;
    let harness = &*HARNESS;
    let (status, content_type, body) = harness.runtime.block_on(async {
        let response: Response<_> = harness.app.handle(request).await;
        let (parts, body) = response.into_parts();
        let body = body.collect().await.expect("the body reads to its end");
        let coding = parts
            .headers
            .get(CONTENT_ENCODING)
            .map(|v| v.as_bytes().to_vec());
        let content_type = parts
            .headers
            .get(CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        (
            parts.status,
            content_type,
            decompress(coding.as_deref(), &body.to_bytes()),
        )
    });
    assert!(!status.is_server_error(), "{status}");
    if status.is_client_error() {
        assert_eq!(content_type, "application/json", "{status}");
        let json: Value = serde_json::from_slice(&body).expect("an error body is JSON");
        let status_json = if export { &json["error"] } else { &json };
        check_status(status, status_json);
    } else if status == StatusCode::OK && content_type == "application/json" && !export {
        serde_json::from_slice::<Value>(&body).expect("a JSON answer parses");
    }
});

/// The request `data` describes, if it is one a client could send.
fn request_of(data: &[u8]) -> Option<Request<()>> {
    let text = std::str::from_utf8(data).ok()?;
    let mut lines = text.split('\n');
    let (method, target) = lines.next()?.split_once(' ')?;
    let mut builder = Request::builder().method(method).uri(target);
    for line in lines {
        let (name, value) = line.split_once(':')?;
        builder = builder.header(name, value.trim_start());
    }
    builder.body(()).ok()
}

/// `body` decoded from the `Content-Encoding` named by `coding`.
fn decompress(coding: Option<&[u8]>, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        None => out.extend_from_slice(body),
        Some(b"gzip") => {
            flate2::read::GzDecoder::new(body)
                .read_to_end(&mut out)
                .expect("valid gzip");
        }
        Some(b"zstd") => out = zstd::decode_all(body).expect("valid zstd"),
        Some(b"br") => {
            brotli::Decompressor::new(body, 4096)
                .read_to_end(&mut out)
                .expect("valid brotli");
        }
        Some(other) => panic!("unknown coding {:?}", String::from_utf8_lossy(other)),
    }
    out
}

/// `json` is a `google.rpc.Status` matching the HTTP `status`.
fn check_status(status: StatusCode, json: &Value) {
    let object = json.as_object().expect("the status is an object");
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["code", "details", "message"], "{json}");
    let code = json["code"].as_u64().expect("a numeric code");
    let expected = match status {
        StatusCode::BAD_REQUEST => 3,
        StatusCode::NOT_FOUND => 5,
        StatusCode::METHOD_NOT_ALLOWED => 12,
        other => panic!("unexpected status {other}: {json}"),
    };
    assert_eq!(code, expected, "{json}");
    assert!(json["message"].is_string(), "{json}");
    for detail in json["details"].as_array().expect("details are an array") {
        assert!(detail["code"].is_u64(), "{json}");
        assert!(detail["message"].is_string(), "{json}");
        assert!(detail["inner"].is_string(), "{json}");
    }
}
