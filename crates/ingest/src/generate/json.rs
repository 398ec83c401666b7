//! Hand-built JSON fragments.
//!
//! Every string the generator writes is hex, digits or a constant that is already escaped, so
//! appending bytes to a `Vec<u8>` is enough and several times faster than building
//! `serde_json::Value`s; the tests parse every line back to prove the output is valid JSON.

/// The largest integer a JSON number holds exactly in every parser (2^53 - 1, as in
/// JavaScript); only values up to it are ever written as bare numbers.
const MAX_SAFE_INTEGER: u128 = (1 << 53) - 1;

/// "00", "01", … "99": formatting two digits per division halves the work, which matters
/// because decimal formatting was the generator's hottest spot.
const DIGIT_PAIRS: [u8; 200] = {
    let mut pairs = [0u8; 200];
    let mut pair = 0;
    while pair < 100 {
        pairs[2 * pair] = b'0' + (pair / 10) as u8;
        pairs[2 * pair + 1] = b'0' + (pair % 10) as u8;
        pair += 1;
    }
    pairs
};

/// Formats `value` into the tail of `out` and returns the index of its first digit.
fn format_u64(mut value: u64, out: &mut [u8; 20]) -> usize {
    let mut start = out.len();
    while value >= 100 {
        let pair = (value % 100) as usize * 2;
        value /= 100;
        start -= 2;
        out[start..start + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if value >= 10 {
        let pair = value as usize * 2;
        start -= 2;
        out[start..start + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        start -= 1;
        out[start] = b'0' + value as u8;
    }
    start
}

/// Appends the decimal digits of `value`.
pub(super) fn push_u64(buf: &mut Vec<u8>, value: u64) {
    let mut digits = [0u8; 20];
    let start = format_u64(value, &mut digits);
    buf.extend_from_slice(&digits[start..]);
}

/// Appends the decimal digits of `value`.
///
/// Values past `u64` are split into base-10^19 limbs rather than formatted through `u128`
/// division digit by digit, which is slow; most amounts fit in 64 bits anyway.
pub(super) fn push_u128(buf: &mut Vec<u8>, value: u128) {
    const LIMB: u128 = 10_000_000_000_000_000_000;
    match u64::try_from(value) {
        Ok(small) => push_u64(buf, small),
        Err(_) => {
            push_u128(buf, value / LIMB);
            let mut digits = [0u8; 20];
            let start = format_u64((value % LIMB) as u64, &mut digits);
            // The low limb always takes 19 digits: left-pad it with zeros.
            digits[1..start].fill(b'0');
            buf.extend_from_slice(&digits[1..]);
        }
    }
}

/// Appends `value` as a protobuf-JSON integer: a quoted string, or a bare number when
/// `as_number` asks for it and the value is exactly representable.
pub(super) fn push_int(buf: &mut Vec<u8>, value: u128, as_number: bool) {
    if as_number && value <= MAX_SAFE_INTEGER {
        push_u128(buf, value);
    } else {
        buf.push(b'"');
        push_u128(buf, value);
        buf.push(b'"');
    }
}

/// Appends a signed `int64` (timestamps) under the same rules as [`push_int`].
pub(super) fn push_i64(buf: &mut Vec<u8>, value: i64, as_number: bool) {
    let quoted = !(as_number && u128::from(value.unsigned_abs()) <= MAX_SAFE_INTEGER);
    if quoted {
        buf.push(b'"');
    }
    if value < 0 {
        buf.push(b'-');
    }
    push_u64(buf, value.unsigned_abs());
    if quoted {
        buf.push(b'"');
    }
}

/// Appends `"<hex>"`.
pub(super) fn push_quoted(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.push(b'"');
    buf.extend_from_slice(bytes);
    buf.push(b'"');
}

/// True about 1% of the time for uniformly random `bits` (only the low 10 are read): how often
/// an integer is written as a bare number or an owner in uppercase, enough to exercise those
/// paths of ingest without dominating the output.
pub(super) fn one_percent(bits: u64) -> bool {
    bits & 0x3FF < 10
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(value: u128, expected: &str) {
        let mut buf = Vec::new();
        push_u128(&mut buf, value);
        assert_eq!(String::from_utf8(buf).expect("ascii digits"), expected);
    }

    #[test]
    fn decimal_formatting_matches_std() {
        check(0, "0");
        check(7, "7");
        check(u128::from(u64::MAX), "18446744073709551615");
        check(u128::from(u64::MAX) + 1, "18446744073709551616");
        check(10_u128.pow(19), "10000000000000000000");
        check(10_u128.pow(22) + 5, "10000000000000000000005");
        check(u128::MAX, &u128::MAX.to_string());
    }

    #[test]
    fn only_safe_integers_become_numbers() {
        let mut buf = Vec::new();
        push_int(&mut buf, 42, true);
        push_int(&mut buf, 42, false);
        push_int(&mut buf, MAX_SAFE_INTEGER + 1, true);
        push_i64(&mut buf, -5, true);
        push_i64(&mut buf, 1_690_000_000_000_000_000, true);
        assert_eq!(
            String::from_utf8(buf).expect("ascii"),
            r#"42"42""9007199254740992"-5"1690000000000000000""#
        );
    }
}
