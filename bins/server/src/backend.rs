//! The one place that knows which storage backend a `--db` names: a path is an SQLite file, a
//! `postgres://` or `postgresql://` URL a PostgreSQL database. `serve.rs` and `ingest.rs` see
//! only [`AnyStore`] and a boxed [`IngestWriter`].

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use eventgen::GenerateConfig;
use ingest::IngestOptions;
use ledger_core::{ExportFilter, VegaTime};
use oracle_core::PageRequest;
use storage::{
    AnyStore, BlockTime, ChainState, ExportSink, Health, IngestWriter, LedgerStore, OracleStore,
    SqliteConfig, SqliteStore, is_url, redact,
};
#[cfg(feature = "postgres")]
use storage::{PgConfig, PgStore};

/// The database used when `--db` is not given.
pub const DEFAULT_DB: &str = "datanode.sqlite";

/// The refusal of a PostgreSQL URL by a build without the backend.
#[cfg(not(feature = "postgres"))]
fn no_postgres() -> storage::Error {
    storage::Error::Incompatible(
        "this build has no PostgreSQL support: build the server with the postgres feature".into(),
    )
}

/// The database a command works on.
#[derive(Clone, Debug)]
pub enum Db {
    /// An SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL connection URL (may hold a password: log [`Db::describe`] only).
    Postgres(String),
}

impl Db {
    /// The database `--db` names, or the default SQLite file.
    pub fn from_flag(db: Option<String>) -> Db {
        match db {
            Some(url) if is_url(&url) => Db::Postgres(url),
            Some(path) => Db::Sqlite(PathBuf::from(path)),
            None => Db::Sqlite(PathBuf::from(DEFAULT_DB)),
        }
    }

    /// What to call the database in messages and logs: the path, or the URL without its
    /// password.
    pub fn describe(&self) -> String {
        match self {
            Db::Sqlite(path) => path.display().to_string(),
            Db::Postgres(url) => redact(url),
        }
    }

    /// Opens the store to serve. SQLite creates or migrates its file; PostgreSQL only reads and
    /// refuses a database without our schema. `max_readers`, the reads allowed at once (export
    /// permits plus page slots), sizes the PostgreSQL pool.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub fn open_to_serve(&self, max_readers: usize) -> Result<AnyStore> {
        let store = match self {
            Db::Sqlite(path) => {
                SqliteStore::open(path, SqliteConfig::default()).map(AnyStore::Sqlite)
            }
            #[cfg(not(feature = "postgres"))]
            Db::Postgres(_) => Err(no_postgres()),
            #[cfg(feature = "postgres")]
            Db::Postgres(url) => {
                let config = PgConfig {
                    max_connections: u32::try_from(max_readers).unwrap_or(u32::MAX),
                    ..PgConfig::default()
                };
                PgStore::open(url, config).map(AnyStore::Postgres)
            }
        };
        store.with_context(|| format!("cannot open the database {}", self.describe()))
    }

    /// Opens the store's single writer, migrating the schema first.
    pub fn open_writer(&self) -> Result<Box<dyn IngestWriter>> {
        let writer: Result<Box<dyn IngestWriter>, storage::Error> = match self {
            Db::Sqlite(path) => SqliteStore::open(path, SqliteConfig::default())
                .and_then(|store| store.writer())
                .map(|writer| Box::new(writer) as Box<dyn IngestWriter>),
            #[cfg(not(feature = "postgres"))]
            Db::Postgres(_) => Err(no_postgres()),
            #[cfg(feature = "postgres")]
            Db::Postgres(url) => {
                PgStore::writer(url).map(|writer| Box::new(writer) as Box<dyn IngestWriter>)
            }
        };
        writer.with_context(|| format!("cannot open the database {} to write", self.describe()))
    }

    /// Creates or upgrades the schema; returns a line saying what was done.
    pub fn migrate(&self) -> Result<String> {
        let done = match self {
            Db::Sqlite(path) => SqliteStore::migrate(path).map(|()| "schema up to date".to_owned()),
            #[cfg(not(feature = "postgres"))]
            Db::Postgres(_) => Err(no_postgres()),
            #[cfg(feature = "postgres")]
            Db::Postgres(url) => PgStore::migrate(url).map(|migrated| {
                if migrated.from == migrated.to {
                    format!("schema up to date (version {})", migrated.to)
                } else {
                    format!(
                        "schema migrated from version {} to {}",
                        migrated.from, migrated.to
                    )
                }
            }),
        };
        done.with_context(|| format!("cannot migrate the database {}", self.describe()))
    }
}

/// Counts an export's rows and throws them away.
#[derive(Default)]
struct Count(u64);

impl ExportSink for Count {
    fn started(&mut self) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }

    fn rows(&mut self, _csv_lines: &[u8], count: u64) -> ControlFlow<()> {
        self.0 += count;
        ControlFlow::Continue(())
    }
}

