//! The checksum every stored blob carries: written at ingest and compared before a byte of the
//! blob is used. Row format 6 on: the low 32 bits of XXH3-64 (seed 0) of the blob's bytes; row
//! format 5 had CRC32C, which `server migrate` replaces.
//!
//! XXH3 from the `twox-hash` crate, its AVX2 loop chosen at run time: 47–48 GB/s on this
//! project's machines against 22–24 GB/s for CRC32C by the SSE 4.2 instruction, and an export
//! verifies every byte it sends, so the check's cost halves (docs/PERFORMANCE.md, "Checksums on
//! every read"). Any damage leaves the sum unchanged with odds of 2^-32, whatever its shape;
//! RocksDB's XXH3 block checksums are the same truncation. A cryptographic hash would only guard
//! against a forger, whom a database file's owner does not need to fear.

use crate::error::Damage;

use twox_hash::XxHash3_64;

/// The checksum of `bytes`.
pub fn of(bytes: &[u8]) -> u32 {
    low_half(XxHash3_64::oneshot(bytes))
}

/// The checksum of `bytes` under `seed`: a number stored beside the bytes (a packed blob's size)
/// is covered by the sum as the seed, without joining it to them.
pub fn seeded(seed: u64, bytes: &[u8]) -> u32 {
    low_half(XxHash3_64::oneshot_with_seed(seed, bytes))
}

/// The low 32 bits of a 64-bit hash: what a stored checksum keeps.
fn low_half(hash: u64) -> u32 {
    hash as u32
}

/// Row format 5's checksums, CRC32C, read only by the upgrade to format 6 (`server migrate`).
pub mod format_5 {
    /// Format 5's checksum of `bytes`.
    pub fn of(bytes: &[u8]) -> u32 {
        crc32c::crc32c(bytes)
    }

    /// Format 5's checksum of `first` followed by `rest` (a PostgreSQL packed blob's prefix and
    /// block), without joining them.
    pub fn of_two(first: &[u8], rest: &[u8]) -> u32 {
        crc32c::crc32c_append(crc32c::crc32c(first), rest)
    }
}

/// The checksum an upgrade stores for a blob whose format-5 checksum was just compared:
/// `sum`, this format's checksum of the bytes, when the old one matched (`whole`), otherwise
/// its complement, which never matches them. Damage from before the upgrade is so still found
/// by every read and by `server check --deep`, never vouched for by a new checksum.
pub fn carried(sum: u32, whole: bool) -> u32 {
    if whole { sum } else { !sum }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// XXH3-64 as its reference implementation computes it (`xxhsum -H3`, Python's `xxhash`
    /// package), so that another program can check a stored blob: the low halves of
    /// 2d06800538d394c2 (no bytes) and of the hashes of `123456789` and `Vega` with seeds 0 and 42.
    #[test]
    fn sums_are_the_reference_xxh3_low_halves() {
        assert_eq!(of(b""), 0x38d3_94c2);
        assert_eq!(of(b"123456789"), 0x67a1_7dff);
        assert_eq!(seeded(42, b"Vega"), 0x440a_c767);
        assert_eq!(seeded(0, b"Vega"), of(b"Vega"));
    }

    /// Format 5's CRC32C: the check value of the Castagnoli polynomial for `123456789`, and the
    /// same sum whether the bytes are given whole or in two parts.
    #[test]
    fn format_5_sums_are_crc32c() {
        assert_eq!(format_5::of(b"123456789"), 0xe306_9283);
        assert_eq!(format_5::of_two(b"1234", b"56789"), 0xe306_9283);
    }

    /// A blob longer than the hash's short-input paths, with one byte flipped anywhere, or cut
    /// short, or under another seed, sums otherwise.
    #[test]
    fn damage_changes_the_sum() {
        let blob: Vec<u8> = (0..4096u32).map(|i| (i * 31 % 251) as u8).collect();
        let sum = of(&blob);
        for at in [0, 1, 240, 2047, 4095] {
            let mut damaged = blob.clone();
            damaged[at] ^= 0x10;
            assert_ne!(of(&damaged), sum, "a flip at {at}");
        }
        assert_ne!(of(&blob[..4095]), sum);
        assert_ne!(seeded(1, &blob), sum);
        assert!(verify("csv", &blob, sum).is_ok());
        assert!(verify("csv", &blob, carried(sum, true)).is_ok());
        assert!(verify("csv", &blob, carried(sum, false)).is_err());
        assert!(matches!(
            verify("csv", &blob[1..], sum),
            Err(Damage::Checksum { blob: "csv", stored, .. }) if stored == sum
        ));
    }
}
