//! The configuration file (`--config FILE`, `DATANODE_CONFIG`): TOML, one key per flag.
//!
//! Precedence: flags, then environment, then file, then defaults. The file's values become the
//! flags' defaults (`Arg::default_value`) before the command line is parsed, so clap itself
//! applies the rest of the order: a flag or an environment variable beats a default, whoever set
//! it. Each default is still written once, where the flag takes it from the crates' `Default`
//! impls.
//!
//! The file is a table of [`KEYS`]: a section, a key and the id of the flag it sets. Everything
//! else comes from the flag: the comment `server config --default` prints (the first sentence of
//! its help), its default, its TOML type (an integer for integer flags, a boolean for boolean
//! ones, a string otherwise, an array of strings for list flags) and the check of its value (the
//! flag's own value parser). One more setting is one more line in [`KEYS`].
//!
//! A key that a command does not have is left alone by it (`migrate` reads only the database),
//! so one file serves every command. `generate`, a tool for tests and benchmarks, does not read
//! the file (its `--format` is another setting than the ingest's).

use std::any::TypeId;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};
use toml::Spanned;

/// The environment variable naming the file, when `--config` is not given.
pub const CONFIG_ENV: &str = "DATANODE_CONFIG";

/// One key of the file.
struct Key {
    /// The `[section]` it is written in.
    section: &'static str,
    /// Its name in the section.
    name: &'static str,
    /// The id of the flag it sets: the field's name in the commands' `Args` structs.
    arg: &'static str,
}

const fn key(section: &'static str, name: &'static str, arg: &'static str) -> Key {
    Key { section, name, arg }
}

/// Every key of the file, in the order `server config` prints them, a section's keys together.
const KEYS: &[Key] = &[
    key("listen", "address", "listen"),
    key("listen", "addr_file", "addr_file"),
    key("listen", "cors_origins", "cors_origins"),
    key("listen", "max_connections", "max_connections"),
    key("listen", "header_timeout_secs", "header_timeout_secs"),
    key("listen", "idle_timeout_secs", "idle_timeout_secs"),
    key("listen", "max_header_bytes", "max_header_bytes"),
    key("listen", "grace_secs", "grace_secs"),
    key("database", "url", "db"),
    key("database", "max_lag_secs", "max_lag_secs"),
    key("ingest", "input", "ingest"),
    key("ingest", "format", "format"),
    key("ingest", "max_record_bytes", "max_record_bytes"),
    key("ingest", "remembered_mib", "remembered_mib"),
    key("ingest", "max_batch_age_secs", "max_batch_age_secs"),
    key("ingest", "addr_file", "ingest_addr_file"),
    key("limits", "max_exports", "max_exports"),
    key("limits", "max_pages", "max_pages"),
    key("limits", "page_cache_mib", "page_cache_mib"),
    key("rate_limit", "enabled", "rate_limit"),
    key("rate_limit", "requests_per_second", "rate_limit_rate"),
    key("rate_limit", "burst", "rate_limit_burst"),
    key("rate_limit", "ttl_secs", "rate_limit_ttl_secs"),
    key("rate_limit", "ban_secs", "rate_limit_ban_secs"),
    key("rate_limit", "max_clients", "rate_limit_max_clients"),
    key("rate_limit", "exempt", "rate_limit_exempt"),
    key("rate_limit", "trusted_proxies", "trusted_proxies"),
    key("logging", "format", "log_format"),
    key("metrics", "listen", "metrics_listen"),
    key("metrics", "addr_file", "metrics_addr_file"),
];

/// The subcommands the file applies to, besides the root (the default command, `serve`'s flags).
const CONFIGURED: &[&str] = &["serve", "ingest", "migrate", "check", "config"];

/// Keys whose values may hold a password: printed through [`storage::redact`].
const SECRET_ARGS: &[&str] = &["db"];

/// The file named by `--config` in `args` (the process's arguments), or else by
/// [`CONFIG_ENV`]. Read before clap parses the arguments, because the file changes how it does.
pub fn path(args: &[OsString]) -> Option<PathBuf> {
    let mut rest = args.iter().skip(1);
    while let Some(arg) = rest.next() {
        if arg == "--" {
            break;
        }
        if arg == "--config" {
            return rest.next().map(PathBuf::from);
        }
        if let Some(value) = arg.to_str().and_then(|arg| arg.strip_prefix("--config=")) {
            return Some(PathBuf::from(value));
        }
    }
    std::env::var_os(CONFIG_ENV).map(PathBuf::from)
}

