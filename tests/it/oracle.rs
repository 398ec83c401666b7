//! `GET /api/v2/oracle/data`: walks in both directions and orders compared row by row with the
//! model, page flags and cursors, the response shape, and errors.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

use crate::reference::Datum;
use crate::support::{Shared, mixed};

pub const ORACLE: &str = "/api/v2/oracle/data";

/// One page of the listing.
#[derive(Debug)]
pub struct Page {
    /// (node, cursor) of every edge.
    pub edges: Vec<(Value, String)>,
    pub has_next: bool,
    pub has_previous: bool,
    pub start_cursor: String,
    pub end_cursor: String,
}

/// Fetches `ORACLE?query` and checks the response's shape: status, content type, and exactly
/// the fields of Vega's `ListOracleDataResponse`.
#[track_caller]
pub fn fetch(addr: std::net::SocketAddr, query: &str) -> Page {
    let target = format!("{ORACLE}?{query}");
    let response = crate::support::get(addr, &target, &[]);
    assert_eq!(response.status, 200, "{target}: {}", response.text());
    assert_eq!(
        response.header("content-type"),
        Some("application/json"),
        "{target}"
    );
    // A page is a whole body: its length is announced, it is not chunked.
    assert_eq!(
        response.header("content-length"),
        Some(response.body.len().to_string().as_str()),
        "{target}"
    );
    let body = response.json();
    crate::schema::page(&body);
    let keys = |value: &Value| -> Vec<String> {
        let object = value
            .as_object()
            .unwrap_or_else(|| panic!("{target}: {value}"));
        object.keys().cloned().collect()
    };
    assert_eq!(keys(&body), ["oracleData"], "{target}");
    let data = &body["oracleData"];
    assert_eq!(keys(data), ["edges", "pageInfo"], "{target}");
    let info = &data["pageInfo"];
    assert_eq!(
        keys(info),
        ["endCursor", "hasNextPage", "hasPreviousPage", "startCursor"],
        "{target}"
    );
    let edges = data["edges"]
        .as_array()
        .unwrap_or_else(|| panic!("{target}: edges"))
        .iter()
        .map(|edge| {
            assert_eq!(keys(edge), ["cursor", "node"], "{target}");
            let cursor = edge["cursor"].as_str().expect("cursor is a string");
            (edge["node"].clone(), cursor.to_owned())
        })
        .collect();
    let flag = |name: &str| info[name].as_bool().unwrap_or_else(|| panic!("{name}"));
    let cursor = |name: &str| {
        info[name]
            .as_str()
            .unwrap_or_else(|| panic!("{name}"))
            .to_owned()
    };
    Page {
        edges,
        has_next: flag("hasNextPage"),
        has_previous: flag("hasPreviousPage"),
        start_cursor: cursor("startCursor"),
        end_cursor: cursor("endCursor"),
    }
}

/// Cursors seen so far, by row: a row's cursor is the same on every page that shows it.
pub type Cursors = HashMap<(i64, u64, u64), String>;

/// `page` holds exactly `expected[range]`, in order, with flags saying whether rows lie before
/// and after that range in the chosen order, and cursors matching its ends.
#[track_caller]
pub fn check_page(
    page: &Page,
    expected: &[&Datum],
    range: std::ops::Range<usize>,
    cursors: &mut Cursors,
    context: &str,
) {
    let want: Vec<&Value> = expected[range.clone()].iter().map(|d| &d.node).collect();
    let got: Vec<&Value> = page.edges.iter().map(|(node, _)| node).collect();
    if got != want {
        let first_diff = got.iter().zip(&want).position(|(g, w)| g != w);
        panic!(
            "{context}: page of {} rows, expected rows {range:?} of {}; first difference at {first_diff:?}\n got: {:?}\nwant: {:?}",
            got.len(),
            expected.len(),
            first_diff.map(|i| got[i]),
            first_diff.map(|i| want[i]),
        );
    }
    if range.is_empty() {
        assert!(!page.has_next && !page.has_previous, "{context}: {page:?}");
        assert_eq!(
            (page.start_cursor.as_str(), page.end_cursor.as_str()),
            ("", ""),
            "{context}"
        );
        return;
    }
    assert_eq!(
        page.has_next,
        range.end < expected.len(),
        "{context}: hasNextPage"
    );
    assert_eq!(
        page.has_previous,
        range.start > 0,
        "{context}: hasPreviousPage"
    );
    assert_eq!(page.start_cursor, page.edges[0].1, "{context}: startCursor");
    assert_eq!(
        page.end_cursor,
        page.edges[page.edges.len() - 1].1,
        "{context}: endCursor"
    );
    for (datum, (_, cursor)) in expected[range].iter().zip(&page.edges) {
        let known = cursors.entry(datum.key).or_insert_with(|| cursor.clone());
        assert_eq!(
            known, cursor,
            "{context}: the cursor of {:?} changed",
            datum.key
        );
    }
}

