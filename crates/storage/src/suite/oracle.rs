//! Oracle data pages: keyset walks over all data or one spec's, in both orders and directions.

use oracle_core::{PageRequest, PaginationParams, Position, encode_cursor};

use super::{Store, commit, contents, ledger_batch, ledger_row, oracle_row, owned, page};
use crate::{IngestBatch, IngestWriter};

/// (label, (vega time, block, seq), matched specs).
type Datum = (&'static str, (i64, u64, u64), &'static [u8]);

/// A [`Datum`] made at run time.
type OwnedDatum = (String, (i64, u64, u64), Vec<u8>);

/// Ascending by position. Ties on the time are broken by the block and ties on the block by the
/// sequence; spec 9 never matches anything.
const DATA: &[Datum] = &[
    ("d0", (i64::MIN, 1, 1), &[2]),
    ("d1", (100, 10, 1), &[1]),
    ("d2", (100, 10, 4), &[]),
    ("d3", (100, 11, 2), &[1, 2]),
    ("d4", (200, 12, 1), &[2]),
    ("d5", (200, 12, 3), &[1]),
    ("d6", (300, 13, 1), &[]),
    ("d7", (400, 14, 1), &[2, 1]),
    ("d8", (i64::MAX, 15, 1), &[3]),
];

fn position((vega_time, block, seq): (i64, u64, u64)) -> Position {
    Position {
        vega_time,
        block,
        seq,
    }
}

/// Stores [`DATA`] in two batches, the later data first.
fn fill(writer: &mut dyn IngestWriter) {
    let (first, second) = DATA.split_at(4);
    for half in [second, first] {
        commit_data(writer, half);
    }
}

/// Commits oracle data, (label, position, matched specs) each, as one batch.
fn commit_data<L: AsRef<str>, S: AsRef<[u8]>>(
    writer: &mut dyn IngestWriter,
    data: &[(L, (i64, u64, u64), S)],
) {
    let batch = IngestBatch {
        oracle_rows: data
            .iter()
            .map(|(label, key, specs)| oracle_row(label.as_ref(), *key, specs.as_ref()))
            .collect(),
        ..IngestBatch::default()
    };
    commit(writer, &batch);
}

/// The data of `spec` (all data for `None`) as (cursor, label), ascending.
fn expected(spec: Option<u8>) -> Vec<(String, String)> {
    DATA.iter()
        .filter(|(_, _, specs)| spec.is_none_or(|spec| specs.contains(&spec)))
        .map(|(label, key, _)| (encode_cursor(position(*key)), (*label).to_owned()))
        .collect()
}

type Edges = Vec<(String, String)>;

fn edges(page: oracle_core::Page<Vec<u8>>) -> Edges {
    page.edges
        .into_iter()
        .map(|edge| {
            (
                edge.cursor.to_string(),
                String::from_utf8(edge.node).unwrap(),
            )
        })
        .collect()
}

fn order(newest_first: bool) -> &'static str {
    if newest_first { "true" } else { "false" }
}

/// Follows `end_cursor` with `first`/`after` until `has_next_page` is false.
fn walk_forward(store: &impl Store, spec: Option<u8>, size: usize, newest_first: bool) -> Edges {
    let size_text = size.to_string();
    let mut after = String::new();
    let mut walked = Vec::new();
    for page_idx in 0.. {
        let page = page(
            store,
            spec,
            PaginationParams {
                first: Some(&size_text),
                after: Some(&after),
                newest_first: Some(order(newest_first)),
                ..PaginationParams::default()
            },
        );
        assert_eq!(page.info.has_previous_page, page_idx > 0);
        let last = !page.info.has_next_page;
        assert!(if last {
            page.edges.len() <= size
        } else {
            page.edges.len() == size
        });
        after = page.info.end_cursor.to_string();
        walked.extend(edges(page));
        if last {
            break;
        }
    }
    walked
}

/// Follows `start_cursor` with `last`/`before` until `has_previous_page` is false.
fn walk_backward(store: &impl Store, spec: Option<u8>, size: usize, newest_first: bool) -> Edges {
    let size_text = size.to_string();
    let mut before = String::new();
    let mut pages = Vec::new();
    for page_idx in 0.. {
        let page = page(
            store,
            spec,
            PaginationParams {
                last: Some(&size_text),
                before: Some(&before),
                newest_first: Some(order(newest_first)),
                ..PaginationParams::default()
            },
        );
        assert_eq!(page.info.has_next_page, page_idx > 0);
        let first = !page.info.has_previous_page;
        assert!(if first {
            page.edges.len() <= size
        } else {
            page.edges.len() == size
        });
        before = page.info.start_cursor.to_string();
        pages.push(edges(page));
        if first {
            break;
        }
    }
    pages.into_iter().rev().flatten().collect()
}

