//! Ledger segments: a party's finished CSV lines stored back to back in export order, in blobs
//! of about [`SEGMENT_BYTES`], each with a fixed-width index of its lines.
//!
//! An export copies whole segments to the socket instead of stepping a b-tree row by row; only
//! the two segments at the edges of a time window, and every segment of a one-asset export, are
//! cut line by line through the index. Both backends store segments the same way: the lines
//! (`csv`) and the index (`keys`) as two blobs, keyed by the party and the last line's key.
//! Both backends store their oracle data in segments too (`ORACLE`, `store_oracle`): there a
//! line is a datum's JSON, its key the datum's position with entry index 0, its asset 0.
//!
//! The index holds one [`INDEX_ENTRY`]-byte entry per line, little-endian: vega time (i64), block
//! (i64), sequence number (i64), entry index (i64), asset dictionary id (i64), and the offset in
//! `csv` where the line ends (u32). A stored index is checked before use: a damaged one is
//! reported as [`Error::Corrupt`], never trusted for slicing.

mod engine;
mod held;
mod oracle;

use std::collections::HashMap;
use std::hash::Hash;
use std::ops::ControlFlow;

use oracle_core::{Position, Scan};

pub use engine::{Ask, Engine, Kept, Packing, SegmentTable, Touched, trailing_run};
pub use oracle::store_oracle;

use crate::error::{Bug, Damage};
use crate::{Error, ExportSink, ExportSummary};

/// The CSV bytes after which a segment is sealed and the next line starts a new one.
pub const SEGMENT_BYTES: usize = 256 * 1024;

/// A segment with fewer lines' bytes than this is small. A party's segments end with a run of
/// at most [`RUN_SEGMENTS`] small ones: a batch that only appends writes its lines as a segment
/// of their own after them, or merges them with its lines once the run would hold this many
/// bytes or more segments (see [`Packing`]). So a stream committed a block at a time (the live
/// socket) still ends up in large segments, a merge never copies more than this, and a batch
/// rewrites a party's stored lines once every few batches instead of at each.
pub const SMALL_TAIL_BYTES: usize = 32 * 1024;

/// The most small segments a party's ledger segments end with (see [`SMALL_TAIL_BYTES`]).
pub const RUN_SEGMENTS: usize = 8;

/// The most bytes of runs of small segments a writer keeps whole per table, counted as the
/// memory their buffers take (see [`Tails`]), unless its
/// [`WriterOptions`](crate::WriterOptions) say otherwise. An owner beyond it is remembered by
/// its run's shape alone: a batch that appends a segment of its own to the run reads nothing
/// back, one that merges the run reads it back first, once every few transactions of that
/// owner. The stored bytes are the same whatever the bound. At 16 MiB the 16× ingest (3,200
/// parties) held 278–280 MiB on SQLite and 217–220 MiB on PostgreSQL where 128 MiB held 344
/// and 284 MiB, at 0.97–1.01× of its rate on SQLite and 0.90–0.96× on PostgreSQL (two
/// `bench --scale 1,16` runs each; docs/PERFORMANCE.md, "The writer's bound lowered"); measured
/// again on PostgreSQL's 16× stream alternated with 128 MiB, 0.86–0.94× of its rate for 60–70
/// MiB less (docs/PERFORMANCE.md, "The curve as medians of three ingests").
pub const TAILS_BYTES: usize = 16 << 20;

/// A table of segments as both backends lay it out: its name, its owner and lines columns (the
/// index is `keys`), and how its segments are cut.
#[derive(Debug)]
pub struct Table {
    /// The table.
    pub name: &'static str,
    /// The owner's column: a dictionary id.
    pub owner: &'static str,
    /// The column of the lines.
    pub lines: &'static str,
    /// Where its segments are cut.
    pub packing: Packing,
}

/// The ledger: a party's CSV lines across all its assets.
pub const LEDGER: Table = Table {
    name: "ledger_segments",
    owner: "party",
    lines: "csv",
    packing: Packing {
        seal: SEGMENT_BYTES,
        small_tail: SMALL_TAIL_BYTES,
        run: RUN_SEGMENTS,
    },
};

/// Oracle data: per spec the data that matched it, and under one more owner (0) every datum,
/// each line a datum's JSON keyed by its position with entry index 0. Much smaller than the
/// ledger's: an export reads whole segments, a page about a hundred data, the latest value of a
/// spec one, and what a page reads beyond its data is read, verified (and on PostgreSQL sent,
/// often through TLS, and decompressed) for nothing. On PostgreSQL, with 64 KiB segments the
/// latest value took 0.57–0.65 ms against 0.35 ms for rows; a segment of 16 KiB compresses to
/// about 4 KB. SQLite, which does not compress, seals its own at 13 KiB (`sqlite/segments.rs`).
/// A spec's small last segment is rewritten with each batch (a run of one): a run of several
/// would make the newest page read several segments, and a spec's rewrites do not grow with
/// the number of parties.
pub const ORACLE: Table = Table {
    name: "oracle_segments",
    owner: "spec",
    lines: "json",
    packing: Packing {
        seal: 16 * 1024,
        small_tail: 8 * 1024,
        run: 1,
    },
};

