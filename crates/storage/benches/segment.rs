//! Laying a batch's lines into a party's segments (`segment::rebuild`), the ingest writer's
//! per-line cost: a whale's batch cut into sealed segments, and a small run merged with a few
//! appended lines, as a party of many small ones sees it.
//!
//! `cargo bench -p storage --bench segment`

#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use storage::segment::{Line, SEGMENT_BYTES, SMALL_TAIL_BYTES, Segment, rebuild};

// The server's allocator: how a segment's buffers grow costs what it costs the ingest.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `count` lines of about the size of a ledger entry's CSV from `start` on, one a block.
fn lines(start: i64, count: i64) -> Segment {
    let mut segment = Segment::default();
    for block in start..start + count {
        let csv = format!(
            "{block:016},9f2c4e7a1b8d3f60e5a2c7b94d1e8f3a6c0b5d2e9f7a4c1b8e3d6f0a2c5b7e9d4,\
             ACCOUNT_TYPE_GENERAL,TRANSFER_TYPE_DEPOSIT,{block}000000000,asset,market\n"
        );
        segment
            .push((block * 1000, block, 0, 0), 1, csv.as_bytes())
            .expect("ascending");
    }
    segment
}

fn rebuilds(c: &mut Criterion) {
    let mut group = c.benchmark_group("rebuild");
    // A whale's share of a batch of 50,000 rows: ~27,500 lines, cut into sealed segments.
    // The engine hands a batch's lines over as a slice of views, as here.
    let whale = lines(0, 27_500);
    let batch: Vec<Line<'_>> = whale.view().iter().collect();
    group.throughput(Throughput::Bytes(whale.csv.len() as u64));
    group.bench_function("a whale's batch into sealed segments", |b| {
        b.iter(|| rebuild(&[], black_box(&batch).iter().copied(), SEGMENT_BYTES).expect("merged"))
    });
    // A party's run of 7 small segments merged with 28 new lines, 23 KB in all.
    let run: Vec<Segment> = (0..7).map(|i| lines(i * 18, 18)).collect();
    let appended = lines(7 * 18, 28);
    let batch: Vec<Line<'_>> = appended.view().iter().collect();
    let bytes = run
        .iter()
        .chain([&appended])
        .map(|s| s.csv.len())
        .sum::<usize>();
    assert!(
        bytes < SMALL_TAIL_BYTES,
        "a run is merged before it holds the small tail"
    );
    group.throughput(Throughput::Bytes(bytes as u64));
    group.bench_function("a small run merged with appended lines", |b| {
        b.iter(|| rebuild(black_box(&run), batch.iter().copied(), SEGMENT_BYTES).expect("merged"))
    });
    group.finish();
}

criterion_group!(benches, rebuilds);
criterion_main!(benches);