/// The query prefix selecting a spec and an order (`None`: the parameter is left out).
fn selection(spec: Option<&str>, newest_first: Option<bool>) -> String {
    let mut query = String::new();
    if let Some(spec) = spec {
        query.push_str(&format!("oracleSpecId={spec}&"));
    }
    if let Some(newest_first) = newest_first {
        query.push_str(&format!("pagination.newestFirst={newest_first}&"));
    }
    query
}

/// Walks from the start with `first`/`after` using page sizes from `size`, checking every page
/// and the empty page past the end.
#[track_caller]
fn walk_forward(
    set: &Shared,
    spec: Option<&str>,
    newest_first: Option<bool>,
    size: &mut dyn FnMut() -> usize,
    cursors: &mut Cursors,
) {
    let expected = set
        .reference()
        .oracle_rows(spec, newest_first.unwrap_or(true));
    let prefix = selection(spec, newest_first);
    let mut after = String::new();
    let mut position = 0;
    loop {
        let n = size();
        let mut query = format!("{prefix}pagination.first={n}");
        if position > 0 {
            query.push_str(&format!("&pagination.after={after}"));
        }
        let page = fetch(set.server.addr, &query);
        let end = (position + n).min(expected.len());
        check_page(&page, &expected, position..end, cursors, &query);
        if position == end {
            return;
        }
        after = page.end_cursor;
        position = end;
    }
}

/// Walks from the end with `last`/`before`, the mirror of [`walk_forward`].
#[track_caller]
fn walk_backward(
    set: &Shared,
    spec: Option<&str>,
    newest_first: Option<bool>,
    size: &mut dyn FnMut() -> usize,
    cursors: &mut Cursors,
) {
    let expected = set
        .reference()
        .oracle_rows(spec, newest_first.unwrap_or(true));
    let prefix = selection(spec, newest_first);
    let mut before = String::new();
    let mut position = expected.len();
    let mut first_page = true;
    loop {
        let n = size();
        let mut query = format!("{prefix}pagination.last={n}");
        if !first_page {
            query.push_str(&format!("&pagination.before={before}"));
        }
        let page = fetch(set.server.addr, &query);
        let start = position.saturating_sub(n);
        check_page(&page, &expected, start..position, cursors, &query);
        if start == position {
            return;
        }
        before = page.start_cursor;
        position = start;
        first_page = false;
    }
}

/// The specs to walk: every spec of the dataset, the most frequent first.
fn specs(set: &Shared) -> Vec<String> {
    let specs: Vec<String> = set
        .reference()
        .specs_by_frequency()
        .into_iter()
        .map(|(spec, _)| spec)
        .collect();
    assert!(specs.len() >= 3, "{specs:?}");
    specs
}

/// The signature shared by [`walk_forward`] and [`walk_backward`].
type Walk = fn(&Shared, Option<&str>, Option<bool>, &mut dyn FnMut() -> usize, &mut Cursors);

/// Walks the whole listing and every spec's with `walk`, in random page sizes from `seed`: the
/// listing and the most frequent spec in all three orders (default, newest and oldest first),
/// the other specs in both explicit orders.
fn walk_everything(walk: Walk, seed: u64) -> Cursors {
    let set = mixed();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut size = move || rng.random_range(1..=50);
    let mut cursors = Cursors::new();
    for newest_first in [None, Some(true), Some(false)] {
        walk(set, None, newest_first, &mut size, &mut cursors);
    }
    for (spec_idx, spec) in specs(set).iter().enumerate() {
        let orders: &[Option<bool>] = if spec_idx == 0 {
            &[None, Some(true), Some(false)]
        } else {
            &[Some(true), Some(false)]
        };
        for &newest_first in orders {
            walk(set, Some(spec), newest_first, &mut size, &mut cursors);
        }
    }
    cursors
}

#[test]
fn oracle_walks_forward_match_the_reference() {
    let cursors = walk_everything(walk_forward, 17);
    assert_eq!(cursors.len(), mixed().reference().oracle.len());
}

#[test]
fn oracle_walks_backward_match_the_reference() {
    let cursors = walk_everything(walk_backward, 23);
    assert_eq!(cursors.len(), mixed().reference().oracle.len());
}

