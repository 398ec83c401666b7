use super::*;
use crate::{decode_cursor, encode_cursor};

/// Row payloads are the row's index in the original dataset.
type Row = (Position, u32);

/// `n` rows in ascending position order. Four rows share each Vega time, two each block, and
/// `seq` is 1 or 4, so there is room for positions between any two neighbours.
fn dataset(n: u32) -> Vec<Row> {
    (0..n)
        .map(|idx| {
            let position = Position {
                vega_time: 1_690_000_000_000_000_000 + i64::from(idx / 4) * 1000,
                block: u64::from(idx / 2),
                seq: if idx % 2 == 0 { 1 } else { 4 },
            };
            (position, idx)
        })
        .collect()
}

/// A position strictly between `row` and the next row of [`dataset`] (or after the last).
fn just_after(row: Position) -> Position {
    Position {
        seq: row.seq + 1,
        ..row
    }
}

const BEFORE_ALL: Position = Position {
    vega_time: i64::MIN,
    block: 0,
    seq: 0,
};
/// The last position a cursor can name: stores keep positions in signed 64-bit columns.
const AFTER_ALL: Position = Position {
    vega_time: i64::MAX,
    block: i64::MAX as u64,
    seq: i64::MAX as u64,
};

/// The in-test storage: executes a [`Scan`] over rows sorted by position.
fn run(rows: &[Row], scan: Scan) -> Vec<Row> {
    let beyond = |position: &Position| match scan.after {
        None => true,
        Some(after) if scan.inclusive && *position == after => true,
        Some(after) if scan.descending => *position < after,
        Some(after) => *position > after,
    };
    let ordered: Box<dyn Iterator<Item = &Row>> = if scan.descending {
        Box::new(rows.iter().rev())
    } else {
        Box::new(rows.iter())
    };
    ordered
        .filter(|(position, _)| beyond(position))
        .take(scan.limit)
        .copied()
        .collect()
}

/// The storage protocol of [`PageRequest`], against the in-test storage.
fn fetch(rows: &[Row], params: &PaginationParams<'_>) -> Result<Page<u32>, Error> {
    let request = PageRequest::parse(params)?;
    Ok(fetch_request(rows, &request))
}

fn fetch_request(rows: &[Row], request: &PageRequest) -> Page<u32> {
    let scanned = run(rows, request.main_scan());
    let positions: Vec<Position> = scanned.iter().map(|(position, _)| *position).collect();
    let boundary_exists = request
        .boundary_scan(&positions)
        .is_some_and(|scan| !run(rows, scan).is_empty());
    request.assemble(scanned, boundary_exists)
}

/// Builds parameters from `name=value` pairs, as the HTTP layer would.
fn params<'a>(query: &[(&str, &'a str)]) -> PaginationParams<'a> {
    let mut params = PaginationParams::default();
    for &(name, value) in query {
        let slot = match name {
            "first" => &mut params.first,
            "after" => &mut params.after,
            "last" => &mut params.last,
            "before" => &mut params.before,
            "newestFirst" => &mut params.newest_first,
            _ => panic!("unknown parameter {name}"),
        };
        *slot = Some(value);
    }
    params
}

fn bool_text(value: bool) -> &'static str {
    if value { "true" } else { "false" }
}

/// The dataset in the chosen order.
fn in_order(rows: &[Row], newest_first: bool) -> Vec<Row> {
    let mut ordered = rows.to_vec();
    if newest_first {
        ordered.reverse();
    }
    ordered
}

/// Checks the invariants every page must satisfy against `expected` rows and flags.
#[track_caller]
fn check_page(page: &Page<u32>, expected: &[Row], has_previous: bool, has_next: bool) {
    let got: Vec<Row> = page
        .edges
        .iter()
        .map(|edge| {
            let position = decode_cursor(&edge.cursor).expect("edge cursors decode");
            (position, edge.node)
        })
        .collect();
    assert_eq!(got, expected, "page rows");
    let expected_info = PageInfo {
        has_next_page: has_next,
        has_previous_page: has_previous,
        start_cursor: expected
            .first()
            .map_or(Cursor::EMPTY, |(position, _)| Cursor::new(*position)),
        end_cursor: expected
            .last()
            .map_or(Cursor::EMPTY, |(position, _)| Cursor::new(*position)),
    };
    assert_eq!(page.info, expected_info, "page info");
}

