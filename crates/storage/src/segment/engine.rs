//! The segment engine: how a batch's lines are laid into their owners' segments, written once
//! for every backend.
//!
//! A backend describes one table of segments as a [`SegmentTable`], three statements in SQL
//! alone: read what a batch touches, delete segments by key, write new segments. The engine
//! decides everything else, alike on every backend: which segments a batch touches, what the
//! writer remembers of each owner's last segments ([`Tails`], one memory bound), the merge
//! ([`rebuild`]) and the packing policy ([`Packing`]: where a segment is sealed, when a batch's
//! lines make a segment of their own and when they are merged with the small ones before them).
//!
//! Which segments a batch touches, per owner: the stored segments its lines fall among, those
//! whose last key is at or after the owner's first line in the batch and whose first vega time
//! is not after its last line's. When there are none because the lines all come after what is
//! stored (an append), the owner's run instead: the small segments its segments end with, which
//! the batch either follows with a segment of its own or merges with its lines, so that a
//! stream committed a block at a time still fills segments while a batch rewrites stored lines
//! only once every few batches (at most [`Packing::run`] of them). Not every segment after the
//! batch's first key: a batch of old keys (a re-run from an earlier block) would then rewrite
//! the owner's whole history after them, for each batch.
//!
//! The rewrite covers a key range holding no other segment of the owner (segments never
//! overlap, and a segment left out lies wholly before the owner's first line or wholly after
//! its last, or is before the run), so the write never meets a stored key and needs no conflict
//! check; the writer's lock keeps anyone else from writing in between. An owner whose lines are
//! all stored already (a re-run) is not rewritten at all.

use std::collections::HashMap;
use std::hash::Hash;

use super::held::Held;
use super::{Line, LineKey, Remembered, Run, Segment, Tails, rebuild};
use crate::Error;
use crate::backend::Then;
use crate::error::Bug;

/// Where segments are cut: the packing policy of one table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packing {
    /// Lines' bytes after which a segment is sealed and the next line starts a new one.
    pub seal: usize,
    /// A segment with fewer lines' bytes than this is small: an owner's segments may end with
    /// a run of small ones, which a batch that only appends follows or merges with its lines.
    pub small_tail: usize,
    /// The most small segments an owner's segments end with. A batch that only appends writes
    /// its lines as a segment of their own while the run and they stay within this count and
    /// under `small_tail` bytes together; otherwise it merges the run with its lines. With 1,
    /// a small last segment is rewritten with each batch.
    pub run: usize,
}

/// One owner's lines in a batch, as [`SegmentTable::touched`] is asked about them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ask<O> {
    /// The owner.
    pub owner: O,
    /// The key of its first line in the batch.
    pub first: LineKey,
    /// The vega time of its last line in the batch.
    pub last_time: i64,
}

/// What [`SegmentTable::touched`] read.
#[derive(Debug)]
pub struct Touched<O> {
    /// The stored segments to rewrite or follow, by owner, with their keys in the table (their
    /// last lines' keys), in any order.
    pub stored: HashMap<O, Run>,
    /// The key of each asked owner's last stored segment (owners without one are absent).
    pub last_keys: HashMap<O, LineKey>,
}

impl<O> Default for Touched<O> {
    fn default() -> Self {
        Self {
            stored: HashMap::new(),
            last_keys: HashMap::new(),
        }
    }
}

/// One table of segments in one backend, inside the transaction of the batch being written:
/// what the engine needs, each in SQL alone.
pub trait SegmentTable {
    /// The owner of a run of segments (a party, a spec): a dictionary id.
    type Owner: Copy + Eq + Hash + Ord;

    /// For every asked owner, the stored segments its lines fall among (last key at or after
    /// [`Ask::first`], first vega time at or before [`Ask::last_time`]); when there are none
    /// and its last segment ends before [`Ask::first`], its run: its last segments, back from
    /// the last while each has fewer than `packing.small_tail` lines' bytes, at most
    /// `packing.run` of them ([`trailing_run`] picks them). And the key of its last segment,
    /// whatever it is. Stored segments are checked ([`Segment::from_stored`]) before they are
    /// returned.
    fn touched(
        &mut self,
        asks: &[Ask<Self::Owner>],
        packing: Packing,
    ) -> Result<Touched<Self::Owner>, Error>;

    /// Deletes the segments at these keys (owner and last line's key).
    fn delete(&mut self, keys: &[(Self::Owner, LineKey)]) -> Result<(), Error>;

    /// Writes new segments, each keyed by its owner and its last line's key; none is empty and
    /// none is stored yet.
    fn insert(&mut self, fresh: &[(Self::Owner, Segment)]) -> Result<(), Error>;
}

/// An owner's run among its last segments, given in any order, each with its key and, when it
/// may belong to the run (small, and ending before the batch's first line), what it holds: the
/// segments back from the last while each may, in key order.
pub fn trailing_run<T>(mut last: Vec<(LineKey, Option<T>)>) -> Vec<(LineKey, T)> {
    last.sort_unstable_by_key(|(key, _)| std::cmp::Reverse(*key));
    let mut run: Vec<(LineKey, T)> = last
        .into_iter()
        .map_while(|(key, segment)| Some((key, segment?)))
        .collect();
    run.reverse();
    run
}

