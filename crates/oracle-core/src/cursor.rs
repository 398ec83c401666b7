//! Opaque cursors naming a [`Position`] in ingest order.

use data_encoding::BASE64URL_NOPAD;

use crate::Error;

/// Where a datum sits in ingest order; ascending `Position` order is ingest order.
///
/// The derived ordering compares `vega_time`, then `block`, then `seq`, so ties on the block
/// time are broken by block height and then by the datum's sequence inside the block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// Vega time of the block that carried the datum, in Unix nanoseconds.
    pub vega_time: i64,
    /// Height of the block that carried the datum.
    pub block: u64,
    /// Sequence number of the datum's event inside its block.
    pub seq: u64,
}

/// First byte of every cursor. Bump it when the layout changes, so old cursors are rejected
/// with a clean error instead of being misread.
const VERSION: u8 = 1;
/// Version byte plus three 8-byte big-endian integers.
const PAYLOAD_LEN: usize = 1 + 8 + 8 + 8;
/// Payload plus one CRC-8 byte.
const BINARY_LEN: usize = PAYLOAD_LEN + 1;
/// Length of the unpadded base64url text of [`BINARY_LEN`] bytes: `ceil(26 * 8 / 6)`.
const TEXT_LEN: usize = (BINARY_LEN * 8).div_ceil(6);

/// Encodes `position` as an opaque, URL-safe cursor string: the text of [`Cursor::new`].
pub fn encode_cursor(position: Position) -> String {
    Cursor::new(position).as_str().to_owned()
}

/// The text of a cursor, held inline: a page encodes one per row, and this keeps the text off
/// the heap until it is copied into the response.
///
/// The cursor is the unpadded base64url text of 26 bytes: a version byte (`1`), `vega_time`
/// as a big-endian `i64`, `block` and `seq` as big-endian `u64`, and a CRC-8 of those 25
/// bytes. The check byte is not a secret (a client could forge a cursor, which only names a
/// position); it exists so that a mangled cursor is reported instead of silently paging from
/// somewhere else. CRC-8 catches every change confined to 8 consecutive bits, hence every
/// single-character edit, and all but 1 in 256 other corruptions.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cursor {
    text: [u8; TEXT_LEN],
    /// `TEXT_LEN`, or 0 for [`Cursor::EMPTY`].
    len: u8,
}

impl Cursor {
    /// The empty cursor of an empty page's [`PageInfo`](crate::PageInfo).
    pub const EMPTY: Cursor = Cursor {
        text: [0; TEXT_LEN],
        len: 0,
    };

    /// The cursor naming `position`.
    pub fn new(position: Position) -> Cursor {
        let mut bytes = [0u8; BINARY_LEN];
        bytes[0] = VERSION;
        bytes[1..9].copy_from_slice(&position.vega_time.to_be_bytes());
        bytes[9..17].copy_from_slice(&position.block.to_be_bytes());
        bytes[17..25].copy_from_slice(&position.seq.to_be_bytes());
        bytes[PAYLOAD_LEN] = crc8(&bytes[..PAYLOAD_LEN]);
        let mut text = [0u8; TEXT_LEN];
        // `data-encoding` rather than `base64`: on 26 bytes its fixed-size path costs a third
        // less (`cargo bench -p oracle-core cursor`).
        BASE64URL_NOPAD.encode_mut(&bytes, &mut text);
        Cursor {
            text,
            len: TEXT_LEN as u8,
        }
    }

    /// The cursor's text: URL-safe base64 characters only, so it needs no escaping in JSON or
    /// in a query string.
    pub fn as_bytes(&self) -> &[u8] {
        &self.text[..usize::from(self.len)]
    }

    /// The cursor's text as a string.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).expect("base64 text is ASCII")
    }
}

