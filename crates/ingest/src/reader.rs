//! The reader: frames the input into records, decodes each record into an event, encodes the
//! event's values, and hands them to the assembler in chunks, in the input's order.
//!
//! Decoding and encoding are most of the ingest's CPU, and records are independent of each
//! other, so a file or a stream is framed on one thread and decoded on several
//! ([`decoders`]): the framer deals its records out in raw chunks, round-robin, each decoder
//! answers every raw chunk with one chunk of messages on a channel of its own, and the
//! assembler takes the answers round-robin too ([`Chunks`]), which restores the input's order
//! without sequence numbers. Records a caller frames itself (a socket) are decoded on the
//! framing thread: a live source decides after each bad record whether to go on
//! ([`Frames::reject`]), so nothing may be framed past a record before it is decoded.

use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{IngestError, Location};
use crate::frames::{Encoding, Frames, Step};
use crate::prepare::{Prepared, Preparer};
use crate::{IngestOptions, Input};

/// Events handed over at once: one channel hand-off (and at most one wake-up) per chunk
/// instead of per event.
const CHUNK_EVENTS: usize = 256;

/// A raw chunk is dealt out once its records reach this many bytes, whichever comes first of
/// this and [`CHUNK_EVENTS`]: this bounds the memory of raw chunks in flight, however large
/// the records (each is bounded by `max_record_bytes`).
const CHUNK_BYTES: usize = 1 << 20;

/// Chunks decoded ahead of the assembler, over all decoders: enough to ride out its hiccups,
/// few enough that their rows stay a few megabytes.
const QUEUE_CHUNKS: usize = 16;

/// The most decoder threads: beyond this the framer or the writer is the floor.
const MAX_DECODERS: usize = 4;

/// What the reader sends: messages in order, the last one maybe the error that stopped it.
pub(crate) type Chunk = Vec<Message>;

/// One message from the reader.
pub(crate) enum Message {
    /// An event, its values encoded.
    Event(Prepared),
    /// The peer of a live source went away: the open block waits for its rest.
    PeerGone,
    /// A live source refused a record: the open block is dropped.
    Refused,
    /// Why the reader stopped.
    Failed(IngestError),
}

/// The assembler's end of the reader: the decoders' channels, read round-robin.
pub(crate) struct Chunks {
    receivers: Vec<Receiver<Chunk>>,
    next: usize,
}

impl Chunks {
    /// The next chunk in the input's order. `Disconnected` means the input is done: the
    /// decoder whose turn it is only ends once the framer has dealt its last chunk, and every
    /// earlier chunk was dealt to a decoder before it.
    pub(crate) fn recv_timeout(&mut self, timeout: Duration) -> Result<Chunk, RecvTimeoutError> {
        let chunk = self.receivers[self.next].recv_timeout(timeout)?;
        self.next = (self.next + 1) % self.receivers.len();
        Ok(chunk)
    }
}

/// How many threads decode a file or a stream by default: one per core, up to
/// [`MAX_DECODERS`]. The framer, the assembler and the writer share the cores with them; the
/// system schedules whichever has work.
pub(crate) fn default_decoders() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_DECODERS))
}

/// Where the framer's records go.
enum Route {
    /// Decoded on the framing thread, into this channel.
    Inline(SyncSender<Chunk>),
    /// Dealt out raw to these decoders, in turn.
    Dealt(Vec<SyncSender<RawChunk>>),
}

/// Starts reading `input` on threads of its own; their chunks come out of the returned
/// [`Chunks`] in order. The returned thread is the framer's; the decoders end after it.
pub(crate) fn spawn(
    input: Input,
    options: &IngestOptions<'_>,
) -> Result<(Chunks, JoinHandle<()>), IngestError> {
    let (format, max_record_bytes) = (options.format, options.max_record_bytes);
    let inline = input.is_framed_by_caller();
    let decoders = if inline { 1 } else { options.decoders.max(1) };
    let (mut senders, receivers): (Vec<_>, Vec<_>) = (0..decoders)
        .map(|_| mpsc::sync_channel::<Chunk>((QUEUE_CHUNKS / decoders).max(1)))
        .unzip();
    let route = if inline {
        Route::Inline(senders.remove(0))
    } else {
        let mut workers = Vec::with_capacity(decoders);
        for (index, sender) in senders.into_iter().enumerate() {
            let (raw_sender, raw_receiver) = mpsc::sync_channel::<RawChunk>(1);
            std::thread::Builder::new()
                .name(format!("ingest-decode-{index}"))
                .spawn(move || decode_chunks(&raw_receiver, &sender))
                .map_err(IngestError::Thread)?;
            workers.push(raw_sender);
        }
        Route::Dealt(workers)
    };
    let reader = std::thread::Builder::new()
        .name("ingest-reader".to_owned())
        .spawn(move || {
            let frames = input.open(format, max_record_bytes);
            match route {
                Route::Inline(sender) => read_inline(frames, &sender),
                Route::Dealt(workers) => deal(frames, &workers),
            }
        })
        .map_err(IngestError::Thread)?;
    Ok((Chunks { receivers, next: 0 }, reader))
}

