//! Ingest throughput: the pipeline alone (parse, encode, assemble) into a writer that stores
//! nothing, from NDJSON and from a buffer file of the same events, and the whole path into
//! SQLite.
//!
//! `cargo bench -p ingest`. The end-to-end figure on the standard dataset comes from the
//! `bench` command (docs/PERFORMANCE.md); this one isolates the CPU work from the store.

#![allow(missing_docs)]

use std::io::Cursor;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use eventgen::GenerateConfig;
use ingest::IngestOptions;
use storage::{BlockRecord, ChainState, IngestBatch, IngestWriter, SqliteConfig, SqliteStore};

/// Stores nothing: what is left is the pipeline's own cost.
struct NullWriter;

impl IngestWriter for NullWriter {
    fn chain(&mut self) -> Result<ChainState, storage::Error> {
        Ok(ChainState::default())
    }

    fn blocks(&mut self, _height: u64) -> Result<Vec<BlockRecord>, storage::Error> {
        Ok(Vec::new())
    }

    fn commit(&mut self, batch: &IngestBatch) -> Result<(), storage::Error> {
        std::hint::black_box(batch);
        Ok(())
    }
}

/// The benchmark's events as NDJSON and as a buffer file, and how many ledger entries they hold.
fn streams() -> (Vec<u8>, Vec<u8>, u64) {
    let config = GenerateConfig {
        blocks: 2_000,
        parties: 50,
        entries_per_block: 8,
        oracle_data_per_block: 4,
        ..GenerateConfig::default()
    };
    let mut stream = Vec::new();
    let summary = eventgen::generate(&config, &mut stream).expect("generate");
    let mut buffer = Vec::new();
    eventgen::generate_as(&config, eventgen::Format::VegaBuffer, &mut buffer).expect("generate");
    (stream, buffer, summary.ledger_entries)
}

fn ingest_benches(c: &mut Criterion) {
    let (stream, buffer, entries) = streams();
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
    group.bench_function("pipeline into a null writer, buffer file (entries)", |b| {
        b.iter(|| {
            ingest::ingest(
                Cursor::new(buffer.clone()),
                &mut NullWriter,
                &IngestOptions::default(),
                &mut |_| {},
            )
            .expect("ingest")
        })
    });
    group.throughput(Throughput::Bytes(stream.len() as u64));
    group.bench_function("pipeline into a null writer (NDJSON bytes)", |b| {
        b.iter(null_pipeline)
    });
    group.finish();
}

criterion_group!(benches, ingest_benches);
criterion_main!(benches);
