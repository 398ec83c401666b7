//! The single writer: whole batches of blocks, in transactions of one batch or of several
//! (`IngestWriter::stage`).

use std::collections::HashMap;
use std::path::Path;

use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use super::checkpoint::Checkpoints;
use super::segments::{ALL_DATA, LEDGER, ORACLE, Segments, Table};
use super::{connect, map_err};
use crate::backend::Then;
use crate::segment::{self, Engine, Line};
use crate::tip;
use crate::{
    BlockRecord, BlockState, ChainState, Error, IngestBatch, IngestWriter, LedgerRow, OracleRow,
    WriterOptions,
};

/// Writes ingested rows into an [`SqliteStore`](super::SqliteStore).
#[derive(Debug)]
pub struct SqliteWriter {
    conn: Connection,
    dictionaries: Dictionaries,
    tails: Tails,
    checkpoints: Checkpoints,
    /// The open transaction, if batches are staged in it: the connection's `data_version`
    /// when it began.
    open: Option<i64>,
}

/// The segment engines of the ledger and of the oracle data, with what each knows of its
/// owners' last stored segments. Only valid while this writer is the only one committing:
/// `write` checks the connection's `data_version` (which changes when another connection
/// commits) and starts over when it moved; cleared when a transaction fails.
#[derive(Debug)]
struct Tails {
    /// `PRAGMA data_version` after this writer's last commit.
    version: Option<i64>,
    parties: Engine<i64>,
    specs: Engine<i64>,
}

impl Tails {
    /// Engines that know nothing yet, each bounded as `options` says.
    fn new(options: &WriterOptions) -> Self {
        let engine =
            |table: &Table| Engine::new(table.packing).remembering(options.remembered_bytes);
        Self {
            version: None,
            parties: engine(&LEDGER),
            specs: engine(&ORACLE),
        }
    }

    /// Forgets every owner: a transaction failed, or another writer committed.
    fn forget(&mut self) {
        self.version = None;
        self.parties.forget();
        self.specs.forget();
    }
}

/// Caches of the id dictionaries, so that a row costs no dictionary lookup once its ids are
/// known. Only ever filled from committed state or the current transaction; cleared when a
/// transaction fails.
#[derive(Debug, Default)]
struct Dictionaries {
    parties: HashMap<[u8; 32], i64>,
    assets: HashMap<[u8; 32], i64>,
    specs: HashMap<[u8; 32], i64>,
}

#[derive(Clone, Copy)]
enum Dictionary {
    Parties,
    Assets,
    Specs,
}

impl Dictionary {
    fn table(self) -> &'static str {
        match self {
            Self::Parties => "parties",
            Self::Assets => "assets",
            Self::Specs => "oracle_specs",
        }
    }
}

impl Dictionaries {
    fn map(&mut self, dictionary: Dictionary) -> &mut HashMap<[u8; 32], i64> {
        match dictionary {
            Dictionary::Parties => &mut self.parties,
            Dictionary::Assets => &mut self.assets,
            Dictionary::Specs => &mut self.specs,
        }
    }

    /// The integer key of `hex` in `dictionary`, added when new.
    fn key(
        &mut self,
        conn: &Connection,
        dictionary: Dictionary,
        hex: &[u8; 32],
    ) -> Result<i64, Error> {
        if let Some(key) = self.map(dictionary).get(hex) {
            return Ok(*key);
        }
        let table = dictionary.table();
        let existing: Option<i64> = conn
            .prepare_cached(&format!("SELECT id FROM {table} WHERE hex = ?1"))
            .and_then(|mut stmt| stmt.query_row([&hex[..]], |row| row.get(0)).optional())
            .map_err(map_err)?;
        let key = match existing {
            Some(key) => key,
            None => {
                conn.prepare_cached(&format!("INSERT INTO {table} (hex) VALUES (?1)"))
                    .and_then(|mut stmt| stmt.execute([&hex[..]]))
                    .map_err(map_err)?;
                conn.last_insert_rowid()
            }
        };
        self.map(dictionary).insert(*hex, key);
        Ok(key)
    }
}

