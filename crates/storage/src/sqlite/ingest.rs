//! The single writer: whole batches of blocks in one transaction each.

use std::collections::HashMap;
use std::path::Path;

use rusqlite::{
    Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};

use super::checkpoint::Checkpoints;
use super::{at_segment, connect, map_err, verified};
use crate::segment::{
    self, Ask, Engine, Line, LineKey, Packing, RUN_SEGMENTS, SMALL_TAIL_BYTES, Segment,
    SegmentTable, Touched,
};
use crate::{
    BlockRecord, BlockState, ChainState, Error, IngestBatch, IngestWriter, LedgerRow, OracleRow,
};
use crate::{checksum, tip};

/// Writes ingested rows into an [`SqliteStore`](super::SqliteStore).
#[derive(Debug)]
pub struct SqliteWriter {
    conn: Connection,
    dictionaries: Dictionaries,
    tails: PartyTails,
    checkpoints: Checkpoints,
}

/// The ledger's packing policy.
const LEDGER: Packing = Packing {
    seal: segment::SEGMENT_BYTES,
    small_tail: SMALL_TAIL_BYTES,
    run: RUN_SEGMENTS,
};

/// The ledger's segment engine, with what it knows of each party's last stored segment. Only
/// valid while this writer is the only one committing: `write` checks the connection's
/// `data_version` (which changes when another connection commits) and starts over when it
/// moved; cleared when a transaction fails.
#[derive(Debug)]
struct PartyTails {
    /// `PRAGMA data_version` after this writer's last commit.
    version: Option<i64>,
    parties: Engine<i64>,
}

impl Default for PartyTails {
    fn default() -> Self {
        Self {
            version: None,
            parties: Engine::new(LEDGER),
        }
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
            tails: PartyTails::default(),
            checkpoints: Checkpoints::new(path),
        })
    }

    /// Writes the batch in one transaction: the ledger rows, the oracle data, then the blocks.
    fn write(&mut self, batch: &IngestBatch) -> Result<(), Error> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(map_err)?;
        let version = data_version(&tx)?;
        if self.tails.version != Some(version) {
            self.tails.parties.forget();
        }
        insert_ledger(
            &tx,
            &mut self.dictionaries,
            &mut self.tails.parties,
            &batch.ledger_rows,
        )?;
        insert_oracle(&tx, &mut self.dictionaries, &batch.oracle_rows)?;
        upsert_blocks(&tx, &batch.blocks)?;
        if let Some(chain_id) = &batch.chain_id {
            record_chain(&tx, chain_id)?;
        }
        tx.commit().map_err(map_err)?;
        // A connection's own commits leave its data version as it was.
        self.tails.version = Some(version);
        self.checkpoints.committed(&self.conn);
        Ok(())
    }
}

/// Adds the ledger rows not stored yet to their parties' segments (see [`Engine::store`]).
fn insert_ledger(
    tx: &Transaction<'_>,
    dictionaries: &mut Dictionaries,
    engine: &mut Engine<i64>,
    rows: &[LedgerRow],
) -> Result<(), Error> {
    let mut lines = Vec::with_capacity(rows.len());
    for row in rows {
        let party = dictionaries.key(tx, Dictionary::Parties, row.party.as_bytes())?;
        let asset = dictionaries.key(tx, Dictionary::Assets, row.asset.as_bytes())?;
        let key = (
            row.key.vega_time.nanos(),
            Error::signed("block height", row.key.block)?,
            Error::signed("sequence number", row.key.seq)?,
            i64::from(row.key.index),
        );
        let csv = &row.csv_line[..];
        lines.push((party, Line { key, asset, csv }));
    }
    engine.store(&mut LedgerTable { tx }, lines).map(drop)
}

