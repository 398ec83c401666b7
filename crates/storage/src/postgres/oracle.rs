//! Oracle data pages: keyset range scans on the position, overall or per spec, every page one
//! read-only snapshot.

use ledger_core::OracleSpecId;
use oracle_core::{PageRequest, Position, Scan};
use postgres::GenericClient;
use postgres::types::ToSql;

use super::{PgConn, PgStore, Statements, map_err};
use crate::{Error, OraclePage, OracleStore};

const SPEC_SQL: &str = "SELECT id FROM oracle_specs WHERE hex = $1";

impl OracleStore for PgStore {
    fn oracle_page(
        &self,
        spec: Option<&OracleSpecId>,
        request: &PageRequest,
    ) -> Result<OraclePage, Error> {
        self.read(|conn| page(conn, spec, request), || true)
    }

    /// Cannot tell: no page is cached. PostgreSQL has no counter of commits that a client sees
    /// without asking the server (`pg_current_wal_lsn()`, `pg_stat_database.xact_commit` and
    /// `txid_current_snapshot()` are each a round trip, as long as the one-statement page they
    /// would save), and `LISTEN`/`NOTIFY` arrives after the commit is visible, so a version
    /// learnt from it could call data the same after they changed. Servers of one database
    /// also need not share a writer whose commits they could count.
    fn data_version(&self) -> Result<Option<u64>, Error> {
        Ok(None)
    }
}

/// A page. Most pages are one statement in autocommit, one round trip: a single statement
/// reads one snapshot by itself, and the boundary scan is needed only when the anchor's own
/// row is not found (see `PageRequest::boundary_scan`). Then both scans run again inside one
/// `REPEATABLE READ READ ONLY` transaction, so a page is always one snapshot.
fn page(
    conn: &mut PgConn,
    spec: Option<&OracleSpecId>,
    request: &PageRequest,
) -> Result<OraclePage, Error> {
    let spec = match spec {
        None => None,
        // A spec that never matched anything has an empty listing.
        Some(spec) => match spec_key(conn, spec)? {
            Some(key) => Some(key),
            None => return Ok(OraclePage::assemble(request, Vec::new(), false)),
        },
    };
    let main = request.main_scan();
    let (client, mut statements) = conn.autocommit();
    let rows = scan(client, &mut statements, spec, &main)?;
    if request.boundary_scan(&positions(&rows)).is_none() {
        return Ok(OraclePage::assemble(request, rows, false));
    }
    let (mut tx, mut statements) = conn.snapshot()?;
    let rows = scan(&mut tx, &mut statements, spec, &main)?;
    let boundary_exists = match request.boundary_scan(&positions(&rows)) {
        Some(boundary) => !scan(&mut tx, &mut statements, spec, &boundary)?.is_empty(),
        None => false,
    };
    tx.commit().map_err(map_err)?;
    Ok(OraclePage::assemble(request, rows, boundary_exists))
}

/// The dictionary key of a spec, from the connection's cache or the database.
fn spec_key(conn: &mut PgConn, spec: &OracleSpecId) -> Result<Option<i32>, Error> {
    let hex = spec.as_bytes();
    if let Some(key) = conn.specs.get(hex) {
        return Ok(Some(*key));
    }
    let (client, mut statements) = conn.autocommit();
    let statement = statements.get(client, SPEC_SQL)?;
    let row = client
        .query_opt(&statement, &[&&hex[..]])
        .map_err(map_err)?;
    let key = row.map(|row| row.get::<_, i32>(0));
    if let Some(key) = key {
        conn.specs.insert(*hex, key);
    }
    Ok(key)
}

fn positions(rows: &[(Position, Vec<u8>)]) -> Vec<Position> {
    rows.iter().map(|(position, _)| *position).collect()
}

/// The SQL of one scan: `$1` is the limit, then the spec's key when `spec`, then the anchor
/// position when `anchored`. Every variant is a range scan of a primary key in key order, so
/// PostgreSQL reads exactly the rows it returns and sorts nothing. Per spec, the matches hold
/// their data's JSON (schema migration 4), so the scan reads no other table.
pub(crate) fn scan_sql(spec: bool, descending: bool, anchored: bool, inclusive: bool) -> String {
    let (cmp, dir) = match (descending, inclusive) {
        (true, true) => ("<=", "DESC"),
        (true, false) => ("<", "DESC"),
        (false, true) => (">=", "ASC"),
        (false, false) => (">", "ASC"),
    };
    let (from, table) = if spec {
        ("oracle_spec_data s", "s")
    } else {
        ("oracle_data d", "d")
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
        "SELECT {table}.vega_time, {table}.block, {table}.seq, {table}.json FROM {from} {filter} \
         ORDER BY {table}.vega_time {dir}, {table}.block {dir}, {table}.seq {dir} LIMIT $1"
    )
}

/// One scan of a page, on the connection or inside its transaction.
fn scan(
    client: &mut impl GenericClient,
    statements: &mut Statements<'_>,
    spec: Option<i32>,
    scan: &Scan,
) -> Result<Vec<(Position, Vec<u8>)>, Error> {
    let sql = scan_sql(
        spec.is_some(),
        scan.descending,
        scan.after.is_some(),
        scan.inclusive,
    );
    let statement = statements.get(client, &sql)?;
    let limit = i64::try_from(scan.limit).unwrap_or(i64::MAX);
    // Stored heights and sequences fit in i64 (ingest checks); a larger one from a cursor
    // sorts after all of them, and saturating keeps that true.
    let saturate = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let anchor = scan
        .after
        .map(|p| (p.vega_time, saturate(p.block), saturate(p.seq)));
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&limit];
    if let Some(spec) = &spec {
        params.push(spec);
    }
    if let Some((time, block, seq)) = &anchor {
        params.extend([time as &(dyn ToSql + Sync), block, seq]);
    }
    let rows = client.query(&statement, &params).map_err(map_err)?;
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