/// Every walk of `spec`'s listing concatenates to `expected`, in the order asked for.
#[track_caller]
fn check_walks(store: &impl Store, spec: Option<u8>, expected: &[(String, String)]) {
    let n = expected.len();
    for size in [1, 2, 3, n.max(2) - 1, n.max(1), n + 1, 5000] {
        for newest_first in [false, true] {
            let mut want = expected.to_vec();
            if newest_first {
                want.reverse();
            }
            let context = format!("spec {spec:?}, page size {size}, newest first {newest_first}");
            assert_eq!(
                walk_forward(store, spec, size, newest_first),
                want,
                "forward, {context}"
            );
            assert_eq!(
                walk_backward(store, spec, size, newest_first),
                want,
                "backward, {context}"
            );
        }
    }
}

/// Conformance test: oracle pages walk every dataset in both directions.
pub fn oracle_pages_walk_every_dataset_in_both_directions<S: Store>(
    store: &S,
    writer: &mut dyn IngestWriter,
) {
    check_walks(store, None, &[]);
    check_walks(store, Some(1), &[]);
    fill(writer);
    for spec in [None, Some(1), Some(2), Some(3), Some(9)] {
        check_walks(store, spec, &expected(spec));
    }
}

/// Enough data of a kilobyte each that a backend storing them in blocks (PostgreSQL's segments
/// of 16 KiB) spreads them over several, committed in batches of every size and one out of
/// order, so that pages begin, end and turn at block boundaries, and a page may span more
/// blocks than its first read brings.
pub fn oracle_pages_walk_data_of_many_kilobytes<S: Store>(
    store: &S,
    writer: &mut dyn IngestWriter,
) {
    let data = commit_kilobyte_data(writer);
    for spec in [None, Some(1), Some(2), Some(3)] {
        let expected: Edges = data
            .iter()
            .filter(|(_, _, specs)| spec.is_none_or(|spec| specs.contains(&spec)))
            .map(|(label, key, _)| (encode_cursor(position(*key)), label.clone()))
            .collect();
        for size in [1, 7, 100, 101, 250] {
            for newest_first in [false, true] {
                let mut want = expected.clone();
                if newest_first {
                    want.reverse();
                }
                let context =
                    format!("spec {spec:?}, page size {size}, newest first {newest_first}");
                assert!(
                    walk_forward(store, spec, size, newest_first) == want,
                    "forward, {context}"
                );
                assert!(
                    walk_backward(store, spec, size, newest_first) == want,
                    "backward, {context}"
                );
            }
        }
    }
}

/// Walks of the data of [`oracle_pages_walk_data_of_many_kilobytes`], in both orders and
/// directions, reading three pages ahead: the main page and every page read ahead equal the
/// pages read for their requests alone, each page read ahead has the request the walk asks
/// next, and only the walk's end leaves fewer than three.
pub fn oracle_pages_read_ahead_are_the_walks_next_pages<S: Store>(
    store: &S,
    writer: &mut dyn IngestWriter,
) {
    const AHEAD: usize = 3;
    commit_kilobyte_data(writer);
    for spec_n in [None, Some(1), Some(3)] {
        let spec = spec_n.map(super::spec);
        for size in ["1", "7", "100"] {
            for (newest_first, last_mode) in
                [(false, false), (true, false), (false, true), (true, true)]
            {
                let context = format!(
                    "spec {spec_n:?}, size {size}, newest first {newest_first}, last mode {last_mode}"
                );
                let (size_name, cursor_name) = if last_mode {
                    ("last", "before")
                } else {
                    ("first", "after")
                };
                let parse = |cursor: &str| {
                    let mut params = PaginationParams {
                        newest_first: Some(order(newest_first)),
                        ..PaginationParams::default()
                    };
                    params.first = (size_name == "first").then_some(size);
                    params.last = (size_name == "last").then_some(size);
                    params.after = (cursor_name == "after").then_some(cursor);
                    params.before = (cursor_name == "before").then_some(cursor);
                    PageRequest::parse(&params).unwrap()
                };
                let alone = |request: &PageRequest| {
                    let read = store.oracle_page(spec.as_ref(), request).unwrap();
                    owned(read.page, &read.nodes)
                };
                // What the client asks next after a page: the page at its far end's cursor,
                // while its far-side flag says something lies beyond.
                let next_after = |page: &oracle_core::Page<Vec<u8>>| {
                    let (far_side, far) = if last_mode {
                        (page.info.has_previous_page, page.info.start_cursor)
                    } else {
                        (page.info.has_next_page, page.info.end_cursor)
                    };
                    far_side.then(|| parse(far.as_str()))
                };
                let mut request = parse("");
                let mut pages = 0;
                loop {
                    let read = store.oracle_pages(spec.as_ref(), &request, AHEAD).unwrap();
                    let mut before = owned(read.page, &read.nodes);
                    assert!(before == alone(&request), "{context}: page {pages}");
                    pages += 1;
                    assert!(read.ahead.len() <= AHEAD, "{context}");
                    for (next, ahead) in &read.ahead {
                        assert_eq!(Some(*next), next_after(&before), "{context}: page {pages}");
                        let ahead = owned(ahead.clone(), &read.nodes);
                        assert!(ahead == alone(next), "{context}: page {pages}, read ahead");
                        pages += 1;
                        before = ahead;
                    }
                    let Some(next) = next_after(&before) else {
                        break;
                    };
                    assert_eq!(
                        read.ahead.len(),
                        AHEAD,
                        "{context}: the walk goes on past the pages read ahead"
                    );
                    request = next;
                }
            }
        }
    }
}

