//! Order statistics of measurements.

use std::time::Duration;

use serde::Serialize;

/// Median, extremes and percentiles of a set of durations, in milliseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Summary {
    pub(crate) count: usize,
    pub(crate) min_ms: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
    pub(crate) mean_ms: f64,
}

impl Summary {
    /// Summarises `samples`; all zero when there are none.
    pub(crate) fn of(samples: &[Duration]) -> Self {
        if samples.is_empty() {
            return Self::default();
        }
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let ms = |duration: Duration| duration.as_secs_f64() * 1e3;
        let total: Duration = sorted.iter().sum();
        Self {
            count: sorted.len(),
            min_ms: ms(sorted[0]),
            p50_ms: ms(*percentile(&sorted, 0.50)),
            p99_ms: ms(*percentile(&sorted, 0.99)),
            max_ms: ms(sorted[sorted.len() - 1]),
            mean_ms: ms(total) / sorted.len() as f64,
        }
    }
}

/// The median and the extremes of a few repeated measurements of one figure.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub(crate) struct Spread {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

impl Spread {
    /// Of `values` (the median by the nearest rank, as [`Summary`]'s: of two, the lower);
    /// `None` when there are none.
    pub(crate) fn of(values: impl IntoIterator<Item = f64>) -> Option<Self> {
        let mut sorted: Vec<f64> = values.into_iter().collect();
        sorted.sort_unstable_by(f64::total_cmp);
        let (min, max) = (*sorted.first()?, *sorted.last()?);
        Some(Self {
            median: *percentile(&sorted, 0.50),
            min,
            max,
        })
    }

    /// Whether the measurements differ.
    pub(crate) fn varies(&self) -> bool {
        self.min != self.max
    }
}

/// The nearest-rank percentile `q` (0–1) of a sorted, non-empty slice.
fn percentile<T>(sorted: &[T], q: f64) -> &T {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    &sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(samples_ms: &[u64], p50: f64, p99: f64) {
        let samples: Vec<Duration> = samples_ms
            .iter()
            .map(|&ms| Duration::from_millis(ms))
            .collect();
        let summary = Summary::of(&samples);
        assert_eq!((summary.p50_ms, summary.p99_ms), (p50, p99));
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        check(&[], 0.0, 0.0);
        check(&[7], 7.0, 7.0);
        check(&[3, 1, 2], 2.0, 3.0);
        check(&[4, 1, 3, 2], 2.0, 4.0);
        check(&(1..=100).collect::<Vec<_>>(), 50.0, 99.0);
        check(&(1..=1000).collect::<Vec<_>>(), 500.0, 990.0);
    }

    #[test]
    fn a_spread_is_the_median_and_the_extremes() {
        assert_eq!(Spread::of([]), None);
        let one = Spread::of([4.5]).unwrap();
        assert_eq!((one.median, one.min, one.max), (4.5, 4.5, 4.5));
        assert!(!one.varies());
        let three = Spread::of([190.0, 160.5, 171.0]).unwrap();
        assert_eq!((three.median, three.min, three.max), (171.0, 160.5, 190.0));
        assert!(three.varies());
        // Of two, the lower, as the percentiles' nearest rank.
        assert_eq!(Spread::of([2.0, 1.0]).unwrap().median, 1.0);
    }
}
