//! The ledger export: one ordered range scan of the party's segments, streamed with `COPY
//! (SELECT …) TO STDOUT` inside one read-only snapshot.
//!
//! A segment wholly inside the time window, with no asset asked for, goes to the sink as it is
//! stored, in one call, without its index; only the segments at the window's edges, and every
//! segment of a one-asset export, come with their index and are cut line by line
//! (`SegmentRef::emit`).
//!
//! `COPY` rather than fetches from a portal: the server sends rows as fast as the client takes
//! them, with no round trip per batch and the database producing while the client writes, and
//! memory stays bounded by the socket buffers (the connection reads no further ahead than the
//! export takes). The rows come in binary `COPY` form, so each segment arrives as it is stored:
//! compressed (`packed.rs`), and decompressed here into buffers that the export reuses for every
//! segment.

use std::cell::Cell;
use std::ops::ControlFlow;

use ledger_core::ExportFilter;
use postgres::Transaction;
use postgres::binary_copy::{BinaryCopyOutIter, BinaryCopyOutRow};
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::Type;

use super::packed::unpack_into;
use super::{PgConn, PgStore, Statements, map_err};
use storage::backend::inclusive_bounds;
use storage::segment::{self, SegmentRef};
use storage::{Damage, Error, ExportSink, ExportSummary, LedgerStore};

const PARTY_SQL: &str = "SELECT id FROM parties WHERE hex = $1";
const ASSET_SQL: &str = "SELECT id FROM assets WHERE hex = $1";

/// Planner settings for the export's transaction. `COPY` takes no parameters, so the planner
/// sees the values and, misjudging a large party as a small one, may pick a bitmap scan and
/// sort its result: every segment read before the first is sent. Off, the scan is the ordered
/// primary key range scan (`query_plans.rs` pins it). `SET LOCAL` ends with the transaction.
pub(crate) const EXPORT_PLANNER: &str = "SET LOCAL enable_sort = off; \
     SET LOCAL enable_bitmapscan = off; SET LOCAL enable_seqscan = off";

/// What an export reads: a party's lines within the vega-time window `[low, high]` (bounds
/// inclusive, see `inclusive_bounds`), of one asset or of all, as dictionary ids.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scan {
    pub party: i32,
    pub asset: Option<i32>,
    pub low: i64,
    pub high: i64,
}

impl Scan {
    /// The query an export copies out: the party's segments holding a line within the window,
    /// in the total order, as (line count, lines, index). The index comes only with a segment
    /// to cut: one reaching out of the window, or any when only one asset's lines are wanted.
    /// The values are integers written into the text, since `COPY` takes no parameters.
    pub(crate) fn sql(&self) -> String {
        let Scan {
            party,
            asset,
            low,
            high,
        } = *self;
        let keys = match asset {
            Some(_) => "keys".to_owned(),
            None => format!("CASE WHEN first_time < {low} OR last_time > {high} THEN keys END"),
        };
        format!(
            "SELECT lines, csv, {keys}, last_time, last_block, last_seq, last_idx \
             FROM ledger_segments \
             WHERE party = {party} AND last_time >= {low} AND first_time <= {high} \
             ORDER BY last_time, last_block, last_seq, last_idx"
        )
    }

    /// Hands the lines of one segment that the export wants to the sink: all of them in one
    /// call when the segment came without its index, else those the index picks.
    fn send(
        &self,
        row: &BinaryCopyOutRow,
        buffers: &mut Buffers,
        sink: &mut dyn ExportSink,
        summary: &mut ExportSummary,
    ) -> Result<ControlFlow<()>, Error> {
        self.send_verified(row, buffers, sink, summary)
            .map_err(|err| {
                err.at("ledger_segments", || {
                    let last = (3..7).map(|column| row.try_get::<i64>(column));
                    match last.collect::<Result<Vec<_>, _>>().as_deref() {
                        Ok(&[time, block, seq, idx]) => {
                            segment::describe("party", self.party.into(), (time, block, seq, idx))
                        }
                        _ => format!("party {}", self.party),
                    }
                })
            })
    }

