//! Vega timestamps: Unix nanoseconds, written as RFC 3339 in UTC, or as PostgreSQL writes a
//! `timestamptz` in the export's CSV.

use std::fmt;

use chrono::{DateTime, Datelike, NaiveDateTime, Timelike};

/// Length of `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ`.
const RFC3339_NANOS_LEN: usize = 30;

/// Length of `YYYY-MM-DD HH:MM:SS.ffffff+00`, the longest text of
/// [`VegaTime::write_postgres`]; the shortest, without a fraction, is 22 bytes.
pub(crate) const POSTGRES_MAX_LEN: usize = 29;

/// Length of `YYYY-MM-DDTHH:MM:SSZ`.
const RFC3339_SECONDS_LEN: usize = 20;

/// A point in time as Vega records it: nanoseconds since the Unix epoch, in UTC.
///
/// Every `i64` is valid: the range spans 1677-09-21 to 2262-04-11, so the year always has
/// four digits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct VegaTime(i64);

impl VegaTime {
    /// The time `nanos` nanoseconds after (or before, if negative) the Unix epoch.
    pub const fn from_nanos(nanos: i64) -> Self {
        VegaTime(nanos)
    }

    /// Nanoseconds since the Unix epoch.
    pub const fn nanos(self) -> i64 {
        self.0
    }

    /// RFC 3339 in UTC with exactly nine fraction digits, e.g. `2023-07-22T04:26:41.014070079Z`.
    pub fn rfc3339(self) -> String {
        let mut buf = [0u8; RFC3339_NANOS_LEN];
        self.write_rfc3339(&mut buf).to_owned()
    }

    /// RFC 3339 in UTC without a fraction, e.g. `2023-07-22T04:26:41Z`: Go's `time.RFC3339`
    /// layout, which truncates towards the past (so -1 ns is `1969-12-31T23:59:59Z`).
    pub fn rfc3339_seconds(self) -> String {
        let mut buf = [0u8; RFC3339_NANOS_LEN];
        self.write_rfc3339(&mut buf);
        let mut text = String::with_capacity(RFC3339_SECONDS_LEN);
        text.push_str(std::str::from_utf8(&buf[..19]).expect("write_rfc3339 writes ASCII"));
        text.push('Z');
        text
    }

    /// Writes the nine-digit RFC 3339 form into `buf` without allocating.
    fn write_rfc3339(self, buf: &mut [u8; RFC3339_NANOS_LEN]) -> &str {
        let time = self.utc();
        *buf = *b"0000-00-00T00:00:00.000000000Z";
        put_date_time(buf, &time);
        put_digits(&mut buf[20..29], time.nanosecond());
        std::str::from_utf8(buf).expect("only ASCII digits and separators are written")
    }

    /// Writes the text PostgreSQL gives this time as a `timestamptz` in its ISO `DateStyle`
    /// with `TimeZone` UTC, as Vega's export (`COPY … (FORMAT csv)`) prints its `vega_time`,
    /// into `buf`, and returns the part written: `2023-03-10 10:24:30.507963+00`.
    ///
    /// PostgreSQL keeps microseconds, and Vega's driver stores a block time by dropping the
    /// nanoseconds of its second, so the fraction is the time floored to the microsecond
    /// (towards the past, for times before 1970 too). PostgreSQL drops the fraction's
    /// trailing zeros, and the dot with them when nothing is left (`…:30.5+00`, `…:30+00`);
    /// the offset of UTC is written `+00`. Checked against PostgreSQL 15's own output.
    pub(crate) fn write_postgres(self, buf: &mut [u8; POSTGRES_MAX_LEN]) -> &str {
        let time = self.utc();
        *buf = *b"0000-00-00 00:00:00.000000+00";
        put_date_time(buf, &time);
        // chrono's nanosecond of the second is never negative, so dividing floors the time.
        put_digits(&mut buf[20..26], time.nanosecond() / 1_000);
        let digits = buf[20..26].iter().rposition(|digit| *digit != b'0');
        // After the last significant digit, or in place of the dot when there is none.
        let end = digits.map_or(19, |last| 21 + last);
        buf.copy_within(26..29, end);
        let text = &buf[..end + 3];
        std::str::from_utf8(text).expect("only ASCII digits and separators are written")
    }

    /// The calendar date and time of day in UTC.
    fn utc(self) -> NaiveDateTime {
        // Infallible: chrono's range covers every i64 of nanoseconds.
        DateTime::from_timestamp_nanos(self.0).naive_utc()
    }
}

/// Writes the digits of `YYYY-MM-DD?HH:MM:SS` into the first 19 bytes of `buf`, leaving the
/// separators the caller put there.
///
/// chrono does the calendar arithmetic; the digits are placed by hand because ingest calls
/// this for every row and chrono's formatter allocates and parses a format.
fn put_date_time(buf: &mut [u8], time: &NaiveDateTime) {
    // The i64 range keeps the year within 1677..=2262, so it is positive and 4 digits.
    put_digits(&mut buf[0..4], time.year().unsigned_abs());
    put_digits(&mut buf[5..7], time.month());
    put_digits(&mut buf[8..10], time.day());
    put_digits(&mut buf[11..13], time.hour());
    put_digits(&mut buf[14..16], time.minute());
    put_digits(&mut buf[17..19], time.second());
}

