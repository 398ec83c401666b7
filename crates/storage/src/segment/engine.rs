//! The segment engine: how a batch's lines are laid into their owners' segments, written once
//! for every backend.
//!
//! A backend describes one table of segments as a [`SegmentTable`], three statements in SQL
//! alone: read what a batch touches, delete segments by key, write new segments. The engine
//! decides everything else, alike on every backend: which segments a batch touches, what the
//! writer remembers of each owner's last segment ([`Tails`], one memory bound), the merge
//! ([`rebuild`]) and the packing policy ([`Packing`]: where a segment is sealed, which last
//! segment is grown rather than followed).
//!
//! Which segments a batch touches, per owner: the stored segments its lines fall among, those
//! whose last key is at or after the owner's first line in the batch and whose first vega time
//! is not after its last line's. When there are none because the lines all come after what is
//! stored (an append), the owner's last segment instead, if it is smaller than the small tail,
//! so that a stream committed a block at a time still fills segments. Not every segment after the
//! batch's first key: a batch of old keys (a re-run from an earlier block) would then rewrite the
//! owner's whole history after them, for each batch.
//!
//! The rewrite covers a key range holding no other segment of the owner (segments never
//! overlap, and a segment left out lies wholly before the owner's first line or wholly after
//! its last, or, for the tail, is the one segment before them), so the write never meets a
//! stored key and needs no conflict check; the writer's lock keeps anyone else from writing in
//! between. An owner whose lines are all stored already (a re-run) is not rewritten at all.

use std::collections::HashMap;
use std::hash::Hash;

use super::{Line, LineKey, Segment, Tails, rebuild};
use crate::Error;

/// Where segments are cut: the packing policy of one table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packing {
    /// Lines' bytes after which a segment is sealed and the next line starts a new one.
    pub seal: usize,
    /// An owner's last segment with fewer lines' bytes than this is rewritten with the next
    /// batch's lines instead of being followed by a new segment.
    pub small_tail: usize,
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
    /// The stored segments to rewrite, by owner, with their keys in the table (their last
    /// lines' keys), in any order.
    pub stored: HashMap<O, Vec<(LineKey, Segment)>>,
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
    /// [`Ask::first`], first vega time at or before [`Ask::last_time`]); when there are none,
    /// its last segment if that is smaller than `small_tail` lines' bytes and ends before
    /// [`Ask::first`]; and the key of its last segment, whatever it is. Stored segments are
    /// checked ([`Segment::from_stored`]) before they are returned.
    fn touched(
        &mut self,
        asks: &[Ask<Self::Owner>],
        small_tail: usize,
    ) -> Result<Touched<Self::Owner>, Error>;

    /// Deletes the segments at these keys (owner and last line's key).
    fn delete(&mut self, keys: &[(Self::Owner, LineKey)]) -> Result<(), Error>;

    /// Writes new segments, each keyed by its owner and its last line's key; none is empty and
    /// none is stored yet.
    fn insert(&mut self, fresh: &[(Self::Owner, Segment)]) -> Result<(), Error>;
}

/// The stored bytes of batch lines whose keys were stored already with other bytes, by owner
/// and key (see [`Engine::store`]).
pub type Kept<O> = HashMap<(O, LineKey), Vec<u8>>;

/// A writer's segment engine for one table: its packing policy and what it remembers of its
/// owners' last segments. Only valid while its writer is the only one committing: a writer
/// calls [`forget`](Self::forget) when a transaction fails or another writer may have
/// committed.
#[derive(Debug)]
pub struct Engine<O> {
    packing: Packing,
    tails: Tails<O>,
}

impl<O: Copy + Eq + Hash + Ord> Engine<O> {
    /// An engine that knows nothing yet.
    pub fn new(packing: Packing) -> Self {
        Self {
            packing,
            tails: Tails::new(packing.small_tail),
        }
    }

    /// Forgets the owners' last segments: a transaction that wrote them failed, or another
    /// writer may have changed them.
    pub fn forget(&mut self) {
        self.tails.forget();
    }

