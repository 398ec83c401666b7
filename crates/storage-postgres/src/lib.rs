//! The PostgreSQL backend: the same layout and queries as SQLite, for many servers over one

// Tests may unwrap (STYLE.md); the library itself is still linted without `cfg(test)`.
#![cfg_attr(test, allow(clippy::unwrap_used))]
//! database.
//!
//! Layout (see `schema.rs`): dictionaries turn 32-byte ids into small integers;
//! `ledger_segments` holds each party's finished CSV lines, across all its assets in the total
//! order, in segments of about 256 KiB (`storage::segment`) keyed by (party, last line's key), so
//! an export is one ordered range scan of the primary key that sends whole segments
//! (`export.rs`) and an ingest rewrites the few segments a batch touches (`segments.rs`);
//! both blobs of a segment are stored LZ4-compressed (`packed.rs`), so the wire carries a
//! quarter of the bytes; `oracle_segments` holds the oracle data the same way (schema 5): under
//! spec 0 every datum and under each spec the data that matched it, each datum's JSON a line,
//! about 16 KiB of JSON a segment, found by its last key (ascending pages) or its first
//! (descending pages), so a page is one keyset range scan that returns only the segments holding
//! its rows and never an `OFFSET` (`oracle.rs`). `blocks` records each block by (height,
//! `seq_base`) with its hash, and `schema_info` the chain id. From schema 8 both tables of
//! segments are hash-partitioned by owner (`DEFAULT_PARTITIONS` each, or as `server migrate
//! --partitions` chose), so every read and write touches its owners' partitions alone; a page
//! reads its spec's partition by name, an export its party's. `query_plans.rs` pins the plans.
//!
//! Concurrency: readers ([`PgStore`]) take connections from a bounded pool and read with single
//! statements in autocommit (each one snapshot: most pages, and each chunk of an export) or
//! inside `REPEATABLE READ READ ONLY` transactions, so they work with a read-only role and on a
//! hot standby, and never write. The single writer ([`PgWriter`]) holds a session advisory lock for
//! as long as it lives, and commits whole blocks with `COPY` in one transaction each
//! (`ingest.rs`).

mod export;
mod ingest;
mod oracle;
mod packed;
#[cfg(test)]
mod query_plans;
mod schema;
mod scrub;
mod segments;
#[cfg(test)]
mod tests;
mod tip;
mod tls;

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use postgres::{Client, Config, GenericClient, NoTls, Statement};

pub use ingest::PgWriter;
pub use schema::{BLOCKS_PER_PARTITION, DEFAULT_PARTITIONS, MAX_PARTITIONS};
use storage::backend::Migrated;
use storage::segment::{self, SegmentRef};
use storage::{
    Backend, ChainState, ChainTip, Damage, Error, Examples, Health, Incompatible, IngestWriter,
    Scrub, ScrubProgress, Store, Upgrade, WriterOptions, redact,
};

/// Tuning of a [`PgStore`].
#[derive(Clone, Debug)]
pub struct PgConfig {
    /// Connections the pool may hold at once: every export and every page holds one for as
    /// long as it reads, so this bounds the database load of one server. The store's tip
    /// thread holds one more, outside the pool, to listen for the writer's announcements
    /// (`tip.rs`).
    pub max_connections: u32,
    /// How long a read waits for a pooled connection, and a new connection for the database,
    /// before it fails as [`Error::Unavailable`].
    pub wait: Duration,
    /// The most bytes of stored (compressed) segments an export reads in one snapshot, give or
    /// take one segment: it holds them in memory, and its snapshot lasts as long as the
    /// database takes to send them, whatever the client's speed (see `export.rs`). The default,
    /// [`EXPORT_CHUNK_BYTES`], is about 32 sealed segments' worth; a chunk of smaller segments
    /// (those of a live stream) holds more of them.
    pub export_chunk_bytes: usize,
    /// The hash partitions of each table of segments that [`Backend::migrate`] makes, where
    /// migration 8 partitions them (see [`PgStore::migrate_with`]); `None` makes
    /// [`DEFAULT_PARTITIONS`] and accepts any count a database has already.
    pub partitions: Option<u32>,
}

/// The default of [`PgConfig::export_chunk_bytes`]: 2 MiB, about 32 sealed segments (256 KiB
/// of lines each, a quarter of that stored).
pub const EXPORT_CHUNK_BYTES: usize = 2 << 20;