impl std::ops::Deref for Cursor {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

/// Decodes a cursor produced by [`encode_cursor`].
///
/// Anything else is rejected with [`Error::InvalidCursor`]: a wrong length, padding, characters
/// outside the base64url alphabet, non-canonical base64 (non-zero trailing bits), an unknown
/// version, a failed check byte, or a block or sequence number above `i64::MAX`. Stores keep
/// positions in signed 64-bit columns, so no stored datum has such a position: a cursor naming
/// one was forged, and is refused rather than clamped to some other position.
pub fn decode_cursor(cursor: &str) -> Result<Position, Error> {
    // Checking the length first bounds the work done on hostile input.
    if cursor.len() != TEXT_LEN {
        return Err(Error::InvalidCursor);
    }
    // The encoding rejects padding and non-zero trailing bits, so exactly one text decodes to
    // each byte string and cursors can be compared as strings.
    let mut bytes = [0u8; BINARY_LEN];
    BASE64URL_NOPAD
        .decode_mut(cursor.as_bytes(), &mut bytes)
        .map_err(|_| Error::InvalidCursor)?;
    if bytes[0] != VERSION || crc8(&bytes[..PAYLOAD_LEN]) != bytes[PAYLOAD_LEN] {
        return Err(Error::InvalidCursor);
    }
    let position = Position {
        vega_time: i64::from_be_bytes(field(&bytes, 1)),
        block: u64::from_be_bytes(field(&bytes, 9)),
        seq: u64::from_be_bytes(field(&bytes, 17)),
    };
    if i64::try_from(position.block).is_err() || i64::try_from(position.seq).is_err() {
        return Err(Error::InvalidCursor);
    }
    Ok(position)
}

/// The 8 bytes of `bytes` starting at `start`.
fn field(bytes: &[u8; BINARY_LEN], start: usize) -> [u8; 8] {
    let mut out = [0u8; 8];
    out.copy_from_slice(&bytes[start..start + 8]);
    out
}

/// CRC-8 with polynomial `x^8 + x^2 + x + 1` (0x07), initial value 0, no reflection
/// (CRC-8/SMBUS). Slice-by-16 tables built at compile time: a page encodes a cursor per row,
/// and a byte-at-a-time CRC is a chain of 25 dependent table lookups, the largest part of a
/// cursor's cost.
fn crc8(bytes: &[u8]) -> u8 {
    const CRC8: crc::Crc<u8, crc::Table<16>> =
        crc::Crc::<u8, crc::Table<16>>::new(&crc::CRC_8_SMBUS);
    CRC8.checksum(bytes)
}

#[cfg(test)]
mod properties;

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    use super::*;

    const ALPHABET: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

    fn pos(vega_time: i64, block: u64, seq: u64) -> Position {
        Position {
            vega_time,
            block,
            seq,
        }
    }

    #[track_caller]
    fn check_round_trip(position: Position) {
        let cursor = encode_cursor(position);
        assert_eq!(cursor.len(), TEXT_LEN, "{cursor}");
        assert!(
            cursor.bytes().all(|b| ALPHABET.as_bytes().contains(&b)),
            "{cursor}"
        );
        assert_eq!(decode_cursor(&cursor), Ok(position), "{cursor}");
    }

    #[track_caller]
    fn check_rejected(cursor: &str) {
        assert_eq!(
            decode_cursor(cursor),
            Err(Error::InvalidCursor),
            "{cursor:?}"
        );
    }

    #[test]
    fn crc8_matches_the_smbus_check_value() {
        // The catalogue check value of CRC-8/SMBUS over "123456789".
        assert_eq!(crc8(b"123456789"), 0xf4);
    }

    #[test]
    fn round_trips() {
        check_round_trip(pos(0, 0, 0));
        check_round_trip(pos(1, 2, 3));
        check_round_trip(pos(1_690_000_001_264_036_759, 1_000_001, 4));
        check_round_trip(pos(-1, 0, 0));
        check_round_trip(pos(i64::MIN, 0, 0));
        check_round_trip(pos(i64::MAX, i64::MAX as u64, i64::MAX as u64));
        check_round_trip(pos(i64::MIN, i64::MAX as u64, 0));
    }

    #[test]
    fn positions_beyond_the_signed_range_are_rejected_not_clamped() {
        let beyond = i64::MAX as u64 + 1;
        for position in [
            pos(0, beyond, 0),
            pos(0, 0, beyond),
            pos(i64::MAX, u64::MAX, u64::MAX),
        ] {
            check_rejected(&encode_cursor(position));
        }
    }

    #[test]
    fn known_encoding_is_stable() {
        // Cursors outlive deployments (clients keep them between requests), so the layout is
        // pinned here: a change must bump VERSION rather than alter this text silently.
        let cursor = encode_cursor(pos(1, 2, 3));
        let bytes = URL_SAFE_NO_PAD
            .decode(&cursor)
            .expect("our own cursor decodes");
        let mut expected = vec![1u8];
        expected.extend_from_slice(&1i64.to_be_bytes());
        expected.extend_from_slice(&2u64.to_be_bytes());
        expected.extend_from_slice(&3u64.to_be_bytes());
        expected.push(crc8(&expected));
        assert_eq!(bytes, expected);
    }