/// A file's sections, its keys and their values, each with where it is in the text.
type Document = BTreeMap<Spanned<String>, Spanned<BTreeMap<Spanned<String>, Spanned<toml::Value>>>>;

/// The settings a file gives: the flag id and its values, for each key present.
pub struct File {
    values: Vec<(&'static Key, Vec<String>)>,
}

impl File {
    /// Reads and checks the file at `path` against `command`'s flags: an unknown section or
    /// key, a value of the wrong type or one the flag refuses is an error naming the file, the
    /// line and the key.
    pub fn load(path: &Path, command: &Command) -> Result<File> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
        let document: Document = toml::from_str(&text)
            .with_context(|| format!("configuration file {}", path.display()))?;
        let mut built = command.clone();
        built.build();
        let mut values = Vec::new();
        for (section, keys) in &document {
            let at = |span: std::ops::Range<usize>| {
                let line = text[..span.start].matches('\n').count() + 1;
                format!("{}:{line}", path.display())
            };
            if !KEYS.iter().any(|key| key.section == section.get_ref()) {
                bail!(
                    "{}: unknown section [{}]",
                    at(section.span()),
                    section.get_ref()
                );
            }
            for (name, value) in keys.get_ref() {
                let key = KEYS
                    .iter()
                    .find(|key| key.section == section.get_ref() && key.name == name.get_ref())
                    .with_context(|| {
                        format!(
                            "{}: unknown key {}.{}",
                            at(name.span()),
                            section.get_ref(),
                            name.get_ref()
                        )
                    })?;
                let (_, arg) = find_arg(&built, key.arg);
                let strings = strings_of(arg, value.get_ref()).and_then(|strings| {
                    check(arg, &strings)?;
                    Ok(strings)
                });
                let strings = strings.map_err(|err| {
                    anyhow::anyhow!("{}: {}.{}: {err}", at(value.span()), key.section, key.name)
                })?;
                values.push((key, strings));
            }
        }
        Ok(File { values })
    }

    /// `command` with the file's values as the defaults of the flags they set, in every
    /// (sub)command that has the flag.
    pub fn apply(&self, mut command: Command) -> Command {
        for (key, strings) in &self.values {
            command = set_default(command, key.arg, strings);
            for name in CONFIGURED {
                command = command.mut_subcommand(name, |sub| set_default(sub, key.arg, strings));
            }
        }
        command
    }

    /// Whether the file sets the flag `arg`.
    fn sets(&self, arg: &str) -> bool {
        self.values.iter().any(|(key, _)| key.arg == arg)
    }
}

/// `command` with `strings` as the default of its flag `id`, if it has one. A required
/// positional (`ingest`'s input) is no longer required once the file gives it.
fn set_default(command: Command, id: &str, strings: &[String]) -> Command {
    if !command.get_arguments().any(|arg| arg.get_id() == id) {
        return command;
    }
    let strings: Vec<clap::builder::OsStr> = strings.iter().cloned().map(Into::into).collect();
    command.mut_arg(id, |arg| arg.default_values(strings).required(false))
}

/// The flag `id` and the (built) command it belongs to: the root's, or the first subcommand's
/// that has it. Every key names a flag of some command (a test walks [`KEYS`]).
fn find_arg<'c>(command: &'c Command, id: &str) -> (&'c Command, &'c Arg) {
    std::iter::once(command)
        .chain(
            CONFIGURED
                .iter()
                .filter_map(|name| command.find_subcommand(name)),
        )
        .find_map(|owner| {
            let arg = owner.get_arguments().find(|arg| arg.get_id() == id)?;
            Some((owner, arg))
        })
        .expect("every key names a flag")
}

/// The TOML type a flag's values take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Integer,
    /// A real number: an integer or a float in the file.
    Number,
    Boolean,
    String,
}

