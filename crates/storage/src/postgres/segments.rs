//! Segments in PostgreSQL: a batch's lines laid into their owners' segments (`segment.rs`).
//! Two tables hold segments ([`Table`]): the ledger's, one owner per party, and the oracle
//! data's, whose owner is a spec (or 0 for all data, matched or not), each line a datum's JSON.
//!
//! The writer remembers each owner's last segment (`Statements`): an owner whose lines all come
//! after it needs nothing read back. For the others, one query reads, for all of them at once,
//! the stored segments that the owner's lines fall among: those whose last key is at or after
//! the owner's first line in the batch and whose first vega time is not after its last line's.
//! When there are none because the lines all come after what is stored (an append), it reads
//! instead the owner's last segment if it is shorter than the table's small tail, so that a
//! stream committed a block at a time still fills segments. `segment::rebuild` merges what was
//! read, decompressed, with the lines; the segments read are deleted by key and the result is
//! compressed (`packed.rs`) and copied in.
//!
//! The rewrite covers a key range holding no other segment of the owner (segments never
//! overlap, and a segment left out lies wholly before the owner's first line or wholly after
//! its last, or, for the tail, is the one segment before them), so the copy never meets a
//! stored key and needs no conflict check; the writer's lock keeps anyone else from writing in
//! between. An owner whose lines are all stored already (a re-run) is not rewritten at all.
//!
//! Why not every segment after the batch's first key: a batch of old keys (a re-run from an
//! earlier block) would then rewrite the owner's whole history after them, for each batch.

use std::collections::HashMap;

use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::{ToSql, Type};
use postgres::{GenericClient, Statement, Transaction};

use super::map_err;
use super::packed::{pack, size_prefix, unpack};
use crate::Error;
use crate::error::Bug;
use crate::segment::{self, Line, LineKey, SMALL_TAIL_BYTES, Segment, Tails};

/// A table of segments: its name, its owner and lines columns, and how its segments are cut.
#[derive(Debug)]
pub(super) struct Table {
    /// The table.
    pub name: &'static str,
    /// The owner's column: a dictionary id.
    pub owner: &'static str,
    /// The column of the lines (the index is `keys`).
    pub lines: &'static str,
    /// Lines' bytes after which a segment is sealed (see `segment::rebuild`).
    pub seal: usize,
    /// An owner's last segment shorter than this is rewritten with the next lines.
    pub small_tail: usize,
    /// Whether the table also holds its segments' first keys whole (`first_block`, `first_seq`,
    /// `first_idx` after `keys`), for a scan in descending order to start at the segment that
    /// holds its anchor.
    pub first_keys: bool,
}

/// The ledger: a party's CSV lines across all its assets (`segment.rs`).
pub(super) const LEDGER: Table = Table {
    name: "ledger_segments",
    owner: "party",
    lines: "csv",
    seal: segment::SEGMENT_BYTES,
    small_tail: SMALL_TAIL_BYTES,
    first_keys: false,
};

/// Oracle data: per spec the data that matched it, and under owner [`ALL_DATA`] every datum,
/// each line a datum's JSON, keyed by its position with entry index 0. Much smaller than the
/// ledger's: an export reads whole segments, a page about a hundred data, the latest value of a
/// spec one; what a page reads beyond its data is fetched, sent (through TLS, often) and
/// decompressed for nothing. With 64 KiB segments the latest value took 0.57–0.65 ms against
/// 0.35 ms for rows; a segment of 16 KiB compresses to about 4 KB.
pub(super) const ORACLE: Table = Table {
    name: "oracle_segments",
    owner: "spec",
    lines: "json",
    seal: 16 * 1024,
    small_tail: 8 * 1024,
    first_keys: true,
};

/// The owner of every datum's line in [`ORACLE`]; specs' dictionary ids start at 1.
pub(super) const ALL_DATA: i32 = 0;

