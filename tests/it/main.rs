//! End-to-end tests: generated event streams are ingested into temporary SQLite stores, served
//! over loopback by `http_api::serve`, and every answer is compared, byte for byte where the
//! contract is bytes, with an independent model of the stream (`reference`).

mod export;
mod live_ingest;
mod oracle;
mod reference;
mod support;