/// The stored bytes of batch lines whose keys were stored already with other bytes, by owner
/// and key (see [`Engine::store`]).
pub type Kept<O> = HashMap<(O, LineKey), Vec<u8>>;

/// The runs a writer remembers of a group's owners whose lines all come after them, each with
/// whether the lines [`follow`](Engine::follows) it.
type Known<O> = HashMap<O, (Remembered, bool)>;

/// A writer's segment engine for one table: its packing policy and what it remembers of its
/// owners' last segments. Only valid while its writer is the only one committing: a writer
/// calls [`forget`](Self::forget) when a transaction fails or another writer may have
/// committed.
#[derive(Debug)]
pub struct Engine<O> {
    packing: Packing,
    tails: Tails<O>,
    /// The bytes of new segments after which [`Engine::store`] writes what it has so far:
    /// [`WRITE_BYTES`].
    write_bytes: usize,
    /// The most owners of a batch whose stored segments one [`SegmentTable::touched`] reads
    /// back: [`READ_OWNERS`].
    read_owners: usize,
    /// The segments built by [`stage`](Self::stage) in the open transaction and not written
    /// yet, each after its owner's remembered run: in a temporary file, not in memory.
    held: Held<O>,
}

/// How many bytes of new segments a batch holds in memory before it writes them: whatever its
/// size, a batch's segments are written a few megabytes at a time (a piece may exceed it by
/// one owner's new segments, which are built whole). Large enough that a write is few
/// statements (PostgreSQL sends each as one round trip).
const WRITE_BYTES: usize = 8 << 20;

/// How many owners of a batch [`Engine::store`] lays at a time, reading back the stored
/// segments of those it does not remember in one [`SegmentTable::touched`]: the runs read back
/// (up to [`SMALL_TAIL_BYTES`](super::SMALL_TAIL_BYTES) each) are then held for a group, not for
/// the whole batch. Without the groups, a batch touching more parties than the remembered runs
/// hold ([`TAILS_BYTES`](super::TAILS_BYTES)) read all the others' runs at once: the ingest's
/// peak grew with the parties past that bound (a fifth more memory at 32× than at 16×,
/// docs/PERFORMANCE.md).
const READ_OWNERS: usize = 512;

/// Deletes `doomed`, then inserts `fresh` (a merge may write a segment at the key of one it
/// replaces), and empties both.
fn write<T: SegmentTable>(
    table: &mut T,
    doomed: &mut Vec<(T::Owner, LineKey)>,
    fresh: &mut Vec<(T::Owner, Segment)>,
) -> Result<(), Error> {
    if !doomed.is_empty() {
        table.delete(doomed)?;
        doomed.clear();
    }
    if !fresh.is_empty() {
        table.insert(fresh)?;
        fresh.clear();
    }
    Ok(())
}

/// What a batch does to one owner's stored segments.
struct Rewrite {
    /// The keys of the stored segments it replaces.
    doomed: Vec<LineKey>,
    /// The segments it writes.
    fresh: Vec<Segment>,
    /// When it only appended: the owner's run after it.
    run: Option<Remembered>,
}

impl<O: Copy + Eq + Hash + Ord> Engine<O> {
    /// An engine that knows nothing yet.
    pub fn new(packing: Packing) -> Self {
        Self {
            packing,
            tails: Tails::default(),
            write_bytes: WRITE_BYTES,
            read_owners: READ_OWNERS,
            held: Held::default(),
        }
    }

    /// The engine, keeping runs of at most `bytes` whole in all (see
    /// [`WriterOptions::remembered_bytes`](crate::WriterOptions::remembered_bytes)) instead of
    /// [`TAILS_BYTES`](super::TAILS_BYTES).
    pub fn remembering(mut self, bytes: usize) -> Self {
        self.tails = Tails::bounded(bytes);
        self
    }

    /// Forgets the owners' last segments, held ones included: a transaction that wrote them
    /// failed, or another writer may have changed them.
    pub fn forget(&mut self) {
        self.tails.forget();
        self.held.forget();
    }