fn kind(arg: &Arg) -> Kind {
    let type_id = arg.get_value_parser().type_id();
    let integers = [
        TypeId::of::<u16>(),
        TypeId::of::<u32>(),
        TypeId::of::<u64>(),
        TypeId::of::<usize>(),
        TypeId::of::<i64>(),
    ];
    if integers.iter().any(|integer| type_id == *integer) {
        Kind::Integer
    } else if type_id == TypeId::of::<f64>() {
        Kind::Number
    } else if type_id == TypeId::of::<bool>() {
        Kind::Boolean
    } else {
        Kind::String
    }
}

/// Whether a flag takes a list (an array in the file).
fn is_list(arg: &Arg) -> bool {
    arg.get_value_delimiter().is_some() || matches!(arg.get_action(), ArgAction::Append)
}

/// A TOML value as the strings the flag would be given, if it has the flag's type.
fn strings_of(arg: &Arg, value: &toml::Value) -> Result<Vec<String>> {
    let kind = kind(arg);
    let one = |value: &toml::Value| match (kind, value) {
        (Kind::Integer | Kind::Number, toml::Value::Integer(n)) => Ok(n.to_string()),
        (Kind::Number, toml::Value::Float(x)) => Ok(x.to_string()),
        (Kind::Boolean, toml::Value::Boolean(b)) => Ok(b.to_string()),
        (Kind::String, toml::Value::String(s)) => Ok(s.clone()),
        (_, value) => bail!(
            "expected {}, found {}",
            match kind {
                Kind::Integer => "an integer",
                Kind::Number => "a number",
                Kind::Boolean => "a boolean",
                Kind::String => "a string",
            },
            type_name(value)
        ),
    };
    match value {
        toml::Value::Array(items) if is_list(arg) => items.iter().map(one).collect(),
        value => Ok(vec![one(value)?]),
    }
}

fn type_name(value: &toml::Value) -> &'static str {
    match value {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a float",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a date",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}

/// Runs the flag's own value parser on each of `strings`: the file accepts what the flag does.
/// (clap runs a parser only inside a parse, so each value is parsed as the one flag of a
/// command made for it.)
fn check(arg: &Arg, strings: &[String]) -> Result<()> {
    let checker = Command::new("check").no_binary_name(true).arg(
        Arg::new("value")
            .long("value")
            .value_parser(arg.get_value_parser().clone()),
    );
    for value in strings {
        let flag = OsString::from(format!("--value={value}"));
        if let Err(err) = checker.clone().try_get_matches_from([flag]) {
            // clap's message names the checker's flag; the file's reader wants the value and
            // why: the parser's reason, or the values the flag takes.
            let possible: Vec<String> = arg
                .get_possible_values()
                .iter()
                .map(|value| value.get_name().to_owned())
                .collect();
            let why = match std::error::Error::source(&err) {
                Some(source) => source.to_string(),
                None if !possible.is_empty() => format!("expected one of {}", possible.join(", ")),
                None => err.kind().to_string(),
            };
            bail!("invalid value {}: {why}", toml_string(value));
        }
    }
    Ok(())
}

/// `server config --default`: every key with its built-in default, from the flags of
/// `command`.
pub fn print_defaults(command: &Command) -> String {
    let mut built = command.clone();
    built.build();
    render(&built, |arg| {
        let defaults = arg.get_default_values();
        (!defaults.is_empty()).then(|| {
            let values = defaults
                .iter()
                .map(|value| value.to_string_lossy().into_owned())
                .collect();
            (values, "")
        })
    })
}

/// `server config`: every key with the value the commands would use, after flags, environment,
/// the file and defaults, each with where it came from.
pub fn print_effective(command: &Command, matches: &ArgMatches, file: Option<&File>) -> String {
    let mut built = command.clone();
    built.build();
    render(&built, |arg| {
        let id = arg.get_id().as_str();
        let values: Vec<String> = matches
            .get_raw(id)?
            .map(|value| value.to_string_lossy().into_owned())
            .collect();
        let source = match matches.value_source(id) {
            Some(ValueSource::CommandLine) => "  # from the command line",
            Some(ValueSource::EnvVariable) => "  # from the environment",
            _ if file.is_some_and(|file| file.sets(id)) => "  # from the file",
            _ => "  # default",
        };
        Some((values, source))
    })
}

