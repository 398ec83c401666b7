//! The harness: generated datasets ingested into temporary stores (SQLite files, or PostgreSQL
//! databases with `DATANODE_IT_BACKEND=postgres`), servers on loopback,
//! and a small blocking HTTP/1.1 client.
//!
//! The client is hand-written rather than hyper's because the tests need what a convenient
//! client hides: reading a response head and one chunk and then dropping the connection, seeing
//! chunk boundaries, and telling a chunked body that ended without its terminating chunk (an
//! aborted export) from a complete one.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use eventgen::{GenerateConfig, GenerateSummary};
use http_api::{App, AppConfig, ServeConfig};
use ingest::IngestOptions;
use storage::{Backend, ReadStore, SqliteBackend, SqliteConfig, Store, WriterOptions};
use storage_postgres::{PgBackend, PgConfig};
use testdb::TestDatabase;
use tokio::runtime::Runtime;
use tokio::sync::oneshot;

use crate::reference::Reference;

/// A generated stream, ingested into its own store, with the model of its answers.
pub struct Dataset {
    /// The first config of the stream (ids derive from its seed).
    pub config: GenerateConfig,
    /// What the generator wrote, over every config.
    pub summary: GenerateSummary,
    /// The model of the whole stream.
    pub reference: Reference,
    /// The stream as ingested so far.
    pub stream: Vec<u8>,
    /// The height after the last block: where a stream continuing it starts.
    pub end_height: u64,
    /// The store.
    pub store: Arc<dyn Store>,
    place: Place,
}

/// Where a dataset's store lives, removed on drop (after the store, declared before it).
enum Place {
    Sqlite(tempfile::TempDir),
    Postgres(TestDatabase),
}

/// The variable that runs the suite on PostgreSQL: `DATANODE_IT_BACKEND=postgres` (on the
/// server `DATANODE_TEST_PG` names, by default the local one); anything else, or nothing, is
/// SQLite.
const BACKEND_VAR: &str = "DATANODE_IT_BACKEND";

impl Place {
    fn new() -> Place {
        if std::env::var(BACKEND_VAR).as_deref() == Ok("postgres") {
            let db = TestDatabase::create("it")
                .unwrap_or_else(|| panic!("{BACKEND_VAR}=postgres, but DATANODE_TEST_PG=skip"));
            return Place::Postgres(db);
        }
        Place::Sqlite(tempfile::tempdir().expect("temp dir"))
    }

    fn sqlite_path(dir: &tempfile::TempDir) -> std::path::PathBuf {
        dir.path().join("e2e.sqlite")
    }

    /// The store's backend.
    fn backend(&self) -> Box<dyn Backend> {
        match self {
            Place::Sqlite(dir) => Box::new(SqliteBackend {
                path: Self::sqlite_path(dir),
                config: SqliteConfig::default(),
            }),
            Place::Postgres(db) => Box::new(PgBackend {
                url: db.url().to_owned(),
                config: PgConfig::default(),
            }),
        }
    }
}

impl Dataset {
    /// Generates `config`'s stream and ingests it into a fresh store.
    pub fn build(config: GenerateConfig) -> Dataset {
        let place = Place::new();
        // The writer first: on PostgreSQL it creates the schema that opening a store checks.
        drop(
            place
                .backend()
                .open_writer(&WriterOptions::default())
                .expect("open writer"),
        );
        let mut dataset = Dataset {
            config: config.clone(),
            summary: GenerateSummary::default(),
            reference: Reference::default(),
            stream: Vec::new(),
            end_height: config.start_height,
            store: place
                .backend()
                .open_store(PgConfig::default().max_connections as usize)
                .expect("open store"),
            place,
        };
        dataset.append(&config);
        dataset
    }

    /// Generates `config`'s stream, ingests it into the store and updates the model.
    pub fn append(&mut self, config: &GenerateConfig) {
        let stream = generate(config, &mut self.summary);
        let mut writer = self
            .place
            .backend()
            .open_writer(&WriterOptions::default())
            .expect("open writer");
        ingest::ingest(
            io::Cursor::new(stream.clone()),
            &mut *writer,
            &IngestOptions::default(),
            &mut |_| {},
        )
        .expect("ingest");
        self.stream.extend_from_slice(&stream);
        self.end_height = config.end_height();
        self.reference = Reference::from_ndjson(&self.stream);
    }

