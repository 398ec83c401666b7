//! Vega's event buffer framing: a 4-byte big-endian size (8 + the payload's length), an 8-byte
//! big-endian sequence number (ignored, as Vega's data node does), then one protobuf
//! `BusEvent`.

use bus_proto::buffer::{HEADER_LEN, payload_len};

use super::{Encoding, Fill, Framed, Frames, Held, Reader, Step};
use crate::error::{IngestError, Location, RecordError};

/// The records of a buffer file, framed in place in the reader's buffer; only a record that
/// straddles two reads is copied.
pub(crate) struct Records {
    framed: Framed,
    max_bytes: usize,
    /// The whole length (header included) of the record being copied aside, once its header
    /// is read.
    carry_len: Option<usize>,
}

impl Records {
    pub(crate) fn new(reader: Reader, max_bytes: usize) -> Self {
        Self {
            framed: Framed::new(reader),
            max_bytes,
            carry_len: None,
        }
    }

    /// The whole length of the record whose header is `header`, checked against the bound.
    fn record_len(&self, header: &[u8]) -> Result<usize, IngestError> {
        let payload =
            payload_len(header).map_err(|size| self.error(RecordError::InvalidSize { size }))?;
        if payload > self.max_bytes {
            return Err(self.error(RecordError::TooLarge {
                size: payload as u64,
                max: self.max_bytes,
            }));
        }
        Ok(HEADER_LEN + payload)
    }

    fn error(&self, cause: RecordError) -> IngestError {
        IngestError::Record {
            location: self.location(),
            cause,
        }
    }
}

impl Frames for Records {
    fn advance(&mut self) -> Result<Step, IngestError> {
        loop {
            self.framed.release();
            match self.framed.reader.fill()? {
                Fill::Drained => return Ok(Step::Drained),
                Fill::End if self.framed.carry.is_empty() => return Ok(Step::End),
                Fill::End => {
                    let needed = self.carry_len.unwrap_or(HEADER_LEN);
                    return Err(self.error(RecordError::Truncated {
                        needed: needed as u64,
                        available: self.framed.carry.len() as u64,
                    }));
                }
                Fill::Data => {}
            }
            if self.framed.carry.is_empty() {
                self.framed.record += 1;
                let buffer = self.framed.reader.buffer();
                if buffer.len() >= HEADER_LEN {
                    let len = self.record_len(buffer)?;
                    if self.framed.reader.buffer().len() >= len {
                        self.framed.held = Held::Buffer {
                            start: HEADER_LEN,
                            end: len,
                            consume: len,
                        };
                        return Ok(Step::Record(Encoding::Protobuf));
                    }
                    self.carry_len = Some(len);
                    self.framed.carry.reserve(len);
                }
            }
            // The record straddles reads: copy what is buffered of it, header first.
            let framed = &mut self.framed;
            let wanted = self.carry_len.unwrap_or(HEADER_LEN) - framed.carry.len();
            let buffer = framed.reader.buffer();
            let taken = wanted.min(buffer.len());
            framed.carry.extend_from_slice(&buffer[..taken]);
            framed.reader.consume(taken);
            if self.carry_len.is_none() && self.framed.carry.len() == HEADER_LEN {
                let len = self.record_len(&self.framed.carry)?;
                self.carry_len = Some(len);
                self.framed.carry.reserve(len - HEADER_LEN);
            }
            if self.carry_len == Some(self.framed.carry.len()) {
                self.carry_len = None;
                self.framed.held = Held::Carry { start: HEADER_LEN };
                return Ok(Step::Record(Encoding::Protobuf));
            }
        }
    }

    fn record(&self) -> &[u8] {
        self.framed.record()
    }

    fn location(&self) -> Location {
        self.framed.location(None)
    }
}