/// Walks from the start of the chosen order with `first`/`after` to its end, and from its
/// end with `last`/`before` to its start; both walks must yield the dataset exactly.
#[track_caller]
fn check_walks(n_rows: u32, page_size: u32, newest_first: bool) {
    let rows = dataset(n_rows);
    let ordered = in_order(&rows, newest_first);
    let size = page_size.to_string();
    let order = bool_text(newest_first);
    let chunk = page_size as usize;

    // Forward.
    let mut seen: Vec<Row> = Vec::new();
    let mut after = String::new();
    for page_idx in 0.. {
        let page = fetch(
            &rows,
            &params(&[("first", &size), ("after", &after), ("newestFirst", order)]),
        )
        .expect("valid request");
        let start = page_idx * chunk;
        let end = (start + chunk).min(ordered.len());
        let has_next = end < ordered.len();
        check_page(&page, &ordered[start..end], page_idx > 0, has_next);
        seen.extend(
            page.edges
                .iter()
                .map(|edge| (decode(&edge.cursor), edge.node)),
        );
        if !page.info.has_next_page {
            break;
        }
        after = page.info.end_cursor.to_string();
    }
    assert_eq!(seen, ordered, "forward walk");

    // Backward.
    let mut seen: Vec<Row> = Vec::new();
    let mut before = String::new();
    for page_idx in 0.. {
        let page = fetch(
            &rows,
            &params(&[("last", &size), ("before", &before), ("newestFirst", order)]),
        )
        .expect("valid request");
        let end = ordered.len().saturating_sub(page_idx * chunk);
        let start = end.saturating_sub(chunk);
        check_page(&page, &ordered[start..end], start > 0, page_idx > 0);
        let mut rows_of_page: Vec<Row> = page
            .edges
            .iter()
            .map(|edge| (decode(&edge.cursor), edge.node))
            .collect();
        rows_of_page.append(&mut seen);
        seen = rows_of_page;
        if !page.info.has_previous_page {
            break;
        }
        before = page.info.start_cursor.to_string();
    }
    assert_eq!(seen, ordered, "backward walk");
}

fn decode(cursor: &str) -> Position {
    decode_cursor(cursor).expect("page cursors decode")
}

#[test]
fn walks_cover_the_dataset_in_both_directions_and_orders() {
    for n_rows in [0, 1, 2, 3, 7, 16, 17, 40] {
        for page_size in [1, 2, 3, 4, 5, 8, 16, 17, 39, 40, 41, 100] {
            for newest_first in [true, false] {
                check_walks(n_rows, page_size, newest_first);
            }
        }
    }
}

#[test]
fn walks_with_the_default_page_size() {
    let rows = dataset(2500);
    for newest_first in [true, false] {
        let ordered = in_order(&rows, newest_first);
        let order = bool_text(newest_first);

        let page = fetch(&rows, &params(&[("newestFirst", order)])).expect("valid");
        check_page(&page, &ordered[..1000], false, true);

        let after = page.info.end_cursor;
        let page =
            fetch(&rows, &params(&[("after", &after), ("newestFirst", order)])).expect("valid");
        check_page(&page, &ordered[1000..2000], true, true);

        let page =
            fetch(&rows, &params(&[("last", "1000"), ("newestFirst", order)])).expect("valid");
        check_page(&page, &ordered[1500..], true, false);

        let before = page.info.start_cursor;
        let page = fetch(
            &rows,
            &params(&[("before", &before), ("newestFirst", order)]),
        )
        .expect("valid");
        check_page(&page, &ordered[500..1500], true, true);
    }
}

/// What a request means, independently of how it is executed: the spec, by brute force.
#[derive(Clone, Copy, Debug)]
struct Query {
    newest_first: bool,
    last_mode: bool,
    page_size: u32,
    anchor: Option<Position>,
}