/// Commits 300 data of a kilobyte each (see [`oracle_pages_walk_data_of_many_kilobytes`]) and
/// returns them as (label, position, matched specs), ascending.
fn commit_kilobyte_data(writer: &mut dyn IngestWriter) -> Vec<OwnedDatum> {
    // (label, position, matched specs), ascending.
    let data: Vec<OwnedDatum> = (0..300u64)
        .map(|n| {
            let label = format!("d{n:03}-{}", "x".repeat(1000));
            let specs = [1, 2, 3]
                .into_iter()
                .filter(|s| n % u64::from(*s) == 0)
                .collect();
            (label, (n as i64 / 3, n / 2, n), specs)
        })
        .collect();
    // Batches of 1, 10 and 100 data; the last 40 committed before the 40 before them.
    let mut batches: Vec<&[_]> = vec![&data[..1], &data[1..11], &data[11..111]];
    batches.extend(data[111..220].chunks(3));
    batches.extend([&data[260..], &data[220..260]]);
    for part in batches {
        commit_data(writer, part);
    }
    data
}

/// Conformance test: oracle unknown spec has an empty page.
pub fn oracle_unknown_spec_has_an_empty_page<S: Store>(store: &S, writer: &mut dyn IngestWriter) {
    fill(writer);
    let cursor = encode_cursor(position((100, 10, 1)));
    let requests = [
        PaginationParams::default(),
        PaginationParams {
            after: Some(&cursor),
            ..PaginationParams::default()
        },
        PaginationParams {
            before: Some(&cursor),
            newest_first: Some("false"),
            ..PaginationParams::default()
        },
    ];
    for params in requests {
        let page = page(store, Some(9), params);
        assert!(page.edges.is_empty());
        assert!(!page.info.has_next_page && !page.info.has_previous_page);
        assert_eq!(
            (
                page.info.start_cursor.as_str(),
                page.info.end_cursor.as_str()
            ),
            ("", "")
        );
    }
}

#[track_caller]
fn check_latest(store: &impl Store, spec: Option<u8>, expected: &str, has_next_page: bool) {
    let page = page(
        store,
        spec,
        PaginationParams {
            first: Some("1"),
            ..PaginationParams::default()
        },
    );
    assert_eq!(page.info.has_next_page, has_next_page);
    assert!(!page.info.has_previous_page);
    let labels: Vec<String> = edges(page).into_iter().map(|(_, label)| label).collect();
    assert_eq!(labels.join(" "), expected);
}

/// Conformance test: oracle latest value of a spec.
pub fn oracle_latest_value_of_a_spec<S: Store>(store: &S, writer: &mut dyn IngestWriter) {
    check_latest(store, Some(1), "", false);
    fill(writer);
    check_latest(store, Some(1), "d7", true);
    check_latest(store, Some(2), "d7", true);
    check_latest(store, Some(3), "d8", false);
    check_latest(store, None, "d8", true);
    // A newer datum of the spec becomes the latest value.
    commit(
        writer,
        &IngestBatch {
            oracle_rows: vec![oracle_row("d9", (500, 16, 1), &[1])],
            ..IngestBatch::default()
        },
    );
    check_latest(store, Some(1), "d9", true);
    check_latest(store, Some(2), "d7", true);
}

