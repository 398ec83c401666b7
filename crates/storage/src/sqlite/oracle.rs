//! Oracle data pages: keyset range searches over the spec's segments (spec 0 for all data, see
//! `segments.rs`), every page one snapshot.

use std::ops::Range;

use ledger_core::OracleSpecId;
use oracle_core::{PageRequest, Position, Scan};
use rusqlite::{Connection, OptionalExtension, params};

use super::segments::{ALL_DATA, ORACLE};
use super::{SqliteStore, map_err, verified};
use crate::backend::{push_node, reserve_nodes};
use crate::segment::{self, LineKey, SegmentRef};
use crate::{Error, OraclePage, OracleStore};

impl OracleStore for SqliteStore {
    fn oracle_pages(
        &self,
        spec: Option<&OracleSpecId>,
        request: &PageRequest,
        ahead: usize,
    ) -> Result<OraclePage, Error> {
        let mut conn = self.readers.get()?;
        // Both scans read one snapshot, so the page flags agree with the page.
        let tx = conn.snapshot()?;
        let owner = match spec {
            None => ALL_DATA,
            Some(spec) => match spec_key(&tx, spec)? {
                Some(key) => key,
                // A spec that never matched anything has an empty listing.
                None => return Ok(OraclePage::assemble(request, Vec::new(), false, 0)),
            },
        };
        let mut nodes = Vec::new();
        let rows = scan(&tx, owner, &request.read_ahead_scan(ahead), &mut nodes)?;
        let positions: Vec<Position> = rows.iter().map(|(position, _)| *position).collect();
        let boundary_exists = match request.boundary_scan(&positions) {
            Some(boundary) => !scan(&tx, owner, &boundary, &mut nodes)?.is_empty(),
            None => false,
        };
        tx.commit()?;
        Ok(OraclePage::from_scan(
            request,
            rows,
            boundary_exists,
            nodes,
            ahead,
        ))
    }

    /// `PRAGMA data_version` on a connection kept for it: a few microseconds, never waiting for
    /// the writer (see `version.rs`).
    fn data_version(&self) -> Result<Option<u64>, Error> {
        self.version.current()
    }

    /// A page reads the file through a pooled connection: the pool opens one rather than wait,
    /// and WAL readers never wait for the writer.
    fn pages_are_local(&self) -> bool {
        true
    }
}

fn spec_key(conn: &Connection, spec: &OracleSpecId) -> Result<Option<i64>, Error> {
    conn.prepare_cached("SELECT id FROM oracle_specs WHERE hex = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([&spec.as_bytes()[..]], |row| row.get(0))
                .optional()
        })
        .map_err(map_err)
}

/// The start of every segment scan, as a literal (the scans are constants, prepared from the
/// connection's cache with no formatting per page): the blobs and their checksums, then the
/// key, of spec `?1`'s segments.
macro_rules! segments_of_spec {
    () => {
        "SELECT json, keys, json_sum, keys_sum, last_time, last_block, last_seq, last_idx \
         FROM oracle_segments WHERE spec = ?1 "
    };
}

/// The segments of spec `?1` in ascending key order whose last datum is at or after
/// `(?2, ?3, ?4, ?5)`: the first of them holds the anchor, or else is the nearest after it.
pub(crate) const ASCENDING_SQL: &str = concat!(
    segments_of_spec!(),
    "AND (last_time, last_block, last_seq, last_idx) >= (?2, ?3, ?4, ?5) \
     ORDER BY last_time, last_block, last_seq, last_idx"
);

/// The segments of spec `?1` in descending key order whose last datum is at or before
/// `(?2, ?3, ?4, ?5)`.
pub(crate) const DESCENDING_SQL: &str = concat!(
    segments_of_spec!(),
    "AND (last_time, last_block, last_seq, last_idx) <= (?2, ?3, ?4, ?5) \
     ORDER BY last_time DESC, last_block DESC, last_seq DESC, last_idx DESC"
);

/// The key of spec `?1`'s first segment whose last datum is at or after `(?2, ?3, ?4, ?5)`:
/// the one that holds that position, if any does.
pub(crate) const HOLDER_SQL: &str = "SELECT last_time, last_block, last_seq, last_idx \
     FROM oracle_segments WHERE spec = ?1 \
     AND (last_time, last_block, last_seq, last_idx) >= (?2, ?3, ?4, ?5) \
     ORDER BY last_time, last_block, last_seq, last_idx LIMIT 1";

/// The smallest and the greatest key: the bounds of a scan from one end.
const FIRST: LineKey = (i64::MIN, i64::MIN, i64::MIN, i64::MIN);
const LAST: LineKey = (i64::MAX, i64::MAX, i64::MAX, i64::MAX);

/// Runs one scan over `owner`'s segments, appending each datum's JSON to `nodes` straight from
/// SQLite's row buffer once its segment's checksums and index were verified. A scan reads
/// segments in its direction from the one that holds its anchor (or the nearest beyond it) and
/// stops stepping as soon as it has its data: three or four segments for a page of a hundred.
fn scan(
    conn: &Connection,
    owner: i64,
    scan: &Scan,
    nodes: &mut Vec<u8>,
) -> Result<Vec<(Position, Range<usize>)>, Error> {
    let mut out = Vec::with_capacity(scan.limit.min(1024));
    if scan.limit == 0 {
        return Ok(out);
    }
    let anchor = scan.after.map(segment::datum_key);
    let (sql, from) = if scan.descending {
        // Descending from the segment that holds the anchor: the first whose last datum is at
        // or after it (a segment's last key is all the index has).
        let from = match anchor {
            None => LAST,
            Some(anchor) => holder(conn, owner, anchor)?.unwrap_or(LAST),
        };
        (DESCENDING_SQL, from)
    } else {
        (ASCENDING_SQL, anchor.unwrap_or(FIRST))
    };
    let mut stmt = conn.prepare_cached(sql).map_err(map_err)?;
    let (time, block, seq, idx) = from;
    let mut rows = stmt
        .query(params![owner, time, block, seq, idx])
        .map_err(map_err)?;
    while out.len() < scan.limit
        && let Some(row) = rows.next().map_err(map_err)?
    {
        let (bytes, segment) = verified(row, (0, "json"), 2)
            .and_then(|json| {
                let keys = verified(row, (1, "keys"), 3)?;
                Ok((json.len(), SegmentRef::new(json, keys)?))
            })
            .map_err(|err| ORACLE.at_segment(err, owner, row, 4))?;
        let room = scan.limit - out.len();
        reserve_nodes(nodes, bytes, segment.len(), room);
        segment.scan_data(scan, room, |position, json| {
            out.push((position, push_node(nodes, json)));
        });
    }
    Ok(out)
}

/// The key of the segment of `owner` that holds `key`, or else the nearest after it.
fn holder(conn: &Connection, owner: i64, key: LineKey) -> Result<Option<LineKey>, Error> {
    let (time, block, seq, idx) = key;
    conn.prepare_cached(HOLDER_SQL)
        .and_then(|mut stmt| {
            stmt.query_row(params![owner, time, block, seq, idx], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
            .optional()
        })
        .map_err(map_err)
}
