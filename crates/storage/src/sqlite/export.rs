//! The ledger export: one ordered range search over a party's segments.
//!
//! It reads one snapshot for the whole export, unlike PostgreSQL's chunks (`postgres/export.rs`).
//! SQLite has no standby whose replay cancels a long reader; what a long reader costs it is the
//! WAL: no checkpoint copies frames committed after the reader's snapshot, nor starts the WAL
//! over, until the reader ends, so the WAL grows by whatever is committed meanwhile. On a live
//! chain that is kilobytes a second, and the writer's bound (`checkpoint.rs`) checkpoints
//! what it can; chunks would cost every export a transaction per chunk to save that.

use std::ops::ControlFlow;

use ledger_core::ExportFilter;
use rusqlite::{Connection, OptionalExtension, params};

use super::segments::LEDGER;
use super::{SqliteStore, map_err, verified};
use crate::backend::inclusive_bounds;
use crate::error::Damage;
use crate::segment::{KeyRange, SegmentRef};
use crate::{Error, ExportSink, ExportSummary, LedgerStore};

/// A party's segments that end at or after the window's start (`?2`), in order; the scan stops
/// at the first segment that starts after the window's end (`?3`), whose lines are not read.
/// The index (`keys`) is read only for a segment that must be cut: at the window's edges, or
/// every one when `?4` (an asset filter) is true. See `docs/FORMAT.md` for its plan.
/// Each blob comes with its checksum, and each segment with the rest of its key, to name it
/// when it is damaged.
pub(crate) const SCAN_SQL: &str = "SELECT first_time, lines, \
     CASE WHEN first_time <= ?3 THEN csv END, \
     CASE WHEN ?4 OR first_time < ?2 OR last_time > ?3 THEN keys END, \
     csv_sum, keys_sum, last_time, last_block, last_seq, last_idx \
     FROM ledger_segments WHERE party = ?1 AND last_time >= ?2 \
     ORDER BY last_time, last_block, last_seq, last_idx";

impl LedgerStore for SqliteStore {
    fn export_ledger(
        &self,
        filter: &ExportFilter,
        sink: &mut dyn ExportSink,
    ) -> Result<ExportSummary, Error> {
        let mut conn = self.readers.get()?;
        // A deferred transaction: the snapshot is taken by the first read below and every later
        // statement sees the same one, whatever an ingest commits meanwhile.
        let tx = conn.snapshot()?;
        let scan = plan(&tx, filter)?;
        let mut statement = tx.prepare_cached(SCAN_SQL).map_err(map_err)?;
        let mut start = Start::new(sink);
        let summary = match scan {
            Some(scan) => stream(&mut statement, &scan, &mut start)?,
            None => ExportSummary::default(),
        };
        // An export without a segment starts here; one that stopped at its start has no rows.
        let summary = match start.sink() {
            Some(_) => summary,
            None => ExportSummary {
                rows: 0,
                stopped: true,
            },
        };
        drop(statement);
        tx.commit()?;
        Ok(summary)
    }
}

/// The bounds of the scan.
struct Scan {
    party: i64,
    asset: Option<i64>,
    low: i64,
    high: i64,
}

/// Resolves the filter; `None` when the party, the asset or the window is empty.
fn plan(conn: &Connection, filter: &ExportFilter) -> Result<Option<Scan>, Error> {
    let Some((low, high)) = inclusive_bounds(&filter.range) else {
        return Ok(None);
    };
    let lookup = |table: &str, hex: &[u8; 32]| -> Result<Option<i64>, Error> {
        conn.prepare_cached(&format!("SELECT id FROM {table} WHERE hex = ?1"))
            .and_then(|mut stmt| stmt.query_row([&hex[..]], |row| row.get(0)).optional())
            .map_err(map_err)
    };
    let Some(party) = lookup("parties", filter.party.as_bytes())? else {
        return Ok(None);
    };
    let asset = match &filter.asset {
        Some(asset) => match lookup("assets", asset.as_bytes())? {
            Some(id) => Some(id),
            None => return Ok(None),
        },
        None => None,
    };
    Ok(Some(Scan {
        party,
        asset,
        low,
        high,
    }))
}