fn model(rows: &[Row], query: Query) -> (Vec<Row>, bool, bool) {
    let ordered = in_order(rows, query.newest_first);
    // Index in `ordered` of the first row strictly following the anchor, and the end of the
    // rows strictly preceding it.
    let follows = |position: Position, anchor: Position| {
        if query.newest_first {
            position < anchor
        } else {
            position > anchor
        }
    };
    let size = query.page_size as usize;
    let (start, end) = match (query.last_mode, query.anchor) {
        (false, None) => (0, size.min(ordered.len())),
        (false, Some(anchor)) => {
            let start = ordered
                .iter()
                .position(|(position, _)| follows(*position, anchor))
                .unwrap_or(ordered.len());
            (start, (start + size).min(ordered.len()))
        }
        (true, None) => (ordered.len().saturating_sub(size), ordered.len()),
        (true, Some(anchor)) => {
            let end = ordered
                .iter()
                .position(|(position, _)| follows(*position, anchor) || *position == anchor)
                .unwrap_or(ordered.len());
            (end.saturating_sub(size), end)
        }
    };
    let page = ordered[start..end].to_vec();
    if page.is_empty() {
        return (page, false, false);
    }
    (page, start > 0, end < ordered.len())
}

/// No anchor, anchors before and after every row, each row's own position and one just after
/// each row.
fn anchors(rows: &[Row]) -> Vec<Option<Position>> {
    let mut anchors = vec![None, Some(BEFORE_ALL), Some(AFTER_ALL)];
    for (position, _) in rows {
        anchors.push(Some(*position));
        anchors.push(Some(just_after(*position)));
    }
    anchors
}

#[test]
fn every_request_matches_the_brute_force_model() {
    let rows = dataset(13);
    let anchors = anchors(&rows);
    for newest_first in [true, false] {
        for last_mode in [false, true] {
            for page_size in 1..=15 {
                for &anchor in &anchors {
                    let query = Query {
                        newest_first,
                        last_mode,
                        page_size,
                        anchor,
                    };
                    let size = page_size.to_string();
                    let cursor = anchor.map_or_else(String::new, encode_cursor);
                    let (size_name, cursor_name) = if last_mode {
                        ("last", "before")
                    } else {
                        ("first", "after")
                    };
                    let page = fetch(
                        &rows,
                        &params(&[
                            (size_name, &size),
                            (cursor_name, &cursor),
                            ("newestFirst", bool_text(newest_first)),
                        ]),
                    )
                    .expect("valid request");
                    let (expected, has_previous, has_next) = model(&rows, query);
                    let got: Vec<Row> = page
                        .edges
                        .iter()
                        .map(|edge| (decode(&edge.cursor), edge.node))
                        .collect();
                    assert_eq!(got, expected, "{query:?}");
                    assert_eq!(
                        (page.info.has_previous_page, page.info.has_next_page),
                        (has_previous, has_next),
                        "{query:?}"
                    );
                    assert_eq!(
                        page.info.start_cursor,
                        expected
                            .first()
                            .map_or(Cursor::EMPTY, |row| Cursor::new(row.0)),
                        "{query:?}"
                    );
                    assert_eq!(
                        page.info.end_cursor,
                        expected
                            .last()
                            .map_or(Cursor::EMPTY, |row| Cursor::new(row.0)),
                        "{query:?}"
                    );
                }
            }
        }
    }
}