/// Frames and decodes on this thread, asking the frames what to do with a bad record. A chunk
/// goes out when full, after a message that is not an event, and whenever the framing has used
/// up what is buffered, before a read that may wait on a live stream.
fn read_inline(frames: Result<Box<dyn Frames>, IngestError>, sender: &SyncSender<Chunk>) {
    let mut chunk = Vec::with_capacity(CHUNK_EVENTS);
    let send = |chunk: &mut Chunk| {
        let full = std::mem::replace(chunk, Vec::with_capacity(CHUNK_EVENTS));
        full.is_empty() || sender.send(full).is_ok()
    };
    let mut frames = match frames {
        Ok(frames) => frames,
        Err(err) => {
            chunk.push(Message::Failed(err));
            send(&mut chunk);
            return;
        }
    };
    let mut preparer = Preparer::default();
    loop {
        let message = match frames.advance() {
            Err(err) => Message::Failed(err),
            Ok(Step::Record(encoding)) => match preparer.prepare(encoding, frames.record()) {
                Ok(event) => Message::Event(event),
                Err(cause) => {
                    let location = frames.location();
                    match frames.reject(IngestError::Record { location, cause }) {
                        Ok(()) => Message::Refused,
                        Err(err) => Message::Failed(err),
                    }
                }
            },
            Ok(Step::Drained) => {
                if !send(&mut chunk) {
                    return;
                }
                continue;
            }
            Ok(Step::End) => {
                send(&mut chunk);
                return;
            }
            Ok(Step::PeerGone) => Message::PeerGone,
            Ok(Step::Refused) => Message::Refused,
        };
        let (event, failed) = match &message {
            Message::Event(_) => (true, false),
            Message::Failed(_) => (false, true),
            Message::PeerGone | Message::Refused => (false, false),
        };
        chunk.push(message);
        if (!event || chunk.len() == CHUNK_EVENTS) && !send(&mut chunk) || failed {
            return;
        }
    }
}

/// Records framed but not decoded: their bytes back to back, and where each one is.
struct RawChunk {
    /// The file the records are in: a chunk holds the records of one source.
    source: Arc<str>,
    bytes: Vec<u8>,
    records: Vec<RawRecord>,
    /// What ends the chunk after its records, if anything does: the input's failure.
    last: Option<Message>,
}

/// One record of a [`RawChunk`].
struct RawRecord {
    /// Where its bytes end in [`RawChunk::bytes`]; they start where the previous record's end.
    end: usize,
    encoding: Encoding,
    record: u64,
    offset: u64,
    line: Option<u64>,
}

impl RawChunk {
    fn new(source: Arc<str>) -> Self {
        Self {
            source,
            bytes: Vec::new(),
            records: Vec::new(),
            last: None,
        }
    }

    fn is_empty(&self) -> bool {
        self.records.is_empty() && self.last.is_none()
    }

    fn is_full(&self) -> bool {
        self.records.len() == CHUNK_EVENTS || self.bytes.len() >= CHUNK_BYTES
    }
}

/// The framer of a file or a stream: frames on this thread and deals the records out to
/// `workers` in raw chunks, one to each in turn, until the input ends or fails or the decoders
/// stop taking them. A bad record stops the ingest (the frames of a file or a stream never go
/// on after one), which its decoder reports in the record's place.
fn deal(frames: Result<Box<dyn Frames>, IngestError>, workers: &[SyncSender<RawChunk>]) {
    let mut turn = 0;
    let mut send = |chunk: &mut RawChunk| {
        if chunk.is_empty() {
            return true;
        }
        let full = std::mem::replace(chunk, RawChunk::new(Arc::clone(&chunk.source)));
        let sent = workers[turn].send(full).is_ok();
        turn = (turn + 1) % workers.len();
        sent
    };
    let mut frames = match frames {
        Ok(frames) => frames,
        Err(err) => {
            let mut chunk = RawChunk::new(Arc::from("input"));
            chunk.last = Some(Message::Failed(err));
            send(&mut chunk);
            return;
        }
    };
    let mut chunk = RawChunk::new(frames.location().source);
    loop {
        let step = match frames.advance() {
            Ok(step) => step,
            Err(err) => {
                chunk.last = Some(Message::Failed(err));
                send(&mut chunk);
                return;
            }
        };
        match step {
            Step::Record(encoding) => {
                let location = frames.location();
                if !Arc::ptr_eq(&location.source, &chunk.source) {
                    if !send(&mut chunk) {
                        return;
                    }
                    chunk.source = location.source;
                }
                chunk.bytes.extend_from_slice(frames.record());
                chunk.records.push(RawRecord {
                    end: chunk.bytes.len(),
                    encoding,
                    record: location.record,
                    offset: location.offset,
                    line: location.line,
                });
                if chunk.is_full() && !send(&mut chunk) {
                    return;
                }
            }
            Step::Drained => {
                if !send(&mut chunk) {
                    return;
                }
            }
            // Not sent by the frames of a file or a stream; passed on all the same.
            Step::PeerGone | Step::Refused => {
                chunk.last = Some(match step {
                    Step::PeerGone => Message::PeerGone,
                    _ => Message::Refused,
                });
                if !send(&mut chunk) {
                    return;
                }
            }
            Step::End => {
                send(&mut chunk);
                return;
            }
        }
    }
}

/// A decoder thread: one chunk of messages out for every raw chunk in, until either side
/// hangs up.
fn decode_chunks(raw: &Receiver<RawChunk>, sender: &SyncSender<Chunk>) {
    let mut preparer = Preparer::default();
    for chunk in raw {
        let mut messages = Vec::with_capacity(chunk.records.len() + 1);
        let mut start = 0;
        let mut failed = false;
        for record in &chunk.records {
            match preparer.prepare(record.encoding, &chunk.bytes[start..record.end]) {
                Ok(event) => messages.push(Message::Event(event)),
                Err(cause) => {
                    let location = Location {
                        source: Arc::clone(&chunk.source),
                        record: record.record,
                        offset: record.offset,
                        line: record.line,
                    };
                    messages.push(Message::Failed(IngestError::Record { location, cause }));
                    failed = true;
                    break;
                }
            }
            start = record.end;
        }
        if !failed {
            messages.extend(chunk.last);
        }
        if sender.send(messages).is_err() {
            return;
        }
    }
}
