//! Per-request costs of the listing outside storage: cursors, page assembly, and the rendering
//! of a datum's Vega JSON (done once, at ingest).
//!
//! `cargo bench -p oracle-core`

#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ledger_core::OracleSpecId;
use oracle_core::{
    OracleData, PageRequest, PaginationParams, Position, Property, Signer, decode_cursor,
    encode_cursor,
};

fn datum(n: u8) -> OracleData {
    OracleData {
        signers: vec![Signer::EthAddress(format!("0x{:040x}", n))],
        data: vec![
            Property {
                name: "prices.ETH.value".to_owned(),
                value: format!("{}", 1_700_000_000u64 + u64::from(n)),
            },
            Property {
                name: "timestamp".to_owned(),
                value: "1690000001".to_owned(),
            },
        ],
        meta_data: vec![Property {
            name: "eth-block-height".to_owned(),
            value: "17000000".to_owned(),
        }],
        matched_spec_ids: (0..2)
            .map(|k| OracleSpecId::from_bytes([n ^ k; 32]))
            .collect(),
        broadcast_at: 1_690_000_001_264_036_759,
        error: None,
    }
}

fn position(n: u64) -> Position {
    Position {
        vega_time: 1_690_000_001_264_036_759 + n as i64,
        block: 1_000_000 + n / 4,
        seq: n % 4,
    }
}

fn cursors(c: &mut Criterion) {
    let mut group = c.benchmark_group("cursor");
    group.throughput(Throughput::Elements(1));
    group.bench_function("encode", |b| {
        b.iter(|| encode_cursor(black_box(position(7))))
    });
    group.bench_function("new", |b| {
        b.iter(|| oracle_core::Cursor::new(black_box(position(7))))
    });
    let cursor = encode_cursor(position(7));
    group.bench_function("decode", |b| b.iter(|| decode_cursor(black_box(&cursor))));
    group.finish();
}

fn pages(c: &mut Criterion) {
    let after = encode_cursor(position(1_000));
    let params = PaginationParams {
        first: Some("100"),
        after: Some(&after),
        ..PaginationParams::default()
    };
    let request = PageRequest::parse(&params).expect("valid request");
    let node = datum(1).to_vega_json();
    let mut group = c.benchmark_group("page");
    group.throughput(Throughput::Elements(100));
    group.bench_function("parse and assemble 100 rows", |b| {
        b.iter(|| {
            let request = PageRequest::parse(black_box(&params)).expect("valid request");
            // Ascending positions before the anchor, as the newest-first main scan returns them.
            let rows: Vec<(Position, Vec<u8>)> = (0..101)
                .map(|n| (position(999 - n), node.clone()))
                .collect();
            black_box(request.assemble(rows, true))
        })
    });
    black_box(request);
    group.finish();

    let data: Vec<OracleData> = (0..100).map(datum).collect();
    let bytes: usize = data.iter().map(|datum| datum.to_vega_json().len()).sum();
    let mut group = c.benchmark_group("vega json");
    group.throughput(Throughput::Bytes(bytes as u64));
    group.bench_function("render 100 data", |b| {
        b.iter(|| {
            for datum in &data {
                black_box(datum.to_vega_json());
            }
        })
    });
    group.finish();
}

criterion_group!(benches, cursors, pages);
criterion_main!(benches);
