//! The single writer: whole batches of blocks, each one transaction.
//!
//! Ledger lines are merged into their parties' segments (`segments.rs`): the few stored
//! segments a batch touches are read, rebuilt with its lines, deleted and copied in again
//! (binary `COPY`), all in the batch's transaction.
//!
//! Oracle rows are copied (binary `COPY`) straight into their tables when they are new, the
//! usual case; a batch that holds rows stored already (a re-run over blocks stored before) goes
//! through temporary staging tables instead, moved into the real ones with one `INSERT … SELECT
//! … ON CONFLICT DO NOTHING` per table, which leaves stored rows as they are. Either way a row
//! costs no statement of its own (see `store`). Each match (`oracle_spec_data`) carries its
//! datum's JSON too, borrowed from the batch like the datum's own: the bytes are copied once
//! per row, into the `COPY` buffer.

use std::collections::{HashMap, HashSet};

use postgres::binary_copy::BinaryCopyInWriter;
use postgres::error::SqlState;
use postgres::types::{ToSql, Type};
use postgres::{Client, Transaction};

use super::{map_err, segments};
use crate::segment::Line;
use crate::{BlockRecord, BlockState, Error, IngestBatch, IngestWriter};

/// The advisory lock a writer holds for its whole session ("vegaingt").
const INGEST_LOCK: i64 = 0x7665_6761_696e_6774;

/// Staging tables, private to the writer's session and emptied by every commit. Each has the
/// columns of its table, so that the rows copied into either are the same; `stage_spec.json` is
/// not read (see the merge of `oracle_spec_data`).
const STAGING: &str = "
    CREATE TEMP TABLE stage_oracle (vega_time bigint, block bigint, seq bigint, json bytea)
        ON COMMIT DELETE ROWS;
    CREATE TEMP TABLE stage_spec (spec integer, vega_time bigint, block bigint, seq bigint,
                                  json bytea)
        ON COMMIT DELETE ROWS;
";

/// Writes ingested rows into a PostgreSQL store. Holds the database's ingest lock, a session
/// advisory lock, until dropped: closing the connection releases it, whatever way the writer
/// ends (a crash or `kill -9` included, as the server closes the session).
pub struct PgWriter {
    client: Client,
    dictionaries: Dictionaries,
    segments: segments::Statements,
}

impl std::fmt::Debug for PgWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgWriter").finish_non_exhaustive()
    }
}

/// Caches of the id dictionaries; only ever filled from committed state or the current
/// transaction, and cleared when a transaction fails.
#[derive(Default)]
struct Dictionaries {
    parties: HashMap<[u8; 32], i32>,
    assets: HashMap<[u8; 32], i32>,
    specs: HashMap<[u8; 32], i32>,
}

/// Adds the ids in `hexes` not yet known to the dictionary `table` and caches all of them.
fn resolve<'h>(
    tx: &mut Transaction<'_>,
    cache: &mut HashMap<[u8; 32], i32>,
    table: &str,
    hexes: impl Iterator<Item = &'h [u8; 32]>,
) -> Result<(), Error> {
    let missing: HashSet<&[u8; 32]> = hexes.filter(|hex| !cache.contains_key(*hex)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let missing: Vec<&[u8]> = missing.into_iter().map(|hex| &hex[..]).collect();
    tx.execute(
        &format!(
            "INSERT INTO {table} (hex) SELECT unnest($1::bytea[]) ON CONFLICT (hex) DO NOTHING"
        ),
        &[&missing],
    )
    .map_err(map_err)?;
    for row in tx
        .query(
            &format!("SELECT id, hex FROM {table} WHERE hex = ANY($1)"),
            &[&missing],
        )
        .map_err(map_err)?
    {
        let hex: &[u8] = row.get(1);
        let hex: [u8; 32] = hex
            .try_into()
            .map_err(|_| Error::Corrupt(format!("{table} holds an id of {} bytes", hex.len())))?;
        cache.insert(hex, row.get(0));
    }
    Ok(())
}

/// The rows of a batch bound for one table.
struct Load<'r> {
    table: &'static str,
    /// The staging table of the same columns.
    staging: &'static str,
    /// The statement that moves the staged rows not stored yet into the table.
    merge: &'static str,
    types: &'static [Type],
    rows: Vec<Vec<&'r (dyn ToSql + Sync)>>,
}

/// Copies `rows` into `table` with binary `COPY`.
pub(super) fn copy_in(
    tx: &mut Transaction<'_>,
    table: &str,
    types: &[Type],
    rows: &[Vec<&(dyn ToSql + Sync)>],
) -> Result<(), postgres::Error> {
    if rows.is_empty() {
        return Ok(());
    }
    let sink = tx.copy_in(&format!("COPY {table} FROM STDIN (FORMAT binary)"))?;
    let mut writer = BinaryCopyInWriter::new(sink, types);
    for row in rows {
        writer.write(row)?;
    }
    writer.finish()?;
    Ok(())
}

