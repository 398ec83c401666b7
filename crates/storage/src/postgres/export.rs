//! The ledger export: one ordered index range scan per asset, streamed from server-side portals
//! in bounded batches inside one read-only snapshot.

use std::collections::VecDeque;
use std::ops::ControlFlow;

use ledger_core::ExportFilter;
use postgres::{Portal, Row, Transaction};

use super::{PgStore, Statements, map_err};
use crate::model::inclusive_bounds;
use crate::{Error, ExportSink, ExportSummary, LedgerStore};

/// One ordered range scan: a party's rows of one asset within a vega-time window, its bounds
/// inclusive (see `inclusive_bounds`).
pub(crate) const SCAN_SQL: &str = "SELECT vega_time, block, seq, idx, csv FROM ledger_rows \
     WHERE party = $1 AND asset = $2 AND vega_time BETWEEN $3 AND $4 \
     ORDER BY vega_time, block, seq, idx";

/// The next asset of a party after a given one: one index seek per asset, not a pass over the
/// party's rows (PostgreSQL has no skip scan of its own).
pub(crate) const NEXT_ASSET_SQL: &str =
    "SELECT asset FROM ledger_rows WHERE party = $1 AND asset > $2 ORDER BY asset LIMIT 1";

const PARTY_SQL: &str = "SELECT id FROM parties WHERE hex = $1";
const ASSET_SQL: &str = "SELECT id FROM assets WHERE hex = $1";

/// Rows fetched from a portal at once, at most: memory stays bounded (a few hundred KiB per
/// asset).
const BATCH_ROWS: i32 = 2048;

/// Rows of a portal's first fetch: small, so that the first bytes go out (and an export whose
/// client left stops) after little work; each later fetch doubles, up to [`BATCH_ROWS`].
const FIRST_BATCH_ROWS: i32 = 64;

type SortKey = (i64, i64, i64, i64);

impl LedgerStore for PgStore {
    fn export_ledger(
        &self,
        filter: &ExportFilter,
        sink: &mut dyn ExportSink,
    ) -> Result<ExportSummary, Error> {
        let mut conn = self.get()?;
        let (mut tx, mut statements) = conn.snapshot()?;
        let mut portals = Vec::new();
        if let Some((low, high)) = inclusive_bounds(&filter.range) {
            for (party, asset) in plan(&mut tx, &mut statements, filter)? {
                let scan = statements.get(&mut tx, SCAN_SQL)?;
                portals.push(
                    tx.bind(&scan, &[&party, &asset, &low, &high])
                        .map_err(map_err)?,
                );
            }
        }
        if sink.started().is_break() {
            return Ok(ExportSummary {
                rows: 0,
                stopped: true,
            });
        }
        let mut heads = Vec::with_capacity(portals.len());
        for portal in portals {
            let mut head = Head {
                portal,
                batch: VecDeque::new(),
                next_fetch: FIRST_BATCH_ROWS,
                done: false,
            };
            head.fill(&mut tx)?;
            heads.push(head);
        }
        let summary = merge(&mut tx, &mut heads, sink)?;
        drop(heads);
        // Read-only: ending it either way releases the snapshot; commit is the cheap one.
        tx.commit().map_err(map_err)?;
        Ok(summary)
    }
}

/// The (party, asset) keys to scan; none when the party or the asset is unknown.
fn plan(
    tx: &mut Transaction<'_>,
    statements: &mut Statements<'_>,
    filter: &ExportFilter,
) -> Result<Vec<(i32, i32)>, Error> {
    let mut lookup = |sql: &'static str, hex: &[u8; 32]| -> Result<Option<i32>, Error> {
        let statement = statements.get(tx, sql)?;
        let row = tx.query_opt(&statement, &[&&hex[..]]).map_err(map_err)?;
        Ok(row.map(|row| row.get(0)))
    };
    let Some(party) = lookup(PARTY_SQL, filter.party.as_bytes())? else {
        return Ok(Vec::new());
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
    Ok(assets.into_iter().map(|asset| (party, asset)).collect())
}

/// One portal and the rows of its current batch.
struct Head {
    portal: Portal,
    batch: VecDeque<Row>,
    /// Rows to ask for in the next fetch.
    next_fetch: i32,
    done: bool,
}

impl Head {
    /// Fetches the next batch when the current one is used up.
    fn fill(&mut self, tx: &mut Transaction<'_>) -> Result<(), Error> {
        if self.batch.is_empty() && !self.done {
            let rows = tx
                .query_portal(&self.portal, self.next_fetch)
                .map_err(map_err)?;
            self.done = rows.len() < self.next_fetch as usize;
            self.next_fetch = (self.next_fetch * 2).min(BATCH_ROWS);
            self.batch = rows.into();
        }
        Ok(())
    }

    fn key(&self) -> Option<SortKey> {
        let row = self.batch.front()?;
        Some((row.get(0), row.get(1), row.get(2), row.get(3)))
    }
}

/// Streams the scans, merged into the total order, into the sink. Parties hold few assets, so a
/// linear pick of the smallest head beats a heap; one asset is the same loop with one head.
fn merge(
    tx: &mut Transaction<'_>,
    heads: &mut [Head],
    sink: &mut dyn ExportSink,
) -> Result<ExportSummary, Error> {
    let mut summary = ExportSummary::default();
    loop {
        let next = if heads.len() == 1 {
            heads.first_mut().filter(|head| !head.batch.is_empty())
        } else {
            heads
                .iter_mut()
                .filter_map(|head| head.key().map(|key| (key, head)))
                .min_by_key(|(key, _)| *key)
                .map(|(_, head)| head)
        };
        let Some(head) = next else { break };
        let row = head.batch.pop_front().expect("a head with a key has a row");
        summary.rows += 1;
        if let ControlFlow::Break(()) = sink.row(row.get::<_, &[u8]>(4)) {
            summary.stopped = true;
            break;
        }
        head.fill(tx)?;
    }
    Ok(summary)
}
