//! The `server` binary from the outside: help, generate | ingest, a bad line, serving and
//! stopping on a signal, and the quick start's demo database.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn server() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_server"));
    command
        .env_remove("DATANODE_DB")
        .env_remove("DATANODE_LISTEN")
        .env("RUST_LOG", "info");
    command
}

#[track_caller]
fn run_ok(command: &mut Command) -> Output {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[test]
fn every_command_has_help_with_defaults() {
    for (args, expected) in [
        (&["--help"][..], "serve"),
        (&["serve", "--help"][..], "[default: 127.0.0.1:3008]"),
        (&["ingest", "--help"][..], "standard input"),
        (&["generate", "--help"][..], "[default: 42]"),
    ] {
        let output = run_ok(server().args(args));
        let text = String::from_utf8(output.stdout).unwrap();
        assert!(text.contains(expected), "{args:?}: {text}");
    }
}

fn generate(dir: &Path, blocks: &str) -> std::path::PathBuf {
    let path = dir.join(format!("events-{blocks}.ndjson"));
    run_ok(
        server()
            .args(["generate", "--blocks", blocks, "--output"])
            .arg(&path),
    );
    path
}

#[test]
fn ingest_from_a_pipe_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let events = generate(dir.path(), "30");
    let db = dir.path().join("db.sqlite");
    let mut child = server()
        .args(["ingest", "--db"])
        .arg(&db)
        .arg("-")
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&std::fs::read(&events).unwrap())
        .unwrap();
    let first = child.wait_with_output().unwrap();
    assert!(first.status.success());
    let first = String::from_utf8(first.stderr).unwrap();
    assert!(
        first.contains("ingest done") && first.contains("0 skipped"),
        "{first}"
    );

    let again = run_ok(server().args(["ingest", "--db"]).arg(&db).arg(&events));
    let again = String::from_utf8(again.stderr).unwrap();
    assert!(again.contains("ingest done: 0 events"), "{again}");
}

#[test]
fn a_malformed_line_stops_the_ingest_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let events = std::fs::read_to_string(generate(dir.path(), "20")).unwrap();
    let mut lines: Vec<&str> = events.lines().collect();
    let bad = lines.len() / 2;
    lines[bad] = "{\"id\": \"not json";
    let broken = dir.path().join("broken.ndjson");
    std::fs::write(&broken, lines.join("\n")).unwrap();
    let db = dir.path().join("db.sqlite");
    let output = server()
        .args(["ingest", "--db"])
        .arg(&db)
        .arg(&broken)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains(&format!("line {}", bad + 1)), "{stderr}");
}

/// A running `server serve`, killed on drop if still alive.
struct Serving {
    child: Child,
    addr: String,
    /// The server's log lines, as it writes them.
    log: mpsc::Receiver<String>,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serving {
    /// The next log line satisfying `wanted`, waiting up to ten seconds.
    #[track_caller]
    fn log_line(&self, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.log.recv_timeout(left) {
                Ok(line) if wanted(&line) => return line,
                Ok(_) => {}
                Err(err) => panic!("no such log line: {err}"),
            }
        }
    }

    fn signal(&self, name: &str) {
        signal(&self.child, name);
    }
}

/// Sends signal `name` (`TERM`, `INT`) to `child`.
fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Starts `command` with an address file and waits for the file; the log keeps being read, so
/// that the server never blocks on a full pipe.
fn serve(command: &mut Command) -> Serving {
    let addr_dir = tempfile::tempdir().unwrap();
    let addr_file = addr_dir.path().join("addr");
    let mut child = command
        .arg("--addr-file")
        .arg(&addr_file)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (sender, log) = mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines() {
            let Ok(line) = line else { return };
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    let mut serving = Serving {
        child,
        addr: String::new(),
        log,
    };
    // Generous: the quick start builds its demo database first, in a debug build, on a machine
    // that may be busy.
    let deadline = Instant::now() + Duration::from_secs(60);
    serving.addr = loop {
        if let Ok(addr) = std::fs::read_to_string(&addr_file) {
            break addr
                .strip_suffix('\n')
                .expect("the address ends its line")
                .to_owned();
        }
        if let Some(status) = serving.child.try_wait().unwrap() {
            panic!("the server exited ({status}) before listening");
        }
        assert!(Instant::now() < deadline, "no address file after 60 s");
        std::thread::sleep(Duration::from_millis(20));
    };
    serving
}

fn http_get(addr: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[test]
fn quick_start_serves_a_demo_database_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let serving = serve(
        server()
            .current_dir(dir.path())
            .env("DATANODE_LISTEN", "127.0.0.1:0"),
    );
    assert!(dir.path().join("datanode.sqlite").exists());
    let response = http_get(&serving.addr, "/api/v2/oracle/data?pagination.first=1");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("\"hasNextPage\":true"), "{response}");

    let mut serving = serving;
    serving.signal("TERM");
    let exit = serving.child.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
}

