//! The query plans of the hot scans, pinned: each read must be an ordered range search on a
//! clustered primary key, with no table scan and no sort step.
//!
//! The expected plans are the exact `EXPLAIN QUERY PLAN` details of the bundled SQLite, one
//! line per plan node; `docs/FORMAT.md` quotes them.

use rusqlite::Connection;

use super::export::SCAN_SQL;
use super::ingest::{AMONG_SQL, LAST_SQL, TAIL_SQL};
use super::oracle::{Bound, scan_sql};
use super::schema;

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
fn the_writer_reads_a_party_s_touched_segments_by_index_range_searches() {
    check(
        AMONG_SQL,
        "SEARCH ledger_segments USING INDEX ledger_segments_key \
         (party=? AND (last_time,last_block,last_seq,last_idx)>(?,?,?,?))",
    );
    check(
        LAST_SQL,
        "SEARCH ledger_segments USING INDEX ledger_segments_key (party=?)",
    );
    check(
        TAIL_SQL,
        "SEARCH ledger_segments USING INDEX ledger_segments_key \
         (party=? AND last_time=? AND last_block=? AND last_seq=? AND last_idx=?)",
    );
}

#[test]
fn oracle_scans_are_primary_key_range_searches() {
    // The spec's index, oracle_spec_data (`s`), is the outer loop (the first line), and each
    // datum is then one seek in oracle_data (`d`).
    let spec_outer = |range: &str| {
        format!(
            "SEARCH s USING PRIMARY KEY (spec=?{range})\n\
             SEARCH d USING PRIMARY KEY (vega_time=? AND block=? AND seq=?)"
        )
    };
    for descending in [false, true] {
        // SQLite's plan shows the direction of a range, not whether it includes its bound.
        let cmp = if descending { "<" } else { ">" };
        for bound in [Bound::Exclusive, Bound::Inclusive] {
            let range = format!("(vega_time,block,seq){cmp}(?,?,?)");
            check(
                &scan_sql(false, descending, bound),
                &format!("SEARCH d USING PRIMARY KEY ({range})"),
            );
            check(
                &scan_sql(true, descending, bound),
                &spec_outer(&format!(" AND {range}")),
            );
        }
        // No bound at all: a walk from one end of the clustered key, stopped by the LIMIT after
        // the rows it returns, is the best plan there is; it is the only SCAN allowed.
        check(&scan_sql(false, descending, Bound::None), "SCAN d");
        check(&scan_sql(true, descending, Bound::None), &spec_outer(""));
    }
}
