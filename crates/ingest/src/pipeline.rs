//! Lines in, whole blocks out: the ingest loop.
//!
//! Three threads share the work, joined by bounded channels, so memory stays flat and the
//! slowest stage sets the pace:
//! - the reader parses lines into typed events and encodes their values once (each ledger
//!   entry's CSV rows, each oracle datum's JSON): the CPU-heavy part;
//! - the assembler (the calling thread) follows blocks and the vega time, stamps rows with their
//!   block's time, and gathers complete blocks into batches;
//! - the writer commits one batch while the next one is assembled.
//!
//! A block is complete when its END_BLOCK event arrives or when an event of another block does.
//! Complete blocks are committed in batches, so a block is never half stored; batches are cut by
//! size, by age, and whenever the input goes quiet, so a live stream is visible within
//! [`IngestOptions::idle_commit`].

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::time::{Duration, Instant};

use ledger_core::{
    AssetId, CsvRowEncoder, EntryKey, OracleSpecId, PartyId, VEGA_TIME_LEN, VegaTime, restamp,
    vega_time_column,
};
use oracle_core::Position;
use storage::{BlockRecord, BlockState, IngestBatch, IngestWriter, LedgerRow, OracleRow};

use crate::event::{self, Body};
use crate::{IngestError, IngestStats};

/// How an ingest runs.
#[derive(Debug)]
pub struct IngestOptions<'a> {
    /// Commit once this many rows wait, even while the input keeps coming.
    pub max_batch_rows: usize,
    /// Commit when the input has been quiet this long.
    pub idle_commit: Duration,
    /// Commit at least this often while the input keeps coming.
    pub max_batch_age: Duration,
    /// A longer line is an error: this bounds the reader's memory whatever the input.
    pub max_line_bytes: usize,
    /// When set, stop at the next block boundary (after committing what is complete).
    pub stop: Option<&'a AtomicBool>,
}

impl Default for IngestOptions<'_> {
    fn default() -> Self {
        Self {
            max_batch_rows: 50_000,
            idle_commit: Duration::from_millis(50),
            max_batch_age: Duration::from_millis(500),
            // Far beyond any real event (a ledger movement event of ten thousand entries is
            // about ten megabytes).
            max_line_bytes: 64 << 20,
            stop: None,
        }
    }
}

/// Events the reader hands over at once: one channel hand-off (and at most one wake-up of the
/// assembler) per chunk instead of per event.
const CHUNK_EVENTS: usize = 256;

/// Chunks parsed ahead of the assembler: enough to ride out its hiccups, few enough that their
/// rows stay a few megabytes.
const QUEUE_CHUNKS: usize = 16;

/// What the reader sends: events with their values encoded, the last one maybe the line that
/// stopped it.
type Chunk = Vec<Parsed>;

/// An event, or why its line stopped the ingest.
type Parsed = Result<Prepared, IngestError>;

/// An event as the reader hands it over.
struct Prepared {
    height: u64,
    seq: u64,
    item: Item,
}

/// What an event carries, its values already in the form the store keeps.
enum Item {
    /// The vega time changes (time update or begin block).
    Time(i64),
    /// The block ends.
    EndBlock,
    /// A ledger movement event: how many entries it had, and their rows.
    Ledger {
        entries: u64,
        rows: Vec<PreparedRow>,
    },
    /// One oracle datum.
    Oracle {
        json: Vec<u8>,
        matched_specs: Vec<OracleSpecId>,
        broadcast_at: i64,
    },
    /// Any other event type: it only advances the block's sequence.
    Other,
}

/// One export row, encoded with the entry's own timestamp in its `vega_time` column, which the
/// assembler overwrites once it knows the block's time.
struct PreparedRow {
    party: PartyId,
    asset: AssetId,
    index: u32,
    timestamp: i64,
    csv_line: Vec<u8>,
}

