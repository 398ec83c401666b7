//! The configuration file (precedence, errors, `server config`), `--version`, `/api/v2/info`
//! and the metrics on their own listener.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::{http_get, run_ok, serve, server};

/// Writes `text` as a configuration file in `dir`.
fn config_file(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("datanode.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `server config`, given what `configure` adds to its command, parsed as TOML.
#[track_caller]
fn effective(configure: impl FnOnce(&mut Command)) -> toml::Table {
    let mut command = server();
    configure(command.arg("config"));
    let output = run_ok(&mut command);
    toml::from_str(&String::from_utf8(output.stdout).unwrap()).unwrap()
}

#[test]
fn flags_beat_the_environment_which_beats_the_file_which_beats_the_default() {
    let dir = tempfile::tempdir().unwrap();
    // One setting of each kind: an integer, an address, a choice, an optional string.
    // (section, key, flag, variable, [default, file, environment, flag] as TOML values)
    let cases = [
        (
            "limits",
            "max_exports",
            "--max-exports",
            "DATANODE_MAX_EXPORTS",
            ["16", "4", "5", "6"],
        ),
        (
            "listen",
            "address",
            "--listen",
            "DATANODE_LISTEN",
            [
                r#""127.0.0.1:3008""#,
                r#""127.0.0.1:1""#,
                r#""127.0.0.1:2""#,
                r#""127.0.0.1:3""#,
            ],
        ),
        (
            "logging",
            "format",
            "--log-format",
            "DATANODE_LOG_FORMAT",
            [r#""text""#, r#""json""#, r#""text""#, r#""json""#],
        ),
        (
            "database",
            "url",
            "--db",
            "DATANODE_DB",
            [
                "",
                r#""file.sqlite""#,
                r#""env.sqlite""#,
                r#""flag.sqlite""#,
            ],
        ),
    ];
    for (section, key, flag, variable, [default, in_file, in_env, in_flag]) in cases {
        let value = |table: &toml::Table| table[section].get(key).map(ToString::to_string);
        let expect = |text: &str| (!text.is_empty()).then(|| text.to_owned());
        let file = config_file(dir.path(), &format!("[{section}]\n{key} = {in_file}\n"));
        let unquoted = |text: &str| text.trim_matches('"').to_owned();

        assert_eq!(value(&effective(|_| {})), expect(default), "{key}");
        let from_file = effective(|command| {
            command.arg("--config").arg(&file);
        });
        assert_eq!(value(&from_file), expect(in_file), "{key}");
        // The file may also be named by DATANODE_CONFIG.
        let from_file = effective(|command| {
            command.env("DATANODE_CONFIG", &file);
        });
        assert_eq!(value(&from_file), expect(in_file), "{key}");
        let from_env = effective(|command| {
            command
                .env(variable, unquoted(in_env))
                .arg("--config")
                .arg(&file);
        });
        assert_eq!(value(&from_env), expect(in_env), "{key}");
        let from_flag = effective(|command| {
            command
                .env(variable, unquoted(in_env))
                .arg("--config")
                .arg(&file)
                .args([flag, &unquoted(in_flag)]);
        });
        assert_eq!(value(&from_flag), expect(in_flag), "{key}");
    }
}

#[test]
fn the_file_reaches_every_command_that_has_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.ndjson");
    run_ok(
        server()
            .args(["generate", "--blocks", "3", "--output"])
            .arg(&events),
    );
    let db = dir.path().join("from-file.sqlite");
    let file = config_file(
        dir.path(),
        &format!(
            "[database]\nurl = {:?}\n[ingest]\ninput = {:?}\n[logging]\nformat = \"json\"\n",
            db.to_str().unwrap(),
            events.to_str().unwrap()
        ),
    );
    // `ingest` takes its input and its database from the file; `check` its database; the
    // log is JSON.
    let output = run_ok(server().args(["ingest", "--config"]).arg(&file));
    let log = String::from_utf8(output.stderr).unwrap();
    let last: serde_json::Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    assert!(
        last["message"].as_str().unwrap().starts_with("ingest done"),
        "{log}"
    );
    let output = run_ok(server().args(["check", "--config"]).arg(&file));
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("last block: "), "{text}");
    // `serve` listens where the file says, metrics apart, and writes the address file it
    // names (the public one is the test's, from the command line, which wins).
    let metrics_file = dir.path().join("metrics-addr");
    let serving_file = config_file(
        dir.path(),
        &format!(
            "[database]\nurl = {:?}\n[listen]\naddress = \"127.0.0.1:0\"\n\
             [metrics]\nlisten = \"127.0.0.1:0\"\naddr_file = {:?}\n",
            db.to_str().unwrap(),
            metrics_file.to_str().unwrap()
        ),
    );
    let serving = serve(server().arg("--config").arg(&serving_file));
    let metrics_addr = std::fs::read_to_string(&metrics_file).unwrap();
    let metrics = http_get(metrics_addr.trim_end(), "/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    let response = http_get(&serving.addr, "/api/v2/oracle/data?pagination.first=1");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
}

/// Runs `server config --config FILE` on a file holding `text`, which must fail; returns its
/// standard error.
#[track_caller]
fn refused(text: &str) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = config_file(dir.path(), text);
    let output: Output = server()
        .arg("config")
        .arg("--config")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!output.status.success(), "{text} was accepted");
    (
        String::from_utf8(output.stderr).unwrap(),
        file.display().to_string(),
    )
}

