//! `SqliteStore::backup` while an ingest commits: the copy is the source as of one commit.

use std::sync::mpsc;

use super::TempStore;
use crate::sqlite::{SqliteConfig, SqliteStore};
use crate::suite::{self, block, ledger_row, oracle_row};
use crate::{Error, IngestBatch, IngestWriter, Store as _};

/// Block `height`: a line for each of parties 1 to 3 and a datum matched by spec 1.
fn block_batch(height: u64) -> IngestBatch {
    let time = height as i64 * 1000;
    IngestBatch {
        blocks: vec![block(height, Some(time), 4)],
        ledger_rows: (1..=3)
            .map(|party| {
                let label = format!("h{height}p{party}");
                ledger_row(&label, party, 1, (time, height, u64::from(party), 0))
            })
            .collect(),
        oracle_rows: vec![oracle_row(&format!("h{height}"), (time, height, 4), &[1])],
        ..IngestBatch::default()
    }
}

const BLOCKS: u64 = 40;

#[test]
fn a_backup_taken_during_an_ingest_answers_as_the_source_at_its_last_block() {
    let source = TempStore::new();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("backup.sqlite");
    let (committed, commits) = mpsc::channel();
    let chain = std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut writer = source.store.writer().unwrap();
            for height in 1..=BLOCKS {
                writer.commit(&block_batch(height)).unwrap();
                // The test may have stopped listening: the ingest goes on regardless.
                let _ = committed.send(height);
            }
        });
        // The backup starts once a few blocks are in, while the writer goes on committing.
        while commits.recv().unwrap() < 5 {}
        source.store.backup(&out).unwrap()
    });
    // Nothing beside it: the copy is one file, whole.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["backup.sqlite"]);
    let last = chain.last.expect("the copy holds blocks").height;
    assert!((5..=BLOCKS).contains(&last), "{last}");

    // The same blocks up to the copy's last one, committed into a store of their own.
    let reference = TempStore::new();
    let mut writer = reference.store.writer().unwrap();
    for height in 1..=last {
        writer.commit(&block_batch(height)).unwrap();
    }
    let copy = SqliteStore::open(&out, SqliteConfig::default()).unwrap();
    assert_eq!(
        suite::contents(&copy, &[1, 2, 3]),
        suite::contents(&reference.store, &[1, 2, 3])
    );
    let scrub = copy.scrub(&mut |_| {}).unwrap();
    assert!(scrub.findings.is_empty(), "{:?}", scrub.findings);

    // A backup never overwrites a file.
    drop(copy);
    assert!(matches!(
        source.store.backup(&out),
        Err(Error::Unavailable(_))
    ));
}