    /// Lays the batch's lines, each with its owner, into the owners' segments in `table`. A
    /// line whose key is stored already is not written: the stored one stays, and of two lines
    /// at one key in the batch the first. Those among them whose stored bytes differ are
    /// returned (a re-run that brings other bytes for a stored key; empty otherwise), so that a
    /// caller writing the same line elsewhere can write it as stored.
    pub fn store<T: SegmentTable<Owner = O>>(
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
        // Owners that only append to a last segment this writer knows need no reading back.
        let mut known = HashMap::new();
        let mut asks = Vec::new();
        for owner_lines in &owners {
            let (owner, first) = (owner_lines[0].0, owner_lines[0].1.key);
            match self.tails.take(owner, first) {
                Some(tail) => {
                    known.insert(owner, tail);
                }
                None => asks.push(Ask {
                    owner,
                    first,
                    last_time: owner_lines[owner_lines.len() - 1].1.key.0,
                }),
            }
        }
        let Touched {
            mut stored,
            last_keys,
        } = if asks.is_empty() {
            Touched::default()
        } else {
            table.touched(&asks, self.packing.small_tail)?
        };
        let mut doomed = Vec::new();
        let mut fresh = Vec::new();
        for owner_lines in owners {
            let owner = owner_lines[0].0;
            let remembered = known.remove(&owner);
            let appended = remembered.is_some();
            let mut stored = match remembered {
                Some(tail) => tail.into_iter().collect(),
                None => stored.remove(&owner).unwrap_or_default(),
            };
            stored.sort_unstable_by_key(|(key, _)| *key);
            let (keys, segments): (Vec<LineKey>, Vec<Segment>) = stored.into_iter().unzip();
            let new_lines = owner_lines.iter().map(|(_, line)| *line);
            // Appending (the usual case) meets no stored key: only a segment at or after the
            // first line can hold one.
            if keys
                .last()
                .is_some_and(|last| *last >= owner_lines[0].1.key)
            {
                for line in new_lines.clone() {
                    let stored = segments.iter().find_map(|s| s.view().find(line.key));
                    if let Some(stored) = stored.filter(|stored| stored.csv != line.csv) {
                        kept.insert((owner, line.key), stored.csv.to_vec());
                    }
                }
            }
            let rebuilt = rebuild(&segments, new_lines, self.packing.seal)?;
            // Rebuilding only ever adds lines: as many as were stored means none was new.
            let count = |segments: &[Segment]| segments.iter().map(Segment::lines).sum::<usize>();
            if count(&rebuilt) == count(&segments) {
                continue;
            }
            doomed.extend(keys.into_iter().map(|key| (owner, key)));
            // The rebuilt segments end the owner's when the batch only appended, or when none
            // stored lies beyond them.
            if let Some(last) = rebuilt.last()
                && (appended || last.last_key() >= last_keys.get(&owner).copied())
            {
                self.tails.remember(owner, last);
            }
            fresh.extend(rebuilt.into_iter().map(|segment| (owner, segment)));
        }
        if !doomed.is_empty() {
            table.delete(&doomed)?;
        }
        if !fresh.is_empty() {
            table.insert(&fresh)?;
        }
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A table of segments in memory, counting what the engine asks of it.
    #[derive(Default)]
    struct Memory {
        segments: BTreeMap<(u8, LineKey), Segment>,
        touched_calls: usize,
        asked: Vec<Ask<u8>>,
        deleted: Vec<(u8, LineKey)>,
    }

    impl SegmentTable for Memory {
        type Owner = u8;

        fn touched(&mut self, asks: &[Ask<u8>], small_tail: usize) -> Result<Touched<u8>, Error> {
            self.touched_calls += 1;
            self.asked.extend_from_slice(asks);
            let mut read = Touched::default();
            for ask in asks {
                let owned: Vec<_> = self
                    .segments
                    .range((ask.owner, (i64::MIN, i64::MIN, i64::MIN, i64::MIN))..)
                    .take_while(|((owner, _), _)| *owner == ask.owner)
                    .collect();
                let Some(((_, last_key), last)) = owned.last() else {
                    continue;
                };
                read.last_keys.insert(ask.owner, *last_key);
                let mut stored: Vec<(LineKey, Segment)> = owned
                    .iter()
                    .filter(|((_, key), segment)| {
                        *key >= ask.first
                            && segment
                                .first_key()
                                .is_some_and(|first| first.0 <= ask.last_time)
                    })
                    .map(|((_, key), segment)| (*key, (*segment).clone()))
                    .collect();
                if stored.is_empty() && last.csv.len() < small_tail && *last_key < ask.first {
                    stored.push((*last_key, (*last).clone()));
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
    };

    fn store(
        engine: &mut Engine<u8>,
        table: &mut Memory,
        lines: &[(u8, LineKey, &str)],
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
        engine.store(table, lines).unwrap()
    }

    fn at(time: i64) -> LineKey {
        (time, 1, 1, 0)
    }

    #[test]
    fn appends_read_nothing_back_and_grow_the_small_tail() {
        let (mut engine, mut table) = (Engine::new(PACKING), Memory::default());
        for time in 1..=20 {
            store(&mut engine, &mut table, &[(7, at(time), "line\n")]);
        }
        // Only the first batch asked: every later one appended to the remembered tail.
        assert_eq!(table.touched_calls, 1);
        let lines = table.lines(7);
        assert_eq!(lines.len(), 20);
        // A tail grows while it holds under 20 bytes: four lines of five bytes a segment.
        for segment in table.segments.values() {
            assert_eq!(segment.csv.len(), 20);
        }
        assert_eq!(table.segments.len(), 5);
    }

    #[test]
    fn a_forgetful_engine_grows_the_small_tail_from_the_table() {
        let mut table = Memory::default();
        store(&mut Engine::new(PACKING), &mut table, &[(7, at(1), "a\n")]);
        store(&mut Engine::new(PACKING), &mut table, &[(7, at(2), "b\n")]);
        assert_eq!(table.segments.len(), 1, "the small tail grew");
        assert_eq!(table.lines(7).len(), 2);
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
}
