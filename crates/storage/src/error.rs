//! The one error type of the storage layer.

use std::error::Error as StdError;

/// A storage failure, independent of the backend that produced it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store cannot be reached or used right now (I/O, locked, cannot open); retrying later
    /// may succeed.
    #[error("storage unavailable")]
    Unavailable(#[source] Box<dyn StdError + Send + Sync>),
    /// The stored data are not what this version expects (damaged file, unknown schema).
    #[error("storage corrupt: {0}")]
    Corrupt(String),
    /// Any other backend failure: a bug or an unexpected state.
    #[error("storage failure")]
    Internal(#[source] Box<dyn StdError + Send + Sync>),
}
