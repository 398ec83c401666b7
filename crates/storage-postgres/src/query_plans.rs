//! The query plans of the hot scans, pinned: each read must be an ordered range scan of a
//! primary key index, with no sequential scan and no sort step. The plans are taken on filled
//! and analysed tables, as the planner sees a real store.

use super::PgStore;
use super::export::{Chunk, EXPORT_PLANNER, Scan};
use super::oracle::SegmentScan;
use super::segments::{LEDGER, ORACLE, Table};
use storage::{IngestBatch, IngestWriter, suite};
use testdb::TestDatabase;

/// The plan of `sql` with its parameters typed as they are bound.
fn plan(client: &mut postgres::Client, sql: &str, types: &str) -> String {
    client
        .batch_execute(&format!("DEALLOCATE ALL; PREPARE q ({types}) AS {sql}"))
        .unwrap();
    // A generic plan: the one a prepared statement settles on, whatever the values.
    client
        .batch_execute("SET plan_cache_mode = force_generic_plan")
        .unwrap();
    let args = types
        .split(',')
        .map(|_| "NULL")
        .collect::<Vec<_>>()
        .join(", ");
    let rows = client
        .query(&format!("EXPLAIN (COSTS OFF) EXECUTE q ({args})"), &[])
        .unwrap();
    rows.iter()
        .map(|row| row.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The plan of an export's query, under the export's planner settings.
fn export_plan(client: &mut postgres::Client, sql: &str) -> String {
    let mut tx = client.transaction().unwrap();
    tx.batch_execute(EXPORT_PLANNER).unwrap();
    let rows = tx
        .query(&format!("EXPLAIN (COSTS OFF) {sql}"), &[])
        .unwrap();
    rows.iter()
        .map(|row| row.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn scans_are_primary_key_range_scans() {
    let Some(db) = TestDatabase::create("scans_are_primary_key_range_scans") else {
        return;
    };
    let mut writer = PgStore::writer(db.url()).unwrap();
    // Enough rows, over enough parties and specs, that a sequential scan would cost more.
    let mut batch = IngestBatch::default();
    for n in 0..20_000u64 {
        let party = (n % 50) as u8;
        let time = n as i64;
        batch.ledger_rows.push(suite::ledger_row(
            "x",
            party,
            (n % 3) as u8,
            (time, n, 0, 0),
        ));
        batch
            .oracle_rows
            .push(suite::oracle_row("o", (time, n, 1), &[(n % 40) as u8]));
    }
    writer.commit(&batch).unwrap();
    let mut client = db.client();
    // As many segments as 5 GB of lines make, over 100 parties (their bytes do not matter).
    client
        .batch_execute(
            "INSERT INTO ledger_segments \
             SELECT p, n, n, 0, 0, n, 1, '\\x0a', '' \
             FROM generate_series(1000, 1100) p, generate_series(1, 200) n; \
             INSERT INTO oracle_segments \
             SELECT p, n, n, 0, 0, n, 1, '\\x0a', '', n, 0, 0 \
             FROM generate_series(1000, 1100) p, generate_series(1, 200) n; \
             ANALYZE",
        )
        .unwrap();

    let scan = |asset, low, high, after| {
        Scan {
            party: 1000,
            asset,
            low,
            high,
        }
        .sql(&Chunk {
            after,
            all_keys: false,
            segments: 32,
        })
    };
    // An export: one ordered range scan of the party's segments from the window's start; the
    // filter only stops it reading segments that begin after the window.
    let whole = export_plan(&mut client, &scan(None, 0, i64::MAX, None));
    assert_eq!(
        whole,
        "Limit\n  \
         ->  Index Scan using ledger_segments_pkey on ledger_segments\n        \
         Index Cond: ((party = 1000) AND (last_time >= 0))\n        \
         Filter: (first_time <= '9223372036854775807'::bigint)"
    );
    let one = export_plan(&mut client, &scan(Some(2), 5, 100, None));
    assert_eq!(
        one,
        "Limit\n  \
         ->  Index Scan using ledger_segments_pkey on ledger_segments\n        \
         Index Cond: ((party = 1000) AND (last_time >= 5))\n        \
         Filter: (first_time <= 100)"
    );
    // A later chunk goes on from the last segment read, along the same index.
    let next = export_plan(&mut client, &scan(None, 0, 100, Some((7, 8, 9, 10))));
    assert_eq!(
        next,
        "Limit\n  \
         ->  Index Scan using ledger_segments_pkey on ledger_segments\n        \
         Index Cond: ((party = 1000) AND (last_time >= 0) AND (ROW(last_time, last_block, last_seq, last_idx) > ROW(7, 8, 9, 10)))\n        \
         Filter: (first_time <= 100)"
    );
    // An ingest's reads and deletes: a range scan or a seek per owner, never a pass over the
    // table.
    for Table { name, owner, .. } in [&LEDGER, &ORACLE] {
        let table = if *name == "ledger_segments" {
            &LEDGER
        } else {
            &ORACLE
        };
        let touched = plan(
            &mut client,
            &table.touched_sql(),
            "int[], bigint[], bigint[], bigint[], bigint[], bigint[], bytea",
        );
        assert_eq!(
            touched,
            format!(
                "Nested Loop\n  \
                 ->  Function Scan on b\n  \
                 ->  Append\n        \
                 ->  Index Scan using {name}_pkey on {name} s_1\n              \
                 Index Cond: (({owner} = b.owner) AND (ROW(last_time, last_block, last_seq, last_idx) \
                 >= ROW(b.\"time\", b.block, b.seq, b.idx)))\n              \
                 Filter: (first_time <= b.high)\n        \
                 ->  Subquery Scan on tail\n              \
                 ->  Limit\n                    \
                 ->  Index Scan Backward using {name}_pkey on {name} s_2\n                          \
                 Index Cond: ({owner} = b.owner)"
            )
        );
        let delete = plan(
            &mut client,
            &table.delete_sql(),
            "int[], bigint[], bigint[], bigint[], bigint[]",
        );
        assert_eq!(
            delete,
            format!(
                "Delete on {name} s\n  \
                 ->  Nested Loop\n        \
                 ->  Function Scan on d\n        \
                 ->  Index Scan using {name}_pkey on {name} s\n              \
                 Index Cond: (({owner} = d.owner) AND (last_time = d.\"time\") AND (last_block = d.block) \
                 AND (last_seq = d.seq) AND (last_idx = d.idx))"
            )
        );
    }
    // A page's statements: ordered range scans of one spec's segments, at most $2 of them
    // read, the blobs fetched only of those kept. Ascending by the last key, descending by the
    // first.
    for descending in [false, true] {
        for anchored in [false, true] {
            for inclusive in [false, true] {
                let scan = SegmentScan {
                    descending,
                    anchored,
                    inclusive,
                    cut_first: anchored,
                };
                let types = if anchored {
                    "int, bigint, bigint, bigint, bigint, bigint"
                } else {
                    "int, bigint, bigint"
                };
                let (end, index, dir, cmp) = match (descending, inclusive) {
                    (true, true) => ("first", "oracle_segments_first", " Backward", "<="),
                    (true, false) => ("first", "oracle_segments_first", " Backward", "<"),
                    (false, true) => ("last", "oracle_segments_pkey", "", ">="),
                    (false, false) => ("last", "oracle_segments_pkey", "", ">"),
                };
                let cond = if anchored {
                    format!(
                        "((spec = $1) AND (ROW({end}_time, {end}_block, {end}_seq, {end}_idx) \
                         {cmp} ROW($4, $5, $6, 0)))"
                    )
                } else {
                    "(spec = $1)".to_owned()
                };
                assert_eq!(
                    plan(&mut client, &scan.sql(), types),
                    format!(
                        "Subquery Scan on t\n  \
                         Filter: ((t.upto - t.lines) < $3)\n  \
                         ->  WindowAgg\n        \
                         ->  Subquery Scan on s\n              \
                         ->  Limit\n                    \
                         ->  Index Scan{dir} using {index} on oracle_segments s_1\n                          \
                         Index Cond: {cond}"
                    ),
                    "{scan:?}"
                );
            }
        }
    }
}
