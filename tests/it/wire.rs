//! Vega's gateway on the wire: every parameter by its JSON name and by its proto name, byte for
//! byte the same answer; a parameter given twice refused; and the block headers, which follow
//! the ingest.

use http_api::AppConfig;
use serde_json::json;

use crate::support::{Dataset, Response, Server, get, mixed};

const EXPORT: &str = "/api/v2/ledgerentry/export";
const ORACLE: &str = "/api/v2/oracle/data";

/// What an answer is made of, but the `Date` header.
fn answer(response: &Response) -> (u16, Option<&str>, Option<&str>, &[u8]) {
    (
        response.status,
        response.header("content-type"),
        response.header("content-disposition"),
        &response.body,
    )
}

/// `base` with `name=value` added gives the same answer for either name of the parameter, and
/// not the answer of `base` alone.
#[track_caller]
fn check_both_names(addr: std::net::SocketAddr, base: &str, names: [&str; 2], value: &str) {
    let with = |name: &str| get(addr, &format!("{base}&{name}={value}"), &[]);
    let (by_json, by_proto) = (with(names[0]), with(names[1]));
    assert_eq!(
        by_json.status,
        200,
        "{base} {}: {}",
        names[0],
        by_json.text()
    );
    assert_eq!(answer(&by_json), answer(&by_proto), "{base} {names:?}");
    let without = get(addr, base, &[]);
    assert_ne!(answer(&by_json), answer(&without), "{names:?} was read");
}

#[test]
fn every_parameter_reads_the_same_by_its_json_and_its_proto_name() {
    let set = mixed();
    let addr = set.server.addr;
    let reference = set.reference();
    let party = reference.largest_party();
    let asset = reference.assets_of(&party).into_iter().next().unwrap();
    let times: Vec<i64> = reference
        .entries_of(&party)
        .map(|entry| entry.key.0)
        .collect();
    let middle = times[times.len() / 2].to_string();

    // The party alone, by either name.
    let by_json = get(addr, &format!("{EXPORT}?partyId={party}"), &[]);
    let by_proto = get(addr, &format!("{EXPORT}?party_id={party}"), &[]);
    assert_eq!(by_json.status, 200);
    assert_eq!(answer(&by_json), answer(&by_proto));
    let base = format!("{EXPORT}?partyId={party}");
    check_both_names(addr, &base, ["assetId", "asset_id"], &asset);
    for names in [
        ["dateRange.startTimestamp", "date_range.start_timestamp"],
        ["dateRange.endTimestamp", "date_range.end_timestamp"],
    ] {
        check_both_names(addr, &base, names, &middle);
    }

    let spec = reference
        .oracle
        .iter()
        .find_map(|datum| datum.specs.first())
        .unwrap();
    let first_page = get(addr, &format!("{ORACLE}?pagination.first=3"), &[]).json();
    let cursor = first_page["oracleData"]["pageInfo"]["endCursor"]
        .as_str()
        .unwrap()
        .to_owned();
    let base = format!("{ORACLE}?unknown=1");
    check_both_names(addr, &base, ["oracleSpecId", "oracle_spec_id"], spec);
    for (name, value) in [
        ("pagination.first", "2"),
        ("pagination.after", cursor.as_str()),
        ("pagination.last", "2"),
        ("pagination.before", cursor.as_str()),
    ] {
        check_both_names(addr, &base, [name, name], value);
    }
    check_both_names(
        addr,
        &base,
        ["pagination.newestFirst", "pagination.newest_first"],
        "false",
    );
}

