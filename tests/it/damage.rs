//! A stored unit damaged behind the server's back (a bit flipped inside a ledger segment's lines
//! and inside the newest oracle datum, checksums left as they were): the export that reaches
//! it answers 500 (its first segment; one reached later is cut), the page answers 500 in Vega's shape, the failures count as `corrupt` and turn
//! `/health` to 503, and everything else answers as before. On SQLite, or on PostgreSQL with
//! `DATANODE_IT_BACKEND=postgres`.

use eventgen::GenerateConfig;
use http_api::AppConfig;

use crate::reference::Filter;
use crate::support::{Dataset, Server, get};

const EXPORT: &str = "/api/v2/ledgerentry/export";

#[test]
fn damaged_units_are_never_served_and_turn_health_to_503() {
    let dataset = Dataset::build(GenerateConfig {
        seed: 23,
        blocks: 60,
        parties: 3,
        entries_per_block: 6,
        oracle_data_per_block: 2,
        ..GenerateConfig::default()
    });
    let parties: Vec<String> = dataset.reference.parties().into_iter().collect();
    let (damaged, intact) = (&parties[0], &parties[1]);
    dataset.damage_ledger(damaged);
    dataset.damage_newest_oracle_data();
    let server = Server::start(dataset.store.clone(), AppConfig::default());

    // The export of the damaged party fails before it starts (its one segment is read and
    // verified first): 500 in the export's error shape, none of the damaged lines sent.
    let export = get(server.addr, &format!("{EXPORT}?partyId={damaged}"), &[]);
    assert_eq!(export.status, 500, "{}", export.text());
    let error = export.json();
    assert_eq!(error["error"]["code"], 13, "{error}");

    // The newest page reads the damaged datum: 500 in Vega's error shape.
    let page = get(server.addr, "/api/v2/oracle/data", &[]);
    assert_eq!(page.status, 500, "{}", page.text());
    let error = page.json();
    assert_eq!(error["code"], 13, "{error}");
    assert!(
        error["message"].is_string() && error["details"].is_array(),
        "{error}"
    );

    // Two failures in a row; a third turns /health to 503.
    assert_eq!(get(server.addr, "/health", &[]).status, 200);
    let again = get(server.addr, "/api/v2/oracle/data", &[]);
    assert_eq!(again.status, 500);
    assert_eq!(get(server.addr, "/health", &[]).status, 503);
    let metrics = get(server.addr, "/metrics", &[]);
    let corrupt = metrics
        .text()
        .lines()
        .find(|line| line.starts_with("datanode_storage_failures_total{kind=\"corrupt\"}"))
        .unwrap_or_else(|| panic!("no corrupt failures counted:\n{}", metrics.text()));
    assert!(corrupt.ends_with(" 3"), "{corrupt}");

    // Everything else answers, byte for byte; a good read makes /health healthy again.
    let whole = get(server.addr, &format!("{EXPORT}?partyId={intact}"), &[]);
    assert_eq!(whole.status, 200);
    let expected = dataset.reference.csv(Filter {
        party: intact,
        ..Filter::default()
    });
    assert!(
        whole.body == expected.as_bytes(),
        "the intact export differs"
    );
    assert_eq!(get(server.addr, "/health", &[]).status, 200);
}
