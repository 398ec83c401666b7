//! `GET /api/v2/ledgerentry/export`: a party's ledger entries as a streamed CSV file.
//!
//! The store reads on a blocking thread and pushes rows into a sink that cuts them into chunks,
//! compresses them when the client accepts it, and hands them to the response body through a
//! bounded channel: a slow client slows the read, a gone client stops it at the next chunk, and
//! memory stays at a few chunks per export.

use std::ops::ControlFlow;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::Bytes;
use hyper::header::{CONTENT_DISPOSITION, CONTENT_ENCODING, CONTENT_TYPE, HeaderValue, VARY};
use hyper::{Request, Response};
use ledger_core::{AssetId, CSV_HEADER, ExportFilter, PartyId, TimeRange};
use serde::Serialize;
use storage::{ExportSink, ExportSummary};
use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot};

use crate::accept::{ExportForm, export_form};
use crate::body::{self, Body, BodyError};
use crate::coding::Encoder;
use crate::error::{ApiError, ErrorShape, detail};
use crate::metrics::Abort;
use crate::query::{Field, Query, fields};
use crate::respond::Style;
use crate::{App, Metrics};

/// Rows are sent in chunks of about this many bytes: large enough to keep per-chunk costs (a
/// hand-off between threads and its wake-ups, a write call, a message envelope, a compression
/// flush) negligible, small enough that memory stays at about a megabyte per export. 64 KiB chunks
/// spent a sixth of the export's time switching threads; 256 KiB ones cut the whale's export
/// from 0.43 s to 0.26 s (docs/PERFORMANCE.md). The CSV header goes out alone, at once, whatever
/// the size.
const CHUNK_BYTES: usize = 256 * 1024;

/// Chunks in flight between the reading thread and the socket, per export.
const CHANNEL_CHUNKS: usize = 4;

pub(crate) async fn export<B>(
    app: &App,
    request: &Request<B>,
    query: &Query<'_>,
    style: Style,
) -> Result<Response<Body>, ApiError> {
    let filter = parse_filter(query)?;
    let form = export_form(request.headers());
    let permit = app.try_export_permit()?;
    let encoder = Encoder::new(style.coding).map_err(|err| ApiError::Internal {
        detail: detail::LEDGER_EXPORT,
        message: EXPORT_FAILED,
        source: Box::new(err),
    })?;

    let (sender, receiver) = mpsc::channel(CHANNEL_CHUNKS);
    let (started_sender, started) = oneshot::channel();
    let store = Arc::clone(&app.inner.ledger);
    let metrics = app.metrics();
    let file_name = filter.file_name();
    let reader = app.clone();
    tokio::task::spawn_blocking(move || {
        let mut sink = ChannelSink {
            _permit: permit,
            _in_flight: InFlight::new(&metrics),
            sender,
            started: Some(started_sender),
            buffer: Vec::with_capacity(CHUNK_BYTES + 1024),
            messages: (form == ExportForm::Messages).then(|| Some(extensions(&filter))),
            encoder: Some(encoder),
            unreported_rows: 0,
            metrics: &metrics,
        };
        let result = store.export_ledger(&filter, &mut sink);
        reader.record_read(&result);
        sink.end(result);
    });

    match started.await {
        Ok(Ok(())) => {}
        Ok(Err(err)) => return Err(ApiError::storage(detail::LEDGER_EXPORT, EXPORT_FAILED, err)),
        Err(_) => {
            return Err(ApiError::Internal {
                detail: detail::LEDGER_EXPORT,
                message: EXPORT_FAILED,
                source: "the export ended before it started".into(),
            });
        }
    }

    let mut response = Response::new(body::channel(receiver));
    let headers = response.headers_mut();
    let content_type = match form {
        ExportForm::Csv => "text/csv",
        ExportForm::Messages => "application/x-ndjson",
    };
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    let disposition = format!("attachment;filename={file_name}");
    headers.insert(
        CONTENT_DISPOSITION,
        HeaderValue::from_str(&disposition).expect("file names are ASCII without controls"),
    );
    headers.insert(VARY, HeaderValue::from_static("Accept-Encoding"));
    if let Some(token) = style.coding.token() {
        headers.insert(CONTENT_ENCODING, HeaderValue::from_static(token));
    }
    Ok(response)
}

/// Vega's detail message for an export the store could not serve.
const EXPORT_FAILED: &str = "failed to export ledger entries";

/// Counts an export in the in-flight gauge for as long as it lives, whatever way it ends.
struct InFlight<'m>(&'m Metrics);

impl<'m> InFlight<'m> {
    fn new(metrics: &'m Metrics) -> Self {
        metrics.exports_in_flight.inc();
        InFlight(metrics)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.exports_in_flight.dec();
    }
}