#[test]
fn oracle_pages_of_one_and_of_5000_rows() {
    let set = mixed();
    let mut cursors = Cursors::new();
    let mut selections: Vec<Option<String>> = vec![None];
    selections.extend(specs(set).into_iter().map(Some));
    for spec in &selections {
        for newest_first in [Some(true), Some(false)] {
            walk_forward(
                set,
                spec.as_deref(),
                newest_first,
                &mut || 5000,
                &mut cursors,
            );
            walk_backward(
                set,
                spec.as_deref(),
                newest_first,
                &mut || 5000,
                &mut cursors,
            );
        }
    }
    // Pages of one row, on the rarest spec to keep the walk short.
    let rarest = specs(set).pop();
    walk_forward(set, rarest.as_deref(), Some(false), &mut || 1, &mut cursors);
    walk_backward(set, rarest.as_deref(), None, &mut || 1, &mut cursors);
}

#[test]
fn oracle_without_pagination_lists_the_newest_1000() {
    let set = mixed();
    let mut cursors = Cursors::new();
    let newest = set.reference().oracle_rows(None, true);
    assert!(
        newest.len() > 1000,
        "the dataset needs more than 1000 oracle data"
    );
    let page = fetch(set.server.addr, "");
    check_page(&page, &newest, 0..1000, &mut cursors, "no pagination");
    let oldest = set.reference().oracle_rows(None, false);
    let page = fetch(set.server.addr, "pagination.newestFirst=false");
    check_page(&page, &oldest, 0..1000, &mut cursors, "oldest first");
    let spec = &specs(set)[0];
    let rows = set.reference().oracle_rows(Some(spec), true);
    let page = fetch(set.server.addr, &format!("oracleSpecId={spec}"));
    let end = rows.len().min(1000);
    check_page(
        &page,
        &rows,
        0..end,
        &mut cursors,
        "one spec, no pagination",
    );
}

#[test]
fn oracle_latest_of_a_spec_is_its_newest_datum() {
    let set = mixed();
    for spec in specs(set) {
        let page = fetch(
            set.server.addr,
            &format!("oracleSpecId={spec}&pagination.first=1"),
        );
        let rows = set.reference().oracle_rows(Some(&spec), false);
        let newest = rows.last().expect("the spec matched data");
        assert_eq!(page.edges.len(), 1, "{spec}");
        assert_eq!(page.edges[0].0, newest.node, "{spec}");
        assert!(page.has_next && !page.has_previous, "{spec}: {page:?}");
    }
}

#[test]
fn oracle_cursor_keeps_its_position_across_orders() {
    let set = mixed();
    let mut cursors = Cursors::new();
    let newest = set.reference().oracle_rows(None, true);
    let oldest = set.reference().oracle_rows(None, false);
    let page = fetch(set.server.addr, "pagination.first=40");
    check_page(&page, &newest, 0..40, &mut cursors, "newest first");
    for edge_idx in [0, 17, 39] {
        let cursor = &page.edges[edge_idx].1;
        // Where that row sits in ascending order.
        let at = oldest.len() - 1 - edge_idx;
        let query =
            format!("pagination.newestFirst=false&pagination.first=15&pagination.after={cursor}");
        let after = fetch(set.server.addr, &query);
        let end = (at + 1 + 15).min(oldest.len());
        check_page(&after, &oldest, at + 1..end, &mut cursors, &query);
        let query =
            format!("pagination.newestFirst=false&pagination.last=15&pagination.before={cursor}");
        let before = fetch(set.server.addr, &query);
        check_page(&before, &oldest, at - 15..at, &mut cursors, &query);
    }
}

#[test]
fn oracle_unknown_spec_is_an_empty_page() {
    let set = mixed();
    let unknown = "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd";
    let mut cursors = Cursors::new();
    for query in [
        format!("oracleSpecId={unknown}"),
        format!("oracleSpecId={unknown}&pagination.first=10"),
        format!("oracleSpecId={unknown}&pagination.last=10&pagination.newestFirst=false"),
    ] {
        let page = fetch(set.server.addr, &query);
        check_page(&page, &[], 0..0, &mut cursors, &query);
    }
}

#[test]
fn oracle_accepts_an_uppercase_spec_id() {
    let set = mixed();
    let mut cursors = Cursors::new();
    for spec in specs(set) {
        let rows = set.reference().oracle_rows(Some(&spec), true);
        let query = format!(
            "oracleSpecId={}&pagination.first=20",
            spec.to_ascii_uppercase()
        );
        let page = fetch(set.server.addr, &query);
        check_page(&page, &rows, 0..rows.len().min(20), &mut cursors, &query);
    }
}