    #[test]
    fn distinct_positions_give_distinct_cursors() {
        let positions = [pos(1, 0, 0), pos(0, 1, 0), pos(0, 0, 1), pos(-1, 0, 0)];
        for (i, a) in positions.iter().enumerate() {
            for b in &positions[i + 1..] {
                assert_ne!(encode_cursor(*a), encode_cursor(*b));
            }
        }
    }

    #[test]
    fn every_single_character_change_is_rejected() {
        for position in [pos(0, 0, 0), pos(1_690_000_001_264_036_759, 1_000_001, 4)] {
            let cursor = encode_cursor(position);
            for idx in 0..cursor.len() {
                for replacement in ALPHABET.chars().chain("+/=.~ é".chars()) {
                    let mut tampered: Vec<char> = cursor.chars().collect();
                    if tampered[idx] == replacement {
                        continue;
                    }
                    tampered[idx] = replacement;
                    check_rejected(&tampered.into_iter().collect::<String>());
                }
            }
        }
    }

    #[test]
    fn truncated_extended_and_padded_cursors_are_rejected() {
        let cursor = encode_cursor(pos(1_690_000_001_264_036_759, 1_000_001, 4));
        for len in 0..cursor.len() {
            check_rejected(&cursor[..len]);
        }
        check_rejected(&format!("{cursor}="));
        check_rejected(&format!("{cursor}A"));
        check_rejected(&format!("{cursor}AAAA"));
        check_rejected(&format!("A{cursor}"));
        check_rejected(&format!(" {cursor}"));
        check_rejected(&format!("{cursor}\n"));
        check_rejected(&format!("{cursor}{cursor}"));
        check_rejected("");
    }

    #[test]
    fn standard_alphabet_is_rejected() {
        // Find a cursor whose text uses '-' or '_', then spell it in the standard alphabet.
        let cursor = (0..1000)
            .map(|seq| encode_cursor(pos(-1, u64::MAX, seq)))
            .find(|c| c.contains('-') || c.contains('_'))
            .expect("some cursor uses the URL-safe characters");
        check_rejected(&cursor.replace('-', "+").replace('_', "/"));
    }

    #[test]
    fn non_canonical_trailing_bits_are_rejected() {
        // The last character carries 4 data bits and 2 padding bits; setting a padding bit
        // keeps the bytes the same under a lenient decoder, so only canonicity catches it.
        let cursor = encode_cursor(pos(1, 2, 3));
        let last = cursor.chars().last().expect("cursor is not empty");
        let idx = ALPHABET.find(last).expect("cursor uses the alphabet");
        for low_bits in 1..4 {
            let sibling = ALPHABET.as_bytes()[(idx & !3) | low_bits] as char;
            let tampered = format!("{}{sibling}", &cursor[..cursor.len() - 1]);
            check_rejected(&tampered);
        }
    }

    #[test]
    fn wrong_version_is_rejected_even_with_a_valid_check_byte() {
        for version in [0u8, 2, 255] {
            let mut bytes = [0u8; BINARY_LEN];
            bytes[0] = version;
            bytes[PAYLOAD_LEN] = crc8(&bytes[..PAYLOAD_LEN]);
            check_rejected(&URL_SAFE_NO_PAD.encode(bytes));
        }
    }

    #[test]
    fn wrong_check_byte_is_rejected() {
        let mut bytes = [0u8; BINARY_LEN];
        bytes[0] = VERSION;
        let good = crc8(&bytes[..PAYLOAD_LEN]);
        bytes[PAYLOAD_LEN] = good;
        assert_eq!(
            decode_cursor(&URL_SAFE_NO_PAD.encode(bytes)),
            Ok(pos(0, 0, 0))
        );
        for wrong in (0..=255u8).filter(|&b| b != good) {
            bytes[PAYLOAD_LEN] = wrong;
            check_rejected(&URL_SAFE_NO_PAD.encode(bytes));
        }
    }

    #[test]
    fn ordering_is_time_then_block_then_seq() {
        assert!(pos(1, 9, 9) < pos(2, 0, 0));
        assert!(pos(1, 1, 9) < pos(1, 2, 0));
        assert!(pos(1, 1, 1) < pos(1, 1, 2));
        assert!(pos(-5, 0, 0) < pos(0, 0, 0));
    }
}
