//! End-to-end tests: generated event streams are ingested into temporary stores (SQLite, or
//! PostgreSQL with `DATANODE_IT_BACKEND=postgres`), served
//! over loopback by `http_api::serve`, and every answer is compared, byte for byte where the
//! contract is bytes, with an independent model of the stream (`reference`).

// Tests may unwrap (STYLE.md).
#![allow(clippy::unwrap_used)]

mod damage;
mod export;
mod formats;
mod limits;
mod live_ingest;
mod operations;
mod oracle;
mod reference;
mod replica;
mod schema;
mod support;
mod wire;