/// The pages read ahead are the pages a walking client asks for next, each equal to the page
/// read for its own request, and a walk's pages are left out only past its end.
#[test]
fn pages_read_ahead_are_the_walks_next_pages() {
    let rows = dataset(13);
    let anchors = anchors(&rows);
    for (newest_first, last_mode, page_size, anchor, ahead) in combinations(&anchors) {
        let size = page_size.to_string();
        let (size_name, cursor_name) = if last_mode {
            ("last", "before")
        } else {
            ("first", "after")
        };
        let cursor = anchor.map_or_else(String::new, encode_cursor);
        let request = PageRequest::parse(&params(&[
            (size_name, &size),
            (cursor_name, &cursor),
            ("newestFirst", bool_text(newest_first)),
        ]))
        .expect("valid request");
        let scanned = run(&rows, request.read_ahead_scan(ahead));
        let positions: Vec<Position> = scanned.iter().map(|(position, _)| *position).collect();
        let boundary_exists = request
            .boundary_scan(&positions)
            .is_some_and(|scan| !run(&rows, scan).is_empty());
        let (page, pages) = request.assemble_ahead(scanned, boundary_exists, ahead);
        let case = format!("{request:?} ahead {ahead}");
        assert_eq!(page, fetch_request(&rows, &request), "{case}");
        assert!(pages.len() <= ahead, "{case}");
        let mut before = page;
        let mut before_request = request;
        for (next, got) in &pages {
            // What the client sends next: the cursor of the page's far end.
            let far = if last_mode {
                before.info.start_cursor
            } else {
                before.info.end_cursor
            };
            let asked = PageRequest::parse(&params(&[
                (size_name, &size),
                (cursor_name, far.as_str()),
                ("newestFirst", bool_text(newest_first)),
            ]))
            .expect("valid request");
            assert_eq!(*next, asked, "{case}");
            assert_eq!(before_request.next_request(&before), Some(asked), "{case}");
            assert_eq!(*got, fetch_request(&rows, next), "{case}");
            before = got.clone();
            before_request = *next;
        }
        if pages.len() < ahead {
            assert_eq!(before_request.next_request(&before), None, "{case}");
            let far_side = if last_mode {
                before.info.has_previous_page
            } else {
                before.info.has_next_page
            };
            assert!(
                !far_side,
                "{case}: the walk goes on past the pages read ahead"
            );
        }
    }
}

/// Every combination of order, mode, page size (1 to 6), anchor and read-ahead (0 to 3).
fn combinations(
    anchors: &[Option<Position>],
) -> impl Iterator<Item = (bool, bool, u32, Option<Position>, usize)> + '_ {
    [true, false].into_iter().flat_map(move |newest_first| {
        [false, true].into_iter().flat_map(move |last_mode| {
            (1..=6).flat_map(move |page_size| {
                anchors.iter().flat_map(move |&anchor| {
                    (0..=3).map(move |ahead| (newest_first, last_mode, page_size, anchor, ahead))
                })
            })
        })
    })
}

#[test]
fn first_one_newest_first_is_the_latest_row() {
    let rows = dataset(10);
    let latest = rows[9];
    for query in [
        params(&[("first", "1")]),
        params(&[("first", "1"), ("newestFirst", "true")]),
        params(&[("first", "1"), ("newestFirst", "")]),
        params(&[("last", "1"), ("newestFirst", "false")]),
    ] {
        let page = fetch(&rows, &query).expect("valid");
        check_page(
            &page,
            &[latest],
            query.last.is_some(),
            query.first.is_some(),
        );
    }
    let page = fetch(&rows, &params(&[("first", "1"), ("newestFirst", "false")])).expect("valid");
    check_page(&page, &[rows[0]], false, true);
}

#[test]
fn no_parameters_means_the_newest_thousand() {
    assert_eq!(
        PageRequest::parse(&PaginationParams::default()),
        Ok(PageRequest::default())
    );
    let request = PageRequest::default();
    assert!(request.newest_first());
    assert_eq!(request.page_size(), DEFAULT_PAGE_SIZE);
    assert_eq!(
        request.main_scan(),
        Scan {
            descending: true,
            after: None,
            inclusive: false,
            limit: 1001
        }
    );
}

#[test]
fn cursor_from_one_order_works_in_the_other() {
    let rows = dataset(20);
    // Row 12 is the 8th row of the newest-first order (19, 18, ..., 12).
    let page = fetch(&rows, &params(&[("first", "8")])).expect("valid");
    assert_eq!(page.edges.last().map(|edge| edge.node), Some(12));
    let cursor = page.info.end_cursor;

    let page = fetch(
        &rows,
        &params(&[("first", "3"), ("after", &cursor), ("newestFirst", "false")]),
    )
    .expect("valid");
    check_page(&page, &rows[13..16], true, true);

    let page = fetch(
        &rows,
        &params(&[("last", "3"), ("before", &cursor), ("newestFirst", "false")]),
    )
    .expect("valid");
    check_page(&page, &rows[9..12], true, true);

    // And the reverse: an oldest-first cursor in a newest-first request.
    let page = fetch(
        &rows,
        &params(&[("first", "3"), ("after", &cursor), ("newestFirst", "true")]),
    )
    .expect("valid");
    let expected: Vec<Row> = rows[9..12].iter().rev().copied().collect();
    check_page(&page, &expected, true, true);
}