#[test]
fn a_parameter_given_under_both_names_is_refused_naming_it() {
    let set = mixed();
    let party = set.reference().largest_party();
    let refused = |field: &str| {
        json!({"code": 3, "message": "InvalidArgument error", "details": [{
            "@type": "type.googleapis.com/vega.ErrorDetail", "code": 10015,
            "message": "malformed request", "inner": format!("too many values for field {field}")
        }]})
    };
    let export = set.get(&format!("{EXPORT}?partyId={party}&party_id={party}"));
    assert_eq!(export.status, 400);
    assert_eq!(
        export.json(),
        json!({"error": refused(r#""partyId" (party_id)"#)})
    );
    let listing = set.get(&format!(
        "{ORACLE}?pagination.newestFirst=true&pagination.newest_first=true"
    ));
    assert_eq!(listing.status, 400);
    assert_eq!(
        listing.json(),
        refused(r#""pagination.newestFirst" (pagination.newest_first)"#)
    );
}

/// The store's blocks as the answers must show them: the last height and its vega time.
fn last_block(dataset: &Dataset) -> (String, String) {
    // The height a continuation would start at follows the last stored one.
    let last_height = dataset.end_height - 1;
    (last_height.to_string(), dataset.last_time().to_string())
}

#[track_caller]
fn check_headers(addr: std::net::SocketAddr, dataset: &Dataset) {
    // PostgreSQL's tip is refreshed in the background, up to a second late: ask for it now.
    dataset.store.refresh_chain_tip().unwrap();
    let (height, time) = last_block(dataset);
    let party = dataset.reference.largest_party();
    for target in [
        format!("{EXPORT}?partyId={party}"),
        format!("{EXPORT}?party_id=nope"),
        format!("{ORACLE}?pagination.first=1"),
        format!("{ORACLE}?pagination.first=0"),
        "/api/v2/nope".to_owned(),
    ] {
        let response = get(addr, &target, &[]);
        assert_eq!(
            response.header("x-block-height"),
            Some(height.as_str()),
            "{target}"
        );
        assert_eq!(
            response.header("x-block-timestamp"),
            Some(time.as_str()),
            "{target}"
        );
    }
    let metrics = get(addr, "/metrics", &[]);
    assert!(metrics.header("x-block-height").is_none());
    let first = dataset.config.start_height;
    for line in [
        format!("datanode_first_block_height {first}"),
        format!("datanode_last_block_height {height}"),
    ] {
        assert!(metrics.text().lines().any(|l| l == line), "{line}");
    }
}

#[test]
fn block_headers_and_metrics_follow_the_ingest() {
    let mut dataset = Dataset::build(crate::live_ingest::first_config());
    let server = Server::start(dataset.store.clone(), AppConfig::default());
    check_headers(server.addr, &dataset);
    let before = last_block(&dataset);
    let next = crate::live_ingest::next_config(&dataset, 8);
    dataset.append(&next);
    assert_ne!(last_block(&dataset), before);
    check_headers(server.addr, &dataset);
}

/// A page answered from the page cache is never older than the block its answer announces in
/// `X-Block-Height`: on PostgreSQL the cache learns of commits from the writer's announcements,
/// which come after the commit is visible, so the same page is asked for while blocks are
/// appended, and each answer must hold every datum up to the block it announces (by its time,
/// `X-Block-Timestamp`: the generator's blocks have rising times).
#[test]
fn a_cached_page_is_never_older_than_its_block_height() {
    let mut dataset = Dataset::build(crate::live_ingest::first_config());
    let server = Server::start(dataset.store.clone(), AppConfig::default());
    let target = format!("{ORACLE}?pagination.first=5");
    for seed in 8..11 {
        let next = crate::live_ingest::next_config(&dataset, seed);
        dataset.append(&next);
        let (last, _) = last_block(&dataset);
        // Asked until an answer announces the last block: the store learns of it by itself.
        for asked in 0.. {
            assert!(asked < 1_000_000, "block {last} never announced");
            let response = get(server.addr, &target, &[]);
            let header = |name| response.header(name).expect(name).to_owned();
            let (height, time) = (header("x-block-height"), header("x-block-timestamp"));
            let time: i64 = time.parse().unwrap();
            let json = response.json();
            let newest = &json["oracleData"]["edges"][0]["node"];
            let shown = dataset
                .reference
                .oracle
                .iter()
                .find(|datum| datum.node == *newest)
                .expect("a datum of the stream")
                .key
                .0;
            let announced = dataset
                .reference
                .oracle
                .iter()
                .map(|datum| datum.key.0)
                .filter(|&at| at <= time)
                .max()
                .expect("data at the announced block");
            assert!(
                shown >= announced,
                "an answer announcing block {height} (time {time}) shows data up to {shown} \
                 only, not {announced}"
            );
            if height == last {
                break;
            }
        }
    }
}
