//! The crate's error type.

/// Everything that can go wrong while parsing or validating ledger domain values.
///
/// Messages are lowercase without a trailing period, and quote the rejected input with
/// `{:?}` so that control characters and empty strings stay visible.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An id was not exactly 64 hex digits.
    #[error("invalid {kind} id: {value:?}")]
    InvalidId {
        /// Which id: `"party"`, `"asset"`, `"market"` or `"oracle spec"`.
        kind: &'static str,
        /// The rejected input.
        value: String,
    },
    /// An amount was not an unsigned decimal integer below 2^256.
    #[error("invalid amount: {0:?}")]
    InvalidAmount(String),
    /// Neither the name nor the code of a `vega.AccountType` value.
    #[error("unknown account type: {0:?}")]
    UnknownAccountType(String),
    /// Neither the name nor the code of a `vega.TransferType` value.
    #[error("unknown transfer type: {0:?}")]
    UnknownTransferType(String),
    /// A time range whose start is after its end.
    #[error("invalid date range: start {start} is after end {end}")]
    InvalidDateRange {
        /// Start, in Unix nanoseconds.
        start: i64,
        /// End, in Unix nanoseconds.
        end: i64,
    },
}