/// Reads `input` to its end and writes every complete block through `writer`.
///
/// `progress` is called after every commit. On a malformed line the complete blocks before it
/// are committed, the block it belongs to is not, and the error names the line.
///
/// The input is read on a thread of its own, which is why it must be `'static`: when the stop
/// flag ends the ingest while that thread waits on a quiet live stream, the ingest returns at
/// once and leaves the thread to end at its next line (or with the process).
pub fn ingest(
    input: impl BufRead + Send + 'static,
    writer: &mut dyn IngestWriter,
    options: &IngestOptions<'_>,
    progress: &mut dyn FnMut(&IngestStats),
) -> Result<IngestStats, IngestError> {
    let last_stored = writer.last_block()?;
    let (event_sender, events) = mpsc::sync_channel::<Chunk>(QUEUE_CHUNKS);
    let max_line_bytes = options.max_line_bytes;
    let reader = std::thread::Builder::new()
        .name("ingest-reader".to_owned())
        .spawn(move || read_lines(input, max_line_bytes, &event_sender))
        .map_err(IngestError::Read)?;
    // One batch being committed while the next one fills: double buffering.
    let (job_sender, jobs) = mpsc::sync_channel::<Job>(1);
    let (done_sender, done) = mpsc::sync_channel::<Done>(1);
    let result = std::thread::scope(|scope| {
        scope.spawn(move || write_jobs(writer, &jobs, &done_sender));
        let store = StoreHandle {
            jobs: job_sender,
            done,
            in_flight: None,
        };
        let mut assembler = Assembler::new(store, options, last_stored, progress);
        // Dropping the assembler at the end of the scope closes the writer's job channel, so
        // the writer thread ends whenever this one stops, early or not.
        assembler.run(&events)
    });
    // A reader blocked on a full channel wakes up and ends; one blocked on the input is left.
    drop(events);
    if reader.is_finished() {
        // It cannot have panicked without the assembler noticing a closed channel first.
        let _ = reader.join();
    }
    result
}

/// Parses the input's lines in place in the reader's buffer, copying only a line that straddles
/// two buffer fills, and sends them in chunks: a chunk goes out when full and whenever the
/// buffer is used up, before a read that may wait on a live stream.
fn read_lines(mut input: impl BufRead, max_line_bytes: usize, sender: &SyncSender<Chunk>) {
    let mut encoder = CsvRowEncoder::new();
    let mut chunk = Vec::with_capacity(CHUNK_EVENTS);
    // The start of a line that the buffer cut off.
    let mut carry = Vec::new();
    let mut line_no = 0u64;
    let send = |chunk: &mut Chunk| {
        let full = std::mem::replace(chunk, Vec::with_capacity(CHUNK_EVENTS));
        full.is_empty() || sender.send(full).is_ok()
    };
    loop {
        let buffer = match input.fill_buf() {
            Ok(buffer) => buffer,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => {
                chunk.push(Err(IngestError::Read(err)));
                send(&mut chunk);
                return;
            }
        };
        let filled = buffer.len();
        if filled == 0 {
            // End of input; the last line may lack its newline.
            if !carry.is_empty() {
                line_no += 1;
                chunk.extend(parse_line(&carry, line_no, &mut encoder));
            }
            send(&mut chunk);
            return;
        }
        let mut start = 0;
        while let Some(offset) = memchr::memchr(b'\n', &buffer[start..]) {
            let end = start + offset;
            line_no += 1;
            let parsed = if carry.len() + offset > max_line_bytes {
                Some(Err(too_long(line_no, max_line_bytes)))
            } else if carry.is_empty() {
                parse_line(&buffer[start..end], line_no, &mut encoder)
            } else {
                carry.extend_from_slice(&buffer[start..end]);
                let parsed = parse_line(&carry, line_no, &mut encoder);
                carry.clear();
                parsed
            };
            start = end + 1;
            let Some(parsed) = parsed else { continue };
            let stop = parsed.is_err();
            chunk.push(parsed);
            if stop {
                send(&mut chunk);
                return;
            }
            if chunk.len() == CHUNK_EVENTS && !send(&mut chunk) {
                return;
            }
        }
        carry.extend_from_slice(&buffer[start..]);
        input.consume(filled);
        if carry.len() > max_line_bytes {
            // Stop before the rest of the line is even read.
            chunk.push(Err(too_long(line_no + 1, max_line_bytes)));
            send(&mut chunk);
            return;
        }
        if !send(&mut chunk) {
            return;
        }
    }
}

fn too_long(line: u64, max_line_bytes: usize) -> IngestError {
    IngestError::Line {
        line,
        reason: format!("line is longer than {max_line_bytes} bytes"),
    }
}

/// One line as an event; `None` for a blank line.
fn parse_line(line: &[u8], line_no: u64, encoder: &mut CsvRowEncoder) -> Option<Parsed> {
    let parsed = match std::str::from_utf8(line) {
        Ok(text) if text.trim().is_empty() => return None,
        Ok(text) => event::parse(text.trim_end()).map(|event| prepare(event, encoder)),
        // Bytes, not text: a line that is not UTF-8 is a malformed line with a number, not a
        // failure to read the input.
        Err(_) => Err("line is not valid UTF-8".to_owned()),
    };
    Some(parsed.map_err(|reason| IngestError::Line {
        line: line_no,
        reason,
    }))
}