struct ChannelSink<'m> {
    // Fields drop in order: the permit and the gauge are released before the sender closes
    // the body, so a client that starts its next export the moment this one ends finds the
    // slot free.
    _permit: OwnedSemaphorePermit,
    _in_flight: InFlight<'m>,
    sender: mpsc::Sender<Result<Bytes, BodyError>>,
    started: Option<oneshot::Sender<Result<(), storage::Error>>>,
    buffer: Vec<u8>,
    /// For the message form: the first message's `extensions` until it is sent, then `None`
    /// inside `Some`.
    messages: Option<Option<String>>,
    /// Compresses chunks when the client accepts it; `None` once finished.
    encoder: Option<Encoder>,
    /// Rows buffered or sent since the metrics last heard of them.
    unreported_rows: u64,
    metrics: &'m Metrics,
}

impl ChannelSink<'_> {
    /// Finishes the body as the export ended: whole, stopped by the client, failed before it
    /// started (reported as a status) or failed after (aborted).
    fn end(&mut self, result: Result<ExportSummary, storage::Error>) {
        match result {
            Ok(summary) if summary.stopped => {
                self.metrics.export_aborted(Abort::ClientGone);
                tracing::debug!(rows = summary.rows, "export stopped: the client went away");
            }
            Ok(summary) => {
                // A failed final send means the client left during the last chunk.
                if self.finish().is_break() {
                    self.metrics.export_aborted(Abort::ClientGone);
                }
                tracing::debug!(rows = summary.rows, "export completed");
            }
            Err(err) => match self.started.take() {
                Some(started) => {
                    let _ = started.send(Err(err));
                }
                None => {
                    tracing::error!(error = %crate::error::chain(&err), "export failed after it started");
                    self.metrics.export_aborted(Abort::Failed);
                    self.fail(err);
                }
            },
        }
        self.report();
    }

    /// Sends the buffered bytes as one chunk.
    fn flush(&mut self) -> ControlFlow<()> {
        if self.buffer.is_empty() {
            return ControlFlow::Continue(());
        }
        let csv = std::mem::replace(&mut self.buffer, Vec::with_capacity(CHUNK_BYTES + 1024));
        self.metrics.export_bytes.inc_by(csv.len() as u64);
        self.report();
        let chunk = match &mut self.messages {
            None => csv,
            Some(extensions) => message(&csv, extensions.take().as_deref()),
        };
        self.send(chunk)
    }

    /// Compresses and sends one chunk of the body.
    fn send(&mut self, chunk: Vec<u8>) -> ControlFlow<()> {
        let Some(encoder) = self.encoder.as_mut() else {
            return ControlFlow::Break(());
        };
        let bytes = match encoder.chunk(chunk) {
            Ok(bytes) => bytes,
            Err(err) => {
                tracing::error!(error = %err, "export compression failed");
                let _ = self.sender.blocking_send(Err(BodyError(err.to_string())));
                return ControlFlow::Break(());
            }
        };
        if bytes.is_empty() {
            return ControlFlow::Continue(());
        }
        match self.sender.blocking_send(Ok(Bytes::from(bytes))) {
            Ok(()) => ControlFlow::Continue(()),
            Err(_) => ControlFlow::Break(()),
        }
    }

    /// Sends what is buffered, then the end of the compressed stream.
    fn finish(&mut self) -> ControlFlow<()> {
        self.flush()?;
        let Some(encoder) = self.encoder.take() else {
            return ControlFlow::Continue(());
        };
        match encoder.finish() {
            Ok(trailer) if trailer.is_empty() => ControlFlow::Continue(()),
            Ok(trailer) => match self.sender.blocking_send(Ok(Bytes::from(trailer))) {
                Ok(()) => ControlFlow::Continue(()),
                Err(_) => ControlFlow::Break(()),
            },
            Err(err) => {
                let _ = self.sender.blocking_send(Err(BodyError(err.to_string())));
                ControlFlow::Break(())
            }
        }
    }

    /// Adds the rows counted so far to the metrics.
    fn report(&mut self) {
        self.metrics
            .export_rows
            .inc_by(std::mem::take(&mut self.unreported_rows));
    }

    /// Ends a started export that failed: the message form says so in a last line, the CSV
    /// form is aborted so that no client mistakes a truncated file for a whole one.
    fn fail(&mut self, err: storage::Error) {
        if self.messages.is_some() {
            let _ = self.flush();
            let error = ApiError::storage(detail::LEDGER_EXPORT, EXPORT_FAILED, err);
            let mut line = error.json(ErrorShape::Stream);
            line.push(b'\n');
            if self.send(line).is_continue() {
                let _ = self.finish();
            }
        } else {
            let _ = self
                .sender
                .blocking_send(Err(BodyError(crate::error::chain(&err))));
        }
    }
}

