//! Every input form stores what NDJSON stores: buffer files, gzip, directories, readers that
//! trickle, a caller's frames with a peer that goes away; framing and decoding errors name the
//! record and keep every whole block before it; enum codes we do not know are kept.

use std::io::{Read, Write};
use std::sync::Arc;

use flate2::Compression;
use flate2::write::GzEncoder;
use serde_json::json;
use storage::IngestWriter;

use super::lines::{self, A, B, Body, block, blocks, entry, text};
use super::{TempStore, join, sample_lines};
use super::{buffer, encode};
use crate::{
    Encoding, EventError, Format, Frames, IngestError, IngestOptions, IngestStats, Input, Location,
    RecordError, Step, StreamError,
};

impl TempStore {
    fn ingest_input(
        &self,
        input: impl Into<Input>,
        options: &IngestOptions<'_>,
    ) -> Result<IngestStats, IngestError> {
        crate::ingest(
            input,
            &mut self.store.writer().unwrap(),
            options,
            &mut |_| {},
        )
    }

    fn ingest_bytes(&self, bytes: &[u8]) -> Result<IngestStats, IngestError> {
        self.ingest_input(
            std::io::Cursor::new(bytes.to_vec()),
            &IngestOptions::default(),
        )
    }
}

/// A reader that hands out at most `step` bytes per read, so that records straddle reads.
struct Trickle {
    bytes: std::io::Cursor<Vec<u8>>,
    step: usize,
}

impl Read for Trickle {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let len = buf.len().min(self.step);
        self.bytes.read(&mut buf[..len])
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::fast());
    encoder.write_all(bytes).unwrap();
    encoder.finish().unwrap()
}

/// The streams every equivalence test runs: the sample of real events, and a hand-made one
/// with ACCOUNT events mixed in.
fn streams() -> Vec<Vec<String>> {
    let sample = sample_lines().into_iter().map(str::to_owned).collect();
    vec![sample, blocks(4)]
}

#[test]
fn buffer_file_stores_what_ndjson_stores() {
    for lines in streams() {
        let ndjson = text(&lines);
        let reference = TempStore::new();
        let expected_stats = reference.ingest(&ndjson).unwrap();
        let expected = reference.snapshot(&ndjson);
        let bytes = buffer(&lines);
        for input in [bytes.clone(), gzip(&bytes), gzip(ndjson.as_bytes())] {
            let temp = TempStore::new();
            assert_eq!(temp.ingest_bytes(&input).unwrap(), expected_stats);
            assert_eq!(temp.snapshot(&ndjson), expected);
        }
        // Records and lines straddling reads of every size.
        for step in [1, 7, 4096] {
            for input in [bytes.clone(), ndjson.clone().into_bytes()] {
                let temp = TempStore::new();
                let reader = Trickle {
                    bytes: std::io::Cursor::new(input),
                    step,
                };
                temp.ingest_input(Input::reader("trickle", reader), &IngestOptions::default())
                    .unwrap();
                assert_eq!(temp.snapshot(&ndjson), expected, "step {step}");
            }
        }
    }
}

#[test]
fn multi_member_gzip_is_read_to_its_end() {
    let lines = blocks(4);
    let ndjson = text(&lines);
    let expected = TempStore::with(&ndjson).snapshot(&ndjson);
    let mut input = gzip(&buffer(&lines[..9]));
    let mut rest = Vec::new();
    for (seq, line) in lines[9..].iter().enumerate() {
        bus_proto::buffer::write_record(&mut rest, seq as u64, &encode(line));
    }
    input.extend(gzip(&rest));
    let temp = TempStore::new();
    temp.ingest_bytes(&input).unwrap();
    assert_eq!(temp.snapshot(&ndjson), expected);
}

