//! Child processes: finding the server binary, the measured ingest, the served server (killed
//! when dropped, so that no error path leaves it running) and memory readings from `/proc`.

use std::ffi::OsStr;
use std::fs::File;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};
use eventgen::{GenerateConfig, GenerateSummary};
use serde::Serialize;

use crate::live::Paced;

/// GNU time: `-f "%M %U %S"` prints the child's peak RSS in KiB and its user and system CPU
/// seconds, which is simpler than calling `wait4` (that needs libc, and the workspace forbids
/// unsafe code).
const GNU_TIME: &str = "/usr/bin/time";

/// How long the server may take to open the database and report its address.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The server binary: the explicit one, or `server` next to this executable.
pub(crate) fn locate_server(explicit: Option<&Path>) -> Result<PathBuf> {
    let path = match explicit {
        Some(path) => path.to_owned(),
        None => {
            let exe = std::env::current_exe().context("cannot locate the bench executable")?;
            let dir = exe
                .parent()
                .context("the bench executable has no directory")?;
            dir.join(format!("server{}", std::env::consts::EXE_SUFFIX))
        }
    };
    anyhow::ensure!(
        path.is_file(),
        "no server binary at {}: build it first with `cargo build --release -p server -p bench`, \
         or pass --server",
        path.display()
    );
    Ok(path)
}

/// Size and modification time of a file: enough to notice a rebuilt server.
pub(crate) fn fingerprint(path: &Path) -> Result<String> {
    let meta =
        std::fs::metadata(path).with_context(|| format!("cannot stat {}", path.display()))?;
    let modified = meta
        .modified()
        .ok()
        .and_then(|time| time.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |since| since.as_nanos());
    Ok(format!("{}-{modified}", meta.len()))
}

/// A finished `server ingest`.
pub(crate) struct IngestRun {
    pub(crate) command: String,
    pub(crate) seconds: f64,
    /// `None` when GNU time is not installed, as are the CPU times.
    pub(crate) peak_rss_kib: Option<u64>,
    pub(crate) cpu_user_secs: Option<f64>,
    pub(crate) cpu_system_secs: Option<f64>,
}

/// Runs `server ingest` on `events` into `db` (a path or a URL), logging to `<dir>/ingest.log`.
pub(crate) fn run_ingest(
    server: &Path,
    db: &OsStr,
    events: &Path,
    dir: &Path,
) -> Result<IngestRun> {
    let mut ingest = IngestCommand::new(server, db, events.as_os_str(), dir)?;
    // Dirty pages of earlier runs (the database just removed, a dataset just written) would be
    // written back during the ingest and charged to it: flush them first. Best effort: without
    // `sync` the figure is only noisier.
    let _ = Command::new("sync").status();
    let started = Instant::now();
    let status = ingest
        .command
        .status()
        .with_context(|| format!("cannot run `{}`", ingest.shown))?;
    ingest.finish(status, started.elapsed().as_secs_f64())
}

/// Runs `server ingest` reading its standard input into `db`, and generates `config`'s stream
/// (NDJSON) into that input as the ingest reads it: no event file is stored, and the
/// generator's time is part of the ingest's. With `pace` (lines, pause), the stream pauses
/// after every so many lines, as one that arrives a few blocks at a time ([`Paced`]).
pub(crate) fn run_ingest_generated(
    server: &Path,
    db: &OsStr,
    config: &GenerateConfig,
    dir: &Path,
    pace: Option<(usize, Duration)>,
) -> Result<(IngestRun, GenerateSummary)> {
    let mut ingest = IngestCommand::new(server, db, OsStr::new("-"), dir)?;
    ingest.command.stdin(Stdio::piped());
    let _ = Command::new("sync").status();
    let started = Instant::now();
    let child = ingest
        .command
        .spawn()
        .with_context(|| format!("cannot run `{}`", ingest.shown))?;
    let mut child = KillOnDrop(child);
    let stdin = child
        .0
        .stdin
        .take()
        .context("the ingest has no standard input")?;
    let mut input = std::io::BufWriter::with_capacity(1 << 20, stdin);
    let generated = match pace {
        Some((lines, pause)) => eventgen::generate(
            config,
            &mut Paced::new(&mut input, lines, || std::thread::sleep(pause)),
        ),
        None => eventgen::generate(config, &mut input),
    }
    .and_then(|summary| input.flush().map(|()| summary));
    // Closing the input ends the ingest's stream.
    drop(input);
    let status = child.0.wait().context("cannot wait for the ingest")?;
    let seconds = started.elapsed().as_secs_f64();
    let run = ingest.finish(status, seconds)?;
    let generated = generated.context("cannot write the generated stream to the ingest")?;
    Ok((run, generated))
}