#[test]
fn an_explicit_database_is_never_filled_with_demo_data() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("mine.sqlite");
    let serving = serve(
        server()
            .args(["serve", "--listen", "127.0.0.1:0", "--db"])
            .arg(&db),
    );
    let response = http_get(&serving.addr, "/api/v2/oracle/data");
    assert!(response.contains(r#""edges":[]"#), "{response}");
}

#[test]
fn silent_connections_at_the_cap_do_not_queue_a_real_client() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db.sqlite");
    let serving = serve(
        server()
            .args(["serve", "--listen", "127.0.0.1:0", "--max-connections", "4"])
            .args([
                "--header-timeout-secs",
                "60",
                "--idle-timeout-secs",
                "60",
                "--db",
            ])
            .arg(&db),
    );
    let silent: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(&serving.addr).unwrap())
        .collect();
    let started = Instant::now();
    let response = http_get(&serving.addr, "/health");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a real client waited {:?} behind silent connections",
        started.elapsed()
    );
    drop(silent);
}

#[test]
fn every_request_is_logged_and_json_logs_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db.sqlite");
    for json in [false, true] {
        let mut command = server();
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--db"])
            .arg(&db);
        if json {
            command.args(["--log-format", "json"]);
        }
        let serving = serve(&mut command);
        let response = http_get(&serving.addr, "/health?probe=1");
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        let line = serving.log_line(|line| line.contains("access"));
        if json {
            let entry: serde_json::Value = serde_json::from_str(&line).unwrap();
            assert_eq!(entry["path"], "/health?probe=1", "{line}");
            assert_eq!(entry["method"], "GET");
            assert_eq!(entry["status"], 200);
            assert_eq!(entry["bytes"], 2);
            assert_eq!(entry["outcome"], "complete");
            assert!(entry["duration_ms"].as_f64().unwrap() >= 0.0);
        } else {
            for field in [
                "method=GET",
                "path=/health?probe=1",
                "status=200",
                "bytes=2",
                "duration_ms=",
            ] {
                assert!(line.contains(field), "{field} not in {line}");
            }
        }
    }
}

/// Writes the first half of `events`' lines, whole lines only, and flushes.
fn write_first_half(stdin: &mut impl Write, events: &str) {
    let lines: Vec<&str> = events.lines().collect();
    for line in &lines[..lines.len() / 2] {
        writeln!(stdin, "{line}").unwrap();
    }
    stdin.flush().unwrap();
}

/// `GET path` on a fresh connection, returning the body of a 200 answer.
fn body_of(addr: &str, path: &str) -> String {
    let response = http_get(addr, path);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let body = response.split("\r\n\r\n").nth(1).unwrap_or_default();
    body.to_owned()
}

/// Polls `GET path` until its body satisfies `done`.
#[track_caller]
fn wait_for(addr: &str, path: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let body = body_of(addr, path);
        if done(&body) {
            return body;
        }
        assert!(Instant::now() < deadline, "{path} never got there: {body}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn serve_ingests_a_live_stream_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let events = std::fs::read_to_string(generate(dir.path(), "40")).unwrap();
    let db = dir.path().join("live.sqlite");
    let mut command = server();
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--ingest", "-", "--db"])
        .arg(&db)
        .stdin(Stdio::piped());
    let mut serving = serve(&mut command);
    let mut stdin = serving.child.stdin.take().unwrap();
    // Half the stream: the API shows it while the input stays open.
    write_first_half(&mut stdin, &events);
    wait_for(
        &serving.addr,
        "/api/v2/oracle/data?pagination.first=1",
        |body| body.contains("\"hasNextPage\":true"),
    );
    let metrics = wait_for(&serving.addr, "/metrics", |body| {
        body.contains("datanode_ingest_running 1")
            && body.lines().any(|line| {
                line.starts_with("datanode_ingest_events_total ") && !line.ends_with(" 0")
            })
    });
    assert!(
        metrics.contains("datanode_ingest_last_block_height "),
        "{metrics}"
    );

    // SIGTERM with the input still open: the ingest stops at a block boundary and the
    // process exits cleanly.
    serving.signal("TERM");
    let exit = serving.child.wait().unwrap();
    assert!(exit.success(), "{exit:?}");
    drop(stdin);

    // What was stored is whole blocks: a full re-run adds exactly the rest.
    let again = run_ok(
        server()
            .args(["ingest", "--db"])
            .arg(&db)
            .arg(generate(dir.path(), "40")),
    );
    let again = String::from_utf8(again.stderr).unwrap();
    assert!(again.contains("ingest done"), "{again}");
    assert!(
        !again.contains(" 0 skipped"),
        "the first half was stored: {again}"
    );
}

#[test]
fn ingest_stops_at_a_block_boundary_on_sigterm_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let events_path = generate(dir.path(), "30");
    let events = std::fs::read_to_string(&events_path).unwrap();
    let db = dir.path().join("db.sqlite");
    let mut child = server()
        .args(["ingest", "--progress", "--db"])
        .arg(&db)
        .arg("-")
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    write_first_half(&mut stdin, &events);
    // Progress lines follow commits: the first one says blocks are stored.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("ledger entries") {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "no progress line");
    }
    signal(&child, "TERM");
    let exit = child.wait().unwrap();
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).unwrap();
    assert!(exit.success(), "{exit:?}: {rest}");
    assert!(rest.contains("stopped by a signal"), "{rest}");
    drop(stdin);

    let again = run_ok(server().args(["ingest", "--db"]).arg(&db).arg(&events_path));
    let again = String::from_utf8(again.stderr).unwrap();
    assert!(again.contains("ingest done"), "{again}");
    let third = run_ok(server().args(["ingest", "--db"]).arg(&db).arg(&events_path));
    let third = String::from_utf8(third.stderr).unwrap();
    assert!(third.contains("ingest done: 0 events"), "{third}");
}
