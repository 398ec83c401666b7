//! What the binary's test files share.

// Each test file is a crate of its own and uses only part of this module.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// The `server` binary, with none of the environment's settings that would change what a test
/// runs against, and its log at `info`.
pub fn server() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_server"));
    command
        .env_remove("DATANODE_DB")
        .env_remove("DATANODE_LISTEN")
        .env_remove("DATANODE_CONFIG")
        .env("RUST_LOG", "info");
    command
}

/// Runs `command`, which must succeed.
#[track_caller]
pub fn run_ok(command: &mut Command) -> Output {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Runs `command`, which must fail; returns its standard error.
#[track_caller]
pub fn run_refused(command: &mut Command) -> String {
    let output = command.output().unwrap();
    assert!(!output.status.success(), "{command:?} succeeded");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs `command`, which must succeed; returns its standard output.
#[track_caller]
fn stdout_of(command: &mut Command) -> String {
    String::from_utf8(run_ok(command).stdout).unwrap()
}

/// Runs `server ingest --db DB INPUT`, which must fail; returns its standard error.
#[track_caller]
fn ingest_refused(db: &str, input: &Path) -> String {
    run_refused(server().args(["ingest", "--db", db]).arg(input))
}

/// The `check` output's line that starts with `label`, without it.
fn check_line(db: &str, label: &str) -> String {
    let text = stdout_of(server().args(["check", "--db", db]));
    text.lines()
        .find_map(|line| line.strip_prefix(label))
        .unwrap_or_else(|| panic!("no {label:?} in {text}"))
        .to_owned()
}

/// The height of an NDJSON event line, from its id.
fn height_of(line: &str) -> u64 {
    let event: serde_json::Value = serde_json::from_str(line).unwrap();
    let id = event["id"].as_str().unwrap();
    id.split_once('-').unwrap().0.parse().unwrap()
}

/// One chain per database, without holes, through the binary on `db` (a path or a URL):
/// `check` names the chain and the stored heights; another chain is refused and leaves what
/// `contents` reads unchanged; a hole stops the ingest there; the complete stream fills it.
pub fn one_chain_without_holes(db: &str, dir: &Path, contents: impl Fn() -> Vec<u8>) {
    let ingest = |input: &Path| {
        stdout_of(server().args(["ingest", "--db", db]).arg(input));
    };
    let generate = |blocks: &str| {
        let path = dir.join(format!("chain-{blocks}.ndjson"));
        stdout_of(
            server()
                .args(["generate", "--blocks", blocks, "--output"])
                .arg(&path),
        );
        path
    };
    ingest(&generate("20"));
    let text = std::fs::read_to_string(generate("30")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let (first, last) = (height_of(lines[0]), height_of(lines[lines.len() - 1]));
    let event: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    let chain = event["chainId"].as_str().unwrap().to_owned();
    let last_block = |height: u64| {
        let line = check_line(db, "last block: ");
        assert!(line.starts_with(&format!("{height} at ")), "{line}");
    };
    assert_eq!(check_line(db, "chain id: "), chain);
    assert!(check_line(db, "first block: ").starts_with(&format!("{first} at ")));
    last_block(first + 19);

    // Another chain: refused, naming both ids, and nothing changed.
    let other = dir.join("other.ndjson");
    std::fs::write(&other, text.replace(&chain, "vega-other-chain")).unwrap();
    let before = contents();
    let stderr = ingest_refused(db, &other);
    assert!(
        stderr.contains(&chain) && stderr.contains("vega-other-chain"),
        "{stderr}"
    );
    assert!(contents() == before, "another chain changed the database");

    // A hole: the stream stops at it, with every block before it stored.
    let missing = first + 24;
    let holed: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|line| height_of(line) != missing)
        .collect();
    let holed_path = dir.join("holed.ndjson");
    std::fs::write(&holed_path, holed.join("\n")).unwrap();
    let stderr = ingest_refused(db, &holed_path);
    let expected = format!(
        "block {missing} is missing: the stream went from {} to {}",
        missing - 1,
        missing + 1
    );
    assert!(stderr.contains(&expected), "{stderr}");
    last_block(missing - 1);
    // The complete stream fills it.
    let complete = dir.join("complete.ndjson");
    std::fs::write(&complete, &text).unwrap();
    ingest(&complete);
    last_block(last);
}
