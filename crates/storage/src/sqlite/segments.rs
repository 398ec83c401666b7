//! Tables of segments in SQLite (`segment.rs`): the ledger's, one owner per party, and the
//! oracle data's (schema 9), whose owner is a spec, or [`ALL_DATA`] for every datum matched or
//! not, each line a datum's JSON keyed by its position with entry index 0.
//!
//! Both are rowid tables found through a unique index on (owner, last line's key): in a
//! WITHOUT ROWID table a segment's whole record would be its b-tree key, and SQLite copies a
//! record that spills onto overflow pages whole only to compare its first integers (schema 5).
//! The engine (`segment::Engine`) decides which segments a batch touches and where they are
//! cut; [`Segments`] is its [`SegmentTable`] in SQL.

use rusqlite::{Connection, params};

use super::{map_err, verified};
use crate::segment::{self, Ask, LineKey, Packing, Segment, SegmentTable, Touched};
pub(super) use crate::segment::{LEDGER, Table};
use crate::{Bug, Error, checksum};

/// Oracle data: as both backends lay them out (`segment::ORACLE`), but sealed at 13 KiB rather
/// than 16: a page of SQLite's file (32 KiB) holds two records of at most about 16,350 bytes
/// (a rowid table's leaf keeps each record whole within its page), and a record holds the
/// segment's JSON, at most the seal and one datum more, plus its index, 44 bytes a datum
/// (about a tenth of the JSON). Sealed at 16 KiB every record was just over half a page, so
/// each page held one: 40 % of the table was free space (601 of 1,483 MB on the standard
/// dataset, `dbstat`).
pub(super) const ORACLE: Table = Table {
    packing: Packing {
        seal: 13 * 1024,
        ..segment::ORACLE.packing
    },
    ..segment::ORACLE
};

/// The owner of every datum's line in [`ORACLE`]; specs' dictionary ids start at 1.
pub(super) const ALL_DATA: i64 = 0;

/// The SQL of a table of segments in SQLite, whose unique index of keys is `{name}_key`, and
/// whose blobs' checksums are `{lines}_sum` and `keys_sum`.
impl Table {
    /// The columns of a segment's blobs and their checksums, as
    /// [`stored_segment`](Self::stored_segment) reads them.
    fn blobs(&self) -> String {
        format!("{lines}, keys, {lines}_sum, keys_sum", lines = self.lines)
    }

    /// The segments of owner `?1` that lines from key `(?2, ?3, ?4, ?5)` to vega time `?6` fall
    /// among: their keys, then their blobs.
    pub(super) fn among_sql(&self) -> String {
        let Table { name, owner, .. } = self;
        format!(
            "SELECT last_time, last_block, last_seq, last_idx, {} FROM {name} \
             WHERE {owner} = ?1 \
             AND (last_time, last_block, last_seq, last_idx) >= (?2, ?3, ?4, ?5) \
             AND first_time <= ?6",
            self.blobs()
        )
    }

    /// The keys of owner `?1`'s last `?3` segments, the last first, and whether each one's
    /// lines are fewer than `?2` bytes (`length` of a blob reads only its record's header).
    pub(super) fn last_sql(&self) -> String {
        let Table {
            name, owner, lines, ..
        } = self;
        format!(
            "SELECT last_time, last_block, last_seq, last_idx, length({lines}) < ?2 FROM {name} \
             WHERE {owner} = ?1 \
             ORDER BY last_time DESC, last_block DESC, last_seq DESC, last_idx DESC LIMIT ?3"
        )
    }

    /// The blobs of one segment, by its owner and key.
    pub(super) fn tail_sql(&self) -> String {
        let Table { name, owner, .. } = self;
        format!(
            "SELECT {} FROM {name} WHERE {owner} = ?1 \
             AND last_time = ?2 AND last_block = ?3 AND last_seq = ?4 AND last_idx = ?5",
            self.blobs()
        )
    }

    /// Names, in a damage report, the segment of `owner` whose last key is in columns
    /// `at..at + 4` of `row`.
    pub(super) fn at_segment(
        &self,
        err: Error,
        owner: i64,
        row: &rusqlite::Row<'_>,
        at: usize,
    ) -> Error {
        err.at(self.name, || {
            let column = |i| row.get::<_, i64>(i);
            match (column(at), column(at + 1), column(at + 2), column(at + 3)) {
                (Ok(time), Ok(block), Ok(seq), Ok(idx)) => {
                    segment::describe(self.owner, owner, (time, block, seq, idx))
                }
                _ => format!("{} {owner}", self.owner),
            }
        })
    }

    /// A stored segment from the columns `at..at + 4` of a row (lines, index and their
    /// checksums, as [`blobs`](Self::blobs) names them), both blobs verified: damage is found
    /// here rather than copied into rebuilt segments under new sums.
    pub(super) fn stored_segment(
        &self,
        row: &rusqlite::Row<'_>,
        at: usize,
    ) -> Result<Segment, Error> {
        let lines = verified(row, (at, self.lines), at + 2)?;
        let keys = verified(row, (at + 1, "keys"), at + 3)?;
        Segment::from_stored(lines.to_vec(), keys.to_vec())
    }
}

