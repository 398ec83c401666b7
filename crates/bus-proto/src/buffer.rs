//! The framing of Vega's event buffer files: each record is a 4-byte big-endian `size`
//! (8 + the payload's length), an 8-byte big-endian sequence number (the writer counts from 0;
//! readers ignore it), then the payload, one protobuf [`BusEvent`](crate::BusEvent).

/// Bytes before a record's payload: the size and the sequence number.
pub const HEADER_LEN: usize = 12;

/// What the `size` field counts beyond the payload: the sequence number.
pub const SIZE_OVERHEAD: u32 = 8;

/// Appends one record holding `payload` to `out`.
///
/// # Panics
/// When the payload is longer than a record can say (4 GiB), which no event comes near.
pub fn write_record(out: &mut Vec<u8>, seq: u64, payload: &[u8]) {
    let size = u32::try_from(payload.len())
        .ok()
        .and_then(|len| len.checked_add(SIZE_OVERHEAD))
        .expect("an event is far smaller than 4 GiB");
    out.reserve(HEADER_LEN + payload.len());
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(payload);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_is_size_then_sequence_then_payload() {
        let mut out = Vec::new();
        write_record(&mut out, 5, b"abc");
        assert_eq!(out, [0, 0, 0, 11, 0, 0, 0, 0, 0, 0, 0, 5, b'a', b'b', b'c']);
    }
}
