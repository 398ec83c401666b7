//! PostgreSQL servers of a test's own, started with the installed server programs (`initdb`,
//! `pg_ctl`, `pg_basebackup`): the TLS tests' servers, and a hot standby of the test server.
//!
//! A machine without the programs fails such a test, naming [`NO_SERVER_VAR`], which skips
//! them instead (refused under CI, `CI=true`): a test that cannot run must not pass silently.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};

/// Set to skip the tests that start a PostgreSQL server of their own, on a machine without
/// PostgreSQL's server programs; without it, such a machine fails them.
pub const NO_SERVER_VAR: &str = "DATANODE_TEST_NO_PG_SERVER";

/// The directory of PostgreSQL's server programs (`initdb`, `pg_ctl`, `pg_basebackup`); by
/// default the newest `/usr/lib/postgresql/*/bin`, where Debian installs them.
pub const BIN_VAR: &str = "DATANODE_TEST_PG_BIN";

/// PostgreSQL's server programs, run as the user a server may run as.
#[derive(Clone, Debug)]
pub struct Programs {
    bin: PathBuf,
    /// True when the test runs as root: initdb and postgres refuse root, so the programs run
    /// as `postgres`.
    as_postgres: bool,
}

impl Programs {
    /// The installed programs; `None` (after printing why) when they are missing and
    /// [`NO_SERVER_VAR`] is set.
    ///
    /// # Panics
    ///
    /// When they are missing and [`NO_SERVER_VAR`] is not set, or set under CI; `needed_by`
    /// names the tests that need them.
    pub fn find(needed_by: &str) -> Option<Programs> {
        let Some(bin) = server_programs() else {
            opt_out(
                &format!(
                    "PostgreSQL's server programs were not found (in {BIN_VAR} or \
                     /usr/lib/postgresql/*/bin): install PostgreSQL"
                ),
                needed_by,
            );
            return None;
        };
        let as_postgres = std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0);
        Some(Programs { bin, as_postgres })
    }

    /// A command running one of the programs as the server's user.
    pub fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        }
    }

    /// Gives `dir` and everything in it to the server's user.
    pub fn own(&self, dir: &Path) {
        if self.as_postgres {
            run(Command::new("chown").arg("-R").arg("postgres:").arg(dir));
        }
    }
}

/// Fails the test with `why`, naming [`NO_SERVER_VAR`], unless that variable is set outside CI:
/// then prints that `needed_by` is skipped, and returns.
fn opt_out(why: &str, needed_by: &str) {
    assert!(
        std::env::var_os(NO_SERVER_VAR).is_some(),
        "{why}, or set {NO_SERVER_VAR}=1 to skip {needed_by}"
    );
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{why}; {NO_SERVER_VAR} is set, but {needed_by} may not be skipped under CI"
    );
    eprintln!("skipped {needed_by}: {why}, and {NO_SERVER_VAR} is set");
}

