//! Docs that cannot drift: the README's flag table of `serve` against `serve --help`, which
//! clap writes from the flags themselves (their environment variables and defaults).

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

mod common;
use common::{run_ok, server};

/// A flag as a source describes it: its environment variable, and its default when it has one.
#[derive(Debug, PartialEq, Eq)]
struct Flag {
    env: Option<String>,
    default: Option<String>,
}

/// The flags `serve --help` lists (but `--help` and `--version`), read from clap's long help: a line
/// `      --name <VALUE>` opens a flag, `[env: NAME=]` and `[default: VALUE]` lines follow it.
fn help_flags() -> BTreeMap<String, Flag> {
    let output = run_ok(server().args(["serve", "--help"]));
    let text = String::from_utf8(output.stdout).unwrap();
    let mut flags = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if line.starts_with("      --") || line.starts_with("  -") {
            let name = trimmed
                .split_whitespace()
                .find(|word| word.starts_with("--"))
                .unwrap()
                .trim_end_matches(',')
                .to_owned();
            current = (name != "--help" && name != "--version").then_some(name.clone());
            if let Some(name) = &current {
                flags.insert(
                    name.clone(),
                    Flag {
                        env: None,
                        default: None,
                    },
                );
            }
        } else if let Some(name) = &current {
            let flag = flags.get_mut(name).unwrap();
            if let Some(env) = trimmed.strip_prefix("[env: ") {
                flag.env = Some(env.split('=').next().unwrap().to_owned());
            } else if let Some(default) = trimmed.strip_prefix("[default: ") {
                flag.default = Some(default.trim_end_matches(']').to_owned());
            }
        }
    }
    flags
}

/// The rows of the README's table of `serve` flags: `| \`--name …\` | \`ENV\` | default | … |`.
/// A default cell holds the value in backticks, maybe with words around it, or `none`.
fn readme_flags() -> BTreeMap<String, Flag> {
    let readme = include_str!("../../../README.md");
    let table = readme
        .split_once("| flag | environment | default | meaning |")
        .expect("the README has the flag table")
        .1;
    let mut flags = BTreeMap::new();
    for row in table
        .lines()
        .skip(2)
        .take_while(|line| line.starts_with('|'))
    {
        // `\|` inside a cell is an escaped bar, not a column.
        let row = row.replace("\\|", "/");
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let name = cells[1]
            .trim_matches('`')
            .split_whitespace()
            .next()
            .unwrap();
        let quoted = |cell: &str| cell.split('`').nth(1).map(str::to_owned);
        flags.insert(
            name.to_owned(),
            Flag {
                env: quoted(cells[2]),
                default: quoted(cells[3]),
            },
        );
    }
    flags
}

#[test]
fn the_readme_flag_table_matches_serve_help() {
    let help = help_flags();
    let readme = readme_flags();
    let names = |flags: &BTreeMap<String, Flag>| flags.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&readme),
        names(&help),
        "flags in the README, then in --help"
    );
    for (name, flag) in &help {
        let documented = &readme[name];
        assert_eq!(documented.env, flag.env, "{name}: environment variable");
        // `--db` documents its default in words (clap shows none: it depends on --ingest).
        if flag.default.is_some() {
            assert_eq!(documented.default, flag.default, "{name}: default");
        }
    }
}
