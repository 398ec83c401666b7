//! Generation throughput in both formats, and with 90 % of the events of other types.
//!
//! `cargo bench -p eventgen`. The buffer form transcodes every NDJSON line (see `buffer.rs`),
//! so its cost over NDJSON is that of a JSON parse and a protobuf encode per event.

#![allow(missing_docs)]

use std::io;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use eventgen::{Format, GenerateConfig, generate_as};

fn generate_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("generate");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    let plain = GenerateConfig {
        blocks: 500,
        entries_per_block: 8,
        ..GenerateConfig::DEFAULT
    };
    let noisy = GenerateConfig {
        blocks: 50,
        other_events_share: 0.9,
        ..plain.clone()
    };
    for (name, config) in [("plain", plain), ("90% other events", noisy)] {
        let events = generate_as(&config, Format::Ndjson, &mut io::sink())
            .expect("a valid config")
            .events;
        group.throughput(Throughput::Elements(events));
        for format in [Format::Ndjson, Format::VegaBuffer] {
            group.bench_function(format!("{name}, {format:?} (events)"), |b| {
                b.iter(|| generate_as(&config, format, &mut io::sink()).expect("a valid config"))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, generate_benches);
criterion_main!(benches);
