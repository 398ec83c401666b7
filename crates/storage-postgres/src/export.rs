//! The ledger export: the party's segments in key order, read in chunks, each chunk one
//! statement in a snapshot of its own, all bounded by one cut taken when the export starts.
//!
//! Why chunks: a snapshot held for a whole export holds back vacuum on the primary for as long
//! as the slowest client takes, and on a hot standby it is cancelled once WAL replay has waited
//! `max_standby_streaming_delay` (30 s by default) for it ("terminating connection due to
//! conflict with recovery"): a 20 MB export read at 256 KiB/s was cut 31 s in. So each chunk of
//! at most `PgConfig::export_chunk_bytes` of stored segments (compressed, 2 MiB by default,
//! give or take a segment) is read whole into memory, its statement ended, before any of it
//! goes to the client: a snapshot lives for as long as the database takes to send one chunk,
//! whatever the client's speed.
//!
//! Why bytes, not segments: a chunk costs a round trip and a statement. A party ingested from a
//! live stream, a few blocks a commit, has its lines in segments just past the small tail
//! (32 KiB), six times as many as bulk-loaded, and its export took 1.71× as long with chunks of
//! 32 segments (docs/PERFORMANCE.md, "Reads timed on a settled database"). The chunk's query
//! keeps the segments whose stored bytes before them are under the chunk's budget, read from
//! the values' TOAST pointers without fetching them.
//!
//! Why the answer is still one snapshot's: stored lines never change (a segment may be
//! rewritten, never a line), so the export is the party's lines up to its last line when the
//! cut was taken (`Cut::end`, [`CUT_SQL`], which also answers that statement's snapshot). Each
//! chunk, the first included, starts after the last key already sent, and compares its own
//! snapshot with the cut's (`pg_current_snapshot()`, in its query): when they are the same,
//! nothing was committed in between and its segments go out as stored; when not, every segment
//! comes with its index and is cut line by line to the keys after the last sent and up to
//! `Cut::end`, so lines committed since (appended after the party's last line, as a stream's
//! next blocks are) stay out and rewritten segments are not sent twice.
//!
//! A segment wholly inside the time window, with no asset asked for and nothing committed since
//! the cut, goes to the sink as it is stored, in one call, without its index; only the segments
//! at the window's edges, and every segment of a one-asset export, come with their index and
//! are cut line by line (`SegmentRef::emit`).
//!
//! A chunk is one execution of a statement prepared once per connection and partition
//! ([`chunk_sql`]), in autocommit: one round trip, no statement to plan (it runs its generic
//! plan, as every reader's statement does), no transaction to open and close. Each segment
//! arrives in binary as it is stored, compressed (`packed.rs`), to be decompressed into buffers
//! that the export reuses for every segment. It reads the party's partition by name, found with
//! the cut (see `oracle::partition` for why). So an export of a few segments is two round trips.
//! The first chunk is small (an eighth of the configured bytes), so that the first byte leaves
//! early; each next one is twice as large, up to the configured bytes. The chunks after the first
//! are read on a thread of the export's own, one ahead of the one being sent, so that the
//! database produces while the client reads, as a single streamed query would.

use std::ops::ControlFlow;
use std::sync::mpsc;

use ledger_core::ExportFilter;
use postgres::GenericClient;
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::ToSql;

use super::packed::{self, unpack_into};
use super::{PgConn, PgStore, Statements, map_err};
use storage::backend::inclusive_bounds;
use storage::segment::{self, KeyRange, LineKey, SMALL_TAIL_BYTES, SegmentRef};
use storage::{Damage, Error, ExportSink, ExportSummary, LedgerStore};