/// What a writer knows of its owners' last stored segments, so that a batch that only appends
/// to an owner reads nothing back: each owner's last key, and its run (the small segments its
/// segments end with, which the engine grows or merges, see [`Packing`]), kept whole while the
/// runs kept whole take at most [`TAILS_BYTES`], and beyond that by their shape
/// ([`Remembered`]). Both backends' writers keep one per table. It is only valid while the
/// writer is the only one committing, and is forgotten with a failed transaction.
#[derive(Debug)]
pub struct Tails<O> {
    tails: HashMap<O, Tail>,
    /// The memory of the runs kept whole in `tails`, at most `max_bytes`.
    bytes: usize,
    max_bytes: usize,
}

/// The segments a run holds, each with its key (its last line's), in key order.
pub type Run = Vec<(LineKey, Segment)>;

/// What a writer remembers of an owner's run: its stored segments (a held segment after them
/// is the engine's, see [`Engine::stage`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Remembered {
    /// The run's segments, whole: a batch that merges them reads nothing back.
    Whole(Run),
    /// The run's shape, for an owner beyond the bound of runs kept whole: enough to append a
    /// segment of its own after the run, not to merge it.
    Shape(Shape),
}

/// A run's shape: what a batch needs to decide whether it appends a segment of its own after
/// the run or merges the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Each stored segment of the run: its key and its lines' bytes, in key order.
    pub stored: Vec<(LineKey, usize)>,
}

impl Shape {
    /// The shape of `run`.
    fn of(run: Run) -> Self {
        Shape {
            stored: run
                .into_iter()
                .map(|(key, segment)| (key, segment.csv.len()))
                .collect(),
        }
    }
}

impl Remembered {
    /// The run's segments and their lines' bytes.
    pub fn size(&self) -> (usize, usize) {
        match self {
            Remembered::Whole(run) => (run.len(), run.iter().map(|(_, s)| s.csv.len()).sum()),
            Remembered::Shape(Shape { stored }) => {
                (stored.len(), stored.iter().map(|(_, bytes)| bytes).sum())
            }
        }
    }

    /// The key of the run's last segment.
    pub fn last_key(&self) -> Option<LineKey> {
        match self {
            Remembered::Whole(run) => run.last().map(|(key, _)| *key),
            Remembered::Shape(Shape { stored }) => stored.last().map(|(key, _)| *key),
        }
    }
}

/// An owner's last key, and what is remembered of the run of small segments its segments end
/// with (empty when its last segment is not small).
#[derive(Debug)]
struct Tail {
    last: LineKey,
    run: Remembered,
}

impl<O: Copy + Eq + Hash> Default for Tails<O> {
    fn default() -> Self {
        Self::bounded(TAILS_BYTES)
    }
}

impl<O: Copy + Eq + Hash> Tails<O> {
    /// Keeps runs of `max_bytes` whole in all.
    pub(crate) fn bounded(max_bytes: usize) -> Self {
        Self {
            tails: HashMap::new(),
            bytes: 0,
            max_bytes,
        }
    }

    /// Forgets every owner: another writer committed, or a transaction that wrote them failed.
    pub fn forget(&mut self) {
        self.tails.clear();
        self.bytes = 0;
    }

    /// The run of `owner`, when a batch whose first line is at `first` only appends to it and
    /// the owner is known (an empty run when its last segment is not small); otherwise `None`,
    /// and its stored segments are read back. The owner is forgotten until
    /// [`remember`](Self::remember)ed again.
    pub fn take(&mut self, owner: O, first: LineKey) -> Option<Remembered> {
        let tail = self.tails.remove(&owner)?;
        if let Remembered::Whole(run) = &tail.run {
            self.bytes -= footprint(run);
        }
        (tail.last < first).then_some(tail.run)
    }

    /// Remembers that `owner`'s segments end at `last` with `run`: whole within the bound,
    /// else by its shape.
    pub fn remember(&mut self, owner: O, last: LineKey, run: Remembered) {
        let run = match run {
            Remembered::Whole(run) => {
                let bytes = footprint(&run);
                if self.bytes + bytes <= self.max_bytes {
                    self.bytes += bytes;
                    Remembered::Whole(run)
                } else {
                    Remembered::Shape(Shape::of(run))
                }
            }
            shape @ Remembered::Shape(_) => shape,
        };
        self.tails.insert(owner, Tail { last, run });
    }