    /// Flips a bit in the middle of the lines of `party`'s first ledger segment, behind the
    /// store's back, its checksum left as it was.
    pub fn damage_ledger(&self, party: &str) {
        let row = match &self.place {
            Place::Sqlite(_) => format!(
                "rowid = (SELECT rowid FROM ledger_segments WHERE party = \
                 (SELECT id FROM parties WHERE hex = x'{party}') ORDER BY last_time LIMIT 1)"
            ),
            Place::Postgres(_) => format!(
                "(party, last_time) = (SELECT party, last_time FROM ledger_segments \
                 WHERE party = (SELECT id FROM parties WHERE hex = decode('{party}', 'hex')) \
                 ORDER BY last_time LIMIT 1)"
            ),
        };
        self.flip_a_bit("ledger_segments", "csv", &row);
    }

    /// Flips a bit in the middle of the newest oracle datum as stored for the listing of all
    /// data: the newest segment of all data, on both backends.
    pub fn damage_newest_oracle_data(&self) {
        self.flip_a_bit(
            "oracle_segments",
            "json",
            "spec = 0 AND last_time = (SELECT max(last_time) FROM oracle_segments \
             WHERE spec = 0)",
        );
    }

    /// Flips a bit in the middle of the blob `column` of the one row of `table` that `row`
    /// selects.
    fn flip_a_bit(&self, table: &str, column: &str, row: &str) {
        let select = format!("SELECT {column} FROM {table} WHERE {row}");
        let update =
            |placeholder: &str| format!("UPDATE {table} SET {column} = {placeholder} WHERE {row}");
        let flip = |mut bytes: Vec<u8>| {
            let middle = bytes.len() / 2;
            bytes[middle] ^= 0x04;
            bytes
        };
        let changed = match &self.place {
            Place::Sqlite(dir) => {
                let conn = rusqlite::Connection::open(Place::sqlite_path(dir)).expect("open");
                let bytes: Vec<u8> = conn.query_row(&select, [], |row| row.get(0)).expect("read");
                conn.execute(&update("?1"), [flip(bytes)]).expect("damage") as u64
            }
            Place::Postgres(db) => {
                let mut client = db.client();
                let bytes: Vec<u8> = client.query_one(&select, &[]).expect("read").get(0);
                client
                    .execute(&update("$1"), &[&flip(bytes)])
                    .expect("damage")
            }
        };
        assert_eq!(changed, 1, "{select}");
    }

    /// The vega time of the last block.
    pub fn last_time(&self) -> i64 {
        let entries = self.reference.entries.iter().map(|entry| entry.key.0);
        let data = self.reference.oracle.iter().map(|datum| datum.key.0);
        entries.chain(data).max().expect("the stream is not empty")
    }
}

fn generate(config: &GenerateConfig, summary: &mut GenerateSummary) -> Vec<u8> {
    let mut stream = Vec::new();
    let written = eventgen::generate(config, &mut stream).expect("generate");
    summary.events += written.events;
    summary.blocks += written.blocks;
    summary.ledger_entries += written.ledger_entries;
    summary.oracle_data += written.oracle_data;
    summary.other_events += written.other_events;
    stream
}

/// The runtime every server runs on: two workers, like the machine the tests run on.
fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime")
    })
}

/// `http_api::serve` on a loopback port; shuts down when dropped.
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Server {
    /// Binds `127.0.0.1:0` first, then spawns the server on that listener: it accepts as soon
    /// as this returns, with no waiting.
    pub fn start(store: Arc<dyn ReadStore>, config: AppConfig) -> Server {
        Self::start_with(store, config, ServeConfig::default())
    }

    /// [`Server::start`] with connection limits and timeouts of the test's choosing.
    pub fn start_with(store: Arc<dyn ReadStore>, config: AppConfig, serve: ServeConfig) -> Server {
        Self::start_app(App::new(store, config), serve)
    }

    /// [`Server::start`] with a service of the test's making (e.g. with its own clock).
    pub fn start_app(app: App, serve: ServeConfig) -> Server {
        let runtime = runtime();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let (shutdown, stop) = oneshot::channel::<()>();
        let task = runtime.spawn(http_api::serve(listener, app, serve, async move {
            let _ = stop.await;
        }));
        Server {
            addr,
            shutdown: Some(shutdown),
            task: Some(task),
        }
    }

    /// Begins the graceful shutdown without waiting for it.
    pub fn begin_shutdown(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }

    /// Waits up to `timeout` for `serve` to return after [`Server::begin_shutdown`]; true when
    /// it did.
    pub fn wait_stopped(&mut self, timeout: Duration) -> bool {
        let Some(task) = self.task.take() else {
            return true;
        };
        runtime().block_on(async { tokio::time::timeout(timeout, task).await.is_ok() })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.begin_shutdown();
    }
}

