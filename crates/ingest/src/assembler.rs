//! The assembler: follows blocks and the vega time, stamps rows with their block's time, skips
//! what an earlier run stored, and gathers complete blocks into batches for the writer.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Instant;

use std::sync::Arc;

use ledger_core::{EntryKey, PartyId, VegaTime, VegaTimeColumn, restamp};
use oracle_core::Position;
use storage::backend::Then;
use storage::{BlockRecord, BlockState, ChainState, IngestBatch, LedgerRow, OracleRow};

use crate::frames::PeerControl;
use crate::pipeline::{IngestOptions, ROWS_PER_PARTY};
use crate::prepare::{Item, Label, Prepared};
use crate::reader::{Chunks, Message};
use crate::writer::{Done, IN_FLIGHT, Job, StoreHandle};
use crate::{IngestError, IngestStats, StreamError};

/// The block being assembled.
struct OpenBlock {
    height: u64,
    /// Its hash, when the stream names one.
    hash: Option<Arc<str>>,
    /// Added to its events' sequence numbers in the rows' keys (see [`BlockRecord`]).
    seq_base: u64,
    /// What an earlier run already stored of this block: its events are skipped.
    stored: Option<BlockState>,
    vega_time: Option<i64>,
    last_seq: u64,
    /// The highest sequence number taken into this block in this run: a resent event at or
    /// below it is a duplicate.
    seen_seq: Option<u64>,
    /// Its peer went away mid-block: only the same block's events may continue it.
    interrupted: bool,
    ledger_rows: Vec<LedgerRow>,
    oracle_rows: Vec<OracleRow>,
    events: u64,
    entries: u64,
}

/// What the assembler knows of the chain, to hold the stream to its rules (see
/// [`StreamError`]).
struct Chain {
    /// The chain id, stored or of the stream's first block that named one.
    id: Option<Arc<str>>,
    /// Whether the store has yet to record `id`: the next batch carries it.
    record_id: bool,
    /// The chain's first height, stored or of this run's first block: the one height with two
    /// blocks.
    first_height: Option<u64>,
    /// The last stored height when the run began: the stream's first block may not lie above
    /// the one after it.
    stored_last: Option<u64>,
    /// The height of this run's last complete block (kept, or found stored): a block dropped
    /// as incomplete leaves a hole that the next block may not skip.
    previous: Option<u64>,
}

impl Chain {
    fn new(stored: ChainState) -> Self {
        Self {
            id: stored.chain_id.map(Arc::from),
            record_id: false,
            first_height: stored.first.map(|block| block.height),
            stored_last: stored.last.map(|block| block.height),
            previous: None,
        }
    }

    /// Checks a new block's chain id and height against the chain before it is opened.
    fn check(&mut self, height: u64, label: &Label) -> Result<(), StreamError> {
        if let Some(found) = &label.chain_id {
            match &self.id {
                Some(stored) if stored != found => {
                    return Err(StreamError::OtherChain {
                        stored: stored.to_string(),
                        found: found.to_string(),
                    });
                }
                Some(_) => {}
                None => {
                    self.id = Some(Arc::clone(found));
                    self.record_id = true;
                }
            }
        }
        match (self.previous, self.stored_last) {
            (Some(from), _) if height > from + 1 => Err(StreamError::Missing {
                missing: from + 1,
                from,
                to: height,
            }),
            (None, Some(stored)) if height > stored + 1 => Err(StreamError::MissingAfterStored {
                missing: stored + 1,
                stored,
                to: height,
            }),
            _ => Ok(()),
        }
    }
}

