//! Test-only package; the tests live in `it/`.