/// The segments of party `?1` that lines from key `(?2, ?3, ?4, ?5)` to vega time `?6` fall
/// among.
pub(super) const AMONG_SQL: &str = "SELECT last_time, last_block, last_seq, last_idx, \
     csv, keys, csv_sum, keys_sum FROM ledger_segments WHERE party = ?1 \
     AND (last_time, last_block, last_seq, last_idx) >= (?2, ?3, ?4, ?5) \
     AND first_time <= ?6";

/// The keys of party `?1`'s last `?3` segments, the last first, and whether each one's lines are
/// fewer than `?2` bytes.
pub(super) const LAST_SQL: &str = "SELECT last_time, last_block, last_seq, last_idx, \
     length(csv) < ?2 FROM ledger_segments WHERE party = ?1 \
     ORDER BY last_time DESC, last_block DESC, last_seq DESC, last_idx DESC LIMIT ?3";

/// The blobs of one segment, by its key.
pub(super) const TAIL_SQL: &str = "SELECT csv, keys, csv_sum, keys_sum FROM ledger_segments WHERE party = ?1 \
     AND last_time = ?2 AND last_block = ?3 AND last_seq = ?4 AND last_idx = ?5";

/// `ledger_segments` inside a batch's transaction, as the segment engine sees it.
struct LedgerTable<'a, 't> {
    tx: &'a Transaction<'t>,
}

impl SegmentTable for LedgerTable<'_, '_> {
    type Owner = i64;

    /// Two range searches of `ledger_segments_key` per party: the segments its lines fall
    /// among, then its last segments (the blobs only of those in the run; `length` of a blob
    /// reads only its record's header).
    fn touched(&mut self, asks: &[Ask<i64>], packing: Packing) -> Result<Touched<i64>, Error> {
        let mut among = self.tx.prepare_cached(AMONG_SQL).map_err(map_err)?;
        let mut last = self.tx.prepare_cached(LAST_SQL).map_err(map_err)?;
        let mut tail = self.tx.prepare_cached(TAIL_SQL).map_err(map_err)?;
        let small_tail = i64::try_from(packing.small_tail).unwrap_or(i64::MAX);
        let run = i64::try_from(packing.run).unwrap_or(i64::MAX);
        let mut read = Touched::default();
        for ask in asks {
            let (time, block, seq, idx) = ask.first;
            let mut rows = among
                .query(params![ask.owner, time, block, seq, idx, ask.last_time])
                .map_err(map_err)?;
            let mut stored = Vec::new();
            while let Some(row) = rows.next().map_err(map_err)? {
                let key = key_of(row)?;
                // Damage is found here rather than copied into the rebuilt segments under new
                // sums.
                let segment =
                    stored_segment(row, 4).map_err(|err| at_segment(err, ask.owner, row, 0))?;
                stored.push((key, segment));
            }
            let mut lasts = Vec::new();
            let mut rows = last
                .query(params![ask.owner, small_tail, run])
                .map_err(map_err)?;
            while let Some(row) = rows.next().map_err(map_err)? {
                lasts.push((key_of(row)?, row.get::<_, bool>(4).map_err(map_err)?));
            }
            let Some(&(last_key, _)) = lasts.first() else {
                continue;
            };
            read.last_keys.insert(ask.owner, last_key);
            if stored.is_empty() && last_key < ask.first {
                // The run: the last segments while they are small, the last first.
                for (key, _) in lasts.into_iter().take_while(|(_, small)| *small) {
                    let (time, block, seq, idx) = key;
                    let segment = tail
                        .query_row(params![ask.owner, time, block, seq, idx], |row| {
                            Ok(stored_segment(row, 0))
                        })
                        .map_err(map_err)?
                        .map_err(|err| {
                            err.at("ledger_segments", || {
                                segment::describe("party", ask.owner, key)
                            })
                        })?;
                    stored.push((key, segment));
                }
            }
            if !stored.is_empty() {
                read.stored.insert(ask.owner, stored);
            }
        }
        Ok(read)
    }