impl SqliteWriter {
    pub(super) fn open(path: &Path, options: &WriterOptions) -> Result<Self, Error> {
        let conn = connect(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        // A large cache keeps the right edges of every party's b-tree range in memory during
        // long ingests; synchronous=NORMAL is durable in WAL mode except for the last commits
        // before a power loss, which a re-run restores (ingest is idempotent).
        // No automatic checkpoints: a thread of their own runs them after each commit
        // (`checkpoint.rs`), so the commit never waits for their fsyncs.
        conn.execute_batch(
            "PRAGMA cache_size = -65536; PRAGMA synchronous = NORMAL; \
             PRAGMA wal_autocheckpoint = 0;",
        )
        .map_err(map_err)?;
        Ok(Self {
            conn,
            dictionaries: Dictionaries::default(),
            tails: Tails::new(options),
            checkpoints: Checkpoints::new(path),
            open: None,
        })
    }

    /// Writes the batch into the open transaction, beginning one: the ledger rows, the oracle
    /// data, then the blocks; then commits when `then` says so.
    fn write(&mut self, batch: &IngestBatch, then: Then) -> Result<(), Error> {
        let version = match self.open {
            Some(version) => version,
            None if batch.is_empty() => return Ok(()),
            None => {
                self.conn
                    .execute_batch("BEGIN IMMEDIATE")
                    .map_err(map_err)?;
                let version = data_version(&self.conn)?;
                if self.tails.version != Some(version) {
                    self.tails.forget();
                }
                self.open = Some(version);
                version
            }
        };
        let conn = &self.conn;
        insert_ledger(
            conn,
            &mut self.dictionaries,
            &mut self.tails.parties,
            &batch.ledger_rows,
            then,
        )?;
        insert_oracle(
            conn,
            &mut self.dictionaries,
            &mut self.tails.specs,
            &batch.oracle_rows,
            then,
        )?;
        upsert_blocks(conn, &batch.blocks)?;
        if let Some(chain_id) = &batch.chain_id {
            record_chain(conn, chain_id)?;
        }
        if then == Then::KeepOpen {
            return Ok(());
        }
        conn.execute_batch("COMMIT").map_err(map_err)?;
        self.open = None;
        // A connection's own commits leave its data version as it was.
        self.tails.version = Some(version);
        self.checkpoints.committed(&self.conn);
        Ok(())
    }

    /// After a failed write: rolls the open transaction back and forgets what the writer
    /// cached from it.
    fn undo(&mut self) {
        if !self.conn.is_autocommit() {
            // A connection that cannot even roll back is closed with the writer; SQLite rolls
            // back what it did not commit.
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        self.open = None;
        self.dictionaries = Dictionaries::default();
        self.tails.forget();
    }
}

/// Adds the ledger rows not stored yet to their parties' segments (see [`Engine::lay`]).
fn insert_ledger(
    conn: &Connection,
    dictionaries: &mut Dictionaries,
    engine: &mut Engine<i64>,
    rows: &[LedgerRow],
    then: Then,
) -> Result<(), Error> {
    let mut lines = Vec::with_capacity(rows.len());
    for row in rows {
        let party = dictionaries.key(conn, Dictionary::Parties, row.party.as_bytes())?;
        let asset = dictionaries.key(conn, Dictionary::Assets, row.asset.as_bytes())?;
        let key = (
            row.key.vega_time.nanos(),
            Error::signed("block height", row.key.block)?,
            Error::signed("sequence number", row.key.seq)?,
            i64::from(row.key.index),
        );
        let csv = &row.csv_line[..];
        lines.push((party, Line { key, asset, csv }));
    }
    let mut table = Segments {
        table: &LEDGER,
        conn,
    };
    engine.lay(&mut table, lines, then).map(drop)
}

/// The connection's `PRAGMA data_version`.
fn data_version(conn: &Connection) -> Result<i64, Error> {
    conn.query_row("PRAGMA data_version", [], |row| row.get(0))
        .map_err(map_err)
}

/// Adds the oracle data not stored yet to the segments of all data and of every spec each
/// matched (see [`segment::store_oracle`]).
fn insert_oracle(
    conn: &Connection,
    dictionaries: &mut Dictionaries,
    engine: &mut Engine<i64>,
    rows: &[OracleRow],
    then: Then,
) -> Result<(), Error> {
    let mut table = Segments {
        table: &ORACLE,
        conn,
    };
    segment::store_oracle(
        rows,
        ALL_DATA,
        |spec| dictionaries.key(conn, Dictionary::Specs, spec),
        |lines| engine.lay(&mut table, lines, then),
    )
}

/// Records the blocks, merged with what is stored of them (see [`IngestBatch`]).
fn upsert_blocks(conn: &Connection, blocks: &[BlockRecord]) -> Result<(), Error> {
    let mut upsert = conn
        .prepare_cached(
            "INSERT INTO blocks (height, seq_base, hash, vega_time, last_seq) \
             VALUES (?1, ?2, ?3, ?4, ?5) \
             ON CONFLICT (height, seq_base) DO UPDATE SET \
             hash = coalesce(blocks.hash, excluded.hash), \
             vega_time = coalesce(blocks.vega_time, excluded.vega_time), \
             last_seq = max(blocks.last_seq, excluded.last_seq)",
        )
        .map_err(map_err)?;
    for block in blocks {
        upsert
            .execute(params![
                Error::signed("block height", block.height)?,
                Error::signed("sequence number", block.seq_base)?,
                block.hash,
                block.state.vega_time,
                Error::signed("sequence number", block.state.last_seq)?
            ])
            .map_err(map_err)?;
    }
    Ok(())
}

/// Records the chain id when none is stored; refuses another one.
fn record_chain(conn: &Connection, chain_id: &str) -> Result<(), Error> {
    let stored = conn
        .prepare_cached("SELECT value FROM schema_info WHERE key = 'chain_id'")
        .and_then(|mut stmt| stmt.query_row([], |row| row.get(0)).optional())
        .map_err(map_err)?;
    if tip::must_record(stored, chain_id)? {
        conn.execute(
            "INSERT INTO schema_info (key, value) VALUES ('chain_id', ?1)",
            [chain_id],
        )
        .map_err(map_err)?;
    }
    Ok(())
}

/// The chain id and the first and last stored blocks, read in one snapshot (one statement).
pub(super) fn chain_state(conn: &Connection) -> Result<ChainState, Error> {
    let row = conn
        .prepare_cached(tip::CHAIN_SQL)
        .and_then(|mut stmt| {
            stmt.query_row([], |row| {
                Ok((
                    row.get(0)?,
                    (row.get(1)?, row.get(2)?),
                    (row.get(3)?, row.get(4)?),
                ))
            })
        })
        .map_err(map_err)?;
    tip::chain_from_row(row.0, row.1, row.2)
}

impl IngestWriter for SqliteWriter {
    fn chain(&mut self) -> Result<ChainState, Error> {
        chain_state(&self.conn)
    }

    fn blocks(&mut self, height: u64) -> Result<Vec<BlockRecord>, Error> {
        // No stored block is that high: heights are stored as signed 64-bit integers.
        let Ok(signed) = i64::try_from(height) else {
            return Ok(Vec::new());
        };
        self.conn
            .prepare_cached(
                "SELECT seq_base, hash, vega_time, last_seq FROM blocks WHERE height = ?1 \
                 ORDER BY seq_base",
            )
            .and_then(|mut stmt| {
                stmt.query_map([signed], |row| {
                    Ok(BlockRecord {
                        height,
                        seq_base: row.get::<_, i64>(0)? as u64,
                        hash: row.get(1)?,
                        state: BlockState {
                            vega_time: row.get(2)?,
                            last_seq: row.get::<_, i64>(3)? as u64,
                        },
                    })
                })?
                .collect()
            })
            .map_err(map_err)
    }

    fn commit(&mut self, batch: &IngestBatch) -> Result<(), Error> {
        crate::backend::write_whole(self, batch, Then::Commit, Self::write, Self::undo)
    }

    fn stage(&mut self, batch: &IngestBatch) -> Result<(), Error> {
        crate::backend::write_whole(self, batch, Then::KeepOpen, Self::write, Self::undo)
    }
}
