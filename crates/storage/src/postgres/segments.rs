//! The ledger half of a commit: a batch's lines laid into each party's segments (`segment.rs`).
//!
//! One query reads, for every party of the batch at once, the stored segments that the party's
//! lines fall among: those whose last key is at or after the party's first line in the batch and
//! whose first vega time is not after its last line's. When there are none because the lines
//! all come after what is stored (the usual append), it reads instead the party's last segment
//! if it is shorter than [`SMALL_TAIL_BYTES`], so that a stream committed a block at a time
//! still fills segments. `segment::rebuild` merges what was read, decompressed, with the lines;
//! the segments read are deleted by key and the result is compressed (`packed.rs`) and copied
//! in.
//!
//! The rewrite covers a key range holding no other segment of the party (segments never
//! overlap, and a segment left out lies wholly before the party's first line or wholly after
//! its last, or, for the tail, is the one segment before them), so the copy never meets a
//! stored key and needs no conflict check; the writer's lock keeps anyone else from writing in
//! between. A party whose lines are all stored already (a re-run) is not rewritten at all.
//!
//! Why not every segment after the batch's first key: a batch of old keys (a re-run from an
//! earlier block) would then rewrite the party's whole history after them, for each batch.

use std::collections::HashMap;

use postgres::types::{ToSql, Type};
use postgres::{Client, Statement, Transaction};

use super::ingest::copy_in;
use super::map_err;
use super::packed::{pack, size_prefix, unpack};
use crate::Error;
use crate::segment::{self, Line, LineKey, SMALL_TAIL_BYTES, Segment, SegmentRef};

