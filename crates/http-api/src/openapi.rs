//! The OpenAPI 3 description of the two operations, served at `GET /api/v2/openapi.json`.
//!
//! It states Vega's contract (the schemas of `vega-data-node-v0.78.2` under their Vega names)
//! tightened to what this server guarantees (required fields, no others, id and cursor
//! patterns), plus what it adds: the CSV and message forms of the export, the error codes and
//! the limits. Tests validate real answers against it, so it cannot drift from the code.

/// The document, as written in `openapi.json`.
pub(crate) const DOCUMENT: &str = include_str!("openapi.json");

/// The document's bytes.
pub(crate) fn document() -> Vec<u8> {
    DOCUMENT.as_bytes().to_vec()
}