    /// `owner`'s held segment, `written`: its run goes on with it as stored, a copy kept whole
    /// (in a buffer of its size) while the bound allows. False when the owner is not known.
    pub fn written(&mut self, owner: O, written: &Segment) -> bool {
        let (Some(tail), Some(key)) = (self.tails.remove(&owner), written.last_key()) else {
            return false;
        };
        // Copied only when the copy is kept: most owners of a stream of many parties are
        // remembered by their shape, and their held segments would be copied for nothing.
        let kept = match tail.run {
            Remembered::Whole(run) => {
                let bytes = footprint(&run);
                self.bytes -= bytes;
                if self.bytes + bytes + written.bytes() <= self.max_bytes {
                    Ok(run)
                } else {
                    Err(Shape::of(run))
                }
            }
            Remembered::Shape(shape) => Err(shape),
        };
        let run = match kept {
            Ok(mut run) => {
                run.push((key, written.clone()));
                Remembered::Whole(run)
            }
            Err(mut shape) => {
                shape.stored.push((key, written.csv.len()));
                Remembered::Shape(shape)
            }
        };
        self.remember(owner, tail.last.max(key), run);
        true
    }
}

/// The memory a run's segments take.
fn footprint(run: &Run) -> usize {
    run.iter().map(|(_, segment)| segment.footprint()).sum()
}

/// Bytes of one line's entry in a segment's index.
pub const INDEX_ENTRY: usize = 44;

/// Appends a line's index entry to `keys`: its key, its asset, and `end`, where its bytes end in
/// the segment's lines.
fn index_entry(keys: &mut Vec<u8>, key: LineKey, asset: i64, end: u32) {
    for value in [key.0, key.1, key.2, key.3, asset] {
        keys.extend_from_slice(&value.to_le_bytes());
    }
    keys.extend_from_slice(&end.to_le_bytes());
}

/// A line's place in the total order: vega time, block, sequence number, entry index.
pub type LineKey = (i64, i64, i64, i64);

/// The key of a stored segment, as a damage report names it: its owner column and value, and
/// its last line's key (the table's key columns).
pub fn describe(owner: &str, id: i64, last: LineKey) -> String {
    let (time, block, seq, idx) = last;
    format!("{owner} {id} last ({time}, {block}, {seq}, {idx})")
}

/// The key of an oracle datum's line at `position` (entry index 0). A stored height or
/// sequence number fits in i64 (ingest checks); a larger one from a cursor sorts after all of
/// them, and saturating keeps that true.
pub fn datum_key(position: Position) -> LineKey {
    let saturate = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    (
        position.vega_time,
        saturate(position.block),
        saturate(position.seq),
        0,
    )
}

/// The smallest key at a vega time: every line at `time` sorts at or after it.
pub fn first_key_at(time: i64) -> LineKey {
    (time, i64::MIN, i64::MIN, i64::MIN)
}

/// The keys from `first` to `last`, both included: what an export reads of each segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyRange {
    /// The first key in the range.
    pub first: LineKey,
    /// The last key in the range.
    pub last: LineKey,
}

impl KeyRange {
    /// Every line within the vega-time window `[low, high]` (inclusive).
    pub fn window(low: i64, high: i64) -> Self {
        KeyRange {
            first: first_key_at(low),
            last: (high, i64::MAX, i64::MAX, i64::MAX),
        }
    }

    /// The part of the range after `key`, `None` when nothing is left of it.
    pub fn after(self, key: LineKey) -> Option<Self> {
        let next = successor(key)?;
        let first = self.first.max(next);
        (first <= self.last).then_some(KeyRange { first, ..self })
    }

    /// The part of the range up to `key` (included), `None` when nothing is left of it.
    pub fn up_to(self, key: LineKey) -> Option<Self> {
        let last = self.last.min(key);
        (self.first <= last).then_some(KeyRange { last, ..self })
    }
}

/// The next key in the total order, `None` after the greatest.
fn successor((time, block, seq, idx): LineKey) -> Option<LineKey> {
    Some(match idx.checked_add(1) {
        Some(idx) => (time, block, seq, idx),
        None => match seq.checked_add(1) {
            Some(seq) => (time, block, seq, i64::MIN),
            None => match block.checked_add(1) {
                Some(block) => (time, block, i64::MIN, i64::MIN),
                None => (time.checked_add(1)?, i64::MIN, i64::MIN, i64::MIN),
            },
        },
    })
}

/// One line of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line<'a> {
    /// Its place in the total order.
    pub key: LineKey,
    /// The asset's dictionary id.
    pub asset: i64,
    /// The finished CSV line, with its `\n` (in an oracle segment, a datum's JSON).
    pub csv: &'a [u8],
}

/// A segment being built, or read back whole to be rewritten.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    /// The lines, back to back.
    pub csv: Vec<u8>,
    /// One [`INDEX_ENTRY`] per line.
    pub keys: Vec<u8>,
}

