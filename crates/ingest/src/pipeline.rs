//! Records in, whole blocks out: the ingest loop.
//!
//! Three stages share the work, joined by bounded channels, so memory stays flat and the
//! slowest stage sets the pace:
//! - the reader ([`crate::reader`]) frames the input into records, decodes them into
//!   format-neutral events and encodes their values once (each ledger entry's CSV rows, each
//!   oracle datum's JSON): the CPU-heavy part, spread over several decoder threads for a file
//!   or a stream;
//! - the assembler ([`crate::assembler`], the calling thread) follows blocks and the vega time,
//!   stamps rows with their block's time, and gathers complete blocks into batches;
//! - the writer ([`crate::writer`]) writes the batches sent to it (two at most) while the next
//!   one is assembled.
//!
//! A block is complete when its END_BLOCK event arrives or when an event of another block does.
//! Complete blocks are written in batches, so a block is never half stored; batches are cut by
//! size, by age, and whenever the input goes quiet. A transaction is one batch or, where
//! commits cost the most, several (`IngestWriter::stage`); it is committed by age, by size, and
//! whenever the input goes quiet, so a live stream is visible within
//! [`IngestOptions::idle_commit`].

use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::time::Duration;

use storage::IngestWriter;

use crate::assembler::Assembler;
use crate::writer::{Done, Job, StoreHandle};
use crate::{Format, IngestError, IngestStats, Input};

/// How an ingest runs.
#[derive(Debug)]
pub struct IngestOptions<'a> {
    /// Write a batch once this many rows wait, even while the input keeps coming, and commit
    /// it. A transaction spread thin over many parties (under [`ROWS_PER_PARTY`] rows a party
    /// for each of its batches) spans several such batches instead, up to the writer's
    /// [`transaction_batches`](IngestWriter::transaction_batches): such commits cost more per
    /// row. The rows held in memory stay within three batches either way (the writer keeps
    /// what it holds of an open transaction in a temporary file).
    pub max_batch_rows: usize,
    /// Commit when the input has been quiet this long.
    pub idle_commit: Duration,
    /// Commit at least this often while the input keeps coming (a bulk load, a catch-up: a
    /// live stream goes quiet between blocks and commits at [`Self::idle_commit`] whatever
    /// this is). Default 10 s: readers of a node catching up see its progress at most this
    /// late, and a crash re-ingests at most this much. It lets a transaction spread over many
    /// parties reach the 32 batches PostgreSQL's writer allows (5–6 s of a bulk load on this
    /// project's machines; 2 s cut it at about eleven, for a slower bulk load:
    /// docs/PERFORMANCE.md, "Catch-ups commit every 10 s").
    pub max_batch_age: Duration,
    /// A longer record (NDJSON line, buffer record's payload) is an error, refused before it is
    /// read: this bounds the reader's memory whatever the input.
    pub max_record_bytes: usize,
    /// The input's format; `None` detects it from the first bytes ([`Format::detect`]).
    pub format: Option<Format>,
    /// When set, stop at the next block boundary (after committing what is complete).
    pub stop: Option<&'a AtomicBool>,
    /// Threads decoding a file or a stream (at least one); records a caller frames itself
    /// are decoded as they are framed. Default: one per core, up to four.
    pub decoders: usize,
}

/// The rows per party a transaction grows towards for each of the batches it may span (see
/// [`IngestWriter::transaction_batches`]): a commit's cost grows with the parties it touches
/// (each one's newest segment and the page that holds it are written again), so a stream
/// spread over many parties is committed less often, one of a few busy parties at every batch.
pub const ROWS_PER_PARTY: usize = 16;

/// The default of [`IngestOptions::max_record_bytes`]: far beyond any real event (a ledger
/// movement event of ten thousand entries is about ten megabytes as JSON, less as protobuf).
pub const DEFAULT_MAX_RECORD_BYTES: usize = 16 << 20;

impl Default for IngestOptions<'_> {
    fn default() -> Self {
        Self {
            max_batch_rows: 50_000,
            idle_commit: Duration::from_millis(50),
            max_batch_age: Duration::from_secs(10),
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            format: None,
            stop: None,
            decoders: crate::reader::default_decoders(),
        }
    }
}

/// Reads `input` to its end and writes every complete block through `writer`.
///
/// `progress` is called after every commit. On a malformed record the complete blocks before
/// it are committed, the block it belongs to is not, and the error names the record.
///
/// The input is read on a thread of its own, which is why it must be `'static`: when the stop
/// flag ends the ingest while that thread waits on a quiet live stream, the ingest returns at
/// once and leaves the thread to end at its next record (or with the process).
pub fn ingest(
    input: impl Into<Input>,
    writer: &mut dyn IngestWriter,
    options: &IngestOptions<'_>,
    progress: &mut dyn FnMut(&IngestStats),
) -> Result<IngestStats, IngestError> {
    let input = input.into();
    let stored = writer.chain()?;
    let growth = writer.transaction_batches();
    let peer = input.peer_control();
    let (mut chunks, reader) = crate::reader::spawn(input, options)?;
    // Batches being written while the next one fills; the assembler keeps at most
    // `writer::IN_FLIGHT` of them unwritten.
    let (job_sender, jobs) = mpsc::sync_channel::<Job>(1);
    let (done_sender, done) = mpsc::sync_channel::<Done>(1);
    let result = std::thread::scope(|scope| {
        scope.spawn(move || crate::writer::write_jobs(writer, &jobs, &done_sender));
        let store = StoreHandle {
            jobs: job_sender,
            done,
            in_flight: std::collections::VecDeque::new(),
        };
        let mut assembler = Assembler::new(store, options, growth, stored, peer, progress);
        // Dropping the assembler at the end of the scope closes the writer's job channel, so
        // the writer thread ends whenever this one stops, early or not.
        assembler.run(&mut chunks)
    });
    // A reader blocked on a full channel wakes up and ends; one blocked on the input is left.
    drop(chunks);
    if reader.is_finished() {
        // It cannot have panicked without the assembler noticing a closed channel first.
        let _ = reader.join();
    }
    result
}
