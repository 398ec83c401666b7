//! The query plans of the hot scans, pinned: each read must be an ordered range scan of a
//! primary key index, with no sequential scan and no sort step. The plans are taken on a filled
//! and analysed table, as the planner sees a real store.

use super::PgStore;
use super::export::{EXPORT_PLANNER, NEXT_ASSET_SQL, export_sql};
use super::oracle::scan_sql;
use super::testing::TestDatabase;
use crate::{IngestBatch, IngestWriter, suite};

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
    client.batch_execute("ANALYZE").unwrap();

    let one = export_plan(&mut client, &export_sql(1, &[2], 0, i64::MAX));
    assert_eq!(
        one,
        "Index Scan using ledger_rows_pkey on ledger_rows\n  \
         Index Cond: ((party = 1) AND (asset = 2) AND (vega_time >= 0) AND \
         (vega_time <= '9223372036854775807'::bigint))"
    );
    let two = export_plan(&mut client, &export_sql(1, &[0, 2], 5, 10_000));
    let scan = |n: u32, asset: u32, alias: &str| {
        format!(
            "  ->  Subquery Scan on \"*SELECT* {n}\"\n        \
             ->  Index Scan using ledger_rows_pkey on ledger_rows{alias}\n              \
             Index Cond: ((party = 1) AND (asset = {asset}) AND (vega_time >= 5) AND \
             (vega_time <= 10000))"
        )
    };
    assert_eq!(
        two,
        format!(
            "Merge Append\n  \
             Sort Key: \"*SELECT* 1\".vega_time, \"*SELECT* 1\".block, \"*SELECT* 1\".seq, \
             \"*SELECT* 1\".idx\n{}\n{}",
            scan(1, 0, ""),
            scan(2, 2, " ledger_rows_1")
        )
    );
    let next = plan(&mut client, NEXT_ASSET_SQL, "int, int");
    assert_eq!(
        next,
        "Limit\n  ->  Index Only Scan using ledger_rows_pkey on ledger_rows\n        \
         Index Cond: ((party = $1) AND (asset > $2))"
    );
    for descending in [false, true] {
        let direction = if descending { " Backward" } else { "" };
        for inclusive in [false, true] {
            let cmp = match (descending, inclusive) {
                (true, true) => "<=",
                (true, false) => "<",
                (false, true) => ">=",
                (false, false) => ">",
            };
            let all = plan(
                &mut client,
                &scan_sql(false, descending, true, inclusive),
                "bigint, bigint, bigint, bigint",
            );
            assert_eq!(
                all,
                format!(
                    "Limit\n  ->  Index Scan{direction} using oracle_data_pkey on oracle_data d\n        \
                     Index Cond: (ROW(vega_time, block, seq) {cmp} ROW($2, $3, $4))"
                )
            );
            let spec = plan(
                &mut client,
                &scan_sql(true, descending, true, inclusive),
                "bigint, int, bigint, bigint, bigint",
            );
            assert_eq!(
                spec,
                format!(
                    "Limit\n  ->  Index Only Scan{direction} using oracle_spec_data_pkey on oracle_spec_data s\n        \
                     Index Cond: ((spec = $2) AND (ROW(vega_time, block, seq) {cmp} ROW($3, $4, $5)))\n        \
                     SubPlan 1\n          \
                     ->  Index Scan using oracle_data_pkey on oracle_data d\n                \
                     Index Cond: ((vega_time = s.vega_time) AND (block = s.block) AND (seq = s.seq))"
                )
            );
        }
    }
    for spec in [false, true] {
        let unbounded = plan(
            &mut client,
            &scan_sql(spec, true, false, false),
            if spec { "bigint, int" } else { "bigint" },
        );
        assert!(!unbounded.contains("Seq Scan"), "{unbounded}");
        assert!(!unbounded.contains("Sort"), "{unbounded}");
    }
}
