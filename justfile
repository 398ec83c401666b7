# Convenience recipes; nothing requires `just` (CI calls cargo through .ci/run).

# Serve on 127.0.0.1:3008, creating ./datanode.sqlite with demo data when missing.
run:
    cargo run --release

# The whole test suite.
test:
    cargo test --workspace

# Formatting, clippy with warnings denied, docs and the architecture invariants.
lint:
    cargo fmt --all --check && cargo clippy --workspace --all-targets -- -D warnings && RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps && .ci/invariants

# Everything CI runs.
ci:
    .ci/run

# The Debian package (target/debian/*.deb), built and checked as CI does.
package:
    .ci/package

# Micro-benchmarks (criterion) of the hot code.
micro:
    cargo bench --workspace

# The end-to-end benchmark on the standard dataset (see docs/PERFORMANCE.md).
bench *ARGS:
    cargo build --release -p server -p bench && target/release/bench {{ARGS}}

# The end-to-end benchmark on a 1% dataset, for a quick look.
bench-small:
    cargo build --release -p server -p bench && target/release/bench --small

# Write a demo event stream and ingest it into demo.sqlite.
demo:
    cargo run --release -- generate --output demo.ndjson && cargo run --release -- ingest --db demo.sqlite demo.ndjson

# Run one fuzz target for SECONDS: cursor, http_request, ndjson_ingest, buffer_ingest, bus_event
# or sp_pair (docs/FUZZING.md).
# New inputs go to fuzz/runs/TARGET (not committed); the seeds in fuzz/corpus/TARGET are read only.
fuzz TARGET SECONDS="600":
    mkdir -p fuzz/runs/{{TARGET}}
    cd fuzz && RUSTC_BOOTSTRAP=1 nice -n 19 cargo fuzz run --sanitizer none --debug-assertions {{TARGET}} runs/{{TARGET}} corpus/{{TARGET}} -- -max_total_time={{SECONDS}}
