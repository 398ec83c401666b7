//! The single writer: whole batches of blocks, in transactions of one batch or of several
//! (`IngestWriter::stage`).
//!
//! Ledger lines and oracle data are merged into their owners' segments (`segments.rs`): the
//! few stored segments a batch touches are read, rebuilt with its lines, deleted and copied in
//! again (binary `COPY`), all in the batch's transaction. A datum is a line of the segments of
//! all data and one of each spec it matched, the same bytes in each: a re-run that brings other
//! bytes for a stored datum (with a new match, say) writes the stored bytes. The batch's blocks
//! are copied in when they all lie above the highest stored one (a stream's new blocks), and
//! merged with the stored ones otherwise.

use std::collections::{HashMap, HashSet};

use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::Type;
use postgres::{Client, GenericClient};

use super::segments::{self, ALL_DATA, LEDGER, ORACLE};
use super::{map_err, schema};
use storage::Damage;
use storage::backend::Then;
use storage::segment::{self, Line};
use storage::tip;
use storage::{
    BlockRecord, BlockState, ChainState, Error, IngestBatch, IngestWriter, WriterOptions,
};

/// The advisory lock a writer holds for its whole session ("vegaingt").
const INGEST_LOCK: i64 = 0x7665_6761_696e_6774;

/// Writes ingested rows into a PostgreSQL store. Holds the database's ingest lock, a session
/// advisory lock, until dropped: closing the connection releases it, whatever way the writer
/// ends (a crash or `kill -9` included, as the server closes the session).
pub struct PgWriter {
    client: Client,
    dictionaries: Dictionaries,
    ledger: segments::Statements,
    oracle: segments::Statements,
    /// The highest stored block height (`i64::MIN`: none), once read; forgotten when a
    /// transaction fails.
    highest: Option<i64>,
    /// The partitions of `blocks` known to exist, by first height; forgotten when a
    /// transaction fails (an operator may have detached one meanwhile).
    block_partitions: HashSet<i64>,
    /// Whether a transaction is open, with batches staged in it.
    open: bool,
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
    tx: &mut Client,
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
            .map_err(|_| Damage::Value(format!("{table} holds an id of {} bytes", hex.len())))?;
        cache.insert(hex, row.get(0));
    }
    Ok(())
}

/// A block row: height, `seq_base`, hash, vega time, last sequence number.
type BlockRow = (i64, i64, Option<String>, Option<i64>, i64);

/// The blocks of a batch merged by (height, `seq_base`) as a store merges them: first hash and
/// vega time, highest sequence number. An `INSERT … ON CONFLICT DO UPDATE` may not touch one
/// row twice.
fn merged_blocks(blocks: &[BlockRecord]) -> Result<Vec<BlockRow>, Error> {
    let mut merged: Vec<BlockRow> = Vec::with_capacity(blocks.len());
    let mut at: HashMap<(i64, i64), usize> = HashMap::new();
    for block in blocks {
        let height = Error::signed("block height", block.height)?;
        let base = Error::signed("sequence number", block.seq_base)?;
        let seq = Error::signed("sequence number", block.state.last_seq)?;
        match at.get(&(height, base)) {
            Some(&i) => {
                let entry = &mut merged[i];
                entry.2 = entry.2.take().or_else(|| block.hash.clone());
                entry.3 = entry.3.or(block.state.vega_time);
                entry.4 = entry.4.max(seq);
            }
            None => {
                at.insert((height, base), merged.len());
                merged.push((height, base, block.hash.clone(), block.state.vega_time, seq));
            }
        }
    }
    Ok(merged)
}

/// Records the chain id when none is stored; refuses another one.
fn record_chain(tx: &mut Client, chain_id: &str) -> Result<(), Error> {
    let stored = tx
        .query_opt("SELECT value FROM schema_info WHERE key = 'chain_id'", &[])
        .map_err(map_err)?
        .map(|row| row.get(0));
    if tip::must_record(stored, chain_id)? {
        tx.execute(
            "INSERT INTO schema_info (key, value) VALUES ('chain_id', $1)",
            &[&chain_id],
        )
        .map_err(map_err)?;
    }
    Ok(())
}

/// The chain id and the first and last stored blocks (one statement, so one snapshot).
pub(super) fn chain_state(client: &mut impl GenericClient) -> Result<ChainState, Error> {
    let row = client.query_one(tip::CHAIN_SQL, &[]).map_err(map_err)?;
    tip::chain_from_row(
        row.get(0),
        (row.get(1), row.get(2)),
        (row.get(3), row.get(4)),
    )
}

