//! The `server` binary on PostgreSQL: `migrate` run twice at once, `serve` refusing an
//! unmigrated database, a second ingest refused, `kill -9` during an ingest then resume, two
//! servers over one database answering alike (and as SQLite does), connections killed under a
//! server, and passwords kept out of messages. Each test has a database of its own on the
//! server `DATANODE_TEST_PG` names (the local one by default), and skips only with
//! `DATANODE_TEST_PG=skip`.

#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use testdb::TestDatabase;

mod common;
use common::server;

fn output(command: &mut Command) -> (bool, String) {
    let Output {
        status,
        stdout,
        stderr,
        ..
    } = command.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr)
    );
    (status.success(), text)
}

#[track_caller]
fn ok(command: &mut Command) -> String {
    let (success, text) = output(command);
    assert!(success, "{command:?} failed: {text}");
    text
}

fn events(dir: &Path, blocks: &str) -> PathBuf {
    let path = dir.join("events.ndjson");
    ok(server()
        .args(["generate", "--blocks", blocks, "--output"])
        .arg(&path));
    path
}

/// A `serve` process and its address, killed on drop.
struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(db: &str) -> Server {
    let mut child = server()
        .args(["serve", "--listen", "127.0.0.1:0", "--db", db])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains(" serving ") {
        line.clear();
        assert!(log.read_line(&mut line).unwrap() > 0, "the server stopped");
    }
    let addr = line.split("addr=").nth(1).unwrap();
    let addr = addr.split_whitespace().next().unwrap().to_owned();
    // Keep reading the log so that the server never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut log, &mut std::io::sink()));
    Server { child, addr }
}

/// The status line and body of a GET.
fn get(addr: &str, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}

/// The answers to compare between servers: the oracle data, one spec's, and a party's export.
fn answers(addr: &str) -> Vec<String> {
    let (status, page) = get(addr, "/api/v2/oracle/data?pagination.first=200");
    assert!(status.contains("200"), "{status}: {page}");
    let value: serde_json::Value = serde_json::from_str(&page).unwrap();
    let edges = value["oracleData"]["edges"].as_array().unwrap();
    assert!(!edges.is_empty(), "{page}");
    let mut answers = vec![page.clone()];
    if let Some(spec) = edges
        .iter()
        .find_map(|edge| edge["node"]["externalData"]["data"]["matchedSpecIds"][0].as_str())
    {
        answers.push(get(addr, &format!("/api/v2/oracle/data?oracleSpecId={spec}")).1);
    }
    let (_, example) = get(addr, "/api/v2/ledgerentry/export?partyId=00");
    answers.push(example);
    answers
}