/// Where an export starts, in one statement and its snapshot, for the party's hex (`$1`) and
/// the asset's (`$2`, null for all): the party's dictionary id, the asset's (null when it is
/// unknown or none is asked for), the key of the party's last stored line (the end of the
/// export's cut; null when it has none), the partition that holds its segments, which the
/// chunks read by name, and the statement's snapshot.
pub(crate) const CUT_SQL: &str = "SELECT p.id, (SELECT a.id FROM assets a WHERE a.hex = $2), \
     s.last_time, s.last_block, s.last_seq, s.last_idx, s.tableoid::regclass::text, \
     pg_current_snapshot()::text \
     FROM parties p LEFT JOIN LATERAL (SELECT tableoid, last_time, last_block, last_seq, last_idx \
     FROM ledger_segments WHERE party = p.id \
     ORDER BY last_time DESC, last_block DESC, last_seq DESC, last_idx DESC LIMIT 1) s ON true \
     WHERE p.hex = $1";

/// The share of [`PgConfig::export_chunk_bytes`](super::PgConfig::export_chunk_bytes) an
/// export's first chunk reads (four sealed segments' worth by default): a small one, so that the
/// first byte leaves early.
const FIRST_CHUNK_SHARE: usize = 8;

/// The stored bytes of a segment just past the small tail, about: its lines compress about four
/// times. A chunk reads at most its bytes' worth of such segments.
const SMALL_PACKED_BYTES: usize = SMALL_TAIL_BYTES / 4;

/// What an export reads: a party's lines within the vega-time window `[low, high]` (bounds
/// inclusive, see `inclusive_bounds`), of one asset or of all, as dictionary ids.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scan {
    pub party: i32,
    pub asset: Option<i32>,
    pub low: i64,
    pub high: i64,
}

/// Which of the scan's segments one chunk reads.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Chunk {
    /// Only the segments ending after this key (the last one already read).
    pub after: Option<LineKey>,
    /// The segments read while the stored bytes before them are fewer than this (so the first
    /// always is), up to `limit` of them.
    pub bytes: usize,
    /// The most segments read. PostgreSQL reads this many of the party's rows (not their
    /// values) whatever the bytes keep, so it is sized to what the bytes are expected to keep:
    /// reading up to [`most_segments`] for every chunk of the bulk-loaded whale cost its export
    /// 3.5–5.6 % (docs/PERFORMANCE.md).
    pub limit: usize,
}

impl Chunk {
    /// The chunk of `bytes` after `after`, expecting segments of the
    /// size of those the chunk before read (`previous`: their stored bytes and their count),
    /// if any.
    pub(crate) fn sized(after: Option<LineKey>, bytes: usize, previous: (usize, usize)) -> Self {
        let limit = match previous.0 / previous.1.max(1) {
            0 => most_segments(bytes),
            // Twice the segments of that size the bytes hold, and one for the one they reach.
            average => most_segments(bytes).min(2 * bytes / average + 1),
        };
        Chunk {
            after,
            bytes,
            limit,
        }
    }

    /// Whether `fetched`, what it read, filled it: then the party may have segments after it.
    /// Read to the party's end, a chunk is filled only when its stored bytes happen to reach
    /// its own, and the next one reads nothing.
    fn filled(&self, fetched: &[Fetched]) -> bool {
        fetched.len() >= self.limit || stored(fetched) >= self.bytes
    }
}

/// The most segments a chunk of `bytes` reads: as many segments just past the small tail as fill
/// them, at least one.
fn most_segments(bytes: usize) -> usize {
    (bytes / SMALL_PACKED_BYTES).max(1)
}

/// The stored bytes of `fetched`'s segments' lines.
fn stored(fetched: &[Fetched]) -> usize {
    fetched.iter().map(|segment| segment.csv.len()).sum()
}

/// Where the export's answer ends: the cut, taken by [`CUT_SQL`] when the export starts.
struct Cut {
    /// The key of the party's last line then.
    end: LineKey,
    /// The statement of the export's chunks, on the party's partition ([`chunk_sql`]).
    sql: String,
    /// The snapshot of the cut's statement (`pg_current_snapshot()`), to tell whether a chunk
    /// sees the same data.
    snapshot: String,
}

/// One segment of a chunk, as stored (compressed): it outlives the chunk's snapshot.
#[derive(Default)]
struct Fetched {
    lines: i32,
    csv: Vec<u8>,
    /// Its index, when the segment must be cut line by line.
    keys: Option<Vec<u8>>,
    /// Its last line's key.
    last: LineKey,
}

