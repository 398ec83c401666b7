//! The query plans of the hot scans, pinned: each read must be an ordered range scan of a
//! primary key index, with no sequential scan and no sort step, in the one partition of the
//! owner it names (schema 8: the tables of segments are hash-partitioned by owner). The plans
//! are taken on filled and analysed tables, as the planner sees a real store.

use super::export::{CUT_SQL, Chunk, Scan, chunk_sql};
use super::oracle::{PARTITION_SQL, SegmentScan};
use super::segments::{LEDGER, ORACLE, Table, WRITER_PLANNER};
use super::{DEFAULT_PARTITIONS, PgStore, READER_PLANNER};
use storage::{IngestBatch, IngestWriter, suite};
use testdb::TestDatabase;

/// The plan of `sql` with its parameters typed as they are bound, run on `args` (SQL values)
/// inside a transaction that is rolled back, under the session's settings: a generic plan, the one a prepared statement
/// settles on whatever the values, with what ran of it. A subplan that never ran (a partition
/// pruned at run time) is left out, and so is the list of a `DELETE`'s target partitions
/// (each opened only when a row is deleted from it); the row counts are dropped.
fn plan(client: &mut postgres::Client, sql: &str, types: &str, args: &str) -> String {
    let mut tx = client.transaction().unwrap();
    // It ends with the transaction's rollback.
    tx.batch_execute(&format!(
        "SET plan_cache_mode = force_generic_plan; DEALLOCATE ALL; PREPARE q ({types}) AS {sql}"
    ))
    .unwrap();
    let rows = tx
        .query(
            &format!("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE q ({args})"),
            &[],
        )
        .unwrap();
    let mut kept = Vec::new();
    // The indentation of a subplan that never ran, while its lines are skipped.
    let mut skipping: Option<usize> = None;
    for row in &rows {
        let line: String = row.get(0);
        let indent = line.len() - line.trim_start().len();
        if skipping.is_some_and(|at| indent > at) {
            continue;
        }
        skipping = None;
        if line.ends_with(" (never executed)") {
            skipping = Some(indent);
            continue;
        }
        if line.starts_with("  Delete on ") || line.trim_start().starts_with("Rows Removed") {
            continue;
        }
        let line = match line.find(" (actual rows=") {
            Some(at) => &line[..at],
            None => &line,
        };
        kept.push(
            line.split(' ')
                .map(unnumbered)
                .collect::<Vec<_>>()
                .join(" "),
        );
    }
    tx.rollback().unwrap();
    kept.join("\n")
}

/// `word` of a plan without the number the planner gives each alias of a partitioned table
/// (`s_6`, `s_18.last_time`), which only counts the partitions before it.
fn unnumbered(word: &str) -> String {
    let Some(rest) = word.strip_prefix("s_") else {
        return word.to_owned();
    };
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    if digits == 0 {
        return word.to_owned();
    }
    format!("s{}", &rest[digits..])
}

/// The plan of an export's chunk of `scan` on `part`, the party's partition: the stored bytes
/// before each row summed along the scan's order (no sort), up to the chunk's count of
/// segments, then kept while under its bytes.
fn chunk_plan(client: &mut postgres::Client, part: &str, scan: &Scan, chunk: &Chunk) -> String {
    let params = scan.params(chunk, "1:1:");
    let args: Vec<String> = params
        .values()
        .iter()
        .map(|value| format!("{value:?}").replace('"', "'"))
        .collect();
    plan(
        client,
        &chunk_sql(part),
        "int, bigint, bigint, bigint, bigint, bigint, bigint, boolean, bigint, bigint, text",
        &args.join(", "),
    )
}

