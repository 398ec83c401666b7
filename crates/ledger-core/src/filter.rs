//! The parsed form of a ledger export request.

use crate::{AssetId, Error, PartyId, VegaTime};

/// A half-open range of Unix nanoseconds, `[start, end)`; a missing bound is unbounded.
///
/// Construction guarantees `start <= end`; `start == end` is valid and contains nothing.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct TimeRange {
    start: Option<i64>,
    end: Option<i64>,
}

impl TimeRange {
    /// The unbounded range, containing every time.
    pub const ALL: TimeRange = TimeRange {
        start: None,
        end: None,
    };

    /// The range `[start, end)`; fails when both bounds are given and `start > end`.
    pub fn new(start: Option<i64>, end: Option<i64>) -> Result<Self, Error> {
        match (start, end) {
            (Some(start), Some(end)) if start > end => Err(Error::InvalidDateRange { start, end }),
            _ => Ok(TimeRange { start, end }),
        }
    }

    /// The inclusive lower bound, in Unix nanoseconds.
    pub fn start(&self) -> Option<i64> {
        self.start
    }

    /// The exclusive upper bound, in Unix nanoseconds.
    pub fn end(&self) -> Option<i64> {
        self.end
    }
}

/// What a ledger export covers: one party's entries, maybe of one asset, within a time range.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct ExportFilter {
    /// The party whose entries are exported (it owns the from- or the to-account).
    pub party: PartyId,
    /// Only entries of this asset, if given.
    pub asset: Option<AssetId>,
    /// Only entries within this range.
    pub range: TimeRange,
}

impl ExportFilter {
    /// The file name Vega's data node offers for this export, byte for byte.
    ///
    /// `ledger_entries_<party>[_<asset>][_<start>][-<end>].csv`, the times in Go's
    /// `time.RFC3339` layout (whole seconds, `Z`) with every `:` replaced by `_`, as Vega
    /// writes them.
    ///
    /// Vega's own format string (`ledger_entries_%s%s_%s%s.csv`) also puts a stray `_` before
    /// the start whether or not there is one (`ledger_entries_<party>_.csv`); our contract
    /// (docs/API.md) names the file without it, so no name ends in `_` or holds `__`.
    ///
    /// See: vegaprotocol/vega `datanode/api/trading_data_v2.go`, `ExportLedgerEntries`.
    pub fn file_name(&self) -> String {
        let mut name = String::with_capacity(200);
        name.push_str("ledger_entries_");
        name.push_str(self.party.hex().as_str());
        if let Some(asset) = self.asset {
            name.push('_');
            name.push_str(asset.hex().as_str());
        }
        if let Some(start) = self.range.start() {
            name.push('_');
            push_file_time(&mut name, start);
        }
        if let Some(end) = self.range.end() {
            name.push('-');
            push_file_time(&mut name, end);
        }
        name.push_str(".csv");
        name
    }
}

/// Appends Go's `strings.ReplaceAll(time.RFC3339, ":", "_")` layout of `nanos`.
fn push_file_time(name: &mut String, nanos: i64) {
    let time = VegaTime::from_nanos(nanos).rfc3339_seconds();
    name.extend(time.chars().map(|c| if c == ':' { '_' } else { c }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_keep_their_bounds() {
        // Which times a range holds (half-open) is pinned where it is applied: the storage
        // suite's export tests.
        for (start, end) in [
            (None, None),
            (Some(10), None),
            (None, Some(10)),
            (Some(-5), Some(5)),
            (Some(7), Some(7)),
        ] {
            let range = TimeRange::new(start, end).unwrap();
            assert_eq!((range.start(), range.end()), (start, end));
        }
    }

    #[test]
    fn start_after_end_is_rejected() {
        let error = TimeRange::new(Some(2), Some(1)).unwrap_err();
        assert_eq!(error, Error::InvalidDateRange { start: 2, end: 1 });
        assert_eq!(
            error.to_string(),
            "invalid date range: start 2 is after end 1"
        );
    }

    const PARTY: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const ASSET: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    /// 2023-07-22T04:26:41.014070079Z: the fraction is dropped, as Go does.
    const START: i64 = 1_690_000_001_014_070_079;
    /// 2023-07-23T00:00:00Z.
    const END: i64 = 1_690_070_400_000_000_000;

    #[track_caller]
    fn check_name(asset: bool, start: bool, end: bool, expected: &str) {
        let filter = ExportFilter {
            party: PARTY.parse().unwrap(),
            asset: asset.then(|| ASSET.parse().unwrap()),
            range: TimeRange::new(start.then_some(START), end.then_some(END)).unwrap(),
        };
        let expected = expected.replace("<p>", PARTY).replace("<a>", ASSET);
        assert_eq!(filter.file_name(), expected);
    }

    #[test]
    fn file_names_follow_the_contract() {
        let s = "2023-07-22T04_26_41Z";
        let e = "2023-07-23T00_00_00Z";
        check_name(false, false, false, "ledger_entries_<p>.csv");
        check_name(true, false, false, "ledger_entries_<p>_<a>.csv");
        check_name(false, true, false, &format!("ledger_entries_<p>_{s}.csv"));
        check_name(false, false, true, &format!("ledger_entries_<p>-{e}.csv"));
        check_name(
            false,
            true,
            true,
            &format!("ledger_entries_<p>_{s}-{e}.csv"),
        );
        check_name(
            true,
            true,
            false,
            &format!("ledger_entries_<p>_<a>_{s}.csv"),
        );
        check_name(
            true,
            false,
            true,
            &format!("ledger_entries_<p>_<a>-{e}.csv"),
        );
        check_name(
            true,
            true,
            true,
            &format!("ledger_entries_<p>_<a>_{s}-{e}.csv"),
        );
    }

    #[test]
    fn file_name_times_before_the_epoch_truncate_towards_the_past() {
        let filter = ExportFilter {
            party: PARTY.parse().unwrap(),
            asset: None,
            range: TimeRange::new(Some(-1), None).unwrap(),
        };
        let expected = format!("ledger_entries_{PARTY}_1969-12-31T23_59_59Z.csv");
        assert_eq!(filter.file_name(), expected);
    }
}
