//! Unsigned 256-bit amounts carried as exact decimal text.

use std::fmt;
use std::str::FromStr;

use crate::Error;

/// 2^256 − 1, the largest amount Vega's `num.Uint` can hold.
const MAX: &str = "115792089237316195423570985008687907853269984665640564039457584007913129639935";

/// An unsigned integer of at most 256 bits, kept as its canonical decimal text.
///
/// Amounts are only stored, compared for equality and written out again, never added up, so
/// keeping the text avoids a big-integer dependency and any conversion on the hot path.
/// Canonical means ASCII digits without leading zeros (zero is `"0"`), so equal values have
/// equal text.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Amount(Box<str>);

impl Amount {
    /// The canonical decimal text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the amount is zero.
    pub fn is_zero(&self) -> bool {
        &*self.0 == "0"
    }
}

impl FromStr for Amount {
    type Err = Error;

    /// Accepts ASCII digits only (no sign, space or decimal point, not empty) up to
    /// 2^256 − 1, and strips leading zeros.
    fn from_str(text: &str) -> Result<Self, Error> {
        if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
            return Err(Error::InvalidAmount(text.to_owned()));
        }
        let digits = match text.trim_start_matches('0') {
            "" => "0",
            digits => digits,
        };
        // Without leading zeros, a longer number is a larger one, and numbers of equal
        // length compare like their text.
        if digits.len() > MAX.len() || (digits.len() == MAX.len() && digits > MAX) {
            return Err(Error::InvalidAmount(text.to_owned()));
        }
        Ok(Amount(digits.into()))
    }
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

impl AsRef<str> for Amount {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2^256, one more than the largest amount.
    const TWO_POW_256: &str =
        "115792089237316195423570985008687907853269984665640564039457584007913129639936";

    #[track_caller]
    fn check(input: &str, expected: Result<&str, ()>) {
        let parsed = input.parse::<Amount>();
        match expected {
            Ok(canonical) => assert_eq!(parsed.unwrap().as_str(), canonical),
            Err(()) => assert_eq!(parsed, Err(Error::InvalidAmount(input.to_owned()))),
        }
    }

    #[test]
    fn amounts_parse_to_canonical_text() {
        check("0", Ok("0"));
        check("000", Ok("0"));
        check("007", Ok("7"));
        check("100", Ok("100"));
        check("1000000000000000000", Ok("1000000000000000000"));
        check(MAX, Ok(MAX));
        check(&format!("0000{MAX}"), Ok(MAX));
        check(&format!("{}1", "0".repeat(100)), Ok("1"));
        check(
            "115792089237316195423570985008687907853269984665640564039457584007913129639934",
            Ok("115792089237316195423570985008687907853269984665640564039457584007913129639934"),
        );
        check(
            "99999999999999999999999999999999999999999999999999999999999999999999999999999",
            Ok("99999999999999999999999999999999999999999999999999999999999999999999999999999"),
        );
    }

    #[test]
    fn amounts_reject_everything_else() {
        check(TWO_POW_256, Err(()));
        check(
            "200000000000000000000000000000000000000000000000000000000000000000000000000000",
            Err(()),
        );
        check(&format!("1{}", "0".repeat(78)), Err(()));
        check("", Err(()));
        check("-1", Err(()));
        check("+1", Err(()));
        check("1.5", Err(()));
        check("1e3", Err(()));
        check(" 1", Err(()));
        check("1 ", Err(()));
        check("0x10", Err(()));
        check("١", Err(()));
    }

    #[test]
    fn zero_display_and_message() {
        assert!("0".parse::<Amount>().unwrap().is_zero());
        assert!("000".parse::<Amount>().unwrap().is_zero());
        assert!(!"10".parse::<Amount>().unwrap().is_zero());
        assert_eq!("0042".parse::<Amount>().unwrap().to_string(), "42");
        assert_eq!(
            "1.5".parse::<Amount>().unwrap_err().to_string(),
            r#"invalid amount: "1.5""#
        );
    }
}