impl Load<'_> {
    /// Copies the rows into `table` with binary `COPY`.
    fn copy(&self, tx: &mut Transaction<'_>, table: &str) -> Result<(), postgres::Error> {
        copy_in(tx, table, self.types, &self.rows)
    }

    /// Copies the rows into the staging table and moves those not stored yet into the table.
    fn merge(&self, tx: &mut Transaction<'_>) -> Result<(), Error> {
        if self.rows.is_empty() {
            return Ok(());
        }
        self.copy(tx, self.staging).map_err(map_err)?;
        tx.execute(self.merge, &[]).map_err(map_err)?;
        Ok(())
    }
}

/// Stores the rows of `loads`. New rows, the usual case, are copied straight into their
/// tables: a heap and an index insert each, no staging, no sort, no conflict check. A batch
/// with a row stored already (a re-run over stored blocks, or a row twice in one batch) fails
/// that copy with a unique violation; it is rolled back to a savepoint and the batch goes
/// through the staging tables instead, in the order of `loads`, where `ON CONFLICT DO NOTHING`
/// keeps stored rows as they are. Either way the outcome is the same rows, in the caller's one
/// transaction.
fn store(tx: &mut Transaction<'_>, loads: &[Load<'_>]) -> Result<(), Error> {
    if loads.iter().all(|load| load.rows.is_empty()) {
        return Ok(());
    }
    let mut direct = tx.savepoint("direct").map_err(map_err)?;
    match loads
        .iter()
        .try_for_each(|load| load.copy(&mut direct, load.table))
    {
        Ok(()) => direct.commit().map_err(map_err),
        Err(err) if err.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
            direct.rollback().map_err(map_err)?;
            loads.iter().try_for_each(|load| load.merge(tx))
        }
        Err(err) => Err(map_err(err)),
    }
}

/// The blocks of a batch merged by height as a store merges them: first vega time, highest
/// sequence number. An `INSERT … ON CONFLICT DO UPDATE` may not touch one row twice.
fn merged_blocks(blocks: &[BlockRecord]) -> Result<Vec<(i64, Option<i64>, i64)>, Error> {
    let mut merged: Vec<(i64, Option<i64>, i64)> = Vec::with_capacity(blocks.len());
    let mut at: HashMap<i64, usize> = HashMap::new();
    for block in blocks {
        let height = Error::signed("block height", block.height)?;
        let seq = Error::signed("sequence number", block.state.last_seq)?;
        match at.get(&height) {
            Some(&i) => {
                let entry = &mut merged[i];
                entry.1 = entry.1.or(block.state.vega_time);
                entry.2 = entry.2.max(seq);
            }
            None => {
                at.insert(height, merged.len());
                merged.push((height, block.state.vega_time, seq));
            }
        }
    }
    Ok(merged)
}

