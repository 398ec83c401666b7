//! The query plans of the hot scans, pinned: each read must be an ordered range search on a
//! clustered primary key, with no table scan and no sort step.
//!
//! The expected plans are the exact `EXPLAIN QUERY PLAN` details of the bundled SQLite, one
//! line per plan node; `docs/FORMAT.md` quotes them.

use rusqlite::Connection;

use super::export::SCAN_SQL;
use super::oracle::{ASCENDING_SQL, DESCENDING_SQL, HOLDER_SQL};
use super::schema;
use super::segments::{LEDGER, ORACLE};

/// An empty database with the current schema.
fn database() -> Connection {
    let mut conn = Connection::open_in_memory().unwrap();
    let path = std::path::Path::new(":memory:");
    schema::migrate(&mut conn, crate::error::Upgrade::Refuse, path).unwrap();
    conn
}

/// The plan's node details, one line each, indented by depth.
fn plan(conn: &Connection, sql: &str) -> String {
    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    // Unbound parameters are NULL; the plan does not depend on their values.
    let mut rows = stmt.raw_query();
    let mut nodes: Vec<(i64, i64, String)> = Vec::new();
    while let Some(row) = rows.next().unwrap() {
        nodes.push((
            row.get(0).unwrap(),
            row.get(1).unwrap(),
            row.get(3).unwrap(),
        ));
    }
    let mut depths: Vec<(i64, usize)> = Vec::new();
    let mut lines = Vec::new();
    for (id, parent, detail) in nodes {
        let depth = depths
            .iter()
            .find(|(node, _)| *node == parent)
            .map_or(0, |(_, depth)| depth + 1);
        depths.push((id, depth));
        lines.push(format!("{}{detail}", "  ".repeat(depth)));
    }
    lines.join("\n")
}

#[track_caller]
fn check(sql: &str, expected: &str) {
    let actual = plan(&database(), sql);
    assert_eq!(actual, expected, "plan of {sql}");
    assert!(!actual.contains("TEMP B-TREE"), "a sort step in {actual}");
}

#[test]
fn export_scan_is_an_index_range_search() {
    check(
        SCAN_SQL,
        "SEARCH ledger_segments USING INDEX ledger_segments_key (party=? AND last_time>?)",
    );
}

#[test]
fn the_writer_reads_an_owner_s_touched_segments_by_index_range_searches() {
    for table in [LEDGER, ORACLE] {
        let (name, owner) = (table.name, table.owner);
        let index = format!("SEARCH {name} USING INDEX {name}_key");
        check(
            &table.among_sql(),
            &format!("{index} ({owner}=? AND (last_time,last_block,last_seq,last_idx)>(?,?,?,?))"),
        );
        check(&table.last_sql(), &format!("{index} ({owner}=?)"));
        check(
            &table.tail_sql(),
            &format!(
                "{index} ({owner}=? AND last_time=? AND last_block=? AND last_seq=? \
                 AND last_idx=?)"
            ),
        );
    }
}

#[test]
fn oracle_scans_are_index_range_searches() {
    let index = "SEARCH oracle_segments USING INDEX oracle_segments_key";
    check(
        ASCENDING_SQL,
        &format!("{index} (spec=? AND (last_time,last_block,last_seq,last_idx)>(?,?,?,?))"),
    );
    check(
        DESCENDING_SQL,
        &format!("{index} (spec=? AND (last_time,last_block,last_seq,last_idx)<(?,?,?,?))"),
    );
    // The holder's key alone: the index covers it, no segment is read.
    check(
        HOLDER_SQL,
        "SEARCH oracle_segments USING COVERING INDEX oracle_segments_key \
         (spec=? AND (last_time,last_block,last_seq,last_idx)>(?,?,?,?))",
    );
}
