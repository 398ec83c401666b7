//! The `server` binary from the outside: help, generate | ingest, a bad line, serving and
//! stopping on a signal, and the quick start's demo database.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

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
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(command: &mut Command) -> Serving {
    let mut child = command.stderr(Stdio::piped()).spawn().unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "server exited before serving"
        );
        if let Some(rest) = line.split("addr=").nth(1) {
            let addr: String = rest.chars().take_while(|c| !c.is_whitespace()).collect();
            break strip_ansi(&addr);
        }
    };
    // Keep draining the log so the server never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    Serving { child, addr }
}

fn strip_ansi(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
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
    let status = Command::new("kill")
        .args(["-TERM", &serving.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
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