/// The partition of `table` that holds the rows of `owner`.
fn partition(client: &mut postgres::Client, table: &Table, owner: i32) -> String {
    let storage::segment::Table {
        name,
        owner: column,
        ..
    } = &table.columns;
    client
        .query_one(
            &format!("SELECT tableoid::regclass::text FROM {name} WHERE {column} = $1 LIMIT 1"),
            &[&owner],
        )
        .unwrap()
        .get(0)
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
    // Each with the settings of its session.
    let mut client = db.client();
    client.batch_execute(READER_PLANNER).unwrap();
    let mut writer_client = db.client();
    writer_client.batch_execute(WRITER_PLANNER).unwrap();
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

    let scan = |asset, low, high| Scan {
        party: 1000,
        asset,
        low,
        high,
    };
    let chunk = |after| Chunk::sized(after, crate::EXPORT_CHUNK_BYTES, (0, 0));
    // An export: one ordered range scan of the party's segments from the window's start (or
    // after the last segment read), in its partition, which it reads by name; the filter only
    // stops it reading segments that begin after the window.
    let part = partition(&mut client, &LEDGER, 1000);
    let expected = format!(
        "Subquery Scan on chunk\n  \
         Filter: ((chunk.upto - chunk.stored) < $10)\n  \
         ->  Limit\n        \
         ->  WindowAgg\n              \
         ->  Index Scan using {part}_pkey on {part}\n                    \
         Index Cond: ((party = $1) AND (last_time >= $2) AND (ROW(last_time, last_block, \
         last_seq, last_idx) > ROW($4, $5, $6, $7)))\n                    \
         Filter: (first_time <= $3)"
    );
    for (scan, after) in [
        (scan(None, 0, i64::MAX), None),
        (scan(Some(2), 5, 100), None),
        (scan(None, 0, 100), Some((7, 8, 9, 10))),
    ] {
        assert_eq!(
            chunk_plan(&mut client, &part, &scan, &chunk(after)),
            expected
        );
    }
    // The export's cut: seeks of the party's and the asset's hex, then the party's last segment,
    // one backward step of the primary key in its partition (the others pruned at run time).
    let (id, hex): (i32, String) = {
        let row = client
            .query_one(
                "SELECT p.id, encode(p.hex, 'hex') FROM parties p \
                 WHERE EXISTS (SELECT 1 FROM ledger_segments s WHERE s.party = p.id) LIMIT 1",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    let cut_part = partition(&mut client, &LEDGER, id);
    let cut = plan(
        &mut client,
        CUT_SQL,
        "bytea, bytea",
        &format!("'\\x{hex}', NULL"),
    );
    // Without the alias the planner numbers (`ledger_segments_9`).
    let on = format!(" on {cut_part} ");
    let cut: Vec<&str> = cut
        .lines()
        .map(|line| line.find(&on).map_or(line, |at| &line[..at + on.len() - 1]))
        .collect();
    assert_eq!(
        cut.join("\n"),
        format!(
            "Nested Loop Left Join\n  \
             InitPlan 1 (returns $0)\n    \
             ->  Index Scan using assets_hex_key on assets a\n          \
             Index Cond: (hex = $2)\n  \
             ->  Index Scan using parties_hex_key on parties p\n        \
             Index Cond: (hex = $1)\n  \
             ->  Limit\n        \
             ->  Merge Append\n              \
             Sort Key: ledger_segments.last_time DESC, ledger_segments.last_block DESC, \
             ledger_segments.last_seq DESC, ledger_segments.last_idx DESC\n              \
             ->  Index Scan Backward using {cut_part}_pkey on {cut_part}\n                    \
             Index Cond: (party = p.id)"
        )
    );
    // An ingest's reads and deletes, for a batch of two owners in two partitions: a range scan
    // or a seek per owner in its partition alone (pruned at run time, per owner), never a
    // pass over a table nor a visit to every partition.
    for table in [&LEDGER, &ORACLE] {
        let storage::segment::Table { name, owner, .. } = &table.columns;
        let other = (1001..1100)
            .find(|other| {
                partition(&mut client, table, *other) != partition(&mut client, table, 1000)
            })
            .unwrap();
        let mut parts = [1000, other].map(|owner| partition(&mut client, table, owner));
        parts.sort_by_key(|part| part[name.len() + 1..].parse::<u32>().unwrap());
        let touched = plan(
            &mut writer_client,
            &table.touched_sql(),
            "int[], bigint[], bigint[], bigint[], bigint[], bigint[], bytea, bigint",
            &format!(
                "'{{1000,{other}}}', '{{5,5}}', '{{5,5}}', '{{0,0}}', '{{0,0}}', '{{9,9}}', \
                 '\\x00000000', {}",
                table.packing.run
            ),
        );
        let scans: String = parts
            .iter()
            .map(|part| {
                format!(
                    "\n              ->  Index Scan using {part}_pkey on {part} s\n                    \
                     Index Cond: (({owner} = b.owner) AND (ROW(last_time, last_block, last_seq, \
                     last_idx) >= ROW(b.\"time\", b.block, b.seq, b.idx)))\n                    \
                     Filter: ((first_time + 0) <= b.high)"
                )
            })
            .collect();
        let tails: String = parts
            .iter()
            .map(|part| {
                format!(
                    "\n                          ->  Index Scan Backward using {part}_pkey on {part} s\
                     \n                                Index Cond: ({owner} = b.owner)"
                )
            })
            .collect();
        assert_eq!(
            touched,
            format!(
                "Nested Loop\n  \
                 ->  Function Scan on b\n  \
                 ->  Append\n        \
                 ->  Append{scans}\n        \
                 ->  Subquery Scan on tail\n              \
                 ->  Limit\n                    \
                 ->  Merge Append\n                          \
                 Sort Key: s.last_time DESC, s.last_block DESC, s.last_seq DESC, s.last_idx DESC\
                 {tails}"
            )
        );
        let delete = plan(
            &mut writer_client,
            &table.delete_sql(),
            "int[], bigint[], bigint[], bigint[], bigint[]",
            &format!("'{{1000,{other}}}', '{{5,5}}', '{{5,5}}', '{{0,0}}', '{{0,0}}'"),
        );
        let seeks: String = parts
            .iter()
            .map(|part| {
                format!(
                    "\n              ->  Index Scan using {part}_pkey on {part} s\n                    \
                     Index Cond: (({owner} = d.owner) AND (last_time = d.\"time\") AND \
                     (last_block = d.block) AND (last_seq = d.seq) AND (last_idx = d.idx))"
                )
            })
            .collect();
        assert_eq!(
            delete,
            format!(
                "Delete on {name} s\n  \
                 ->  Nested Loop\n        \
                 ->  Function Scan on d\n        \
                 ->  Append{seeks}"
            )
        );
    }
    // A page finds its spec's partition once per connection, through one of its segments (the
    // statement pruned to that partition as its executor starts)...
    let removed = DEFAULT_PARTITIONS - 1;
    let part = partition(&mut client, &ORACLE, 1000);
    assert_eq!(
        plan(&mut client, PARTITION_SQL, "int", "1000"),
        format!(
            "Limit\n  \
             ->  Merge Append\n        \
             Sort Key: s.last_time, s.last_block, s.last_seq, s.last_idx\n        \
             Subplans Removed: {removed}\n        \
             ->  Index Scan using {part}_pkey on {part} s\n              \
             Index Cond: (spec = $1)"
        )
    );
    // ... then reads it by name: ordered range scans of one spec's segments, at most $2 of them
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
                let (types, args) = if anchored {
                    (
                        "int, bigint, bigint, bigint, bigint, bigint",
                        "1000, 3, 100, 50, 50, 0",
                    )
                } else {
                    ("int, bigint, bigint", "1000, 3, 100")
                };
                let (end, dir, cmp) = match (descending, inclusive) {
                    (true, true) => ("first", " Backward", "<="),
                    (true, false) => ("first", " Backward", "<"),
                    (false, true) => ("last", "", ">="),
                    (false, false) => ("last", "", ">"),
                };
                let index = if descending {
                    format!("{part}_first")
                } else {
                    format!("{part}_pkey")
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
                    plan(&mut client, &scan.sql(&part), types, args),
                    format!(
                        "Subquery Scan on t\n  \
                         Filter: ((t.upto - t.lines) < $3)\n  \
                         ->  WindowAgg\n        \
                         ->  Subquery Scan on s\n              \
                         ->  Limit\n                    \
                         ->  Index Scan{dir} using {index} on {part} s\n                          \
                         Index Cond: {cond}"
                    ),
                    "{scan:?}"
                );
            }
        }
    }
}
