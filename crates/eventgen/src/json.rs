//! Hand-built JSON fragments.
//!
//! Every string the generator writes is hex, digits or a constant that is already escaped, so
//! appending bytes to a `Vec<u8>` is enough and several times faster than building
//! `serde_json::Value`s; the tests parse every line back to prove the output is valid JSON.
//! Decimal formatting, once the generator's hottest spot, is `itoa`'s.

/// The largest integer a JSON number holds exactly in every parser (2^53 - 1, as in
/// JavaScript); only values up to it are ever written as bare numbers.
const MAX_SAFE_INTEGER: u128 = (1 << 53) - 1;

/// Appends the decimal digits of `value` (`u128` amounts included: `itoa` formats them
/// through 64-bit limbs).
pub(super) fn push_decimal(buf: &mut Vec<u8>, value: impl itoa::Integer) {
    buf.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// Appends `value` as a protobuf-JSON integer: a quoted string, or a bare number when
/// `as_number` asks for it and the value is exactly representable.
pub(super) fn push_int(buf: &mut Vec<u8>, value: u128, as_number: bool) {
    if as_number && value <= MAX_SAFE_INTEGER {
        push_decimal(buf, value);
    } else {
        buf.push(b'"');
        push_decimal(buf, value);
        buf.push(b'"');
    }
}

/// Appends a signed `int64` (timestamps) under the same rules as [`push_int`].
pub(super) fn push_i64(buf: &mut Vec<u8>, value: i64, as_number: bool) {
    let quoted = !(as_number && u128::from(value.unsigned_abs()) <= MAX_SAFE_INTEGER);
    if quoted {
        buf.push(b'"');
    }
    push_decimal(buf, value);
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
