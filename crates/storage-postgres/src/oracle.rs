//! Oracle data pages: keyset range scans of the spec's segments (spec 0 for all data, see
//! `segments.rs`), every page one read-only snapshot.

use std::ops::Range;

use ledger_core::OracleSpecId;
use oracle_core::{PageRequest, Position, Scan};
use postgres::GenericClient;
use postgres::types::ToSql;

use super::packed::unpack_into;
use super::segments::ALL_DATA;
use super::{PgConn, PgStore, Statements, map_err};
use storage::Bug;
use storage::backend::{push_node, reserve_nodes};
use storage::segment::{self, LineKey, SegmentRef};
use storage::{Error, OraclePage, OracleStore};

/// The most segments a scan's first statement looks at for each [`FIRST_DATA`] data it asks
/// for: it returns only as many of them as hold the data asked for, by their line counts,
/// which is three or four for a page of a hundred (`segments::ORACLE`), so one statement almost
/// always does; the others cost it an index entry and a small heap row each. A scan that needs
/// more looks at four times as many with each further statement.
const FIRST_SEGMENTS: i64 = 8;

/// See [`FIRST_SEGMENTS`]: the main scan of a page of a hundred.
const FIRST_DATA: usize = 102;

const SPEC_SQL: &str = "SELECT id FROM oracle_specs WHERE hex = $1";

/// The partition that holds an owner's segments, found through its first (pruned to that
/// partition, `query_plans.rs` pins it): in key order, so that it is the first entry of an
/// index scan, never a bitmap of all the owner's segments.
pub(crate) const PARTITION_SQL: &str = "SELECT s.tableoid::regclass::text \
     FROM oracle_segments s WHERE s.spec = $1 \
     ORDER BY s.last_time, s.last_block, s.last_seq, s.last_idx LIMIT 1";

impl OracleStore for PgStore {
    fn oracle_pages(
        &self,
        spec: Option<&OracleSpecId>,
        request: &PageRequest,
        ahead: usize,
    ) -> Result<OraclePage, Error> {
        self.read(|conn| page(conn, spec, request, ahead), || true)
    }

    /// From memory: moved on by the thread that listens for the writer's announcements of
    /// its commits and polls the tip once per [`CHAIN_TIP_LAG`](storage::CHAIN_TIP_LAG) (see
    /// `tip.rs`), together with the chain tip.
    fn data_version(&self) -> Result<Option<u64>, Error> {
        Ok(self.tip.version())
    }
}

/// A page. Most pages are one statement in autocommit, one round trip: a single statement
/// reads one snapshot by itself. When the main scan needs a second statement (its data span
/// more segments than the first one read), or the boundary scan is needed (the anchor's own
/// datum not found, see `PageRequest::boundary_scan`), the scans run again inside one
/// `REPEATABLE READ READ ONLY` transaction, so a page is always one snapshot.
fn page(
    conn: &mut PgConn,
    spec: Option<&OracleSpecId>,
    request: &PageRequest,
    ahead: usize,
) -> Result<OraclePage, Error> {
    let owner = match spec {
        None => ALL_DATA,
        // A spec that never matched anything has an empty listing.
        Some(spec) => match spec_key(conn, spec)? {
            Some(key) => key,
            None => return Ok(OraclePage::assemble(request, Vec::new(), false, 0)),
        },
    };
    // An owner without segments has an empty listing.
    let Some(table) = partition(conn, owner)? else {
        return Ok(OraclePage::assemble(request, Vec::new(), false, 0));
    };
    let main = request.read_ahead_scan(ahead);
    let mut nodes = Vec::new();
    let (client, mut statements) = conn.autocommit();
    if let Some(rows) = scan(
        client,
        &mut statements,
        (owner, &table),
        &main,
        true,
        &mut nodes,
    )? && request.boundary_scan(&positions(&rows)).is_none()
    {
        return Ok(OraclePage::from_scan(request, rows, false, nodes, ahead));
    }
    nodes.clear();
    let (mut tx, mut statements) = conn.snapshot()?;
    let rows = scanned(scan(
        &mut tx,
        &mut statements,
        (owner, &table),
        &main,
        false,
        &mut nodes,
    )?)?;
    // Whether anything lies beyond the page on its anchor's side: the boundary scan's one row.
    let beyond = match request.boundary_scan(&positions(&rows)) {
        Some(boundary) => !scanned(scan(
            &mut tx,
            &mut statements,
            (owner, &table),
            &boundary,
            false,
            &mut nodes,
        )?)?
        .is_empty(),
        None => false,
    };
    tx.commit().map_err(map_err)?;
    Ok(OraclePage::from_scan(request, rows, beyond, nodes, ahead))
}