/// A dataset and a server over it with the default config, shared by the tests that only read.
pub struct Shared {
    /// The data.
    pub dataset: Dataset,
    /// The server.
    pub server: Server,
}

impl Shared {
    fn new(config: GenerateConfig) -> Shared {
        let dataset = Dataset::build(config);
        let server = Server::start(dataset.store.clone(), AppConfig::default());
        Shared { dataset, server }
    }

    /// The model.
    pub fn reference(&self) -> &Reference {
        &self.dataset.reference
    }

    /// `GET target`, read to the end.
    pub fn get(&self, target: &str) -> Response {
        get(self.server.addr, target, &[])
    }
}

/// Several parties, assets, markets and specs, and more than 1000 oracle data.
pub fn mixed() -> &'static Shared {
    static MIXED: OnceLock<Shared> = OnceLock::new();
    MIXED.get_or_init(|| Shared::new(mixed_config()))
}

/// The config of [`mixed`].
pub fn mixed_config() -> GenerateConfig {
    GenerateConfig {
        seed: 11,
        blocks: 240,
        parties: 6,
        assets: 3,
        markets: 4,
        specs: 5,
        entries_per_block: 8,
        oracle_data_per_block: 5,
        ..GenerateConfig::default()
    }
}

/// One party (the whale, party 0) in most entries: an export of about 48,000 rows (16 MB),
/// more than the socket and channel buffers hold, so that an export whose client reads nothing
/// stalls (stored segments make it fast enough to finish into 5 MB of buffers).
pub fn whale() -> &'static Shared {
    static WHALE: OnceLock<Shared> = OnceLock::new();
    WHALE.get_or_init(|| {
        Shared::new(GenerateConfig {
            seed: 2024,
            blocks: 600,
            parties: 5,
            assets: 2,
            markets: 3,
            specs: 3,
            entries_per_block: 100,
            oracle_data_per_block: 1,
            whale_share: 0.8,
            start_height: 7_000_000,
            start_time_nanos: 1_700_000_000_000_000_000,
            ..GenerateConfig::DEFAULT
        })
    })
}

/// A whole response.
#[derive(Debug)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Header names (lowercase) and values, in order.
    pub headers: Vec<(String, String)>,
    /// The decoded body.
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// The body as text.
    pub fn text(&self) -> &str {
        std::str::from_utf8(&self.body).expect("the body is UTF-8")
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|err| panic!("body is not JSON ({err}): {}", self.text()))
    }
}

fn header<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(key, _)| key.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.as_str())
}

/// `GET target` with extra request headers, read to the end; panics on any transport error,
/// including a chunked body cut short.
#[track_caller]
pub fn get(addr: SocketAddr, target: &str, headers: &[(&str, &str)]) -> Response {
    request(addr, "GET", target, headers)
        .and_then(Exchange::finish)
        .unwrap_or_else(|err| panic!("GET {target}: {err}"))
}

/// How the rest of a body is framed.
#[derive(Debug)]
enum Framing {
    Chunked,
    Length(usize),
    UntilClose,
    Done,
}

/// A response whose head was read and whose body is read on demand.
pub struct Exchange {
    reader: BufReader<TcpStream>,
    /// Status code.
    pub status: u16,
    /// Header names and values, in order.
    pub headers: Vec<(String, String)>,
    framing: Framing,
}