impl ExportSink for ChannelSink<'_> {
    fn started(&mut self) -> ControlFlow<()> {
        let Some(started) = self.started.take() else {
            return ControlFlow::Continue(());
        };
        if started.send(Ok(())).is_err() {
            return ControlFlow::Break(());
        }
        // The header goes out on its own so that the first byte leaves before the first row.
        self.buffer.extend_from_slice(CSV_HEADER.as_bytes());
        self.flush()
    }

    fn rows(&mut self, csv_lines: &[u8], count: u64) -> ControlFlow<()> {
        // A store may hand over a whole segment (about a chunk) at once: sending what is
        // buffered first keeps chunks, and so the bytes held in the channel, near the bound.
        if self.buffer.len() + csv_lines.len() > CHUNK_BYTES {
            self.flush()?;
        }
        self.buffer.extend_from_slice(csv_lines);
        self.unreported_rows += count;
        if self.buffer.len() >= CHUNK_BYTES {
            return self.flush();
        }
        ControlFlow::Continue(())
    }
}

/// One `google.api.HttpBody` stream message carrying `csv`.
fn message(csv: &[u8], extensions: Option<&str>) -> Vec<u8> {
    let mut out = Vec::with_capacity(csv.len() * 4 / 3 + 256);
    out.extend_from_slice(br#"{"result":{"contentType":"text/csv","data":""#);
    let start = out.len();
    out.resize(
        start + base64::encoded_len(csv.len(), true).expect("chunks are small"),
        0,
    );
    let written = BASE64
        .encode_slice(csv, &mut out[start..])
        .expect("the buffer was sized for it");
    out.truncate(start + written);
    out.extend_from_slice(br#"","extensions":["#);
    if let Some(extensions) = extensions {
        out.extend_from_slice(extensions.as_bytes());
    }
    out.extend_from_slice(b"]}}\n");
    out
}

/// `datanode.api.v2.ExportLedgerEntriesRequest` as Vega's gateway echoes it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EchoedRequest {
    #[serde(rename = "@type")]
    type_url: &'static str,
    party_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    asset_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    date_range: Option<EchoedRange>,
}

/// `datanode.api.v2.DateRange`; int64 fields are JSON strings in proto3's mapping.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EchoedRange {
    #[serde(skip_serializing_if = "Option::is_none")]
    start_timestamp: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    end_timestamp: Option<String>,
}

/// The normalised request, as the first message's `extensions` entry. Once per export: no hot
/// path, so serde writes it.
fn extensions(filter: &ExportFilter) -> String {
    let range = &filter.range;
    let request = EchoedRequest {
        type_url: "type.googleapis.com/datanode.api.v2.ExportLedgerEntriesRequest",
        party_id: filter.party.to_string(),
        asset_id: filter.asset.as_ref().map(ToString::to_string),
        date_range: (range.start().is_some() || range.end().is_some()).then(|| EchoedRange {
            start_timestamp: range.start().map(|start| start.to_string()),
            end_timestamp: range.end().map(|end| end.to_string()),
        }),
    };
    serde_json::to_string(&request).expect("plain structs of strings always serialize")
}

/// The query string as an [`ExportFilter`], or the error Vega gives for it.
pub(crate) fn parse_filter(query: &Query<'_>) -> Result<ExportFilter, ApiError> {
    let party = query
        .get(fields::PARTY_ID)?
        .ok_or_else(|| ApiError::invalid(detail::MISSING_PARTY_ID, "missing party id", ""))?
        .parse::<PartyId>()
        .map_err(|err| {
            ApiError::invalid(detail::NOT_MAPPED, "invalid party id", err.to_string())
        })?;
    let asset = query
        .get(fields::ASSET_ID)?
        .map(str::parse::<AssetId>)
        .transpose()
        .map_err(|err| {
            ApiError::invalid(
                detail::INVALID_ASSET_ID,
                "invalid asset ID",
                err.to_string(),
            )
        })?;
    let timestamp = |field: Field| -> Result<Option<i64>, ApiError> {
        query
            .get(field)?
            .map(|text| {
                text.parse::<i64>().map_err(|_| {
                    ApiError::invalid(
                        detail::MALFORMED_REQUEST,
                        "malformed request",
                        format!(
                            "{}: {text:?} is not a decimal int64 of Unix nanoseconds",
                            field.json
                        ),
                    )
                })
            })
            .transpose()
    };
    let start = timestamp(fields::START_TIMESTAMP)?;
    let end = timestamp(fields::END_TIMESTAMP)?;
    let range = TimeRange::new(start, end).map_err(|err| {
        ApiError::invalid(detail::NOT_MAPPED, "invalid date range", err.to_string())
    })?;
    Ok(ExportFilter {
        party,
        asset,
        range,
    })
}
