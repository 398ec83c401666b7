//! Lines in, whole blocks out: the ingest loop.
//!
//! Two threads share the work: a reader parses lines into typed events (the JSON work), and the
//! calling thread assembles blocks, encodes rows and writes them. A bounded channel between them
//! keeps memory flat and lets a slow store slow the reader down.
//!
//! A block is complete when its END_BLOCK event arrives or when an event of another block does.
//! Complete blocks are committed in batches, so a block is never half stored; batches are cut by
//! size, by age, and whenever the input goes quiet, so a live stream is visible within
//! [`IngestOptions::idle_commit`].

use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use ledger_core::{CsvRowEncoder, EntryKey, VegaTime};
use oracle_core::Position;
use storage::{BlockRecord, BlockState, IngestBatch, IngestWriter, LedgerRow, OracleRow};

use crate::event::{self, Body, Event};
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
    /// When set, stop at the next block boundary (after committing what is complete).
    pub stop: Option<&'a AtomicBool>,
}

impl Default for IngestOptions<'_> {
    fn default() -> Self {
        Self {
            max_batch_rows: 50_000,
            idle_commit: Duration::from_millis(50),
            max_batch_age: Duration::from_millis(500),
            stop: None,
        }
    }
}

/// What the reader thread sends: an event, or the line that stopped it.
type Parsed = Result<(u64, Event), IngestError>;

/// Reads `input` to its end and writes every complete block through `writer`.
///
/// `progress` is called after every commit. On a malformed line the complete blocks before it
/// are committed, the block it belongs to is not, and the error names the line.
pub fn ingest(
    input: impl BufRead + Send,
    writer: &mut dyn IngestWriter,
    options: &IngestOptions<'_>,
    progress: &mut dyn FnMut(&IngestStats),
) -> Result<IngestStats, IngestError> {
    let (sender, receiver) = mpsc::sync_channel::<Parsed>(4096);
    std::thread::scope(|scope| {
        scope.spawn(move || read_lines(input, &sender));
        let mut assembler = Assembler::new(writer, options);
        let result = assembler.run(&receiver, progress);
        // Dropping the receiver unblocks the reader if we stopped early.
        drop(receiver);
        result
    })
}

fn read_lines(mut input: impl BufRead, sender: &mpsc::SyncSender<Parsed>) {
    // Bytes, not `read_line`: a line that is not UTF-8 is a malformed line with a number, not
    // a failure to read the input.
    let mut line = Vec::new();
    let mut line_no = 0u64;
    loop {
        line.clear();
        line_no += 1;
        let parsed = match input.read_until(b'\n', &mut line) {
            Ok(0) => return,
            Ok(_) => match std::str::from_utf8(&line) {
                Ok(text) if text.trim().is_empty() => continue,
                Ok(text) => event::parse(text.trim_end()).map(|event| (line_no, event)),
                Err(_) => Err("line is not valid UTF-8".to_owned()),
            }
            .map_err(|reason| IngestError::Line {
                line: line_no,
                reason,
            }),
            Err(err) => Err(IngestError::Read(err)),
        };
        let stop = parsed.is_err();
        if sender.send(parsed).is_err() || stop {
            return;
        }
    }
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

struct Assembler<'w, 'o> {
    writer: &'w mut dyn IngestWriter,
    options: &'o IngestOptions<'o>,
    encoder: CsvRowEncoder,
    /// The current vega time: set by time events, carried across blocks.
    vega_time: Option<i64>,
    /// Whether this stream marks block ends, which tells a cut-off last block from a whole one.
    saw_end_block: bool,
    block: Option<OpenBlock>,
    batch: IngestBatch,
    batch_started: Option<Instant>,
    pending: IngestStats,
    stats: IngestStats,
}

impl<'w, 'o> Assembler<'w, 'o> {
    fn new(writer: &'w mut dyn IngestWriter, options: &'o IngestOptions<'o>) -> Self {
        Self {
            writer,
            options,
            encoder: CsvRowEncoder::new(),
            vega_time: None,
            saw_end_block: false,
            block: None,
            batch: IngestBatch::default(),
            batch_started: None,
            pending: IngestStats::default(),
            stats: IngestStats::default(),
        }
    }

    fn run(
        &mut self,
        receiver: &mpsc::Receiver<Parsed>,
        progress: &mut dyn FnMut(&IngestStats),
    ) -> Result<IngestStats, IngestError> {
        loop {
            let message = match receiver.recv_timeout(self.options.idle_commit) {
                Ok(message) => message,
                Err(RecvTimeoutError::Timeout) => {
                    self.commit(progress)?;
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            };
            let (_line, event) = match message {
                Ok(parsed) => parsed,
                Err(err) => {
                    // Earlier complete blocks stay; the block of the bad line is dropped whole.
                    self.block = None;
                    self.commit(progress)?;
                    return Err(err);
                }
            };
            if self.accept(event)? {
                // A block boundary: the place to commit or to stop.
                if self.batch_due() {
                    self.commit(progress)?;
                }
                if self.stop_requested() {
                    self.commit(progress)?;
                    return Ok(self.stats.clone());
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
        self.commit(progress)?;
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
    fn accept(&mut self, event: Event) -> Result<bool, IngestError> {
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
        match event.body {
            Body::Time(time) => {
                self.vega_time = Some(time);
                block.vega_time.get_or_insert(time);
            }
            Body::EndBlock => {
                self.saw_end_block = true;
                let block = self.block.take().expect("present");
                self.close(block);
                return Ok(true);
            }
            Body::Other => {}
            Body::Ledger(_) | Body::Oracle(_) if skip => {}
            Body::Ledger(entries) => {
                for (index, entry) in entries.iter().enumerate() {
                    let time =
                        VegaTime::from_nanos(self.vega_time.unwrap_or(entry.timestamp.nanos()));
                    let key = EntryKey {
                        vega_time: time,
                        block: event.height,
                        seq: event.seq,
                        index: index as u32,
                    };
                    for party in entry.parties() {
                        block.ledger_rows.push(LedgerRow {
                            party,
                            asset: entry.asset(),
                            key,
                            csv_line: self.encoder.encode(time, entry, party).to_vec(),
                        });
                    }
                }
                block.entries += entries.len() as u64;
            }
            Body::Oracle(datum) => {
                let position = Position {
                    vega_time: self.vega_time.unwrap_or(datum.broadcast_at),
                    block: event.height,
                    seq: event.seq,
                };
                block.oracle_rows.push(OracleRow {
                    position,
                    json: datum.to_vega_json(),
                    matched_specs: datum.matched_spec_ids,
                });
            }
        }
        Ok(closed)
    }

    /// Starts block `height`, picking up what an earlier run stored of it.
    fn open(&mut self, height: u64) -> Result<(), IngestError> {
        // The same height again (overlapping inputs back to back) must see its own earlier rows.
        if self.batch.blocks.iter().any(|b| b.height >= height) {
            self.flush()?;
        }
        let stored = self.writer.block_state(height)?;
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

    /// Writes the batch.
    fn flush(&mut self) -> Result<(), IngestError> {
        if self.batch.is_empty() {
            return Ok(());
        }
        self.writer.commit(&self.batch)?;
        self.batch.clear();
        self.batch_started = None;
        self.stats.absorb(&self.pending);
        self.pending = IngestStats::default();
        Ok(())
    }

    fn commit(&mut self, progress: &mut dyn FnMut(&IngestStats)) -> Result<(), IngestError> {
        let had_rows = !self.batch.is_empty();
        self.flush()?;
        if had_rows {
            progress(&self.stats);
        }
        Ok(())
    }
}