impl Default for PgConfig {
    fn default() -> Self {
        Self {
            max_connections: 16,
            wait: Duration::from_secs(5),
            export_chunk_bytes: EXPORT_CHUNK_BYTES,
            partitions: None,
        }
    }
}

/// The pool of a store's read connections.
type Pool = r2d2::Pool<Manager>;

/// A store in one PostgreSQL database.
pub struct PgStore {
    pool: Pool,
    /// The chain tip and the data version, kept by a thread that listens for the writer's
    /// announcements and polls; declared after the pool only for reading order: it holds a
    /// clone of the pool and stops (joining its thread) when dropped.
    tip: tip::TipWatch,
    /// See [`PgConfig::export_chunk_bytes`].
    export_chunk_bytes: usize,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("state", &self.pool.state())
            .finish()
    }
}

impl PgStore {
    /// Connects to serve: checks that the database holds our schema in this program's version
    /// and row format, and writes nothing (it works with a read-only role and on a standby).
    /// A database without our schema is refused with [`Error::Incompatible`], whose message
    /// says to run `server migrate` or `server ingest` first.
    pub fn open(url: &str, config: PgConfig) -> Result<Self, Error> {
        Self::open_polling(url, config, storage::CHAIN_TIP_LAG)
    }

    /// [`PgStore::open`], its tip polled every `poll` besides the writer's announcements.
    fn open_polling(url: &str, config: PgConfig, poll: Duration) -> Result<Self, Error> {
        let manager = Manager::new(url, config.wait)?;
        let mut client = manager.connect()?;
        schema::check(&mut client)?;
        drop(client);
        let pool = r2d2::Pool::builder()
            .max_size(config.max_connections.max(1))
            // Idle connections are made on demand: a server starts whether or not the
            // database is up, and a pool whose connections were killed refills by itself.
            .min_idle(Some(0))
            .connection_timeout(config.wait)
            // No test round trip before every read: a connection killed while idle
            // (pg_terminate_backend, a restart) fails its read instead, which `read` runs again
            // on another connection.
            .test_on_check_out(false)
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .build_unchecked(manager);
        // A connection of its own, not the pool's: the pool's size is the reads'.
        let listen = Manager::new(url, config.wait)?;
        let tip = tip::TipWatch::start(pool.clone(), listen, poll);
        Ok(Self {
            pool,
            tip,
            export_chunk_bytes: config.export_chunk_bytes,
        })
    }

    /// Creates or upgrades the schema (see [`Migrated`]); safe when several processes run it at
    /// once: they take turns under an advisory lock. Rows of the
    /// [`UPGRADABLE_FORMATS`](storage::UPGRADABLE_FORMATS) are upgraded (migration 7 adds a
    /// checksum to every blob of format 4, migration 9 replaces the CRC32C of every blob of
    /// format 5).
    pub fn migrate(url: &str) -> Result<Migrated, Error> {
        Self::migrate_with(url, None)
    }

    /// [`PgStore::migrate`], making `partitions` hash partitions of each table of segments
    /// where migration 8 partitions them (`server migrate --partitions N`); `None` makes
    /// [`DEFAULT_PARTITIONS`]. A count other than the database's, once partitioned, is refused
    /// with [`Incompatible::Partitioned`], and one above [`MAX_PARTITIONS`] or 0 with
    /// [`Incompatible::PartitionCount`], the database left as it was.
    pub fn migrate_with(url: &str, partitions: Option<u32>) -> Result<Migrated, Error> {
        let manager = Manager::new(url, Duration::from_secs(30))?;
        schema::migrate(
            &mut manager.connect()?,
            Upgrade::Rows,
            &schema::Layout { partitions },
        )
    }

    /// Migrates the database and opens its single writer, which holds the database's ingest
    /// lock until it is dropped: a second writer is refused with [`Error::Busy`]. Rows of the
    /// [`UPGRADABLE_FORMATS`](storage::UPGRADABLE_FORMATS) are refused untouched, the message
    /// naming `server migrate`: only [`PgStore::migrate`] upgrades them.
    pub fn writer(url: &str) -> Result<PgWriter, Error> {
        Self::writer_with(url, &WriterOptions::default())
    }

    /// [`writer`](Self::writer), opened with `options`.
    pub fn writer_with(url: &str, options: &WriterOptions) -> Result<PgWriter, Error> {
        let manager = Manager::new(url, Duration::from_secs(30))?;
        let mut client = manager.connect()?;
        schema::migrate(
            &mut client,
            Upgrade::Refuse,
            &schema::Layout { partitions: None },
        )?;
        PgWriter::new(client, options)
    }