#[test]
fn directory_is_read_in_file_name_order_across_formats() {
    let lines = blocks(4);
    let ndjson = text(&lines);
    let expected = TempStore::with(&ndjson).snapshot(&ndjson);
    let dir = tempfile::tempdir().unwrap();
    // Cut inside blocks (a block goes on in the next file), written last file first.
    let parts = [
        ("03-rest.ndjson.gz", gzip(text(&lines[20..]).as_bytes())),
        ("02-middle", text(&lines[11..20]).into_bytes()),
        ("01-start.gz", gzip(&buffer(&lines[3..11]))),
        ("00-first", buffer(&lines[..3])),
    ];
    for (name, bytes) in &parts {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    let temp = TempStore::new();
    let stats = temp
        .ingest_input(Input::path(dir.path()), &IngestOptions::default())
        .unwrap();
    assert_eq!(stats.events, lines.len() as u64);
    assert_eq!(temp.snapshot(&ndjson), expected);
}

#[test]
fn format_is_detected_unless_given() {
    let lines = blocks(2);
    let ndjson = text(&lines);
    let forced = |format| IngestOptions {
        format: Some(format),
        ..IngestOptions::default()
    };
    let temp = TempStore::new();
    temp.ingest_input(
        std::io::Cursor::new(buffer(&lines)),
        &forced(Format::VegaBuffer),
    )
    .unwrap();
    assert_eq!(
        temp.snapshot(&ndjson),
        TempStore::with(&ndjson).snapshot(&ndjson)
    );
    // Forced the wrong way, the first record is refused: "{\"id" is a size of 2 GB.
    match TempStore::new().ingest_input(
        std::io::Cursor::new(ndjson.clone()),
        &forced(Format::VegaBuffer),
    ) {
        Err(IngestError::Record {
            location,
            cause: RecordError::TooLarge { .. },
        }) => assert_eq!((location.record, location.offset), (1, 0)),
        other => panic!("expected a too large record, got {other:?}"),
    }
    match TempStore::new().ingest_input(
        std::io::Cursor::new(buffer(&lines)),
        &forced(Format::Ndjson),
    ) {
        Err(IngestError::Record { location, .. }) => {
            assert_eq!((location.record, location.line), (1, Some(1)));
        }
        other => panic!("expected a bad line, got {other:?}"),
    }
    assert_eq!(Format::detect(b""), Format::Ndjson);
    assert_eq!(Format::detect(b" \n{"), Format::Ndjson);
    assert_eq!(Format::detect(&[0, 0, 1, 0]), Format::VegaBuffer);
}

/// Three blocks of five events each (records 1–15): begin, time, ledger, account, end.
pub(crate) fn three_blocks() -> Vec<String> {
    (1..=3)
        .flat_map(|height| {
            block(
                height,
                lines::T1 + height as i64,
                vec![
                    Body::Ledger(vec![entry(Some(A), Some(B), &height.to_string())]),
                    Body::Account,
                ],
            )
        })
        .collect()
}

/// The byte offset of each record of `buffer(lines)`, and the end.
fn offsets(lines: &[String]) -> Vec<usize> {
    let mut offsets = vec![0];
    for line in lines {
        offsets.push(offsets.last().unwrap() + bus_proto::buffer::HEADER_LEN + encode(line).len());
    }
    offsets
}

/// Ingests `bad` from a file: the error must be at `record` (1-based) and match `cause`;
/// blocks before `stored_blocks` stay, none after; the good stream then completes the store.
#[track_caller]
fn check_bad_file(
    bad: &[u8],
    options: &IngestOptions<'_>,
    record: u64,
    stored_blocks: u64,
    cause: impl Fn(&RecordError) -> bool,
) {
    let lines = three_blocks();
    let good = text(&lines);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.buf");
    std::fs::write(&path, bad).unwrap();
    let temp = TempStore::new();
    match temp.ingest_input(Input::path(&path), options) {
        Err(IngestError::Record {
            location,
            cause: found,
        }) => {
            let expected = Location {
                source: Arc::from(path.display().to_string()),
                record,
                offset: offsets(&lines)[record as usize - 1] as u64,
                line: None,
            };
            assert_eq!(location, expected, "{found}");
            assert!(cause(&found), "unexpected cause: {found}");
            let message = IngestError::Record {
                location,
                cause: found,
            }
            .to_string();
            assert!(
                message.contains(&format!(
                    "{}: record {record} at byte offset",
                    path.display()
                )),
                "{message}"
            );
        }
        other => panic!("expected a record error, got {other:?}"),
    }
    let mut writer = temp.store.writer().unwrap();
    for height in 1..=3 {
        let stored = !writer.blocks(height).unwrap().is_empty();
        assert_eq!(stored, height <= stored_blocks, "block {height}");
    }
    drop(writer);
    std::fs::write(&path, buffer(&lines)).unwrap();
    temp.ingest_input(Input::path(&path), options).unwrap();
    assert_eq!(temp.snapshot(&good), TempStore::with(&good).snapshot(&good));
}

/// `three_blocks` as a buffer with record `record` (1-based) replaced by raw `bytes`.
fn with_record(record: usize, bytes: &[u8]) -> Vec<u8> {
    let lines = three_blocks();
    let mut out = buffer(&lines[..record - 1]);
    out.extend_from_slice(bytes);
    let mut rest = Vec::new();
    for line in &lines[record..] {
        bus_proto::buffer::write_record(&mut rest, 0, &encode(line));
    }
    out.extend(rest);
    out
}

fn framed(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    bus_proto::buffer::write_record(&mut out, 0, payload);
    out
}

#[test]
fn framing_errors_name_the_record_and_keep_the_blocks_before_it() {
    let lines = three_blocks();
    let whole = buffer(&lines);
    let ends = offsets(&lines);
    let defaults = &IngestOptions::default();
    // Truncated inside the last record's payload, then inside its header.
    let cut = &whole[..ends[14] + 20];
    check_bad_file(cut, defaults, 15, 2, |cause| {
        matches!(cause, RecordError::Truncated { available: 20, .. })
    });
    let cut = &whole[..ends[14] + 5];
    check_bad_file(cut, defaults, 15, 2, |cause| {
        matches!(
            cause,
            RecordError::Truncated {
                needed: 12,
                available: 5
            }
        )
    });
    // A size beyond the bound: refused from its header, nothing of it read.
    let mut absurd = whole[..ends[7]].to_vec();
    absurd.extend_from_slice(&[0xff, 0xff, 0xff, 0xf0, 0, 0, 0, 0, 0, 0, 0, 0]);
    check_bad_file(
        &absurd,
        defaults,
        8,
        1,
        |cause| matches!(cause, RecordError::TooLarge { size, .. } if *size == 0xffff_fff0 - 8),
    );
    // The bound is inclusive: the largest good record passes, one byte more does not.
    let largest = lines.iter().map(|line| encode(line).len()).max().unwrap();
    let small = &IngestOptions {
        max_record_bytes: largest,
        ..IngestOptions::default()
    };
    let big = with_record(8, &framed(&vec![0; largest + 1]));
    check_bad_file(
        &big,
        small,
        8,
        1,
        |cause| matches!(cause, RecordError::TooLarge { size, max } if *size == largest as u64 + 1 && *max == largest),
    );
    let size_too_small = with_record(8, &[0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0]);
    check_bad_file(&size_too_small, defaults, 8, 1, |cause| {
        matches!(cause, RecordError::InvalidSize { size: 7 })
    });
}

#[test]
fn decoding_errors_name_the_record_and_keep_the_blocks_before_it() {
    let defaults = &IngestOptions::default();
    let is_protobuf = |cause: &RecordError| matches!(cause, RecordError::Protobuf(_));
    // A field whose length runs past the record, a bad wire type, a string that is not UTF-8.
    check_bad_file(
        &with_record(8, &framed(&[0x0a, 0x09, b'2'])),
        defaults,
        8,
        1,
        is_protobuf,
    );
    check_bad_file(
        &with_record(8, &framed(&[0x0f])),
        defaults,
        8,
        1,
        is_protobuf,
    );
    check_bad_file(
        &with_record(8, &framed(&[0x0a, 1, 0xff])),
        defaults,
        8,
        1,
        is_protobuf,
    );
    // The id as a number: not a string.
    check_bad_file(
        &with_record(8, &framed(&[0x08, 5])),
        defaults,
        8,
        1,
        is_protobuf,
    );
    let bad_id = bus_proto::BusEvent {
        id: "2-x".to_owned(),
        r#type: bus_proto::event_type::END_BLOCK,
        ..bus_proto::BusEvent::default()
    };
    let bad_id = framed(&prost::Message::encode_to_vec(&bad_id));
    check_bad_file(
        &with_record(8, &bad_id),
        defaults,
        8,
        1,
        |cause| matches!(cause, RecordError::Event(EventError::InvalidId(id)) if id == "2-x"),
    );
    check_bad_file(&with_record(8, &framed(&[])), defaults, 8, 1, |cause| {
        matches!(cause, RecordError::Event(EventError::MissingId))
    });
    let no_payload = bus_proto::BusEvent {
        id: "2-3".to_owned(),
        r#type: bus_proto::event_type::LEDGER_MOVEMENTS,
        ..bus_proto::BusEvent::default()
    };
    let no_payload = framed(&prost::Message::encode_to_vec(&no_payload));
    check_bad_file(&with_record(8, &no_payload), defaults, 8, 1, |cause| {
        matches!(cause, RecordError::Event(EventError::MissingPayload { .. }))
    });
}

#[test]
fn unknown_enum_codes_are_stored_as_their_number_in_both_formats() {
    let mut unknown = entry(Some(A), Some(B), "7");
    unknown["type"] = json!("77");
    unknown["fromAccount"]["type"] = json!(99);
    let lines = block(1, lines::T1, vec![Body::Ledger(vec![unknown])]);
    let ndjson = text(&lines);
    let from_ndjson = TempStore::with(&ndjson).snapshot(&ndjson);
    let temp = TempStore::new();
    temp.ingest_bytes(&buffer(&lines)).unwrap();
    let from_buffer = temp.snapshot(&ndjson);
    assert_eq!(from_buffer, from_ndjson);
    let (_, export) = &from_buffer.exports[0];
    assert!(
        export.contains(&format!(
            ",77,{},,{A},99,100,,{B},GENERAL,200",
            lines::ASSET
        )),
        "{export}"
    );
}

/// Frames a test drives: records of a live source, `None` where its peer goes away (mid-block,
/// say, to come back and send the block again).
pub(super) struct Script {
    steps: std::vec::IntoIter<Option<Vec<u8>>>,
    current: Vec<u8>,
    record: u64,
}

impl Script {
    pub(super) fn new(steps: Vec<Option<Vec<u8>>>) -> Self {
        Self {
            steps: steps.into_iter(),
            current: Vec::new(),
            record: 0,
        }
    }
}

impl Frames for Script {
    fn advance(&mut self) -> Result<Step, IngestError> {
        Ok(match self.steps.next() {
            None => Step::End,
            Some(None) => Step::PeerGone,
            Some(Some(bytes)) => {
                self.record += 1;
                self.current = bytes;
                Step::Record(Encoding::Protobuf)
            }
        })
    }

    fn record(&self) -> &[u8] {
        &self.current
    }

    fn location(&self) -> Location {
        Location {
            source: "script".into(),
            record: self.record,
            offset: 0,
            line: None,
        }
    }
}

#[test]
fn a_block_cut_by_its_peer_waits_for_its_rest_on_the_next_connection() {
    /// Block 2 (records 6–10) is cut after its ledger event (record 8); the next connection
    /// starts at record `resume_from`. The store ends as one clean run of `stored` (the
    /// indices of the records stored) leaves it.
    #[track_caller]
    fn check(resume_from: usize, stored: &[usize], (incomplete, skipped): (u64, u64)) {
        let lines = three_blocks();
        let records: Vec<_> = lines.iter().map(|line| Some(encode(line))).collect();
        let mut steps = records[..8].to_vec();
        steps.push(None);
        steps.extend(records[resume_from..].iter().cloned());
        let temp = TempStore::new();
        let script = Script::new(steps);
        let stats = temp
            .ingest_input(Input::frames(script), &IngestOptions::default())
            .unwrap();
        let expected: Vec<String> = stored.iter().map(|&idx| lines[idx].clone()).collect();
        let expected = text(&expected);
        assert_eq!(
            (stats.incomplete_events, stats.skipped_events),
            (incomplete, skipped)
        );
        assert_eq!(stats.events, stored.len() as u64);
        let all = text(&lines);
        assert_eq!(
            temp.snapshot(&all),
            TempStore::with(&expected).snapshot(&all)
        );
    }

    let all: Vec<usize> = (0..15).collect();
    // Resent from the start of block 2: its first three events are duplicates.
    check(5, &all, (0, 3));
    // Resent from block 1, stored already and skipped: another block first drops what came of
    // block 2, which then comes again whole.
    check(0, &all, (3, 5));
    // Continued where the first connection stopped.
    check(8, &all, (0, 0));
    // The next connection goes on with block 3: block 2's rest never comes, it is dropped, and
    // block 3 would leave a hole: the ingest stops there (a socket would close the connection
    // and go on with the next one), with block 1 stored.
    let lines = three_blocks();
    let mut steps: Vec<_> = lines[..8].iter().map(|line| Some(encode(line))).collect();
    steps.push(None);
    steps.extend(lines[10..].iter().map(|line| Some(encode(line))));
    let temp = TempStore::new();
    match temp.ingest_input(Input::frames(Script::new(steps)), &IngestOptions::default()) {
        Err(IngestError::Stream(StreamError::Missing { missing, from, to })) => {
            assert_eq!((missing, from, to), (2, 1, 3));
        }
        other => panic!("expected block 2 missing, got {other:?}"),
    }
    let all = text(&lines);
    assert_eq!(
        temp.snapshot(&all),
        TempStore::with(&text(&lines[..5])).snapshot(&all)
    );
}

#[test]
fn blank_lines_and_a_last_line_without_newline_frame_as_ndjson() {
    let lines = blocks(2);
    let expected = TempStore::with(&text(&lines)).snapshot(&text(&lines));
    let mut input = String::from("\n  \n");
    input.push_str(&join(&lines.iter().map(String::as_str).collect::<Vec<_>>()));
    input.pop();
    let temp = TempStore::new();
    temp.ingest_bytes(input.as_bytes()).unwrap();
    assert_eq!(temp.snapshot(&text(&lines)), expected);
}