#[test]
fn a_bad_file_is_refused_naming_the_file_the_line_and_the_key() {
    for (text, line, expected) in [
        (
            "[limits]\nmax_exports = 4\nmax_exprots = 5\n",
            3,
            "unknown key limits.max_exprots",
        ),
        ("\n[limit]\nmax_exports = 4\n", 2, "unknown section [limit]"),
        (
            "[limits]\n\nmax_exports = \"many\"\n",
            3,
            "limits.max_exports: expected an integer, found a string",
        ),
        (
            "[listen]\naddress = 3008\n",
            2,
            "listen.address: expected a string, found an integer",
        ),
        (
            "[listen]\naddress = \"localhost\"\n",
            2,
            "listen.address: invalid value \"localhost\": invalid socket address syntax",
        ),
        (
            "[listen]\nmax_connections = 0\n",
            2,
            "listen.max_connections: invalid value \"0\": 0 is not in 1..",
        ),
        (
            "[limits]\nmax_exports = -1\n",
            2,
            "limits.max_exports: invalid value \"-1\"",
        ),
        (
            "[logging]\nformat = \"xml\"\n",
            2,
            "logging.format: invalid value \"xml\": expected one of text, json",
        ),
        (
            "[ingest]\nformat = \"csv\"\n",
            2,
            "ingest.format: invalid value \"csv\": expected one of ndjson, vega-buffer",
        ),
    ] {
        let (stderr, file) = refused(text);
        let wanted = format!("error: {file}:{line}: {expected}");
        assert!(
            stderr.starts_with(&wanted),
            "{text:?}:\n{stderr}\nwanted {wanted}"
        );
    }
    // Not TOML at all: toml's own message, with the line, after the file's name.
    let (stderr, file) = refused("[limits]\nmax_exports = \n");
    assert!(
        stderr.contains(&format!("configuration file {file}")),
        "{stderr}"
    );
    assert!(stderr.contains("line 2"), "{stderr}");
    // A file that is not there.
    let output = server()
        .args(["config", "--config", "/nonexistent/datanode.toml"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains("cannot read the configuration file /nonexistent/datanode.toml"),
        "{stderr}"
    );
}

#[test]
fn the_default_file_lists_every_key_and_reads_back_as_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let defaults =
        String::from_utf8(run_ok(server().args(["config", "--default"])).stdout).unwrap();
    // Every key is there, after its comment line; the ones without a default commented out.
    let parsed: toml::Table = toml::from_str(&defaults).unwrap();
    for (section, key) in [
        ("listen", "address"),
        ("limits", "max_exports"),
        ("ingest", "max_record_bytes"),
        ("logging", "format"),
    ] {
        assert!(parsed[section].get(key).is_some(), "{section}.{key}");
    }
    for unset in ["url", "input", "addr_file", "listen"] {
        assert!(
            defaults.contains(&format!("\n# {unset} = (not set)\n")),
            "{unset}: {defaults}"
        );
    }
    for (line, next) in defaults.lines().zip(defaults.lines().skip(1)) {
        let is_key = |line: &str| line.contains(" = ") && !line.starts_with('#');
        if is_key(next) {
            assert!(line.starts_with("# "), "no comment before {next}");
        }
    }
    // Read back, it changes nothing; and `config` prints the same settings as the defaults.
    let file = config_file(dir.path(), &defaults);
    let read_back = effective(|command| {
        command.arg("--config").arg(&file);
    });
    assert_eq!(read_back, parsed);
    assert_eq!(effective(|_| {}), parsed);
}

