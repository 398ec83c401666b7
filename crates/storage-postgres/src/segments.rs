//! Segments in PostgreSQL: a batch's lines laid into their owners' segments (`segment.rs`).
//! Two tables hold segments ([`Table`]): the ledger's, one owner per party, and the oracle
//! data's, whose owner is a spec (or 0 for all data, matched or not), each line a datum's JSON.
//!
//! The engine (`storage::segment::Engine`) decides which segments a batch touches, what the
//! writer remembers and where segments are cut; this module is its [`SegmentTable`] in SQL: one
//! query reads, for all the owners of a batch at once, the segments their lines touch (a lateral
//! range scan of the primary key per owner); the segments read are deleted by key, and the new
//! ones compressed (`packed.rs`) and copied in with binary `COPY`.

use std::collections::HashMap;
use std::ops::Deref;

use postgres::binary_copy::BinaryCopyInWriter;
use postgres::types::{ToSql, Type};
use postgres::{GenericClient, Statement};

use super::map_err;
use super::packed::{pack, size_prefix, unpack};
use storage::Bug;
use storage::backend::Then;
use storage::segment::{
    self, Ask, Engine, Kept, Line, LineKey, Packing, Segment, SegmentTable, Touched, trailing_run,
};
use storage::{Error, WriterOptions};

/// A table of segments (`segment::Table`) as PostgreSQL lays it out.
#[derive(Debug)]
pub(super) struct Table {
    /// Its name and columns, and how its segments are cut.
    pub columns: segment::Table,
    /// Whether the table also holds its segments' first keys whole (`first_block`, `first_seq`,
    /// `first_idx` after `keys`), for a scan in descending order to start at the segment that
    /// holds its anchor.
    pub first_keys: bool,
}

impl Deref for Table {
    type Target = segment::Table;

    fn deref(&self) -> &segment::Table {
        &self.columns
    }
}

/// The ledger: a party's CSV lines across all its assets (`segment.rs`).
pub(super) const LEDGER: Table = Table {
    columns: segment::LEDGER,
    first_keys: false,
};

/// Oracle data: per spec the data that matched it, and under owner [`ALL_DATA`] every datum.
pub(super) const ORACLE: Table = Table {
    columns: segment::ORACLE,
    first_keys: true,
};

/// The owner of every datum's line in [`ORACLE`]; specs' dictionary ids start at 1.
pub(super) const ALL_DATA: i32 = 0;