    /// Runs `read` on a pooled connection. A connection killed while it sat idle in the pool
    /// (`pg_terminate_backend`, a database restart) fails its next read as
    /// [`Error::Unavailable`]: the read then runs again on another connection, made afresh when
    /// no other is idle, as long as `may_retry` says nothing has been sent on (an export that
    /// started streaming cannot start again). This replaces r2d2's test on checkout, which cost
    /// every read a round trip. A read that fails on a connection that never served before is
    /// not tried again: then the database itself is unavailable.
    fn read<T>(
        &self,
        read: impl FnMut(&mut PgConn) -> Result<T, Error>,
        may_retry: impl Fn() -> bool,
    ) -> Result<T, Error> {
        read_pooled(&self.pool, read, may_retry)
    }

    fn get(&self) -> Result<r2d2::PooledConnection<Manager>, Error> {
        pooled(&self.pool)
    }
}

/// A connection of `pool`.
fn pooled(pool: &Pool) -> Result<r2d2::PooledConnection<Manager>, Error> {
    pool.get().map_err(|err| Error::Unavailable(Box::new(err)))
}

/// [`PgStore::read`] on `pool`, for the store and its background refresh alike.
fn read_pooled<T>(
    pool: &Pool,
    mut read: impl FnMut(&mut PgConn) -> Result<T, Error>,
    may_retry: impl Fn() -> bool,
) -> Result<T, Error> {
    // Each failed try discards a connection, so the pool's size bounds the tries.
    let mut tries = pool.max_size();
    loop {
        let mut conn = pooled(pool)?;
        let result = read(&mut conn);
        match result {
            Err(Error::Unavailable(err)) => {
                conn.broken = true;
                if conn.served == 0 || tries == 0 || !may_retry() {
                    return Err(Error::Unavailable(err));
                }
                tries -= 1;
            }
            result => {
                conn.served += 1;
                return result;
            }
        }
    }
}

impl Store for PgStore {
    /// The chain id and the first and last stored blocks, read from one snapshot.
    fn chain(&self) -> Result<ChainState, Error> {
        let mut conn = self.get()?;
        let (mut tx, _) = conn.snapshot()?;
        ingest::chain_state(&mut tx)
    }

    fn scrub(&self, progress: &mut dyn FnMut(ScrubProgress)) -> Result<Scrub, Error> {
        self.scrub_all(progress)
    }

    /// Real ids to show in example URLs; all `None` for an empty store. The party is the first
    /// with ledger lines, the asset that of its first line; read from one snapshot.
    fn examples(&self) -> Result<Examples, Error> {
        let mut conn = self.get()?;
        let (mut tx, _) = conn.snapshot()?;
        let mut examples = Examples::default();
        if let Some(row) = tx
            .query_opt(
                "SELECT p.id, encode(p.hex, 'hex') FROM parties p \
                 WHERE EXISTS (SELECT 1 FROM ledger_segments s WHERE s.party = p.id) \
                 ORDER BY p.id LIMIT 1",
                &[],
            )
            .map_err(map_err)?
        {
            let party: i32 = row.get(0);
            examples.party = row.get(1);
            let first = tx
                .query_one(
                    "SELECT csv, keys, last_time, last_block, last_seq, last_idx \
                     FROM ledger_segments WHERE party = $1 \
                     ORDER BY last_time, last_block, last_seq, last_idx LIMIT 1",
                    &[&party],
                )
                .map_err(map_err)?;
            let at = |err: Error| {
                err.at("ledger_segments", || {
                    let last = (first.get(2), first.get(3), first.get(4), first.get(5));
                    segment::describe("party", party.into(), last)
                })
            };
            let (csv, keys) = packed::unpack(first.get(0), "csv")
                .and_then(|csv| Ok((csv, packed::unpack(first.get(1), "keys")?)))
                .map_err(at)?;
            let segment = SegmentRef::new(&csv, &keys).map_err(at)?;
            if !segment.is_empty() {
                let asset = segment.line(0).asset;
                examples.asset = tx
                    .query_opt(
                        "SELECT encode(hex, 'hex') FROM assets WHERE id = $1",
                        &[&i32::try_from(asset).map_err(|_| {
                            at(Damage::Value(format!("ledger segment of asset {asset}")).into())
                        })?],
                    )
                    .map_err(map_err)?
                    .map(|row| row.get(0));
            }
        }
        examples.spec = tx
            .query_opt(
                "SELECT encode(s.hex, 'hex') FROM oracle_specs s \
                 WHERE EXISTS (SELECT 1 FROM oracle_segments d WHERE d.spec = s.id) \
                 ORDER BY s.id LIMIT 1",
                &[],
            )
            .map_err(map_err)?
            .map(|row| row.get(0));
        tx.commit().map_err(map_err)?;
        Ok(examples)
    }

