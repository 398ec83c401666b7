use crate::page::MAX_PAGE_SIZE;

/// Everything that can go wrong in this crate: a pagination request that cannot be honoured.
///
/// The `Display` text is written for API clients (the HTTP layer sends it in the `inner` field
/// of its error response), so every message names the query parameter at fault.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Two pagination parameters that exclude each other were both given, such as
    /// `pagination.first` with `pagination.last`.
    #[error("pagination.{first} and pagination.{second} cannot be used together")]
    ConflictingParameters {
        /// The parameter name (without the `pagination.` prefix) listed first in the message.
        first: &'static str,
        /// The parameter name (without the `pagination.` prefix) listed second in the message.
        second: &'static str,
    },
    /// `pagination.first` or `pagination.last` is not a decimal integer in `1..=MAX_PAGE_SIZE`.
    #[error(
        "pagination.{parameter} must be an integer between 1 and {MAX_PAGE_SIZE}, got {value:?}"
    )]
    InvalidPageSize {
        /// `first` or `last`.
        parameter: &'static str,
        /// The raw value received.
        value: String,
    },
    /// `pagination.after` or `pagination.before` is not a cursor this crate produced.
    #[error("pagination.{parameter} is not a valid cursor")]
    InvalidCursorParameter {
        /// `after` or `before`.
        parameter: &'static str,
    },
    /// `pagination.newestFirst` is not one of the spellings Go's `strconv.ParseBool` accepts.
    #[error("pagination.newestFirst must be a boolean, got {value:?}")]
    InvalidNewestFirst {
        /// The raw value received.
        value: String,
    },
    /// [`decode_cursor`](crate::decode_cursor) was given a string that
    /// [`encode_cursor`](crate::encode_cursor) did not produce.
    ///
    /// [`PageRequest::parse`](crate::PageRequest::parse) reports
    /// [`Error::InvalidCursorParameter`] instead, which names the parameter.
    #[error("not a valid cursor")]
    InvalidCursor,
}
