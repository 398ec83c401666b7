//! `--db postgres://…`: the same measurements against PostgreSQL, beside SQLite's.
//!
//! The URL names a server and a database to connect to for administration; the bench works in
//! a database of its own on that server, [`BENCH_DATABASE`], which it creates, fills with the real
//! `server ingest --db URL` and reuses on the next run with the same dataset and server binary
//! (as it reuses the SQLite file). `<dir>/postgres.json` records that ingest.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use postgres::{Client, NoTls};
use serde::{Deserialize, Serialize};

use crate::dataset::{self, IngestRecord, Ingested, Manifest};
use crate::process;

/// The database the bench owns on the server `--db` names.
pub(crate) const BENCH_DATABASE: &str = "datanode_bench";

/// The PostgreSQL database of a run: where to administer it and what to serve.
pub(crate) struct PgTarget {
    admin_url: String,
    /// The database the bench owns there.
    database: String,
    /// The bench database's URL, for `server ingest` and `server serve`.
    pub(crate) url: String,
}

impl PgTarget {
    pub(crate) fn new(admin_url: &str) -> Result<Self> {
        Self::named(admin_url, BENCH_DATABASE)
    }

    /// The database `database` on the server `admin_url` names.
    pub(crate) fn named(admin_url: &str, database: &str) -> Result<Self> {
        anyhow::ensure!(
            storage::is_url(admin_url),
            "--db takes a postgres:// or postgresql:// URL, got {}",
            storage::redact(admin_url)
        );
        Ok(Self {
            admin_url: admin_url.to_owned(),
            database: database.to_owned(),
            url: testdb::with_database(admin_url, database),
        })
    }

    pub(crate) fn admin(&self) -> Result<Client> {
        Client::connect(&self.admin_url, NoTls)
            .with_context(|| format!("cannot connect to {}", storage::redact(&self.admin_url)))
    }

    fn exists(&self, admin: &mut Client) -> Result<bool> {
        let row = admin
            .query_one(
                "SELECT count(*) FROM pg_database WHERE datname = $1",
                &[&self.database],
            )
            .context("cannot list the databases")?;
        Ok(row.get::<_, i64>(0) > 0)
    }

    /// Drops the bench database (with its connections) and creates it empty: two statements,
    /// as neither may run inside a transaction block.
    pub(crate) fn recreate(&self, admin: &mut Client) -> Result<()> {
        self.drop_database(admin)?;
        let database = &self.database;
        admin
            .batch_execute(&format!("CREATE DATABASE {database}"))
            .with_context(|| format!("cannot create the database {database}"))
    }

    /// Drops the bench database, with its connections.
    pub(crate) fn drop_database(&self, admin: &mut Client) -> Result<()> {
        let database = &self.database;
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"))
            .with_context(|| format!("cannot drop the database {database}"))
    }

    /// Brings the bench database, just ingested, to the state a server meets once a bulk load
    /// has settled: `VACUUM (ANALYZE)` of every table, then a `CHECKPOINT` of what that wrote.
    /// With autovacuum on (PostgreSQL's default, and what the README asks of operators) the
    /// database gets there by itself, at a time nobody chooses, possibly while the reads are
    /// timed; with it off (as on this project's test servers) it never does: no statistics, no
    /// visibility map, the ingest's dead versions left in place. Either way the reads would not
    /// be those of a settled database. Answers how long it took: part of what a bulk load
    /// costs an operator.
    pub(crate) fn settle(&self) -> Result<Duration> {
        let start = Instant::now();
        let database = &self.database;
        let mut client = Client::connect(&self.url, NoTls)
            .with_context(|| format!("cannot connect to the database {database}"))?;
        client
            .batch_execute("VACUUM (ANALYZE)")
            .with_context(|| format!("cannot vacuum the database {database}"))?;
        client
            .batch_execute("CHECKPOINT")
            .with_context(|| format!("cannot checkpoint the database {database}"))?;
        Ok(start.elapsed())
    }

    /// The bench database's size on disk.
    pub(crate) fn size(&self, admin: &mut Client) -> Result<u64> {
        let row = admin
            .query_one("SELECT pg_database_size($1)", &[&self.database])
            .context("cannot size the bench database")?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }
}

/// The PostgreSQL ingest of a dataset, kept in `<dir>/postgres.json`.
#[derive(Serialize, Deserialize)]
struct PgManifest {
    /// The bench database's URL, without its password.
    database: String,
    /// The dataset's generation time, which tells one dataset from its regeneration.
    dataset_generated_secs: f64,
    ingest: IngestRecord,
}

fn manifest_path(dir: &Path) -> PathBuf {
    dir.join("postgres.json")
}

/// Ingests the dataset into the bench database unless an earlier run's can be reused: same
/// dataset, same database, same server binary, database still there. `manifest` is the
/// dataset's (SQLite's); the returned one carries the PostgreSQL ingest instead.
pub(crate) fn ingest_step(
    dir: &Path,
    server: &Path,
    target: &PgTarget,
    manifest: &Manifest,
    dataset_reused: bool,
    reingest: bool,
) -> Result<Ingested> {
    let fingerprint = process::fingerprint(server)?;
    let database = storage::redact(&target.url);
    let mut admin = target.admin()?;
    let earlier: Option<PgManifest> = std::fs::read(manifest_path(dir))
        .ok()
        .and_then(|text| serde_json::from_slice(&text).ok());
    let mut manifest = manifest.clone();
    if dataset_reused
        && !reingest
        && let Some(earlier) = earlier
        && earlier.database == database
        && earlier.dataset_generated_secs == manifest.generated.seconds
        && earlier.ingest.server_fingerprint == fingerprint
        && target.exists(&mut admin)?
    {
        eprintln!(
            "bench: reusing the PostgreSQL database ingested at {} (--reingest to measure again)",
            earlier.ingest.measured_at
        );
        manifest.ingest = Some(earlier.ingest);
        return Ok(Ingested {
            manifest,
            dataset_reused,
            ingest_reused: true,
        });
    }
    let _ = std::fs::remove_file(manifest_path(dir));
    target.recreate(&mut admin)?;
    eprintln!(
        "bench: ingesting {} ledger entries into {database}",
        manifest.generated.ledger_entries
    );
    let mut run = process::run_ingest(
        server,
        OsStr::new(&target.url),
        &dataset::events_path(dir, manifest.generated.format),
        dir,
    )?;
    // A URL's password stays out of the results.
    run.command = run.command.replace(&target.url, &database);
    let record = IngestRecord::from_run(
        &run,
        &manifest.generated,
        target.size(&mut admin)?,
        fingerprint,
    );
    let settled = target.settle()?;
    eprintln!(
        "bench: vacuumed and checkpointed in {:.1} s",
        settled.as_secs_f64()
    );
    let saved = PgManifest {
        database,
        dataset_generated_secs: manifest.generated.seconds,
        ingest: record.clone(),
    };
    let path = manifest_path(dir);
    let json = serde_json::to_vec_pretty(&saved).context("cannot encode the manifest")?;
    std::fs::write(&path, json).with_context(|| format!("cannot write {}", path.display()))?;
    manifest.ingest = Some(record);
    Ok(Ingested {
        manifest,
        dataset_reused,
        ingest_reused: false,
    })
}
