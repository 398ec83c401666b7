//! The ledger export: the party's segments in key order, read in chunks, each chunk in a short
//! read-only snapshot of its own, all bounded by one cut taken when the export starts.
//!
//! Why chunks: a snapshot held for a whole export holds back vacuum on the primary for as long
//! as the slowest client takes, and on a hot standby it is cancelled once WAL replay has waited
//! `max_standby_streaming_delay` (30 s by default) for it ("terminating connection due to
//! conflict with recovery"): a 20 MB export read at 256 KiB/s was cut 31 s in. So each chunk of
//! at most `PgConfig::export_chunk_segments` segments is read whole into memory (compressed, a
//! few MiB) and its snapshot ended before any of it goes to the client: a snapshot lives for
//! as long as the database takes to send one chunk, whatever the client's speed.
//!
//! Why the answer is still one snapshot's: stored lines never change (a segment may be
//! rewritten, never a line), so the export is the party's lines from the first chunk's snapshot
//! up to the party's last line then (`Cut::end`). Each later chunk starts after the last key
//! already sent, and compares its snapshot with the first one (`pg_current_snapshot()`): when
//! they are the same, nothing was committed in between and its segments go out as before;
//! when not, every segment comes with its index and is cut line by line to the keys after the
//! last sent and up to `Cut::end`, so lines committed since (appended after the party's last
//! line, as a stream's next blocks are) stay out and rewritten segments are not sent twice.
//!
//! A segment wholly inside the time window, with no asset asked for and nothing committed since
//! the first chunk, goes to the sink as it is stored, in one call, without its index; only the
//! segments at the window's edges, and every segment of a one-asset export, come with their
//! index and are cut line by line (`SegmentRef::emit`).
//!
//! A chunk is one `COPY (SELECT …) TO STDOUT (FORMAT binary)`: no round trip per segment, and
//! each segment arrives as it is stored, compressed (`packed.rs`), to be decompressed into
//! buffers that the export reuses for every segment. The first chunk is small, so that the
//! first byte leaves early; each next one is twice as large, up to the configured size. The
//! chunks after the first are read on a thread of the export's own, one ahead of the one being
//! sent, so that the database produces while the client reads, as a single streamed `COPY` did.

use std::ops::ControlFlow;
use std::sync::mpsc;

use ledger_core::ExportFilter;
use postgres::binary_copy::BinaryCopyOutIter;
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::Type;
use postgres::{SimpleQueryMessage, Transaction};

use super::packed::{self, unpack_into};
use super::{PgConn, PgStore, Statements, map_err};
use storage::backend::inclusive_bounds;
use storage::segment::{self, KeyRange, LineKey, SegmentRef};
use storage::{Damage, Error, ExportSink, ExportSummary, LedgerStore};

const PARTY_SQL: &str = "SELECT id FROM parties WHERE hex = $1";
const ASSET_SQL: &str = "SELECT id FROM assets WHERE hex = $1";

/// The key of the party's last stored line: the end of an export's cut.
const END_SQL: &str = "SELECT last_time, last_block, last_seq, last_idx FROM ledger_segments \
     WHERE party = $1 \
     ORDER BY last_time DESC, last_block DESC, last_seq DESC, last_idx DESC LIMIT 1";

/// Planner settings for the export's transaction. `COPY` takes no parameters, so the planner
/// sees the values and, misjudging a large party as a small one, may pick a bitmap scan and
/// sort its result: every segment read before the first is sent. Off, the scan is the ordered
/// primary key range scan (`query_plans.rs` pins it). `SET LOCAL` ends with the transaction.
pub(crate) const EXPORT_PLANNER: &str = "SET LOCAL enable_sort = off; \
     SET LOCAL enable_bitmapscan = off; SET LOCAL enable_seqscan = off";

/// Segments in an export's first chunk: a small one, so that the first byte leaves early.
const FIRST_CHUNK_SEGMENTS: usize = 4;

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
    /// Every segment with its index: something was committed since the cut was taken.
    pub all_keys: bool,
    /// At most this many segments.
    pub segments: usize,
}