/// The statement of a chunk on `partition`, the party's partition of `ledger_segments`: the
/// party's segments after a key holding a line within the window, in the total order, while the
/// stored bytes of those before are under the chunk's, as (line count, lines, index, last key).
/// The index comes only with a segment to cut: one reaching out of the window, any when only one
/// asset's lines are wanted, every one when the statement's snapshot is not the cut's (`$11`):
/// something was committed since. `octet_length` of a stored value reads its TOAST pointer, not
/// the value, which only the segments kept fetch. Its parameters are [`Scan::params`].
pub(crate) fn chunk_sql(partition: &str) -> String {
    const ORDER: &str = "ORDER BY last_time, last_block, last_seq, last_idx";
    format!(
        "SELECT lines, csv, keys, last_time, last_block, last_seq, last_idx FROM \
         (SELECT lines, csv, CASE WHEN $8 OR first_time < $2 OR last_time > $3 \
         OR pg_current_snapshot()::text <> $11 THEN keys END AS keys, \
         last_time, last_block, last_seq, last_idx, octet_length(csv) AS stored, \
         sum(octet_length(csv)) OVER ({ORDER}) AS upto \
         FROM {partition} \
         WHERE party = $1 AND last_time >= $2 AND first_time <= $3 \
         AND (last_time, last_block, last_seq, last_idx) > ($4, $5, $6, $7) \
         {ORDER} LIMIT $9) chunk \
         WHERE upto - stored < $10 {ORDER}"
    )
}

/// The values of [`chunk_sql`]'s parameters for one chunk of a scan.
pub(crate) struct ChunkParams<'c> {
    party: i32,
    low: i64,
    high: i64,
    after: LineKey,
    one_asset: bool,
    limit: i64,
    bytes: i64,
    snapshot: &'c str,
}

impl ChunkParams<'_> {
    /// As the statement takes them, `$1` to `$11`.
    pub(crate) fn values(&self) -> [&(dyn ToSql + Sync); 11] {
        let (time, block, seq, idx) = &self.after;
        [
            &self.party,
            &self.low,
            &self.high,
            time,
            block,
            seq,
            idx,
            &self.one_asset,
            &self.limit,
            &self.bytes,
            &self.snapshot,
        ]
    }
}

impl Scan {
    /// The parameters of `chunk` of this scan, whose cut was taken in `snapshot`. A first chunk
    /// reads after the least key, which no stored line has (its block height would be
    /// negative).
    pub(crate) fn params<'c>(&self, chunk: &Chunk, snapshot: &'c str) -> ChunkParams<'c> {
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        ChunkParams {
            party: self.party,
            low: self.low,
            high: self.high,
            after: chunk
                .after
                .unwrap_or((i64::MIN, i64::MIN, i64::MIN, i64::MIN)),
            one_asset: self.asset.is_some(),
            limit: count(chunk.limit),
            bytes: count(chunk.bytes),
            snapshot,
        }
    }

    /// Hands the lines of one segment within `range` to the sink: all of them in one call when
    /// the segment came without its index (then it lies wholly within), else those the index
    /// picks. Damage found names the segment.
    fn send(
        &self,
        segment: &Fetched,
        range: KeyRange,
        buffers: &mut Buffers,
        sink: &mut dyn ExportSink,
        summary: &mut ExportSummary,
    ) -> Result<ControlFlow<()>, Error> {
        self.send_verified(segment, range, buffers, sink, summary)
            .map_err(|err| self.at(segment, err))
    }

    /// Names `segment` in the damage `err` found in it.
    fn at(&self, segment: &Fetched, err: Error) -> Error {
        err.at("ledger_segments", || {
            segment::describe("party", self.party.into(), segment.last)
        })
    }

    /// Checks the checksums of a segment's blobs without decoding them; damage names the
    /// segment.
    fn check(&self, segment: &Fetched) -> Result<(), Error> {
        packed::check(&segment.csv, "csv")
            .and_then(|()| {
                segment
                    .keys
                    .as_deref()
                    .map_or(Ok(()), |keys| packed::check(keys, "keys"))
            })
            .map_err(|err| self.at(segment, err))
    }

    /// [`Scan::send`], each blob's checksum verified as it is unpacked.
    fn send_verified(
        &self,
        segment: &Fetched,
        range: KeyRange,
        buffers: &mut Buffers,
        sink: &mut dyn ExportSink,
        summary: &mut ExportSummary,
    ) -> Result<ControlFlow<()>, Error> {
        unpack_into(&segment.csv, "csv", &mut buffers.csv)?;
        if let Some(keys) = &segment.keys {
            unpack_into(keys, "keys", &mut buffers.keys)?;
            let view = SegmentRef::new(&buffers.csv, &buffers.keys)?;
            let asset = self.asset.map(i64::from);
            return Ok(view.emit(range, asset, sink, summary));
        }
        let lines = u64::try_from(segment.lines)
            .map_err(|_| Damage::Value(format!("ledger segment of {} lines", segment.lines)))?;
        summary.rows += lines;
        let flow = sink.rows(&buffers.csv, lines);
        summary.stopped = flow.is_break();
        Ok(flow)
    }
}