    /// [`Scan::send`], each blob's checksum verified as it is unpacked.
    fn send_verified(
        &self,
        row: &BinaryCopyOutRow,
        buffers: &mut Buffers,
        sink: &mut dyn ExportSink,
        summary: &mut ExportSummary,
    ) -> Result<ControlFlow<()>, Error> {
        unpack_into(row.try_get(1).map_err(map_err)?, "csv", &mut buffers.csv)?;
        if let Some(keys) = row.try_get::<Option<&[u8]>>(2).map_err(map_err)? {
            unpack_into(keys, "keys", &mut buffers.keys)?;
            let segment = SegmentRef::new(&buffers.csv, &buffers.keys)?;
            let asset = self.asset.map(i64::from);
            return Ok(segment.emit(self.low, self.high, asset, sink, summary));
        }
        let lines = row.try_get::<i32>(0).map_err(map_err)?;
        let lines = u64::try_from(lines)
            .map_err(|_| Damage::Value(format!("ledger segment of {lines} lines")))?;
        summary.rows += lines;
        let flow = sink.rows(&buffers.csv, lines);
        summary.stopped = flow.is_break();
        Ok(flow)
    }
}

/// An export's decompressed segment, its lines and its index: allocated once per export and
/// reused for every segment.
/// The types of [`Scan::sql`]'s columns: lines, csv, keys, the last key.
const COLUMNS: &[Type] = &[
    Type::INT4,
    Type::BYTEA,
    Type::BYTEA,
    Type::INT8,
    Type::INT8,
    Type::INT8,
    Type::INT8,
];

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
        // Tried again on a fresh connection only while nothing has been sent.
        let started = Cell::new(false);
        self.read(
            |conn| export(conn, filter, sink, &started),
            || !started.get(),
        )
    }
}

fn export(
    conn: &mut PgConn,
    filter: &ExportFilter,
    sink: &mut dyn ExportSink,
    started: &Cell<bool>,
) -> Result<ExportSummary, Error> {
    let tls = conn.tls.clone();
    let (mut tx, mut statements) = conn.snapshot()?;
    let mut scan = None;
    if let Some((low, high)) = inclusive_bounds(&filter.range)
        && let Some((party, asset)) = ids(&mut tx, &mut statements, filter)?
    {
        tx.batch_execute(EXPORT_PLANNER).map_err(map_err)?;
        scan = Some(Scan {
            party,
            asset,
            low,
            high,
        });
    }
    started.set(true);
    let mut summary = ExportSummary::default();
    if sink.started().is_break() {
        summary.stopped = true;
        return Ok(summary);
    }
    if let Some(scan) = scan {
        let cancel = tx.cancel_token();
        let reader = tx
            .copy_out(&format!("COPY ({}) TO STDOUT (FORMAT binary)", scan.sql()))
            .map_err(map_err)?;
        let mut rows = BinaryCopyOutIter::new(reader, COLUMNS);
        let mut buffers = Buffers::default();
        while let Some(row) = rows.next().map_err(map_err)? {
            if scan
                .send(&row, &mut buffers, sink, &mut summary)?
                .is_break()
            {
                break;
            }
        }
        if summary.stopped {
            // Ending the transaction would first read the rest of the copy: stop it instead.
            // Best effort: the copy then ends with an error, which the rollback reads past.
            let _ = cancel.cancel_query(tls);
            drop(rows);
            drop(tx);
            // A cancel that arrived late would hit the connection's next query: drop it.
            conn.broken = true;
            return Ok(summary);
        }
    }
    // Read-only: ending it either way releases the snapshot; commit is the cheap one.
    tx.commit().map_err(map_err)?;
    Ok(summary)
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