/// A table of segments on a connection inside a transaction, as the segment engine sees it.
pub(super) struct Segments<'a> {
    /// The table.
    pub table: &'a Table,
    /// The connection, inside the batch's (or the migration's) transaction.
    pub conn: &'a Connection,
}

impl SegmentTable for Segments<'_> {
    type Owner = i64;

    /// Two range searches of the table's index per owner: the segments its lines fall among,
    /// then its last segments (the blobs only of those in the run).
    fn touched(&mut self, asks: &[Ask<i64>], packing: Packing) -> Result<Touched<i64>, Error> {
        let table = self.table;
        let mut among = self
            .conn
            .prepare_cached(&table.among_sql())
            .map_err(map_err)?;
        let mut last = self
            .conn
            .prepare_cached(&table.last_sql())
            .map_err(map_err)?;
        let mut tail = self
            .conn
            .prepare_cached(&table.tail_sql())
            .map_err(map_err)?;
        let small_tail = i64::try_from(packing.small_tail).unwrap_or(i64::MAX);
        let run = i64::try_from(packing.run).unwrap_or(i64::MAX);
        let mut read = Touched::default();
        for ask in asks {
            let (time, block, seq, idx) = ask.first;
            let mut rows = among
                .query(params![ask.owner, time, block, seq, idx, ask.last_time])
                .map_err(map_err)?;
            let mut stored = Vec::new();
            while let Some(row) = rows.next().map_err(map_err)? {
                let key = key_of(row)?;
                let segment = table
                    .stored_segment(row, 4)
                    .map_err(|err| table.at_segment(err, ask.owner, row, 0))?;
                stored.push((key, segment));
            }
            let mut lasts = Vec::new();
            let mut rows = last
                .query(params![ask.owner, small_tail, run])
                .map_err(map_err)?;
            while let Some(row) = rows.next().map_err(map_err)? {
                lasts.push((key_of(row)?, row.get::<_, bool>(4).map_err(map_err)?));
            }
            let Some(&(last_key, _)) = lasts.first() else {
                continue;
            };
            read.last_keys.insert(ask.owner, last_key);
            if stored.is_empty() && last_key < ask.first {
                // The run: the last segments while they are small, the last first.
                for (key, _) in lasts.into_iter().take_while(|(_, small)| *small) {
                    let (time, block, seq, idx) = key;
                    let segment = tail
                        .query_row(params![ask.owner, time, block, seq, idx], |row| {
                            Ok(table.stored_segment(row, 0))
                        })
                        .map_err(map_err)?
                        .map_err(|err| {
                            err.at(table.name, || {
                                segment::describe(table.owner, ask.owner, key)
                            })
                        })?;
                    stored.push((key, segment));
                }
            }
            if !stored.is_empty() {
                read.stored.insert(ask.owner, stored);
            }
        }
        Ok(read)
    }

    fn delete(&mut self, keys: &[(i64, LineKey)]) -> Result<(), Error> {
        let Table { name, owner, .. } = self.table;
        let mut delete = self
            .conn
            .prepare_cached(&format!(
                "DELETE FROM {name} WHERE {owner} = ?1 AND last_time = ?2 \
                 AND last_block = ?3 AND last_seq = ?4 AND last_idx = ?5"
            ))
            .map_err(map_err)?;
        for (id, (time, block, seq, idx)) in keys {
            delete
                .execute(params![id, time, block, seq, idx])
                .map_err(map_err)?;
        }
        Ok(())
    }

    fn insert(&mut self, fresh: &[(i64, Segment)]) -> Result<(), Error> {
        let Table {
            name, owner, lines, ..
        } = self.table;
        let mut insert = self
            .conn
            .prepare_cached(&format!(
                "INSERT INTO {name} ({owner}, last_time, last_block, last_seq, last_idx, \
                 first_time, lines, {lines}_sum, keys_sum, {lines}, keys) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
            ))
            .map_err(map_err)?;
        for (id, segment) in fresh {
            let (Some(first), Some((time, block, seq, idx))) =
                (segment.first_key(), segment.last_key())
            else {
                return Err(Bug::EmptySegment.into());
            };
            let count = i64::try_from(segment.lines()).map_err(|_| Bug::TooManyLines)?;
            insert
                .execute(params![
                    id,
                    time,
                    block,
                    seq,
                    idx,
                    first.0,
                    count,
                    checksum::to_sql(checksum::of(&segment.csv)),
                    checksum::to_sql(checksum::of(&segment.keys)),
                    segment.csv,
                    segment.keys
                ])
                .map_err(map_err)?;
        }
        Ok(())
    }
}

/// The key of a segment from the first four columns of a row.
pub(super) fn key_of(row: &rusqlite::Row<'_>) -> Result<LineKey, Error> {
    let column = |i| row.get::<_, i64>(i).map_err(map_err);
    Ok((column(0)?, column(1)?, column(2)?, column(3)?))
}