/// The rows of a scan allowed as many statements as it needs.
fn scanned(rows: Option<Rows>) -> Result<Rows, Error> {
    rows.ok_or_else(|| Bug::ScanStopped.into())
}

/// The partition of `oracle_segments` that holds `owner`'s segments, from the connection's cache
/// or the database; `None` while it has none. A page reads that partition by name: through the
/// partitioned table, the executor would take a lock on every partition and prune all but one
/// at each page's start, which cost a page about a third more of PostgreSQL's time than a scan
/// of the partition itself (docs/PERFORMANCE.md, "Partitions").
fn partition(conn: &mut PgConn, owner: i32) -> Result<Option<String>, Error> {
    if let Some(table) = conn.partitions.get(&owner) {
        return Ok(Some(table.clone()));
    }
    let (client, mut statements) = conn.autocommit();
    let statement = statements.get(client, PARTITION_SQL)?;
    let row = client.query_opt(&statement, &[&owner]).map_err(map_err)?;
    let table = row.map(|row| row.get::<_, String>(0));
    if let Some(table) = &table {
        conn.partitions.insert(owner, table.clone());
    }
    Ok(table)
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

/// The data a scan found, in scan order, each at its position, its JSON a range of the page's
/// nodes.
type Rows = Vec<(Position, Range<usize>)>;

fn positions(rows: &[(Position, Range<usize>)]) -> Vec<Position> {
    rows.iter().map(|(position, _)| *position).collect()
}

/// Which segments a statement reads, in scan order: ascending by their last keys (the primary
/// key), descending by their first keys (`oracle_segments_first`). Either way the first segment
/// from an anchor is the one that holds it, or else the nearest beyond it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegmentScan {
    /// In descending key order.
    pub descending: bool,
    /// Only segments whose key (last or first, as above) is beyond `$4..$6` (the anchor's
    /// position, entry index 0) in scan direction, or at it when `inclusive`.
    pub anchored: bool,
    /// See `anchored`.
    pub inclusive: bool,
    /// The first segment may hold data before the anchor (a scan from a cursor), so its lines
    /// do not count towards those asked for.
    pub cut_first: bool,
}

impl SegmentScan {
    /// The SQL on `table`, the owner's partition of `oracle_segments` (a page reads it by name,
    /// see [`partition`]): `$1` the spec's key, `$2` the most segments to look at, `$3` how many
    /// data are asked for, then the anchor when `anchored`. Of the segments looked at, in scan order, it
    /// returns those before the data asked for are counted (by the segments' `lines`): each
    /// row is a segment's lines and index. A range scan of an index in its order
    /// (`query_plans.rs` pins them) that reads no more than `$2` segments' rows and fetches the
    /// blobs only of those it returns.
    pub(crate) fn sql(self, table: &str) -> String {
        let (end, dir) = if self.descending {
            ("first", "DESC")
        } else {
            ("last", "ASC")
        };
        let key = format!("s.{end}_time, s.{end}_block, s.{end}_seq, s.{end}_idx");
        let order = format!(
            "s.{end}_time {dir}, s.{end}_block {dir}, s.{end}_seq {dir}, s.{end}_idx {dir}"
        );
        let cmp = match (self.anchored, self.descending, self.inclusive) {
            (false, _, _) => "",
            (true, true, true) => "<=",
            (true, true, false) => "<",
            (true, false, true) => ">=",
            (true, false, false) => ">",
        };
        let range = if cmp.is_empty() {
            String::new()
        } else {
            format!(" AND ({key}) {cmp} ($4, $5, $6, 0)")
        };
        let first = if self.cut_first {
            " - first_value(s.lines) OVER w"
        } else {
            ""
        };
        format!(
            "SELECT t.json, t.keys, t.last_time, t.last_block, t.last_seq, t.last_idx FROM (\
             SELECT s.json, s.keys, s.last_time, s.last_block, s.last_seq, s.last_idx, \
             sum(s.lines) OVER w{first} AS upto, s.lines FROM (\
             SELECT * FROM {table} s WHERE s.spec = $1{range} ORDER BY {order} \
             LIMIT $2) s WINDOW w AS (ORDER BY {order} ROWS UNBOUNDED PRECEDING)) t \
             WHERE t.upto - t.lines < $3"
        )
    }
}

