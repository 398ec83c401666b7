//! Files and streams decoded on several threads: the records come out in the input's order
//! whatever the number of decoders and however the chunks fall, and a bad record far into the
//! input is named and stops the ingest in its place, as when decoding on one thread.

use std::sync::Arc;

use storage::IngestWriter;

use super::formats::Script;
use super::lines::{blocks, text};
use super::{TempStore, encode};
use crate::{IngestError, IngestOptions, Input, Location, RecordError};

/// Enough blocks for many chunks per decoder (seven records a block).
const BLOCKS: u64 = 600;

fn with_decoders(decoders: usize) -> IngestOptions<'static> {
    IngestOptions {
        decoders,
        ..IngestOptions::default()
    }
}

#[test]
fn any_number_of_decoders_stores_what_one_thread_stores() {
    let lines = blocks(BLOCKS);
    let text = text(&lines);
    let given = TempStore::new();
    // Records the caller frames are decoded on the framing thread, in order by construction.
    let records = lines.iter().map(|line| Some(encode(line))).collect();
    let stats = crate::ingest(
        Input::frames(Script::new(records)),
        &mut given.store.writer().unwrap(),
        &IngestOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(stats.blocks, BLOCKS);
    let expected = given.snapshot(&text);
    for decoders in [1, 2, 3, 4] {
        let temp = TempStore::new();
        let stats = crate::ingest(
            std::io::Cursor::new(text.clone().into_bytes()),
            &mut temp.store.writer().unwrap(),
            &with_decoders(decoders),
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(stats.blocks, BLOCKS, "{decoders} decoders");
        assert_eq!(temp.snapshot(&text), expected, "{decoders} decoders");
    }
}

#[test]
fn a_bad_record_far_into_the_input_stops_the_ingest_in_its_place() {
    let mut lines = blocks(BLOCKS);
    let per_block = lines.len() as u64 / BLOCKS;
    // A record in the middle of a block well past the first chunks.
    let bad = 3 * per_block * BLOCKS / 4 + 3;
    lines[bad as usize - 1] = "{\"id\": \"not a valid event".to_owned();
    let input = text(&lines);
    let offset: usize = lines[..bad as usize - 1].iter().map(|l| l.len() + 1).sum();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.ndjson");
    std::fs::write(&path, &input).unwrap();
    for decoders in [1, 3] {
        let temp = TempStore::new();
        let err = crate::ingest(
            Input::path(&path),
            &mut temp.store.writer().unwrap(),
            &with_decoders(decoders),
            &mut |_| {},
        )
        .unwrap_err();
        let IngestError::Record { location, cause } = err else {
            panic!("expected a record error, got {err:?}");
        };
        assert_eq!(
            location,
            Location {
                source: Arc::from(path.display().to_string()),
                record: bad,
                offset: offset as u64,
                line: Some(bad),
            }
        );
        assert!(matches!(cause, RecordError::Json(_)), "{cause}");
        let bad_block = (bad - 1) / per_block + 1;
        let mut writer = temp.store.writer().unwrap();
        for height in [1, bad_block - 1, bad_block, bad_block + 1, BLOCKS] {
            let stored = !writer.blocks(height).unwrap().is_empty();
            assert_eq!(
                stored,
                height < bad_block,
                "block {height}, {decoders} decoders"
            );
        }
    }
}

#[test]
fn a_record_after_a_file_without_a_last_newline_is_named_in_its_own_file() {
    let lines = blocks(2);
    let (first, second) = lines.split_at(lines.len() / 2);
    let dir = tempfile::tempdir().unwrap();
    // The first file's last line has no newline; the second file's second record is bad.
    std::fs::write(dir.path().join("1.ndjson"), first.join("\n")).unwrap();
    let mut rest = second.to_vec();
    rest[1] = "[]".to_owned();
    std::fs::write(dir.path().join("2.ndjson"), text(&rest)).unwrap();
    let temp = TempStore::new();
    let err = crate::ingest(
        Input::path(dir.path()),
        &mut temp.store.writer().unwrap(),
        &with_decoders(2),
        &mut |_| {},
    )
    .unwrap_err();
    let IngestError::Record { location, .. } = err else {
        panic!("expected a record error, got {err:?}");
    };
    let offset = rest[0].len() as u64 + 1;
    assert_eq!(
        location,
        Location {
            source: Arc::from(dir.path().join("2.ndjson").display().to_string()),
            record: 2,
            offset,
            line: Some(2),
        }
    );
}
