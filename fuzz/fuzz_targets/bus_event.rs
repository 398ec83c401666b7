//! Protobuf `BusEvent`s of the event bus (`bus-proto`).
//!
//! Input: one serialized message. Checks: decoding never panics; a message that decodes
//! re-encodes to `encoded_len` bytes that decode to an equal message (unknown fields are
//! dropped, so the bytes may differ, the message may not).

#![no_main]

use bus_proto::BusEvent;
use libfuzzer_sys::fuzz_target;
use prost::Message as _;

fuzz_target!(|data: &[u8]| {
    let Ok(event) = BusEvent::decode(data) else {
        return;
    };
    let bytes = event.encode_to_vec();
    assert_eq!(bytes.len(), event.encoded_len());
    let again = BusEvent::decode(bytes.as_slice()).expect("a re-encoded event decodes");
    assert_eq!(again, event);
});
