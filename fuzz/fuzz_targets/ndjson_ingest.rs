//! Ingest of newline-delimited JSON events (`ingest::ingest`) into a fresh SQLite store.
//!
//! Input: any bytes, read as the event stream. Checks: no panic; the ingest either succeeds or
//! reports a bad line (never a store failure, which would mean invalid values reached the store);
//! a successful ingest is idempotent: running it again over the same store adds nothing.

#![no_main]

use std::path::Path;

use ingest::{IngestError, IngestOptions, IngestStats, ingest};
use libfuzzer_sys::fuzz_target;
use storage::{SqliteConfig, SqliteStore};

fuzz_target!(|data: &[u8]| {
    // A RAM-backed directory when there is one: a store per run is most of the run's cost.
    let shm = Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .expect("a temporary directory");
    let store =
        SqliteStore::open(dir.path().join("fuzz.db"), SqliteConfig::default()).expect("a store");
    match run(&store, data) {
        Ok(_) => {
            let again = run(&store, data).expect("a second run succeeds as the first did");
            assert_eq!(
                (again.events, again.ledger_rows, again.oracle_data),
                (0, 0, 0),
                "a second run stored something: {again:?}"
            );
        }
        Err(IngestError::Line { .. }) => {}
        Err(other) => panic!("not a line error: {other:?}"),
    }
});

fn run(store: &SqliteStore, data: &[u8]) -> Result<IngestStats, IngestError> {
    let mut writer = store.writer().expect("a writer");
    ingest(
        std::io::Cursor::new(data.to_vec()),
        &mut writer,
        &IngestOptions::default(),
        &mut |_| {},
    )
}