pub(crate) struct Assembler<'o, 'p> {
    store: StoreHandle,
    options: &'o IngestOptions<'o>,
    /// The most batches a transaction spans (the writer's
    /// [`transaction_batches`](storage::IngestWriter::transaction_batches)).
    growth: usize,
    progress: &'p mut dyn FnMut(&IngestStats),
    chain: Chain,
    /// For a live source: closes a connection whose stream breaks the chain's rules.
    peer: Option<PeerControl>,
    /// Connections of a live source ended so far (see [`PeerControl`]).
    connection: u64,
    /// The current connection's stream was refused: its events are dropped until it ends.
    refused: bool,
    /// Heights up to this one may be stored already (by an earlier run, or earlier in this
    /// one) and are looked up; higher ones are new.
    known_height: Option<u64>,
    /// The current vega time: set by time events, carried across blocks.
    vega_time: Option<i64>,
    /// The `vega_time` column of the last time stamped: blocks share one time.
    time_column: Option<(i64, VegaTimeColumn)>,
    /// Whether this stream marks block ends, which tells a cut-off last block from a whole one.
    saw_end_block: bool,
    block: Option<OpenBlock>,
    batch: IngestBatch,
    /// A written batch back from the writer, whose buffers the next batch reuses once its
    /// rows are freed (see [`Self::flush`]).
    spare: Option<IngestBatch>,
    /// The transaction: the batches staged in it (written, not committed) and the batch.
    transaction: Transaction,
    /// The counters of the batch.
    pending: IngestStats,
    /// The counters of the staged batches, reported once they are committed.
    staged: IngestStats,
    stats: IngestStats,
}

/// The transaction the writer has open, if any, with the batch that will join it: what the
/// assembler weighs to decide when it is committed (see [`Assembler::due`]).
#[derive(Default)]
struct Transaction {
    /// When its first block was complete.
    started: Option<Instant>,
    /// The parties whose ledger rows it holds, staged or in the batch.
    parties: HashSet<PartyId>,
    /// The rows of its staged batches.
    staged_rows: usize,
    /// Whether any batch is staged in it: the writer has it open.
    open: bool,
}

impl<'o, 'p> Assembler<'o, 'p> {
    pub(crate) fn new(
        store: StoreHandle,
        options: &'o IngestOptions<'o>,
        growth: usize,
        stored: ChainState,
        peer: Option<PeerControl>,
        progress: &'p mut dyn FnMut(&IngestStats),
    ) -> Self {
        Self {
            store,
            options,
            growth,
            progress,
            known_height: stored.last.map(|block| block.height),
            chain: Chain::new(stored),
            peer,
            connection: 0,
            refused: false,
            vega_time: None,
            time_column: None,
            saw_end_block: false,
            block: None,
            batch: IngestBatch::default(),
            spare: None,
            transaction: Transaction::default(),
            pending: IngestStats::default(),
            staged: IngestStats::default(),
            stats: IngestStats::default(),
        }
    }

