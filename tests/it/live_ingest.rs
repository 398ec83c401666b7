//! Reading while an ingest appends: a cursor walk sees every row that existed when it began
//! exactly once, in order, whatever is committed between its pages, and a page kept by the page
//! cache gives way to the new data.

use eventgen::GenerateConfig;
use http_api::AppConfig;

use crate::oracle::{Cursors, ORACLE, Page, check_page, fetch};
use crate::reference::Filter;
use crate::support::{Dataset, Server, get};

pub fn first_config() -> GenerateConfig {
    GenerateConfig {
        seed: 3,
        blocks: 40,
        parties: 4,
        assets: 2,
        markets: 2,
        specs: 3,
        entries_per_block: 4,
        oracle_data_per_block: 3,
        ..GenerateConfig::default()
    }
}

/// The blocks that follow everything in `dataset`, from another seed (without a genesis block:
/// they continue the chain).
pub fn next_config(dataset: &Dataset, seed: u64) -> GenerateConfig {
    GenerateConfig {
        seed,
        start_height: dataset.end_height,
        start_time_nanos: dataset.last_time(),
        genesis: false,
        ..first_config()
    }
}

#[test]
fn oracle_walk_sees_each_row_once_while_an_ingest_appends() {
    let mut dataset = Dataset::build(first_config());
    let server = Server::start(dataset.store.clone(), AppConfig::default());
    let before_ingest: Vec<(i64, u64, u64)> = dataset
        .reference
        .oracle
        .iter()
        .map(|datum| datum.key)
        .collect();
    let n_before = before_ingest.len();
    let mut cursors = Cursors::new();

    // An ascending walk and a newest-first walk, both started before the ingest.
    let page_size = 7;
    let mut ascending: Vec<Page> = Vec::new();
    let mut descending: Vec<Page> = Vec::new();
    let next = |pages: &mut Vec<Page>, newest_first: bool| -> bool {
        let mut query =
            format!("pagination.newestFirst={newest_first}&pagination.first={page_size}");
        if let Some(last) = pages.last() {
            if !last.has_next {
                return false;
            }
            query.push_str(&format!("&pagination.after={}", last.end_cursor));
        }
        pages.push(fetch(server.addr, &query));
        true
    };
    for _ in 0..3 {
        next(&mut ascending, false);
        next(&mut descending, true);
    }
    for round in 0..2 {
        let config = next_config(&dataset, 100 + round);
        dataset.append(&config);
        for _ in 0..3 {
            next(&mut ascending, false);
            next(&mut descending, true);
        }
    }
    while next(&mut ascending, false) {}
    while next(&mut descending, true) {}

    // Ascending: the old rows, then the appended ones (they come later in vega time), each
    // exactly once; the last page knows nothing follows.
    let all = dataset.reference.oracle_rows(None, false);
    assert!(all.len() > n_before);
    assert_eq!(
        all[..n_before].iter().map(|d| d.key).collect::<Vec<_>>(),
        before_ingest
    );
    let mut position = 0;
    for (page_idx, page) in ascending.iter().enumerate() {
        let end = (position + page.edges.len()).min(all.len());
        let context = format!("ascending page {page_idx}");
        // Flags describe the data as of each page: only the last page has no next.
        let expected_next = page_idx + 1 < ascending.len();
        assert_eq!(page.has_next, expected_next, "{context}");
        assert_eq!(page.has_previous, page_idx > 0, "{context}");
        let nodes: Vec<_> = page.edges.iter().map(|(node, _)| node).collect();
        let want: Vec<_> = all[position..end].iter().map(|d| &d.node).collect();
        assert_eq!(nodes, want, "{context}");
        position = end;
    }
    assert_eq!(position, all.len(), "the ascending walk missed rows");

    // Newest first: the rows appended after the walk began are newer than its start, so it
    // sees exactly the rows that existed then.
    let old = dataset.reference.oracle_rows(None, true);
    let old: Vec<_> = old
        .into_iter()
        .filter(|d| before_ingest.contains(&d.key))
        .collect();
    let mut position = 0;
    for (page_idx, page) in descending.iter().enumerate() {
        let end = position + page.edges.len();
        let context = format!("descending page {page_idx}");
        let nodes: Vec<_> = page.edges.iter().map(|(node, _)| node).collect();
        let want: Vec<_> = old[position..end].iter().map(|d| &d.node).collect();
        assert_eq!(nodes, want, "{context}");
        assert_eq!(page.has_next, end < old.len(), "{context}");
        position = end;
    }
    assert_eq!(position, n_before, "the newest-first walk missed rows");

    // And now, a fresh walk and the exports see everything.
    let newest = dataset.reference.oracle_rows(None, true);
    let page = fetch(server.addr, "pagination.first=5000");
    check_page(
        &page,
        &newest,
        0..newest.len(),
        &mut cursors,
        "after the ingest",
    );
    for party in dataset.reference.parties() {
        let target = format!("/api/v2/ledgerentry/export?partyId={party}");
        let response = get(server.addr, &target, &[]);
        assert_eq!(response.status, 200);
        let filter = Filter {
            party: &party,
            ..Filter::default()
        };
        assert_eq!(response.text(), dataset.reference.csv(filter), "{target}");
    }
}

/// The page cache over a real store and socket: the same page asked twice is the same answer,
/// head and body (the second from the cache, on either backend), and an ingest between two
/// asks shows its data once the store has learnt of it: at once on SQLite, when the writer's
/// announcement arrives on PostgreSQL (waited for here; `wire.rs` checks the answers meanwhile).
#[test]
fn a_repeated_page_is_the_same_answer_until_an_ingest_commits() {
    let mut dataset = Dataset::build(first_config());
    let server = Server::start(dataset.store.clone(), AppConfig::default());
    let target = format!("{ORACLE}?pagination.first=5");
    let accept = [("accept-encoding", "gzip")];
    // Everything but the `Date` and the `X-Request-Id` the server stamps on each answer.
    let answer = || {
        let response = get(server.addr, &target, &accept);
        let headers: Vec<_> = response
            .headers
            .iter()
            .filter(|(name, _)| name != "date" && name != "x-request-id")
            .cloned()
            .collect();
        (response.status, headers, response.body)
    };
    let first = answer();
    assert_eq!(first.0, 200);
    assert_eq!(answer(), first);
    let metrics = get(server.addr, "/metrics", &[]);
    let hits = metrics
        .text()
        .lines()
        .find_map(|line| line.strip_prefix("datanode_page_cache_hits_total "))
        .expect("the hit counter");
    assert_eq!(hits, "1");

    let config = next_config(&dataset, 7);
    dataset.append(&config);
    dataset.store.refresh_chain_tip().unwrap();
    let newest = dataset.reference.oracle_rows(None, true);
    let page = fetch(server.addr, "pagination.first=5");
    check_page(
        &page,
        &newest,
        0..5,
        &mut Cursors::new(),
        "after the ingest",
    );
}
