//! Ingest of a Vega event buffer file (`ingest::ingest`, `Format::VegaBuffer`: length-prefixed
//! protobuf `BusEvent` records) into a fresh SQLite store.
//!
//! Input: any bytes, read as the buffer file. Checks: those of `store_ingest`.

#![no_main]

mod store_ingest;

use ingest::Format;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| store_ingest::check(data, Format::VegaBuffer));