/// A `server ingest` command, under GNU time when it is installed.
struct IngestCommand {
    command: Command,
    shown: String,
    log_path: PathBuf,
    time_path: PathBuf,
}

impl IngestCommand {
    /// `server ingest --db DB INPUT --quiet`, logging to `<dir>/ingest.log`.
    fn new(server: &Path, db: &OsStr, input: &OsStr, dir: &Path) -> Result<Self> {
        let log_path = dir.join("ingest.log");
        let time_path = dir.join("ingest.time");
        let _ = std::fs::remove_file(&time_path);
        let timed = Path::new(GNU_TIME).is_file();
        let mut command = if timed {
            let mut command = Command::new(GNU_TIME);
            command
                .args(["-f", "%M %U %S", "-o"])
                .arg(&time_path)
                .arg(server);
            command
        } else {
            Command::new(server)
        };
        command
            .arg("ingest")
            .arg("--db")
            .arg(db)
            .arg(input)
            .arg("--quiet")
            .env("NO_COLOR", "1");
        redirect(&mut command, &log_path)?;
        let shown = describe(&command);
        Ok(Self {
            command,
            shown,
            log_path,
            time_path,
        })
    }

    /// The run's figures once it exited with `status` after `seconds`.
    fn finish(self, status: std::process::ExitStatus, seconds: f64) -> Result<IngestRun> {
        let IngestCommand {
            shown,
            log_path,
            time_path,
            ..
        } = self;
        if !status.success() {
            bail!(
                "`{shown}` failed ({status}); end of {}:\n{}",
                log_path.display(),
                tail(&log_path)
            );
        }
        // GNU time writes "Command exited with …" before the figures when the child fails, so the
        // figures are the last line.
        let figures: Vec<String> = std::fs::read_to_string(&time_path)
            .ok()
            .and_then(|text| Some(text.lines().last()?.to_owned()))
            .map(|line| line.split_whitespace().map(str::to_owned).collect())
            .unwrap_or_default();
        let figure = |index: usize| figures.get(index).map(String::as_str);
        Ok(IngestRun {
            command: shown,
            seconds,
            peak_rss_kib: figure(0).and_then(|text| text.parse().ok()),
            cpu_user_secs: figure(1).and_then(|text| text.parse().ok()),
            cpu_system_secs: figure(2).and_then(|text| text.parse().ok()),
        })
    }
}

/// A running `server serve`; killed when dropped.
pub(crate) struct ServerProcess {
    child: KillOnDrop,
    pub(crate) addr: SocketAddr,
    pub(crate) command: String,
    /// Where its output goes.
    pub(crate) log: PathBuf,
}

impl ServerProcess {
    /// Starts `server serve` on a port the kernel picks, and waits for it to write that port to
    /// its address file, with `flags` added to `serve`'s. Asking for port 0 and reading it back
    /// avoids the race of probing for a free port.
    pub(crate) fn start_with(
        server: &Path,
        db: &OsStr,
        dir: &Path,
        flags: &[String],
    ) -> Result<Self> {
        Self::start_under(&[], server, db, dir, flags)
    }