/// The sink, started when the first segment has been read and verified: damage in the first
/// segment (all of an export of one segment) is then an error the server can still answer with
/// a status, never a started answer cut short.
struct Start<'a> {
    sink: &'a mut dyn ExportSink,
    /// `None` before the start; then whether the sink asked to stop at it.
    stopped_at_start: Option<bool>,
}

impl<'a> Start<'a> {
    fn new(sink: &'a mut dyn ExportSink) -> Self {
        Self {
            sink,
            stopped_at_start: None,
        }
    }

    /// The started sink, starting it first if need be; `None` when it stopped at its start.
    fn sink(&mut self) -> Option<&mut dyn ExportSink> {
        let stopped = *self
            .stopped_at_start
            .get_or_insert_with(|| self.sink.started().is_break());
        (!stopped).then_some(&mut *self.sink)
    }
}

/// Streams the scan's segments: whole ones straight from SQLite's buffer in one call each, the
/// ones at the window's edges or under an asset filter line by line through their index.
fn stream(
    statement: &mut rusqlite::Statement<'_>,
    scan: &Scan,
    start: &mut Start<'_>,
) -> Result<ExportSummary, Error> {
    let mut summary = ExportSummary::default();
    let mut rows = statement
        .query(params![
            scan.party,
            scan.low,
            scan.high,
            scan.asset.is_some()
        ])
        .map_err(map_err)?;
    while let Some(row) = rows.next().map_err(map_err)? {
        let first: i64 = row.get(0).map_err(map_err)?;
        let last: i64 = row.get(6).map_err(map_err)?;
        if first > scan.high {
            break;
        }
        let segment = verify(row, scan, first, last)
            .map_err(|err| LEDGER.at_segment(err, scan.party, row, 6))?;
        let Some(sink) = start.sink() else {
            break;
        };
        if let ControlFlow::Break(()) = segment.send(scan, sink, &mut summary) {
            summary.stopped = true;
            break;
        }
    }
    Ok(summary)
}

/// One segment of the scan, its blobs verified against their checksums.
enum Verified<'r> {
    /// Wholly inside the window, no asset asked for: its lines go out as they are.
    Whole { csv: &'r [u8], lines: u64 },
    /// To cut line by line through its index, checked.
    Cut(SegmentRef<'r>),
}

/// Reads and verifies one segment of the scan.
fn verify<'r>(
    row: &'r rusqlite::Row<'_>,
    scan: &Scan,
    first: i64,
    last: i64,
) -> Result<Verified<'r>, Error> {
    let csv = verified(row, (2, "csv"), 4)?;
    if scan.asset.is_none() && first >= scan.low && last <= scan.high {
        let lines: i64 = row.get(1).map_err(map_err)?;
        // A count no writer stores is damage, not a number of rows to report.
        let lines = u64::try_from(lines)
            .map_err(|_| Damage::Value(format!("ledger segment of {lines} lines")))?;
        Ok(Verified::Whole { csv, lines })
    } else {
        let keys = verified(row, (3, "keys"), 5)?;
        Ok(Verified::Cut(SegmentRef::new(csv, keys)?))
    }
}

impl Verified<'_> {
    /// Hands the segment's lines within the scan to the sink.
    fn send(
        self,
        scan: &Scan,
        sink: &mut dyn ExportSink,
        summary: &mut ExportSummary,
    ) -> ControlFlow<()> {
        match self {
            Verified::Whole { csv, lines } => {
                summary.rows += lines;
                sink.rows(csv, lines)
            }
            Verified::Cut(segment) => segment.emit(
                KeyRange::window(scan.low, scan.high),
                scan.asset,
                sink,
                summary,
            ),
        }
    }
}
