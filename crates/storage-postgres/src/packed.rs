//! How PostgreSQL stores a segment's two blobs (row formats 3 to 6): each compressed with LZ4
//! here, before it goes to the database, and decompressed here after it comes back; from row
//! format 5 with a checksum, verified before the block is decoded.
//!
//! PostgreSQL's own TOAST compression would shrink the table as well, but a query sends the
//! values decompressed: compressed by us, the wire (and TLS) carry about a quarter of the bytes
//! and the server reads a quarter of the TOAST pages. The columns stay `STORAGE EXTERNAL`, so the
//! server never tries to compress them a second time.
//!
//! A packed blob is the decompressed size as a big-endian `u32`, then one LZ4 block. Big-endian
//! rather than the little-endian prefix that `lz4::block::compress` can prepend: byte strings
//! then compare as the sizes do, so a query can tell a small segment by the first four bytes of
//! its lines (`segments.rs`), which PostgreSQL reads without fetching the rest of the value.
//!
//! Row format 5 puts the checksum (`checksum.rs`) of the prefix and the block, a big-endian
//! `u32`, between them: inside the blob rather than in a column of its own, so that every read
//! of a blob checks it in [`unpack_into`] whatever the query, and no query or `COPY` changes.
//! Format 5's was the CRC32C of the prefix and the block; format 6's is the block's XXH3 with the
//! decompressed size (the prefix's value) as its seed.

use lz4::block::{compress_bound, compress_to_buffer, decompress_to_buffer};

use storage::{Bug, Damage, Error, checksum};

/// Bytes of the size prefix.
const PREFIX: usize = 4;

/// Bytes of the checksum after it.
const SUM: usize = 4;

/// Bytes before the LZ4 block.
const HEADER: usize = PREFIX + SUM;

/// More than LZ4 can decompress one byte into (a match of 255 bytes costs one byte of length):
/// a prefix claiming more than this per stored byte is damage, refused before it is allocated.
const MAX_RATIO: usize = 256;

/// The prefix of a blob of `size` decompressed bytes, to compare a stored blob's first bytes
/// with.
pub(super) fn size_prefix(size: usize) -> Vec<u8> {
    let size = u32::try_from(size).expect("a size bound of a few KiB");
    size.to_be_bytes().to_vec()
}

/// Compresses a blob for storage, with its checksum.
pub(super) fn pack(bytes: &[u8]) -> Result<Vec<u8>, Error> {
    let size = u32::try_from(bytes.len()).map_err(|_| Bug::SegmentTooLarge)?;
    let internal = |error: std::io::Error| Error::Internal(Box::new(error));
    let mut packed = vec![0; HEADER + compress_bound(bytes.len()).map_err(internal)?];
    packed[..PREFIX].copy_from_slice(&size.to_be_bytes());
    let written =
        compress_to_buffer(bytes, None, false, &mut packed[HEADER..]).map_err(internal)?;
    packed.truncate(HEADER + written);
    seal(&mut packed);
    Ok(packed)
}

/// Writes the checksum of a packed blob's prefix and block into its place between them.
fn seal(packed: &mut [u8]) {
    let sum = sum_of(
        packed[..PREFIX].try_into().expect("four bytes"),
        &packed[HEADER..],
    );
    packed[PREFIX..HEADER].copy_from_slice(&sum.to_be_bytes());
}

/// The checksum stored in a packed blob's `header`.
fn stored_sum(header: &[u8]) -> u32 {
    u32::from_be_bytes(header[PREFIX..HEADER].try_into().expect("four bytes"))
}

/// The checksum of a packed blob with the size prefix `prefix` and the LZ4 block `block`.
fn sum_of(prefix: [u8; PREFIX], block: &[u8]) -> u32 {
    checksum::seeded(u64::from(u32::from_be_bytes(prefix)), block)
}

/// A blob packed by row format 5 (its checksum CRC32C) as row format 6 packs it: migration 9's
/// step. A blob whose CRC32C does not match keeps a checksum that does not match either
/// (`checksum::carried`); one too short to hold a checksum is left as it is, damage that every
/// read reports.
pub(super) fn replace_checksum(format_5: &[u8]) -> Vec<u8> {
    let mut packed = format_5.to_vec();
    if packed.len() >= HEADER {
        let (header, block) = packed.split_at(HEADER);
        let prefix = header[..PREFIX].try_into().expect("four bytes");
        let whole = checksum::format_5::of_two(&header[..PREFIX], block) == stored_sum(header);
        let sum = checksum::carried(sum_of(prefix, block), whole);
        packed[PREFIX..HEADER].copy_from_slice(&sum.to_be_bytes());
    }
    packed
}

