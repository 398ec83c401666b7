//! The single writer: whole batches of blocks in one transaction each.

use std::collections::HashMap;
use std::path::Path;

use rusqlite::{
    Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};

use super::{connect, map_err};
use crate::{BlockRecord, BlockState, Error, IngestBatch, IngestWriter, LedgerRow, OracleRow};

/// Writes ingested rows into an [`SqliteStore`](super::SqliteStore).
#[derive(Debug)]
pub struct SqliteWriter {
    conn: Connection,
    dictionaries: Dictionaries,
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
        tx: &Transaction<'_>,
        dictionary: Dictionary,
        hex: &[u8; 32],
    ) -> Result<i64, Error> {
        if let Some(key) = self.map(dictionary).get(hex) {
            return Ok(*key);
        }
        let table = dictionary.table();
        let existing: Option<i64> = tx
            .prepare_cached(&format!("SELECT id FROM {table} WHERE hex = ?1"))
            .and_then(|mut stmt| stmt.query_row([&hex[..]], |row| row.get(0)).optional())
            .map_err(map_err)?;
        let key = match existing {
            Some(key) => key,
            None => {
                tx.prepare_cached(&format!("INSERT INTO {table} (hex) VALUES (?1)"))
                    .and_then(|mut stmt| stmt.execute([&hex[..]]))
                    .map_err(map_err)?;
                tx.last_insert_rowid()
            }
        };
        self.map(dictionary).insert(*hex, key);
        Ok(key)
    }
}

impl SqliteWriter {
    pub(super) fn open(path: &Path) -> Result<Self, Error> {
        let conn = connect(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        // A large cache keeps the right edges of every party's b-tree range in memory during
        // long ingests; synchronous=NORMAL is durable in WAL mode except for the last commits
        // before a power loss, which a re-run restores (ingest is idempotent).
        // Checkpoints every 8192 pages (256 MiB) of WAL instead of 1000: a page rewritten by many
        // commits is copied back to the database once, not once per commit.
        conn.execute_batch(
            "PRAGMA cache_size = -65536; PRAGMA synchronous = NORMAL; \
             PRAGMA wal_autocheckpoint = 8192;",
        )
        .map_err(map_err)?;
        Ok(Self {
            conn,
            dictionaries: Dictionaries::default(),
        })
    }

    /// Writes the batch in one transaction: the ledger rows, the oracle data, then the blocks.
    fn write(&mut self, batch: &IngestBatch) -> Result<(), Error> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(map_err)?;
        insert_ledger(&tx, &mut self.dictionaries, &batch.ledger_rows)?;
        insert_oracle(&tx, &mut self.dictionaries, &batch.oracle_rows)?;
        upsert_blocks(&tx, &batch.blocks)?;
        tx.commit().map_err(map_err)
    }
}

/// Inserts the ledger rows not stored yet.
fn insert_ledger(
    tx: &Transaction<'_>,
    dictionaries: &mut Dictionaries,
    rows: &[LedgerRow],
) -> Result<(), Error> {
    // Inserting in clustered-key order touches each b-tree page once per batch instead of
    // once per row.
    let mut ledger = Vec::with_capacity(rows.len());
    for row in rows {
        let party = dictionaries.key(tx, Dictionary::Parties, row.party.as_bytes())?;
        let asset = dictionaries.key(tx, Dictionary::Assets, row.asset.as_bytes())?;
        ledger.push((party, asset, row));
    }
    ledger.sort_unstable_by_key(|(party, asset, row)| (*party, *asset, row.key));
    let mut insert = tx
        .prepare_cached(
            "INSERT OR IGNORE INTO ledger_rows \
             (party, asset, vega_time, block, seq, idx, csv) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .map_err(map_err)?;
    for (party, asset, row) in ledger {
        insert
            .execute(params![
                party,
                asset,
                row.key.vega_time.nanos(),
                Error::signed("block height", row.key.block)?,
                Error::signed("sequence number", row.key.seq)?,
                row.key.index,
                row.csv_line,
            ])
            .map_err(map_err)?;
    }
    Ok(())
}

/// Inserts the oracle data not stored yet, and which specs each matched.
fn insert_oracle(
    tx: &Transaction<'_>,
    dictionaries: &mut Dictionaries,
    rows: &[OracleRow],
) -> Result<(), Error> {
    let mut insert_datum = tx
        .prepare_cached(
            "INSERT OR IGNORE INTO oracle_data (vega_time, block, seq, json) \
             VALUES (?1, ?2, ?3, ?4)",
        )
        .map_err(map_err)?;
    let mut insert_match = tx
        .prepare_cached(
            "INSERT OR IGNORE INTO oracle_spec_data (spec, vega_time, block, seq) \
             VALUES (?1, ?2, ?3, ?4)",
        )
        .map_err(map_err)?;
    for row in rows {
        let (time, block, seq) = (
            row.position.vega_time,
            Error::signed("block height", row.position.block)?,
            Error::signed("sequence number", row.position.seq)?,
        );
        insert_datum
            .execute(params![time, block, seq, row.json])
            .map_err(map_err)?;
        for spec in &row.matched_specs {
            let spec = dictionaries.key(tx, Dictionary::Specs, spec.as_bytes())?;
            insert_match
                .execute(params![spec, time, block, seq])
                .map_err(map_err)?;
        }
    }
    Ok(())
}

/// Records the blocks, merged with what is stored of them (see [`crate::BlockRecord`]).
fn upsert_blocks(tx: &Transaction<'_>, blocks: &[BlockRecord]) -> Result<(), Error> {
    let mut upsert = tx
        .prepare_cached(
            "INSERT INTO blocks (height, vega_time, last_seq) VALUES (?1, ?2, ?3) \
             ON CONFLICT (height) DO UPDATE SET \
             vega_time = coalesce(blocks.vega_time, excluded.vega_time), \
             last_seq = max(blocks.last_seq, excluded.last_seq)",
        )
        .map_err(map_err)?;
    for block in blocks {
        upsert
            .execute(params![
                Error::signed("block height", block.height)?,
                block.state.vega_time,
                Error::signed("sequence number", block.state.last_seq)?
            ])
            .map_err(map_err)?;
    }
    Ok(())
}

impl IngestWriter for SqliteWriter {
    fn last_block(&mut self) -> Result<Option<u64>, Error> {
        self.conn
            .query_row("SELECT max(height) FROM blocks", [], |row| {
                row.get::<_, Option<i64>>(0)
            })
            .map(|height| height.map(|height| height as u64))
            .map_err(map_err)
    }

    fn block_state(&mut self, height: u64) -> Result<Option<BlockState>, Error> {
        // No stored block is that high: heights are stored as signed 64-bit integers.
        let Ok(height) = i64::try_from(height) else {
            return Ok(None);
        };
        self.conn
            .prepare_cached("SELECT vega_time, last_seq FROM blocks WHERE height = ?1")
            .and_then(|mut stmt| {
                stmt.query_row([height], |row| {
                    Ok(BlockState {
                        vega_time: row.get(0)?,
                        last_seq: row.get::<_, i64>(1)? as u64,
                    })
                })
                .optional()
            })
            .map_err(map_err)
    }

    fn commit(&mut self, batch: &IngestBatch) -> Result<(), Error> {
        crate::model::commit_whole(self, batch, Self::write, |writer| {
            writer.dictionaries = Dictionaries::default();
        })
    }
}
