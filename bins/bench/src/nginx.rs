//! The baseline: nginx serving a copy of the very bytes our server answers, from the page
//! cache with `sendfile`, measured by the same clients, interleaved with our server in the same
//! run, so that the ratios hold however loaded the shared machine is.
//!
//! nginx is Debian's `nginx-light`, run as a child process with a configuration of its own in
//! `<dir>/nginx` (an ephemeral loopback port, as many workers as our runtime has threads, no
//! access log, every path inside that directory, `daemon off`). Without it the bench says how
//! to install it and reports no ratios; the other figures do not depend on it.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde::Serialize;

use crate::against;
use crate::export::{self, ExportCase};
use crate::http_client::{Accept, Connection, FAST_BUFFER};
use crate::listing::{self, CLIENTS, PageCase};
use crate::stats::Summary;

/// Where Debian's `nginx-light` puts the binary.
pub(crate) const DEFAULT_BINARY: &str = "/usr/sbin/nginx";

/// How to get it.
const INSTALL: &str = "apt-get install -y nginx-light";

/// File names of the copies nginx serves.
const EXPORT_FILE: &str = "export.csv";
const PAGE_FILE: &str = "page.json";

/// How long nginx may take to answer on its port.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Attempts at starting nginx: the port is picked free, then released for nginx to bind, so
/// another process may take it in between.
const START_ATTEMPTS: u32 = 3;

/// Each page's throughput is measured in this many alternating slices per server, so that a
/// burst of load on the machine falls on both.
const PAGE_ROUNDS: u32 = 3;

/// What to measure against nginx.
pub(crate) struct Plan<'a> {
    /// The nginx binary.
    pub(crate) binary: &'a Path,
    /// Where nginx's configuration, logs and copies go.
    pub(crate) dir: PathBuf,
    /// Worker processes, as many as our server's runtime threads.
    pub(crate) workers: usize,
    pub(crate) export: &'a ExportCase,
    pub(crate) export_runs: u32,
    /// Whose CPU time our exports are charged with: our server's process and, on PostgreSQL,
    /// the database's processes.
    pub(crate) ours: export::Meter,
    /// The page asked again and again, whose answer nginx serves, then the distinct pages
    /// asked round-robin and by a walk per client, compared with nginx serving that page: one
    /// of the same size.
    pub(crate) pages: [&'a PageCase; 3],
    /// Total throughput time per server and client count.
    pub(crate) throughput: Duration,
}

/// Our server against nginx; `skipped` says why there are no figures.
#[derive(Debug, Serialize)]
pub(crate) struct Baseline {
    pub(crate) binary: String,
    pub(crate) version: Option<String>,
    pub(crate) command: Option<String>,
    pub(crate) skipped: Option<String>,
    pub(crate) export: Option<ExportRatio>,
    pub(crate) pages: Vec<PageRatio>,
}

/// The whole export read by the same client from both servers, runs alternating.
#[derive(Debug, Serialize)]
pub(crate) struct ExportRatio {
    pub(crate) name: &'static str,
    pub(crate) path: String,
    pub(crate) bytes: u64,
    pub(crate) ours: Summary,
    pub(crate) nginx: Summary,
    /// Our median time over nginx's: 1 is nginx's speed, 2 twice its time.
    pub(crate) time_ratio: f64,
    /// The CPU time each export cost our server's process.
    pub(crate) ours_server_cpu: Summary,
    /// The CPU time each export cost PostgreSQL's processes on this machine, on PostgreSQL when
    /// it runs here ([`export::database_measured`]).
    pub(crate) ours_database_cpu: Option<Summary>,
    /// The CPU time each export cost nginx's master and workers.
    pub(crate) nginx_cpu: Summary,
    /// The median CPU time of ours (server and database) over nginx's.
    pub(crate) cpu_ratio: f64,
}