/// Encodes an event's values: the work that needs no state beyond the event itself.
fn prepare(event: event::Event, encoder: &mut CsvRowEncoder) -> Prepared {
    let item = match event.body {
        Body::Time(time) => Item::Time(time),
        Body::EndBlock => Item::EndBlock,
        Body::Other => Item::Other,
        Body::Ledger(entries) => {
            let mut rows = Vec::with_capacity(entries.len() * 2);
            for (index, entry) in entries.iter().enumerate() {
                for party in entry.parties() {
                    rows.push(PreparedRow {
                        party,
                        asset: entry.asset(),
                        index: index as u32,
                        timestamp: entry.timestamp.nanos(),
                        csv_line: encoder.encode(entry.timestamp, entry, party).to_vec(),
                    });
                }
            }
            Item::Ledger {
                entries: entries.len() as u64,
                rows,
            }
        }
        Body::Oracle(datum) => Item::Oracle {
            json: datum.to_vega_json(),
            broadcast_at: datum.broadcast_at,
            matched_specs: datum.matched_spec_ids,
        },
    };
    Prepared {
        height: event.height,
        seq: event.seq,
        item,
    }
}

/// A request to the writer thread, answered in order by a [`Done`].
enum Job {
    Commit(IngestBatch),
    BlockState(u64),
}

/// The writer thread's answer to a [`Job`]; a committed batch comes back emptied, for reuse.
enum Done {
    Committed(Result<IngestBatch, storage::Error>),
    BlockState(Result<Option<BlockState>, storage::Error>),
}

fn write_jobs(writer: &mut dyn IngestWriter, jobs: &Receiver<Job>, done: &SyncSender<Done>) {
    for job in jobs {
        let answer = match job {
            // The batch goes back whole: freeing its rows is the assembler's work, since this
            // thread is the ingest's bottleneck.
            Job::Commit(mut batch) => Done::Committed(writer.commit(&batch).map(|()| {
                batch.clear();
                batch
            })),
            Job::BlockState(height) => Done::BlockState(writer.block_state(height)),
        };
        if done.send(answer).is_err() {
            return;
        }
    }
}

/// The assembler's end of the writer thread.
struct StoreHandle {
    jobs: SyncSender<Job>,
    done: Receiver<Done>,
    /// The counters of the batch being committed, absorbed once it is.
    in_flight: Option<IngestStats>,
}

impl StoreHandle {
    fn send(&self, job: Job) -> Result<(), IngestError> {
        self.jobs.send(job).map_err(|_| writer_gone())
    }

    fn answer(&self) -> Result<Done, IngestError> {
        self.done.recv().map_err(|_| writer_gone())
    }
}

/// The writer thread only stops early by panicking, which the thread scope re-raises; this
/// error is what the assembler sees meanwhile.
fn writer_gone() -> IngestError {
    IngestError::Store(storage::Error::Internal(
        "the store writer thread stopped".into(),
    ))
}

/// The block being assembled.
struct OpenBlock {
    height: u64,
    /// What an earlier run already stored of this block: its events are skipped.
    stored: Option<BlockState>,
    vega_time: Option<i64>,
    last_seq: u64,
    ledger_rows: Vec<LedgerRow>,
    oracle_rows: Vec<OracleRow>,
    events: u64,
    entries: u64,
}

struct Assembler<'o, 'p> {
    store: StoreHandle,
    options: &'o IngestOptions<'o>,
    progress: &'p mut dyn FnMut(&IngestStats),
    /// Heights up to this one may be stored already (by an earlier run, or earlier in this
    /// one) and are looked up; higher ones are new.
    known_height: Option<u64>,
    /// The current vega time: set by time events, carried across blocks.
    vega_time: Option<i64>,
    /// The `vega_time` column of the last time stamped: blocks share one time.
    time_column: Option<(i64, [u8; VEGA_TIME_LEN])>,
    /// Whether this stream marks block ends, which tells a cut-off last block from a whole one.
    saw_end_block: bool,
    block: Option<OpenBlock>,
    batch: IngestBatch,
    /// An emptied batch back from the writer, whose buffers the next batch reuses.
    spare: Option<IngestBatch>,
    batch_started: Option<Instant>,
    pending: IngestStats,
    stats: IngestStats,
}

impl<'o, 'p> Assembler<'o, 'p> {
    fn new(
        store: StoreHandle,
        options: &'o IngestOptions<'o>,
        last_stored: Option<u64>,
        progress: &'p mut dyn FnMut(&IngestStats),
    ) -> Self {
        Self {
            store,
            options,
            progress,
            known_height: last_stored,
            vega_time: None,
            time_column: None,
            saw_end_block: false,
            block: None,
            batch: IngestBatch::default(),
            spare: None,
            batch_started: None,
            pending: IngestStats::default(),
            stats: IngestStats::default(),
        }
    }

