//! The same events fed as NDJSON and as a Vega event buffer file give byte-identical answers
//! from both endpoints.

use std::sync::Arc;

use eventgen::{Format, GenerateConfig};
use http_api::AppConfig;
use ingest::IngestOptions;
use storage::{AnyStore, SqliteConfig, SqliteStore};

use crate::support::{Dataset, Server, get};

#[test]
fn ndjson_and_buffer_file_give_byte_identical_answers() {
    let config = GenerateConfig {
        seed: 7,
        blocks: 60,
        parties: 4,
        assets: 2,
        markets: 2,
        specs: 3,
        entries_per_block: 6,
        oracle_data_per_block: 3,
        other_events_share: 0.5,
        ..GenerateConfig::default()
    };
    let dataset = Dataset::build(config);
    let mut buffer = Vec::new();
    eventgen::generate_as(&dataset.config, Format::VegaBuffer, &mut buffer).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("buffer.sqlite"), SqliteConfig::default())
        .expect("open store");
    let stats = ingest::ingest(
        std::io::Cursor::new(buffer),
        &mut store.writer().unwrap(),
        &IngestOptions::default(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(stats.ledger_entries, dataset.summary.ledger_entries);
    let from_ndjson = Server::start(dataset.store.clone(), AppConfig::default());
    let from_buffer = Server::start(Arc::new(AnyStore::Sqlite(store)), AppConfig::default());

    let reference = &dataset.reference;
    let mut targets = Vec::new();
    for party in reference.parties() {
        targets.push(format!("/api/v2/ledgerentry/export?partyId={party}"));
        for asset in reference.assets_of(&party) {
            targets.push(format!(
                "/api/v2/ledgerentry/export?partyId={party}&assetId={asset}"
            ));
        }
    }
    let mut specs: Vec<&String> = reference.oracle.iter().flat_map(|d| &d.specs).collect();
    specs.sort();
    specs.dedup();
    for spec in specs {
        targets.push(format!(
            "/api/v2/oracle/data?oracleSpecId={spec}&pagination.first=1000"
        ));
    }
    targets.push("/api/v2/oracle/data?pagination.first=1000".to_owned());
    targets.push("/api/v2/oracle/data?pagination.last=7".to_owned());
    for target in &targets {
        let (expected, found) = (
            get(from_ndjson.addr, target, &[]),
            get(from_buffer.addr, target, &[]),
        );
        assert_eq!(expected.status, 200, "{target}");
        assert!(!expected.body.is_empty(), "{target}");
        assert_eq!(found.status, expected.status, "{target}");
        assert!(found.body == expected.body, "{target}: the bodies differ");
    }
}