/// Requests per second for a page at one client count, against nginx's for the page it
/// serves (the same bytes for a repeated page, a page of the same size for distinct pages).
#[derive(Debug, Serialize)]
pub(crate) struct PageRatio {
    pub(crate) name: &'static str,
    pub(crate) path: String,
    pub(crate) body_bytes: usize,
    pub(crate) clients: u32,
    pub(crate) ours_per_sec: f64,
    pub(crate) nginx_per_sec: f64,
    /// Ours over nginx's: 1 is nginx's rate.
    pub(crate) rate_ratio: f64,
}

/// Measures our server at `ours` against nginx serving the same bytes, or says why it cannot.
pub(crate) async fn compare(ours: SocketAddr, plan: &Plan<'_>) -> Baseline {
    let mut baseline = Baseline {
        binary: plan.binary.display().to_string(),
        version: None,
        command: None,
        skipped: None,
        export: None,
        pages: Vec::new(),
    };
    if !plan.binary.is_file() {
        let reason = format!(
            "nginx is missing at {}: install it with `{INSTALL}` (or pass --nginx PATH); \
             the ratios against nginx are skipped",
            plan.binary.display()
        );
        eprintln!("bench: warning: {reason}");
        baseline.skipped = Some(reason);
        return baseline;
    }
    baseline.version = version(plan.binary);
    if let Err(err) = measure(ours, plan, &mut baseline).await {
        let reason = format!("{err:#}");
        eprintln!("bench: warning: no figures against nginx: {reason}");
        baseline.skipped = Some(reason);
    }
    baseline
}

