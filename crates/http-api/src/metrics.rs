//! Prometheus metrics of the service, rendered by `GET /metrics` in the text format.
//!
//! The `prometheus` crate (TiKV's) keeps the counters lock-free and renders the classic text
//! exposition format (0.0.4) that every Prometheus server scrapes.

use std::sync::atomic::{AtomicU64, Ordering};

use storage::ChainTip;

use prometheus::{
    Encoder as _, Gauge, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::BuildInfo;

/// The routes requests are counted by: a closed set, so that arbitrary paths cannot grow the
/// label space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    Export,
    OracleData,
    Health,
    Metrics,
    OpenApi,
    Info,
    Other,
}

impl Route {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Route::Export => "ledgerentry_export",
            Route::OracleData => "oracle_data",
            Route::Health => "health",
            Route::Metrics => "metrics",
            Route::OpenApi => "openapi",
            Route::Info => "info",
            Route::Other => "other",
        }
    }
}

/// Why an export ended before its last row: the label of `datanode_exports_aborted_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Abort {
    /// The client went away.
    ClientGone,
    /// The store failed after the export had started.
    Failed,
}

impl Abort {
    fn label(self) -> &'static str {
        match self {
            Abort::ClientGone => "client_gone",
            Abort::Failed => "failed",
        }
    }
}

/// Where an ingest running in the same process has got to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IngestProgress {
    /// Events stored so far.
    pub events: u64,
    /// Ledger entries stored so far.
    pub ledger_entries: u64,
    /// Oracle data stored so far.
    pub oracle_data: u64,
    /// Height of the last committed block.
    pub last_block_height: Option<u64>,
    /// Vega time of the last committed block, in Unix nanoseconds.
    pub last_vega_time: Option<i64>,
}

