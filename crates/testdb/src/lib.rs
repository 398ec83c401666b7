//! Throw-away databases for tests that need PostgreSQL, shared by the PostgreSQL backend's, the
//! server's and the end-to-end tests, and the benchmark's database. Never a dependency of a
//! library crate: it is not part of any crate's public API.
//!
//! `DATANODE_TEST_PG` names a server and a database to connect to for administration; without
//! it the tests use [`DEFAULT_TEST_PG`], the server every development machine of this project
//! runs. A server that cannot be reached fails the test, naming the opt-out: a test that cannot
//! run must not pass silently. `DATANODE_TEST_PG=skip` skips them, printing so (refused under
//! CI, `CI=true`).
//!
//! `server.rs`: servers of a test's own, started with the installed server programs (the TLS
//! tests' servers, a hot standby of the test server), skipped only with `NO_SERVER_VAR`.

mod server;

use std::sync::Once;
use std::sync::atomic::{AtomicU32, Ordering};

use postgres::{Client, NoTls};
pub use server::{BIN_VAR, NO_SERVER_VAR, Programs, Standby, free_port, run};

/// The variable naming the test server.
pub const TEST_PG_VAR: &str = "DATANODE_TEST_PG";

/// The test server when [`TEST_PG_VAR`] is not set: PostgreSQL on this machine, trusting local
/// connections, as on every development and CI machine of this project.
pub const DEFAULT_TEST_PG: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// The value of [`TEST_PG_VAR`] that skips the PostgreSQL tests.
pub const SKIP: &str = "skip";

/// Prefix of every database the tests create; `<prefix><pid>_<n>`.
const PREFIX: &str = "datanode_test_";

/// A database of its own for one test, dropped (with its connections) when the guard drops,
/// on a panic too.
#[derive(Debug)]
pub struct TestDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl TestDatabase {
    /// A new empty database, or `None` (after printing why) when `DATANODE_TEST_PG=skip`.
    ///
    /// # Panics
    ///
    /// When the server cannot be reached or the database not created, naming the opt-out, or
    /// when the tests are skipped under CI.
    pub fn create(test: &str) -> Option<TestDatabase> {
        let admin_url = std::env::var(TEST_PG_VAR).unwrap_or_else(|_| DEFAULT_TEST_PG.to_owned());
        if admin_url == SKIP {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{TEST_PG_VAR}={SKIP}: the PostgreSQL tests may not be skipped under CI"
            );
            eprintln!("{test}: SKIPPED ({TEST_PG_VAR}={SKIP}): the PostgreSQL backend is untested");
            return None;
        }
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "{PREFIX}{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut admin = admin(&admin_url);
        static STALE: Once = Once::new();
        STALE.call_once(|| drop_stale(&mut admin));
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|err| panic!("cannot create the test database {name}: {err}"));
        let url = with_database(&admin_url, &name);
        Some(TestDatabase {
            admin_url,
            name,
            url,
        })
    }

    /// The URL of the test database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The URL of the server's administration database (`DATANODE_TEST_PG`).
    pub fn admin_url(&self) -> &str {
        &self.admin_url
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A plain connection to the administration database.
    pub fn admin(&self) -> Client {
        admin(&self.admin_url)
    }

    /// A plain connection to the test database.
    pub fn client(&self) -> Client {
        admin(&self.url)
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if let Ok(mut admin) = Client::connect(&self.admin_url, NoTls) {
            let _ = admin.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

fn admin(url: &str) -> Client {
    Client::connect(url, NoTls).unwrap_or_else(|err| {
        panic!(
            "cannot connect to the test PostgreSQL at {} ({err}): start it, name another with \
             {TEST_PG_VAR}=URL, or skip the PostgreSQL tests with {TEST_PG_VAR}={SKIP}",
            storage::redact(url)
        )
    })
}

/// Drops the databases left by test processes that no longer run: killed before their guards
/// dropped, or holding a guard in a static, which is never dropped (the `it` suite's shared
/// datasets, `support::mixed` and `support::whale`, leave two databases behind every run).
fn drop_stale(admin: &mut Client) {
    let Ok(rows) = admin.query(
        "SELECT datname FROM pg_database WHERE datname LIKE 'datanode\\_test\\_%'",
        &[],
    ) else {
        return;
    };
    for row in rows {
        let name: String = row.get(0);
        if owner_gone(&name, PREFIX) {
            let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
        }
    }
}

/// Whether `name` (`prefix`, a process id, `_`, the rest) was made by a test process that no
/// longer runs; false for a name without a process id.
fn owner_gone(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix)
        .and_then(|rest| rest.split('_').next())
        .and_then(|pid| pid.parse::<u32>().ok())
        .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
}

/// `url` with its database (the path) replaced by `name`, parameters kept.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let (scheme, rest) = base.split_once("://").unwrap_or(("postgres", base));
    let authority = rest.split('/').next().unwrap_or(rest);
    format!("{scheme}://{authority}/{name}{query}")
}