async fn measure(ours: SocketAddr, plan: &Plan<'_>, baseline: &mut Baseline) -> Result<()> {
    let www = plan.dir.join("www");
    std::fs::create_dir_all(&www).with_context(|| format!("cannot create {}", www.display()))?;
    // nginx reads relative paths from its prefix: every path it is given is absolute.
    let dir = std::fs::canonicalize(&plan.dir)
        .with_context(|| format!("cannot resolve {}", plan.dir.display()))?;
    eprintln!(
        "bench: copying our answers for nginx into {}",
        www.display()
    );
    let export_type = copy_answer(ours, &plan.export.path, Accept::Csv, &www.join(EXPORT_FILE))
        .await
        .context("cannot copy the export")?;
    let page = plan.pages[0];
    let page_type = copy_answer(ours, page.path(), Accept::Json, &www.join(PAGE_FILE))
        .await
        .context("cannot copy the page")?;
    let config = Config {
        dir,
        workers: plan.workers,
        types: vec![(EXPORT_FILE, export_type), (PAGE_FILE, page_type)],
    };
    let nginx = NginxProcess::start(plan.binary, &config)?;
    baseline.command = Some(nginx.command.clone());
    let export_path = format!("/{EXPORT_FILE}");
    let page_path = format!("/{PAGE_FILE}");
    same_bytes(ours, page.path(), nginx.addr, &page_path).await?;

    eprintln!(
        "bench: whale export, ours and nginx's alternately x{}",
        plan.export_runs
    );
    // One untimed export from each first: nginx's copy was just written and may have left the
    // page cache (this machine reclaims it quickly), and the comparison is with a cached file.
    export::once(ours, &plan.export.path).await?;
    export::once(nginx.addr, &export_path).await?;
    let targets = [
        (ours, plan.export.path.as_str()),
        (nginx.addr, export_path.as_str()),
    ];
    let meters = [
        plan.ours,
        export::Meter {
            pid: nginx.child.id(),
            children: true,
            database: false,
        },
    ];
    let runs = against::alternately(plan.export_runs, |which| {
        let (addr, path) = targets[which];
        meters[which].once(addr, path)
    })
    .await?;
    let shape = |runs: &[export::Costed]| runs.last().map(|cost| (cost.run.rows, cost.run.bytes));
    let summary = |runs: &[export::Costed], figure: fn(&export::Costed) -> Duration| {
        Summary::of(&runs.iter().map(figure).collect::<Vec<_>>())
    };
    let shapes = (shape(&runs[0]), shape(&runs[1]));
    if shapes.0 != shapes.1 {
        bail!(
            "nginx's copy of the export differs: {:?} vs {:?} rows and bytes",
            shapes.0,
            shapes.1
        );
    }
    let time = |cost: &export::Costed| cost.run.time;
    let (ours_time, nginx_time) = (summary(&runs[0], time), summary(&runs[1], time));
    let server_cpu = summary(&runs[0], |cost| cost.server_cpu);
    let database_cpu =
        export::database_measured(&runs[0]).then(|| summary(&runs[0], |cost| cost.database_cpu));
    let nginx_cpu = summary(&runs[1], |cost| cost.server_cpu);
    let ours_cpu = server_cpu.p50_ms + database_cpu.as_ref().map_or(0.0, |cpu| cpu.p50_ms);
    baseline.export = Some(ExportRatio {
        name: plan.export.name,
        path: plan.export.path.clone(),
        bytes: shapes.0.map_or(0, |(_, bytes)| bytes),
        time_ratio: ours_time.p50_ms / nginx_time.p50_ms.max(1e-9),
        ours: ours_time,
        nginx: nginx_time,
        cpu_ratio: ours_cpu / nginx_cpu.p50_ms.max(1e-9),
        ours_server_cpu: server_cpu,
        ours_database_cpu: database_cpu,
        nginx_cpu,
    });

    let body_bytes = std::fs::metadata(www.join(PAGE_FILE))
        .map_or(0, |meta| usize::try_from(meta.len()).unwrap_or(usize::MAX));
    let slice = plan.throughput / PAGE_ROUNDS;
    let nginx_paths: Arc<[String]> = Arc::from([page_path]);
    for case in plan.pages {
        for clients in CLIENTS {
            eprintln!(
                "bench: page {}, ours and nginx's alternately, clients: {clients}",
                case.name
            );
            let mut requests = [0u64; 2];
            let mut seconds = [0f64; 2];
            for _ in 0..PAGE_ROUNDS {
                for (idx, (addr, paths)) in [(ours, &case.paths), (nginx.addr, &nginx_paths)]
                    .into_iter()
                    .enumerate()
                {
                    let run =
                        listing::throughput_run(addr, paths, case.walks, clients, slice).await?;
                    requests[idx] += run.requests;
                    seconds[idx] += run.seconds;
                }
            }
            let ours_per_sec = requests[0] as f64 / seconds[0].max(1e-9);
            let nginx_per_sec = requests[1] as f64 / seconds[1].max(1e-9);
            baseline.pages.push(PageRatio {
                name: case.name,
                path: case.path().to_owned(),
                body_bytes,
                clients,
                ours_per_sec,
                nginx_per_sec,
                rate_ratio: ours_per_sec / nginx_per_sec.max(1e-9),
            });
        }
    }
    drop(nginx);
    Ok(())
}

/// Writes the body of our answer at `path` to `file`; returns its `Content-Type`.
async fn copy_answer(addr: SocketAddr, path: &str, accept: Accept, file: &Path) -> Result<String> {
    let mut out = BufWriter::with_capacity(
        FAST_BUFFER,
        File::create(file).with_context(|| format!("cannot create {}", file.display()))?,
    );
    let mut connection = Connection::connect(addr, FAST_BUFFER).await?;
    connection.send(path, accept).await?;
    let head = connection.read_head().await?;
    if head.status != 200 {
        bail!("{path}: status {}", head.status);
    }
    let mut written = Ok(());
    connection
        .read_body(&head, |data| {
            if written.is_ok() {
                written = out.write_all(data);
            }
        })
        .await?;
    written
        .and_then(|()| out.flush())
        .with_context(|| format!("cannot write {}", file.display()))?;
    head.content_type
        .with_context(|| format!("{path}: the answer has no Content-Type"))
}

