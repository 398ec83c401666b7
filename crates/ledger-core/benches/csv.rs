//! CSV row encoding, the export's per-row cost at ingest: rows/s and MB/s.
//!
//! `cargo bench -p ledger-core`

#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ledger_core::{
    Account, AccountType, AssetId, CsvRowEncoder, LedgerEntry, MarketId, Owner, PartyId,
    TransferType, VegaTime, VegaTimeColumn, restamp,
};

fn id(n: u8) -> [u8; 32] {
    let mut bytes = [0u8; 32];
    for (index, byte) in bytes.iter_mut().enumerate() {
        *byte = n.wrapping_mul(31).wrapping_add(index as u8);
    }
    bytes
}

/// A mix like the generated datasets': deposits, margin moves with markets, transfers between
/// parties, amounts from small to beyond 64 bits.
fn entries() -> Vec<(LedgerEntry, PartyId)> {
    let asset = AssetId::from_bytes(id(1));
    let market = MarketId::from_bytes(id(2));
    let alice = PartyId::from_bytes(id(3));
    let bob = PartyId::from_bytes(id(4));
    let account = |owner, account_type, market| Account {
        asset,
        account_type,
        owner,
        market,
    };
    let entry = |from, to, amount: &str, transfer_type| LedgerEntry {
        from,
        to,
        amount: amount.parse().expect("valid amount"),
        transfer_type,
        timestamp: VegaTime::from_nanos(0),
        from_balance: "1000000000000000000000".parse().expect("valid amount"),
        to_balance: "123456789".parse().expect("valid amount"),
    };
    let shapes = [
        (
            entry(
                account(Owner::Network, AccountType::External, None),
                account(Owner::Party(alice), AccountType::General, None),
                "5000000000000000000000",
                TransferType::Deposit,
            ),
            alice,
        ),
        (
            entry(
                account(Owner::Party(alice), AccountType::General, None),
                account(Owner::Party(alice), AccountType::Margin, Some(market)),
                "12345",
                TransferType::MarginLow,
            ),
            alice,
        ),
        (
            entry(
                account(Owner::Party(alice), AccountType::General, None),
                account(Owner::Party(bob), AccountType::General, None),
                "777",
                TransferType::TransferFundsSend,
            ),
            bob,
        ),
        (
            entry(
                account(Owner::Party(bob), AccountType::Margin, Some(market)),
                account(Owner::Network, AccountType::Insurance, Some(market)),
                "42",
                TransferType::MarginConfiscated,
            ),
            bob,
        ),
    ];
    (0..1000)
        .map(|n| shapes[n % shapes.len()].clone())
        .collect()
}

fn encode(c: &mut Criterion) {
    let entries = entries();
    let mut encoder = CsvRowEncoder::new();
    let bytes: usize = entries
        .iter()
        .map(|(entry, party)| encoder.encode(VegaTime::from_nanos(1), entry, *party).len())
        .sum();
    let mut group = c.benchmark_group("csv");
    group.throughput(Throughput::Elements(entries.len() as u64));
    group.bench_function("encode rows", |b| {
        b.iter(|| {
            for (n, (entry, party)) in entries.iter().enumerate() {
                let time = VegaTime::from_nanos(1_690_000_000_000_000_000 + n as i64);
                black_box(encoder.encode(time, entry, *party));
            }
        })
    });
    group.throughput(Throughput::Bytes(bytes as u64));
    group.bench_function("encode bytes", |b| {
        b.iter(|| {
            for (entry, party) in &entries {
                black_box(encoder.encode(VegaTime::from_nanos(1), entry, *party));
            }
        })
    });
    group.throughput(Throughput::Elements(entries.len() as u64));
    let mut record = encoder
        .encode(VegaTime::from_nanos(0), &entries[0].0, entries[0].1)
        .to_vec();
    // 29 bytes, and 22: the column's longest and shortest forms.
    let long = VegaTimeColumn::new(VegaTime::from_nanos(1_690_000_000_123_456_789));
    let short = VegaTimeColumn::new(VegaTime::from_nanos(1_690_000_000_000_000_000));
    group.bench_function("restamp rows (one time per block)", |b| {
        b.iter(|| {
            let column = VegaTimeColumn::new(VegaTime::from_nanos(1_690_000_000_123_456_789));
            for _ in 0..entries.len() {
                restamp(black_box(&mut record), &column);
            }
        })
    });
    group.bench_function("restamp rows (the width changes every row)", |b| {
        b.iter(|| {
            for n in 0..entries.len() {
                let column = if n % 2 == 0 { &short } else { &long };
                restamp(black_box(&mut record), column);
            }
        })
    });
    group.finish();
}

criterion_group!(benches, encode);
criterion_main!(benches);
