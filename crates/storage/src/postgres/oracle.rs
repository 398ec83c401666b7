//! Oracle data pages: keyset range scans on the position, overall or per spec, both scans of a
//! page in one read-only snapshot.

use ledger_core::OracleSpecId;
use oracle_core::{PageRequest, Position, Scan};
use postgres::Transaction;
use postgres::types::ToSql;

use super::{PgStore, Statements, map_err};
use crate::{Error, OraclePage, OracleStore};

const SPEC_SQL: &str = "SELECT id FROM oracle_specs WHERE hex = $1";

impl OracleStore for PgStore {
    fn oracle_page(
        &self,
        spec: Option<&OracleSpecId>,
        request: &PageRequest,
    ) -> Result<OraclePage, Error> {
        let mut conn = self.get()?;
        let (mut tx, mut statements) = conn.snapshot()?;
        let spec = match spec {
            None => None,
            Some(spec) => {
                let statement = statements.get(&mut tx, SPEC_SQL)?;
                let row = tx
                    .query_opt(&statement, &[&&spec.as_bytes()[..]])
                    .map_err(map_err)?;
                match row {
                    Some(row) => Some(row.get::<_, i32>(0)),
                    // A spec that never matched anything has an empty listing.
                    None => return Ok(OraclePage::assemble(request, Vec::new(), false)),
                }
            }
        };
        let mut reader = Reader {
            tx: &mut tx,
            statements: &mut statements,
            spec,
        };
        let rows = reader.scan(&request.main_scan())?;
        let positions: Vec<Position> = rows.iter().map(|(position, _)| *position).collect();
        let boundary_exists = match request.boundary_scan(&positions) {
            Some(boundary) => !reader.scan(&boundary)?.is_empty(),
            None => false,
        };
        tx.commit().map_err(map_err)?;
        Ok(OraclePage::assemble(request, rows, boundary_exists))
    }
}

/// The SQL of one scan: `$1` is the limit, then the spec's key when `spec`, then the anchor
/// position when `anchored`. Every variant is a range scan of a primary key in key order, so
/// PostgreSQL reads exactly the rows it returns and sorts nothing.
pub(crate) fn scan_sql(spec: bool, descending: bool, anchored: bool, inclusive: bool) -> String {
    let (cmp, dir) = match (descending, inclusive) {
        (true, true) => ("<=", "DESC"),
        (true, false) => ("<", "DESC"),
        (false, true) => (">=", "ASC"),
        (false, false) => (">", "ASC"),
    };
    // Per spec, the spec's index is scanned alone and each datum's JSON fetched by a subquery
    // per row returned: a join would let the planner hash the whole spec and sort it.
    let (select, from, table) = if spec {
        (
            "s.vega_time, s.block, s.seq, (SELECT d.json FROM oracle_data d \
             WHERE d.vega_time = s.vega_time AND d.block = s.block AND d.seq = s.seq)",
            "oracle_spec_data s",
            "s",
        )
    } else {
        ("d.vega_time, d.block, d.seq, d.json", "oracle_data d", "d")
    };
    let mut conditions = Vec::new();
    let mut next = 2;
    if spec {
        conditions.push("s.spec = $2".to_owned());
        next = 3;
    }
    if anchored {
        conditions.push(format!(
            "({table}.vega_time, {table}.block, {table}.seq) {cmp} (${}, ${}, ${})",
            next,
            next + 1,
            next + 2
        ));
    }
    let filter = if conditions.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conditions.join(" AND "))
    };
    format!(
        "SELECT {select} FROM {from} {filter} \
         ORDER BY {table}.vega_time {dir}, {table}.block {dir}, {table}.seq {dir} LIMIT $1"
    )
}

/// The scans of one page.
struct Reader<'r, 't, 'c> {
    tx: &'r mut Transaction<'t>,
    statements: &'r mut Statements<'c>,
    spec: Option<i32>,
}

impl Reader<'_, '_, '_> {
    fn scan(&mut self, scan: &Scan) -> Result<Vec<(Position, Vec<u8>)>, Error> {
        let sql = scan_sql(
            self.spec.is_some(),
            scan.descending,
            scan.after.is_some(),
            scan.inclusive,
        );
        let statement = self.statements.get(self.tx, &sql)?;
        let limit = i64::try_from(scan.limit).unwrap_or(i64::MAX);
        // Stored heights and sequences fit in i64 (ingest checks); a larger one from a cursor
        // sorts after all of them, and saturating keeps that true.
        let saturate = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let anchor = scan
            .after
            .map(|p| (p.vega_time, saturate(p.block), saturate(p.seq)));
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&limit];
        if let Some(spec) = &self.spec {
            params.push(spec);
        }
        if let Some((time, block, seq)) = &anchor {
            params.extend([time as &(dyn ToSql + Sync), block, seq]);
        }
        let rows = self.tx.query(&statement, &params).map_err(map_err)?;
        Ok(rows
            .iter()
            .map(|row| {
                let position = Position {
                    vega_time: row.get(0),
                    block: row.get::<_, i64>(1) as u64,
                    seq: row.get::<_, i64>(2) as u64,
                };
                (position, row.get(3))
            })
            .collect())
    }
}