    /// Brings the chain tip and the data version up to every commit made so far, rather than
    /// when the commits' announcements arrive (or the next poll, at most
    /// [`CHAIN_TIP_LAG`](storage::CHAIN_TIP_LAG) away, without them): for a process that has
    /// just committed through its own writer and serves too, and for tests. It announces a
    /// marker and waits for the store's thread to hear it, or reads the tip itself.
    fn refresh_chain_tip(&self) -> Result<(), Error> {
        self.tip.sync(&self.pool, self.pool.connection_timeout())
    }
}

/// A PostgreSQL database as a [`Backend`]: opening it to serve only reads (it works with a
/// read-only role and on a hot standby); the writer and `migrate` create or upgrade the schema.
#[derive(Clone, Debug)]
pub struct PgBackend {
    /// The connection URL (may hold a password: log [`Backend::describe`] only).
    pub url: String,
    /// The pool's tuning; its `max_connections` is set from the reads allowed at once.
    pub config: PgConfig,
}

impl Backend for PgBackend {
    fn describe(&self) -> String {
        redact(&self.url)
    }

    fn exists(&self) -> bool {
        true
    }

    fn open_store(&self, max_readers: usize) -> Result<Arc<dyn Store>, Error> {
        let config = PgConfig {
            max_connections: u32::try_from(max_readers).unwrap_or(u32::MAX),
            ..self.config.clone()
        };
        Ok(Arc::new(PgStore::open(&self.url, config)?))
    }

    fn open_writer(&self, options: &WriterOptions) -> Result<Box<dyn IngestWriter>, Error> {
        Ok(Box::new(PgStore::writer_with(&self.url, options)?))
    }

    fn migrate(&self) -> Result<Migrated, Error> {
        PgStore::migrate_with(&self.url, self.config.partitions)
    }

    fn backup(&self, _out: &std::path::Path) -> Result<ChainState, Error> {
        Err(Incompatible::Backup.into())
    }
}

impl Health for PgStore {
    fn check(&self) -> Result<(), Error> {
        self.read(
            |conn| {
                conn.client
                    .query_one("SELECT count(*) FROM schema_info", &[])
                    .map(drop)
                    .map_err(map_err)
            },
            || true,
        )
    }

    /// From memory: the background refresh's last read (see `tip.rs`).
    fn chain_tip(&self) -> Result<Option<ChainTip>, Error> {
        Ok(self.tip.current())
    }
}

/// A pooled connection with its prepared statements (a page costs no parse round trip) and the
/// dictionary ids it has looked up.
pub(crate) struct PgConn {
    client: Client,
    statements: HashMap<String, Statement>,
    /// Oracle spec ids by their hex. Dictionary ids never change once committed (rows are only
    /// ever added), so an id read once holds for the connection's life; ids not found are not
    /// kept, as an ingest may add them.
    specs: HashMap<[u8; 32], i32>,
    /// The partition of `oracle_segments` that holds each owner's segments, by owner (see
    /// `oracle::partition`): the partition count is fixed when the table is partitioned, so an
    /// owner found in one stays in it; owners without segments are not kept.
    partitions: HashMap<i32, String>,
    /// Reads served; see [`PgStore::read`].
    served: u64,
    /// Set when the connection failed or was left mid-stream: the pool drops it.
    broken: bool,
}

impl PgConn {
    /// The connection outside a transaction, with its statement cache: a single statement is
    /// one snapshot by itself.
    fn autocommit(&mut self) -> (&mut Client, Statements<'_>) {
        (&mut self.client, Statements(&mut self.statements))
    }

    /// Starts a read-only snapshot: one `REPEATABLE READ READ ONLY` transaction.
    fn snapshot(&mut self) -> Result<(postgres::Transaction<'_>, Statements<'_>), Error> {
        let tx = self
            .client
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .map_err(map_err)?;
        Ok((tx, Statements(&mut self.statements)))
    }
}

/// The statement cache of a connection, beside its open transaction.
struct Statements<'c>(&'c mut HashMap<String, Statement>);