#[test]
fn cursors_of_missing_positions_still_work() {
    let rows = dataset(10);
    // A cursor between rows 4 and 5, as if a row had been deleted there.
    let gap = encode_cursor(just_after(rows[4].0));
    let page = fetch(
        &rows,
        &params(&[("first", "3"), ("after", &gap), ("newestFirst", "false")]),
    )
    .expect("valid");
    check_page(&page, &rows[5..8], true, true);
    let page = fetch(&rows, &params(&[("first", "3"), ("after", &gap)])).expect("valid");
    let expected: Vec<Row> = rows[2..5].iter().rev().copied().collect();
    check_page(&page, &expected, true, true);
    let page = fetch(
        &rows,
        &params(&[("last", "10"), ("before", &gap), ("newestFirst", "false")]),
    )
    .expect("valid");
    check_page(&page, &rows[..5], false, true);

    // Beyond either end of the data: an empty page, or the whole edge.
    let past = encode_cursor(AFTER_ALL);
    let page = fetch(
        &rows,
        &params(&[("first", "3"), ("after", &past), ("newestFirst", "false")]),
    )
    .expect("valid");
    check_page(&page, &[], false, false);
    let page = fetch(&rows, &params(&[("first", "3"), ("after", &past)])).expect("valid");
    let expected: Vec<Row> = rows[7..].iter().rev().copied().collect();
    check_page(&page, &expected, false, true);
}

#[test]
fn deleting_rows_during_a_walk_skips_nothing() {
    for newest_first in [true, false] {
        let original = dataset(30);
        let mut rows = original.clone();
        let mut seen: Vec<Row> = Vec::new();
        let mut after = String::new();
        loop {
            let page = fetch(
                &rows,
                &params(&[
                    ("first", "4"),
                    ("after", &after),
                    ("newestFirst", bool_text(newest_first)),
                ]),
            )
            .expect("valid");
            seen.extend(
                page.edges
                    .iter()
                    .map(|edge| (decode(&edge.cursor), edge.node)),
            );
            // Delete the page's first row and the row the next cursor names.
            let start = decode(&page.info.start_cursor);
            let end = decode(&page.info.end_cursor);
            rows.retain(|(position, _)| *position != start && *position != end);
            if !page.info.has_next_page {
                break;
            }
            after = page.info.end_cursor.to_string();
        }
        assert_eq!(seen, in_order(&original, newest_first));
    }
}

#[test]
fn appending_rows_during_a_walk_repeats_and_skips_nothing() {
    for newest_first in [true, false] {
        for last_mode in [false, true] {
            let original = dataset(30);
            let mut rows = original.clone();
            let mut seen: Vec<Row> = Vec::new();
            let mut cursor = String::new();
            let (size_name, cursor_name) = if last_mode {
                ("last", "before")
            } else {
                ("first", "after")
            };
            for page_idx in 0..100 {
                let page = fetch(
                    &rows,
                    &params(&[
                        (size_name, "4"),
                        (cursor_name, &cursor),
                        ("newestFirst", bool_text(newest_first)),
                    ]),
                )
                .expect("valid");
                let mut page_rows: Vec<Row> = page
                    .edges
                    .iter()
                    .map(|edge| (decode(&edge.cursor), edge.node))
                    .collect();
                if last_mode {
                    page_rows.append(&mut seen);
                    seen = page_rows;
                } else {
                    seen.extend(page_rows);
                }
                // New data arrives during the first pages of the walk.
                if page_idx < 3 {
                    let next = rows.len() as u32;
                    let newest = rows.last().expect("dataset is not empty").0;
                    rows.push((
                        Position {
                            vega_time: newest.vega_time + 1,
                            block: newest.block + 1,
                            seq: 1,
                        },
                        next,
                    ));
                }
                let more = if last_mode {
                    page.info.has_previous_page
                } else {
                    page.info.has_next_page
                };
                if !more {
                    break;
                }
                cursor = if last_mode {
                    page.info.start_cursor.to_string()
                } else {
                    page.info.end_cursor.to_string()
                };
            }
            // Every row, new ones included, at most once, in the chosen order.
            let mut sorted = seen.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), seen.len(), "no repeats");
            let mut expected = seen.clone();
            expected.sort();
            if newest_first {
                expected.reverse();
            }
            assert_eq!(seen, expected, "chosen order");
            // Every original row was seen.
            let originals: Vec<Row> = seen.iter().filter(|row| row.1 < 30).copied().collect();
            assert_eq!(originals, in_order(&original, newest_first), "no skips");
        }
    }
}

