//! Ingest throughput: the pipeline alone (parse, encode, assemble) into a writer that stores
//! nothing, and the whole path into SQLite.
//!
//! `cargo bench -p ingest`. The end-to-end figure on the standard dataset comes from the
//! `bench` command (docs/PERFORMANCE.md); this one isolates the CPU work from the store.

#![allow(missing_docs)]

use std::io::Cursor;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use eventgen::GenerateConfig;
use ingest::IngestOptions;
use storage::{BlockState, IngestBatch, IngestWriter, SqliteConfig, SqliteStore};

/// Stores nothing: what is left is the pipeline's own cost.
struct NullWriter;

impl IngestWriter for NullWriter {
    fn last_block(&mut self) -> Result<Option<u64>, storage::Error> {
        Ok(None)
    }

    fn block_state(&mut self, _height: u64) -> Result<Option<BlockState>, storage::Error> {
        Ok(None)
    }

    fn commit(&mut self, batch: &IngestBatch) -> Result<(), storage::Error> {
        std::hint::black_box(batch);
        Ok(())
    }
}

fn stream() -> (Vec<u8>, u64) {
    let config = GenerateConfig {
        blocks: 2_000,
        parties: 50,
        entries_per_block: 8,
        oracle_data_per_block: 4,
        ..GenerateConfig::default()
    };
    let mut stream = Vec::new();
    let summary = eventgen::generate(&config, &mut stream).expect("generate");
    (stream, summary.ledger_entries)
}

fn ingest_benches(c: &mut Criterion) {
    let (stream, entries) = stream();
    let mut group = c.benchmark_group("ingest");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Elements(entries));
    let null_pipeline = || {
        ingest::ingest(
            Cursor::new(stream.clone()),
            &mut NullWriter,
            &IngestOptions::default(),
            &mut |_| {},
        )
        .expect("ingest")
    };
    group.bench_function("pipeline into a null writer (entries)", |b| {
        b.iter(null_pipeline)
    });
    group.bench_function("into SQLite (entries)", |b| {
        b.iter_batched(
            || {
                let dir = tempfile::tempdir().expect("temp dir");
                let store =
                    SqliteStore::open(dir.path().join("bench.sqlite"), SqliteConfig::default())
                        .expect("open store");
                (dir, store)
            },
            |(dir, store)| {
                let mut writer = store.writer().expect("writer");
                ingest::ingest(
                    Cursor::new(stream.clone()),
                    &mut writer,
                    &IngestOptions::default(),
                    &mut |_| {},
                )
                .expect("ingest");
                (dir, store)
            },
            criterion::BatchSize::PerIteration,
        )
    });
    group.throughput(Throughput::Bytes(stream.len() as u64));
    group.bench_function("pipeline into a null writer (NDJSON bytes)", |b| {
        b.iter(null_pipeline)
    });
    group.finish();
}

criterion_group!(benches, ingest_benches);
criterion_main!(benches);