#[test]
fn serve_refuses_an_unmigrated_database_and_concurrent_migrations_succeed() {
    let Some(db) = TestDatabase::create("serve_refuses_an_unmigrated_database") else {
        return;
    };
    let (success, text) =
        output(server().args(["serve", "--listen", "127.0.0.1:0", "--db", db.url()]));
    assert!(!success);
    assert!(text.contains("server migrate"), "{text}");
    let migrations: Vec<Child> = (0..3)
        .map(|_| {
            server()
                .args(["migrate", "--db", db.url()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut migration in migrations {
        assert!(migration.wait().unwrap().success());
    }
    assert!(ok(server().args(["migrate", "--db", db.url()])).contains("up to date"));
    assert!(ok(server().args(["check", "--db", db.url()])).contains("ok:"));
}

/// How many partitions `ledger_segments` of `db` has.
fn partitions(db: &TestDatabase) -> i64 {
    db.client()
        .query_one(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'ledger_segments'::regclass",
            &[],
        )
        .unwrap()
        .get(0)
}

#[test]
fn migrate_makes_the_partitions_asked_for_once() {
    let Some(db) = TestDatabase::create("migrate_makes_the_partitions_asked_for") else {
        return;
    };
    let migrate = |partitions: &str| {
        output(server().args(["migrate", "--db", db.url(), "--partitions", partitions]))
    };
    for refused in ["0", "1025"] {
        let (success, text) = migrate(refused);
        assert!(!success);
        assert!(
            text.contains("the count must be between 1 and 1024"),
            "{text}"
        );
    }
    let (success, text) = migrate("5");
    assert!(success, "{text}");
    assert!(
        text.contains("schema migrated from version 0 to 10"),
        "{text}"
    );
    assert_eq!(partitions(&db), 5);
    let (success, text) = migrate("6");
    assert!(!success);
    assert!(text.contains("partitioned into 5 already"), "{text}");
    assert!(migrate("5").1.contains("up to date"));
    assert!(ok(server().args(["migrate", "--db", db.url()])).contains("up to date"));
    assert_eq!(partitions(&db), 5);
}

#[test]
fn one_chain_per_database_without_holes_and_check_names_them() {
    let Some(db) = TestDatabase::create("one_chain_without_holes") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = db.url().to_owned();
    common::one_chain_without_holes(db.url(), dir.path(), move || {
        ok(server().args(["check", "--db", &url])).into_bytes()
    });
}

#[test]
fn a_second_ingest_is_refused_and_kill_9_resumes() {
    let Some(db) = TestDatabase::create("a_second_ingest_is_refused") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let events = events(dir.path(), "40");
    let text = std::fs::read_to_string(&events).unwrap();
    let mut first = server()
        .args(["ingest", "--progress", "--db", db.url(), "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = first.stdin.take().unwrap();
    let half = text.len() / 2;
    let cut = text[..half].rfind('\n').unwrap() + 1;
    stdin.write_all(&text.as_bytes()[..cut]).unwrap();
    stdin.flush().unwrap();
    let mut log = BufReader::new(first.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("ledger entries") {
        line.clear();
        assert!(log.read_line(&mut line).unwrap() > 0, "no progress line");
    }
    // The first ingest holds the database: a second one is refused, not interleaved.
    let (success, refused) = output(server().args(["ingest", "--db", db.url()]).arg(&events));
    assert!(!success);
    assert!(refused.contains("another ingest"), "{refused}");
    // kill -9 in the middle, then a full run completes it; a third adds nothing.
    first.kill().unwrap();
    first.wait().unwrap();
    drop(stdin);
    ok(server().args(["ingest", "--db", db.url()]).arg(&events));
    let third = ok(server().args(["ingest", "--db", db.url()]).arg(&events));
    assert!(third.contains("ingest done: 0 events"), "{third}");

    // The same answers as SQLite over the same stream.
    let sqlite = dir.path().join("same.sqlite");
    ok(server().args(["ingest", "--db"]).arg(&sqlite).arg(&events));
    let pg = serve(db.url());
    let lite = serve(sqlite.to_str().unwrap());
    assert_eq!(answers(&pg.addr), answers(&lite.addr));
}

#[test]
fn two_servers_and_an_ingest_answer_alike_and_survive_killed_connections() {
    let Some(db) = TestDatabase::create("two_servers_and_an_ingest") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let events = events(dir.path(), "60");
    ok(server().args(["migrate", "--db", db.url()]));
    let (one, two) = (serve(db.url()), serve(db.url()));
    let mut ingest = server()
        .args(["ingest", "--db", db.url()])
        .arg(&events)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Every answer while the ingest writes is whole.
    while ingest.try_wait().unwrap().is_none() {
        for addr in [&one.addr, &two.addr] {
            let (status, body) = get(addr, "/api/v2/oracle/data?pagination.first=50");
            assert!(status.contains("200"), "{status}: {body}");
        }
    }
    assert!(ingest.wait().unwrap().success());
    assert_eq!(answers(&one.addr), answers(&two.addr));

    // Every connection of the database killed under the servers: the pool replaces them.
    db.admin()
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1",
            &[&db.name()],
        )
        .unwrap();
    let (status, _) = get(&one.addr, "/health");
    assert!(status.contains("200"), "{status}");
    assert_eq!(answers(&one.addr), answers(&two.addr));
}

#[test]
fn passwords_never_appear_in_messages() {
    if TestDatabase::create("passwords_never_appear_in_messages").is_none() {
        return;
    }
    // Nothing listens on port 1: the connection fails and the message names the database.
    let url = "postgres://ada:s3cret@127.0.0.1:1/ledger?connect_timeout=2";
    for args in [
        &["serve", "--db", url][..],
        &["ingest", "--db", url, "-"],
        &["migrate", "--db", url],
    ] {
        let (success, text) = output(server().args(args).stdin(Stdio::null()));
        assert!(!success);
        assert!(text.contains("ada:***@127.0.0.1:1"), "{text}");
        assert!(!text.contains("s3cret"), "{text}");
    }
}

/// `check --deep` reads every segment: one with a bit flipped inside its packed lines is
/// named, with the party whose export it breaks, and the check fails; the others verify.
#[test]
fn check_deep_names_a_damaged_segment() {
    let Some(db) = TestDatabase::create("check_deep_names_a_damaged_segment") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let events = events(dir.path(), "30");
    ok(server().args(["ingest", "--db", db.url()]).arg(&events));
    assert!(ok(server().args(["check", "--deep", "--db", db.url()])).contains("none damaged"));
    let mut client = db.client();
    let row = client
        .query_one(
            "SELECT s.party, s.last_time, s.csv, encode(p.hex, 'hex') FROM ledger_segments s \
             JOIN parties p ON p.id = s.party ORDER BY s.party, s.last_time LIMIT 1",
            &[],
        )
        .unwrap();
    let (party, last_time, mut csv, hex): (i32, i64, Vec<u8>, String) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    let middle = csv.len() / 2;
    csv[middle] ^= 0x04;
    client
        .execute(
            "UPDATE ledger_segments SET csv = $1 WHERE party = $2 AND last_time = $3",
            &[&csv, &party, &last_time],
        )
        .unwrap();
    let (success, text) = output(server().args(["check", "--deep", "--db", db.url()]));
    assert!(!success, "{text}");
    let damaged: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("damaged: "))
        .collect();
    assert_eq!(damaged.len(), 1, "{text}");
    assert!(
        damaged[0].starts_with(&format!(
            "damaged: ledger_segments party {party} last ({last_time}, "
        )) && damaged[0].ends_with(&format!("affects the export of party {hex}")),
        "{text}"
    );
}