#[test]
fn page_size_limits() {
    let rows = dataset(5001);
    let ordered = in_order(&rows, true);
    let page = fetch(&rows, &params(&[("first", "5000")])).expect("valid");
    check_page(&page, &ordered[..5000], false, true);
    let page = fetch(&rows, &params(&[("last", "5000")])).expect("valid");
    check_page(&page, &ordered[1..], true, false);
    let page = fetch(&rows, &params(&[("first", "1")])).expect("valid");
    check_page(&page, &ordered[..1], false, true);
    let page = fetch(&rows, &params(&[("last", "1")])).expect("valid");
    check_page(&page, &ordered[5000..], true, false);
    assert!(fetch(&rows, &params(&[("first", "0")])).is_err());
    assert!(fetch(&rows, &params(&[("first", "5001")])).is_err());
}

#[track_caller]
fn check_parse(query: &[(&str, &str)], expected_scan: Scan, newest_first: bool) {
    let request = PageRequest::parse(&params(query)).expect("valid request");
    assert_eq!(request.main_scan(), expected_scan, "{query:?}");
    assert_eq!(request.newest_first(), newest_first, "{query:?}");
}

#[test]
fn parses_valid_requests() {
    let anchor = Position {
        vega_time: 7,
        block: 8,
        seq: 9,
    };
    let cursor = encode_cursor(anchor);
    let c = cursor.as_str();
    // A scan from a cursor includes the cursor's row and reads one row more for it.
    let scan = |descending, after: Option<Position>, limit: usize| Scan {
        descending,
        after,
        inclusive: after.is_some(),
        limit: limit + usize::from(after.is_some()),
    };
    check_parse(&[], scan(true, None, 1001), true);
    check_parse(&[("first", "10")], scan(true, None, 11), true);
    check_parse(&[("first", "007")], scan(true, None, 8), true);
    check_parse(&[("first", "1")], scan(true, None, 2), true);
    check_parse(&[("first", "5000")], scan(true, None, 5001), true);
    check_parse(&[("after", c)], scan(true, Some(anchor), 1001), true);
    check_parse(
        &[("first", "3"), ("after", c)],
        scan(true, Some(anchor), 4),
        true,
    );
    check_parse(&[("last", "3")], scan(false, None, 4), true);
    check_parse(&[("before", c)], scan(false, Some(anchor), 1001), true);
    check_parse(
        &[("last", "3"), ("before", c)],
        scan(false, Some(anchor), 4),
        true,
    );
    let f = ("newestFirst", "false");
    check_parse(&[f], scan(false, None, 1001), false);
    check_parse(
        &[("first", "3"), ("after", c), f],
        scan(false, Some(anchor), 4),
        false,
    );
    check_parse(
        &[("last", "3"), ("before", c), f],
        scan(true, Some(anchor), 4),
        false,
    );
    // Empty cursors are absent, so they cannot conflict either.
    check_parse(&[("after", "")], scan(true, None, 1001), true);
    check_parse(&[("before", "")], scan(true, None, 1001), true);
    check_parse(&[("first", "2"), ("before", "")], scan(true, None, 3), true);
    check_parse(&[("last", "2"), ("after", "")], scan(false, None, 3), true);
    check_parse(
        &[("after", c), ("before", "")],
        scan(true, Some(anchor), 1001),
        true,
    );
    check_parse(
        &[("after", ""), ("before", c)],
        scan(false, Some(anchor), 1001),
        true,
    );
    // Every spelling Go's strconv.ParseBool accepts.
    for value in ["1", "t", "T", "TRUE", "true", "True", ""] {
        check_parse(&[("newestFirst", value)], scan(true, None, 1001), true);
    }
    for value in ["0", "f", "F", "FALSE", "false", "False"] {
        check_parse(&[("newestFirst", value)], scan(false, None, 1001), false);
    }
}