    pub(crate) fn run(&mut self, chunks: &mut Chunks) -> Result<IngestStats, IngestError> {
        loop {
            let chunk = match chunks.recv_timeout(self.options.idle_commit) {
                Ok(chunk) => chunk,
                Err(RecvTimeoutError::Timeout) => {
                    // The input is quiet: make what is complete visible, and report it. A stop
                    // asked meanwhile is honoured now rather than at the next block.
                    self.commit()?;
                    if self.stop_requested() {
                        return Ok(self.stats.clone());
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            };
            for message in chunk {
                let event = match message {
                    Message::Event(event) => event,
                    Message::PeerGone => {
                        // The rest of the open block may come on the next connection; what is
                        // complete is committed now.
                        if let Some(block) = &mut self.block {
                            block.interrupted = true;
                        }
                        self.connection_ended();
                        self.commit()?;
                        continue;
                    }
                    Message::Refused => {
                        // The refused record may have belonged to the open block: drop it whole.
                        self.drop_block();
                        self.connection_ended();
                        self.commit()?;
                        continue;
                    }
                    Message::Failed(err) => {
                        // Earlier complete blocks stay; the block of the bad record is dropped
                        // whole.
                        self.block = None;
                        self.commit()?;
                        return Err(err);
                    }
                };
                if self.refused {
                    // Sent on a connection already asked to close.
                    continue;
                }
                let accepted = match self.accept(event) {
                    Err(IngestError::Stream(err)) => self.refuse(err),
                    accepted => accepted,
                };
                if accepted? {
                    // A block boundary: the place to commit or to stop.
                    if let Some(then) = self.due() {
                        self.flush(then)?;
                    }
                    if self.stop_requested() {
                        self.commit()?;
                        return Ok(self.stats.clone());
                    }
                }
            }
        }
        // End of input: a last block with no END_BLOCK in a stream that has them was cut off.
        if let Some(block) = self.block.take() {
            if self.saw_end_block {
                self.stats.incomplete_events += block.events;
            } else {
                self.close(block);
            }
        }
        self.commit()?;
        Ok(self.stats.clone())
    }

    fn stop_requested(&self) -> bool {
        self.options
            .stop
            .is_some_and(|stop| stop.load(Ordering::Relaxed))
    }

    /// What the batch's block boundary does: nothing yet (`None`), or the batch goes to the
    /// writer, which then commits or keeps its transaction open. It goes once it holds
    /// `max_batch_rows` rows, and its transaction is committed once it is old, or holds
    /// `max_batch_rows` rows and [`ROWS_PER_PARTY`] rows per party for each batch it may span,
    /// or as many batches as it may span ([`Self::growth`]) whatever the parties; a batch sent
    /// before that is staged in the transaction.
    ///
    /// A commit's cost grows with the parties it touches more than with its rows: each one's
    /// newest segment and the page that holds it are written again. A stream of many parties
    /// with a few rows each (many small traders) is committed in fewer, larger transactions;
    /// one of a few busy parties is committed every `max_batch_rows` rows as before. Either
    /// way the rows held in memory are at most `IN_FLIGHT` + 1 batches of `max_batch_rows` (sent
    /// to the writer, and filling), whatever the parties.
    fn due(&self) -> Option<Then> {
        let rows = self.batch.ledger_rows.len() + self.batch.oracle_rows.len();
        let transaction = &self.transaction;
        let total = transaction.staged_rows + rows;
        let max_rows = self.options.max_batch_rows;
        let aged = transaction
            .started
            .is_some_and(|started| started.elapsed() >= self.options.max_batch_age);
        let rows_per_party = ROWS_PER_PARTY.saturating_mul(self.growth);
        let worth =
            total >= max_rows && total >= rows_per_party.saturating_mul(transaction.parties.len());
        if aged || worth || total >= max_rows.saturating_mul(self.growth) {
            Some(Then::Commit)
        } else if rows >= max_rows {
            Some(Then::KeepOpen)
        } else {
            None
        }
    }

    /// A live source's connection ended: the next one starts afresh.
    fn connection_ended(&mut self) {
        self.connection += 1;
        self.refused = false;
    }

    /// The stream broke the chain's rules: a live source's connection is closed and the
    /// ingest goes on with the next one; any other input stops, with every complete block
    /// before the one that broke them committed.
    fn refuse(&mut self, err: StreamError) -> Result<bool, IngestError> {
        self.drop_block();
        self.commit()?;
        let Some(peer) = &self.peer else {
            return Err(err.into());
        };
        tracing::error!("{err}; closing the connection");
        peer.close(self.connection);
        self.refused = true;
        Ok(false)
    }

    /// Drops the open block, if any, as incomplete.
    fn drop_block(&mut self) {
        if let Some(block) = self.block.take() {
            self.stats.incomplete_events += block.events;
        }
    }

    /// Takes one event; returns true when it closed a block.
    fn accept(&mut self, event: Prepared) -> Result<bool, IngestError> {
        let mut closed = false;
        if self
            .block
            .as_ref()
            .is_some_and(|block| !block.is(event.height, &event.label))
        {
            let block = self.block.take().expect("checked above");
            if block.interrupted {
                // Its peer went away and the next one went on with another block: its rest
                // never came.
                self.stats.incomplete_events += block.events;
            } else {
                self.close(block);
                closed = true;
            }
        }
        if self.block.is_none() {
            self.open(event.height, &event.label)?;
        }
        let block = self.block.as_mut().expect("opened above");
        let seq = block.seq_base + event.seq;
        block.interrupted = false;
        block.last_seq = block.last_seq.max(event.seq);
        let skip = block
            .stored
            .is_some_and(|stored| event.seq <= stored.last_seq)
            || block.seen_seq.is_some_and(|seen| event.seq <= seen);
        block.seen_seq = block.seen_seq.max(Some(event.seq));
        if skip {
            self.stats.skipped_events += 1;
        } else {
            block.events += 1;
        }
        match event.item {
            Item::Time(time) => {
                self.vega_time = Some(time);
                block.vega_time.get_or_insert(time);
            }
            Item::EndBlock => {
                self.saw_end_block = true;
                let block = self.block.take().expect("present");
                self.close(block);
                return Ok(true);
            }
            Item::Other => {}
            Item::Ledger { .. } | Item::Oracle { .. } if skip => {}
            Item::Ledger { entries, rows } => {
                for mut row in rows {
                    // Before any time event an entry keeps its own timestamp, which the reader
                    // already wrote into its row.
                    let time = match self.vega_time {
                        Some(time) => {
                            restamp(
                                &mut row.csv_line,
                                cached_column(&mut self.time_column, time),
                            );
                            time
                        }
                        None => row.timestamp,
                    };
                    block.ledger_rows.push(LedgerRow {
                        party: row.party,
                        asset: row.asset,
                        key: EntryKey {
                            vega_time: VegaTime::from_nanos(time),
                            block: event.height,
                            seq,
                            index: row.index,
                        },
                        csv_line: row.csv_line,
                    });
                }
                block.entries += entries;
            }
            Item::Oracle {
                json,
                matched_specs,
                broadcast_at,
            } => {
                let position = Position {
                    vega_time: self.vega_time.unwrap_or(broadcast_at),
                    block: event.height,
                    seq,
                };
                block.oracle_rows.push(OracleRow {
                    position,
                    json,
                    matched_specs,
                });
            }
        }
        Ok(closed)
    }

    /// Starts block `height`, picking up what an earlier run stored of it.
    fn open(&mut self, height: u64, label: &Label) -> Result<(), IngestError> {
        self.chain.check(height, label)?;
        let (seq_base, stored) = if self.known_height.is_some_and(|known| height <= known) {
            // The block may be stored, maybe by this very run (overlapping inputs back to
            // back, or the first height's second block): everything before it must be
            // committed before it is looked up.
            self.commit()?;
            self.store.send(Job::Blocks(height))?;
            let stored = match self.store.answer()? {
                Done::Blocks(blocks) => blocks?,
                Done::Written(_) => unreachable!("nothing is in flight after commit()"),
            };
            self.identify(height, label, &stored)?
        } else {
            (0, None)
        };
        self.known_height = self.known_height.max(Some(height));
        self.chain.first_height.get_or_insert(height);
        if let Some(time) = stored.and_then(|s| s.vega_time) {
            self.vega_time = Some(time);
        }
        self.block = Some(OpenBlock {
            height,
            hash: label.block.clone(),
            seq_base,
            stored,
            vega_time: stored.and_then(|s| s.vega_time),
            last_seq: 0,
            seen_seq: None,
            interrupted: false,
            ledger_rows: Vec::new(),
            oracle_rows: Vec::new(),
            events: 0,
            entries: 0,
        });
        Ok(())
    }

    /// Which of the blocks `stored` at `height` the stream's block is: its `seq_base` and what
    /// is stored of it.
    fn identify(
        &self,
        height: u64,
        label: &Label,
        stored: &[BlockRecord],
    ) -> Result<(u64, Option<BlockState>), StreamError> {
        let hash = label.block.as_deref();
        if let Some(same) = stored
            .iter()
            .find(|block| same_hash(block.hash.as_deref(), hash))
        {
            return Ok((same.seq_base, Some(same.state)));
        }
        match (stored, self.chain.previous) {
            // Not stored, and below the stream's last block.
            ([], Some(after)) if height <= after => Err(StreamError::WentBack { height, after }),
            // Not stored, below the stored blocks (a database that begins at a snapshot).
            ([], _) => Ok((0, None)),
            // The second block of the chain's first height: its rows follow the first one's.
            ([first], _) if self.chain.first_height == Some(height) => {
                Ok((first.seq_base + first.state.last_seq, None))
            }
            ([first, ..], _) => Err(StreamError::OtherBlock {
                height,
                stored: first.hash.clone().unwrap_or_default(),
                found: hash.unwrap_or_default().to_owned(),
            }),
        }
    }

    /// Moves a complete block into the batch.
    fn close(&mut self, mut block: OpenBlock) {
        self.chain.previous = Some(block.height);
        let unchanged = block.events == 0
            && block
                .stored
                .is_some_and(|stored| stored.last_seq >= block.last_seq);
        if unchanged {
            // Stored whole by an earlier run: nothing to write, not even its record.
            return;
        }
        if self.chain.record_id {
            self.chain.record_id = false;
            self.batch.chain_id = self.chain.id.as_deref().map(str::to_owned);
        }
        self.batch.blocks.push(BlockRecord {
            height: block.height,
            hash: block.hash.as_deref().map(str::to_owned),
            seq_base: block.seq_base,
            state: BlockState {
                vega_time: block.vega_time,
                last_seq: block.last_seq,
            },
        });
        self.pending.blocks += 1;
        self.pending.events += block.events;
        self.pending.ledger_entries += block.entries;
        self.pending.ledger_rows += block.ledger_rows.len() as u64;
        self.pending.oracle_data += block.oracle_rows.len() as u64;
        self.pending.last_height = Some(block.height);
        self.pending.last_vega_time = self.vega_time;
        self.transaction
            .parties
            .extend(block.ledger_rows.iter().map(|row| row.party));
        self.batch.ledger_rows.append(&mut block.ledger_rows);
        self.batch.oracle_rows.append(&mut block.oracle_rows);
        self.transaction.started.get_or_insert_with(Instant::now);
    }

    /// Hands the batch to the writer thread, once fewer than [`IN_FLIGHT`] batches sent are
    /// still unwritten, to be staged in the transaction or to commit it (with an empty batch
    /// when only staged ones are left).
    fn flush(&mut self, then: Then) -> Result<(), IngestError> {
        if self.batch.is_empty() && !(then == Then::Commit && self.transaction.open) {
            return Ok(());
        }
        while self.store.in_flight.len() >= IN_FLIGHT {
            self.settle()?;
        }
        let batch = std::mem::take(&mut self.batch);
        let rows = batch.ledger_rows.len() + batch.oracle_rows.len();
        self.store.send(Job::Write { batch, then })?;
        self.store
            .in_flight
            .push_back((std::mem::take(&mut self.pending), then));
        match then {
            Then::Commit => self.transaction = Transaction::default(),
            Then::KeepOpen => {
                self.transaction.staged_rows += rows;
                self.transaction.open = true;
            }
        }
        // The batch written before comes back with its rows: they are freed here, while the
        // writer writes this one, and its buffers hold the next batch.
        if let Some(mut spare) = self.spare.take() {
            spare.clear();
            self.batch = spare;
        }
        Ok(())
    }

    /// Waits for the oldest batch in flight, if any, to be written, and reports what is
    /// committed.
    fn settle(&mut self) -> Result<(), IngestError> {
        let Some((written, then)) = self.store.in_flight.pop_front() else {
            return Ok(());
        };
        match self.store.answer()? {
            Done::Written(result) => {
                self.spare = Some(result?);
            }
            Done::Blocks(_) => {
                unreachable!("stored blocks are only asked with nothing in flight")
            }
        }
        self.staged.absorb(&written);
        if then == Then::Commit {
            self.stats.absorb(&std::mem::take(&mut self.staged));
            (self.progress)(&self.stats);
        }
        Ok(())
    }

    /// Commits everything complete and waits until it is.
    fn commit(&mut self) -> Result<(), IngestError> {
        self.flush(Then::Commit)?;
        while !self.store.in_flight.is_empty() {
            self.settle()?;
        }
        // Nothing is in flight: its rows are not kept until the next batch is sent.
        if let Some(spare) = &mut self.spare {
            spare.clear();
        }
        Ok(())
    }
}

impl OpenBlock {
    /// Whether an event of block `height` labelled `label` belongs to this block: the same
    /// height and hash (a missing hash matches any).
    fn is(&self, height: u64, label: &Label) -> bool {
        self.height == height && same_hash(self.hash.as_deref(), label.block.as_deref())
    }
}

/// Whether two block hashes name the same block: equal, or one of them unknown.
fn same_hash(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

/// The `vega_time` column of `time`, formatted once per distinct time.
fn cached_column(cache: &mut Option<(i64, VegaTimeColumn)>, time: i64) -> &VegaTimeColumn {
    if cache.is_none_or(|(cached, _)| cached != time) {
        *cache = Some((time, VegaTimeColumn::new(VegaTime::from_nanos(time))));
    }
    &cache.as_ref().expect("filled above").1
}
