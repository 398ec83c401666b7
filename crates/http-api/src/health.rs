//! Whether the store's real reads succeed, for `/health`.
//!
//! `/health` runs a trivial read, which passes on a store whose rows are damaged or whose
//! connections fail under load. So every export and page also reports how its read ended: after
//! [`FAILURE_STREAK`] consecutive failures that say the store is damaged or unreachable,
//! `/health` answers 503 without reading, until a real read succeeds again. The check stays
//! cheap: one atomic load, and the trivial read when the streak is short.

use std::sync::atomic::{AtomicU32, Ordering};

use crate::Metrics;

/// Consecutive failed reads after which `/health` answers 503.
pub(crate) const FAILURE_STREAK: u32 = 3;

/// Consecutive failed reads of the store, reset by any successful one.
#[derive(Debug, Default)]
pub(crate) struct ReadHealth {
    failing: AtomicU32,
}

impl ReadHealth {
    /// Records how a read of the store ended, and counts a failure in the metrics.
    pub(crate) fn record<T>(&self, metrics: &Metrics, result: &Result<T, storage::Error>) {
        let err = match result {
            Ok(_) => {
                self.failing.store(0, Ordering::Relaxed);
                return;
            }
            Err(err) => err,
        };
        let (kind, counts) = match err {
            storage::Error::Unavailable(_) => ("unavailable", true),
            storage::Error::Corrupt(_) => ("corrupt", true),
            // A bug or an unexpected state says nothing about the store's health.
            _ => ("internal", false),
        };
        metrics.storage_failure(kind);
        if counts {
            self.failing.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The number of consecutive failed reads, when there are enough to call the store
    /// unhealthy.
    pub(crate) fn failing(&self) -> Option<u32> {
        let failing = self.failing.load(Ordering::Relaxed);
        (failing >= FAILURE_STREAK).then_some(failing)
    }
}
