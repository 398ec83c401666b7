//! One protobuf `BusEvent` through the ingest's protobuf decoding (`ingest::ingest` over a
//! buffer file) into domain values and the rows a store receives.
//!
//! Input: one serialized message. It becomes the first record of a buffer file; a second
//! record, an event of the highest block there can be, completes the first record's block, so
//! that its rows reach the writer, which keeps every batch in memory.
//! Checks: no panic; the ingest ends well or names the first record, with a protobuf or event
//! error; a message that prost decodes re-encodes to `encoded_len` bytes that decode to an equal
//! message, and ingesting that canonical encoding gives the same batches or the same error, so
//! the ingest's hand scan of the top-level fields reads what prost reads.

#![no_main]

use std::io::Cursor;

use bus_proto::{BusEvent, buffer::write_record, event_type};
use ingest::{Format, IngestError, IngestOptions, RecordError, ingest};
use libfuzzer_sys::fuzz_target;
use prost::Message as _;
use storage::{BlockRecord, ChainState, Error, IngestBatch, IngestWriter};

fuzz_target!(|data: &[u8]| {
    let ingested = outcome(data);
    let Ok(message) = BusEvent::decode(data) else {
        return;
    };
    let canonical = message.encode_to_vec();
    assert_eq!(canonical.len(), message.encoded_len());
    let again = BusEvent::decode(canonical.as_slice()).expect("a re-encoded event decodes");
    assert_eq!(again, message);
    assert_eq!(
        ingested,
        outcome(&canonical),
        "the canonical encoding of {message:?} ingests differently"
    );
});

/// The batches written, or the error's cause.
fn outcome(event: &[u8]) -> Result<Vec<IngestBatch>, String> {
    let end = BusEvent {
        id: format!("{}-0", i64::MAX),
        r#type: event_type::ACCOUNT,
        ..BusEvent::default()
    };
    let mut buffer = Vec::new();
    write_record(&mut buffer, 0, event);
    write_record(&mut buffer, 1, &end.encode_to_vec());
    let mut writer = Recorder::default();
    let options = IngestOptions {
        format: Some(Format::VegaBuffer),
        ..IngestOptions::default()
    };
    match ingest(Cursor::new(buffer), &mut writer, &options, &mut |_| {}) {
        Ok(_) => Ok(writer.batches),
        Err(IngestError::Record { location, cause }) => {
            assert_eq!(location.record, 1, "not the fuzzed record: {cause}");
            match cause {
                RecordError::Protobuf(_) | RecordError::Event(_) => Err(cause.to_string()),
                other => panic!("not a decoding error: {other:?}"),
            }
        }
        Err(other) => panic!("not a record error: {other:?}"),
    }
}

/// A store of nothing that keeps what it is asked to commit.
#[derive(Default)]
struct Recorder {
    batches: Vec<IngestBatch>,
}

impl IngestWriter for Recorder {
    fn chain(&mut self) -> Result<ChainState, Error> {
        Ok(ChainState::default())
    }

    fn blocks(&mut self, _height: u64) -> Result<Vec<BlockRecord>, Error> {
        Ok(Vec::new())
    }

    fn commit(&mut self, batch: &IngestBatch) -> Result<(), Error> {
        self.batches.push(batch.clone());
        Ok(())
    }
}
