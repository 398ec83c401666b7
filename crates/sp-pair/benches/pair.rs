//! Messages per second through the pair socket over loopback: our sender on one thread,
//! `PairConnection::recv` on the bench thread, one connection kept across iterations.
//!
//! `cargo bench -p sp-pair`

#![allow(missing_docs, clippy::unwrap_used)]

use std::sync::mpsc;
use std::thread;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sp_pair::{PairListener, PairSender};

/// Messages per iteration: enough that the sender's 64 KiB flushes dominate the hand-off.
const BATCH: usize = 10_000;

fn loopback(c: &mut Criterion) {
    let mut group = c.benchmark_group("loopback");
    group.throughput(Throughput::Elements(BATCH as u64));
    // 200 bytes is a typical ledger-movements BusEvent; 2 KiB a large one.
    for size in [200, 2048] {
        let listener = PairListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (go, batches) = mpsc::channel::<()>();
        let sender = thread::spawn(move || {
            let mut sender = PairSender::dial(addr).unwrap();
            let message = vec![0x5a; size];
            for () in batches {
                sender
                    .send_all(std::iter::repeat_n(&message[..], BATCH))
                    .unwrap();
            }
        });
        let mut connection = listener.accept().unwrap();
        let mut buf = Vec::new();
        group.bench_function(format!("{size}_byte_messages"), |b| {
            b.iter(|| {
                go.send(()).unwrap();
                for _ in 0..BATCH {
                    connection.recv(&mut buf).unwrap().unwrap();
                }
            })
        });
        drop(go);
        sender.join().unwrap();
    }
    group.finish();
}

criterion_group!(benches, loopback);
criterion_main!(benches);