impl Table {
    /// The stored segments each owner's lines fall among, or its small last segment to grow
    /// (see the module docs). Parameters: per owner its id, its first line's key (four columns)
    /// and its last line's vega time, as arrays; then the size prefix of the small tail. The
    /// rows come in no order. Each owner's last segment comes too, without its blobs unless it
    /// is the tail to grow (it may come twice): its key tells whether a rebuild ends the owner's
    /// segments, which the writer then remembers.
    ///
    /// A lateral subquery per owner: a parameterised range scan of the primary key each, never
    /// a join that could hash the whole table (`query_plans.rs` pins it). The tail's size is
    /// the prefix of its compressed lines (`packed.rs`), big-endian so that it compares as
    /// bytes with the bound's prefix; `substring` of a value stored out of line and
    /// uncompressed fetches only the chunk that holds those bytes.
    pub(super) fn touched_sql(&self) -> String {
        let Table {
            name, owner, lines, ..
        } = self;
        format!(
            "
    SELECT s.{owner}, s.last_time, s.last_block, s.last_seq, s.last_idx, s.{lines}, s.keys
    FROM unnest($1::integer[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[],
                $6::bigint[]) AS b (owner, time, block, seq, idx, high)
    CROSS JOIN LATERAL (
        SELECT s.{owner}, s.last_time, s.last_block, s.last_seq, s.last_idx, s.{lines}, s.keys
        FROM {name} s
        WHERE s.{owner} = b.owner
          AND (s.last_time, s.last_block, s.last_seq, s.last_idx)
              >= (b.time, b.block, b.seq, b.idx)
          AND s.first_time <= b.high
        UNION ALL
        SELECT tail.{owner}, tail.last_time, tail.last_block, tail.last_seq, tail.last_idx,
               CASE WHEN tail.grow THEN tail.{lines} END, CASE WHEN tail.grow THEN tail.keys END
        FROM (
            SELECT s.*, (s.last_time, s.last_block, s.last_seq, s.last_idx)
                        < (b.time, b.block, b.seq, b.idx)
                    AND substring(s.{lines} FOR 4) < $7 AS grow
            FROM {name} s WHERE s.{owner} = b.owner
            ORDER BY s.last_time DESC, s.last_block DESC, s.last_seq DESC, s.last_idx DESC
            LIMIT 1
        ) tail
    ) s"
        )
    }

    /// Deletes segments by key, given as arrays of owner, vega time, block, sequence and index.
    pub(super) fn delete_sql(&self) -> String {
        let Table { name, owner, .. } = self;
        format!(
            "
    DELETE FROM {name} s
    USING unnest($1::integer[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[])
        AS d (owner, time, block, seq, idx)
    WHERE s.{owner} = d.owner AND s.last_time = d.time AND s.last_block = d.block
      AND s.last_seq = d.seq AND s.last_idx = d.idx"
        )
    }
}

/// The writer's statements for one table, prepared once for its session (a batch then costs
/// no parse round trips), and the owners' last segments as far as it knows them.
pub(super) struct Statements {
    table: &'static Table,
    touched: Statement,
    delete: Statement,
    /// Each owner's last segment, when known: a batch that only appends to it reads nothing
    /// back. Filled from what this writer committed (its lock keeps others out) and emptied
    /// when a transaction fails ([`Statements::forget`]).
    tails: Tails<i32>,
}

impl Statements {
    pub(super) fn prepare(
        client: &mut impl GenericClient,
        table: &'static Table,
    ) -> Result<Self, Error> {
        Ok(Self {
            table,
            touched: client.prepare(&table.touched_sql()).map_err(map_err)?,
            delete: client.prepare(&table.delete_sql()).map_err(map_err)?,
            tails: Tails::new(table.small_tail),
        })
    }

    /// Forgets the owners' last segments: a transaction that wrote them failed.
    pub(super) fn forget(&mut self) {
        self.tails.forget();
    }
}

/// A stored segment read to be rewritten, with its key in the table.
type Stored = (LineKey, Segment);

/// The stored bytes of batch lines whose keys were stored already with other bytes, by owner
/// and key (see [`store`]).
pub(super) type Kept = HashMap<(i32, LineKey), Vec<u8>>;

/// Lays the batch's lines, each with its owner's dictionary id, into the owners' segments,
/// inside the batch's transaction. A line whose key is stored already is not written: the
/// stored one stays. Those among them whose stored bytes differ are returned (a re-run that
/// brings other bytes for a stored key; empty otherwise), so that a caller writing the same
/// line elsewhere can write it as stored.
pub(super) fn store(
    tx: &mut Transaction<'_>,
    statements: &mut Statements,
    mut lines: Vec<(i32, Line<'_>)>,
) -> Result<Kept, Error> {
    let mut kept = Kept::new();
    // A stable sort: of two lines at one key in a batch the first stays, as a stored one does.
    lines.sort_by_key(|(owner, line)| (*owner, line.key));
    lines.dedup_by(|line, previous| (line.0, line.1.key) == (previous.0, previous.1.key));
    let owners: Vec<&[(i32, Line<'_>)]> = lines.chunk_by(|a, b| a.0 == b.0).collect();
    if owners.is_empty() {
        return Ok(kept);
    }
    let table = statements.table;
    // Owners that only append to a last segment this writer knows need no reading back.
    let mut known = HashMap::new();
    let mut ask = Vec::new();
    for owner_lines in &owners {
        let (owner, first) = (owner_lines[0].0, owner_lines[0].1.key);
        match statements.tails.take(owner, first) {
            Some(tail) => {
                known.insert(owner, tail);
            }
            None => ask.push(*owner_lines),
        }
    }
    let Touched {
        mut stored,
        last_keys,
    } = if ask.is_empty() {
        Touched::default()
    } else {
        touched(tx, &statements.touched, table, &ask)?
    };
    let mut doomed = KeyColumns::default();
    let mut fresh = Vec::new();
    for owner_lines in owners {
        let owner = owner_lines[0].0;
        let remembered = known.remove(&owner);
        let appended = remembered.is_some();
        let stored = match remembered {
            Some(tail) => tail.into_iter().collect(),
            None => stored.remove(&owner).unwrap_or_default(),
        };
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
        let rebuilt = segment::rebuild(&segments, new_lines, table.seal)?;
        // Rebuilding only ever adds lines: as many as were stored means none was new.
        let count = |segments: &[Segment]| segments.iter().map(Segment::lines).sum::<usize>();
        if count(&rebuilt) == count(&segments) {
            continue;
        }
        for key in keys {
            doomed.push(owner, key);
        }
        // The rebuilt segments end the owner's when the batch only appended, or when none
        // stored lies beyond them.
        if let Some(last) = rebuilt.last()
            && (appended || last.last_key() >= last_keys.get(&owner).copied())
        {
            statements.tails.remember(owner, last);
        }
        fresh.extend(rebuilt.into_iter().map(|segment| (owner, segment)));
    }
    if !doomed.owner.is_empty() {
        tx.execute(&statements.delete, &doomed.params())
            .map_err(map_err)?;
    }
    write(tx, table, &fresh)?;
    Ok(kept)
}

/// Keys as the column arrays that `unnest` takes.
#[derive(Default)]
struct KeyColumns {
    owner: Vec<i32>,
    time: Vec<i64>,
    block: Vec<i64>,
    seq: Vec<i64>,
    idx: Vec<i64>,
}

impl KeyColumns {
    fn push(&mut self, owner: i32, (time, block, seq, idx): LineKey) {
        self.owner.push(owner);
        self.time.push(time);
        self.block.push(block);
        self.seq.push(seq);
        self.idx.push(idx);
    }

    /// The five arrays, as the first five parameters of a statement.
    fn params(&self) -> [&(dyn ToSql + Sync); 5] {
        [&self.owner, &self.time, &self.block, &self.seq, &self.idx]
    }
}

/// What the touched query read.
#[derive(Default)]
struct Touched {
    /// The stored segments to rewrite, by owner, each owner's in key order.
    stored: HashMap<i32, Vec<Stored>>,
    /// The key of each owner's last stored segment (owners without one are absent).
    last_keys: HashMap<i32, LineKey>,
}

/// The stored segments to rewrite, their indexes checked, and the owners' last keys.
fn touched(
    tx: &mut Transaction<'_>,
    statement: &Statement,
    table: &Table,
    owners: &[&[(i32, Line<'_>)]],
) -> Result<Touched, Error> {
    let mut first = KeyColumns::default();
    let mut high = Vec::with_capacity(owners.len());
    for lines in owners {
        let (owner, line) = lines[0];
        first.push(owner, line.key);
        high.push(lines[lines.len() - 1].1.key.0);
    }
    let small_tail = size_prefix(table.small_tail);
    let [owner, time, block, seq, idx] = first.params();
    let rows = tx
        .query(
            statement,
            &[owner, time, block, seq, idx, &high, &small_tail],
        )
        .map_err(map_err)?;
    let mut read = Touched::default();
    for row in rows {
        let owner: i32 = row.get(0);
        let key: LineKey = (row.get(1), row.get(2), row.get(3), row.get(4));
        let last = read.last_keys.entry(owner).or_insert(key);
        *last = (*last).max(key);
        // The owner's last segment comes without its blobs unless it is the tail to grow.
        let (Some(csv), Some(keys)) = (row.get::<_, Option<&[u8]>>(5), row.get(6)) else {
            continue;
        };
        let segment = unpack(csv, table.lines)
            .and_then(|csv| Segment::from_stored(csv, unpack(keys, "keys")?))
            .map_err(|err| {
                let name = table.name;
                err.at(name, || segment::describe(table.owner, owner.into(), key))
            })?;
        read.stored.entry(owner).or_default().push((key, segment));
    }
    for segments in read.stored.values_mut() {
        segments.sort_unstable_by_key(|(key, _)| *key);
    }
    Ok(read)
}

/// The columns of a table of segments, as `COPY` writes them: owner, last key, first vega
/// time, lines, the lines and their index; then, in a table with [`Table::first_keys`], the
/// rest of the first key.
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
    Type::INT8,
    Type::INT8,
    Type::INT8,
];

/// How many of [`COLUMNS`] a table without first keys has.
const BASE_COLUMNS: usize = 9;

/// Copies new segments in, each keyed by its last line, its blobs compressed, with binary
/// `COPY`: each segment is compressed as the copy reaches it, while the server takes the
/// previous ones.
fn write(tx: &mut Transaction<'_>, table: &Table, fresh: &[(i32, Segment)]) -> Result<(), Error> {
    if fresh.is_empty() {
        return Ok(());
    }
    let sink = tx
        .copy_in(&format!("COPY {} FROM STDIN (FORMAT binary)", table.name))
        .map_err(map_err)?;
    let columns = if table.first_keys {
        COLUMNS
    } else {
        &COLUMNS[..BASE_COLUMNS]
    };
    let mut writer = BinaryCopyInWriter::new(sink, columns);
    for (owner, segment) in fresh {
        let (Some(first), Some((time, block, seq, idx))) =
            (segment.first_key(), segment.last_key())
        else {
            return Err(Bug::EmptySegment.into());
        };
        let lines = i32::try_from(segment.lines()).map_err(|_| Bug::TooManyLines)?;
        let (csv, keys) = (pack(&segment.csv)?, pack(&segment.keys)?);
        let row: [&(dyn ToSql + Sync); 12] = [
            owner, &time, &block, &seq, &idx, &first.0, &lines, &csv, &keys, &first.1, &first.2,
            &first.3,
        ];
        writer.write(&row[..columns.len()]).map_err(map_err)?;
    }
    writer.finish().map_err(map_err)?;
    Ok(())
}
