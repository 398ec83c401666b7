//! The one place that knows which storage backend a `--db` names: a path is an SQLite file, a
//! `postgres://` or `postgresql://` URL a PostgreSQL database ([`backend`]). Everything else sees
//! only a [`Backend`], the [`Store`] it opens and a boxed [`IngestWriter`].

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use eventgen::GenerateConfig;
use ingest::IngestOptions;
use ledger_core::{ExportFilter, VegaTime};
use oracle_core::PageRequest;
use storage::{
    Backend, BlockTime, ChainState, ExportSink, IngestWriter, SqliteBackend, SqliteConfig,
    SqliteStore, Store, WriterOptions, is_url,
};

/// The database used when `--db` is not given.
pub const DEFAULT_DB: &str = "datanode.sqlite";

/// The database `--db` names, or the default SQLite file: the one choice of backend.
pub fn backend(db: Option<&str>) -> Result<Box<dyn Backend>> {
    match db {
        Some(url) if is_url(url) => postgres(url, None),
        path => Ok(Box::new(SqliteBackend {
            path: PathBuf::from(path.unwrap_or(DEFAULT_DB)),
            config: SqliteConfig::default(),
        })),
    }
}

/// The PostgreSQL database `--db` names, whose `migrate` makes `partitions` hash partitions of
/// each table of segments (`server migrate --partitions`): SQLite has no partitions.
pub fn partitioned(db: Option<&str>, partitions: u32) -> Result<Box<dyn Backend>> {
    match db {
        Some(url) if is_url(url) => postgres(url, Some(partitions)),
        _ => anyhow::bail!(
            "--partitions applies to PostgreSQL databases only (--db postgres://…): SQLite's \
             tables are not partitioned"
        ),
    }
}

/// A PostgreSQL database, and the partitions its `migrate` makes.
#[cfg(feature = "postgres")]
fn postgres(url: &str, partitions: Option<u32>) -> Result<Box<dyn Backend>> {
    Ok(Box::new(storage_postgres::PgBackend {
        url: url.to_owned(),
        config: storage_postgres::PgConfig {
            partitions,
            ..Default::default()
        },
    }))
}

/// The refusal of a PostgreSQL URL by a build without the backend.
#[cfg(not(feature = "postgres"))]
fn postgres(url: &str, _: Option<u32>) -> Result<Box<dyn Backend>> {
    anyhow::bail!(
        "{}: this build has no PostgreSQL support: build the server with the postgres feature",
        storage::redact(url)
    )
}

/// Opens the store to serve. SQLite creates or migrates its file; PostgreSQL only reads and
/// refuses a database without our schema. `max_readers`, the reads allowed at once (export
/// permits plus page slots), sizes the PostgreSQL pool.
pub fn open_store(db: &dyn Backend, max_readers: usize) -> Result<Arc<dyn Store>> {
    db.open_store(max_readers)
        .with_context(|| format!("cannot open the database {}", db.describe()))
}

/// Refuses a database that is not there: the operator's commands read one, never create it.
fn ensure_exists(db: &dyn Backend) -> Result<()> {
    anyhow::ensure!(db.exists(), "there is no database at {}", db.describe());
    Ok(())
}

/// Opens an existing store to read through it once (`check`): one reader at a time.
fn open_existing(db: &dyn Backend) -> Result<Arc<dyn Store>> {
    ensure_exists(db)?;
    open_store(db, 1)
}

/// Opens the store's single writer, migrating the schema first.
pub fn open_writer(db: &dyn Backend, options: &WriterOptions) -> Result<Box<dyn IngestWriter>> {
    db.open_writer(options)
        .with_context(|| format!("cannot open the database {} to write", db.describe()))
}

/// Creates or upgrades the schema; returns a line saying what was done.
pub fn migrate(db: &dyn Backend) -> Result<String> {
    let migrated = db
        .migrate()
        .with_context(|| format!("cannot migrate the database {}", db.describe()))?;
    Ok(migrated.to_string())
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
pub fn check(db: &dyn Backend) -> Result<String> {
    let store = open_existing(db)?;
    let read = || -> Result<String> {
        store.check()?;
        let examples = store.examples()?;
        let params = oracle_core::PaginationParams {
            first: Some("100"),
            ..Default::default()
        };
        let request = PageRequest::parse(&params)?;
        let page = store.oracle_page(None, &request)?;
        let mut rows = Count::default();
        if let Some(party) = &examples.party {
            let filter = ExportFilter {
                party: party
                    .parse()
                    .with_context(|| format!("the stored party id {party} is damaged"))?,
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

/// `server backup`: copies the database as of one commit into the new file `out`, while it is
/// served and written (SQLite); a PostgreSQL database is refused, naming its own tools.
pub fn backup(db: &dyn Backend, out: &Path) -> Result<String> {
    ensure_exists(db)?;
    let chain = db
        .backup(out)
        .with_context(|| format!("cannot back up {} into {}", db.describe(), out.display()))?;
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
pub fn check_deep(db: &dyn Backend) -> Result<String> {
    let store = open_existing(db)?;
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