/// The directory holding `initdb` and `pg_ctl`, if any.
fn server_programs() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os(BIN_VAR) {
        return Some(PathBuf::from(bin));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// A loopback port free now (the server binds it right after).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

/// Runs `command`, panicking with its error output when it fails.
#[track_caller]
pub fn run(command: &mut Command) {
    let output = command
        .output()
        .unwrap_or_else(|err| panic!("{command:?}: {err}"));
    assert!(
        output.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A hot standby of the test server (`DATANODE_TEST_PG`), made with `pg_basebackup -R` into a
/// directory of the caller's and started on a free loopback port; stopped when dropped (the
/// caller removes the directory).
#[derive(Debug)]
pub struct Standby {
    programs: Programs,
    data: PathBuf,
    port: u16,
    /// Held for its drop, declared last: dropped once the standby has stopped.
    _slot: Slot,
}

/// The prefix of the replication slots the standbys stream through, followed by the test
/// process's id and a counter.
const SLOT_PREFIX: &str = "datanode_test_standby_";

/// A physical replication slot of the test server, reserving its WAL for one standby from
/// before its base backup begins to after it stops; dropped when dropped.
///
/// Without it, a base backup's WAL stream raced the other tests: each database they create or
/// drop takes an immediate checkpoint, which removed WAL (`wal_keep_size` is 0) or ended the
/// stream ("terminating process … to release replication slot") before pg_basebackup's own
/// temporary slot held it, and the copy failed ("requested WAL segment … has already been
/// removed") about one run of the `it` suite in two.
#[derive(Debug)]
struct Slot {
    admin_url: String,
    name: String,
}

impl Slot {
    /// Creates a slot that reserves WAL at once, after dropping those of test processes that
    /// no longer run.
    fn reserve(admin_url: &str) -> Slot {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let mut admin = Client::connect(admin_url, NoTls).expect("the test server");
        drop_stale_slots(&mut admin);
        let name = format!(
            "{SLOT_PREFIX}{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        admin
            .execute(
                "SELECT pg_create_physical_replication_slot($1, true)",
                &[&name],
            )
            .expect("a replication slot on the test server");
        Slot {
            admin_url: admin_url.to_owned(),
            name,
        }
    }
}

impl Drop for Slot {
    /// The standby has stopped, but its WAL sender may not have ended yet: it is ended, waiting
    /// up to 10 s for it to be gone (`pg_terminate_backend` with a timeout), and the slot,
    /// then free, dropped. A slot left behind is dropped by the next test process, its owner
    /// being gone.
    fn drop(&mut self) {
        let Ok(mut admin) = Client::connect(&self.admin_url, NoTls) else {
            return;
        };
        let _ = admin.execute(
            "SELECT pg_terminate_backend(active_pid, 10000) FROM pg_replication_slots \
             WHERE slot_name = $1 AND active_pid IS NOT NULL",
            &[&self.name],
        );
        let _ = admin.execute("SELECT pg_drop_replication_slot($1)", &[&self.name]);
    }
}

/// Drops the standbys' slots of test processes that no longer run, which would otherwise hold
/// the test server's WAL forever.
fn drop_stale_slots(admin: &mut Client) {
    let Ok(rows) = admin.query(
        "SELECT slot_name::text FROM pg_replication_slots \
         WHERE slot_name LIKE 'datanode\\_test\\_standby\\_%' AND NOT active",
        &[],
    ) else {
        return;
    };
    for row in rows {
        let name: String = row.get(0);
        if crate::owner_gone(&name, SLOT_PREFIX) {
            let _ = admin.execute("SELECT pg_drop_replication_slot($1)", &[&name]);
        }
    }
}

impl Standby {
    /// Copies the server `admin_url` names into `dir/data` (the whole cluster, as a base backup
    /// does) and starts it as a streaming standby of that server; `None` (after printing why)
    /// when the copy fails and [`NO_SERVER_VAR`] is set.
    ///
    /// # Panics
    ///
    /// When the copy fails and [`NO_SERVER_VAR`] is not set (or set under CI), or the start
    /// fails: the server must accept replication connections from loopback (a `host
    /// replication all 127.0.0.1/32 trust` line in `pg_hba.conf`, which `.ci/run` adds), and
    /// the temporary directory must have room for a copy of every database on it.
    pub fn start(programs: &Programs, admin_url: &str, dir: &Path) -> Option<Standby> {
        programs.own(dir);
        let data = dir.join("data");
        let slot = Slot::reserve(admin_url);
        let backup = programs
            .command("pg_basebackup")
            .arg("--dbname")
            .arg(admin_url)
            .arg("--pgdata")
            .arg(&data)
            .arg(format!("--slot={}", slot.name))
            .args(["--write-recovery-conf", "--wal-method=stream"])
            .args(["--checkpoint=fast", "--no-sync"])
            .output()
            .expect("pg_basebackup runs");
        if !backup.status.success() {
            let stderr = String::from_utf8_lossy(&backup.stderr);
            let hint = if stderr.contains("pg_hba.conf") {
                "The server must accept replication connections from this machine: add `host \
                 replication all 127.0.0.1/32 trust` to its pg_hba.conf and reload it (as \
                 .ci/run does)"
            } else {
                // Seen: "No space left on device" after a benchmark left its databases behind.
                "The copy holds the whole cluster, every database of the test server included: \
                 the temporary directory needs room for all of them"
            };
            opt_out(
                &format!(
                    "pg_basebackup of the test server failed: {}\n{hint}",
                    stderr.trim()
                ),
                "the read-replica test",
            );
            return None;
        }
        // A Debian cluster keeps its configuration files outside its data directory, so the
        // copy may lack them: the standby gets its own, trusting loopback as the tests do.
        for (file, text) in [
            ("postgresql.conf", ""),
            ("pg_ident.conf", ""),
            (
                "pg_hba.conf",
                "local all all trust\nhost all all 127.0.0.1/32 trust\n",
            ),
        ] {
            let path = data.join(file);
            if !path.exists() {
                std::fs::write(&path, text).expect("a configuration file of the standby");
            }
        }
        programs.own(&data);
        let standby = Standby {
            programs: programs.clone(),
            data,
            port: free_port(),
            _slot: slot,
        };
        let options = format!(
            "-c listen_addresses=127.0.0.1 -c port={} -c unix_socket_directories={} \
             -c hot_standby=on -c fsync=off",
            standby.port,
            dir.display()
        );
        // `-w` returns once the standby accepts read-only connections: no polling here.
        let log = dir.join("log");
        let started = standby
            .programs
            .command("pg_ctl")
            .args(["start", "-w", "-t", "120", "-D"])
            .arg(&standby.data)
            .arg("-l")
            .arg(&log)
            .args(["-o", &options])
            .output()
            .expect("pg_ctl runs");
        if !started.status.success() {
            panic!(
                "pg_ctl start of the standby failed: {}\n{}",
                String::from_utf8_lossy(&started.stderr),
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        Some(standby)
    }

    /// The URL of `database` on the standby, as user `postgres`.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Waits until the standby has replayed everything the primary (`primary`, a connection to
    /// it) had written when this was called: the event is the standby's replay position,
    /// polled, since PostgreSQL 15 offers no call that blocks on it. Panics after `timeout`.
    pub fn wait_replayed(&self, primary: &mut Client, timeout: Duration) {
        let target: String = primary
            .query_one("SELECT pg_current_wal_lsn()::text", &[])
            .expect("the primary's WAL position")
            .get(0);
        let mut standby = Client::connect(&self.url("postgres"), NoTls).expect("the standby");
        let deadline = Instant::now() + timeout;
        loop {
            let replayed: bool = standby
                .query_one(
                    "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn",
                    &[&target],
                )
                .expect("the standby's replay position")
                .get(0);
            if replayed {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the standby did not replay up to {target} within {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Standby {
    fn drop(&mut self) {
        let _ = self
            .programs
            .command("pg_ctl")
            .args(["stop", "-m", "immediate", "-w", "-D"])
            .arg(&self.data)
            .output();
    }
}