/// Writes `value` as decimal digits right-aligned in `out`, keeping the zeros before it.
fn put_digits(out: &mut [u8], mut value: u32) {
    for digit in out.iter_mut().rev() {
        // `value % 10` is below 10, so the cast cannot truncate.
        *digit = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

impl fmt::Display for VegaTime {
    /// The nine-digit RFC 3339 form.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0u8; RFC3339_NANOS_LEN];
        f.pad(self.write_rfc3339(&mut buf))
    }
}

#[cfg(test)]
mod tests {
    use chrono::SecondsFormat;

    use super::*;

    #[track_caller]
    fn check(nanos: i64, expected_nanos: &str, expected_seconds: &str) {
        let time = VegaTime::from_nanos(nanos);
        assert_eq!(time.nanos(), nanos);
        assert_eq!(time.rfc3339(), expected_nanos);
        assert_eq!(time.to_string(), expected_nanos);
        assert_eq!(time.rfc3339_seconds(), expected_seconds);
    }

    #[test]
    fn rfc3339_of_known_times() {
        check(
            1_690_000_001_014_070_079,
            "2023-07-22T04:26:41.014070079Z",
            "2023-07-22T04:26:41Z",
        );
        check(0, "1970-01-01T00:00:00.000000000Z", "1970-01-01T00:00:00Z");
        check(1, "1970-01-01T00:00:00.000000001Z", "1970-01-01T00:00:00Z");
        check(-1, "1969-12-31T23:59:59.999999999Z", "1969-12-31T23:59:59Z");
        check(
            -1_000_000_000,
            "1969-12-31T23:59:59.000000000Z",
            "1969-12-31T23:59:59Z",
        );
        check(
            951_782_400_000_000_000,
            "2000-02-29T00:00:00.000000000Z",
            "2000-02-29T00:00:00Z",
        );
        check(
            i64::MIN,
            "1677-09-21T00:12:43.145224192Z",
            "1677-09-21T00:12:43Z",
        );
        check(
            i64::MAX,
            "2262-04-11T23:47:16.854775807Z",
            "2262-04-11T23:47:16Z",
        );
    }

    #[track_caller]
    fn check_postgres(nanos: i64, expected: &str) {
        let mut buf = [0u8; POSTGRES_MAX_LEN];
        assert_eq!(
            VegaTime::from_nanos(nanos).write_postgres(&mut buf),
            expected
        );
    }

    /// The expected texts are those PostgreSQL 15 prints for the same instants, floored to the
    /// microsecond, by `COPY (SELECT …::timestamptz) TO STDOUT (FORMAT csv)` in UTC.
    #[test]
    fn postgres_text_of_known_times() {
        check_postgres(1_678_443_870_507_963_000, "2023-03-10 10:24:30.507963+00");
        // Nanoseconds are dropped, never rounded up.
        check_postgres(1_678_443_870_507_963_999, "2023-03-10 10:24:30.507963+00");
        // Trailing zeros of the fraction go, and the dot with the last of them.
        check_postgres(1_678_443_870_500_000_000, "2023-03-10 10:24:30.5+00");
        check_postgres(1_678_443_870_507_960_000, "2023-03-10 10:24:30.50796+00");
        check_postgres(1_678_443_870_000_000_000, "2023-03-10 10:24:30+00");
        check_postgres(1_678_443_870_000_000_999, "2023-03-10 10:24:30+00");
        check_postgres(1_678_443_870_000_001_000, "2023-03-10 10:24:30.000001+00");
        check_postgres(0, "1970-01-01 00:00:00+00");
        check_postgres(999, "1970-01-01 00:00:00+00");
        // Before 1970 the floor goes to the earlier microsecond.
        check_postgres(-1, "1969-12-31 23:59:59.999999+00");
        check_postgres(-1_000, "1969-12-31 23:59:59.999999+00");
        check_postgres(-1_001, "1969-12-31 23:59:59.999998+00");
        check_postgres(-1_000_000_000, "1969-12-31 23:59:59+00");
        check_postgres(951_782_400_000_001_000, "2000-02-29 00:00:00.000001+00");
        check_postgres(i64::MIN, "1677-09-21 00:12:43.145224+00");
        check_postgres(i64::MAX, "2262-04-11 23:47:16.854775+00");
    }

    #[test]
    fn hand_placed_digits_match_chrono_formatting() {
        let mut nanos = i64::MIN;
        // About 4,600 points spread over the whole range, plus their neighbours.
        let step = i64::MAX / 2_300;
        while let Some(next) = nanos.checked_add(step) {
            for probe in [nanos, nanos + 1, nanos + 999_999_999] {
                let expected = DateTime::from_timestamp_nanos(probe)
                    .to_rfc3339_opts(SecondsFormat::Nanos, true);
                assert_eq!(VegaTime::from_nanos(probe).rfc3339(), expected);
            }
            nanos = next;
        }
    }
}
