//! Cursors and the `pagination.*` parameters of the oracle listing.
//!
//! Input: UTF-8 lines, the values of `first`, `after`, `last`, `before` and `newestFirst` in
//! turn (`-` or a missing line is an absent parameter); the whole input is also decoded as one
//! cursor.
//! Checks: nothing panics; a cursor that decodes re-encodes to the same text (one text per
//! position); errors name a `pagination.*` parameter; a valid request plans a bounded scan, and
//! assembling rows that obey that scan gives at most a page of rows whose cursors decode to
//! their positions.

#![no_main]

use libfuzzer_sys::fuzz_target;
use oracle_core::{
    MAX_PAGE_SIZE, PageRequest, PaginationParams, Position, Scan, decode_cursor, encode_cursor,
};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(position) = decode_cursor(text) {
        assert_eq!(
            encode_cursor(position),
            text,
            "a second text for {position:?}"
        );
    }
    // Lines give first, after, last, before and newestFirst in turn; `-` or no line is absent.
    let mut lines = text.split('\n');
    let mut next = || lines.next().filter(|line| *line != "-");
    let params = PaginationParams {
        first: next(),
        after: next(),
        last: next(),
        before: next(),
        newest_first: next(),
    };
    match PageRequest::parse(&params) {
        Err(err) => {
            let message = err.to_string();
            assert!(message.starts_with("pagination."), "{message}");
        }
        Ok(request) => check_plan(&request, data.len()),
    }
});

/// Feeds `request.assemble` rows that obey its main scan, `n_hint` deciding how many.
fn check_plan(request: &PageRequest, n_hint: usize) {
    let page_size = request.page_size() as usize;
    assert!((1..=MAX_PAGE_SIZE as usize).contains(&page_size));
    let scan = request.main_scan();
    assert!(scan.limit <= page_size + 2, "{scan:?}");
    // A few rows are enough to cover the look-ahead; thousands would only slow the fuzzer.
    let n_rows = n_hint % (scan.limit.min(8) + 1);
    let rows = rows_of(&scan, n_rows);
    let positions: Vec<Position> = rows.iter().map(|(position, _)| *position).collect();
    let page = request.assemble(rows, request.boundary_scan(&positions).is_some());
    assert!(page.edges.len() <= page_size);
    for edge in &page.edges {
        assert_eq!(decode_cursor(&edge.cursor), Ok(edge.node));
    }
    if page.edges.is_empty() {
        assert!(!page.info.has_next_page && !page.info.has_previous_page);
    }
}

/// Up to `n_rows` positions in the order and on the side of the anchor that `scan` asks for.
fn rows_of(scan: &Scan, n_rows: usize) -> Vec<(Position, Position)> {
    let (vega_time, block, seq) = if scan.descending {
        // The last position a cursor can name: stores keep positions in `i64` columns.
        (i64::MAX, i64::MAX as u64, i64::MAX as u64)
    } else {
        (i64::MIN, 0, 0)
    };
    let edge_of_order = Position {
        vega_time,
        block,
        seq,
    };
    let mut next = match scan.after {
        Some(anchor) if scan.inclusive => Some(anchor),
        Some(anchor) => step(anchor, scan.descending),
        None => Some(edge_of_order),
    };
    let mut rows = Vec::new();
    while let Some(position) = next.filter(|_| rows.len() < n_rows) {
        rows.push((position, position));
        next = step(position, scan.descending);
    }
    rows
}

/// The position just beyond `position` in the given direction, if any.
fn step(position: Position, descending: bool) -> Option<Position> {
    let seq = if descending {
        position.seq.checked_sub(1)
    } else {
        position
            .seq
            .checked_add(1)
            .filter(|seq| i64::try_from(*seq).is_ok())
    }?;
    Some(Position { seq, ..position })
}