/// An export's decompressed segment, its lines and its index: allocated once per export and
/// reused for every segment.
#[derive(Default)]
struct Buffers {
    csv: Vec<u8>,
    keys: Vec<u8>,
}

impl LedgerStore for PgStore {
    fn export_ledger(
        &self,
        filter: &ExportFilter,
        sink: &mut dyn ExportSink,
    ) -> Result<ExportSummary, Error> {
        let most = self.export_chunk_bytes.max(1);
        let opening = Chunk::sized(None, (most / FIRST_CHUNK_SHARE).max(1), (0, 0));
        // Nothing is sent while a chunk is read, so each one may be tried again on a fresh
        // connection.
        let first = self.read(|conn| first_chunk(conn, filter, &opening), || true)?;
        // The first chunk's blobs checked before the answer starts: damage there (all of an
        // export of a few segments) is an error the server can still answer with a status.
        if let Some((scan, _, fetched)) = &first {
            for segment in fetched {
                scan.check(segment)?;
            }
        }
        let mut summary = ExportSummary::default();
        if sink.started().is_break() {
            summary.stopped = true;
            return Ok(summary);
        }
        let Some((scan, cut, fetched)) = first else {
            return Ok(summary);
        };
        let Some(range) = KeyRange::window(scan.low, scan.high).up_to(cut.end) else {
            return Ok(summary);
        };
        let export = Export {
            store: self,
            scan,
            cut,
            most,
        };
        // The next chunks are read on a thread of their own while this one sends, so that the
        // database produces while the client reads, as one streamed query would; one chunk
        // waits in the channel, one is being read.
        std::thread::scope(|scope| {
            let (chunks, next) = mpsc::sync_channel(1);
            let (recycle, spares) = mpsc::channel();
            std::thread::Builder::new()
                .name("pg-export-chunks".to_owned())
                .spawn_scoped(scope, || {
                    export.read_ahead(&opening, &fetched, chunks, spares)
                })
                .map_err(|err| Error::Internal(Box::new(err)))?;
            // Returning drops the receiver: a reader waiting to hand over a chunk stops, and
            // the scope waits for it.
            let chunks = Chunks { next, recycle };
            export
                .send_all(&fetched, range, chunks, sink, &mut summary)
                .map(|()| summary)
        })
    }
}

/// The sending side's ends of the channels to the chunk reader.
struct Chunks {
    /// The chunks read ahead, in order.
    next: mpsc::Receiver<Result<Vec<Fetched>, Error>>,
    /// Chunks sent, handed back for their buffers to be filled again.
    recycle: mpsc::Sender<Vec<Fetched>>,
}

/// An export under way, after its first chunk.
struct Export<'s> {
    store: &'s PgStore,
    scan: Scan,
    cut: Cut,
    /// The most stored bytes a chunk reads, give or take a segment.
    most: usize,
}

