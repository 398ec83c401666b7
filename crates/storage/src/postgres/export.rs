//! The ledger export: one ordered index range scan per asset, merged by PostgreSQL (a `Merge
//! Append`, no sort) and streamed with `COPY (SELECT …) TO STDOUT` inside one read-only snapshot.
//!
//! `COPY` rather than fetches from a portal: the server sends rows as fast as the client takes
//! them, with no round trip per batch and the database producing while the client writes, and
//! memory stays bounded by the socket buffers (the connection reads no further ahead than the
//! export takes). The rows come in binary `COPY` form, so each CSV line arrives as it is
//! stored.

use std::cell::Cell;
use std::ops::ControlFlow;

use ledger_core::ExportFilter;
use postgres::Transaction;
use postgres::binary_copy::BinaryCopyOutIter;
use postgres::fallible_iterator::FallibleIterator;
use postgres::types::Type;

use super::{PgConn, PgStore, Statements, map_err};
use crate::model::inclusive_bounds;
use crate::{Error, ExportSink, ExportSummary, LedgerStore};

/// The next asset of a party after a given one: one index seek per asset, not a pass over the
/// party's rows (PostgreSQL has no skip scan of its own).
pub(crate) const NEXT_ASSET_SQL: &str =
    "SELECT asset FROM ledger_rows WHERE party = $1 AND asset > $2 ORDER BY asset LIMIT 1";

const PARTY_SQL: &str = "SELECT id FROM parties WHERE hex = $1";
const ASSET_SQL: &str = "SELECT id FROM assets WHERE hex = $1";

/// The order of the export, which every scan's index yields.
const ORDER: &str = "vega_time, block, seq, idx";

/// Planner settings for the export's transaction. `COPY` takes no parameters, so the planner
/// sees the values and, misjudging a large party as a small one, may pick a bitmap scan and
/// sort its result: every row read before the first is sent, and the sort spills to disk. Off,
/// each scan is the ordered primary key range scan and the merge a `Merge Append`
/// (`query_plans.rs` pins it). `SET LOCAL` ends with the transaction.
pub(crate) const EXPORT_PLANNER: &str = "SET LOCAL enable_sort = off; \
     SET LOCAL enable_bitmapscan = off; SET LOCAL enable_seqscan = off";

/// The query an export copies out: a party's rows of each of `assets` within a vega-time
/// window (bounds inclusive, see `inclusive_bounds`), merged into the total order. The values
/// are integers written into the text, since `COPY` takes no parameters.
pub(crate) fn export_sql(party: i32, assets: &[i32], low: i64, high: i64) -> String {
    let scan = |columns: &str, asset: i32| {
        format!(
            "SELECT {columns} FROM ledger_rows WHERE party = {party} AND asset = {asset} \
             AND vega_time BETWEEN {low} AND {high} ORDER BY {ORDER}"
        )
    };
    match assets {
        [asset] => scan("csv", *asset),
        _ => {
            let scans: Vec<String> = assets
                .iter()
                .map(|asset| format!("({})", scan(&format!("{ORDER}, csv"), *asset)))
                .collect();
            format!(
                "SELECT csv FROM ({}) scans ORDER BY {ORDER}",
                scans.join(" UNION ALL ")
            )
        }
    }
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
    let mut query = None;
    if let Some((low, high)) = inclusive_bounds(&filter.range)
        && let Some((party, assets)) = plan(&mut tx, &mut statements, filter)?
        && !assets.is_empty()
    {
        tx.batch_execute(EXPORT_PLANNER).map_err(map_err)?;
        query = Some(export_sql(party, &assets, low, high));
    }
    started.set(true);
    let mut summary = ExportSummary::default();
    if sink.started().is_break() {
        summary.stopped = true;
        return Ok(summary);
    }
    if let Some(query) = query {
        let cancel = tx.cancel_token();
        let reader = tx
            .copy_out(&format!("COPY ({query}) TO STDOUT (FORMAT binary)"))
            .map_err(map_err)?;
        let mut rows = BinaryCopyOutIter::new(reader, &[Type::BYTEA]);
        while let Some(row) = rows.next().map_err(map_err)? {
            summary.rows += 1;
            if let ControlFlow::Break(()) = sink.rows(row.try_get::<&[u8]>(0).map_err(map_err)?, 1)
            {
                summary.stopped = true;
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

/// The party's key and the keys of the assets to scan; `None` when the party or the asset is
/// unknown.
fn plan(
    tx: &mut Transaction<'_>,
    statements: &mut Statements<'_>,
    filter: &ExportFilter,
) -> Result<Option<(i32, Vec<i32>)>, Error> {
    let mut lookup = |sql: &'static str, hex: &[u8; 32]| -> Result<Option<i32>, Error> {
        let statement = statements.get(tx, sql)?;
        let row = tx.query_opt(&statement, &[&&hex[..]]).map_err(map_err)?;
        Ok(row.map(|row| row.get(0)))
    };
    let Some(party) = lookup(PARTY_SQL, filter.party.as_bytes())? else {
        return Ok(None);
    };
    let assets = match &filter.asset {
        Some(asset) => lookup(ASSET_SQL, asset.as_bytes())?.into_iter().collect(),
        None => {
            let next = statements.get(tx, NEXT_ASSET_SQL)?;
            let mut assets = Vec::new();
            let mut after = i32::MIN;
            while let Some(row) = tx.query_opt(&next, &[&party, &after]).map_err(map_err)? {
                after = row.get(0);
                assets.push(after);
            }
            assets
        }
    };
    Ok(Some((party, assets)))
}
