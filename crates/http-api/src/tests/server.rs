//! [`serve`](crate::serve) over loopback sockets with the fake store: what only shows on the
//! wire (bytes flushed before an abort, silent connections, the connection table).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ledger_core::CSV_HEADER;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use super::{FakeStore, PARTY, rows};
use crate::{App, AppConfig, ServeConfig, serve};

/// A server on a loopback port; it stops when dropped.
struct Server {
    addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

async fn start(store: FakeStore, config: ServeConfig) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let app = App::new(Arc::new(store), AppConfig::default());
    tokio::spawn(serve(listener, app, config, async {
        let _ = stopped.await;
    }));
    Server { addr, _stop: stop }
}

/// A configuration where only the connection cap closes connections within a test's time.
fn capped(max_connections: usize) -> ServeConfig {
    ServeConfig {
        max_connections,
        header_read_timeout: Duration::from_secs(60),
        idle_timeout: Duration::from_secs(60),
        ..ServeConfig::default()
    }
}

/// Everything the server sends until it closes the connection (or resets it), within 10 s.
async fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut reply = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer))
            .await
            .expect("the server kept the connection open");
        match read {
            Ok(0) | Err(_) => return reply,
            Ok(n) => reply.extend_from_slice(&buffer[..n]),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_export_always_sends_its_status_and_header_row_then_a_cut_body() {
    for fail_after in [0, 2] {
        let store = FakeStore {
            rows: rows(),
            fail_after: Some(fail_after),
            ..FakeStore::default()
        };
        let server = start(store, ServeConfig::default()).await;
        // The empty reply was a race: repeat to catch it.
        for attempt in 0..40 {
            let mut stream = TcpStream::connect(server.addr).await.unwrap();
            let request = format!(
                "GET /api/v2/ledgerentry/export?partyId={PARTY} HTTP/1.1\r\nHost: x\r\n\r\n"
            );
            stream.write_all(request.as_bytes()).await.unwrap();
            let reply = read_until_closed(&mut stream).await;
            let reply = String::from_utf8_lossy(&reply);
            let case = format!("failing after {fail_after} rows, attempt {attempt}: {reply:?}");
            assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{case}");
            assert!(reply.contains("transfer-encoding: chunked"), "{case}");
            assert!(reply.contains(CSV_HEADER), "{case}");
            assert!(
                !reply.ends_with("\r\n0\r\n\r\n"),
                "a cut export ended cleanly: {case}"
            );
        }
    }
}

#[tokio::test]
async fn silent_connections_close_after_the_header_timeout_not_the_idle_timeout() {
    let server = start(
        FakeStore::default(),
        ServeConfig {
            header_read_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_secs(60),
            ..ServeConfig::default()
        },
    )
    .await;
    let started = Instant::now();
    let mut silent = TcpStream::connect(server.addr).await.unwrap();
    let reply = read_until_closed(&mut silent).await;
    let took = started.elapsed();
    assert!(reply.is_empty(), "{reply:?}");
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(5),
        "closed after {took:?}"
    );
}

/// Sends a health check on `stream` and reads the status line.
async fn health(stream: &mut TcpStream) -> String {
    stream
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let reply = read_until_closed(stream).await;
    let reply = String::from_utf8_lossy(&reply);
    reply.lines().next().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn a_full_connection_table_drops_the_oldest_silent_connection_for_a_real_client() {
    let server = start(FakeStore::default(), capped(4)).await;
    let mut silent = Vec::new();
    for _ in 0..12 {
        silent.push(TcpStream::connect(server.addr).await.unwrap());
    }
    let started = Instant::now();
    let mut client = TcpStream::connect(server.addr).await.unwrap();
    assert_eq!(health(&mut client).await, "HTTP/1.1 200 OK");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the client waited {:?} behind silent connections",
        started.elapsed()
    );
    // The oldest silent connection made room: it is closed without an answer.
    let oldest = read_until_closed(&mut silent[0]).await;
    assert!(oldest.is_empty(), "{oldest:?}");
}

#[tokio::test]
async fn a_full_table_of_connections_that_asked_makes_new_ones_wait() {
    let server = start(FakeStore::default(), capped(1)).await;
    // A keep-alive connection that has asked something is not dropped for a newcomer.
    let mut first = TcpStream::connect(server.addr).await.unwrap();
    first
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut status = [0u8; 17];
    first.read_exact(&mut status).await.unwrap();
    assert_eq!(&status, b"HTTP/1.1 200 OK\r\n");
    let mut second = TcpStream::connect(server.addr).await.unwrap();
    second
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut buffer = [0u8; 64];
    let waited = tokio::time::timeout(Duration::from_millis(300), second.read(&mut buffer)).await;
    assert!(waited.is_err(), "served beyond the cap: {waited:?}");
    drop(first);
    let reply = read_until_closed(&mut second).await;
    assert!(reply.starts_with(b"HTTP/1.1 200"), "{reply:?}");
}
