//! The framing of Vega's event buffer files: each record is a 4-byte big-endian `size`
//! (8 + the payload's length), an 8-byte big-endian sequence number (the writer counts from 0;
//! readers ignore it), then the payload, one protobuf [`BusEvent`](crate::BusEvent).
//!
//! The one definition of the format: [`write_record`] writes a record (the generator, the
//! tests), [`payload_len`] reads a header (the ingest's framing reads records with it).

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

/// The length of the payload of the record whose header begins `header` (at least its first 4
/// bytes, the size field), as [`write_record`] wrote it; `Err` with the size field when it
/// cannot even hold the sequence number.
///
/// # Panics
/// When `header` is shorter than the size field.
pub fn payload_len(header: &[u8]) -> Result<usize, u32> {
    let size = u32::from_be_bytes(header[..4].try_into().expect("a size field of four bytes"));
    size.checked_sub(SIZE_OVERHEAD)
        .map(|len| len as usize)
        .ok_or(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_is_size_then_sequence_then_payload() {
        let mut out = Vec::new();
        write_record(&mut out, 5, b"abc");
        assert_eq!(out, [0, 0, 0, 11, 0, 0, 0, 0, 0, 0, 0, 5, b'a', b'b', b'c']);
        assert_eq!(payload_len(&out), Ok(3));
    }

    #[test]
    fn a_size_below_the_sequence_number_is_refused() {
        assert_eq!(payload_len(&[0, 0, 0, 7]), Err(7));
        assert_eq!(payload_len(&[0, 0, 0, 8]), Ok(0));
        assert_eq!(
            payload_len(&[255, 255, 255, 255]),
            Ok(u32::MAX as usize - 8)
        );
    }
}