#[test]
fn boundary_scan_plans() {
    let anchor = Position {
        vega_time: 7,
        block: 8,
        seq: 9,
    };
    let nearest = Position { seq: 10, ..anchor };
    let cursor = encode_cursor(anchor);
    let c = cursor.as_str();
    let boundary = |query: &[(&str, &str)], scanned: &[Position]| {
        PageRequest::parse(&params(query))
            .expect("valid request")
            .boundary_scan(scanned)
    };
    let scan = |descending| Scan {
        descending,
        after: Some(nearest),
        inclusive: false,
        limit: 1,
    };
    // The anchor's own row was found: it is the neighbour, nothing more to read.
    assert_eq!(boundary(&[("after", c)], &[anchor, nearest]), None);
    assert_eq!(boundary(&[("before", c)], &[anchor]), None);
    assert_eq!(boundary(&[("first", "2")], &[nearest]), None);
    assert_eq!(boundary(&[("last", "2")], &[nearest]), None);
    assert_eq!(boundary(&[("after", c)], &[]), None);
    assert_eq!(boundary(&[("after", c)], &[nearest]), Some(scan(false)));
    assert_eq!(boundary(&[("before", c)], &[nearest]), Some(scan(true)));
    let f = ("newestFirst", "false");
    assert_eq!(boundary(&[("after", c), f], &[nearest]), Some(scan(true)));
    assert_eq!(boundary(&[("before", c), f], &[nearest]), Some(scan(false)));
}

#[test]
fn empty_page_has_no_flags_even_if_told_otherwise() {
    let request = PageRequest::default();
    let page = request.assemble(Vec::<Row>::new(), true);
    assert_eq!(page.edges, vec![]);
    assert_eq!(
        page.info,
        PageInfo {
            has_next_page: false,
            has_previous_page: false,
            start_cursor: Cursor::EMPTY,
            end_cursor: Cursor::EMPTY,
        }
    );
}

#[track_caller]
fn check_error(query: &[(&str, &str)], expected: &str) {
    let err = PageRequest::parse(&params(query)).expect_err("invalid request");
    assert_eq!(err.to_string(), expected, "{query:?}");
}