/// `server check`: opens the store as `serve` does (schema version and row format checked) and
/// reads through it: the health check, a page of oracle data, and the whole export of the
/// example party. Returns lines saying what was read, then the chain and the stored heights.
pub fn check(db: &Db) -> Result<String> {
    if let Db::Sqlite(path) = db {
        anyhow::ensure!(path.exists(), "there is no database at {}", path.display());
    }
    let store = db.open_to_serve(1)?;
    let read = || -> Result<String, storage::Error> {
        store.check()?;
        let examples = store.examples()?;
        let params = oracle_core::PaginationParams {
            first: Some("100"),
            ..Default::default()
        };
        let request = PageRequest::parse(&params)
            .map_err(|err| storage::Error::Internal(err.to_string().into()))?;
        let page = store.oracle_page(None, &request)?;
        let mut rows = Count::default();
        if let Some(party) = &examples.party {
            let filter = ExportFilter {
                party: party
                    .parse()
                    .map_err(|_| storage::Damage::Value(format!("stored party id {party}")))?,
                asset: None,
                range: ledger_core::TimeRange::default(),
            };
            store.export_ledger(&filter, &mut rows)?;
        }
        let chain = store.chain()?;
        Ok(format!(
            "ok: schema and row format {} current; read {} oracle data and {} ledger rows\n{}",
            storage::ROW_FORMAT,
            page.page.edges.len(),
            rows.0,
            describe_chain(&chain)
        ))
    };
    read().with_context(|| format!("check of {} failed", db.describe()))
}

/// `server backup`: copies an SQLite database as of one commit into the new file `out`, while
/// it is served and written. A PostgreSQL database is refused: its own tools back it up (see
/// README, Backups) consistently and incrementally, which a copy through this program could not.
pub fn backup(db: &Db, out: &Path) -> Result<String> {
    let path = match db {
        Db::Sqlite(path) => path,
        Db::Postgres(_) => anyhow::bail!(
            "server backup copies SQLite files only: back up a PostgreSQL database with \
             PostgreSQL's tools, `pg_dump --format=custom` of the database (a logical copy) or a \
             base backup (`pg_basebackup`) with WAL archiving, as README's Backups describes"
        ),
    };
    anyhow::ensure!(path.exists(), "there is no database at {}", path.display());
    let store = SqliteStore::open(path, SqliteConfig::default())
        .with_context(|| format!("cannot open the database {}", db.describe()))?;
    let chain = store
        .backup(out)
        .with_context(|| format!("cannot back up {} into {}", path.display(), out.display()))?;
    Ok(format!(
        "copied as of one commit into {}\n{}",
        out.display(),
        describe_chain(&chain)
    ))
}

/// How many units `check --deep` reads between two progress lines.
const PROGRESS_EVERY: u64 = 10_000;

/// `server check --deep`: opens the store as `serve` does and reads and verifies every stored
/// unit, printing each damaged one with what it affects; fails when anything is damaged.
/// Progress goes to standard error.
pub fn check_deep(db: &Db) -> Result<String> {
    if let Db::Sqlite(path) = db {
        anyhow::ensure!(path.exists(), "there is no database at {}", path.display());
    }
    let store = db.open_to_serve(1)?;
    let mut progress = |at: storage::ScrubProgress| {
        if at.done.is_multiple_of(PROGRESS_EVERY) || at.done == at.total {
            eprintln!("check --deep: {} of {} units read", at.done, at.total);
        }
    };
    let scrub = store
        .scrub(&mut progress)
        .with_context(|| format!("deep check of {} failed", db.describe()))?;
    for finding in &scrub.findings {
        let place = finding
            .place
            .as_ref()
            .map_or_else(|| "the store".to_owned(), ToString::to_string);
        println!(
            "damaged: {place}: {}; affects {}",
            finding.damage, finding.affects
        );
    }
    let chain = store.chain()?;
    anyhow::ensure!(
        scrub.findings.is_empty(),
        "deep check of {}: {} of {} units read are damaged (listed above); serve a backup or \
         re-ingest the event stream into a new database",
        db.describe(),
        scrub.findings.len(),
        scrub.units
    );
    Ok(format!(
        "ok: deep check read and verified {} units, none damaged\n{}",
        scrub.units,
        describe_chain(&chain)
    ))
}

/// Where the stored data start and end, for operators: the chain id, and the first and last
/// stored heights with their block times (Vega's `datanode last-block` tells the height from
/// which to restart a core).
fn describe_chain(chain: &ChainState) -> String {
    let block = |block: Option<BlockTime>| match block {
        None => "none".to_owned(),
        Some(BlockTime {
            height,
            vega_time: Some(nanos),
        }) => format!("{height} at {} ({nanos} ns)", VegaTime::from_nanos(nanos)),
        Some(BlockTime { height, .. }) => format!("{height} (no block time)"),
    };
    format!(
        "chain id: {}\nfirst block: {}\nlast block: {}",
        chain.chain_id.as_deref().unwrap_or("none recorded"),
        block(chain.first),
        block(chain.last)
    )
}

/// Fills a new SQLite database at `path` with the built-in demo dataset, all or nothing (see
/// [`SqliteStore::create_new`]).
pub fn create_demo(path: &Path) -> Result<()> {
    tracing::info!(db = %path.display(), "creating a demo database");
    let started = Instant::now();
    let mut events = Vec::new();
    eventgen::generate(&GenerateConfig::DEFAULT, &mut events)
        .context("cannot generate demo data")?;
    let stats = SqliteStore::create_new(path, SqliteConfig::default(), |store| {
        let mut writer = store.writer()?;
        ingest::ingest(
            std::io::Cursor::new(events),
            &mut writer,
            &IngestOptions::default(),
            &mut |_| {},
        )
        .map_err(anyhow::Error::from)
    })
    .with_context(|| format!("cannot create {}", path.display()))?;
    tracing::info!(
        entries = stats.ledger_entries,
        oracle_data = stats.oracle_data,
        elapsed = ?started.elapsed(),
        "demo database ready"
    );
    Ok(())
}