impl PgWriter {
    pub(super) fn new(mut client: Client) -> Result<Self, Error> {
        let locked: bool = client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&INGEST_LOCK])
            .map_err(map_err)?
            .get(0);
        if !locked {
            return Err(Error::Busy(
                "another ingest is writing to this database (it holds the ingest lock); wait for \
                 it to finish or stop it, then run this one again"
                    .to_owned(),
            ));
        }
        client.batch_execute(STAGING).map_err(map_err)?;
        Ok(Self {
            segments: segments::Statements::prepare(&mut client)?,
            client,
            dictionaries: Dictionaries::default(),
        })
    }

    fn write(&mut self, batch: &IngestBatch) -> Result<(), Error> {
        let blocks = merged_blocks(&batch.blocks)?;
        let mut tx = self.client.transaction().map_err(map_err)?;
        let dictionaries = &mut self.dictionaries;
        resolve(
            &mut tx,
            &mut dictionaries.parties,
            "parties",
            batch.ledger_rows.iter().map(|row| row.party.as_bytes()),
        )?;
        resolve(
            &mut tx,
            &mut dictionaries.assets,
            "assets",
            batch.ledger_rows.iter().map(|row| row.asset.as_bytes()),
        )?;
        resolve(
            &mut tx,
            &mut dictionaries.specs,
            "oracle_specs",
            batch
                .oracle_rows
                .iter()
                .flat_map(|row| row.matched_specs.iter().map(|spec| spec.as_bytes())),
        )?;

        let mut ledger = Vec::with_capacity(batch.ledger_rows.len());
        for row in &batch.ledger_rows {
            let key = (
                row.key.vega_time.nanos(),
                Error::signed("block height", row.key.block)?,
                Error::signed("sequence number", row.key.seq)?,
                i64::from(row.key.index),
            );
            let asset = i64::from(dictionaries.assets[row.asset.as_bytes()]);
            let line = Line {
                key,
                asset,
                csv: &row.csv_line[..],
            };
            ledger.push((dictionaries.parties[row.party.as_bytes()], line));
        }
        let mut oracle = Vec::with_capacity(batch.oracle_rows.len());
        let mut matches = Vec::new();
        for row in &batch.oracle_rows {
            let position = (
                row.position.vega_time,
                Error::signed("block height", row.position.block)?,
                Error::signed("sequence number", row.position.seq)?,
            );
            let json = &row.json[..];
            oracle.push((position, json));
            for spec in &row.matched_specs {
                matches.push((dictionaries.specs[spec.as_bytes()], position, json));
            }
        }

        // In key order: each leaf of the primary key is then touched once per batch, and a
        // spec's matches of one batch share heap pages, which its pages read together.
        matches.sort_unstable_by_key(|(spec, position, _)| (*spec, *position));
        let oracle = Load {
            table: "oracle_data",
            staging: "stage_oracle",
            // In key order, so that each index page is touched once per batch.
            merge: "INSERT INTO oracle_data SELECT * FROM stage_oracle \
                    ORDER BY vega_time, block, seq ON CONFLICT DO NOTHING",
            types: &[Type::INT8, Type::INT8, Type::INT8, Type::BYTEA],
            rows: oracle
                .iter()
                .map(|((time, block, seq), json)| {
                    vec![time as &(dyn ToSql + Sync), block, seq, json]
                })
                .collect(),
        };
        let matches = Load {
            table: "oracle_spec_data",
            staging: "stage_spec",
            // A match's JSON is its datum's as stored, merged just before: a re-run that
            // brings other bytes for a stored datum adds its new matches with the stored bytes,
            // so a datum reads the same overall and in every spec (as SQLite's join reads it).
            // A lookup of the primary key per staged row; only re-runs come this way.
            merge: "INSERT INTO oracle_spec_data SELECT s.spec, s.vega_time, s.block, s.seq, \
                    (SELECT d.json FROM oracle_data d WHERE d.vega_time = s.vega_time \
                     AND d.block = s.block AND d.seq = s.seq) \
                    FROM stage_spec s ORDER BY s.spec, s.vega_time, s.block, s.seq \
                    ON CONFLICT DO NOTHING",
            types: &[Type::INT4, Type::INT8, Type::INT8, Type::INT8, Type::BYTEA],
            rows: matches
                .iter()
                .map(|(spec, (time, block, seq), json)| {
                    vec![spec as &(dyn ToSql + Sync), time, block, seq, json]
                })
                .collect(),
        };
        segments::store(&mut tx, &self.segments, ledger)?;
        store(&mut tx, &[oracle, matches])?;
        if !blocks.is_empty() {
            let heights: Vec<i64> = blocks.iter().map(|block| block.0).collect();
            let times: Vec<Option<i64>> = blocks.iter().map(|block| block.1).collect();
            let seqs: Vec<i64> = blocks.iter().map(|block| block.2).collect();
            tx.execute(
                "INSERT INTO blocks (height, vega_time, last_seq) \
                 SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) \
                 ON CONFLICT (height) DO UPDATE SET \
                 vega_time = coalesce(blocks.vega_time, excluded.vega_time), \
                 last_seq = greatest(blocks.last_seq, excluded.last_seq)",
                &[&heights, &times, &seqs],
            )
            .map_err(map_err)?;
        }
        tx.commit().map_err(map_err)
    }
}

impl IngestWriter for PgWriter {
    fn last_block(&mut self) -> Result<Option<u64>, Error> {
        let row = self
            .client
            .query_one("SELECT max(height) FROM blocks", &[])
            .map_err(map_err)?;
        Ok(row.get::<_, Option<i64>>(0).map(|height| height as u64))
    }

    fn block_state(&mut self, height: u64) -> Result<Option<BlockState>, Error> {
        // No stored block is that high: heights are stored as signed 64-bit integers.
        let Ok(height) = i64::try_from(height) else {
            return Ok(None);
        };
        let row = self
            .client
            .query_opt(
                "SELECT vega_time, last_seq FROM blocks WHERE height = $1",
                &[&height],
            )
            .map_err(map_err)?;
        Ok(row.map(|row| BlockState {
            vega_time: row.get(0),
            last_seq: row.get::<_, i64>(1) as u64,
        }))
    }

    fn commit(&mut self, batch: &IngestBatch) -> Result<(), Error> {
        crate::model::commit_whole(self, batch, Self::write, |writer| {
            writer.dictionaries = Dictionaries::default();
        })
    }
}