    fn run(&mut self, receiver: &Receiver<Chunk>) -> Result<IngestStats, IngestError> {
        loop {
            let chunk = match receiver.recv_timeout(self.options.idle_commit) {
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
                    Ok(event) => event,
                    Err(err) => {
                        // Earlier complete blocks stay; the block of the bad line is dropped
                        // whole.
                        self.block = None;
                        self.commit()?;
                        return Err(err);
                    }
                };
                if self.accept(event)? {
                    // A block boundary: the place to commit or to stop.
                    if self.batch_due() {
                        self.flush()?;
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

    fn batch_due(&self) -> bool {
        self.batch.ledger_rows.len() + self.batch.oracle_rows.len() >= self.options.max_batch_rows
            || self
                .batch_started
                .is_some_and(|started| started.elapsed() >= self.options.max_batch_age)
    }

    /// Takes one event; returns true when it closed a block.
    fn accept(&mut self, event: Prepared) -> Result<bool, IngestError> {
        let mut closed = false;
        if self
            .block
            .as_ref()
            .is_some_and(|block| block.height != event.height)
        {
            let block = self.block.take().expect("checked above");
            self.close(block);
            closed = true;
        }
        if self.block.is_none() {
            self.open(event.height)?;
        }
        let block = self.block.as_mut().expect("opened above");
        block.last_seq = block.last_seq.max(event.seq);
        let skip = block
            .stored
            .is_some_and(|stored| event.seq <= stored.last_seq);
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
                            seq: event.seq,
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
                    seq: event.seq,
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
    fn open(&mut self, height: u64) -> Result<(), IngestError> {
        let stored = if self.known_height.is_some_and(|known| height <= known) {
            // The block may be stored, maybe by this very run (overlapping inputs back to
            // back): everything before it must be committed before it is looked up.
            self.commit()?;
            self.store.send(Job::BlockState(height))?;
            match self.store.answer()? {
                Done::BlockState(state) => state?,
                Done::Committed(_) => unreachable!("no commit is in flight after commit()"),
            }
        } else {
            None
        };
        self.known_height = self.known_height.max(Some(height));
        if let Some(time) = stored.and_then(|s| s.vega_time) {
            self.vega_time = Some(time);
        }
        self.block = Some(OpenBlock {
            height,
            stored,
            vega_time: stored.and_then(|s| s.vega_time),
            last_seq: 0,
            ledger_rows: Vec::new(),
            oracle_rows: Vec::new(),
            events: 0,
            entries: 0,
        });
        Ok(())
    }

    /// Moves a complete block into the batch.
    fn close(&mut self, mut block: OpenBlock) {
        let unchanged = block.events == 0
            && block
                .stored
                .is_some_and(|stored| stored.last_seq >= block.last_seq);
        if unchanged {
            // Stored whole by an earlier run: nothing to write, not even its record.
            return;
        }
        self.batch.blocks.push(BlockRecord {
            height: block.height,
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
        self.batch.ledger_rows.append(&mut block.ledger_rows);
        self.batch.oracle_rows.append(&mut block.oracle_rows);
        self.batch_started.get_or_insert_with(Instant::now);
    }

    /// Hands the batch to the writer thread, once the one before it is committed.
    fn flush(&mut self) -> Result<(), IngestError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        self.settle()?;
        let next = self.spare.take().unwrap_or_default();
        let batch = std::mem::replace(&mut self.batch, next);
        self.store.send(Job::Commit(batch))?;
        self.store.in_flight = Some(std::mem::take(&mut self.pending));
        self.batch_started = None;
        Ok(())
    }

    /// Waits for the batch in flight, if any, to be committed, and reports it.
    fn settle(&mut self) -> Result<(), IngestError> {
        let Some(committed) = self.store.in_flight.take() else {
            return Ok(());
        };
        match self.store.answer()? {
            Done::Committed(result) => {
                self.spare = Some(result?);
            }
            Done::BlockState(_) => {
                unreachable!("a block state is only asked with nothing in flight")
            }
        }
        self.stats.absorb(&committed);
        (self.progress)(&self.stats);
        Ok(())
    }

    /// Commits everything complete and waits until it is.
    fn commit(&mut self) -> Result<(), IngestError> {
        self.flush()?;
        self.settle()
    }
}

/// The `vega_time` column of `time`, formatted once per distinct time.
fn cached_column(
    cache: &mut Option<(i64, [u8; VEGA_TIME_LEN])>,
    time: i64,
) -> &[u8; VEGA_TIME_LEN] {
    if cache.is_none_or(|(cached, _)| cached != time) {
        *cache = Some((time, vega_time_column(VegaTime::from_nanos(time))));
    }
    &cache.as_ref().expect("filled above").1
}
