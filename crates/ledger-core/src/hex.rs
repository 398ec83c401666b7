//! Table-driven hex encoding and decoding: the workspace's one hex encoder.
//!
//! Ids are encoded once per CSV column at hundreds of thousands of rows per second, and the
//! event generator writes several per event, so encoding is one table lookup per byte into a
//! caller's buffer: no `format!`, no allocation. Measured hot path (docs/PERFORMANCE.md): kept
//! hand-written rather than taken from the `hex` crate, whose per-nibble encoder does twice
//! the work.

use std::fmt;
use std::ops::Deref;

/// Number of hex digits in a 32-byte id.
const HEX_LEN: usize = 64;

/// The two hex digits of every byte value, in one case.
pub type Pairs = [[u8; 2]; 256];

/// Lowercase digits, as Vega writes party, asset, market and oracle spec ids.
pub const LOWER: &Pairs = &pairs(b"0123456789abcdef");
/// Uppercase digits, as Tendermint prints block and transaction hashes.
pub const UPPER: &Pairs = &pairs(b"0123456789ABCDEF");

const fn pairs(digits: &[u8; 16]) -> Pairs {
    let mut table = [[0u8; 2]; 256];
    let mut byte = 0;
    while byte < 256 {
        table[byte] = [digits[byte >> 4], digits[byte & 0x0f]];
        byte += 1;
    }
    table
}

/// Writes the hex digits of `bytes` into `out`, which must be twice as long.
///
/// # Panics
///
/// When `out` is not twice as long as `bytes`: a caller's sizing bug.
pub fn encode_into(bytes: &[u8], out: &mut [u8], case: &Pairs) {
    assert_eq!(out.len(), bytes.len() * 2, "hex output sized for the input");
    for (pair, byte) in out.chunks_exact_mut(2).zip(bytes) {
        pair.copy_from_slice(&case[usize::from(*byte)]);
    }
}

/// The lowercase hex digits of `bytes`, as a new string (for cold paths).
pub fn to_lower(bytes: &[u8]) -> String {
    let mut out = vec![0u8; bytes.len() * 2];
    encode_into(bytes, &mut out, LOWER);
    String::from_utf8(out).expect("hex digits are ASCII")
}

/// Marks a byte that is not a hex digit in [`VALUES`].
const NOT_HEX: u8 = 0xff;

/// The value of every ASCII hex digit, either case; [`NOT_HEX`] for every other byte.
const VALUES: [u8; 256] = {
    let mut table = [NOT_HEX; 256];
    let mut value = 0;
    while value < 10 {
        table[b'0' as usize + value] = value as u8;
        value += 1;
    }
    let mut letter = 0;
    while letter < 6 {
        table[b'a' as usize + letter] = 10 + letter as u8;
        table[b'A' as usize + letter] = 10 + letter as u8;
        letter += 1;
    }
    table
};

/// The 64 lowercase hex digits of a 32-byte id, held on the stack.
///
/// Returned by the ids' `hex()` methods so that callers can write an id without allocating.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Hex([u8; HEX_LEN]);

impl Hex {
    /// The digits as a string slice.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("every byte of a Hex is an ASCII hex digit")
    }
}

impl Deref for Hex {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Hex {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl fmt::Debug for Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// Encodes 32 bytes as 64 lowercase hex digits.
pub(crate) fn encode(bytes: &[u8; 32]) -> Hex {
    let mut out = [0u8; HEX_LEN];
    encode_into(bytes, &mut out, LOWER);
    Hex(out)
}

/// Decodes exactly 64 hex digits (either case) into 32 bytes; `None` for anything else.
pub(crate) fn decode(text: &str) -> Option<[u8; 32]> {
    let digits = text.as_bytes();
    if digits.len() != HEX_LEN {
        return None;
    }
    let mut out = [0u8; 32];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let high = VALUES[usize::from(pair[0])];
        let low = VALUES[usize::from(pair[1])];
        if high == NOT_HEX || low == NOT_HEX {
            return None;
        }
        *byte = (high << 4) | low;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_agree_with_the_standard_formatter() {
        for byte in 0..=255u8 {
            let pair = LOWER[usize::from(byte)];
            assert_eq!(std::str::from_utf8(&pair).unwrap(), format!("{byte:02x}"));
            let pair = UPPER[usize::from(byte)];
            assert_eq!(std::str::from_utf8(&pair).unwrap(), format!("{byte:02X}"));
            let upper = format!("{byte:02X}");
            let upper = upper.as_bytes();
            assert_eq!(
                VALUES[usize::from(upper[0])] << 4 | VALUES[usize::from(upper[1])],
                byte
            );
        }
    }

    #[test]
    fn encode_then_decode_round_trips() {
        let mut bytes = [0u8; 32];
        for (index, byte) in bytes.iter_mut().enumerate() {
            *byte = (index as u8).wrapping_mul(37).wrapping_add(11);
        }
        let hex = encode(&bytes);
        assert_eq!(
            hex.as_str(),
            "0b30557a9fc4e90e33587da2c7ec11365b80a5caef14395e83a8cdf2173c6186"
        );
        assert_eq!(decode(hex.as_str()), Some(bytes));
        assert_eq!(to_lower(&bytes), hex.as_str());
        assert_eq!(to_lower(&[]), "");
    }
}
