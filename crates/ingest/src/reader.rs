//! The reader thread: frames the input, decodes each record into an event, encodes the event's
//! values, and hands them to the assembler in chunks.

use std::sync::mpsc::SyncSender;

use ledger_core::CsvRowEncoder;

use crate::decode::{json, proto};
use crate::error::IngestError;
use crate::frames::{Encoding, Frames, Step};
use crate::prepare::{Prepared, prepare};
use crate::{Format, Input};

/// Events the reader hands over at once: one channel hand-off (and at most one wake-up of the
/// assembler) per chunk instead of per event.
const CHUNK_EVENTS: usize = 256;

/// Chunks decoded ahead of the assembler: enough to ride out its hiccups, few enough that their
/// rows stay a few megabytes.
pub(crate) const QUEUE_CHUNKS: usize = 16;

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

/// Reads `input` to its end (or its first error) and sends what it finds: a chunk goes out
/// when full and whenever the framing has used up what is buffered, before a read that may
/// wait on a live stream.
pub(crate) fn read(
    input: Input,
    format: Option<Format>,
    max_record_bytes: usize,
    sender: &SyncSender<Chunk>,
) {
    let send = |chunk: &mut Chunk| {
        let full = std::mem::replace(chunk, Vec::with_capacity(CHUNK_EVENTS));
        full.is_empty() || sender.send(full).is_ok()
    };
    let mut chunk = Vec::with_capacity(CHUNK_EVENTS);
    match input.open(format, max_record_bytes) {
        Ok(mut frames) => read_frames(&mut *frames, &mut chunk, send),
        Err(err) => {
            chunk.push(Message::Failed(err));
            send(&mut chunk);
        }
    }
}

fn read_frames(
    frames: &mut dyn Frames,
    chunk: &mut Chunk,
    mut send: impl FnMut(&mut Chunk) -> bool,
) {
    let mut encoder = CsvRowEncoder::new();
    loop {
        let step = match frames.advance() {
            Ok(step) => step,
            Err(err) => {
                chunk.push(Message::Failed(err));
                send(chunk);
                return;
            }
        };
        match step {
            Step::Record(encoding) => {
                let decoded = match encoding {
                    Encoding::Json => json::decode(frames.record()),
                    Encoding::Protobuf => proto::decode(frames.record()),
                };
                match decoded {
                    Ok(event) => chunk.push(Message::Event(prepare(event, &mut encoder))),
                    Err(cause) => {
                        let location = frames.location();
                        match frames.reject(IngestError::Record { location, cause }) {
                            Ok(()) => chunk.push(Message::Refused),
                            Err(err) => {
                                chunk.push(Message::Failed(err));
                                send(chunk);
                                return;
                            }
                        }
                    }
                }
                if chunk.len() == CHUNK_EVENTS && !send(chunk) {
                    return;
                }
            }
            Step::Drained => {
                if !send(chunk) {
                    return;
                }
            }
            Step::PeerGone | Step::Refused => {
                chunk.push(match step {
                    Step::PeerGone => Message::PeerGone,
                    _ => Message::Refused,
                });
                if !send(chunk) {
                    return;
                }
            }
            Step::End => {
                send(chunk);
                return;
            }
        }
    }
}