#[test]
fn rejects_invalid_requests() {
    let cursor = encode_cursor(Position {
        vega_time: 1,
        block: 2,
        seq: 3,
    });
    let c = cursor.as_str();
    check_error(
        &[("first", "1"), ("last", "1")],
        "pagination.first and pagination.last cannot be used together",
    );
    check_error(
        &[("first", ""), ("last", "")],
        "pagination.first and pagination.last cannot be used together",
    );
    check_error(
        &[("after", c), ("before", c)],
        "pagination.after and pagination.before cannot be used together",
    );
    check_error(
        &[("after", "junk"), ("before", "junk")],
        "pagination.after and pagination.before cannot be used together",
    );
    check_error(
        &[("first", "1"), ("before", c)],
        "pagination.first and pagination.before cannot be used together",
    );
    check_error(
        &[("last", "1"), ("after", c)],
        "pagination.last and pagination.after cannot be used together",
    );
    check_error(
        &[("first", "1"), ("last", "1"), ("after", c), ("before", c)],
        "pagination.first and pagination.last cannot be used together",
    );

    for bad in [
        "0",
        "5001",
        "",
        "+5",
        "-1",
        "-0",
        " 5",
        "5 ",
        "1.0",
        "1e3",
        "0x10",
        "ten",
        "٣",
        "4294967297",
        "99999999999999999999999",
    ] {
        let expected =
            |name| format!("pagination.{name} must be an integer between 1 and 5000, got {bad:?}");
        check_error(&[("first", bad)], &expected("first"));
        check_error(&[("first", bad), ("after", c)], &expected("first"));
        check_error(&[("last", bad)], &expected("last"));
        check_error(&[("last", bad), ("before", c)], &expected("last"));
    }
    check_error(
        &[("first", "0")],
        "pagination.first must be an integer between 1 and 5000, got \"0\"",
    );

    let truncated = &cursor[..cursor.len() - 1];
    for bad in [
        "junk",
        "=",
        truncated,
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    ] {
        check_error(&[("after", bad)], "pagination.after is not a valid cursor");
        check_error(
            &[("first", "2"), ("after", bad)],
            "pagination.after is not a valid cursor",
        );
        check_error(
            &[("before", bad)],
            "pagination.before is not a valid cursor",
        );
        check_error(
            &[("last", "2"), ("before", bad)],
            "pagination.before is not a valid cursor",
        );
    }

    for bad in [
        "maybe", "yes", "no", "tRUE", "TrUe", " true", "true ", "2", "on",
    ] {
        check_error(
            &[("newestFirst", bad)],
            &format!("pagination.newestFirst must be a boolean, got {bad:?}"),
        );
    }
    check_error(
        &[("newestFirst", "maybe")],
        "pagination.newestFirst must be a boolean, got \"maybe\"",
    );

    // The first failing check wins: conflicts, then size, then cursor, then order.
    check_error(
        &[("first", "0"), ("after", "junk"), ("newestFirst", "x")],
        "pagination.first must be an integer between 1 and 5000, got \"0\"",
    );
    check_error(
        &[("first", "3"), ("after", "junk"), ("newestFirst", "x")],
        "pagination.after is not a valid cursor",
    );
    check_error(
        &[("first", "3"), ("after", c), ("newestFirst", "x")],
        "pagination.newestFirst must be a boolean, got \"x\"",
    );
}

#[test]
fn tampered_cursors_are_rejected_by_parse() {
    let cursor = encode_cursor(Position {
        vega_time: 1_690_000_001_264_036_759,
        block: 1_000_001,
        seq: 3,
    });
    for idx in 0..cursor.len() {
        let mut tampered = cursor.clone().into_bytes();
        tampered[idx] = if tampered[idx] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(tampered).expect("ASCII");
        check_error(
            &[("after", &tampered)],
            "pagination.after is not a valid cursor",
        );
    }
    for bad in [
        format!("{cursor}="),
        format!("{cursor}A"),
        cursor[1..].to_owned(),
        format!("{}==", &cursor[..34]),
    ] {
        check_error(
            &[("before", &bad)],
            "pagination.before is not a valid cursor",
        );
    }
}

#[test]
fn a_page_from_a_stored_cursor_is_one_read() {
    let rows = dataset(50);
    for newest_first in [true, false] {
        for (mode, cursor_mode) in [("first", "after"), ("last", "before")] {
            let cursor = encode_cursor(rows[20].0);
            let order = bool_text(newest_first);
            let query = [
                (mode, "5"),
                (cursor_mode, cursor.as_str()),
                ("newestFirst", order),
            ];
            let request = PageRequest::parse(&params(&query)).expect("valid request");
            let scanned = run(&rows, request.main_scan());
            let positions: Vec<Position> = scanned.iter().map(|(p, _)| *p).collect();
            // The cursor's row came back first: no second read is planned.
            assert_eq!(positions.first(), Some(&rows[20].0), "{query:?}");
            assert_eq!(request.boundary_scan(&positions), None, "{query:?}");
            let page = request.assemble(scanned, false);
            assert_eq!(page.edges.len(), 5);
            assert!(page.edges.iter().all(|edge| edge.node != 20), "{query:?}");
            // The cursor's row is the page's neighbour on the cursor's side.
            let near_side = match (mode, newest_first) {
                ("first", _) => page.info.has_previous_page,
                _ => page.info.has_next_page,
            };
            assert!(near_side, "{query:?}");
        }
    }
}