impl Export<'_> {
    /// Reads the chunks after `first` (what `opening` read) into `chunks`, each twice as large
    /// as the one before up to the most, until one is not filled, one ends past the cut, a
    /// read fails (sent on), or the sender stops listening. Each is read into
    /// the buffers of a chunk already sent, from `spares`, when one has come back: the export
    /// then holds the same three chunks' worth of buffers from start to end, and the
    /// allocator, which keeps freed memory a while before it returns it, sees no churn (a
    /// slow reader's export held 30 MiB more than its data with a chunk allocated afresh each
    /// time, docs/PERFORMANCE.md).
    fn read_ahead(
        &self,
        opening: &Chunk,
        first: &[Fetched],
        chunks: mpsc::SyncSender<Result<Vec<Fetched>, Error>>,
        spares: mpsc::Receiver<Vec<Fetched>>,
    ) {
        let mut after = match first.last() {
            Some(last) if opening.filled(first) => last.last,
            _ => return,
        };
        let mut bytes = opening.bytes;
        let mut previous = (stored(first), first.len());
        while after < self.cut.end {
            bytes = (bytes * 2).min(self.most);
            let chunk = Chunk::sized(Some(after), bytes, previous);
            let mut spare = spares.try_recv().unwrap_or_default();
            let fetched = self.store.read(
                |conn| next_chunk(conn, &self.scan, &self.cut, chunk, &mut spare),
                || true,
            );
            let next = match &fetched {
                Ok(fetched) if chunk.filled(fetched) => {
                    previous = (stored(fetched), fetched.len());
                    fetched.last().map(|last| last.last)
                }
                _ => None,
            };
            if chunks.send(fetched).is_err() {
                return;
            }
            match next {
                Some(last) => after = last,
                None => return,
            }
        }
    }

    /// Sends the first chunk's segments, then those of every chunk read ahead, each cut to
    /// `range` as it narrows past the segments already sent.
    fn send_all(
        &self,
        first: &[Fetched],
        mut range: KeyRange,
        chunks: Chunks,
        sink: &mut dyn ExportSink,
        summary: &mut ExportSummary,
    ) -> Result<(), Error> {
        let mut buffers = Buffers::default();
        let mut send = |fetched: &[Fetched]| -> Result<ControlFlow<()>, Error> {
            for segment in fetched {
                if self
                    .scan
                    .send(segment, range, &mut buffers, sink, summary)?
                    .is_break()
                {
                    return Ok(ControlFlow::Break(()));
                }
                match range.after(segment.last) {
                    Some(rest) => range = rest,
                    None => return Ok(ControlFlow::Break(())),
                }
            }
            Ok(ControlFlow::Continue(()))
        };
        if send(first)?.is_break() {
            return Ok(());
        }
        // Ends when the reader does: after the last chunk, or when it failed.
        for fetched in chunks.next {
            let fetched = fetched?;
            if send(&fetched)?.is_break() {
                return Ok(());
            }
            // The reader may have ended: the buffers are then simply dropped.
            let _ = chunks.recycle.send(fetched);
        }
        Ok(())
    }
}

