//! Held segments, out of the writer's memory: the small segment each owner's appends make within
//! a transaction of several batches ([`Engine::stage`](super::Engine::stage)), kept in an
//! unlinked temporary file until the transaction ends.
//!
//! A transaction spread over many owners holds one segment per owner it appends to, up to
//! [`SMALL_TAIL_BYTES`](super::SMALL_TAIL_BYTES) each: with thousands of parties, tens of
//! megabytes that grow with the transaction's length. In the file they take a few dozen bytes of
//! memory per owner (where its pieces are), so a backend whose commits cost the most per owner
//! can run longer transactions in the same memory (docs/PERFORMANCE.md, "Longer transactions on
//! PostgreSQL"). The file is written in pieces of [`BUFFER_BYTES`], read back one owner at a
//! time when its segment is written or merged, and emptied when the transaction ends; its pages
//! are the kernel's to keep or write out, in `TMPDIR` (`tempfile`'s choice).
//!
//! Each piece (one owner's lines of one batch: their bytes, then their index entries) carries
//! its checksum: a piece read back with other bytes fails the transaction rather than reaching
//! a stored segment under a checksum computed from it.

use std::collections::HashMap;
use std::fs::File;
use std::hash::Hash;
use std::io;
use std::os::unix::fs::FileExt;

use super::{INDEX_ENTRY, Line, LineKey, Segment, index_entry};
use crate::error::Bug;
use crate::{Error, checksum};

/// Bytes of held lines gathered in memory before they are written to the file together.
const BUFFER_BYTES: usize = 1 << 20;

/// The held segments of one engine, by owner.
#[derive(Debug)]
pub(super) struct Held<O> {
    owners: HashMap<O, Pieces>,
    /// Created with the first piece written to it, dropped when the engine forgets.
    file: Option<File>,
    /// The file's length: pieces at or after this offset are still in `buffer`.
    written: u64,
    /// The pieces after `written`, back to back.
    buffer: Vec<u8>,
    /// A piece read back from the file.
    scratch: Vec<u8>,
    /// The buffer's bytes that send it to the file: [`BUFFER_BYTES`] (a test sends every
    /// piece).
    pub(super) buffer_bytes: usize,
}

/// Where one owner's held segment is: its pieces, in order.
#[derive(Debug)]
struct Pieces {
    pieces: Vec<Piece>,
    /// Its lines' bytes.
    csv: usize,
    /// Its last line's key.
    last: LineKey,
}

/// One batch's lines of an owner: at `offset`, `csv` bytes of lines then `keys` bytes of their
/// index entries, whose checksum is `sum`.
#[derive(Clone, Copy, Debug)]
struct Piece {
    offset: u64,
    csv: u32,
    keys: u32,
    sum: u32,
}

impl<O> Default for Held<O> {
    fn default() -> Self {
        Self {
            owners: HashMap::new(),
            file: None,
            written: 0,
            buffer: Vec::new(),
            scratch: Vec::new(),
            buffer_bytes: BUFFER_BYTES,
        }
    }
}

/// An I/O failure of the temporary file, as the transaction's error.
fn unavailable(err: io::Error) -> Error {
    Error::Unavailable(Box::new(err))
}

impl<O: Copy + Eq + Hash + Ord> Held<O> {
    /// The bytes of `owner`'s held segment's lines, if it has one.
    pub(super) fn bytes(&self, owner: O) -> Option<usize> {
        self.owners.get(&owner).map(|held| held.csv)
    }

    /// The key of the last line of `owner`'s held segment, if it has one.
    pub(super) fn last_key(&self, owner: O) -> Option<LineKey> {
        self.owners.get(&owner).map(|held| held.last)
    }

    /// The owners with a held segment, in order.
    pub(super) fn owners(&self) -> Vec<O> {
        let mut owners: Vec<O> = self.owners.keys().copied().collect();
        owners.sort_unstable();
        owners
    }