impl Segment {
    /// Appends a line. Lines come in strictly ascending key order, which every reader of a
    /// segment relies on (binary search, the export's order): a line that does not is refused
    /// here, when it is written, rather than found when the segment is read back.
    pub fn push(&mut self, key: LineKey, asset: i64, csv: &[u8]) -> Result<(), Error> {
        if let Some(previous) = self.last_key()
            && key <= previous
        {
            return Err(Bug::OutOfOrder {
                previous,
                next: key,
            }
            .into());
        }
        self.csv.extend_from_slice(csv);
        let end = u32::try_from(self.csv.len()).map_err(|_| Bug::SegmentTooLarge)?;
        index_entry(&mut self.keys, key, asset, end);
        Ok(())
    }

    /// A segment read back from a store, its index checked first (see [`SegmentRef::new`]).
    pub fn from_stored(csv: Vec<u8>, keys: Vec<u8>) -> Result<Self, Error> {
        SegmentRef::new(&csv, &keys)?;
        Ok(Segment { csv, keys })
    }

    /// The bytes of its lines and index.
    pub fn bytes(&self) -> usize {
        self.csv.len() + self.keys.len()
    }

    /// Makes room for exactly `lines` more lines of `bytes` bytes in all, so that pushing them
    /// allocates nothing more and leaves no spare capacity behind.
    pub fn reserve_exact(&mut self, bytes: usize, lines: usize) {
        self.csv.reserve_exact(bytes);
        self.keys.reserve_exact(lines * INDEX_ENTRY);
    }

    /// The memory its buffers take: [`bytes`](Self::bytes) and their spare capacity.
    pub fn footprint(&self) -> usize {
        self.csv.capacity() + self.keys.capacity()
    }

    /// The lines it holds.
    pub fn lines(&self) -> usize {
        self.keys.len() / INDEX_ENTRY
    }

    /// A view for reading, unchecked: a segment built here is well formed.
    pub fn view(&self) -> SegmentRef<'_> {
        SegmentRef {
            csv: &self.csv,
            keys: &self.keys,
        }
    }

    /// The first line's key (`None` when empty).
    pub fn first_key(&self) -> Option<LineKey> {
        (!self.keys.is_empty()).then(|| self.view().key(0))
    }

    /// The last line's key (`None` when empty).
    pub fn last_key(&self) -> Option<LineKey> {
        self.lines()
            .checked_sub(1)
            .map(|last| self.view().key(last))
    }
}

/// A stored segment, borrowed from the backend's row buffer, its index checked.
#[derive(Clone, Copy, Debug)]
pub struct SegmentRef<'a> {
    csv: &'a [u8],
    keys: &'a [u8],
}

impl<'a> SegmentRef<'a> {
    /// Checks a stored segment: whole index entries, line ends ascending and within the lines,
    /// the last one at their end, keys ascending.
    pub fn new(csv: &'a [u8], keys: &'a [u8]) -> Result<Self, Error> {
        let corrupt = |what: &'static str| Err(Damage::Segment(what).into());
        if !keys.len().is_multiple_of(INDEX_ENTRY) {
            return corrupt("index of a partial entry");
        }
        let segment = SegmentRef { csv, keys };
        let mut start = 0;
        let mut previous = None;
        for i in 0..segment.len() {
            let end = segment.end(i);
            if end <= start || end > csv.len() {
                return corrupt("line end out of order or out of bounds");
            }
            let key = segment.key(i);
            if previous.is_some_and(|previous| previous >= key) {
                return corrupt("line keys out of order");
            }
            previous = Some(key);
            start = end;
        }
        if start != csv.len() {
            return corrupt("lines not covered by the index");
        }
        Ok(segment)
    }

    /// How many lines it holds.
    pub fn len(&self) -> usize {
        self.keys.len() / INDEX_ENTRY
    }

