//! The ledger export: ordered range scans over one party's rows.

use std::ops::ControlFlow;

use ledger_core::ExportFilter;
use rusqlite::{Connection, OptionalExtension, Row, Rows, Statement, params};

use super::{SqliteStore, map_err};
use crate::model::inclusive_bounds;
use crate::{Error, ExportSink, ExportSummary, LedgerStore};

/// One ordered range scan: a party's rows of one asset within a vega-time window.
///
/// The `BETWEEN` bounds are inclusive, so the half-open range's end is passed as `end - 1`.
/// See `docs/ARCHITECTURE.md` for its query plan.
pub(crate) const SCAN_SQL: &str = "SELECT vega_time, block, seq, idx, csv FROM ledger_rows \
     WHERE party = ?1 AND asset = ?2 AND vega_time BETWEEN ?3 AND ?4 \
     ORDER BY vega_time, block, seq, idx";

/// The next asset of a party after a given one: a skip scan over the clustered key, so listing a
/// party's assets costs one seek per asset instead of a pass over its rows.
pub(crate) const NEXT_ASSET_SQL: &str =
    "SELECT asset FROM ledger_rows WHERE party = ?1 AND asset > ?2 ORDER BY asset LIMIT 1";

type SortKey = (i64, i64, i64, i64);

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
        let scans = plan(&tx, filter)?;
        let mut statements = Vec::with_capacity(scans.len());
        for _ in &scans {
            statements.push(tx.prepare(SCAN_SQL).map_err(map_err)?);
        }
        if sink.started().is_break() {
            return Ok(ExportSummary {
                rows: 0,
                stopped: true,
            });
        }
        let summary = stream(&mut statements, &scans, sink)?;
        drop(statements);
        tx.commit()?;
        Ok(summary)
    }
}

/// Runs the scans and streams their rows, merged into the total order, into the sink.
fn stream(
    statements: &mut [Statement<'_>],
    scans: &[Scan],
    sink: &mut dyn ExportSink,
) -> Result<ExportSummary, Error> {
    let mut streams = Vec::with_capacity(scans.len());
    for (statement, scan) in statements.iter_mut().zip(scans) {
        let rows = statement
            .query(params![scan.party, scan.asset, scan.low, scan.high])
            .map_err(map_err)?;
        streams.push(rows);
    }
    match streams.len() {
        0 => Ok(ExportSummary::default()),
        1 => copy(streams.pop().expect("one stream"), sink),
        _ => merge(streams, sink),
    }
}

/// The bounds of one scan.
struct Scan {
    party: i64,
    asset: i64,
    low: i64,
    high: i64,
}

/// Resolves the filter into scans; none when the party, the asset or the window is empty.
fn plan(conn: &Connection, filter: &ExportFilter) -> Result<Vec<Scan>, Error> {
    let Some((low, high)) = inclusive_bounds(&filter.range) else {
        return Ok(Vec::new());
    };
    let lookup = |table: &str, hex: &[u8; 32]| -> Result<Option<i64>, Error> {
        conn.prepare_cached(&format!("SELECT id FROM {table} WHERE hex = ?1"))
            .and_then(|mut stmt| stmt.query_row([&hex[..]], |row| row.get(0)).optional())
            .map_err(map_err)
    };
    let Some(party) = lookup("parties", filter.party.as_bytes())? else {
        return Ok(Vec::new());
    };
    let assets = match &filter.asset {
        Some(asset) => lookup("assets", asset.as_bytes())?.into_iter().collect(),
        None => party_assets(conn, party)?,
    };
    Ok(assets
        .into_iter()
        .map(|asset| Scan {
            party,
            asset,
            low,
            high,
        })
        .collect())
}

/// Every asset the party has rows in, by skip scan.
fn party_assets(conn: &Connection, party: i64) -> Result<Vec<i64>, Error> {
    let mut stmt = conn.prepare_cached(NEXT_ASSET_SQL).map_err(map_err)?;
    let mut assets = Vec::new();
    let mut after = i64::MIN;
    while let Some(asset) = stmt
        .query_row(params![party, after], |row| row.get::<_, i64>(0))
        .optional()
        .map_err(map_err)?
    {
        assets.push(asset);
        after = asset;
    }
    Ok(assets)
}

/// Streams a single scan straight from SQLite's buffers to the sink.
fn copy(mut rows: Rows<'_>, sink: &mut dyn ExportSink) -> Result<ExportSummary, Error> {
    let mut summary = ExportSummary::default();
    while let Some(row) = rows.next().map_err(map_err)? {
        let line = row
            .get_ref(4)
            .and_then(|v| Ok(v.as_blob()?))
            .map_err(map_err)?;
        summary.rows += 1;
        if sink.rows(line, 1).is_break() {
            summary.stopped = true;
            break;
        }
    }
    Ok(summary)
}

/// One scan's current row, copied out because SQLite reuses its buffer on the next step.
struct Head<'stmt> {
    rows: Rows<'stmt>,
    key: SortKey,
    line: Vec<u8>,
    live: bool,
}

impl Head<'_> {
    fn advance(&mut self) -> Result<(), Error> {
        match self.rows.next().map_err(map_err)? {
            Some(row) => {
                self.key = sort_key(row).map_err(map_err)?;
                self.line.clear();
                self.line.extend_from_slice(
                    row.get_ref(4)
                        .and_then(|v| Ok(v.as_blob()?))
                        .map_err(map_err)?,
                );
            }
            None => self.live = false,
        }
        Ok(())
    }
}

/// Merges the per-asset scans of a party into the total order. Parties hold few assets, so a
/// linear pick of the smallest head beats a heap.
fn merge(streams: Vec<Rows<'_>>, sink: &mut dyn ExportSink) -> Result<ExportSummary, Error> {
    let mut heads = Vec::with_capacity(streams.len());
    for rows in streams {
        let mut head = Head {
            rows,
            key: (0, 0, 0, 0),
            line: Vec::new(),
            live: true,
        };
        head.advance()?;
        heads.push(head);
    }
    let mut summary = ExportSummary::default();
    while let Some(next) = heads
        .iter_mut()
        .filter(|head| head.live)
        .min_by_key(|head| head.key)
    {
        summary.rows += 1;
        if let ControlFlow::Break(()) = sink.rows(&next.line, 1) {
            summary.stopped = true;
            break;
        }
        next.advance()?;
    }
    Ok(summary)
}

fn sort_key(row: &Row<'_>) -> rusqlite::Result<SortKey> {
    Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
}
