//! Ingest of newline-delimited JSON events (`ingest::ingest`, `Format::Ndjson`) into a fresh
//! SQLite store.
//!
//! Input: any bytes, read as the event stream. Checks: those of `store_ingest`.

#![no_main]

mod store_ingest;

use ingest::Format;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| store_ingest::check(data, Format::Ndjson));