    /// Whether the segment holds no line (a stored one never does).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn field(&self, line: usize, field: usize) -> i64 {
        let at = line * INDEX_ENTRY + field * 8;
        i64::from_le_bytes(self.keys[at..at + 8].try_into().expect("eight bytes"))
    }

    fn end(&self, line: usize) -> usize {
        let at = line * INDEX_ENTRY + 40;
        u32::from_le_bytes(self.keys[at..at + 4].try_into().expect("four bytes")) as usize
    }

    fn start(&self, line: usize) -> usize {
        line.checked_sub(1).map_or(0, |previous| self.end(previous))
    }

    fn key(&self, line: usize) -> LineKey {
        (
            self.field(line, 0),
            self.field(line, 1),
            self.field(line, 2),
            self.field(line, 3),
        )
    }

    /// Line `i`.
    pub fn line(&self, i: usize) -> Line<'a> {
        Line {
            key: self.key(i),
            asset: self.field(i, 4),
            csv: &self.csv[self.start(i)..self.end(i)],
        }
    }

    /// Every line, in order.
    pub fn iter(self) -> impl Iterator<Item = Line<'a>> + Clone {
        (0..self.len()).map(move |i| self.line(i))
    }

    /// The first line at or after `key` (`len()` when none is).
    fn partition(&self, key: LineKey) -> usize {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let middle = low + (high - low) / 2;
            if self.key(middle) < key {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        low
    }

    /// The data of an oracle segment that a page's `scan` takes from it: in scan direction,
    /// those beyond the scan's anchor (at it too when inclusive), at most `room`, each handed
    /// to `take` with its position. Returns how many it took. Both backends' oracle segments
    /// are read through this.
    pub fn scan_data(
        &self,
        scan: &Scan,
        room: usize,
        mut take: impl FnMut(Position, &'a [u8]),
    ) -> usize {
        let lines = match (scan.after.map(datum_key), scan.descending, scan.inclusive) {
            (None, _, _) => 0..self.len(),
            (Some(anchor), false, true) => self.partition(anchor)..self.len(),
            (Some(anchor), false, false) => self.partition_after(anchor)..self.len(),
            (Some(anchor), true, true) => 0..self.partition_after(anchor),
            (Some(anchor), true, false) => 0..self.partition(anchor),
        };
        let count = lines.len().min(room);
        let mut take_line = |i: usize| {
            let line = self.line(i);
            let (vega_time, block, seq, _) = line.key;
            // Stored keys of data are never negative but in time (ingest checks).
            let position = Position {
                vega_time,
                block: block as u64,
                seq: seq as u64,
            };
            take(position, line.csv);
        };
        if scan.descending {
            (lines.end - count..lines.end)
                .rev()
                .for_each(&mut take_line);
        } else {
            (lines.start..lines.start + count).for_each(&mut take_line);
        }
        count
    }

    /// The line at `key`, if the segment holds one.
    pub fn find(&self, key: LineKey) -> Option<Line<'a>> {
        let at = self.partition(key);
        (at < self.len() && self.key(at) == key).then(|| self.line(at))
    }

    /// Hands the lines within `range` and, when `asset` is given, of that asset, to the sink in
    /// as few calls as runs of adjacent lines allow.
    pub fn emit(
        &self,
        range: KeyRange,
        asset: Option<i64>,
        sink: &mut dyn ExportSink,
        summary: &mut ExportSummary,
    ) -> ControlFlow<()> {
        let first = self.partition(range.first);
        let end = first.max(self.partition_after(range.last));
        let mut run = first;
        for i in first..end {
            if asset.is_some_and(|asset| self.field(i, 4) != asset) {
                self.send(run..i, sink, summary)?;
                run = i + 1;
            }
        }
        self.send(run..end, sink, summary)
    }

    /// The first line after `key` (`len()` when none is).
    fn partition_after(&self, key: LineKey) -> usize {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let middle = low + (high - low) / 2;
            if self.key(middle) <= key {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        low
    }

    fn send(
        &self,
        lines: std::ops::Range<usize>,
        sink: &mut dyn ExportSink,
        summary: &mut ExportSummary,
    ) -> ControlFlow<()> {
        if lines.is_empty() {
            return ControlFlow::Continue(());
        }
        let count = (lines.end - lines.start) as u64;
        summary.rows += count;
        let result = sink.rows(
            &self.csv[self.start(lines.start)..self.end(lines.end - 1)],
            count,
        );
        if result.is_break() {
            summary.stopped = true;
        }
        result
    }
}

/// Lays out a party's segments after a batch: the stored segments that the batch's lines touch
/// (those whose last key is at or after the batch's first key, or else a small last segment to
/// grow), merged with the batch's lines (sorted, ascending), then cut after `seal` bytes of
/// lines ([`SEGMENT_BYTES`] for the ledger). A batch line whose key is stored already is
/// dropped: rows are immutable.
///
/// Each new segment takes a buffer of exactly its size. Grown by doubling, a segment sealed
/// just past 256 KiB kept a 512 KiB buffer, and the merges' new segments were the largest part
/// of the ingest's heap at its peak (docs/PERFORMANCE.md, "A merge's new segments sized
/// exactly"). Lines that fit one segment (a run merged with a few appended lines, the common
/// merge) are pushed into one allocation of their size; more are built in one scratch segment,
/// each copied out at its size (a `Vec`'s clone takes its length). Both are faster than the
/// doublings were (`cargo bench -p storage --bench segment`).
///
/// The caller replaces `stored` with the result in one transaction.
pub fn rebuild<'a>(
    stored: &[Segment],
    batch: impl Iterator<Item = Line<'a>> + Clone,
    seal: usize,
) -> Result<Vec<Segment>, Error> {
    // Whether the lines fit one segment, and then at most how many bytes and lines they take
    // (a batch line stored already is dropped); the sum stops once they do not.
    let stored_size = stored.iter().map(|s| (s.csv.len(), s.lines()));
    let one = stored_size
        .chain(batch.clone().map(|line| (line.csv.len(), 1)))
        .try_fold((0, 0), |(bytes, lines), (more, count)| {
            let bytes = bytes + more;
            (bytes <= seal).then_some((bytes, lines + count))
        });
    let mut scratch = Segment::default();
    if let Some((bytes, lines)) = one {
        // The line that would start a second segment would take them past `seal`.
        scratch.reserve_exact(bytes, lines);
    }
    let mut out = Vec::new();
    let cut = |scratch: &mut Segment, out: &mut Vec<Segment>| {
        if scratch.footprint() == scratch.bytes() {
            out.push(std::mem::take(scratch));
        } else {
            out.push(scratch.clone());
            scratch.csv.clear();
            scratch.keys.clear();
        }
    };
    for line in merged(stored, batch) {
        if scratch.csv.len() >= seal {
            cut(&mut scratch, &mut out);
        }
        scratch.push(line.key, line.asset, line.csv)?;
    }
    if !scratch.keys.is_empty() {
        cut(&mut scratch, &mut out);
    }
    Ok(out)
}