/// The export's first chunk, and the scan and the cut it bounds the others by; `None` when the
/// party, the asset or the window holds nothing. Two round trips: the cut ([`CUT_SQL`]), then
/// the chunk, each a statement in a snapshot of its own, as every later chunk is.
fn first_chunk(
    conn: &mut PgConn,
    filter: &ExportFilter,
    chunk: &Chunk,
) -> Result<Option<(Scan, Cut, Vec<Fetched>)>, Error> {
    let Some((low, high)) = inclusive_bounds(&filter.range) else {
        return Ok(None);
    };
    let (client, mut statements) = conn.autocommit();
    let statement = statements.get(client, CUT_SQL)?;
    let party = &filter.party.as_bytes()[..];
    let asset = filter.asset.as_ref().map(|asset| &asset.as_bytes()[..]);
    let Some(row) = client
        .query_opt(&statement, &[&party, &asset])
        .map_err(map_err)?
    else {
        return Ok(None);
    };
    let asset_id: Option<i32> = row.get(1);
    // An unknown asset, or a party without lines.
    let (Some(time), true) = (
        row.get::<_, Option<i64>>(2),
        asset.is_some() == asset_id.is_some(),
    ) else {
        return Ok(None);
    };
    let scan = Scan {
        party: row.get(0),
        asset: asset_id,
        low,
        // No line of the cut is later.
        high: high.min(time),
    };
    if scan.low > scan.high {
        return Ok(None);
    }
    let cut = Cut {
        end: (time, row.get(3), row.get(4), row.get(5)),
        sql: chunk_sql(row.get(6)),
        snapshot: row.get(7),
    };
    let fetched = fetch(client, &mut statements, &scan, &cut, chunk, &mut Vec::new())?;
    Ok(Some((scan, cut, fetched)))
}

/// A later chunk, read into the buffers of `spare` where it has some.
fn next_chunk(
    conn: &mut PgConn,
    scan: &Scan,
    cut: &Cut,
    chunk: Chunk,
    spare: &mut Vec<Fetched>,
) -> Result<Vec<Fetched>, Error> {
    let (client, mut statements) = conn.autocommit();
    fetch(client, &mut statements, scan, cut, &chunk, spare)
}

/// Reads one chunk's segments whole, one statement ([`Cut::sql`]) in a snapshot of its own,
/// into buffers taken from `spare` while it has some (a chunk already sent; a read tried again
/// finds what the failed one left).
fn fetch(
    client: &mut impl GenericClient,
    statements: &mut Statements<'_>,
    scan: &Scan,
    cut: &Cut,
    chunk: &Chunk,
    spare: &mut Vec<Fetched>,
) -> Result<Vec<Fetched>, Error> {
    let statement = statements.get(client, &cut.sql)?;
    let params = scan.params(chunk, &cut.snapshot);
    let mut rows = client
        .query_raw(&statement, params.values())
        .map_err(map_err)?;
    let mut fetched = Vec::new();
    while let Some(row) = rows.next().map_err(map_err)? {
        let key = |i| row.try_get::<_, i64>(i).map_err(map_err);
        let Fetched { mut csv, keys, .. } = spare.pop().unwrap_or_default();
        refill(&mut csv, row.try_get::<_, &[u8]>(1).map_err(map_err)?);
        let keys = match row.try_get::<_, Option<&[u8]>>(2).map_err(map_err)? {
            Some(bytes) => {
                let mut buffer = keys.unwrap_or_default();
                refill(&mut buffer, bytes);
                Some(buffer)
            }
            None => None,
        };
        fetched.push(Fetched {
            lines: row.try_get(0).map_err(map_err)?,
            csv,
            keys,
            last: (key(3)?, key(4)?, key(5)?, key(6)?),
        });
    }
    Ok(fetched)
}

