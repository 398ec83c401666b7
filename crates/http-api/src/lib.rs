//! A raw hyper service answering two operations of Vega's data-node REST API v2, wire-compatible
//! with Vega's gateway.
//!
//! Endpoints:
//! - `GET /api/v2/ledgerentry/export?partyId=…[&assetId=…][&dateRange.startTimestamp=…]
//!   [&dateRange.endTimestamp=…]`: a party's ledger entries as a streamed CSV file, or as
//!   newline-delimited `google.api.HttpBody` messages when `Accept` prefers JSON.
//! - `GET /api/v2/oracle/data[?oracleSpecId=…][&pagination.first|after|last|before|newestFirst=…]`:
//!   a cursor-paginated page of oracle data.
//!
//! Anything else answers 404 (405 for a known path with another method) in Vega's error shape.
//!
//! The service talks to storage only through the `storage` traits; it never sees SQL. Blocking
//! store calls run on tokio's blocking threads. [`serve`] runs the service on a listener until a
//! shutdown future resolves, then drains connections.
//!
//! This crate must not open databases, read configuration or handle signals: the binary does.

#![cfg_attr(test, allow(clippy::unwrap_used))]

mod accept;
mod body;
mod error;
mod export;
mod oracle;
mod query;
mod server;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use hyper::{Method, Request, Response};
use storage::{Health, LedgerStore, OracleStore};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub use body::{Body, BodyError};
pub use error::{ApiError, ErrorShape};
pub use server::{ServeConfig, serve};

/// The path of the ledger export.
pub const EXPORT_PATH: &str = "/api/v2/ledgerentry/export";
/// The path of the oracle data listing.
pub const ORACLE_DATA_PATH: &str = "/api/v2/oracle/data";

/// Tuning of the service.
#[derive(Clone, Debug)]
pub struct AppConfig {
    /// Exports allowed to run at once; more are refused with 503 and `Retry-After`, so that
    /// exports cannot take every blocking thread and connection from the listing.
    pub max_concurrent_exports: usize,
}

impl Default for AppConfig {
    fn default() -> Self {
        Self {
            max_concurrent_exports: 16,
        }
    }
}

/// The service: cheap to clone, one per connection.
#[derive(Clone)]
pub struct App {
    inner: Arc<Inner>,
}

struct Inner {
    ledger: Arc<dyn LedgerStore>,
    oracle: Arc<dyn OracleStore>,
    health: Arc<dyn Health>,
    export_permits: Arc<Semaphore>,
}

impl App {
    /// A service over `store`.
    pub fn new<S>(store: Arc<S>, config: AppConfig) -> Self
    where
        S: LedgerStore + OracleStore + Health + 'static,
    {
        Self {
            inner: Arc::new(Inner {
                ledger: store.clone(),
                oracle: store.clone(),
                health: store,
                export_permits: Arc::new(Semaphore::new(config.max_concurrent_exports)),
            }),
        }
    }

    /// Answers one request. Never fails: every error becomes a response in Vega's shape.
    pub async fn handle<B>(&self, request: Request<B>) -> Response<Body> {
        let path = request.uri().path();
        let method = request.method();
        match (method, path) {
            (&Method::GET, EXPORT_PATH) => export::export(self, &request)
                .await
                .unwrap_or_else(|err| err.into_response(ErrorShape::Stream)),
            (&Method::GET, ORACLE_DATA_PATH) => oracle::oracle_data(self, &request)
                .await
                .unwrap_or_else(|err| err.into_response(ErrorShape::Bare)),
            (_, EXPORT_PATH) => ApiError::MethodNotAllowed.into_response(ErrorShape::Stream),
            (_, ORACLE_DATA_PATH) => ApiError::MethodNotAllowed.into_response(ErrorShape::Bare),
            _ => ApiError::NotFound.into_response(ErrorShape::Bare),
        }
    }

    /// Whether the store answers.
    pub async fn healthy(&self) -> Result<(), storage::Error> {
        let health = Arc::clone(&self.inner.health);
        tokio::task::spawn_blocking(move || health.check())
            .await
            .map_err(|join| storage::Error::Internal(join.into()))?
    }

    fn try_export_permit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        Arc::clone(&self.inner.export_permits)
            .try_acquire_owned()
            .map_err(|_| ApiError::Unavailable {
                reason: "too many exports in progress, retry shortly".to_owned(),
                retry_after: 1,
            })
    }
}