/// The stored segments' lines and the batch's, in key order; a batch line whose key is stored
/// already gives way to the stored one.
fn merged<'s, 'b: 's>(
    stored: &'s [Segment],
    batch: impl Iterator<Item = Line<'b>>,
) -> impl Iterator<Item = Line<'s>> {
    let mut old = stored
        .iter()
        .flat_map(|segment| segment.view().iter())
        .peekable();
    let mut new = batch.peekable();
    std::iter::from_fn(move || match (old.peek(), new.peek()) {
        (None, None) => None,
        (Some(_), None) => old.next(),
        (None, Some(_)) => new.next(),
        (Some(stored), Some(line)) if stored.key < line.key => old.next(),
        (Some(stored), Some(line)) if stored.key == line.key => {
            new.next();
            old.next()
        }
        (Some(_), Some(_)) => new.next(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line at `time`; lines at one time differ by their sequence number (`asset`, since
    /// the tests give each line of a time its own asset or time).
    fn line(time: i64, asset: i64) -> (LineKey, i64, Vec<u8>) {
        (
            (time, 1, asset, 0),
            asset,
            format!("{time},asset{asset}\n").into_bytes(),
        )
    }

    fn segment(lines: &[(LineKey, i64, Vec<u8>)]) -> Segment {
        let mut segment = Segment::default();
        for (key, asset, csv) in lines {
            segment.push(*key, *asset, csv).unwrap();
        }
        segment
    }

    #[test]
    fn lines_pushed_out_of_order_are_refused() {
        let mut segment = segment(&[line(10, 1), line(11, 2)]);
        let before = segment.clone();
        for (key, asset, csv) in [line(11, 2), line(10, 3), line(5, 1)] {
            match segment.push(key, asset, &csv) {
                Err(Error::Internal(cause)) => assert!(cause.to_string().contains("must ascend")),
                other => panic!("{key:?} after (11, …): {other:?}"),
            }
        }
        assert_eq!(segment, before);
        let (key, asset, csv) = line(12, 1);
        segment.push(key, asset, &csv).unwrap();
    }

    #[test]
    fn tails_keep_runs_whole_within_their_bound_and_the_others_by_shape() {
        let small = segment(&[line(10, 1), line(11, 2)]);
        let small_key = small.last_key().unwrap();
        let run = || Remembered::Whole(vec![(small_key, small.clone())]);
        let empty = || Remembered::Whole(Run::new());
        let shape = |segments| {
            Remembered::Shape(Shape {
                stored: vec![(small_key, small.csv.len()); segments],
            })
        };
        let large_key = (22, 1, 0, 0);
        // Runs of two of the small segment's size whole at most.
        let mut tails = Tails::bounded(2 * small.footprint());
        let later = (100, 0, 0, 0);
        tails.remember(1, small_key, run());
        tails.remember(2, large_key, empty());
        tails.remember(3, small_key, run());
        // Full: owner 4 is remembered by its run's shape; an empty run costs nothing.
        tails.remember(4, small_key, run());
        tails.remember(5, large_key, empty());
        assert_eq!(tails.take(4, later), Some(shape(1)));
        assert_eq!(tails.take(5, later), Some(empty()));
        assert_eq!(tails.take(1, later), Some(run()));
        // Taken: forgotten, and its bytes free again for another owner.
        assert_eq!(tails.take(1, later), None);
        tails.remember(4, small_key, run());
        assert_eq!(tails.take(4, later), Some(run()));
        // A batch that does not only append reads the stored segments back.
        assert_eq!(tails.take(2, large_key), None);
        assert_eq!(tails.take(3, small_key), None);
        // A held segment written joins the run, whole while the bound allows, else by its
        // shape; an owner not known is refused.
        tails.remember(1, small_key, run());
        tails.remember(6, small_key, run());
        assert!(tails.written(6, &small), "beyond the bound with it");
        assert_eq!(tails.take(6, later), Some(shape(2)));
        assert!(!tails.written(6, &small));
        tails.forget();
        assert_eq!(tails.take(3, later), None);
    }

    #[test]
    fn a_held_segment_written_stays_whole_in_a_buffer_of_its_size() {
        let mut grown = segment(&[line(10, 1)]);
        grown.csv.reserve(4096);
        let (key, lines) = (grown.last_key().unwrap(), grown.clone());
        let mut tails = Tails::bounded(usize::MAX);
        tails.remember(1, key, Remembered::Whole(Run::new()));
        assert!(tails.written(1, &grown));
        // What is remembered takes the memory of its bytes alone, and is counted so.
        assert_eq!(tails.bytes, lines.bytes());
        let Some(Remembered::Whole(run)) = tails.take(1, (100, 0, 0, 0)) else {
            panic!("forgotten");
        };
        assert_eq!(run[0].1.footprint(), lines.bytes());
        assert_eq!(run, [(key, lines)]);
        assert_eq!(tails.bytes, 0);
    }

    #[derive(Default)]
    struct Collect {
        bytes: Vec<u8>,
        calls: usize,
        rows: u64,
    }

    impl ExportSink for Collect {
        fn started(&mut self) -> ControlFlow<()> {
            ControlFlow::Continue(())
        }
        fn rows(&mut self, csv_lines: &[u8], count: u64) -> ControlFlow<()> {
            self.bytes.extend_from_slice(csv_lines);
            self.calls += 1;
            self.rows += count;
            ControlFlow::Continue(())
        }
    }

    fn emit(segment: &Segment, low: i64, high: i64, asset: Option<i64>) -> (String, Collect) {
        emit_range(segment, KeyRange::window(low, high), asset)
    }

    fn emit_range(segment: &Segment, range: KeyRange, asset: Option<i64>) -> (String, Collect) {
        let view = SegmentRef::new(&segment.csv, &segment.keys).unwrap();
        let mut sink = Collect::default();
        let mut summary = ExportSummary::default();
        assert!(
            view.emit(range, asset, &mut sink, &mut summary)
                .is_continue()
        );
        assert_eq!(summary.rows, sink.rows);
        (String::from_utf8(sink.bytes.clone()).unwrap(), sink)
    }

    #[test]
    fn a_whole_segment_goes_out_in_one_call() {
        let lines: Vec<_> = (1..=5).map(|t| line(t, t % 2)).collect();
        let (text, sink) = emit(&segment(&lines), i64::MIN, i64::MAX, None);
        assert_eq!(text, "1,asset1\n2,asset0\n3,asset1\n4,asset0\n5,asset1\n");
        assert_eq!((sink.calls, sink.rows), (1, 5));
    }

    #[test]
    fn a_window_cuts_at_vega_time_bounds_inclusively() {
        let lines: Vec<_> = (1..=6).map(|t| line(t / 2, t % 2)).collect();
        // Times 0, 1, 1, 2, 2, 3.
        let segment = segment(&lines);
        assert_eq!(
            emit(&segment, 1, 2, None).0,
            "1,asset0\n1,asset1\n2,asset0\n2,asset1\n"
        );
        assert_eq!(emit(&segment, 3, i64::MAX, None).0, "3,asset0\n");
        assert_eq!(emit(&segment, 4, 10, None).1.calls, 0);
        assert_eq!(emit(&segment, i64::MIN, 0, None).0, "0,asset1\n");
    }

    #[test]
    fn a_key_range_resumes_after_a_key_and_stops_at_one() {
        // Times 0, 1, 1, 2, 2, 3 (line keys (t, 1, asset, 0)).
        let lines: Vec<_> = (1..=6).map(|t| line(t / 2, t % 2)).collect();
        let segment = segment(&lines);
        let all = KeyRange::window(i64::MIN, i64::MAX);
        let range = all
            .after((1, 1, 0, 0))
            .unwrap()
            .up_to((2, 1, 0, 0))
            .unwrap();
        assert_eq!(
            emit_range(&segment, range, None).0,
            "1,asset1
2,asset0
"
        );
        // After a key not stored, up to the end.
        let range = all.after((1, 1, 0, 5)).unwrap();
        assert_eq!(
            emit_range(&segment, range, None).0,
            "1,asset1
2,asset0
2,asset1
3,asset0
"
        );
        assert_eq!(all.after((i64::MAX, i64::MAX, i64::MAX, i64::MAX)), None);
        assert_eq!(
            all.up_to((i64::MIN, 0, 0, 0)).unwrap().last,
            (i64::MIN, 0, 0, 0)
        );
        let window = KeyRange::window(5, 9);
        assert_eq!(window.after((9, i64::MAX, i64::MAX, i64::MAX)), None);
        assert_eq!(window.up_to((4, 0, 0, 0)), None);
        assert_eq!(
            window
                .after((5, i64::MAX, i64::MAX, i64::MAX))
                .unwrap()
                .first,
            (6, i64::MIN, i64::MIN, i64::MIN)
        );
    }

    #[test]
    fn an_asset_filter_sends_runs_of_adjacent_lines() {
        let assets = [1, 1, 2, 1, 2, 2, 1];
        let lines: Vec<_> = assets
            .iter()
            .enumerate()
            .map(|(t, a)| line(t as i64, *a))
            .collect();
        let (text, sink) = emit(&segment(&lines), i64::MIN, i64::MAX, Some(1));
        assert_eq!(text, "0,asset1\n1,asset1\n3,asset1\n6,asset1\n");
        assert_eq!((sink.calls, sink.rows), (3, 4));
        assert_eq!(
            emit(&segment(&lines), 3, 5, Some(2)).0,
            "4,asset2\n5,asset2\n"
        );
    }

    #[test]
    fn a_sink_that_stops_is_obeyed_and_counted() {
        struct StopAfterOne(u64);
        impl ExportSink for StopAfterOne {
            fn started(&mut self) -> ControlFlow<()> {
                ControlFlow::Continue(())
            }
            fn rows(&mut self, _: &[u8], count: u64) -> ControlFlow<()> {
                self.0 += count;
                ControlFlow::Break(())
            }
        }
        let lines: Vec<_> = [1, 2, 1]
            .iter()
            .enumerate()
            .map(|(t, a)| line(t as i64, *a))
            .collect();
        let segment = segment(&lines);
        let view = SegmentRef::new(&segment.csv, &segment.keys).unwrap();
        let mut summary = ExportSummary::default();
        let mut sink = StopAfterOne(0);
        assert!(
            view.emit(
                KeyRange::window(i64::MIN, i64::MAX),
                Some(1),
                &mut sink,
                &mut summary
            )
            .is_break()
        );
        assert_eq!((sink.0, summary.rows, summary.stopped), (1, 1, true));
    }

    #[test]
    fn damaged_indexes_are_reported_not_trusted() {
        let good = segment(&[line(1, 0), line(2, 0)]);
        assert!(SegmentRef::new(&good.csv, &good.keys).is_ok());
        let cases: Vec<(&str, Vec<u8>, Vec<u8>)> = vec![
            ("partial entry", good.csv.clone(), good.keys[..50].to_vec()),
            ("short lines", good.csv[..5].to_vec(), good.keys.clone()),
            (
                "lines beyond the index",
                [&good.csv[..], b"x"].concat(),
                good.keys.clone(),
            ),
            ("keys out of order", good.csv.clone(), {
                let mut keys = good.keys.clone();
                keys[INDEX_ENTRY..INDEX_ENTRY + 8].copy_from_slice(&0i64.to_le_bytes());
                keys
            }),
            ("ends out of order", good.csv.clone(), {
                let mut keys = good.keys.clone();
                keys[40..44].copy_from_slice(&u32::MAX.to_le_bytes());
                keys
            }),
        ];
        for (case, csv, keys) in cases {
            assert!(
                matches!(SegmentRef::new(&csv, &keys), Err(Error::Corrupt(_))),
                "{case}"
            );
        }
    }

    #[test]
    fn rebuild_merges_in_key_order_and_keeps_stored_lines() {
        let stored = segment(&[line(1, 0), line(3, 0), line(5, 0)]);
        let mut changed = line(3, 0);
        changed.2 = b"3,changed\n".to_vec();
        let batch = segment(&[line(2, 0), changed, line(6, 0)]);
        let out = rebuild(&[stored], batch.view().iter(), SEGMENT_BYTES).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(
            String::from_utf8(out[0].csv.clone()).unwrap(),
            "1,asset0\n2,asset0\n3,asset0\n5,asset0\n6,asset0\n"
        );
        assert_eq!(out[0].first_key(), Some((1, 1, 0, 0)));
        assert_eq!(out[0].last_key(), Some((6, 1, 0, 0)));
        assert_eq!(
            out[0].csv.capacity(),
            out[0].csv.len(),
            "a stored line's key counted once"
        );
        assert_eq!(out[0].keys.capacity(), out[0].keys.len());
        assert!(
            rebuild(&[], std::iter::empty(), SEGMENT_BYTES)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn rebuild_cuts_segments_at_the_size_bound_without_losing_a_line() {
        let big = vec![b'x'; 1000];
        let mut batch = Segment::default();
        let count = 3 * SEGMENT_BYTES / 1000;
        for t in 0..count as i64 {
            batch.push((t, 0, 0, 0), 0, &big).unwrap();
        }
        let out = rebuild(&[], batch.view().iter(), SEGMENT_BYTES).unwrap();
        assert!(out.len() >= 3, "{} segments", out.len());
        assert!(out.iter().all(|s| s.csv.len() < SEGMENT_BYTES + 1000));
        assert_eq!(out.iter().map(Segment::lines).sum::<usize>(), count);
        for pair in out.windows(2) {
            assert!(pair[0].last_key() < pair[1].first_key());
        }
        // Each allocated once at its size: grown by doubling, a segment sealed just past the
        // bound would take twice it.
        for segment in &out {
            assert_eq!(segment.csv.capacity(), segment.csv.len());
            assert_eq!(segment.keys.capacity(), segment.keys.len());
        }
    }
}
