//! NDJSON framing: one record per non-blank line.

use super::{Encoding, Fill, Framed, Frames, Held, Reader, Step};
use crate::error::{IngestError, Location, RecordError};

/// The lines of an input, framed in place in the reader's buffer; only a line that straddles
/// two reads is copied.
pub(crate) struct Lines {
    framed: Framed,
    max_bytes: usize,
    /// Lines seen, blank ones included.
    line: u64,
}

impl Lines {
    pub(crate) fn new(reader: Reader, max_bytes: usize) -> Self {
        Self {
            framed: Framed::new(reader),
            max_bytes,
            line: 0,
        }
    }

    /// Holds the line just found, unless it is blank.
    fn hold(&mut self, held: Held) -> bool {
        self.line += 1;
        self.framed.held = held;
        if self.framed.record().iter().all(u8::is_ascii_whitespace) {
            return false;
        }
        self.framed.record += 1;
        true
    }

    fn too_large(&self, size: usize) -> IngestError {
        let mut location = self.framed.location(Some(self.line + 1));
        location.record += 1;
        IngestError::Record {
            location,
            cause: RecordError::TooLarge {
                size: size as u64,
                max: self.max_bytes,
            },
        }
    }
}

impl Frames for Lines {
    fn advance(&mut self) -> Result<Step, IngestError> {
        loop {
            let framed = &mut self.framed;
            framed.release();
            match framed.reader.fill()? {
                Fill::Drained => return Ok(Step::Drained),
                Fill::End if framed.carry.is_empty() => return Ok(Step::End),
                // The last line may lack its newline.
                Fill::End => {
                    if self.hold(Held::Carry { start: 0 }) {
                        return Ok(Step::Record(Encoding::Json));
                    }
                    continue;
                }
                Fill::Data => {}
            }
            let buffer = framed.reader.buffer();
            let Some(len) = memchr::memchr(b'\n', buffer) else {
                // Stop before the rest of a long line is even read.
                let size = framed.carry.len() + buffer.len();
                if size > self.max_bytes {
                    return Err(self.too_large(size));
                }
                framed.carry.extend_from_slice(buffer);
                let consumed = buffer.len();
                framed.reader.consume(consumed);
                continue;
            };
            let size = framed.carry.len() + len;
            if size > self.max_bytes {
                return Err(self.too_large(size));
            }
            let held = if framed.carry.is_empty() {
                Held::Buffer {
                    start: 0,
                    end: len,
                    consume: len + 1,
                }
            } else {
                framed.carry.extend_from_slice(&buffer[..len]);
                framed.reader.consume(len + 1);
                Held::Carry { start: 0 }
            };
            if self.hold(held) {
                return Ok(Step::Record(Encoding::Json));
            }
        }
    }

    fn record(&self) -> &[u8] {
        self.framed.record()
    }

    fn location(&self) -> Location {
        self.framed.location(Some(self.line))
    }
}
