//! One type for a store of whichever backend a program opened.

use ledger_core::{ExportFilter, OracleSpecId};
use oracle_core::PageRequest;

#[cfg(feature = "postgres")]
use crate::PgStore;
use crate::{
    ChainState, ChainTip, Error, Examples, ExportSink, ExportSummary, Health, LedgerStore,
    OraclePage, OracleStore, SqliteStore,
};

/// A store of any backend compiled in, for programs that pick one at run time.
#[derive(Debug)]
pub enum AnyStore {
    /// SQLite.
    Sqlite(SqliteStore),
    /// PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(PgStore),
}

impl AnyStore {
    /// The chain id and the first and last stored blocks.
    pub fn chain(&self) -> Result<ChainState, Error> {
        match self {
            AnyStore::Sqlite(store) => store.chain(),
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(store) => store.chain(),
        }
    }

    /// Real ids to show in example URLs.
    pub fn examples(&self) -> Result<Examples, Error> {
        match self {
            AnyStore::Sqlite(store) => store.examples(),
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(store) => store.examples(),
        }
    }

    /// Makes [`Health::chain_tip`] and [`OracleStore::data_version`] show every commit made
    /// so far: PostgreSQL waits for its thread to hear them, or rereads the tip (see
    /// `PgStore::refresh_chain_tip`); SQLite's never lag.
    pub fn refresh_chain_tip(&self) -> Result<(), Error> {
        match self {
            AnyStore::Sqlite(_) => Ok(()),
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(store) => store.refresh_chain_tip(),
        }
    }
}

impl LedgerStore for AnyStore {
    fn export_ledger(
        &self,
        filter: &ExportFilter,
        sink: &mut dyn ExportSink,
    ) -> Result<ExportSummary, Error> {
        match self {
            AnyStore::Sqlite(store) => store.export_ledger(filter, sink),
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(store) => store.export_ledger(filter, sink),
        }
    }
}

impl OracleStore for AnyStore {
    fn oracle_page(
        &self,
        spec: Option<&OracleSpecId>,
        request: &PageRequest,
    ) -> Result<OraclePage, Error> {
        match self {
            AnyStore::Sqlite(store) => store.oracle_page(spec, request),
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(store) => store.oracle_page(spec, request),
        }
    }

    fn data_version(&self) -> Result<Option<u64>, Error> {
        match self {
            AnyStore::Sqlite(store) => store.data_version(),
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(store) => store.data_version(),
        }
    }
}

impl Health for AnyStore {
    fn check(&self) -> Result<(), Error> {
        match self {
            AnyStore::Sqlite(store) => store.check(),
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(store) => store.check(),
        }
    }

    fn chain_tip(&self) -> Result<Option<ChainTip>, Error> {
        match self {
            AnyStore::Sqlite(store) => store.chain_tip(),
            #[cfg(feature = "postgres")]
            AnyStore::Postgres(store) => store.chain_tip(),
        }
    }
}