/// `buffer` made a copy of `bytes`, its allocation reused.
fn refill(buffer: &mut Vec<u8>, bytes: &[u8]) {
    buffer.clear();
    buffer.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use testdb::TestDatabase;

    /// Ten segments of party 7 of 20,000 stored bytes each, and ten of party 8 of 1,000, each
    /// party's at keys (n, n, 0, 0) for n from 1 to 10 (the query never unpacks them).
    fn segments(test: &str) -> Option<TestDatabase> {
        let db = TestDatabase::create(test)?;
        PgStore::writer(db.url()).unwrap();
        db.client()
            .batch_execute(
                "INSERT INTO ledger_segments \
                 (party, last_time, last_block, last_seq, last_idx, first_time, lines, csv, keys) \
                 SELECT p, n, n, 0, 0, n, 1, decode(repeat('00', size), 'hex'), '' \
                 FROM (VALUES (7, 20000), (8, 1000)) parties (p, size), generate_series(1, 10) n",
            )
            .unwrap();
        Some(db)
    }

    /// What `chunk` reads of the segments of `party`, all time, with a cut taken in the snapshot
    /// of the transaction that reads it when `same`, in another one otherwise.
    fn fetched(db: &TestDatabase, party: i32, chunk: &Chunk, same: bool) -> Vec<Fetched> {
        let mut client = db.client();
        let mut tx = client
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::RepeatableRead)
            .start()
            .unwrap();
        let snapshot: String = tx
            .query_one("SELECT pg_current_snapshot()::text", &[])
            .unwrap()
            .get(0);
        let scan = Scan {
            party,
            asset: None,
            low: 0,
            high: i64::MAX,
        };
        let cut = Cut {
            end: (i64::MAX, 0, 0, 0),
            sql: chunk_sql("ledger_segments"),
            snapshot: if same { snapshot } else { "1:1:".to_owned() },
        };
        let mut statements = HashMap::new();
        let mut statements = Statements(&mut statements);
        fetch(
            &mut tx,
            &mut statements,
            &scan,
            &cut,
            chunk,
            &mut Vec::new(),
        )
        .unwrap()
    }

    /// The last keys' times of the segments of `party` that `chunk` reads, and whether it was
    /// filled.
    fn read(db: &TestDatabase, party: i32, chunk: &Chunk) -> (Vec<i64>, bool) {
        let fetched = fetched(db, party, chunk, true);
        let times = fetched.iter().map(|segment| segment.last.0).collect();
        (times, chunk.filled(&fetched))
    }

    #[test]
    fn a_chunk_reads_every_index_when_its_snapshot_is_not_the_cuts() {
        let Some(db) = segments("a_chunk_reads_every_index_when_its_snapshot_is_not_the_cuts")
        else {
            return;
        };
        let chunk = Chunk::sized(None, 200_000, (0, 0));
        let keys = |same| {
            let fetched = fetched(&db, 7, &chunk, same);
            assert_eq!(fetched.len(), 10);
            fetched
                .iter()
                .filter(|segment| segment.keys.is_some())
                .count()
        };
        // Nothing committed since the cut: segments wholly within the window come whole.
        assert_eq!(keys(true), 0);
        // Something was: every segment comes with its index, to be cut to the cut's keys.
        assert_eq!(keys(false), 10);
    }

    #[test]
    fn a_chunk_reads_segments_while_the_stored_bytes_before_them_are_under_its_own() {
        let Some(db) = segments("a_chunk_reads_by_stored_bytes") else {
            return;
        };
        let first = |bytes| Chunk::sized(None, bytes, (0, 0));
        let after = |bytes| Chunk::sized(Some((5, 5, 0, 0)), bytes, (0, 0));
        // Before the fourth: 60,000 bytes, not under 60,000; under 60,001.
        assert_eq!(read(&db, 7, &first(60_000)), (vec![1, 2, 3], true));
        assert_eq!(read(&db, 7, &first(60_001)), (vec![1, 2, 3, 4], true));
        // The first always, however small the chunk.
        assert_eq!(read(&db, 7, &first(1)), (vec![1], true));
        // After a key, from the next segment on.
        assert_eq!(read(&db, 7, &after(60_000)), (vec![6, 7, 8], true));
        // To the party's end, short of both bounds: not filled, the export ends there.
        let rest = (vec![6, 7, 8, 9, 10], false);
        assert_eq!(read(&db, 7, &after(200_000)), rest);
        // Small segments: at most as many as fill the chunk at a small one's stored size.
        let bytes = 2 * SMALL_PACKED_BYTES;
        assert_eq!(read(&db, 8, &first(bytes)), (vec![1, 2], true));
        assert_eq!(
            read(&db, 8, &first(20 * bytes)),
            ((1..=10).collect(), false)
        );
        // After a chunk of 20,000-byte segments, twice those the bytes hold and one: 7, not the
        // 14 that segments just past the small tail would fill.
        let sized = Chunk::sized(None, 60_000, (40_000, 2));
        assert_eq!(sized.limit, 7);
        assert_eq!(read(&db, 8, &sized), ((1..=7).collect(), true));
    }
}