/// A blob packed by row format 4 (prefix and block, no checksum) as today's format packs it:
/// migration 7's step. Its bytes are not decoded, so damage from before is not found here.
pub(super) fn add_checksum(format_4: &[u8]) -> Vec<u8> {
    let split = format_4.len().min(PREFIX);
    let mut packed = Vec::with_capacity(format_4.len() + SUM);
    packed.extend_from_slice(&format_4[..split]);
    packed.extend_from_slice(&[0; SUM]);
    packed.extend_from_slice(&format_4[split..]);
    if packed.len() >= HEADER {
        seal(&mut packed);
    }
    packed
}

/// Checks a stored blob's checksum without decoding it: what [`unpack_into`] checks first, for a
/// reader that must know a blob is whole before it sends anything.
pub(super) fn check(packed: &[u8], blob: &'static str) -> Result<(), Error> {
    if packed.len() < HEADER {
        return Err(Damage::Packed(format!("{blob}: {} bytes", packed.len())).into());
    }
    let (header, block) = packed.split_at(HEADER);
    let stored = stored_sum(header);
    let computed = sum_of(header[..PREFIX].try_into().expect("four bytes"), block);
    if computed != stored {
        return Err(Damage::Checksum {
            blob,
            stored,
            computed,
        }
        .into());
    }
    Ok(())
}

/// Decompresses a stored blob into `out`, whose allocation is reused: afterwards `out` holds
/// exactly the blob's bytes. A blob that does not decompress to the size it states is
/// [`Error::Corrupt`].
pub(super) fn unpack_into(
    packed: &[u8],
    blob: &'static str,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    let corrupt = |what: String| Error::from(Damage::Packed(format!("{blob}: {what}")));
    check(packed, blob)?;
    let (header, block) = packed.split_at(HEADER);
    let size = u32::from_be_bytes(header[..PREFIX].try_into().expect("four bytes")) as usize;
    if size > block.len().saturating_mul(MAX_RATIO) {
        return Err(corrupt(format!(
            "{size} bytes stated for {} stored",
            block.len()
        )));
    }
    // The C decoder takes its sizes as `int`.
    let stated = i32::try_from(size).map_err(|_| corrupt(format!("{size} bytes stated")))?;
    out.resize(size, 0);
    match decompress_to_buffer(block, Some(stated), out) {
        Ok(written) if written == size => Ok(()),
        Ok(written) => Err(corrupt(format!("{written} bytes, {size} stated"))),
        Err(error) => Err(corrupt(error.to_string())),
    }
}

