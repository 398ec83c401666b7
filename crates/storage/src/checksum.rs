//! The checksum every stored blob carries from row format 5 on: CRC32C of its bytes, written at
//! ingest and compared before a byte of the blob is used.
//!
//! CRC32C (Castagnoli), from the `crc32c` crate: the x86 SSE 4.2 and ARMv8 CRC instructions
//! compute it at several GB/s, well beyond what an export sends, and it detects every burst of
//! up to 32 damaged bits and every odd number of flipped bits, the damage a disk or a stray
//! write leaves. A cryptographic hash would only guard against a forger, whom a database file's
//! owner does not need to fear.

use crate::error::Damage;

/// The checksum of `bytes`.
pub fn of(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

/// The checksum of `first` followed by `rest`, without joining them.
pub fn of_two(first: &[u8], rest: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(first), rest)
}

/// Checks `bytes` of the blob column `blob` against the checksum `stored` with them.
pub fn verify(blob: &'static str, bytes: &[u8], stored: u32) -> Result<(), Damage> {
    let computed = of(bytes);
    if computed == stored {
        Ok(())
    } else {
        Err(Damage::Checksum {
            blob,
            stored,
            computed,
        })
    }
}

/// A checksum as an SQL integer column holds it (SQLite `INTEGER`): its value, never negative.
#[cfg(feature = "sqlite")]
pub fn to_sql(sum: u32) -> i64 {
    i64::from(sum)
}

/// A checksum read from an SQL integer column: a value out of `u32`'s range is damage too.
#[cfg(feature = "sqlite")]
pub fn from_sql(blob: &'static str, stored: i64) -> Result<u32, Damage> {
    u32::try_from(stored).map_err(|_| Damage::Value(format!("checksum of {blob} {stored}")))
}
