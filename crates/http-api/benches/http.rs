//! The HTTP layer over an in-memory store: a page of 100 oracle data rendered around stored
//! nodes, and an export streamed through the chunking sink, plain and compressed.
//!
//! `cargo bench -p http-api`. Storage and sockets are left out on purpose: the end-to-end
//! `bench` command measures them (docs/PERFORMANCE.md).

#![allow(missing_docs)]

use std::ops::ControlFlow;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use http_api::{App, AppConfig};
use http_body_util::BodyExt;
use hyper::Request;
use ledger_core::{ExportFilter, OracleSpecId};
use oracle_core::{PageRequest, Position};
use storage::{ExportSink, ExportSummary, Health, LedgerStore, OraclePage, OracleStore};

const PARTY: &str = "cd447e35b8b6d8fe442e3d437204e52db2221a58008a05a6c4647159c324c985";

/// Rows and nodes shaped like the generated dataset's.
struct MemoryStore {
    rows: Vec<Vec<u8>>,
    node: Vec<u8>,
}

impl MemoryStore {
    fn new(rows: usize) -> Self {
        let row = format!(
            "2023-07-22 04:26:41.450275+00,737535954357,-737535954357,TRANSFER_TYPE_MARGIN_LOW,{a},{m},{p},GENERAL,1000000000000000000000,{m},{p},MARGIN,123456789\n",
            a = "761a44e8f7283712feb22a3dc5a21b1bec3b622ae51f03bc2c5eeb061bf02a9d",
            m = "3d058bdb5102741a05d9e85e27d1db20939091861faa99ca9d98c2b58a9ec133",
            p = PARTY,
        );
        // Vary the rows a little so that compression sees realistic, not identical, lines.
        let rows = (0..rows)
            .map(|n| {
                row.replacen("450275408", &format!("{:09}", n % 1_000_000_000), 1)
                    .into_bytes()
            })
            .collect();
        let node = br#"{"externalData":{"data":{"signers":[{"ethAddress":{"address":"0x6d8f5202cb9a7cded9094a4140f98fa727b0423c"}}],"data":[{"name":"prices.ETH.value","value":"575817753"},{"name":"timestamp","value":"1690000001"}],"matchedSpecIds":["3d058bdb5102741a05d9e85e27d1db20939091861faa99ca9d98c2b58a9ec133"],"broadcastAt":"1690000001450275408","metaData":[{"name":"eth-block-height","value":"17000000"}]}}}"#.to_vec();
        MemoryStore { rows, node }
    }
}

impl LedgerStore for MemoryStore {
    fn export_ledger(
        &self,
        _filter: &ExportFilter,
        sink: &mut dyn ExportSink,
    ) -> Result<ExportSummary, storage::Error> {
        let mut summary = ExportSummary::default();
        if sink.started().is_break() {
            summary.stopped = true;
            return Ok(summary);
        }
        for row in &self.rows {
            summary.rows += 1;
            if let ControlFlow::Break(()) = sink.rows(row, 1) {
                summary.stopped = true;
                break;
            }
        }
        Ok(summary)
    }
}

impl OracleStore for MemoryStore {
    fn oracle_pages(
        &self,
        _spec: Option<&OracleSpecId>,
        request: &PageRequest,
        ahead: usize,
    ) -> Result<OraclePage, storage::Error> {
        let scan = request.read_ahead_scan(ahead);
        let rows = (0..scan.limit as u64)
            .map(|n| {
                let position = Position {
                    vega_time: 1_690_000_000_000_000_000 - n as i64,
                    block: 1_000_000,
                    seq: 1,
                };
                (position, self.node.clone())
            })
            .collect();
        Ok(OraclePage::assemble(request, rows, false, ahead))
    }
}

impl Health for MemoryStore {
    fn check(&self) -> Result<(), storage::Error> {
        Ok(())
    }

    fn chain_tip(&self) -> Result<Option<storage::ChainTip>, storage::Error> {
        Ok(Some(storage::ChainTip {
            first_height: 1,
            last_height: 1,
            last_vega_time: Some(0),
        }))
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

async fn body_len(app: &App, request: Request<()>) -> usize {
    let response = app.handle(request).await;
    let body = response.into_body().collect().await.expect("a whole body");
    body.to_bytes().len()
}

fn page(c: &mut Criterion) {
    let runtime = runtime();
    let app = App::new(Arc::new(MemoryStore::new(0)), AppConfig::default());
    let mut group = c.benchmark_group("oracle page");
    group.throughput(Throughput::Elements(1));
    for (name, pretty) in [("100 rows", ""), ("100 rows, pretty", "&pretty")] {
        let uri = format!("/api/v2/oracle/data?pagination.first=100{pretty}");
        group.bench_function(name, |b| {
            b.to_async(&runtime)
                .iter(|| body_len(&app, Request::get(uri.as_str()).body(()).expect("request")))
        });
    }
    group.finish();
}

fn export(c: &mut Criterion) {
    let runtime = runtime();
    let rows = 100_000;
    let store = MemoryStore::new(rows);
    let bytes: usize = store.rows.iter().map(Vec::len).sum();
    let app = App::new(Arc::new(store), AppConfig::default());
    let uri = format!("/api/v2/ledgerentry/export?partyId={PARTY}");
    let mut group = c.benchmark_group("export 100k rows");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(bytes as u64));
    for coding in ["identity", "gzip", "zstd", "br"] {
        group.bench_function(coding, |b| {
            b.to_async(&runtime).iter(|| {
                let request = Request::get(uri.as_str())
                    .header("accept-encoding", coding)
                    .body(())
                    .expect("request");
                body_len(&app, request)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, page, export);
criterion_main!(benches);
