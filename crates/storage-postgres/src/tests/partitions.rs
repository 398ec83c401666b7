//! Migration 8: the tables of segments hash-partitioned by owner, into as many partitions as
//! the operator asked for once (`server migrate --partitions N`), or [`DEFAULT_PARTITIONS`].
//! Migration 10: `blocks` range-partitioned by height, its partitions made by the writer.

use super::{NEVER, TestDatabase, incompatible, tables};
use crate::schema::{BLOCKS_PER_PARTITION, DEFAULT_PARTITIONS, MAX_PARTITIONS, MIGRATIONS};
use crate::segments::{LEDGER, ORACLE};
use crate::{PgConfig, PgStore};
use oracle_core::PaginationParams;
use storage::backend::Store as _;
use storage::{Health as _, IngestBatch, IngestWriter as _, suite};

/// How many partitions each table of segments has, ledger's then oracle data's.
pub(super) fn partitions(db: &TestDatabase) -> [usize; 2] {
    [LEDGER.name, ORACLE.name].map(|table| partition_names(db, table).len())
}

/// The names of the partitions of `blocks`, sorted.
pub(super) fn block_partitions(db: &TestDatabase) -> Vec<String> {
    partition_names(db, "blocks")
}

/// The names of the partitions of `table`, sorted.
fn partition_names(db: &TestDatabase, table: &str) -> Vec<String> {
    db.client()
        .query(
            "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
             WHERE i.inhparent = to_regclass($1) ORDER BY 1",
            &[&table],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[test]
fn a_new_database_gets_the_default_count_of_partitions() {
    let Some(db) = TestDatabase::create("a_new_database_gets_the_default_count") else {
        return;
    };
    PgStore::writer(db.url()).unwrap();
    let default = DEFAULT_PARTITIONS as usize;
    assert_eq!(partitions(&db), [default, default]);
}

#[test]
fn the_count_asked_for_is_made_once_and_another_is_refused_later() {
    let Some(db) = TestDatabase::create("the_count_asked_for_is_made_once") else {
        return;
    };
    let migrated = PgStore::migrate_with(db.url(), Some(3)).unwrap();
    assert_eq!((migrated.from, migrated.to), (0, MIGRATIONS.len() as u32));
    assert_eq!(partitions(&db), [3, 3]);
    // The same count again, or none, finds nothing to do; another is refused, untouched.
    let latest = MIGRATIONS.len() as u32;
    assert_eq!(
        PgStore::migrate_with(db.url(), Some(3)).unwrap().from,
        latest
    );
    assert_eq!(PgStore::migrate(db.url()).unwrap().from, latest);
    incompatible(
        PgStore::migrate_with(db.url(), Some(16)),
        "cannot make 16 partitions: the database's tables of segments are partitioned into 3 \
         already",
    );
    assert_eq!(partitions(&db), [3, 3]);
    PgStore::open(db.url(), PgConfig::default())
        .unwrap()
        .check()
        .unwrap();
}

#[test]
fn a_count_out_of_range_is_refused_and_writes_nothing() {
    let Some(db) = TestDatabase::create("a_count_out_of_range_is_refused") else {
        return;
    };
    for asked in [0, MAX_PARTITIONS + 1] {
        incompatible(
            PgStore::migrate_with(db.url(), Some(asked)),
            &format!("cannot make {asked} partitions: the count must be between 1 and 1024"),
        );
    }
    assert_eq!(tables(&db), 0);
}

#[test]
fn a_page_reads_the_first_data_of_an_owner_it_found_empty_before() {
    let Some(db) = TestDatabase::create("a_page_reads_the_first_data") else {
        return;
    };
    let mut writer = PgStore::writer(db.url()).unwrap();
    // One connection, so that the second page is read where the first found no partition.
    let config = PgConfig {
        max_connections: 1,
        ..PgConfig::default()
    };
    let store = PgStore::open(db.url(), config).unwrap();
    let all = |store: &PgStore| suite::page(store, None, PaginationParams::default()).edges;
    assert!(all(&store).is_empty());
    let batch = IngestBatch {
        oracle_rows: vec![suite::oracle_row("first", (1, 1, 1), &[1])],
        ..IngestBatch::default()
    };
    suite::commit(&mut writer, &batch);
    assert_eq!(all(&store).len(), 1);
    assert_eq!(suite::spec_labels(&store, 1), "first");
}

/// One line per partition of both tables of segments, `expression` of its `pg_class` row `c`
/// (and whatever `joins` adds), sorted.
fn per_partition(db: &TestDatabase, expression: &str, joins: &str) -> Vec<String> {
    let mut lines: Vec<String> = db
        .client()
        .query(
            &format!(
                "SELECT {expression} FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
                 {joins} WHERE i.inhparent IN (to_regclass($1), to_regclass($2))"
            ),
            &[&LEDGER.name, &ORACLE.name],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    lines.sort();
    lines
}

/// The partitions' autovacuum settings and their TOAST tables', each `table: options`, sorted.
fn vacuum_settings(db: &TestDatabase) -> Vec<String> {
    per_partition(
        db,
        "c.relname || ': ' || array_to_string(coalesce(c.reloptions, '{}'), ' ') \
         || ' / ' || array_to_string(coalesce(t.reloptions, '{}'), ' ')",
        "JOIN pg_class t ON t.oid = c.reltoastrelid",
    )
}

/// Every partition, and its TOAST table, is vacuumed after a thousand dead versions at full
/// speed; a partition that lost the settings gets them back when the next writer opens.
#[test]
fn every_partition_is_vacuumed_early_and_keeps_it() {
    let Some(db) = TestDatabase::create("every_partition_is_vacuumed_early") else {
        return;
    };
    PgStore::migrate_with(db.url(), Some(3)).unwrap();
    let wanted = "autovacuum_vacuum_scale_factor=0 autovacuum_vacuum_threshold=1000 \
                  autovacuum_vacuum_cost_delay=0";
    let tuned = vacuum_settings(&db);
    assert_eq!(tuned.len(), 6, "{tuned:?}");
    for line in &tuned {
        assert!(line.ends_with(&format!(": {wanted} / {wanted}")), "{line}");
    }
    db.client()
        .batch_execute(
            "ALTER TABLE ledger_segments_1 RESET (autovacuum_vacuum_threshold, \
             toast.autovacuum_vacuum_cost_delay)",
        )
        .unwrap();
    assert_ne!(vacuum_settings(&db), tuned);
    drop(PgStore::writer(db.url()).unwrap());
    assert_eq!(vacuum_settings(&db), tuned);
    // Settled, the partitions are not altered again: their catalog rows keep their versions.
    let versions = catalog_versions(&db);
    drop(PgStore::writer(db.url()).unwrap());
    PgStore::migrate(db.url()).unwrap();
    assert_eq!(catalog_versions(&db), versions);
}

/// The transaction that last wrote each partition's catalog row (`pg_class.xmin`), sorted.
fn catalog_versions(db: &TestDatabase) -> Vec<String> {
    per_partition(db, "c.relname || ' ' || c.xmin::text", "")
}

/// A batch of blocks at `heights`, each with one ledger line of party 1 labelled by its height.
fn blocks_at(heights: &[u64]) -> IngestBatch {
    IngestBatch {
        blocks: heights.iter().map(|height| super::block(*height)).collect(),
        ..suite::ledger_batch(
            heights
                .iter()
                .map(|height| {
                    let time = *height as i64 * 10;
                    suite::ledger_row(&height.to_string(), 1, 1, (time, *height, 1, 0))
                })
                .collect(),
        )
    }
}

/// A new database whose writer stored the blocks just before and at the first partition's end
/// (no partition of `blocks` before them).
fn across_a_boundary(test: &str) -> Option<(TestDatabase, crate::PgWriter)> {
    let db = TestDatabase::create(test)?;
    let per = BLOCKS_PER_PARTITION as u64;
    let mut writer = PgStore::writer(db.url()).unwrap();
    assert_eq!(block_partitions(&db), Vec::<String>::new());
    suite::commit(&mut writer, &blocks_at(&[per - 1, per]));
    Some((db, writer))
}

/// Migration 10: `blocks` is range-partitioned by height, and the writer makes each partition
/// when a batch first reaches it, whichever writer that is.
#[test]
fn blocks_are_range_partitioned_as_batches_reach_new_heights() {
    let Some((db, mut writer)) = across_a_boundary("blocks_are_range_partitioned") else {
        return;
    };
    let per = BLOCKS_PER_PARTITION as u64;
    let first_two = ["blocks_from_0".to_owned(), format!("blocks_from_{per}")];
    assert_eq!(block_partitions(&db), first_two);
    let store = PgStore::open(db.url(), PgConfig::default()).unwrap();
    assert_eq!(store.chain_tip().unwrap(), super::tip(per - 1, per));
    assert_eq!(writer.blocks(per).unwrap().len(), 1);
    // A batch within the known partitions makes none; a new writer finds the stored ones.
    suite::commit(&mut writer, &blocks_at(&[per + 1]));
    assert_eq!(block_partitions(&db), first_two);
    drop(writer);
    let mut writer = PgStore::writer(db.url()).unwrap();
    suite::commit(&mut writer, &blocks_at(&[per + 2, 2 * per]));
    let mut all_three = first_two.to_vec();
    all_three.push(format!("blocks_from_{}", 2 * per));
    assert_eq!(block_partitions(&db), all_three);
    let wanted = super::tip(per - 1, 2 * per);
    assert_eq!(
        store.tip.wait_until(NEVER, |seen, _| *seen == wanted),
        wanted
    );
}

/// A batch staged after others that reaches a new partition of `blocks`: the partition is made
/// outside any transaction (making it locks `blocks` against readers until its transaction
/// ends), so what was staged before is committed first, and the rest at the commit.
#[test]
fn a_staged_batch_reaching_a_new_partition_commits_what_was_staged_first() {
    let Some((db, mut writer)) = across_a_boundary("a_staged_batch_reaching_a_new_partition")
    else {
        return;
    };
    let per = BLOCKS_PER_PARTITION as u64;
    let store = PgStore::open(db.url(), PgConfig::default()).unwrap();
    writer.stage(&blocks_at(&[per + 1])).unwrap();
    store.refresh_chain_tip().unwrap();
    assert_eq!(store.chain_tip().unwrap(), super::tip(per - 1, per));
    writer.stage(&blocks_at(&[2 * per])).unwrap();
    store.refresh_chain_tip().unwrap();
    assert_eq!(store.chain_tip().unwrap(), super::tip(per - 1, per + 1));
    assert_eq!(
        block_partitions(&db).last(),
        Some(&format!("blocks_from_{}", 2 * per))
    );
    suite::commit(&mut writer, &IngestBatch::default());
    store.refresh_chain_tip().unwrap();
    assert_eq!(store.chain_tip().unwrap(), super::tip(per - 1, 2 * per));
    let lines = suite::export(&store, &suite::filter(1, None, None, None)).0;
    let heights = [per - 1, per, per + 1, 2 * per].map(|height| height.to_string());
    assert_eq!(lines, heights);
}

/// An operator archives the oldest heights by detaching their partition: no answer changes but
/// the chain's first height, and the ingest goes on.
#[test]
fn the_oldest_block_partition_can_be_detached_and_archived() {
    let Some((db, writer)) = across_a_boundary("the_oldest_block_partition_can_be_detached") else {
        return;
    };
    let per = BLOCKS_PER_PARTITION as u64;
    let store = PgStore::open(db.url(), PgConfig::default()).unwrap();
    let export = |store: &PgStore| suite::export(store, &suite::filter(1, None, None, None)).0;
    let before = export(&store);
    assert_eq!(before, [(per - 1).to_string(), per.to_string()]);
    db.client()
        .batch_execute("ALTER TABLE blocks DETACH PARTITION blocks_from_0")
        .unwrap();
    assert_eq!(block_partitions(&db), [format!("blocks_from_{per}")]);
    store.check().unwrap();
    assert_eq!(export(&store), before);
    // A re-run of archived heights (a writer started again from before them) needs their
    // partition again: refused while the detached table is kept (the error names it), made
    // anew once it is dropped.
    drop(writer);
    let mut writer = PgStore::writer(db.url()).unwrap();
    let again = blocks_at(&[per - 2]);
    let refused = format!("{:?}", writer.commit(&again).unwrap_err());
    assert!(refused.contains("blocks_from_0"), "{refused}");
    db.client()
        .batch_execute("DROP TABLE blocks_from_0")
        .unwrap();
    suite::commit(&mut writer, &again);
    assert_eq!(
        block_partitions(&db),
        ["blocks_from_0".to_owned(), format!("blocks_from_{per}")]
    );
    db.client()
        .batch_execute(
            "ALTER TABLE blocks DETACH PARTITION blocks_from_0; DROP TABLE blocks_from_0",
        )
        .unwrap();
    suite::commit(&mut writer, &blocks_at(&[per + 1]));
    // The next commit's announcement brings the tip read again, from the partitions left.
    let wanted = super::tip(per, per + 1);
    assert_eq!(
        store.tip.wait_until(NEVER, |seen, _| *seen == wanted),
        wanted
    );
    // The re-run's line is kept: the segments never depended on the archived blocks.
    let labels: Vec<String> = [per - 2, per - 1, per, per + 1]
        .iter()
        .map(u64::to_string)
        .collect();
    assert_eq!(export(&store), labels);
}