    /// [`ServerProcess::start_with`], run by the `launcher` command given first (`taskset -c 1`,
    /// say) when it is not empty.
    pub(crate) fn start_under(
        launcher: &[String],
        server: &Path,
        db: &OsStr,
        dir: &Path,
        flags: &[String],
    ) -> Result<Self> {
        let log_path = dir.join("server.log");
        let addr_path = dir.join("server.addr");
        let _ = std::fs::remove_file(&addr_path);
        let mut command = match launcher {
            [] => Command::new(server),
            [program, args @ ..] => {
                let mut command = Command::new(program);
                command.args(args).arg(server);
                command
            }
        };
        command
            .arg("serve")
            .arg("--db")
            .arg(db)
            .args(["--listen", "127.0.0.1:0"])
            .arg("--addr-file")
            .arg(&addr_path)
            .args(flags)
            // Debug logging would slow the server down.
            .env("RUST_LOG", "info");
        redirect(&mut command, &log_path)?;
        let shown = describe(&command);
        let child = command
            .spawn()
            .with_context(|| format!("cannot run `{shown}`"))?;
        let mut child = KillOnDrop(child);
        let addr = wait_for_addr(&mut child.0, &addr_path, &log_path)?;
        Ok(Self {
            child,
            addr,
            command: shown,
            log: log_path,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// The address this server writes to `addr_path` once a listener of its own is bound (as
    /// `--ingest-addr-file` asks for the event socket).
    pub(crate) fn address_in(&mut self, addr_path: &Path) -> Result<SocketAddr> {
        wait_for_addr(&mut self.child.0, addr_path, &self.log)
    }

    /// Kills the server and reaps it.
    pub(crate) fn stop(mut self) -> Result<()> {
        self.child.0.kill().context("cannot stop the server")?;
        self.child.0.wait().context("cannot reap the server")?;
        Ok(())
    }
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // Both fail harmlessly when the child is already gone.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The address the server writes (atomically) to `addr_path` once it listens.
fn wait_for_addr(child: &mut Child, addr_path: &Path, log_path: &Path) -> Result<SocketAddr> {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(text) = std::fs::read_to_string(addr_path) {
            // An event socket's address is written as a URL, tcp://HOST:PORT.
            let text = text.trim_end();
            return text
                .strip_prefix("tcp://")
                .unwrap_or(text)
                .parse()
                .with_context(|| format!("{} holds no address: {text:?}", addr_path.display()));
        }
        if let Some(status) = child.try_wait().context("cannot check on the server")? {
            bail!(
                "the server exited ({status}) before serving; end of {}:\n{}",
                log_path.display(),
                tail(log_path)
            );
        }
        if Instant::now() >= deadline {
            bail!(
                "the server did not write {} within {START_TIMEOUT:?}; see {}",
                addr_path.display(),
                log_path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends the child's output to a log file: a pipe nobody reads would block the child.
fn redirect(command: &mut Command, log_path: &Path) -> Result<()> {
    let log =
        File::create(log_path).with_context(|| format!("cannot create {}", log_path.display()))?;
    let stdout = log
        .try_clone()
        .with_context(|| format!("cannot reopen {}", log_path.display()))?;
    command
        .stdin(Stdio::null())
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(log));
    Ok(())
}

/// The command as one would type it (without quoting).
fn describe(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|part| part.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The last lines of a log, for error messages.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// Memory of a process, from `/proc/<pid>/status`.
#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) struct Memory {
    /// Resident set size now.
    pub(crate) rss_kib: u64,
    /// Peak resident set size over the process's life.
    pub(crate) hwm_kib: u64,
}

pub(crate) fn memory(pid: u32) -> Result<Memory> {
    let [rss_kib, hwm_kib] = status(pid, ["VmRSS", "VmHWM"])?;
    Ok(Memory { rss_kib, hwm_kib })
}

/// The numbers of the fields `names` of `/proc/<pid>/status` (KiB for memory, a count for
/// `Threads`), in the order asked.
pub(crate) fn status<const N: usize>(pid: u32, names: [&str; N]) -> Result<[u64; N]> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    let mut values = [0; N];
    for (value, name) in values.iter_mut().zip(names) {
        *value = text
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|value| value.split_whitespace().next()?.parse().ok())
            .ok_or_else(|| anyhow!("{path} has no {name}"))?;
    }
    Ok(values)
}

/// Samples a process's RSS on a thread of its own, so that the async runtime's load cannot
/// delay the samples.
pub(crate) struct RssSampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Vec<u64>>,
}

/// Samples kept at most: an hour at 100 ms.
const MAX_SAMPLES: usize = 36_000;

impl RssSampler {
    pub(crate) fn start(pid: u32, every: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stop_flag = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !stop_flag.load(Ordering::Relaxed) && samples.len() < MAX_SAMPLES {
                if let Ok(memory) = memory(pid) {
                    samples.push(memory.rss_kib);
                }
                std::thread::sleep(every);
            }
            samples
        });
        Self { stop, handle }
    }

    /// Stops sampling and returns the samples, in KiB.
    pub(crate) fn finish(self) -> Result<Vec<u64>> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .join()
            .map_err(|_| anyhow!("the memory sampler panicked"))
    }
}

/// CPU time process `pid` has run so far, all its threads' including those that ended (an
/// export's own reader thread ends with it), and with `children` its child processes' too
/// (nginx's workers under its master): `utime` and `stime` of `/proc/<pid>/stat`, in clock
/// ticks (a hundredth of a second on Linux), so a difference of two readings is good to 10 ms.
pub(crate) fn cpu_time(pid: u32, children: bool) -> Result<Duration> {
    let mut total = process_cpu_time(pid)?;
    if children {
        // Each thread lists the children it started; a thread or a child may end meanwhile.
        let task = format!("/proc/{pid}/task");
        for thread in std::fs::read_dir(&task)
            .with_context(|| format!("cannot list {task}"))?
            .flatten()
        {
            let listed =
                std::fs::read_to_string(thread.path().join("children")).unwrap_or_default();
            for child in listed
                .split_whitespace()
                .filter_map(|child| child.parse().ok())
            {
                total += process_cpu_time(child).unwrap_or_default();
            }
        }
    }
    Ok(total)
}