    fn delete(&mut self, keys: &[(i64, LineKey)]) -> Result<(), Error> {
        let mut delete = self
            .tx
            .prepare_cached(
                "DELETE FROM ledger_segments WHERE party = ?1 AND last_time = ?2 \
                 AND last_block = ?3 AND last_seq = ?4 AND last_idx = ?5",
            )
            .map_err(map_err)?;
        for (party, (time, block, seq, idx)) in keys {
            delete
                .execute(params![party, time, block, seq, idx])
                .map_err(map_err)?;
        }
        Ok(())
    }

    fn insert(&mut self, fresh: &[(i64, Segment)]) -> Result<(), Error> {
        let mut insert = self
            .tx
            .prepare_cached(
                "INSERT INTO ledger_segments (party, last_time, last_block, last_seq, last_idx, \
                 first_time, lines, csv_sum, keys_sum, csv, keys) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )
            .map_err(map_err)?;
        for (party, segment) in fresh {
            let (Some(first), Some((time, block, seq, idx))) =
                (segment.first_key(), segment.last_key())
            else {
                return Err(crate::Bug::EmptySegment.into());
            };
            let lines = i64::try_from(segment.lines()).map_err(|_| crate::Bug::TooManyLines)?;
            insert
                .execute(params![
                    party,
                    time,
                    block,
                    seq,
                    idx,
                    first.0,
                    lines,
                    checksum::to_sql(checksum::of(&segment.csv)),
                    checksum::to_sql(checksum::of(&segment.keys)),
                    segment.csv,
                    segment.keys
                ])
                .map_err(map_err)?;
        }
        Ok(())
    }
}

/// A stored segment from the columns `at..at + 4` of a row (lines, index and their checksums),
/// both blobs verified.
fn stored_segment(row: &rusqlite::Row<'_>, at: usize) -> Result<Segment, Error> {
    let csv = verified(row, (at, "csv"), at + 2)?;
    let keys = verified(row, (at + 1, "keys"), at + 3)?;
    Segment::from_stored(csv.to_vec(), keys.to_vec())
}

/// The key of a segment from the first four columns of a row.
fn key_of(row: &rusqlite::Row<'_>) -> Result<LineKey, Error> {
    let column = |i| row.get::<_, i64>(i).map_err(map_err);
    Ok((column(0)?, column(1)?, column(2)?, column(3)?))
}

/// The connection's `PRAGMA data_version`.
fn data_version(conn: &Connection) -> Result<i64, Error> {
    conn.query_row("PRAGMA data_version", [], |row| row.get(0))
        .map_err(map_err)
}

/// Inserts the oracle data not stored yet, and which specs each matched.
fn insert_oracle(
    tx: &Transaction<'_>,
    dictionaries: &mut Dictionaries,
    rows: &[OracleRow],
) -> Result<(), Error> {
    let mut insert_datum = tx
        .prepare_cached(
            "INSERT OR IGNORE INTO oracle_data (vega_time, block, seq, sum, json) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
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
            .execute(params![
                time,
                block,
                seq,
                checksum::to_sql(checksum::of(&row.json)),
                row.json
            ])
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

/// Records the blocks, merged with what is stored of them (see [`IngestBatch`]).
fn upsert_blocks(tx: &Transaction<'_>, blocks: &[BlockRecord]) -> Result<(), Error> {
    let mut upsert = tx
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
fn record_chain(tx: &Transaction<'_>, chain_id: &str) -> Result<(), Error> {
    let stored = tx
        .prepare_cached("SELECT value FROM schema_info WHERE key = 'chain_id'")
        .and_then(|mut stmt| stmt.query_row([], |row| row.get(0)).optional())
        .map_err(map_err)?;
    if tip::must_record(stored, chain_id)? {
        tx.execute(
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
        crate::backend::commit_whole(self, batch, Self::write, |writer| {
            writer.dictionaries = Dictionaries::default();
            writer.tails = PartyTails::default();
        })
    }
}