/// Fails unless both servers answer the same body.
async fn same_bytes(
    ours: SocketAddr,
    path: &str,
    nginx: SocketAddr,
    nginx_path: &str,
) -> Result<()> {
    let mut bodies = [Vec::new(), Vec::new()];
    for ((addr, path), body) in [(ours, path), (nginx, nginx_path)]
        .into_iter()
        .zip(&mut bodies)
    {
        let mut connection = Connection::connect(addr, FAST_BUFFER).await?;
        let status = connection.get(path, Accept::Json, body).await?;
        anyhow::ensure!(status == 200, "{addr}{path}: status {status}");
    }
    anyhow::ensure!(
        bodies[0] == bodies[1],
        "nginx does not answer the bytes of {path} ({} vs {} bytes)",
        bodies[0].len(),
        bodies[1].len()
    );
    Ok(())
}

/// nginx's `-v` line, e.g. `nginx/1.22.1`.
fn version(binary: &Path) -> Option<String> {
    let output = Command::new(binary).arg("-v").output().ok()?;
    // nginx prints its version on stderr.
    let text = String::from_utf8_lossy(&output.stderr);
    let line = text.lines().next()?;
    Some(line.rsplit(' ').next().unwrap_or(line).to_owned())
}

/// nginx's configuration for one run.
struct Config {
    dir: PathBuf,
    workers: usize,
    /// File name and the `Content-Type` our server gave it.
    types: Vec<(&'static str, String)>,
}

impl Config {
    fn render(&self, port: u16, as_root: bool) -> String {
        let dir = |name: &str| quoted(&self.dir.join(name));
        let mut locations = String::new();
        for (file, content_type) in &self.types {
            let _ = writeln!(
                locations,
                "        location = /{file} {{ default_type \"{content_type}\"; }}"
            );
        }
        // As root, nginx would run its workers as `nobody`, who may not traverse the work
        // directory; as anyone else the directive would be ignored with a warning.
        let user = if as_root { "user root;\n" } else { "" };
        format!(
            "# Written by bench: the baseline that our server is compared with.\n\
             daemon off;\n\
             {user}\
             worker_processes {workers};\n\
             pid {pid};\n\
             lock_file {lock};\n\
             error_log {error_log} warn;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n\
             \x20   access_log off;\n\
             \x20   sendfile on;\n\
             \x20   tcp_nopush on;\n\
             \x20   tcp_nodelay on;\n\
             \x20   # The clients keep their connections for a whole run.\n\
             \x20   keepalive_requests 1000000000;\n\
             \x20   keepalive_timeout 600s;\n\
             \x20   client_body_temp_path {tmp_body};\n\
             \x20   proxy_temp_path {tmp_proxy};\n\
             \x20   fastcgi_temp_path {tmp_fastcgi};\n\
             \x20   uwsgi_temp_path {tmp_uwsgi};\n\
             \x20   scgi_temp_path {tmp_scgi};\n\
             \x20   types {{ }}\n\
             \x20   default_type application/octet-stream;\n\
             \x20   server {{\n\
             \x20       # One listening socket per worker: the kernel spreads the connections,\n\
             \x20       # where a shared one may give all of them to the worker that wakes first.\n\
             \x20       listen 127.0.0.1:{port} reuseport;\n\
             \x20       root {root};\n\
             {locations}\
             \x20   }}\n\
             }}\n",
            workers = self.workers,
            pid = dir("nginx.pid"),
            lock = dir("nginx.lock"),
            error_log = dir("error.log"),
            tmp_body = dir("tmp-body"),
            tmp_proxy = dir("tmp-proxy"),
            tmp_fastcgi = dir("tmp-fastcgi"),
            tmp_uwsgi = dir("tmp-uwsgi"),
            tmp_scgi = dir("tmp-scgi"),
            root = dir("www"),
        )
    }
}

/// A path as an nginx string literal.
fn quoted(path: &Path) -> String {
    format!(
        "\"{}\"",
        path.display()
            .to_string()
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
    )
}

/// Whether this process runs as root, from `/proc/self/status` (no libc: unsafe is forbidden).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|text| {
        text.lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}