#[test]
fn config_hides_database_passwords() {
    let dir = tempfile::tempdir().unwrap();
    let url = "postgres://reader:hunter2@db.internal/vega?sslmode=require&password=hunter3";
    let file = config_file(dir.path(), &format!("[database]\nurl = {url:?}\n"));
    let mut by_flag = server();
    by_flag.args(["config", "--db", url]);
    let mut by_env = server();
    by_env.arg("config").env("DATANODE_DB", url);
    let mut by_file = server();
    by_file.args(["config", "--config"]).arg(&file);
    for mut command in [by_flag, by_env, by_file] {
        let text = String::from_utf8(run_ok(&mut command).stdout).unwrap();
        assert!(!text.contains("hunter"), "{text}");
        assert!(
            text.contains(
                r#"url = "postgres://reader:***@db.internal/vega?sslmode=require&password=***""#
            ),
            "{text}"
        );
    }
}

/// The commit `git` names in this checkout, if it is one.
fn git_commit() -> Option<String> {
    let output = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8(output.stdout).unwrap().trim().to_owned())
}

/// The commit `--version` names.
fn version_commit() -> String {
    let version = String::from_utf8(run_ok(server().arg("--version")).stdout).unwrap();
    let commit = version
        .strip_prefix(&format!("server {} (commit ", env!("CARGO_PKG_VERSION")))
        .and_then(|rest| rest.strip_suffix(")\n"))
        .unwrap_or_else(|| panic!("{version}"));
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
        "{version}"
    );
    commit.to_owned()
}

#[test]
fn version_names_the_commit_it_was_built_from() {
    let commit = version_commit();
    if let Some(checked_out) = git_commit() {
        assert_eq!(commit, checked_out);
    }
}

#[test]
fn metrics_listen_serves_metrics_apart_and_info_names_the_build() {
    let dir = tempfile::tempdir().unwrap();
    let metrics_file = dir.path().join("metrics-addr");
    let serving = serve(
        server()
            .current_dir(dir.path())
            .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
            .arg("--metrics-addr-file")
            .arg(&metrics_file),
    );
    // Written before the public address file, which `serve` waited for.
    let metrics_addr = std::fs::read_to_string(&metrics_file).unwrap();
    let metrics_addr = metrics_addr.trim_end();
    assert_ne!(metrics_addr, serving.addr);

    let public = http_get(&serving.addr, "/metrics");
    assert!(public.starts_with("HTTP/1.1 404"), "{public}");
    let commit = version_commit();
    let info = http_get(&serving.addr, "/api/v2/info");
    assert!(info.starts_with("HTTP/1.1 200"), "{info}");
    assert!(info.contains("x-block-height: "), "{info}");
    let body = info.split("\r\n\r\n").nth(1).unwrap();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        body,
        format!(r#"{{"version":"{version}","commitHash":"{commit}"}}"#)
    );

    let metrics = http_get(metrics_addr, "/metrics");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(
        metrics.contains(&format!(
            "\ndatanode_build_info{{commit=\"{commit}\",version=\"{version}\"}} 1\n"
        )),
        "{metrics}"
    );
    // The whole process_* set is checked in http-api; here, that the server's registry has it.
    for name in [
        "process_resident_memory_bytes",
        "process_start_time_seconds",
    ] {
        assert!(metrics.contains(&format!("\n{name} ")), "{name}: {metrics}");
    }
    // The public requests are counted there.
    assert!(
        metrics.contains(r#"datanode_http_requests_total{route="info",status="200"} 1"#),
        "{metrics}"
    );
    assert!(http_get(metrics_addr, "/health").starts_with("HTTP/1.1 200"));
    assert!(http_get(metrics_addr, "/api/v2/info").starts_with("HTTP/1.1 404"));
}

#[test]
fn the_readme_example_file_is_accepted() {
    let readme = concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md");
    let readme = std::fs::read_to_string(readme).unwrap();
    let example = readme
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the README shows a configuration file");
    let dir = tempfile::tempdir().unwrap();
    let file = config_file(dir.path(), example);
    let settings = effective(|command| {
        command.arg("--config").arg(&file);
    });
    let written: toml::Table = toml::from_str(example).unwrap();
    for (section, keys) in &written {
        for (key, value) in keys.as_table().unwrap() {
            let shown = &settings[section][key];
            // The password is hidden, the rest as written.
            if key == "url" {
                assert!(shown.as_str().unwrap().contains(":***@"), "{shown}");
            } else {
                assert_eq!(shown, value, "{section}.{key}");
            }
        }
    }
}