impl PgWriter {
    pub(super) fn new(mut client: Client, options: &WriterOptions) -> Result<Self, Error> {
        let locked: bool = client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&INGEST_LOCK])
            .map_err(map_err)?
            .get(0);
        if !locked {
            return Err(Error::Busy);
        }
        Ok(Self {
            ledger: segments::Statements::prepare(&mut client, &LEDGER, options)?,
            oracle: segments::Statements::prepare(&mut client, &ORACLE, options)?,
            client,
            highest: None,
            block_partitions: HashSet::new(),
            dictionaries: Dictionaries::default(),
            open: false,
        })
    }

    /// Makes the partitions of `blocks` the batch's blocks need before its transaction, each
    /// in a short one of its own: making one locks `blocks` against its readers for as long
    /// as its transaction lasts.
    fn partition_blocks(&mut self, blocks: &[BlockRow]) -> Result<(), Error> {
        let needed: Vec<i64> = blocks
            .iter()
            .map(|block| schema::block_partition(block.0))
            .filter(|first| !self.block_partitions.contains(first))
            .collect();
        if needed.is_empty() {
            return Ok(());
        }
        schema::ensure_block_partitions(&mut self.client, needed.iter().copied())?;
        self.block_partitions.extend(needed);
        Ok(())
    }

    /// Writes the batch into the open transaction, beginning one, then commits when `then`
    /// says so.
    fn write(&mut self, batch: &IngestBatch, then: Then) -> Result<(), Error> {
        if batch.is_empty() && !self.open {
            return Ok(());
        }
        let blocks = merged_blocks(&batch.blocks)?;
        if self.open && self.needs_partitions(&blocks) {
            // Made outside any transaction (below): what is staged is committed first.
            self.finish()?;
        }
        if !self.open {
            self.partition_blocks(&blocks)?;
            self.client.batch_execute("BEGIN").map_err(map_err)?;
            self.open = true;
        }
        let tx = &mut self.client;
        let dictionaries = &mut self.dictionaries;
        resolve(
            tx,
            &mut dictionaries.parties,
            "parties",
            batch.ledger_rows.iter().map(|row| row.party.as_bytes()),
        )?;
        resolve(
            tx,
            &mut dictionaries.assets,
            "assets",
            batch.ledger_rows.iter().map(|row| row.asset.as_bytes()),
        )?;
        resolve(
            tx,
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
        segments::store(tx, &mut self.ledger, ledger, then)?;
        // Each datum under `ALL_DATA`, then its matches under their specs.
        let specs = &dictionaries.specs;
        segment::store_oracle(
            &batch.oracle_rows,
            ALL_DATA,
            |spec| Ok(specs[spec]),
            |lines| segments::store(tx, &mut self.oracle, lines, then),
        )?;
        let highest = match self.highest {
            Some(highest) => highest,
            None => max_height(tx)?,
        };
        store_blocks(tx, &blocks, highest)?;
        if let Some(chain_id) = &batch.chain_id {
            record_chain(tx, chain_id)?;
        }
        let batch_highest = blocks.iter().map(|block| block.0).max();
        // Within the open transaction: forgotten with it if it fails.
        self.highest = Some(highest.max(batch_highest.unwrap_or(i64::MIN)));
        match then {
            Then::Commit => self.finish(),
            Then::KeepOpen => Ok(()),
        }
    }

    /// Whether the blocks need a partition of `blocks` not known to exist.
    fn needs_partitions(&self, blocks: &[BlockRow]) -> bool {
        blocks.iter().any(|block| {
            !self
                .block_partitions
                .contains(&schema::block_partition(block.0))
        })
    }

    /// Commits the open transaction, announcing its highest block to the servers that listen
    /// (`tip.rs`): PostgreSQL delivers the notification once the commit is visible, and not at
    /// all if it fails.
    fn finish(&mut self) -> Result<(), Error> {
        segments::write_held(&mut self.client, &mut self.ledger)?;
        segments::write_held(&mut self.client, &mut self.oracle)?;
        let highest = self.highest.unwrap_or(i64::MIN);
        self.client
            .batch_execute(&format!(
                "NOTIFY {}, '{highest}'; COMMIT",
                super::tip::CHANNEL
            ))
            .map_err(map_err)?;
        self.open = false;
        Ok(())
    }

    /// After a failed write: rolls the open transaction back and forgets what the writer
    /// cached from it.
    fn undo(&mut self) {
        if self.open {
            // A broken connection has rolled back already, and fails every later write.
            let _ = self.client.batch_execute("ROLLBACK");
            self.open = false;
        }
        self.dictionaries = Dictionaries::default();
        self.highest = None;
        self.block_partitions.clear();
        self.ledger.forget();
        self.oracle.forget();
    }
}

