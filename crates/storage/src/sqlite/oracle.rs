//! Oracle data pages: keyset range scans on the position, overall or per spec.

use std::ops::Range;

use ledger_core::OracleSpecId;
use oracle_core::{PageRequest, Position, Scan};
use rusqlite::{Connection, OptionalExtension, ToSql};

use super::{SqliteStore, map_err, verified};
use crate::backend::push_node;
use crate::{Error, OraclePage, OracleStore};

impl OracleStore for SqliteStore {
    fn oracle_page(
        &self,
        spec: Option<&OracleSpecId>,
        request: &PageRequest,
    ) -> Result<OraclePage, Error> {
        let mut conn = self.readers.get()?;
        // Both scans read one snapshot, so the page flags agree with the page.
        let tx = conn.snapshot()?;
        let filter = match spec {
            None => SpecFilter::All,
            Some(spec) => match spec_key(&tx, spec)? {
                Some(key) => SpecFilter::Spec(key),
                // A spec that never matched anything has an empty listing.
                None => return Ok(OraclePage::assemble(request, Vec::new(), false)),
            },
        };
        let mut nodes = Vec::new();
        let rows = scan(&tx, filter, &request.main_scan(), &mut nodes)?;
        let positions: Vec<Position> = rows.iter().map(|(position, _)| *position).collect();
        let boundary_exists = match request.boundary_scan(&positions) {
            Some(boundary) => !scan(&tx, filter, &boundary, &mut nodes)?.is_empty(),
            None => false,
        };
        tx.commit()?;
        Ok(OraclePage {
            page: request.assemble(rows, boundary_exists),
            nodes,
        })
    }

    /// `PRAGMA data_version` on a connection kept for it: a few microseconds, never waiting for
    /// the writer (see `version.rs`).
    fn data_version(&self) -> Result<Option<u64>, Error> {
        self.version.current()
    }
}

#[derive(Clone, Copy)]
enum SpecFilter {
    All,
    Spec(i64),
}

fn spec_key(conn: &Connection, spec: &OracleSpecId) -> Result<Option<i64>, Error> {
    conn.prepare_cached("SELECT id FROM oracle_specs WHERE hex = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([&spec.as_bytes()[..]], |row| row.get(0))
                .optional()
        })
        .map_err(map_err)
}

/// How a scan is bounded by its start position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bound {
    /// From the first row in scan direction.
    None,
    /// Rows strictly beyond the position.
    Exclusive,
    /// The position's row too.
    Inclusive,
}

impl Bound {
    fn of(scan: &Scan) -> Bound {
        match (scan.after, scan.inclusive) {
            (None, _) => Bound::None,
            (Some(_), false) => Bound::Exclusive,
            (Some(_), true) => Bound::Inclusive,
        }
    }
}

/// The SQL of one scan. Every variant is a range scan on a clustered key in key order, so
/// SQLite reads exactly the rows it returns (plus one look-ahead) and sorts nothing.
pub(crate) fn scan_sql(spec: bool, descending: bool, bound: Bound) -> String {
    let (cmp, dir) = match (descending, bound) {
        (true, Bound::Inclusive) => ("<=", "DESC"),
        (true, _) => ("<", "DESC"),
        (false, Bound::Inclusive) => (">=", "ASC"),
        (false, _) => (">", "ASC"),
    };
    let (from, table) = if spec {
        // CROSS JOIN pins the spec index as the outer loop; each datum is then one seek.
        (
            "oracle_spec_data s CROSS JOIN oracle_data d \
             ON d.vega_time = s.vega_time AND d.block = s.block AND d.seq = s.seq",
            "s",
        )
    } else {
        ("oracle_data d", "d")
    };
    let mut conditions = Vec::new();
    if spec {
        conditions.push("s.spec = :spec".to_owned());
    }
    if bound != Bound::None {
        conditions.push(format!(
            "({table}.vega_time, {table}.block, {table}.seq) {cmp} (:time, :block, :seq)"
        ));
    }
    let filter = if conditions.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conditions.join(" AND "))
    };
    format!(
        "SELECT d.vega_time, d.block, d.seq, d.json, d.sum FROM {from} {filter} \
         ORDER BY {table}.vega_time {dir}, {table}.block {dir}, {table}.seq {dir} LIMIT :limit"
    )
}

/// Runs one scan, appending each row's JSON to `nodes` straight from SQLite's row buffer once
/// its checksum matched.
fn scan(
    conn: &Connection,
    filter: SpecFilter,
    scan: &Scan,
    nodes: &mut Vec<u8>,
) -> Result<Vec<(Position, Range<usize>)>, Error> {
    let spec = match filter {
        SpecFilter::All => None,
        SpecFilter::Spec(key) => Some(key),
    };
    let sql = scan_sql(spec.is_some(), scan.descending, Bound::of(scan));
    let mut stmt = conn.prepare_cached(&sql).map_err(map_err)?;
    let limit = i64::try_from(scan.limit).unwrap_or(i64::MAX);
    // Stored heights and sequences fit in i64 (ingest checks); a larger one from a cursor sorts
    // after all of them, and saturating keeps that true.
    let saturate = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let anchor = scan
        .after
        .map(|p| (p.vega_time, saturate(p.block), saturate(p.seq)));
    let mut named: Vec<(&str, &dyn ToSql)> = vec![(":limit", &limit)];
    if let Some(spec) = &spec {
        named.push((":spec", spec));
    }
    if let Some((time, block, seq)) = &anchor {
        named.extend([
            (":time", time as &dyn ToSql),
            (":block", block),
            (":seq", seq),
        ]);
    }
    let mut rows = stmt.query(named.as_slice()).map_err(map_err)?;
    let mut out = Vec::with_capacity(scan.limit.min(1024));
    while let Some(row) = rows.next().map_err(map_err)? {
        let position = Position {
            vega_time: row.get(0).map_err(map_err)?,
            block: row.get::<_, i64>(1).map_err(map_err)? as u64,
            seq: row.get::<_, i64>(2).map_err(map_err)? as u64,
        };
        let json = verified(row, (3, "json"), 4).map_err(|err| {
            err.at("oracle_data", || {
                format!(
                    "({}, {}, {})",
                    position.vega_time, position.block, position.seq
                )
            })
        })?;
        if nodes.capacity() - nodes.len() < json.len() {
            // Rows are alike: size the buffer for the rest of the scan at once, with room for
            // rows up to half as long again as this one. Sized for the rows alone, a page of
            // longer rows grew it again near its end, and the copies of those reallocations
            // were 5 % of a page read once (callgrind, docs/PERFORMANCE.md).
            let rest = scan.limit.saturating_sub(out.len()).min(1024);
            nodes.reserve(json.len() * rest * 3 / 2);
        }
        out.push((position, push_node(nodes, json)));
    }
    Ok(out)
}