/// CPU time run so far by every process on this machine named `postgres`: the PostgreSQL
/// server's postmaster, backends and helpers, counted as [`cpu_time`] counts. Zero when the
/// database runs elsewhere.
pub(crate) fn postgres_cpu_time() -> Result<Duration> {
    let mut total = Duration::ZERO;
    for entry in std::fs::read_dir("/proc").context("cannot list /proc")? {
        let dir = entry.context("cannot list /proc")?.path();
        let pid = dir
            .file_name()
            .and_then(OsStr::to_str)
            .and_then(|name| name.parse().ok());
        let is_postgres = pid.is_some()
            && std::fs::read_to_string(dir.join("comm"))
                .is_ok_and(|comm| comm.trim_end() == "postgres");
        // A process may end between the listing and the reads.
        if let (true, Some(pid)) = (is_postgres, pid) {
            total += process_cpu_time(pid).unwrap_or_default();
        }
    }
    Ok(total)
}

/// `utime` + `stime` of `/proc/<pid>/stat`: the process's CPU time, every thread's.
fn process_cpu_time(pid: u32) -> Result<Duration> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    // The fields after the command's name, which is in parentheses and may hold spaces: the
    // 3rd field (state) first, so `utime` (the 14th) and `stime` (the 15th) are the 12th and
    // 13th.
    let ticks = text
        .rsplit_once(')')
        .map(|(_, fields)| {
            fields
                .split_whitespace()
                .skip(11)
                .take(2)
                .map(str::parse::<u64>)
                .collect::<Result<Vec<_>, _>>()
        })
        .and_then(Result::ok)
        .filter(|ticks| ticks.len() == 2)
        .ok_or_else(|| anyhow!("{path} holds no utime and stime"))?;
    Ok(Duration::from_secs(ticks[0] + ticks[1]) / clock_ticks_per_second())
}

/// `getconf CLK_TCK`: the unit of `/proc/<pid>/stat`'s times; 100 when it cannot be asked, as
/// on every Linux architecture but a few old ones.
fn clock_ticks_per_second() -> u32 {
    static TICKS: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok()?.trim().parse().ok())
            .filter(|&ticks| ticks > 0)
            .unwrap_or(100)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Work of at least `iterations` nanoseconds (a dependent multiply and add each), that the
    /// optimiser cannot drop.
    fn work(iterations: u64) -> u64 {
        let mut state = 1_u64;
        for _ in 0..iterations {
            state = std::hint::black_box(state.wrapping_mul(6_364_136_223_846_793_005) + 1);
        }
        state
    }

    #[test]
    fn cpu_time_counts_threads_that_ended() {
        let before = cpu_time(std::process::id(), false).unwrap();
        std::thread::spawn(|| work(100_000_000)).join().unwrap();
        let after = cpu_time(std::process::id(), false).unwrap();
        assert!(
            after >= before + Duration::from_millis(50),
            "{before:?} then {after:?}"
        );
        assert!(cpu_time(u32::MAX, false).is_err(), "no such process");
    }

    #[test]
    fn cpu_time_with_children_counts_a_child_process() {
        let parent = std::process::id();
        let before = cpu_time(parent, true).unwrap();
        // A child that works, then waits for its input to close, so that it is still there to
        // be read.
        let mut child = Command::new("sh")
            .args([
                "-c",
                "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo done; read _",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let with = cpu_time(parent, true).unwrap();
        let without = cpu_time(parent, false).unwrap();
        drop(child.stdin.take());
        child.wait().unwrap();
        assert_eq!(line, "done\n");
        assert!(with > before, "{before:?} then {with:?}");
        assert!(
            with > without,
            "the child's {with:?} against the parent's {without:?}"
        );
    }

    #[test]
    fn postgres_cpu_time_counts_the_work_of_a_backend() {
        let Some(database) = testdb::TestDatabase::create("bench_cpu") else {
            return;
        };
        let mut client = database.client();
        let before = postgres_cpu_time().unwrap();
        let row = client
            .query_one("SELECT count(*) FROM generate_series(1, 3000000)", &[])
            .unwrap();
        let after = postgres_cpu_time().unwrap();
        assert_eq!(row.get::<_, i64>(0), 3_000_000);
        assert!(after > before, "{before:?} then {after:?}");
    }
}