/// One page from `anchor`: `("first", n)` pages with `after`, `("last", n)` with `before`.
#[track_caller]
fn check_anchor(
    store: &impl Store,
    spec: Option<u8>,
    (mode, size): (&str, &str),
    anchor: &str,
    newest_first: &str,
    expected: &str,
    (has_previous_page, has_next_page): (bool, bool),
) {
    let params = match mode {
        "first" => PaginationParams {
            first: Some(size),
            after: Some(anchor),
            newest_first: Some(newest_first),
            ..PaginationParams::default()
        },
        _ => PaginationParams {
            last: Some(size),
            before: Some(anchor),
            newest_first: Some(newest_first),
            ..PaginationParams::default()
        },
    };
    let page = page(store, spec, params);
    assert_eq!(page.info.has_previous_page, has_previous_page);
    assert_eq!(page.info.has_next_page, has_next_page);
    let labels: Vec<String> = edges(page).into_iter().map(|(_, label)| label).collect();
    assert_eq!(labels.join(" "), expected);
}

/// Conformance test: oracle cursor between or beyond rows.
pub fn oracle_cursor_between_or_beyond_rows<S: Store>(store: &S, writer: &mut dyn IngestWriter) {
    fill(writer);
    let cursor = |key| encode_cursor(position(key));
    let between = cursor((150, 0, 0));
    // The largest block and sequence a cursor can name (larger ones are refused when decoded).
    let max = i64::MAX as u64;
    let huge = cursor((100, max, max));
    let first = cursor((i64::MIN, 0, 0));
    let last = cursor((i64::MAX, max, max));
    let (first_2, first_5, last_2, last_5) =
        (("first", "2"), ("first", "5"), ("last", "2"), ("last", "5"));

    check_anchor(
        store,
        None,
        first_2,
        &between,
        "false",
        "d4 d5",
        (true, true),
    );
    check_anchor(
        store,
        None,
        first_5,
        &between,
        "true",
        "d3 d2 d1 d0",
        (true, false),
    );
    check_anchor(
        store,
        None,
        last_2,
        &between,
        "false",
        "d2 d3",
        (true, true),
    );
    check_anchor(store, None, last_2, &between, "true", "d5 d4", (true, true));
    check_anchor(
        store,
        Some(1),
        first_5,
        &between,
        "false",
        "d5 d7",
        (true, false),
    );
    check_anchor(
        store,
        Some(2),
        last_5,
        &between,
        "false",
        "d0 d3",
        (false, true),
    );
    check_anchor(store, None, first_2, &huge, "false", "d4 d5", (true, true));
    check_anchor(store, None, first_2, &huge, "true", "d3 d2", (true, true));
    check_anchor(
        store,
        None,
        first_2,
        &first,
        "false",
        "d0 d1",
        (false, true),
    );
    check_anchor(store, None, first_2, &last, "true", "d8 d7", (false, true));
    check_anchor(store, None, last_2, &last, "false", "d7 d8", (true, false));
    // Nothing beyond the ends: an empty page reports no neighbours.
    check_anchor(store, None, first_2, &last, "false", "", (false, false));
    check_anchor(store, None, first_2, &first, "true", "", (false, false));
}

/// The data version: reads leave it as it is, every commit changes it (once the store has
/// learnt of it: see [`Store::refresh_chain_tip`]), and a backend that cannot tell never starts
/// telling.
pub fn oracle_data_version_changes_with_every_commit<S: Store>(
    store: &S,
    writer: &mut dyn IngestWriter,
) {
    let read = || {
        contents(store, &[1]);
        store.data_version().unwrap()
    };
    let Some(mut version) = store.data_version().unwrap() else {
        fill(writer);
        assert_eq!(read(), None);
        return;
    };
    let batches = [
        IngestBatch {
            oracle_rows: vec![oracle_row("d0", (100, 10, 1), &[1])],
            ..IngestBatch::default()
        },
        ledger_batch(vec![ledger_row("l0", 1, 1, (100, 10, 1, 0))]),
        IngestBatch {
            oracle_rows: vec![oracle_row("d1", (200, 11, 1), &[])],
            ..IngestBatch::default()
        },
    ];
    for batch in &batches {
        assert_eq!(read(), Some(version), "a read changed the version");
        assert_eq!(store.data_version().unwrap(), Some(version));
        commit(writer, batch);
        store.refresh_chain_tip().unwrap();
        let after = store.data_version().unwrap().expect("still told");
        assert_ne!(after, version, "a commit left the version as it was");
        version = after;
    }
}