    /// Adds `lines` (ascending, after the held ones) to `owner`'s held segment, which they
    /// start when it has none.
    pub(super) fn hold<'a>(
        &mut self,
        owner: O,
        lines: impl Iterator<Item = Line<'a>> + Clone,
    ) -> Result<(), Error> {
        let held = self.owners.get(&owner);
        let mut previous = held.map(|held| held.last);
        let (mut csv, mut last) = (0, None);
        for line in lines.clone() {
            if let Some(previous) = previous.filter(|previous| line.key <= *previous) {
                return Err(Bug::OutOfOrder {
                    previous,
                    next: line.key,
                }
                .into());
            }
            previous = Some(line.key);
            last = previous;
            csv += line.csv.len();
        }
        let Some(last) = last else {
            return Ok(());
        };
        let start = self.buffer.len();
        let mut end = held.map_or(0, |held| held.csv);
        for line in lines.clone() {
            self.buffer.extend_from_slice(line.csv);
        }
        for line in lines {
            end += line.csv.len();
            let end = u32::try_from(end).map_err(|_| Bug::SegmentTooLarge)?;
            index_entry(&mut self.buffer, line.key, line.asset, end);
        }
        let piece = &self.buffer[start..];
        let piece = Piece {
            offset: self.written + start as u64,
            csv: u32::try_from(csv).map_err(|_| Bug::SegmentTooLarge)?,
            keys: u32::try_from(piece.len() - csv).map_err(|_| Bug::SegmentTooLarge)?,
            sum: checksum::of(piece),
        };
        let held = self.owners.entry(owner).or_insert_with(|| Pieces {
            pieces: Vec::new(),
            csv: 0,
            last,
        });
        held.pieces.push(piece);
        held.csv += csv;
        held.last = last;
        if self.buffer.len() >= self.buffer_bytes {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the buffer's pieces to the file.
    fn flush(&mut self) -> Result<(), Error> {
        let file = match &mut self.file {
            Some(file) => file,
            file => file.insert(tempfile::tempfile().map_err(|err| {
                unavailable(io::Error::new(
                    err.kind(),
                    format!(
                        "cannot make the ingest's temporary file of held segments in {} \
                         (TMPDIR): {err}",
                        std::env::temp_dir().display()
                    ),
                ))
            })?),
        };
        file.write_all_at(&self.buffer, self.written)
            .map_err(unavailable)?;
        self.written += self.buffer.len() as u64;
        self.buffer.clear();
        Ok(())
    }

    /// Takes `owner`'s held segment out, read back whole, if it has one.
    pub(super) fn take(&mut self, owner: O) -> Result<Option<Segment>, Error> {
        let Some(held) = self.owners.remove(&owner) else {
            return Ok(None);
        };
        let mut segment = Segment::default();
        let keys: usize = held.pieces.iter().map(|piece| piece.keys as usize).sum();
        segment.reserve_exact(held.csv, keys / INDEX_ENTRY);
        for piece in held.pieces {
            let len = piece.csv as usize + piece.keys as usize;
            let bytes = match piece.offset.checked_sub(self.written) {
                Some(at) => {
                    let at = at as usize;
                    &self.buffer[at..at + len]
                }
                None => {
                    let file = self.file.as_ref().ok_or(Bug::HeldForgotten)?;
                    self.scratch.resize(len, 0);
                    file.read_exact_at(&mut self.scratch, piece.offset)
                        .map_err(unavailable)?;
                    &self.scratch
                }
            };
            if checksum::of(bytes) != piece.sum {
                return Err(unavailable(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "the temporary file of held segments read back other bytes than were \
                     written to it",
                )));
            }
            let (csv, keys) = bytes.split_at(piece.csv as usize);
            segment.csv.extend_from_slice(csv);
            segment.keys.extend_from_slice(keys);
        }
        Ok(Some(segment))
    }

    /// Empties the file once every held segment is taken: the next transaction's pieces start
    /// at its beginning.
    pub(super) fn restart(&mut self) -> Result<(), Error> {
        debug_assert!(self.owners.is_empty(), "held segments left");
        self.owners.clear();
        self.buffer.clear();
        if self.written > 0 {
            self.written = 0;
            if let Some(file) = &self.file {
                file.set_len(0).map_err(unavailable)?;
            }
        }
        Ok(())
    }

    /// Drops every held segment and the file: the transaction that held them failed.
    pub(super) fn forget(&mut self) {
        *self = Self {
            buffer_bytes: self.buffer_bytes,
            ..Self::default()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(time: i64, csv: &str) -> Line<'_> {
        Line {
            key: (time, 1, 1, 0),
            asset: 3,
            csv: csv.as_bytes(),
        }
    }

    /// The segment `lines` make when pushed one by one.
    fn pushed(lines: &[Line<'_>]) -> Segment {
        let mut segment = Segment::default();
        for line in lines {
            segment.push(line.key, line.asset, line.csv).unwrap();
        }
        segment
    }

    #[test]
    fn a_held_segment_reads_back_as_its_lines_pushed_whether_in_the_buffer_or_the_file() {
        let mut held = Held::default();
        let lines = [line(1, "one\n"), line(2, "two\n"), line(3, "three\n")];
        held.hold(7, lines[..2].iter().copied()).unwrap();
        held.hold(8, [line(1, "other\n")].into_iter()).unwrap();
        // A piece big enough to send the buffer to the file, then one left in the buffer.
        let big = "x".repeat(BUFFER_BYTES);
        held.hold(9, [line(1, &big)].into_iter()).unwrap();
        assert!(held.written > 0 && held.buffer.is_empty());
        held.hold(7, lines[2..].iter().copied()).unwrap();
        assert_eq!(
            (held.bytes(7), held.last_key(7)),
            (Some(14), Some(lines[2].key))
        );
        assert_eq!(held.owners(), [7, 8, 9]);
        let segment = held.take(7).unwrap().unwrap();
        assert_eq!(segment, pushed(&lines));
        assert_eq!(segment.footprint(), segment.bytes(), "sized exactly");
        assert_eq!(held.take(7).unwrap(), None, "taken once");
        assert_eq!(held.take(9).unwrap().unwrap().csv.len(), BUFFER_BYTES);
        assert_eq!(
            held.take(8).unwrap().unwrap(),
            pushed(&[line(1, "other\n")])
        );
        held.restart().unwrap();
        assert_eq!(held.file.as_ref().unwrap().metadata().unwrap().len(), 0);
        held.hold(7, [line(9, "again\n")].into_iter()).unwrap();
        assert_eq!(
            held.take(7).unwrap().unwrap(),
            pushed(&[line(9, "again\n")])
        );
    }

    #[test]
    fn lines_out_of_order_are_refused_and_nothing_is_held() {
        let mut held = Held::default();
        held.hold(7, [line(5, "five\n")].into_iter()).unwrap();
        for lines in [
            vec![line(5, "again\n")],
            vec![line(7, "b\n"), line(6, "a\n")],
        ] {
            match held.hold(7, lines.into_iter()) {
                Err(Error::Internal(cause)) => assert!(cause.to_string().contains("must ascend")),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(held.take(7).unwrap().unwrap(), pushed(&[line(5, "five\n")]));
    }

    #[test]
    fn a_damaged_piece_fails_rather_than_reaching_a_segment() {
        let mut held = Held::default();
        let big = "x".repeat(BUFFER_BYTES);
        held.hold(7, [line(1, &big)].into_iter()).unwrap();
        held.file.as_ref().unwrap().write_all_at(b"y", 10).unwrap();
        match held.take(7) {
            Err(Error::Unavailable(cause)) => {
                assert!(cause.to_string().contains("other bytes"), "{cause}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_forgetful_store_holds_nothing() {
        let mut held = Held::default();
        held.hold(7, [line(1, "one\n")].into_iter()).unwrap();
        held.forget();
        assert_eq!(held.owners(), Vec::<u8>::new());
        assert_eq!(held.take(7).unwrap(), None);
    }
}
