//! Domain types of the Vega ledger-entry export and oracle listing, their parsing and
//! validation, and the CSV encoding of ledger entries.
//!
//! Main types:
//! - ids: [`PartyId`], [`AssetId`], [`MarketId`], [`OracleSpecId`] (32 bytes, 64 hex digits)
//!   and [`Owner`] (a party or the network);
//! - Vega's protobuf enums [`AccountType`] and [`TransferType`], with their wire codes;
//! - [`Amount`] (an unsigned 256-bit integer kept as its canonical decimal text) and
//!   [`VegaTime`] (Unix nanoseconds);
//! - [`LedgerEntry`] with its [`Account`]s, the [`Effect`] it has on a party, and the
//!   [`EntryKey`] that orders every answer;
//! - [`ExportFilter`] and [`TimeRange`], the parsed form of an export request;
//! - [`CsvRowEncoder`] and [`CSV_HEADER`], the export's CSV rows, and [`restamp`], which sets
//!   the time of a row encoded before its block's time was known to a [`VegaTimeColumn`]
//!   (the time as Vega's export prints it, `2023-03-10 10:24:30.507963+00`).
//!
//! Every fallible operation returns the crate's one [`Error`].
//!
//! This crate must not know about tokio, SQL, HTTP or JSON: it is pure data and pure
//! functions, so that the storage and HTTP crates can share it without pulling each other in.

#![forbid(unsafe_code)]
// Tests may unwrap (STYLE.md); the library itself is still linted without `cfg(test)`.
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod amount;
mod csv;
mod entry;
mod enums;
mod error;
mod filter;
pub mod hex;
mod id;
mod time;

pub use crate::amount::Amount;
pub use crate::csv::{CSV_HEADER, CsvRowEncoder, VegaTimeColumn, restamp};
pub use crate::entry::{Account, Effect, EntryKey, LedgerEntry};
pub use crate::enums::{AccountType, TransferType};
pub use crate::error::Error;
pub use crate::filter::{ExportFilter, TimeRange};
pub use crate::hex::Hex;
pub use crate::id::{AssetId, MarketId, OracleSpecId, Owner, PartyId};
pub use crate::time::VegaTime;