/// The stored segments each party's lines fall among, or its small last segment to grow (see
/// the module docs). Parameters: per party its id, its first line's key (four columns) and its
/// last line's vega time, as arrays; then the size prefix of [`SMALL_TAIL_BYTES`]. The rows come in no order.
///
/// A lateral subquery per party: a parameterised range scan of the primary key each, never a
/// join that could hash the whole table (`query_plans.rs` pins it). The tail's size is the
/// prefix of its compressed lines (`packed.rs`), big-endian so that it compares as bytes with the
/// bound's prefix; `substring` of a value stored out of line and uncompressed fetches only the
/// chunk that holds those bytes.
pub(super) const TOUCHED_SQL: &str = "
    SELECT s.party, s.last_time, s.last_block, s.last_seq, s.last_idx, s.csv, s.keys
    FROM unnest($1::integer[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[],
                $6::bigint[]) AS b (party, time, block, seq, idx, high)
    CROSS JOIN LATERAL (
        SELECT * FROM ledger_segments s
        WHERE s.party = b.party
          AND (s.last_time, s.last_block, s.last_seq, s.last_idx)
              >= (b.time, b.block, b.seq, b.idx)
          AND s.first_time <= b.high
        UNION ALL
        SELECT * FROM (
            SELECT * FROM ledger_segments s WHERE s.party = b.party
            ORDER BY s.last_time DESC, s.last_block DESC, s.last_seq DESC, s.last_idx DESC
            LIMIT 1
        ) tail
        WHERE (tail.last_time, tail.last_block, tail.last_seq, tail.last_idx)
              < (b.time, b.block, b.seq, b.idx)
          AND substring(tail.csv FOR 4) < $7
    ) s";

/// Deletes segments by key, given as arrays of party, vega time, block, sequence and index.
pub(super) const DELETE_SQL: &str = "
    DELETE FROM ledger_segments s
    USING unnest($1::integer[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[])
        AS d (party, time, block, seq, idx)
    WHERE s.party = d.party AND s.last_time = d.time AND s.last_block = d.block
      AND s.last_seq = d.seq AND s.last_idx = d.idx";

/// The columns of `ledger_segments`, as `COPY` writes them.
const COLUMNS: &[Type] = &[
    Type::INT4,
    Type::INT8,
    Type::INT8,
    Type::INT8,
    Type::INT8,
    Type::INT8,
    Type::INT4,
    Type::BYTEA,
    Type::BYTEA,
];

/// The writer's statements, prepared once for its session: a batch then costs no parse round
/// trips.
pub(super) struct Statements {
    touched: Statement,
    delete: Statement,
}

impl Statements {
    pub(super) fn prepare(client: &mut Client) -> Result<Self, Error> {
        Ok(Self {
            touched: client.prepare(TOUCHED_SQL).map_err(map_err)?,
            delete: client.prepare(DELETE_SQL).map_err(map_err)?,
        })
    }
}

/// A stored segment read to be rewritten, with its key in the table.
type Stored = (LineKey, Segment);

/// Lays the batch's ledger lines, each with its party's dictionary id, into the parties'
/// segments, inside the batch's transaction.
pub(super) fn store(
    tx: &mut Transaction<'_>,
    statements: &Statements,
    mut lines: Vec<(i32, Line<'_>)>,
) -> Result<(), Error> {
    // A stable sort: of two lines at one key in a batch the first stays, as a stored one does.
    lines.sort_by_key(|(party, line)| (*party, line.key));
    lines.dedup_by(|line, previous| (line.0, line.1.key) == (previous.0, previous.1.key));
    let parties: Vec<&[(i32, Line<'_>)]> = lines.chunk_by(|a, b| a.0 == b.0).collect();
    if parties.is_empty() {
        return Ok(());
    }
    let mut stored = touched(tx, &statements.touched, &parties)?;
    let mut doomed = KeyColumns::default();
    let mut fresh = Vec::new();
    for party_lines in parties {
        let party = party_lines[0].0;
        let (keys, segments): (Vec<LineKey>, Vec<Segment>) = stored
            .remove(&party)
            .unwrap_or_default()
            .into_iter()
            .unzip();
        let rebuilt = segment::rebuild(&segments, party_lines.iter().map(|(_, line)| *line))?;
        // Rebuilding only ever adds lines: as many as were stored means none was new.
        let count = |segments: &[Segment]| segments.iter().map(Segment::lines).sum::<usize>();
        if count(&rebuilt) == count(&segments) {
            continue;
        }
        for key in keys {
            doomed.push(party, key);
        }
        fresh.extend(rebuilt.into_iter().map(|segment| (party, segment)));
    }
    if !doomed.party.is_empty() {
        tx.execute(&statements.delete, &doomed.params())
            .map_err(map_err)?;
    }
    write(tx, &fresh)
}

/// Keys as the column arrays that `unnest` takes.
#[derive(Default)]
struct KeyColumns {
    party: Vec<i32>,
    time: Vec<i64>,
    block: Vec<i64>,
    seq: Vec<i64>,
    idx: Vec<i64>,
}

impl KeyColumns {
    fn push(&mut self, party: i32, (time, block, seq, idx): LineKey) {
        self.party.push(party);
        self.time.push(time);
        self.block.push(block);
        self.seq.push(seq);
        self.idx.push(idx);
    }

    /// The five arrays, as the first five parameters of a statement.
    fn params(&self) -> [&(dyn ToSql + Sync); 5] {
        [&self.party, &self.time, &self.block, &self.seq, &self.idx]
    }
}

/// The stored segments to rewrite, by party, each party's in key order, their indexes checked.
fn touched(
    tx: &mut Transaction<'_>,
    statement: &Statement,
    parties: &[&[(i32, Line<'_>)]],
) -> Result<HashMap<i32, Vec<Stored>>, Error> {
    let mut first = KeyColumns::default();
    let mut high = Vec::with_capacity(parties.len());
    for lines in parties {
        let (party, line) = lines[0];
        first.push(party, line.key);
        high.push(lines[lines.len() - 1].1.key.0);
    }
    let small_tail = size_prefix(SMALL_TAIL_BYTES);
    let [party, time, block, seq, idx] = first.params();
    let rows = tx
        .query(
            statement,
            &[party, time, block, seq, idx, &high, &small_tail],
        )
        .map_err(map_err)?;
    let mut stored: HashMap<i32, Vec<Stored>> = HashMap::new();
    for row in rows {
        let key = (row.get(1), row.get(2), row.get(3), row.get(4));
        let segment = Segment {
            csv: unpack(row.get(5))?,
            keys: unpack(row.get(6))?,
        };
        // `rebuild` trusts a segment's index to slice its lines.
        SegmentRef::new(&segment.csv, &segment.keys)?;
        stored.entry(row.get(0)).or_default().push((key, segment));
    }
    for segments in stored.values_mut() {
        segments.sort_unstable_by_key(|(key, _)| *key);
    }
    Ok(stored)
}

/// Copies new segments in, each keyed by its last line, its blobs compressed.
fn write(tx: &mut Transaction<'_>, fresh: &[(i32, Segment)]) -> Result<(), Error> {
    let mut heads = Vec::with_capacity(fresh.len());
    for (party, segment) in fresh {
        let (Some(first), Some(last)) = (segment.first_key(), segment.last_key()) else {
            return Err(Error::Internal("an empty ledger segment to store".into()));
        };
        let lines = i32::try_from(segment.lines())
            .map_err(|_| Error::Internal("a ledger segment of too many lines".into()))?;
        let packed = (pack(&segment.csv)?, pack(&segment.keys)?);
        heads.push((*party, last, first.0, lines, packed));
    }
    let rows: Vec<Vec<&(dyn ToSql + Sync)>> = heads
        .iter()
        .map(
            |(party, (time, block, seq, idx), first_time, lines, (csv, keys))| {
                vec![
                    party as &(dyn ToSql + Sync),
                    time,
                    block,
                    seq,
                    idx,
                    first_time,
                    lines,
                    csv,
                    keys,
                ]
            },
        )
        .collect();
    copy_in(tx, "ledger_segments", COLUMNS, &rows).map_err(map_err)
}