/// The highest stored block height, `i64::MIN` when none is stored.
fn max_height(client: &mut impl GenericClient) -> Result<i64, Error> {
    let row = client
        .query_one("SELECT max(height) FROM blocks", &[])
        .map_err(map_err)?;
    Ok(row.get::<_, Option<i64>>(0).unwrap_or(i64::MIN))
}

/// Stores a batch's merged blocks. Blocks above every stored one (`highest`), as a stream's
/// new blocks are, are copied straight in (a third of the time of the upsert, per batch of a
/// few thousand); otherwise each is merged with the stored one, if any, as the trait says.
fn store_blocks(tx: &mut Client, blocks: &[BlockRow], highest: i64) -> Result<(), Error> {
    if blocks.is_empty() {
        return Ok(());
    }
    if blocks.iter().all(|block| block.0 > highest) {
        let sink = tx
            .copy_in(
                "COPY blocks (height, seq_base, hash, vega_time, last_seq) \
                 FROM STDIN (FORMAT binary)",
            )
            .map_err(map_err)?;
        let types = [Type::INT8, Type::INT8, Type::TEXT, Type::INT8, Type::INT8];
        let mut writer = BinaryCopyInWriter::new(sink, &types);
        for (height, base, hash, time, seq) in blocks {
            writer
                .write(&[height, base, hash, time, seq])
                .map_err(map_err)?;
        }
        writer.finish().map_err(map_err)?;
        return Ok(());
    }
    let heights: Vec<i64> = blocks.iter().map(|block| block.0).collect();
    let bases: Vec<i64> = blocks.iter().map(|block| block.1).collect();
    let hashes: Vec<Option<&str>> = blocks.iter().map(|block| block.2.as_deref()).collect();
    let times: Vec<Option<i64>> = blocks.iter().map(|block| block.3).collect();
    let seqs: Vec<i64> = blocks.iter().map(|block| block.4).collect();
    tx.execute(
        "INSERT INTO blocks (height, seq_base, hash, vega_time, last_seq) \
         SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::bigint[]) \
         ON CONFLICT (height, seq_base) DO UPDATE SET \
         hash = coalesce(blocks.hash, excluded.hash), \
         vega_time = coalesce(blocks.vega_time, excluded.vega_time), \
         last_seq = greatest(blocks.last_seq, excluded.last_seq)",
        &[&heights, &bases, &hashes, &times, &seqs],
    )
    .map_err(map_err)?;
    Ok(())
}

impl IngestWriter for PgWriter {
    fn chain(&mut self) -> Result<ChainState, Error> {
        chain_state(&mut self.client)
    }

    fn blocks(&mut self, height: u64) -> Result<Vec<BlockRecord>, Error> {
        // No stored block is that high: heights are stored as signed 64-bit integers.
        let Ok(signed) = i64::try_from(height) else {
            return Ok(Vec::new());
        };
        let rows = self
            .client
            .query(
                "SELECT seq_base, hash, vega_time, last_seq FROM blocks WHERE height = $1 \
                 ORDER BY seq_base",
                &[&signed],
            )
            .map_err(map_err)?;
        Ok(rows
            .into_iter()
            .map(|row| BlockRecord {
                height,
                seq_base: row.get::<_, i64>(0) as u64,
                hash: row.get(1),
                state: BlockState {
                    vega_time: row.get(2),
                    last_seq: row.get::<_, i64>(3) as u64,
                },
            })
            .collect())
    }
    fn commit(&mut self, batch: &IngestBatch) -> Result<(), Error> {
        storage::backend::write_whole(self, batch, Then::Commit, Self::write, Self::undo)
    }

    fn stage(&mut self, batch: &IngestBatch) -> Result<(), Error> {
        storage::backend::write_whole(self, batch, Then::KeepOpen, Self::write, Self::undo)
    }

    /// 32 batches: PostgreSQL's commits cost the most per party (each party's new segment is
    /// a row, its TOAST chunks and an index entry in a random leaf), so a bulk load of many
    /// parties runs in transactions of up to 32 batches (still ended by `max_batch_age`),
    /// which ingested the 16× stream 11–61 % faster than four did (docs/PERFORMANCE.md,
    /// "Longer transactions on PostgreSQL" and "Catch-ups commit every 10 s").
    fn transaction_batches(&self) -> usize {
        TRANSACTION_BATCHES
    }
}

/// What [`PgWriter`] answers to [`IngestWriter::transaction_batches`].
const TRANSACTION_BATCHES: usize = 32;