impl Table {
    /// The stored segments each owner's lines fall among (the first column false), and its
    /// last segments (true), up to the run's length, with their blobs when they are small and
    /// end before its first line (see the module docs and `SegmentTable::touched`): the
    /// engine's run is the last of them while they have blobs, when none is among the lines;
    /// the last one's key tells whether the lines come after every stored one. A segment may
    /// come twice. Parameters: per owner its id, its first line's key (four columns) and its
    /// last line's vega time, as arrays; then the size prefix of the small tail, and the run's
    /// length. The rows come in no order.
    ///
    /// A lateral subquery per owner: a parameterised range scan of the primary key each, in
    /// the owner's partition alone, never a join that could hash the whole table
    /// (`query_plans.rs` pins it, under [`WRITER_PLANNER`]). `first_time + 0` only filters:
    /// as an index condition on `oracle_segments_first` it would read every segment of the
    /// owner from its first, where the primary key reads from the batch's first line on. The tail's size is
    /// the prefix of its compressed lines (`packed.rs`), big-endian so that it compares as
    /// bytes with the bound's prefix; `substring` of a value stored out of line and
    /// uncompressed fetches only the chunk that holds those bytes.
    pub(super) fn touched_sql(&self) -> String {
        let segment::Table {
            name, owner, lines, ..
        } = &self.columns;
        format!(
            "
    SELECT s.last, s.{owner}, s.last_time, s.last_block, s.last_seq, s.last_idx, s.{lines},
           s.keys
    FROM unnest($1::integer[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[],
                $6::bigint[]) AS b (owner, time, block, seq, idx, high)
    CROSS JOIN LATERAL (
        SELECT false AS last, s.{owner}, s.last_time, s.last_block, s.last_seq, s.last_idx,
               s.{lines}, s.keys
        FROM {name} s
        WHERE s.{owner} = b.owner
          AND (s.last_time, s.last_block, s.last_seq, s.last_idx)
              >= (b.time, b.block, b.seq, b.idx)
          AND s.first_time + 0 <= b.high
        UNION ALL
        SELECT true, tail.{owner}, tail.last_time, tail.last_block, tail.last_seq, tail.last_idx,
               CASE WHEN tail.grow THEN tail.{lines} END, CASE WHEN tail.grow THEN tail.keys END
        FROM (
            SELECT s.*, (s.last_time, s.last_block, s.last_seq, s.last_idx)
                        < (b.time, b.block, b.seq, b.idx)
                    AND substring(s.{lines} FOR 4) < $7 AS grow
            FROM {name} s WHERE s.{owner} = b.owner
            ORDER BY s.last_time DESC, s.last_block DESC, s.last_seq DESC, s.last_idx DESC
            LIMIT $8
        ) tail
    ) s"
        )
    }

    /// Deletes segments by key, given as arrays of owner, vega time, block, sequence and index.
    pub(super) fn delete_sql(&self) -> String {
        let segment::Table { name, owner, .. } = &self.columns;
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

/// Planner settings of the writer's session, made before its statements are prepared: the
/// statements take arrays, whose lengths a generic plan cannot know, and over partitions the
/// planner then costs a hash join of every partition (the delete) or a bitmap scan (the touched
/// query) below a probe of each owner's partition. Off, each owner is a nested loop's seek
/// or range scan in its own partition, pruned at run time (`query_plans.rs` pins both). The
/// writer's other statements are seeks by key, which these settings leave as they are.
pub(super) const WRITER_PLANNER: &str = "SET enable_hashjoin = off; \
     SET enable_mergejoin = off; SET enable_bitmapscan = off";

/// The writer's statements for one table, prepared once for its session (a batch then costs
/// no parse round trips), and its segment engine.
pub(super) struct Statements {
    table: &'static Table,
    touched: Statement,
    delete: Statement,
    /// What the writer remembers of each owner's last segment: filled from what this writer
    /// committed (its lock keeps others out) and emptied when a transaction fails
    /// ([`Statements::forget`]).
    engine: Engine<i32>,
}

impl Statements {
    /// Prepares them on `client`'s session, setting its [`WRITER_PLANNER`] first; the engine
    /// remembers as `options` says.
    pub(super) fn prepare(
        client: &mut impl GenericClient,
        table: &'static Table,
        options: &WriterOptions,
    ) -> Result<Self, Error> {
        client.batch_execute(WRITER_PLANNER).map_err(map_err)?;
        Ok(Self {
            table,
            touched: client.prepare(&table.touched_sql()).map_err(map_err)?,
            delete: client.prepare(&table.delete_sql()).map_err(map_err)?,
            engine: Engine::new(table.packing).remembering(options.remembered_bytes),
        })
    }

    /// Forgets the owners' last segments: a transaction that wrote them failed.
    pub(super) fn forget(&mut self) {
        self.engine.forget();
    }
}

/// Lays the batch's lines, each with its owner's dictionary id, into the owners' segments,
/// inside the batch's transaction (see `Engine::lay`): returns the lines whose keys were
/// stored already with other bytes.
pub(super) fn store(
    tx: &mut impl GenericClient,
    statements: &mut Statements,
    lines: Vec<(i32, Line<'_>)>,
    then: Then,
) -> Result<Kept<i32>, Error> {
    let (engine, mut table) = statements.table(tx);
    engine.lay(&mut table, lines, then)
}

/// Writes the segments the engine holds (see `Engine::write_held`): before a commit.
pub(super) fn write_held(
    tx: &mut impl GenericClient,
    statements: &mut Statements,
) -> Result<(), Error> {
    let (engine, mut table) = statements.table(tx);
    engine.write_held(&mut table)
}

impl Statements {
    /// The engine, and the table as it sees it through `tx`.
    fn table<'a, C: GenericClient>(
        &'a mut self,
        tx: &'a mut C,
    ) -> (&'a mut Engine<i32>, PgTable<'a, C>) {
        let Statements {
            table,
            touched,
            delete,
            engine,
        } = self;
        (
            engine,
            PgTable {
                tx,
                table,
                touched,
                delete,
            },
        )
    }
}

/// A table of segments inside a batch's transaction, as the engine sees it.
struct PgTable<'a, C> {
    tx: &'a mut C,
    table: &'static Table,
    touched: &'a Statement,
    delete: &'a Statement,
}

impl<C: GenericClient> SegmentTable for PgTable<'_, C> {
    type Owner = i32;

    fn touched(&mut self, asks: &[Ask<i32>], packing: Packing) -> Result<Touched<i32>, Error> {
        let mut first = KeyColumns::default();
        let mut high = Vec::with_capacity(asks.len());
        for ask in asks {
            first.push(ask.owner, ask.first);
            high.push(ask.last_time);
        }
        let small_tail = size_prefix(packing.small_tail);
        let run = i64::try_from(packing.run).unwrap_or(i64::MAX);
        let [owner, time, block, seq, idx] = first.params();
        let rows = self
            .tx
            .query(
                self.touched,
                &[owner, time, block, seq, idx, &high, &small_tail, &run],
            )
            .map_err(map_err)?;
        let mut read = Touched::default();
        let mut among: HashMap<i32, Vec<(LineKey, Blobs<'_>)>> = HashMap::new();
        let mut lasts: HashMap<i32, Vec<(LineKey, Option<Blobs<'_>>)>> = HashMap::new();
        for row in &rows {
            let owner: i32 = row.get(1);
            let key: LineKey = (row.get(2), row.get(3), row.get(4), row.get(5));
            let blobs = row.get::<_, Option<&[u8]>>(6).zip(row.get(7));
            if row.get(0) {
                let last = read.last_keys.entry(owner).or_insert(key);
                *last = (*last).max(key);
                lasts.entry(owner).or_default().push((key, blobs));
            } else if let Some(blobs) = blobs {
                among.entry(owner).or_default().push((key, blobs));
            }
        }
        // An owner's run only when none of its segments is among its lines.
        for (owner, last) in lasts {
            among.entry(owner).or_insert_with(|| trailing_run(last));
        }
        for (owner, segments) in among {
            let stored = segments
                .into_iter()
                .map(|(key, blobs)| Ok((key, self.unpack(owner, key, blobs)?)))
                .collect::<Result<Vec<_>, Error>>()?;
            if !stored.is_empty() {
                read.stored.insert(owner, stored);
            }
        }
        Ok(read)
    }

    fn delete(&mut self, keys: &[(i32, LineKey)]) -> Result<(), Error> {
        let mut doomed = KeyColumns::default();
        for (owner, key) in keys {
            doomed.push(*owner, *key);
        }
        self.tx
            .execute(self.delete, &doomed.params())
            .map_err(map_err)
            .map(drop)
    }

    fn insert(&mut self, fresh: &[(i32, Segment)]) -> Result<(), Error> {
        write(self.tx, self.table, fresh)
    }
}

/// A stored segment's compressed lines and index, as a row holds them.
type Blobs<'r> = (&'r [u8], &'r [u8]);

impl<C: GenericClient> PgTable<'_, C> {
    /// The segment of `owner` at `key` from its stored blobs, checked.
    fn unpack(&self, owner: i32, key: LineKey, (lines, keys): Blobs<'_>) -> Result<Segment, Error> {
        let table = self.table;
        unpack(lines, table.lines)
            .and_then(|csv| Segment::from_stored(csv, unpack(keys, "keys")?))
            .map_err(|err| {
                err.at(table.name, || {
                    segment::describe(table.owner, owner.into(), key)
                })
            })
    }
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
fn write(
    tx: &mut impl GenericClient,
    table: &Table,
    fresh: &[(i32, Segment)],
) -> Result<(), Error> {
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