    /// Lays the batch's lines, each with its owner, into the owners' segments in `table`, and
    /// writes every held segment ([`stage`](Self::stage)): what the transaction ends with. A
    /// line whose key is stored already is not written: the stored one stays, and of two lines
    /// at one key in the batch the first. Those among them whose stored bytes differ are
    /// returned (a re-run that brings other bytes for a stored key; empty otherwise), so that a
    /// caller writing the same line elsewhere can write it as stored.
    pub fn store<T: SegmentTable<Owner = O>>(
        &mut self,
        table: &mut T,
        lines: Vec<(O, Line<'_>)>,
    ) -> Result<Kept<O>, Error> {
        let kept = self.stage(table, lines)?;
        self.write_held(table)?;
        Ok(kept)
    }

    /// [`store`](Self::store) when the transaction commits after this batch, else
    /// [`stage`](Self::stage).
    pub fn lay<T: SegmentTable<Owner = O>>(
        &mut self,
        table: &mut T,
        lines: Vec<(O, Line<'_>)>,
        then: Then,
    ) -> Result<Kept<O>, Error> {
        match then {
            Then::Commit => self.store(table, lines),
            Then::KeepOpen => self.stage(table, lines),
        }
    }

    /// Writes the segments held by [`stage`](Self::stage): a transaction must not commit
    /// before.
    pub fn write_held<T: SegmentTable<Owner = O>>(&mut self, table: &mut T) -> Result<(), Error> {
        let (mut fresh, mut bytes) = (Vec::new(), 0);
        for owner in self.held.owners() {
            let segment = self.held.take(owner)?.ok_or(Bug::HeldForgotten)?;
            if !self.tails.written(owner, &segment) {
                return Err(Bug::HeldForgotten.into());
            }
            bytes += segment.bytes();
            fresh.push((owner, segment));
            if bytes >= self.write_bytes {
                table.insert(&fresh)?;
                (fresh, bytes) = (Vec::new(), 0);
            }
        }
        if !fresh.is_empty() {
            table.insert(&fresh)?;
        }
        self.held.restart()
    }

    /// [`store`](Self::store), but a batch that only appends a small segment of its own to an
    /// owner's run (or lines to the run's held segment) holds it after the run the writer
    /// remembers instead of writing it, until [`write_held`](Self::write_held) or a later
    /// batch that merges the run. So a transaction of several batches writes one small
    /// segment per owner, not one per batch: what a batch costs is its owners more than its
    /// lines. Nothing held is in `table` meanwhile; an owner that a batch does not only append
    /// to has its held segment written before its stored segments are read back, and one whose
    /// run is remembered by its shape (beyond [`TAILS_BYTES`](super::TAILS_BYTES)) has the run
    /// read back when a batch merges it, the held segment merged with it in memory. Held
    /// segments are never more than the transaction's lines, and they wait in a temporary file
    /// (see `held.rs`), not in memory, however long the transaction.
    pub fn stage<T: SegmentTable<Owner = O>>(
        &mut self,
        table: &mut T,
        mut lines: Vec<(O, Line<'_>)>,
    ) -> Result<Kept<O>, Error> {
        let mut kept = Kept::new();
        // A stable sort: of two lines at one key in a batch the first stays, as a stored one
        // does.
        lines.sort_by_key(|(owner, line)| (*owner, line.key));
        lines.dedup_by(|line, previous| (line.0, line.1.key) == (previous.0, previous.1.key));
        let owners: Vec<&[(O, Line<'_>)]> = lines.chunk_by(|a, b| a.0 == b.0).collect();
        // Written every `write_bytes` or so, owner by owner, so that a batch's new segments are
        // not all held at once.
        let (mut doomed, mut fresh, mut fresh_bytes) = (Vec::new(), Vec::new(), 0);
        for group in owners.chunks(self.read_owners) {
            let (
                mut known,
                Touched {
                    mut stored,
                    last_keys,
                },
            ) = self.read_back(table, group)?;
            for owner_lines in group {
                let owner = owner_lines[0].0;
                // A remembered run is one the lines come after (`Tails::take`).
                let rewrite = if let Some((run, follows)) = known.remove(&owner) {
                    self.append(owner, run, follows, owner_lines)?
                } else {
                    let mut segments = stored.remove(&owner).unwrap_or_default();
                    segments.sort_unstable_by_key(|(key, _)| *key);
                    // Not when the lines fall in a gap before a stored segment: none is among
                    // them, but the owner's segments do not end before them.
                    let first = owner_lines[0].1.key;
                    let appends = segments.last().is_none_or(|(last, _)| *last < first)
                        && last_keys.get(&owner).is_none_or(|last| *last < first);
                    if appends {
                        let run = Remembered::Whole(segments);
                        let follows = self.follows(owner, &run, owner_lines);
                        self.append(owner, run, follows, owner_lines)?
                    } else {
                        match self.merge(owner, segments, owner_lines, &mut kept)? {
                            Some(rewrite) => rewrite,
                            None => continue,
                        }
                    }
                };
                let Rewrite {
                    doomed: gone,
                    fresh: made,
                    run,
                } = rewrite;
                if let Some(run) = run {
                    let last_made = made.last().and_then(Segment::last_key);
                    let last_held = self.held.last_key(owner);
                    if let Some(last) = run.last_key().max(last_made).max(last_held) {
                        self.tails.remember(owner, last, run);
                    }
                }
                doomed.extend(gone.into_iter().map(|key| (owner, key)));
                fresh_bytes += made.iter().map(Segment::bytes).sum::<usize>();
                fresh.extend(made.into_iter().map(|segment| (owner, segment)));
                if fresh_bytes >= self.write_bytes {
                    write(table, &mut doomed, &mut fresh)?;
                    fresh_bytes = 0;
                }
            }
        }
        write(table, &mut doomed, &mut fresh)?;
        Ok(kept)
    }

    /// For a group of a batch's owners (each its lines, in key order): the runs this writer
    /// remembers of those that only append to them, taken from its memory, each with whether
    /// the lines [`follow`](Self::follows) it (a run remembered by its shape that the batch
    /// merges is read back, its held segment staying held to join it), and what `table` holds
    /// of the others, read in one [`SegmentTable::touched`] (none when all are known), once
    /// their held segments, if any, are written.
    fn read_back<T: SegmentTable<Owner = O>>(
        &mut self,
        table: &mut T,
        group: &[&[(O, Line<'_>)]],
    ) -> Result<(Known<O>, Touched<O>), Error> {
        let mut known = HashMap::new();
        let mut asks = Vec::new();
        let mut unheld = Vec::new();
        let mut merged = Vec::new();
        for owner_lines in group {
            let (owner, first) = (owner_lines[0].0, owner_lines[0].1.key);
            match self.tails.take(owner, first) {
                Some(run) => {
                    let follows = self.follows(owner, &run, owner_lines);
                    if follows || matches!(run, Remembered::Whole(_)) {
                        known.insert(owner, (run, follows));
                        continue;
                    }
                    // A shape to merge: read back, its held segment after it.
                    merged.push(owner);
                }
                None => {
                    if let Some(segment) = self.held.take(owner)? {
                        unheld.push((owner, segment));
                    }
                }
            }
            asks.push(Ask {
                owner,
                first,
                last_time: owner_lines[owner_lines.len() - 1].1.key.0,
            });
        }
        if !unheld.is_empty() {
            table.insert(&unheld)?;
        }
        let mut read = if asks.is_empty() {
            Touched::default()
        } else {
            table.touched(&asks, self.packing)?
        };
        for owner in merged {
            let mut run = read.stored.remove(&owner).unwrap_or_default();
            run.sort_unstable_by_key(|(key, _)| *key);
            known.insert(owner, (Remembered::Whole(run), false));
        }
        Ok((known, read))
    }

    /// Whether `lines`, which come after `owner`'s `run` and its held segment if any, are added
    /// to the held segment or held as a segment of their own after the run, the run staying
    /// within the policy's bounds; otherwise the run is merged with them.
    fn follows(&self, owner: O, run: &Remembered, lines: &[(O, Line<'_>)]) -> bool {
        let new_bytes: usize = lines.iter().map(|(_, line)| line.csv.len()).sum();
        let held_bytes = self.held.bytes(owner).unwrap_or(0);
        let (segments, run_bytes) = run.size();
        segments < self.packing.run && run_bytes + held_bytes + new_bytes < self.packing.small_tail
    }

    /// Lines that all come after `owner`'s stored ones, `run` its run: added to its held
    /// segment, or held as a segment of their own after the run, when they
    /// [`follow`](Self::follows) it; or else merged with the run and the held segment, which a
    /// run remembered by its shape never is ([`read_back`](Self::read_back) reads it back).
    fn append(
        &mut self,
        owner: O,
        run: Remembered,
        follows: bool,
        lines: &[(O, Line<'_>)],
    ) -> Result<Rewrite, Error> {
        let lines = || lines.iter().map(|(_, line)| *line);
        if follows {
            // Under `small_tail` bytes with the run, so one segment, never sealed.
            self.held.hold(owner, lines())?;
            return Ok(Rewrite {
                doomed: Vec::new(),
                fresh: Vec::new(),
                run: Some(run),
            });
        }
        let Remembered::Whole(run) = run else {
            return Err(Bug::ShapeMerged.into());
        };
        let (doomed, mut segments): (Vec<LineKey>, Vec<Segment>) = run.into_iter().unzip();
        // Never written: nothing to delete.
        segments.extend(self.held.take(owner)?);
        let fresh = rebuild(&segments, lines(), self.packing.seal)?;
        let run = fresh
            .last()
            .filter(|last| last.csv.len() < self.packing.small_tail)
            .and_then(|last| Some((last.last_key()?, last.clone())))
            .into_iter()
            .collect();
        Ok(Rewrite {
            doomed,
            fresh,
            run: Some(Remembered::Whole(run)),
        })
    }

    /// Lines that fall among the owner's stored `segments`: those merged with them, stored
    /// lines staying as they are (their differing bytes recorded in `kept`). `None` when every
    /// line was stored already. The owner is not remembered: its next batch reads its run back.
    fn merge(
        &self,
        owner: O,
        segments: Run,
        lines: &[(O, Line<'_>)],
        kept: &mut Kept<O>,
    ) -> Result<Option<Rewrite>, Error> {
        let (doomed, segments): (Vec<LineKey>, Vec<Segment>) = segments.into_iter().unzip();
        let lines = || lines.iter().map(|(_, line)| *line);
        for line in lines() {
            let stored = segments.iter().find_map(|s| s.view().find(line.key));
            if let Some(stored) = stored.filter(|stored| stored.csv != line.csv) {
                kept.insert((owner, line.key), stored.csv.to_vec());
            }
        }
        let fresh = rebuild(&segments, lines(), self.packing.seal)?;
        // Rebuilding only ever adds lines: as many as were stored means none was new.
        let count = |segments: &[Segment]| segments.iter().map(Segment::lines).sum::<usize>();
        Ok((count(&fresh) != count(&segments)).then_some(Rewrite {
            doomed,
            fresh,
            run: None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A table of segments in memory, counting what the engine asks of it.
    #[derive(Debug, Default)]
    struct Memory {
        segments: BTreeMap<(u8, LineKey), Segment>,
        touched_calls: usize,
        asked: Vec<Ask<u8>>,
        deleted: Vec<(u8, LineKey)>,
        insert_calls: usize,
    }

    impl SegmentTable for Memory {
        type Owner = u8;

        fn touched(&mut self, asks: &[Ask<u8>], packing: Packing) -> Result<Touched<u8>, Error> {
            self.touched_calls += 1;
            self.asked.extend_from_slice(asks);
            let mut read = Touched::default();
            for ask in asks {
                let owned: Vec<_> = self
                    .segments
                    .range((ask.owner, (i64::MIN, i64::MIN, i64::MIN, i64::MIN))..)
                    .take_while(|((owner, _), _)| *owner == ask.owner)
                    .collect();
                let Some(((_, last_key), _)) = owned.last() else {
                    continue;
                };
                read.last_keys.insert(ask.owner, *last_key);
                let mut stored: Run = owned
                    .iter()
                    .filter(|((_, key), segment)| {
                        *key >= ask.first
                            && segment
                                .first_key()
                                .is_some_and(|first| first.0 <= ask.last_time)
                    })
                    .map(|((_, key), segment)| (*key, (*segment).clone()))
                    .collect();
                if stored.is_empty() {
                    let last = owned.iter().rev().take(packing.run);
                    stored = trailing_run(
                        last.map(|((_, key), segment)| {
                            let small = segment.csv.len() < packing.small_tail;
                            (
                                *key,
                                (small && *key < ask.first).then(|| (*segment).clone()),
                            )
                        })
                        .collect(),
                    );
                }
                if !stored.is_empty() {
                    read.stored.insert(ask.owner, stored);
                }
            }
            Ok(read)
        }

        fn delete(&mut self, keys: &[(u8, LineKey)]) -> Result<(), Error> {
            for key in keys {
                assert!(self.segments.remove(key).is_some(), "{key:?} is not stored");
            }
            self.deleted.extend_from_slice(keys);
            Ok(())
        }

        fn insert(&mut self, fresh: &[(u8, Segment)]) -> Result<(), Error> {
            self.insert_calls += 1;
            for (owner, segment) in fresh {
                let key = (*owner, segment.last_key().unwrap());
                assert!(
                    self.segments.insert(key, segment.clone()).is_none(),
                    "{key:?} twice"
                );
            }
            Ok(())
        }
    }

    impl Memory {
        /// Every line of `owner`, in key order, checking that segments do not overlap.
        fn lines(&self, owner: u8) -> Vec<(LineKey, String)> {
            let mut lines: Vec<(LineKey, String)> = Vec::new();
            for ((_, _), segment) in self.segments.iter().filter(|((o, _), _)| *o == owner) {
                for line in segment.view().iter() {
                    assert!(lines.last().is_none_or(|(key, _)| *key < line.key));
                    lines.push((line.key, String::from_utf8(line.csv.to_vec()).unwrap()));
                }
            }
            lines
        }
    }

    const PACKING: Packing = Packing {
        seal: 40,
        small_tail: 20,
        run: 3,
    };

    fn store(
        engine: &mut Engine<u8>,
        table: &mut Memory,
        lines: &[(u8, LineKey, &str)],
    ) -> Kept<u8> {
        lay(engine, table, lines, Then::Commit)
    }

    fn lay(
        engine: &mut Engine<u8>,
        table: &mut Memory,
        lines: &[(u8, LineKey, &str)],
        then: Then,
    ) -> Kept<u8> {
        let lines = lines
            .iter()
            .map(|(owner, key, csv)| {
                (
                    *owner,
                    Line {
                        key: *key,
                        asset: 1,
                        csv: csv.as_bytes(),
                    },
                )
            })
            .collect();
        engine.lay(table, lines, then).unwrap()
    }

    fn at(time: i64) -> LineKey {
        (time, 1, 1, 0)
    }

    #[test]
    fn held_segments_wait_outside_the_remembered_runs_and_are_written_exactly() {
        let (mut engine, mut table) = (Engine::new(PACKING), Memory::default());
        for time in 1..=3 {
            lay(
                &mut engine,
                &mut table,
                &[(7, at(time), "ab\n")],
                Then::KeepOpen,
            );
        }
        assert!(table.segments.is_empty(), "held, not written");
        assert_eq!(engine.tails.bytes, 0, "nothing held in the remembered runs");
        assert_eq!(engine.held.bytes(7), Some(9));
        engine.write_held(&mut table).unwrap();
        assert_eq!(table.lines(7).len(), 3);
        let written = &table.segments[&(7, at(3))];
        assert_eq!(written.csv, b"ab\nab\nab\n");
        assert_eq!(written.footprint(), written.bytes(), "sized exactly");
        assert_eq!(engine.held.owners(), Vec::<u8>::new());
    }

    #[test]
    fn appends_make_segments_of_their_own_until_the_run_is_merged() {
        let (mut engine, mut table) = (Engine::new(PACKING), Memory::default());
        let sizes = |table: &Memory| -> Vec<usize> {
            table.segments.values().map(|s| s.csv.len()).collect()
        };
        for time in 1..=3 {
            store(&mut engine, &mut table, &[(7, at(time), "line\n")]);
        }
        // Three batches, three small segments: nothing stored was rewritten.
        assert_eq!(sizes(&table), [5, 5, 5]);
        assert!(table.deleted.is_empty());
        // The run is full: the fourth batch merges it with its line, into a segment that is
        // no longer small.
        store(&mut engine, &mut table, &[(7, at(4), "line\n")]);
        assert_eq!(sizes(&table), [20]);
        assert_eq!(table.deleted.len(), 3);
        for time in 5..=20 {
            store(&mut engine, &mut table, &[(7, at(time), "line\n")]);
        }
        // Only the first batch asked: every later one appended to the remembered run.
        assert_eq!(table.touched_calls, 1);
        assert_eq!(table.lines(7).len(), 20);
        assert_eq!(sizes(&table), [20; 5]);
    }

    #[test]
    fn a_run_is_merged_before_it_holds_the_small_tail() {
        let (mut engine, mut table) = (Engine::new(PACKING), Memory::default());
        store(&mut engine, &mut table, &[(7, at(1), "first line\n")]);
        // Eleven bytes and nine would make twenty: merged, though the run has room.
        store(&mut engine, &mut table, &[(7, at(2), "and more\n")]);
        assert_eq!(table.segments.len(), 1);
        assert_eq!(table.lines(7).len(), 2);
        // A batch of a small segment's bytes or more follows a segment that is not small.
        store(
            &mut engine,
            &mut table,
            &[(7, at(3), "twenty bytes a line\n")],
        );
        assert_eq!(table.segments.len(), 2);
        assert_eq!(table.deleted.len(), 1);
    }

    #[test]
    fn a_forgetful_engine_reads_the_run_back() {
        let mut table = Memory::default();
        for (time, csv) in [(1, "a\n"), (2, "b\n"), (3, "c\n")] {
            store(&mut Engine::new(PACKING), &mut table, &[(7, at(time), csv)]);
        }
        assert_eq!(table.segments.len(), 3, "the run grew");
        store(&mut Engine::new(PACKING), &mut table, &[(7, at(4), "d\n")]);
        assert_eq!(table.segments.len(), 1, "the run, read back, was merged");
        assert_eq!(table.lines(7).len(), 4);
    }

    #[test]
    fn lines_in_a_gap_before_a_stored_segment_are_not_an_append() {
        let (mut engine, mut table) = (Engine::new(PACKING), Memory::default());
        let sealed: Vec<_> = (100..108).map(|t| (7, at(t), "line\n")).collect();
        store(&mut engine, &mut table, &sealed);
        engine.forget();
        // Before the stored segment's first line: among no segment, yet not after the last.
        store(&mut engine, &mut table, &[(7, at(50), "early\n")]);
        // Were the owner remembered as ending at 50, this would be appended after it and
        // overlap the stored segment.
        store(&mut engine, &mut table, &[(7, at(104), "inside\n")]);
        let lines = table.lines(7);
        assert_eq!(lines.len(), 9);
        assert_eq!(lines[0], (at(50), "early\n".to_owned()));
        assert_eq!(table.touched_calls, 3);
    }

    #[test]
    fn a_run_is_the_small_segments_back_from_the_last() {
        let (one, two, three) = ((1, 0, 0, 0), (2, 0, 0, 0), (3, 0, 0, 0));
        // In any order; a segment that may not belong ends the run.
        assert_eq!(
            trailing_run(vec![(three, Some('c')), (one, Some('a')), (two, None)]),
            [(three, 'c')]
        );
        assert_eq!(
            trailing_run(vec![(two, Some('b')), (one, Some('a'))]),
            [(one, 'a'), (two, 'b')]
        );
        assert!(trailing_run::<char>(vec![(three, None), (two, Some('b'))]).is_empty());
    }

    #[test]
    fn old_keys_touch_only_the_segments_they_fall_among() {
        let (mut engine, mut table) = (Engine::new(PACKING), Memory::default());
        // Three sealed segments of eight lines: times 10..=17, 20..=27, 30..=37.
        for base in [10, 20, 30] {
            let lines: Vec<_> = (base..base + 8).map(|t| (7, at(t), "line\n")).collect();
            store(&mut engine, &mut table, &lines);
        }
        assert_eq!(table.segments.len(), 3);
        let middle = *table.segments.keys().nth(1).unwrap();
        let untouched: Vec<_> = [0, 2]
            .map(|i| {
                table
                    .segments
                    .iter()
                    .nth(i)
                    .map(|(k, s)| (*k, s.clone()))
                    .unwrap()
            })
            .into();
        engine.forget();
        // A line between the first two segments' times, and one inside the second.
        store(
            &mut engine,
            &mut table,
            &[(7, at(18), "new\n"), (7, at(21), "again\n")],
        );
        let ask = table.asked.last().unwrap();
        assert_eq!((ask.first, ask.last_time), (at(18), 21));
        // Only the middle segment was rewritten: the first ends before the batch, the last
        // starts after it.
        assert_eq!(table.deleted, [middle]);
        for (key, segment) in &untouched {
            assert_eq!(table.segments.get(key), Some(segment));
        }
        let lines = table.lines(7);
        assert_eq!(lines.len(), 25, "one new line, one already stored");
        assert!(
            lines
                .iter()
                .any(|(key, csv)| *key == at(18) && csv == "new\n")
        );
        // A stored line keeps its bytes.
        assert!(
            lines
                .iter()
                .any(|(key, csv)| *key == at(21) && csv == "line\n")
        );
    }

    #[test]
    fn a_rerun_rewrites_nothing_and_reports_differing_bytes() {
        let (mut engine, mut table) = (Engine::new(PACKING), Memory::default());
        store(
            &mut engine,
            &mut table,
            &[(1, at(1), "one\n"), (1, at(2), "two\n")],
        );
        let before = table.segments.clone();
        engine.forget();
        let kept = store(
            &mut engine,
            &mut table,
            &[(1, at(1), "one\n"), (1, at(2), "TWO\n")],
        );
        assert_eq!(table.segments, before);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[&(1, at(2))], b"two\n");
    }

    #[test]
    fn of_two_lines_at_one_key_in_a_batch_the_first_stays() {
        let (mut engine, mut table) = (Engine::new(PACKING), Memory::default());
        store(
            &mut engine,
            &mut table,
            &[(3, at(5), "first\n"), (3, at(5), "second\n")],
        );
        assert_eq!(table.lines(3), [(at(5), "first\n".to_owned())]);
    }

    #[test]
    fn a_batch_is_written_a_piece_at_a_time_each_owners_deletes_first() {
        let lines = |key: LineKey| (1..=4).map(move |owner| (owner, key, "line\n"));
        let mut runs = Vec::new();
        for write_bytes in [1, WRITE_BYTES] {
            let (mut engine, mut table) = (Engine::new(PACKING), Memory::default());
            engine.write_bytes = write_bytes;
            for time in [2, 4, 6] {
                store(
                    &mut engine,
                    &mut table,
                    &lines(at(time)).collect::<Vec<_>>(),
                );
            }
            // Lines among the stored ones: each owner's segments at 2 and 4 are merged with
            // them into one that ends at 4 again, so a piece that inserted before it deleted
            // would meet a stored key.
            let calls = table.insert_calls;
            let batch: Vec<_> = lines(at(1)).chain(lines((4, 0, 1, 0))).collect();
            store(&mut engine, &mut table, &batch);
            runs.push((table.insert_calls - calls, table));
        }
        let [(pieces, piecewise), (whole_calls, whole)] = <[_; 2]>::try_from(runs).unwrap();
        assert_eq!((pieces, whole_calls), (4, 1));
        assert_eq!(piecewise.deleted.len(), whole.deleted.len());
        assert_eq!(piecewise.segments, whole.segments);
        for owner in 1..=4 {
            assert_eq!(piecewise.lines(owner).len(), 5);
        }
    }

    #[test]
    fn a_batch_reads_back_a_group_of_owners_at_a_time() {
        let lines = |key: LineKey| (1..=5).map(move |owner| (owner, key, "line\n"));
        let mut runs = Vec::new();
        for read_owners in [2, READ_OWNERS] {
            let mut table = Memory::default();
            for time in [1, 2, 4] {
                let batch: Vec<_> = lines(at(time)).collect();
                store(&mut Engine::new(PACKING), &mut table, &batch);
            }
            // A writer that remembers no run reads every owner's back: an append to the run
            // and lines among the stored ones alike.
            let mut engine = Engine::new(PACKING);
            engine.read_owners = read_owners;
            let calls = table.touched_calls;
            let batch: Vec<_> = lines(at(3)).chain(lines(at(5))).collect();
            store(&mut engine, &mut table, &batch);
            runs.push((table.touched_calls - calls, table));
        }
        let [(grouped_calls, grouped), (whole_calls, whole)] = <[_; 2]>::try_from(runs).unwrap();
        assert_eq!((grouped_calls, whole_calls), (3, 1));
        assert_eq!(grouped.segments, whole.segments);
        for owner in 1..=5 {
            assert_eq!(grouped.lines(owner).len(), 5);
        }
    }

    #[test]
    fn owners_are_laid_apart() {
        let (mut engine, mut table) = (Engine::new(PACKING), Memory::default());
        let lines = [(1, at(3), "t3\n"), (2, at(2), "t2\n"), (1, at(1), "t1\n")];
        store(&mut engine, &mut table, &lines);
        assert_eq!(
            table.lines(1),
            [(at(1), "t1\n".to_owned()), (at(3), "t3\n".to_owned())]
        );
        assert_eq!(table.lines(2), [(at(2), "t2\n".to_owned())]);
    }
    /// Stages a batch of one line: its owner, time and bytes.
    fn stage_one(engine: &mut Engine<u8>, table: &mut Memory, (owner, time, csv): (u8, i64, &str)) {
        lay(engine, table, &[(owner, at(time), csv)], Then::KeepOpen);
    }

    /// The sizes of the stored segments' lines, in owner and key order.
    fn sizes(table: &Memory) -> Vec<usize> {
        table.segments.values().map(|s| s.csv.len()).collect()
    }

    #[test]
    fn staged_appends_are_held_until_the_transaction_ends() {
        let batches = |owner: u8| (1..=3).map(move |time| [(owner, at(time), "line\n")]);
        // Committed batch by batch: a small segment each.
        let (mut engine, mut committed) = (Engine::new(PACKING), Memory::default());
        for batch in batches(7) {
            store(&mut engine, &mut committed, &batch);
        }
        assert_eq!(sizes(&committed), [5, 5, 5]);
        // Staged in one transaction: nothing written until it ends, then one segment.
        let (mut engine, mut table) = (Engine::new(PACKING), Memory::default());
        for (first, second) in batches(7).zip(batches(8)) {
            lay(&mut engine, &mut table, &first, Then::KeepOpen);
            lay(&mut engine, &mut table, &second, Then::KeepOpen);
        }
        assert!(table.segments.is_empty());
        assert_eq!(table.insert_calls, 0);
        engine.write_held(&mut table).unwrap();
        assert_eq!(sizes(&table), [15, 15]);
        assert_eq!(table.lines(7), committed.lines(7));
        // Written once: the next transaction's held segment follows it, and the one after
        // merges both, deleting only what was written.
        engine.write_held(&mut table).unwrap();
        assert_eq!(table.insert_calls, 1);
        stage_one(&mut engine, &mut table, (7, 4, "x\n"));
        stage_one(&mut engine, &mut table, (7, 5, "y\n"));
        assert_eq!(sizes(&table), [15, 15]);
        lay(
            &mut engine,
            &mut table,
            &[(7, at(6), "line\n")],
            Then::Commit,
        );
        assert_eq!(sizes(&table), [24, 15]);
        assert_eq!(table.deleted.len(), 1);
        assert_eq!(table.lines(7).len(), 6);
        // Each owner's first batch asked; every later one appended to a known run.
        assert_eq!(table.touched_calls, 2);
    }

    #[test]
    fn a_held_segment_is_written_before_its_owner_is_read_back() {
        let (mut engine, mut table) = (Engine::new(PACKING), Memory::default());
        stage_one(&mut engine, &mut table, (7, 5, "five\n"));
        // Not an append: the owner's segments are read back, the held one with them.
        stage_one(&mut engine, &mut table, (7, 3, "three\n"));
        engine.write_held(&mut table).unwrap();
        assert_eq!(
            table.lines(7),
            [(at(3), "three\n".to_owned()), (at(5), "five\n".to_owned())]
        );
    }

    #[test]
    fn a_run_beyond_the_bound_is_remembered_by_its_shape_and_read_back_to_merge() {
        let (mut whole, mut reference) = (Engine::new(PACKING), Memory::default());
        // Nothing kept whole: every run remembered by its shape.
        let (mut shaped, mut table) = (Engine::new(PACKING).remembering(0), Memory::default());
        // Transactions of two batches of a line each: two transactions fill the small tail,
        // so every second one merges the run.
        for time in 1..=12 {
            let then = if time % 2 == 0 {
                Then::Commit
            } else {
                Then::KeepOpen
            };
            for (engine, table) in [(&mut whole, &mut reference), (&mut shaped, &mut table)] {
                lay(engine, table, &[(7, at(time), "line\n")], then);
            }
            if time == 3 {
                // Held by its shape: nothing written, nothing read back.
                assert_eq!(sizes(&table), [10]);
                assert_eq!(table.touched_calls, 1);
            }
        }
        // The same segments, written and deleted alike (a held segment is merged in memory,
        // never written to be deleted); the shape read its run back for each of the three
        // merges alone.
        assert_eq!(table.segments, reference.segments);
        assert_eq!(table.deleted, reference.deleted);
        assert_eq!(table.insert_calls, reference.insert_calls);
        assert_eq!(sizes(&table), [20; 3]);
        assert_eq!((reference.touched_calls, table.touched_calls), (1, 4));
    }

    #[test]
    fn held_segments_read_back_from_the_file_are_stored_as_from_the_buffer() {
        let (mut buffered, mut reference) = (Engine::new(PACKING), Memory::default());
        let (mut filed, mut table) = (Engine::new(PACKING), Memory::default());
        // Every piece goes to the file as it is held.
        filed.held.buffer_bytes = 0;
        for time in 1..=40 {
            let then = if time % 5 == 0 {
                Then::Commit
            } else {
                Then::KeepOpen
            };
            let mut batch: Vec<(u8, LineKey, &str)> =
                (0..4).map(|owner| (owner, at(time), "l\n")).collect();
            if time % 7 == 0 {
                // Among owner 2's stored lines: its held segment is written, the rest merged.
                batch.push((2, (time - 3, 5, 1, 0), "old\n"));
            }
            for (engine, table) in [(&mut buffered, &mut reference), (&mut filed, &mut table)] {
                lay(engine, table, &batch, then);
            }
            if time == 3 {
                assert!(filed.held.bytes(1).is_some() && table.segments.is_empty());
            }
        }
        assert_eq!(table.segments, reference.segments);
        assert_eq!(table.deleted, reference.deleted);
        assert_eq!(table.lines(2).len(), 45);
    }

    #[test]
    fn a_forgetful_engine_holds_nothing() {
        let (mut engine, mut table) = (Engine::new(PACKING), Memory::default());
        stage_one(&mut engine, &mut table, (7, 1, "one\n"));
        // The transaction failed: what it held is gone with it.
        engine.forget();
        engine.write_held(&mut table).unwrap();
        assert!(table.segments.is_empty());
        lay(
            &mut engine,
            &mut table,
            &[(7, at(2), "two\n")],
            Then::Commit,
        );
        assert_eq!(table.lines(7), [(at(2), "two\n".to_owned())]);
    }
}