/// One scan of a page, on the connection or inside its transaction: the data beyond the
/// anchor in scan direction, up to the limit, read from as many segments as they span, of the
/// owner in its partition `table`, their JSON appended to `nodes`. With `once`, a scan that
/// would need a second statement returns `None` instead.
fn scan(
    client: &mut impl GenericClient,
    statements: &mut Statements<'_>,
    (owner, table): (i32, &str),
    scan: &Scan,
    once: bool,
    nodes: &mut Vec<u8>,
) -> Result<Option<Rows>, Error> {
    let mut rows = Vec::with_capacity(scan.limit.min(1024));
    if scan.limit == 0 {
        return Ok(Some(rows));
    }
    let anchor: Option<LineKey> = scan.after.map(segment::datum_key);
    let mut next = SegmentScan {
        descending: scan.descending,
        anchored: anchor.is_some(),
        inclusive: scan.inclusive,
        cut_first: anchor.is_some(),
    };
    let mut from = anchor;
    let mut count = i64::try_from(scan.limit.div_ceil(FIRST_DATA))
        .map_or(i64::MAX, |share| share.saturating_mul(FIRST_SEGMENTS));
    let (mut json, mut keys) = (Vec::new(), Vec::new());
    loop {
        let statement = statements.get(client, &next.sql(table))?;
        let need = i64::try_from(scan.limit - rows.len()).unwrap_or(i64::MAX);
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&owner, &count, &need];
        if let Some((time, block, seq, _)) = &from {
            params.extend([time as &(dyn ToSql + Sync), block, seq]);
        }
        let found = client.query(&statement, &params).map_err(map_err)?;
        let read = found.len() as i64;
        for row in &found {
            // Unpacked over the last segment's bytes: the buffers are zeroed only where they grow.
            let segment = unpack_into(row.get(0), "json", &mut json)
                .and_then(|()| unpack_into(row.get(1), "keys", &mut keys))
                .and_then(|()| SegmentRef::new(&json, &keys))
                .map_err(|err| {
                    err.at("oracle_segments", || {
                        let last = (row.get(2), row.get(3), row.get(4), row.get(5));
                        segment::describe("spec", owner.into(), last)
                    })
                })?;
            // The next statement starts beyond the last segment read: before its first datum
            // when descending, after its last one otherwise (a stored segment is never empty).
            if let Some(last) = segment.len().checked_sub(1) {
                from = Some(segment.line(if scan.descending { 0 } else { last }).key);
            }
            let room = scan.limit - rows.len();
            reserve_nodes(nodes, json.len(), segment.len(), room);
            segment.scan_data(scan, room, |position, json| {
                rows.push((position, push_node(nodes, json)));
            });
        }
        // Fewer segments than the most looked at: either the statement left out those after
        // the data asked for, which then all came (the lines counted lie beyond the anchor), or
        // there are no more.
        if rows.len() >= scan.limit || read < count {
            return Ok(Some(rows));
        }
        if once {
            return Ok(None);
        }
        next = SegmentScan {
            anchored: true,
            inclusive: false,
            cut_first: false,
            ..next
        };
        count = count.saturating_mul(4);
    }
}