impl Statements<'_> {
    /// The prepared form of `sql`, prepared on first use on this connection.
    fn get(&mut self, tx: &mut impl GenericClient, sql: &str) -> Result<Statement, Error> {
        if let Some(statement) = self.0.get(sql) {
            return Ok(statement.clone());
        }
        let statement = tx.prepare(sql).map_err(map_err)?;
        self.0.insert(sql.to_owned(), statement.clone());
        Ok(statement)
    }
}

/// The readers' planner setting, for the whole session: every prepared statement runs its
/// generic plan, planned once per connection. Those are the plans `query_plans.rs` pins. Left
/// to choose (`auto`), PostgreSQL kept planning a page's scan at every execution: the generic
/// plan's estimate, made without the `LIMIT`'s value, never beat the custom plans', and the
/// planning cost a page read from the database about 15 % of its time (docs/PERFORMANCE.md
/// "Generic plans"). And no sort, bitmap scan or sequential scan where the ordered range scan
/// of an index can do: a generic plan is made without the values, and might take a large
/// party's export chunk ([`export::chunk_sql`]) for a small one, then read all its segments
/// and sort them before the first is sent. These only price the nodes out; a statement that
/// has no other way keeps them.
pub(crate) const READER_PLANNER: &str = "SET plan_cache_mode = force_generic_plan; \
     SET enable_sort = off; SET enable_bitmapscan = off; SET enable_seqscan = off";

/// Makes the pool's connections, with TLS as `sslmode` asks, and the readers' planner setting.
pub(crate) struct Manager {
    config: Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    /// Whether a connection tries plain text first (`tls::plain_first`); cleared for good once
    /// the server refused plain text and took TLS.
    plain_first: AtomicBool,
}

impl Manager {
    fn new(url: &str, wait: Duration) -> Result<Self, Error> {
        let tls = tls::Tls::from_url(url)?;
        let mut config = Config::from_str(&tls.url).map_err(|err| {
            Error::from(Incompatible::Url {
                url: redact(url),
                reason: err.to_string(),
            })
        })?;
        if config.get_application_name().is_none() {
            config.application_name("vega-datanode-lite");
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(wait);
        }
        Ok(Self {
            plain_first: AtomicBool::new(tls::plain_first(&config)),
            config,
            tls: tls.connector,
        })
    }

    fn connect(&self) -> Result<Client, Error> {
        self.open().map_err(map_err)
    }

    /// A new session: in plain text first while [`Manager::plain_first`] holds, then with TLS as
    /// `sslmode` asks. Once plain text was refused and TLS taken, every later one goes straight
    /// to TLS.
    fn open(&self) -> Result<Client, postgres::Error> {
        if self.plain_first.load(Ordering::Relaxed) {
            match self.config.connect(NoTls) {
                Err(err) if tls::refused_plain_text(&err) => {
                    tracing::debug!(error = %err, "plain text refused on loopback; trying TLS");
                }
                done => return done,
            }
        }
        let client = self.config.connect(self.tls.clone())?;
        if self.plain_first.swap(false, Ordering::Relaxed) {
            tracing::info!("the database refused plain text on loopback: connecting with TLS");
        }
        Ok(client)
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = PgConn;
    type Error = postgres::Error;

    fn connect(&self) -> Result<PgConn, postgres::Error> {
        let mut client = self.open()?;
        client.batch_execute(READER_PLANNER)?;
        Ok(PgConn {
            client,
            statements: HashMap::new(),
            specs: HashMap::new(),
            partitions: HashMap::new(),
            served: 0,
            broken: false,
        })
    }

    fn is_valid(&self, conn: &mut PgConn) -> Result<(), postgres::Error> {
        conn.client.simple_query("").map(drop)
    }

    fn has_broken(&self, conn: &mut PgConn) -> bool {
        conn.broken || conn.client.is_closed()
    }
}

/// Maps a PostgreSQL error to the backend-neutral [`Error`]: a lost or refused connection, a
/// server shutting down or out of resources is [`Error::Unavailable`] (the pool reconnects once
/// the database is back); a missing table means the schema was never created.
pub(crate) fn map_err(err: postgres::Error) -> Error {
    let Some(db) = err.as_db_error() else {
        // No answer from the server at all: the connection is gone or was never made.
        return Error::Unavailable(Box::new(err));
    };
    let code = db.code().code();
    if code.starts_with("08") || code.starts_with("53") || code.starts_with("57P") {
        Error::Unavailable(Box::new(err))
    } else if code == "42P01" {
        Incompatible::NoSchema.into()
    } else {
        Error::Internal(Box::new(err))
    }
}