/// Where the export's answer ends, taken in the first chunk's snapshot.
struct Cut {
    /// The key of the party's last line then.
    end: LineKey,
    /// That snapshot (`pg_current_snapshot()`), to tell whether a later chunk sees the same.
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

impl Scan {
    /// The query of one chunk: the party's segments after `chunk.after` holding a line within
    /// the window, in the total order, as (line count, lines, index, last key). The index
    /// comes only with a segment to cut: one reaching out of the window, any when only one
    /// asset's lines are wanted, every one when `chunk.all_keys`. The values are integers
    /// written into the text, since `COPY` takes no parameters.
    pub(crate) fn sql(&self, chunk: &Chunk) -> String {
        let Scan {
            party,
            asset,
            low,
            high,
        } = *self;
        let keys = match (asset, chunk.all_keys) {
            (Some(_), _) | (_, true) => "keys".to_owned(),
            (None, false) => {
                format!("CASE WHEN first_time < {low} OR last_time > {high} THEN keys END")
            }
        };
        let after = match chunk.after {
            Some((time, block, seq, idx)) => format!(
                " AND (last_time, last_block, last_seq, last_idx) > ({time}, {block}, {seq}, {idx})"
            ),
            None => String::new(),
        };
        format!(
            "SELECT lines, csv, {keys}, last_time, last_block, last_seq, last_idx \
             FROM ledger_segments \
             WHERE party = {party} AND last_time >= {low} AND first_time <= {high}{after} \
             ORDER BY last_time, last_block, last_seq, last_idx LIMIT {}",
            chunk.segments
        )
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
        let most = self.export_chunk_segments.max(1);
        let segments = FIRST_CHUNK_SEGMENTS.min(most);
        // Nothing is sent while a chunk is read, so each one may be tried again on a fresh
        // connection.
        let first = self.read(|conn| first_chunk(conn, filter, segments), || true)?;
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
        // database produces while the client reads, as one streamed `COPY` did; one chunk
        // waits in the channel, one is being read.
        std::thread::scope(|scope| {
            let (chunks, next) = mpsc::sync_channel(1);
            let (recycle, spares) = mpsc::channel();
            std::thread::Builder::new()
                .name("pg-export-chunks".to_owned())
                .spawn_scoped(scope, || {
                    export.read_ahead(&fetched, segments, chunks, spares)
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
    /// The most segments a chunk reads.
    most: usize,
}

impl Export<'_> {
    /// Reads the chunks after `first` (of `segments` segments asked for) into `chunks`, each
    /// twice as large as the one before up to the most, until one comes back short, one ends
    /// past the cut, a read fails (sent on), or the sender stops listening. Each is read into
    /// the buffers of a chunk already sent, from `spares`, when one has come back: the export
    /// then holds the same three chunks' worth of buffers from start to end, and the
    /// allocator, which keeps freed memory a while before it returns it, sees no churn (a
    /// slow reader's export held 30 MiB more than its data with a chunk allocated afresh each
    /// time, docs/PERFORMANCE.md).
    fn read_ahead(
        &self,
        first: &[Fetched],
        mut segments: usize,
        chunks: mpsc::SyncSender<Result<Vec<Fetched>, Error>>,
        spares: mpsc::Receiver<Vec<Fetched>>,
    ) {
        let mut after = match first.last() {
            Some(last) if first.len() == segments => last.last,
            _ => return,
        };
        while after < self.cut.end {
            segments = (segments * 2).min(self.most);
            let chunk = Chunk {
                after: Some(after),
                all_keys: false,
                segments,
            };
            let mut spare = spares.try_recv().unwrap_or_default();
            let fetched = self.store.read(
                |conn| next_chunk(conn, &self.scan, &self.cut, chunk, &mut spare),
                || true,
            );
            let next = match &fetched {
                Ok(fetched) if fetched.len() == segments => fetched.last().map(|last| last.last),
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
/// party, the asset or the window holds nothing.
fn first_chunk(
    conn: &mut PgConn,
    filter: &ExportFilter,
    segments: usize,
) -> Result<Option<(Scan, Cut, Vec<Fetched>)>, Error> {
    let (mut tx, mut statements) = conn.snapshot()?;
    let Some((low, high)) = inclusive_bounds(&filter.range) else {
        return Ok(None);
    };
    let Some((party, asset)) = ids(&mut tx, &mut statements, filter)? else {
        return Ok(None);
    };
    let statement = statements.get(&mut tx, END_SQL)?;
    let Some(end) = tx.query_opt(&statement, &[&party]).map_err(map_err)? else {
        return Ok(None);
    };
    let end: LineKey = (end.get(0), end.get(1), end.get(2), end.get(3));
    let scan = Scan {
        party,
        asset,
        low,
        // No line of the cut is later.
        high: high.min(end.0),
    };
    if scan.low > scan.high {
        return Ok(None);
    }
    let snapshot = planned_snapshot(&mut tx)?;
    let chunk = Chunk {
        after: None,
        all_keys: false,
        segments,
    };
    let fetched = fetch(&mut tx, &scan, &chunk, &mut Vec::new())?;
    // Read-only: ending it either way releases the snapshot; commit is the cheap one.
    tx.commit().map_err(map_err)?;
    Ok(Some((scan, Cut { end, snapshot }, fetched)))
}

/// A later chunk, in a snapshot of its own: every segment with its index when that snapshot is
/// not the first chunk's; read into the buffers of `spare` where it has some.
fn next_chunk(
    conn: &mut PgConn,
    scan: &Scan,
    cut: &Cut,
    mut chunk: Chunk,
    spare: &mut Vec<Fetched>,
) -> Result<Vec<Fetched>, Error> {
    let (mut tx, _) = conn.snapshot()?;
    chunk.all_keys = planned_snapshot(&mut tx)? != cut.snapshot;
    let fetched = fetch(&mut tx, scan, &chunk, spare)?;
    tx.commit().map_err(map_err)?;
    Ok(fetched)
}

/// Sets the export's planner settings and answers the transaction's snapshot, in one round
/// trip. Two snapshots that print alike see the same committed transactions, so the same data.
fn planned_snapshot(tx: &mut Transaction<'_>) -> Result<String, Error> {
    let messages = tx
        .simple_query(&format!(
            "{EXPORT_PLANNER}; SELECT pg_current_snapshot()::text"
        ))
        .map_err(map_err)?;
    messages
        .iter()
        .find_map(|message| match message {
            SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        })
        .ok_or_else(|| Error::Internal("pg_current_snapshot() answered no row".into()))
}

/// Reads one chunk's segments whole, into buffers taken from `spare` while it has some (a
/// chunk already sent; a read tried again finds what the failed one left).
fn fetch(
    tx: &mut Transaction<'_>,
    scan: &Scan,
    chunk: &Chunk,
    spare: &mut Vec<Fetched>,
) -> Result<Vec<Fetched>, Error> {
    let reader = tx
        .copy_out(&format!(
            "COPY ({}) TO STDOUT (FORMAT binary)",
            scan.sql(chunk)
        ))
        .map_err(map_err)?;
    let types = [
        Type::INT4,
        Type::BYTEA,
        Type::BYTEA,
        Type::INT8,
        Type::INT8,
        Type::INT8,
        Type::INT8,
    ];
    let mut rows = BinaryCopyOutIter::new(reader, &types);
    let mut fetched = Vec::with_capacity(chunk.segments);
    while let Some(row) = rows.next().map_err(map_err)? {
        let key = |i| row.try_get::<i64>(i).map_err(map_err);
        let Fetched { mut csv, keys, .. } = spare.pop().unwrap_or_default();
        refill(&mut csv, row.try_get::<&[u8]>(1).map_err(map_err)?);
        let keys = match row.try_get::<Option<&[u8]>>(2).map_err(map_err)? {
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

/// The party's dictionary id and the asset's, when one is asked for; `None` when either is
/// unknown, which is an empty export.
fn ids(
    tx: &mut Transaction<'_>,
    statements: &mut Statements<'_>,
    filter: &ExportFilter,
) -> Result<Option<(i32, Option<i32>)>, Error> {
    let mut lookup = |sql: &'static str, hex: &[u8; 32]| -> Result<Option<i32>, Error> {
        let statement = statements.get(tx, sql)?;
        let row = tx.query_opt(&statement, &[&&hex[..]]).map_err(map_err)?;
        Ok(row.map(|row| row.get(0)))
    };
    let Some(party) = lookup(PARTY_SQL, filter.party.as_bytes())? else {
        return Ok(None);
    };
    let asset = match &filter.asset {
        Some(asset) => match lookup(ASSET_SQL, asset.as_bytes())? {
            Some(id) => Some(id),
            None => return Ok(None),
        },
        None => None,
    };
    Ok(Some((party, asset)))
}