#[test]
fn oracle_nodes_have_vega_field_order_and_string_int64() {
    let set = mixed();
    let target = format!("{ORACLE}?pagination.first=5000");
    let response = set.get(&target);
    let text = response.text();
    let n_rows = set.reference().oracle.len();
    assert!(
        text.starts_with(r#"{"oracleData":{"edges":[{"node":{"externalData":{"data":{"signers":["#),
        "{}",
        &text[..200]
    );
    assert!(text.ends_with("}}}"), "{}", &text[text.len() - 200..]);
    // Every node lists its fields in protobuf order: signers, data, matchedSpecIds,
    // broadcastAt (an int64, so a string), metaData, then error when there is one.
    let nodes: Vec<&str> = text.split(r#"{"node":"#).skip(1).collect();
    assert_eq!(nodes.len(), n_rows);
    let n_errors = set
        .reference()
        .oracle
        .iter()
        .filter(|datum| datum.node["externalData"]["data"].get("error").is_some())
        .count();
    assert!(n_errors > 0, "the dataset has no datum with an error");
    let mut seen_errors = 0;
    for node in nodes {
        let order = [
            r#"{"externalData":{"data":{"signers":["#,
            r#"],"data":["#,
            r#"],"matchedSpecIds":["#,
            r#"],"broadcastAt":""#,
            r#"","metaData":["#,
        ];
        let mut from = 0;
        for field in order {
            let at = node[from..]
                .find(field)
                .unwrap_or_else(|| panic!("{field} missing or out of order in {node}"));
            from += at + field.len();
        }
        let tail = &node[from..];
        if tail.contains(r#"],"error":"#) {
            seen_errors += 1;
        }
        assert!(tail.contains(r#"}}},"cursor":""#), "{node}");
    }
    assert_eq!(seen_errors, n_errors);
}

/// What an invalid listing request must get: 400 and Vega's bare status.
#[track_caller]
fn check_error(query: &str, detail: u32, message: &str) {
    let target = format!("{ORACLE}?{query}");
    let response = mixed().get(&target);
    assert_eq!(response.status, 400, "{target}: {}", response.text());
    assert_eq!(response.header("content-type"), Some("application/json"));
    let body = response.json();
    crate::schema::status(&body);
    let inner = body["details"][0]["inner"]
        .as_str()
        .unwrap_or_else(|| panic!("{target}: no inner in {body}"));
    assert!(!inner.is_empty(), "{target}: empty inner");
    let expected = json!({
        "code": 3,
        "message": "InvalidArgument error",
        "details": [{
            "@type": "type.googleapis.com/vega.ErrorDetail",
            "code": detail,
            "message": message,
            "inner": inner,
        }],
    });
    assert_eq!(body, expected, "{target}");
}

#[test]
fn oracle_rejects_invalid_pagination() {
    let set = mixed();
    let page = fetch(set.server.addr, "pagination.first=2");
    let cursor = &page.edges[1].1;
    let invalid = |query: &str| check_error(query, 10028, "invalid pagination");
    invalid("pagination.first=1&pagination.last=1");
    invalid(&format!(
        "pagination.after={cursor}&pagination.before={cursor}"
    ));
    invalid(&format!("pagination.first=1&pagination.before={cursor}"));
    invalid(&format!("pagination.last=1&pagination.after={cursor}"));
    invalid("pagination.first=0");
    invalid("pagination.last=0");
    invalid("pagination.first=5001");
    invalid("pagination.last=5001");
    invalid("pagination.first=abc");
    invalid("pagination.first=-1");
    invalid("pagination.last=-1");
    invalid("pagination.first=1.5");
    invalid("pagination.after=garbage");
    invalid("pagination.before=garbage");
    invalid("pagination.newestFirst=maybe");
    // A cursor with any one character changed is refused, never read as another position.
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    for char_idx in 0..cursor.len() {
        let mut tampered = cursor.clone().into_bytes();
        let replacement = ALPHABET
            .iter()
            .copied()
            .find(|&c| c != tampered[char_idx])
            .expect("another character");
        tampered[char_idx] = replacement;
        let tampered = String::from_utf8(tampered).expect("ASCII");
        invalid(&format!("pagination.after={tampered}"));
        invalid(&format!("pagination.last=3&pagination.before={tampered}"));
    }
    invalid(&format!("pagination.after={cursor}A"));
    invalid(&format!("pagination.after={}", &cursor[1..]));

    check_error("oracleSpecId=xyz", 10000, "invalid oracle spec ID");
    check_error(
        "oracleSpecId=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde",
        10000,
        "invalid oracle spec ID",
    );
}