/// The file's text: each section, and in it each key after a comment line (the first sentence
/// of its flag's help, the flag and its variable); a key without a value is commented out.
fn render(
    command: &Command,
    value_of: impl Fn(&Arg) -> Option<(Vec<String>, &'static str)>,
) -> String {
    let mut out = String::from(
        "# The data node's configuration (server --config FILE, or DATANODE_CONFIG=FILE).\n\
         # Flags and environment variables override it; a key left out keeps its default.\n",
    );
    let mut section = "";
    for key in KEYS {
        let (_, arg) = find_arg(command, key.arg);
        if key.section != section {
            section = key.section;
            let _ = write!(out, "\n[{section}]\n");
        }
        let _ = writeln!(out, "# {}", comment(arg));
        match value_of(arg) {
            Some((values, source)) => {
                let secret = SECRET_ARGS.contains(&key.arg);
                let _ = writeln!(
                    out,
                    "{} = {}{source}",
                    key.name,
                    toml_value(arg, &values, secret)
                );
            }
            None => {
                let _ = writeln!(out, "# {} = (not set)", key.name);
            }
        }
    }
    out
}

/// One line on a flag: its help's first sentence, then the flag and its variable.
fn comment(arg: &Arg) -> String {
    let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
    let help = help.lines().next().unwrap_or_default();
    // The first sentence: up to a full stop before a capital ("e.g. 127.0.0.1" goes on).
    let end = help
        .match_indices(". ")
        .map(|(at, _)| at)
        .find(|at| help[at + 2..].starts_with(char::is_uppercase));
    let sentence = end.map_or(help, |end| &help[..=end]);
    let flag = arg.get_long().map_or_else(
        || "a positional argument".to_owned(),
        |long| format!("--{long}"),
    );
    match arg.get_env() {
        Some(env) => format!("{sentence} ({flag}, {})", env.to_string_lossy()),
        None => format!("{sentence} ({flag})"),
    }
}

/// `values` written as the TOML value of the flag `arg`.
fn toml_value(arg: &Arg, values: &[String], secret: bool) -> String {
    let one = |value: &String| match kind(arg) {
        // Checked by the flag's parser already: digits, a number, or true/false.
        Kind::Integer | Kind::Number | Kind::Boolean => value.clone(),
        Kind::String if secret => toml_string(&storage::redact(value)),
        Kind::String => toml_string(value),
    };
    if is_list(arg) {
        let items: Vec<String> = values.iter().map(one).collect();
        format!("[{}]", items.join(", "))
    } else {
        values.first().map(one).unwrap_or_default()
    }
}

/// `value` as a TOML string, quoted and escaped.
fn toml_string(value: &str) -> String {
    toml::Value::String(value.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    /// Every flag of `serve` and `ingest` is a key, but these, which belong to one run: the
    /// progress lines on a terminal, and the file itself.
    const ONLY_FLAGS: &[&str] = &["progress", "quiet", "config", "help", "version"];

    /// A new flag fails this test until it has its line in [`KEYS`] (or in [`ONLY_FLAGS`]).
    #[test]
    fn every_flag_of_serve_and_ingest_is_a_key() {
        let mut command = crate::Cli::command();
        command.build();
        for name in ["serve", "ingest"] {
            let sub = command.find_subcommand(name).expect("a subcommand");
            for arg in sub.get_arguments() {
                let id = arg.get_id().as_str();
                assert!(
                    ONLY_FLAGS.contains(&id) || KEYS.iter().any(|key| key.arg == id),
                    "{name}'s {id} has no key in the configuration file"
                );
            }
        }
    }

    /// Every key names a flag some command has, and no two keys name the same flag or place.
    #[test]
    fn every_key_names_one_flag() {
        let mut command = crate::Cli::command();
        command.build();
        for (index, key) in KEYS.iter().enumerate() {
            find_arg(&command, key.arg);
            // A section's keys are together: `render` writes its header once.
            let earlier = &KEYS[..index];
            if let Some(last) = earlier.last() {
                assert!(
                    last.section == key.section
                        || earlier.iter().all(|other| other.section != key.section),
                    "[{}] split",
                    key.section
                );
            }
            for other in earlier {
                assert_ne!(other.arg, key.arg, "{} twice", key.arg);
                assert!(
                    (other.section, other.name) != (key.section, key.name),
                    "{}.{} twice",
                    key.section,
                    key.name
                );
            }
        }
    }
}
