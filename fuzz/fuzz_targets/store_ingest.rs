//! The checks shared by the targets that ingest a whole input into a fresh SQLite store.
//!
//! Checks: no panic; the ingest succeeds, or it stops at a record it names (never a store
//! failure, which would mean invalid values reached the store; a read error only for an input
//! that starts as gzip and is not); a second run over the same store stores nothing and ends
//! as the first did, at the same record.

use std::io::Cursor;
use std::path::Path;

use ingest::{Format, IngestError, IngestOptions, IngestStats, ingest};
use storage::{SqliteConfig, SqliteStore};

/// The two bytes every gzip member starts with: such an input is decompressed first.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Ingests `data` as `format` twice into a new store and checks both runs.
pub fn check(data: &[u8], format: Format) {
    // A RAM-backed directory when there is one: a store per input is most of an input's cost.
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .expect("a temporary directory");
    let store =
        SqliteStore::open(dir.path().join("fuzz.db"), SqliteConfig::default()).expect("a store");
    let (first, _) = run(&store, data, format);
    let (second, stored_again) = run(&store, data, format);
    assert_eq!(
        (stored_again.events, stored_again.ledger_rows, stored_again.oracle_data),
        (0, 0, 0),
        "a second run stored something: {stored_again:?}"
    );
    match (&first, &second) {
        (Ok(_), Ok(_)) => {}
        (Err(error), Err(again)) => {
            check_error(error, data);
            assert_eq!(
                error.to_string(),
                again.to_string(),
                "a second run ended elsewhere"
            );
        }
        _ => panic!("the runs disagree: {first:?} then {second:?}"),
    }
}

/// A record error names a place inside the input; other errors are failures of ours.
fn check_error(error: &IngestError, data: &[u8]) {
    match error {
        IngestError::Record { location, .. } => {
            assert_eq!(&*location.source, "input");
            assert!(location.record >= 1, "records count from 1: {location:?}");
            if !data.starts_with(&GZIP_MAGIC) {
                assert!(
                    location.offset <= data.len() as u64,
                    "an offset beyond the input: {location:?}"
                );
            }
        }
        IngestError::Read { .. } if data.starts_with(&GZIP_MAGIC) => {}
        other => panic!("not a record error: {other:?}"),
    }
}

/// One ingest; its result and what the last commit reported (nothing if none).
fn run(
    store: &SqliteStore,
    data: &[u8],
    format: Format,
) -> (Result<IngestStats, IngestError>, IngestStats) {
    let mut writer = store.writer().expect("a writer");
    let options = IngestOptions {
        format: Some(format),
        ..IngestOptions::default()
    };
    let mut committed = IngestStats::default();
    let result = ingest(
        Cursor::new(data.to_vec()),
        &mut writer,
        &options,
        &mut |stats| committed = stats.clone(),
    );
    (result, committed)
}