/// A running nginx; stopped when dropped.
struct NginxProcess {
    child: Child,
    binary: PathBuf,
    /// The arguments that name its prefix, configuration and error log, for `-s stop`.
    args: Vec<String>,
    addr: SocketAddr,
    command: String,
}

impl NginxProcess {
    fn start(binary: &Path, config: &Config) -> Result<Self> {
        let mut last_error = None;
        for _ in 0..START_ATTEMPTS {
            match Self::try_start(binary, config) {
                Ok(nginx) => return Ok(nginx),
                Err(err) => last_error = Some(err),
            }
        }
        Err(last_error.expect("at least one attempt"))
    }

    fn try_start(binary: &Path, config: &Config) -> Result<Self> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .context("cannot find a free port")?
            .port();
        let conf = config.dir.join("nginx.conf");
        std::fs::write(&conf, config.render(port, is_root()))
            .with_context(|| format!("cannot write {}", conf.display()))?;
        let error_log = config.dir.join("error.log");
        let args = vec![
            "-p".to_owned(),
            format!("{}/", config.dir.display()),
            "-c".to_owned(),
            conf.display().to_string(),
            // Before it reads its configuration, nginx logs to the compiled-in path.
            "-e".to_owned(),
            error_log.display().to_string(),
        ];
        let log = File::create(config.dir.join("nginx.out")).context("cannot create nginx.out")?;
        let command = format!("{} {}", binary.display(), args.join(" "));
        let child = Command::new(binary)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(
                log.try_clone().context("cannot reopen nginx.out")?,
            ))
            .stderr(Stdio::from(log))
            .spawn()
            .with_context(|| format!("cannot run `{command}`"))?;
        let mut nginx = Self {
            child,
            binary: binary.to_owned(),
            args,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            command,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if TcpStream::connect(nginx.addr).is_ok() {
                return Ok(nginx);
            }
            if let Some(status) = nginx.child.try_wait().context("cannot check on nginx")? {
                let log = [error_log.clone(), config.dir.join("nginx.out")]
                    .iter()
                    .filter_map(|path| std::fs::read_to_string(path).ok())
                    .collect::<String>();
                bail!("nginx exited ({status}) before serving: {}", log.trim());
            }
            if Instant::now() >= deadline {
                nginx.halt();
                bail!("nginx did not listen within {START_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Asks the master to stop (killing it would leave its workers behind), then reaps it,
    /// killing it if it does not go.
    fn halt(&mut self) {
        if matches!(self.child.try_wait(), Ok(Some(_))) {
            return;
        }
        let _ = Command::new(&self.binary)
            .args(&self.args)
            .args(["-s", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for NginxProcess {
    fn drop(&mut self) {
        self.halt();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_keeps_every_path_in_the_work_dir() {
        let config = Config {
            dir: PathBuf::from("/w/my \"dir\""),
            workers: 2,
            types: vec![(EXPORT_FILE, "text/csv".to_owned())],
        };
        let text = config.render(8080, false);
        assert!(text.contains("listen 127.0.0.1:8080 reuseport;"));
        assert!(text.contains("worker_processes 2;"));
        assert!(text.contains("location = /export.csv { default_type \"text/csv\"; }"));
        assert!(text.contains("root \"/w/my \\\"dir\\\"/www\";"));
        assert!(!text.contains("user "));
        for line in text.lines().filter(|line| line.contains("\"/")) {
            assert!(
                line.contains("\"/w/my"),
                "a path outside the work dir: {line}"
            );
        }
        assert!(config.render(1, true).contains("user root;"));
    }
}