/// Decompresses a stored blob into a new buffer.
pub(super) fn unpack(packed: &[u8], blob: &'static str) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    unpack_into(packed, blob, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_round_trip_into_a_reused_buffer() {
        let lines: Vec<u8> = (0..20_000)
            .flat_map(|i| format!("{i},party,asset,{}\n", i * 7).into_bytes())
            .collect();
        let mut out = Vec::new();
        for bytes in [&lines[..], b"", b"x", &vec![0; 1 << 20][..], &lines[..100]] {
            let packed = pack(bytes).unwrap();
            assert_eq!(packed[..PREFIX], size_prefix(bytes.len())[..]);
            unpack_into(&packed, "csv", &mut out).unwrap();
            assert_eq!(out, bytes);
        }
        assert!(pack(&lines).unwrap().len() < lines.len() / 2);
    }

    #[test]
    fn sizes_compare_as_their_prefixes() {
        let sizes = [0, 1, 255, 256, 32 * 1024 - 1, 32 * 1024, 300_000];
        for pair in sizes.windows(2) {
            assert!(size_prefix(pair[0]) < size_prefix(pair[1]));
        }
    }

    /// 300 short CSV-like lines, and their packed blob.
    fn short_lines_packed() -> (Vec<u8>, Vec<u8>) {
        let lines: Vec<u8> = (0..300)
            .flat_map(|i| format!("{i},{}\n", i % 7).into_bytes())
            .collect();
        let packed = pack(&lines).unwrap();
        (lines, packed)
    }

    /// Every truncation and every single-byte change of a packed blob either decompresses to
    /// bytes of the stated size or is reported as corrupt: never a panic, never an allocation
    /// of the 4 GiB a damaged prefix may claim.
    #[test]
    fn damaged_blobs_are_reported_not_trusted() {
        let (_, packed) = short_lines_packed();
        let mut out = Vec::new();
        for end in 0..packed.len() {
            assert!(
                matches!(
                    unpack_into(&packed[..end], "csv", &mut out),
                    Err(Error::Corrupt(_))
                ),
                "truncated at {end}"
            );
        }
        // Every byte changed to any other value is caught, by the checksum before the decoder.
        for at in 0..packed.len() {
            for value in [0, 1, 0x0f, 0xf0, 0xff] {
                let mut damaged = packed.clone();
                if damaged[at] == value {
                    continue;
                }
                damaged[at] = value;
                match unpack_into(&damaged, "csv", &mut out) {
                    Err(Error::Corrupt(_)) => {}
                    other => panic!("byte {at} set to {value}: {other:?}"),
                }
            }
        }
        // A stated size beyond any decoding, sealed as if a writer had meant it.
        let mut huge = packed.clone();
        huge[..PREFIX].copy_from_slice(&u32::MAX.to_be_bytes());
        seal(&mut huge);
        assert!(matches!(unpack(&huge, "csv"), Err(Error::Corrupt(_))));
    }

    /// What the checksum cannot catch, a block damaged before it was sealed, reaches the
    /// decoder: every truncation and single-byte change of the block decodes to exactly the
    /// stated size or is reported as corrupt, and so is every stated size but the true one.
    #[test]
    fn damaged_blocks_sealed_as_whole_are_refused_by_the_decoder() {
        let (lines, packed) = short_lines_packed();
        let mut out = Vec::new();
        // Whether the damaged blob, sealed, decoded (to its stated size) rather than being
        // refused as corrupt.
        let mut decodes = |mut damaged: Vec<u8>, what: &str| {
            seal(&mut damaged);
            let stated = u32::from_be_bytes(damaged[..PREFIX].try_into().unwrap()) as usize;
            match unpack_into(&damaged, "csv", &mut out) {
                Ok(()) => {
                    assert_eq!(out.len(), stated, "{what}");
                    true
                }
                Err(Error::Corrupt(_)) => false,
                Err(other) => panic!("{what}: {other:?}"),
            }
        };
        for end in HEADER..packed.len() {
            assert!(!decodes(
                packed[..end].to_vec(),
                &format!("truncated at {end}")
            ));
        }
        let mut decoded = 0;
        for at in HEADER..packed.len() {
            for value in [0, 1, 0x0f, 0xf0, 0xff] {
                let mut damaged = packed.clone();
                damaged[at] = value;
                decoded += usize::from(decodes(damaged, &format!("byte {at} set to {value}")));
            }
        }
        // Some changes leave a block that still decodes (a literal byte changed, say), so the
        // loop above reached the decoder's success path too.
        assert!(decoded > 0);
        for size in [0, 1, lines.len() - 1, lines.len() + 1, lines.len() * 2] {
            let mut damaged = packed.clone();
            damaged[..PREFIX].copy_from_slice(&size_prefix(size));
            assert!(!decodes(damaged, &format!("{size} bytes stated")));
        }
        assert!(decodes(packed, "as packed"));
    }

    /// A blob of format 5 gets format 6's checksum when its CRC32C matches, and a checksum that
    /// never matches when it does not; a blob too short for a checksum stays as it was.
    #[test]
    fn format_5_blobs_gain_the_checksum_of_format_6_unless_damaged() {
        let lines = b"1,a\n2,b\n".repeat(50);
        let packed = pack(&lines).unwrap();
        let mut format_5 = packed.clone();
        let crc = checksum::format_5::of_two(&packed[..PREFIX], &packed[HEADER..]);
        format_5[PREFIX..HEADER].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(replace_checksum(&format_5), packed);
        assert_eq!(unpack(&replace_checksum(&format_5), "csv").unwrap(), lines);
        let mut damaged = format_5.clone();
        *damaged.last_mut().unwrap() ^= 1;
        let upgraded = replace_checksum(&damaged);
        assert_eq!(upgraded[HEADER..], damaged[HEADER..]);
        assert!(matches!(check(&upgraded, "csv"), Err(Error::Corrupt(_))));
        let mut resealed = damaged.clone();
        seal(&mut resealed);
        assert!(
            check(&resealed, "csv").is_ok(),
            "only the carried sum fails"
        );
        assert_eq!(
            replace_checksum(&format_5[..HEADER - 1]),
            format_5[..HEADER - 1]
        );
    }

    #[test]
    fn format_4_blobs_gain_the_checksum_of_format_6() {
        let lines = b"1,a\n2,b\n".repeat(50);
        let packed = pack(&lines).unwrap();
        let mut format_4 = packed[..PREFIX].to_vec();
        format_4.extend_from_slice(&packed[HEADER..]);
        assert_eq!(add_checksum(&format_4), packed);
        assert_eq!(unpack(&add_checksum(&format_4), "csv").unwrap(), lines);
    }
}
