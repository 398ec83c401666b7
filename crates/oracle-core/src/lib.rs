//! Oracle data for the Vega-compatible `GET /api/v2/oracle/data` listing: the domain types,
//! their rendering as Vega's gateway JSON, and storage-agnostic cursor pagination.
//!
//! Main types:
//! - [`OracleData`] (with [`Signer`] and [`Property`]): one datum;
//!   [`OracleData::to_vega_json`] renders it once, at ingest, exactly as Vega's grpc-gateway
//!   would, so listings can copy the stored bytes into responses.
//! - [`Position`]: a datum's place in ingest order, named by opaque cursors
//!   ([`Cursor`], [`encode_cursor`], [`decode_cursor`]).
//! - [`PageRequest`]: the validated `pagination.*` query parameters ([`PaginationParams`]).
//!   It plans the storage reads ([`Scan`]) and assembles their rows into a [`Page`] of
//!   [`Edge`]s with a [`PageInfo`]; see [`PageRequest`] for the storage protocol.
//! - [`Error`]: every way a pagination request can be rejected, worded for API clients.
//!
//! This crate must not do I/O: no SQL, no HTTP, no tokio, no clocks. Everything here is a
//! pure function of its arguments, so storage backends and the HTTP layer share one
//! definition of what a page is, and the tests need no database.

#![forbid(unsafe_code)]

mod cursor;
mod data;
mod error;
mod page;

pub use crate::cursor::{Cursor, Position, decode_cursor, encode_cursor};
pub use crate::data::{OracleData, Property, Signer};
pub use crate::error::Error;
pub use crate::page::{
    DEFAULT_PAGE_SIZE, Edge, MAX_PAGE_SIZE, Page, PageInfo, PageRequest, PaginationParams, Scan,
};