/// Every metric of the service, in one registry.
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    duration: HistogramVec,
    pub(crate) export_rows: IntCounter,
    pub(crate) export_bytes: IntCounter,
    pub(crate) exports_in_flight: IntGauge,
    exports_aborted: IntCounterVec,
    storage_failures: IntCounterVec,
    pub(crate) exports_refused: IntCounter,
    pub(crate) pages_refused: IntCounter,
    pub(crate) page_cache_hits: IntCounter,
    pub(crate) page_cache_misses: IntCounter,
    pub(crate) pages_read_ahead: IntCounter,
    ingest_events: IntCounter,
    ingest_ledger_entries: IntCounter,
    ingest_oracle_data: IntCounter,
    ingest_last_block: IntGauge,
    ingest_last_vega_time: Gauge,
    ingest_running: IntGauge,
    first_block: IntGauge,
    last_block: IntGauge,
    last_vega_time: Gauge,
    build_info: IntGaugeVec,
    /// The totals last reported, so that counters advance by the difference.
    ingest_reported: [AtomicU64; 3],
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every metric at zero.
    pub fn new() -> Self {
        let registry = Registry::new();
        let counter = |name: &str, help: &str| {
            let counter = IntCounter::new(name, help).expect("valid metric name");
            registry
                .register(Box::new(counter.clone()))
                .expect("metric registered once");
            counter
        };
        let gauge = |name: &str, help: &str| {
            let gauge = IntGauge::new(name, help).expect("valid metric name");
            registry
                .register(Box::new(gauge.clone()))
                .expect("metric registered once");
            gauge
        };
        let requests = IntCounterVec::new(
            Opts::new(
                "datanode_http_requests_total",
                "HTTP requests answered, by route and status",
            ),
            &["route", "status"],
        )
        .expect("valid metric");
        let duration = HistogramVec::new(
            HistogramOpts::new(
                "datanode_http_request_duration_seconds",
                "Time from a request's arrival to the last byte of its response, by route",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0, 30.0, 60.0, 300.0,
            ]),
            &["route"],
        )
        .expect("valid metric");
        let exports_aborted = IntCounterVec::new(
            Opts::new(
                "datanode_exports_aborted_total",
                "Exports that ended before their last row, by reason",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let storage_failures = IntCounterVec::new(
            Opts::new(
                "datanode_storage_failures_total",
                "Storage reads that failed, by kind (unavailable, corrupt, internal)",
            ),
            &["kind"],
        )
        .expect("valid metric");
        let ingest_last_vega_time = Gauge::new(
            "datanode_ingest_last_vega_time_seconds",
            "Vega time of the last block committed by the ingest in this process",
        )
        .expect("valid metric name");
        let last_vega_time = Gauge::new(
            "datanode_last_block_vega_time_seconds",
            "Vega time of the last block stored (on a replica, the last one replayed)",
        )
        .expect("valid metric name");
        let build_info = IntGaugeVec::new(
            Opts::new(
                "datanode_build_info",
                "1, labelled with the version and the git commit of the running server",
            ),
            &["version", "commit"],
        )
        .expect("valid metric");
        for collector in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(duration.clone()),
            Box::new(exports_aborted.clone()),
            Box::new(storage_failures.clone()),
            Box::new(ingest_last_vega_time.clone()),
            Box::new(last_vega_time.clone()),
            Box::new(build_info.clone()),
        ] {
            registry
                .register(collector)
                .expect("metric registered once");
        }
        // The standard process_* metrics (CPU seconds, resident and virtual memory, open and
        // maximum file descriptors, start time, threads), read from /proc at each scrape: the
        // collector exists on Linux only.
        #[cfg(target_os = "linux")]
        registry
            .register(Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            ))
            .expect("metric registered once");
        Metrics {
            requests,
            duration,
            export_rows: counter(
                "datanode_export_rows_total",
                "Ledger entry rows sent by exports",
            ),
            export_bytes: counter(
                "datanode_export_bytes_total",
                "CSV bytes produced by exports, before any compression",
            ),
            exports_in_flight: gauge("datanode_exports_in_flight", "Exports running now"),
            exports_aborted,
            storage_failures,
            exports_refused: counter(
                "datanode_exports_refused_total",
                "Exports refused with 503 because too many were running",
            ),
            pages_refused: counter(
                "datanode_pages_refused_total",
                "Oracle data pages refused with 503 because too many were being read",
            ),
            page_cache_hits: counter(
                "datanode_page_cache_hits_total",
                "Oracle data pages answered from the page cache, without reading the store",
            ),
            page_cache_misses: counter(
                "datanode_page_cache_misses_total",
                "Oracle data pages read from the store while the page cache is on",
            ),
            pages_read_ahead: counter(
                "datanode_pages_read_ahead_total",
                "Oracle data pages of a walk read ahead into the page cache, before they were asked",
            ),
            ingest_events: counter(
                "datanode_ingest_events_total",
                "Events stored by the ingest in this process",
            ),
            ingest_ledger_entries: counter(
                "datanode_ingest_ledger_entries_total",
                "Ledger entries stored by the ingest in this process",
            ),
            ingest_oracle_data: counter(
                "datanode_ingest_oracle_data_total",
                "Oracle data stored by the ingest in this process",
            ),
            ingest_last_block: gauge(
                "datanode_ingest_last_block_height",
                "Height of the last block committed by the ingest in this process",
            ),
            ingest_last_vega_time,
            ingest_running: gauge(
                "datanode_ingest_running",
                "1 while an ingest runs in this process",
            ),
            first_block: gauge(
                "datanode_first_block_height",
                "Lowest block height stored (0 while no block is stored)",
            ),
            last_block: gauge(
                "datanode_last_block_height",
                "Highest block height stored (0 while no block is stored)",
            ),
            last_vega_time,
            build_info,
            ingest_reported: Default::default(),
            registry,
        }
    }

    /// Sets `datanode_build_info` to 1 for `build`, as Prometheus's build_info convention has it.
    pub(crate) fn build(&self, build: &BuildInfo) {
        self.build_info
            .with_label_values(&[build.version.as_str(), build.commit.as_str()])
            .set(1);
    }

    /// Counts one answered request.
    pub(crate) fn request(&self, route: Route, status: u16, seconds: f64) {
        self.requests
            .with_label_values(&[route.label(), &status.to_string()])
            .inc();
        self.duration
            .with_label_values(&[route.label()])
            .observe(seconds);
    }

    /// Counts one export that ended before its last row.
    pub(crate) fn export_aborted(&self, why: Abort) {
        self.exports_aborted.with_label_values(&[why.label()]).inc();
    }

    /// Counts one failed storage read of `kind`.
    pub(crate) fn storage_failure(&self, kind: &str) {
        self.storage_failures.with_label_values(&[kind]).inc();
    }

    /// Records the progress of an ingest running in this process.
    pub fn ingest_progress(&self, progress: &IngestProgress) {
        let totals = [
            (&self.ingest_events, progress.events),
            (&self.ingest_ledger_entries, progress.ledger_entries),
            (&self.ingest_oracle_data, progress.oracle_data),
        ];
        for ((counter, total), reported) in totals.into_iter().zip(&self.ingest_reported) {
            let before = reported.swap(total, Ordering::Relaxed);
            counter.inc_by(total.saturating_sub(before));
        }
        if let Some(height) = progress.last_block_height {
            self.ingest_last_block
                .set(i64::try_from(height).unwrap_or(i64::MAX));
        }
        if let Some(nanos) = progress.last_vega_time {
            self.ingest_last_vega_time.set(nanos as f64 / 1e9);
        }
    }

    /// Records how far the store's chain goes, from the store's memory.
    pub(crate) fn stored_chain(&self, tip: Option<&ChainTip>) {
        let height = |height: u64| i64::try_from(height).unwrap_or(i64::MAX);
        if let Some(tip) = tip {
            self.first_block.set(height(tip.first_height));
            self.last_block.set(height(tip.last_height));
            if let Some(nanos) = tip.last_vega_time {
                self.last_vega_time.set(nanos as f64 / 1e9);
            }
        }
    }

    /// Marks whether an ingest runs in this process.
    pub fn ingest_running(&self, running: bool) {
        self.ingest_running.set(i64::from(running));
    }

    /// Every metric in the Prometheus text format.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 * 1024);
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("encoding metrics to memory cannot fail");
        out
    }
}

/// The content type of [`Metrics::render`].
pub(crate) const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;