/// Sends one request (`Connection: close`) and reads the response head.
pub fn request(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
) -> io::Result<Exchange> {
    let stream = TcpStream::connect(addr)?;
    // A server that stops answering fails the test instead of hanging it.
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut head = format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    (&stream).write_all(head.as_bytes())?;
    let mut reader = BufReader::new(stream);

    let status_line = read_line(&mut reader)?;
    let status = status_line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| invalid(format!("bad status line {status_line:?}")))?;
    let mut response_headers = Vec::new();
    loop {
        let line = read_line(&mut reader)?;
        if line.is_empty() {
            break;
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| invalid(format!("bad header line {line:?}")))?;
        response_headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let framing = if header(&response_headers, "transfer-encoding")
        .is_some_and(|value| value.eq_ignore_ascii_case("chunked"))
    {
        Framing::Chunked
    } else if let Some(length) = header(&response_headers, "content-length") {
        Framing::Length(
            length
                .parse()
                .map_err(|_| invalid(format!("bad content-length {length:?}")))?,
        )
    } else {
        Framing::UntilClose
    };
    Ok(Exchange {
        reader,
        status,
        headers: response_headers,
        framing,
    })
}

impl Exchange {
    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// Whether the body is chunked.
    pub fn is_chunked(&self) -> bool {
        matches!(self.framing, Framing::Chunked)
    }

    /// The next piece of the body (one chunk of a chunked body, else the rest of it); `None`
    /// at its end. A chunked body that stops before its terminating chunk is an error.
    pub fn next_chunk(&mut self) -> io::Result<Option<Vec<u8>>> {
        match self.framing {
            Framing::Done => Ok(None),
            Framing::Length(length) => {
                let mut body = vec![0; length];
                self.reader.read_exact(&mut body)?;
                self.framing = Framing::Done;
                Ok(Some(body))
            }
            Framing::UntilClose => {
                let mut body = Vec::new();
                self.reader.read_to_end(&mut body)?;
                self.framing = Framing::Done;
                Ok(Some(body))
            }
            Framing::Chunked => {
                let line = read_line(&mut self.reader)?;
                let size = line.split(';').next().unwrap_or_default().trim();
                let size = usize::from_str_radix(size, 16)
                    .map_err(|_| invalid(format!("bad chunk size line {line:?}")))?;
                if size == 0 {
                    // Trailers, then the empty line that ends the body.
                    while !read_line(&mut self.reader)?.is_empty() {}
                    self.framing = Framing::Done;
                    return Ok(None);
                }
                let mut chunk = vec![0; size];
                self.reader.read_exact(&mut chunk)?;
                let mut crlf = [0; 2];
                self.reader.read_exact(&mut crlf)?;
                if &crlf != b"\r\n" {
                    return Err(invalid("chunk not followed by CRLF".into()));
                }
                Ok(Some(chunk))
            }
        }
    }

    /// Reads the rest of the body.
    pub fn finish(mut self) -> io::Result<Response> {
        let mut body = Vec::new();
        while let Some(chunk) = self.next_chunk()? {
            body.extend_from_slice(&chunk);
        }
        Ok(Response {
            status: self.status,
            headers: self.headers,
            body,
        })
    }
}

/// One CRLF-terminated line without its CRLF; the connection closing first is an error.
fn read_line(reader: &mut impl BufRead) -> io::Result<String> {
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line)?;
    if !line.ends_with(b"\r\n") {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed in the middle of the response",
        ));
    }
    line.truncate(line.len() - 2);
    String::from_utf8(line).map_err(|_| invalid("line is not UTF-8".into()))
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// The client itself is under test here: the export tests rely on it to tell an aborted body
/// from a whole one.
#[test]
fn client_rejects_a_chunked_body_without_its_terminating_chunk() {
    #[track_caller]
    fn check(raw_response: &'static str, expected: Result<&str, io::ErrorKind>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let peer = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().expect("accept");
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            while !read_line(&mut reader).expect("request").is_empty() {}
            stream.write_all(raw_response.as_bytes()).expect("write");
        });
        let got = request(addr, "GET", "/", &[]).and_then(Exchange::finish);
        peer.join().expect("peer");
        match (got, expected) {
            (Ok(response), Ok(body)) => assert_eq!(response.text(), body),
            (Err(err), Err(kind)) => assert_eq!(err.kind(), kind, "{err}"),
            (got, expected) => panic!("got {got:?}, expected {expected:?}"),
        }
    }

    check(
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        Ok("abcde"),
    );
    check(
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n",
        Err(io::ErrorKind::UnexpectedEof),
    );
    check(
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nab",
        Err(io::ErrorKind::UnexpectedEof),
    );
    check(
        "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n",
        Err(io::ErrorKind::UnexpectedEof),
    );
    check(
        "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nab",
        Err(io::ErrorKind::UnexpectedEof),
    );
    check("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nab", Ok("ab"));
}
