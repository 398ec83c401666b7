//! Cursor pagination: parsing the `pagination.*` query parameters, planning the storage scans
//! and assembling the page from their results.
//!
//! See [`PageRequest`] for the storage protocol.

use crate::{Cursor, Error, Position};

/// Page size used when neither `pagination.first` nor `pagination.last` is given.
pub const DEFAULT_PAGE_SIZE: u32 = 1000;

/// Largest accepted `pagination.first` or `pagination.last`.
pub const MAX_PAGE_SIZE: u32 = 5000;

/// The raw `pagination.*` query-string values, already percent-decoded; `None` when absent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PaginationParams<'a> {
    /// `pagination.first`: how many rows to return after `after`.
    pub first: Option<&'a str>,
    /// `pagination.after`: cursor that the page follows.
    pub after: Option<&'a str>,
    /// `pagination.last`: how many rows to return before `before`.
    pub last: Option<&'a str>,
    /// `pagination.before`: cursor that the page precedes.
    pub before: Option<&'a str>,
    /// `pagination.newestFirst`: a Go-style boolean, `true` when absent or empty.
    pub newest_first: Option<&'a str>,
}

/// Which end of the chosen order a page is measured from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Mode {
    /// `first`/`after`: the rows following the anchor (or the start of the order).
    First,
    /// `last`/`before`: the rows preceding the anchor (or the end of the order).
    Last,
}

/// A validated pagination request; the only way to build one is [`PageRequest::parse`] (or
/// [`Default`], the request without parameters), so storage never sees invalid input.
///
/// The storage protocol, in one read transaction:
/// 1. run [`main_scan`](Self::main_scan);
/// 2. if [`boundary_scan`](Self::boundary_scan) of the scanned positions is `Some`, run it and
///    note whether it returned any row (else note `false`);
/// 3. call [`assemble`](Self::assemble) with the scanned rows and that flag.
///
/// The main scan reads one row more than the page holds (the look-ahead), which tells whether
/// the page has a neighbour on its far side from the anchor cursor. It also reads the anchor's
/// own row: a cursor names a row that was served, so that row usually still exists, and then
/// it is the page's neighbour on the near side. Only when it is gone does the boundary scan
/// look one row past the page's near side. Both are index range scans bounded by their limit,
/// so a page costs the same wherever it lies, and the page after a cursor costs one read, as
/// the first page does. Offsets, which cost more the deeper the page, are the alternative this
/// design rejects; they would also repeat or skip rows when rows are added during a walk.
///
/// Equal requests ask for the same page, whatever the query string's spelling: a cache can use
/// the request as its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PageRequest {
    newest_first: bool,
    mode: Mode,
    page_size: u32,
    /// The position named by `after` (in first mode) or `before` (in last mode).
    anchor: Option<Position>,
}

/// One storage read: rows in ascending [`Position`] order (descending if `descending`),
/// beyond `after` in that direction when it is `Some` (and at `after` itself when `inclusive`),
/// at most `limit` of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scan {
    /// Whether to read in descending [`Position`] order.
    pub descending: bool,
    /// Where the scan starts: only rows beyond it in scan direction (less than it when
    /// `descending`, greater otherwise). `None` starts at the first row in scan direction.
    pub after: Option<Position>,
    /// Whether a row exactly at `after` is returned too.
    pub inclusive: bool,
    /// Maximum number of rows to return.
    pub limit: usize,
}

/// One page of results, in the order the client asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page<T> {
    /// The rows with their cursors.
    pub edges: Vec<Edge<T>>,
    /// Where the page lies.
    pub info: PageInfo,
}

/// One row of a page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge<T> {
    /// Cursor naming this row's position, usable as `after` or `before`.
    pub cursor: Cursor,
    /// The row.
    pub node: T,
}

/// Vega's `PageInfo`: whether rows lie beyond the page and the cursors of its ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageInfo {
    /// Whether some row follows the page's last row in the chosen order.
    pub has_next_page: bool,
    /// Whether some row precedes the page's first row in the chosen order.
    pub has_previous_page: bool,
    /// Cursor of the page's first row; empty for an empty page.
    pub start_cursor: Cursor,
    /// Cursor of the page's last row; empty for an empty page.
    pub end_cursor: Cursor,
}

impl Default for PageRequest {
    /// The request without pagination parameters: the newest [`DEFAULT_PAGE_SIZE`] rows.
    fn default() -> Self {
        PageRequest {
            newest_first: true,
            mode: Mode::First,
            page_size: DEFAULT_PAGE_SIZE,
            anchor: None,
        }
    }
}

impl PageRequest {
    /// Validates the raw `pagination.*` parameters.
    ///
    /// An empty `after` or `before` counts as absent, because an empty page hands out empty
    /// cursors and a client may send them back; an empty `first` or `last` is an error.
    /// Checks run in this order, the first failure is reported: conflicting parameters
    /// (`first`+`last`, `after`+`before`, `first`+`before`, `last`+`after`), then the page
    /// size, then the cursor, then `newestFirst`.
    pub fn parse(params: &PaginationParams<'_>) -> Result<PageRequest, Error> {
        let after = params.after.filter(|cursor| !cursor.is_empty());
        let before = params.before.filter(|cursor| !cursor.is_empty());
        let conflicts = [
            (
                "first",
                params.first.is_some(),
                "last",
                params.last.is_some(),
            ),
            ("after", after.is_some(), "before", before.is_some()),
            ("first", params.first.is_some(), "before", before.is_some()),
            ("last", params.last.is_some(), "after", after.is_some()),
        ];
        for (first, first_given, second, second_given) in conflicts {
            if first_given && second_given {
                return Err(Error::ConflictingParameters { first, second });
            }
        }

        let (mode, size, cursor) = if params.last.is_some() || before.is_some() {
            (Mode::Last, ("last", params.last), ("before", before))
        } else {
            (Mode::First, ("first", params.first), ("after", after))
        };
        let page_size = match size {
            (parameter, Some(value)) => parse_page_size(parameter, value)?,
            (_, None) => DEFAULT_PAGE_SIZE,
        };
        let anchor = match cursor {
            (parameter, Some(value)) => Some(
                crate::decode_cursor(value)
                    .map_err(|_| Error::InvalidCursorParameter { parameter })?,
            ),
            (_, None) => None,
        };
        let newest_first = match params.newest_first {
            None | Some("") => true,
            Some(value) => parse_go_bool(value).ok_or_else(|| Error::InvalidNewestFirst {
                value: value.to_owned(),
            })?,
        };
        Ok(PageRequest {
            newest_first,
            mode,
            page_size,
            anchor,
        })
    }

    /// Whether the chosen order is descending [`Position`] (newest first).
    pub fn newest_first(&self) -> bool {
        self.newest_first
    }

    /// The number of rows a full page holds.
    pub fn page_size(&self) -> u32 {
        self.page_size
    }

    /// The first read: from the anchor cursor's own row (inclusive) or the relevant end of the
    /// order, one row more than the page holds (the look-ahead), plus one for the anchor's row
    /// when there is an anchor.
    ///
    /// In first mode the scan follows the chosen order; in last mode it runs against it,
    /// because the page is the rows nearest the anchor on its preceding side.
    pub fn main_scan(&self) -> Scan {
        let anchored = self.anchor.is_some();
        Scan {
            descending: self.main_scan_descending(),
            after: self.anchor,
            inclusive: anchored,
            limit: self.usize_page_size() + 1 + usize::from(anchored),
        }
    }

    /// [`main_scan`](Self::main_scan) reading on for `ahead` more pages of a walk: with their
    /// rows, [`assemble_ahead`](Self::assemble_ahead) also builds the `ahead` pages a client
    /// walking on from this one asks for next, from the same read. `ahead` 0 is the main scan.
    pub fn read_ahead_scan(&self, ahead: usize) -> Scan {
        let mut scan = self.main_scan();
        scan.limit += ahead.saturating_mul(self.usize_page_size());
        scan
    }

    /// The request a client walking on from a page of this request asks for next: the same
    /// page size and order, anchored at `position`, the page's last row in scan order (its
    /// `endCursor` in first mode, its `startCursor` in last mode).
    pub fn continued_at(&self, position: Position) -> PageRequest {
        PageRequest {
            anchor: Some(position),
            ..*self
        }
    }

    /// The request a client walking on asks for after `page`, a page of this request: the
    /// [`continued_at`](Self::continued_at) its far end (`endCursor` in first mode,
    /// `startCursor` in last mode); `None` when its far-side flag says nothing lies beyond.
    pub fn next_request<T>(&self, page: &Page<T>) -> Option<PageRequest> {
        let (far_side, cursor) = match self.mode {
            Mode::First => (page.info.has_next_page, &page.info.end_cursor),
            Mode::Last => (page.info.has_previous_page, &page.info.start_cursor),
        };
        if !far_side {
            return None;
        }
        // A page's cursors are made from positions, so they always decode.
        crate::decode_cursor(cursor)
            .ok()
            .map(|position| self.continued_at(position))
    }

    /// [`assemble`](Self::assemble) from the rows of
    /// [`read_ahead_scan(ahead)`](Self::read_ahead_scan), and the up to `ahead` pages that
    /// continue the walk, each with its request ([`continued_at`](Self::continued_at) of the
    /// page before): the pages a client asks for next when it follows the far-side flag
    /// (`hasNextPage` in first mode, `hasPreviousPage` in last mode) with the cursor of that end.
    ///
    /// A page that follows is built only when the rows hold all of its own main scan: from its
    /// anchor (the page before's last row, so its near-side flag needs no boundary scan), its
    /// page and look-ahead row, or the end of the data (the scan returned fewer rows than it
    /// asked for). So each equals the page read for its request from the same snapshot. The
    /// walk stops at a page with nothing beyond it.
    pub fn assemble_ahead<T: Clone>(
        &self,
        mut scanned: Vec<(Position, T)>,
        boundary_exists: bool,
        ahead: usize,
    ) -> (Page<T>, Vec<(PageRequest, Page<T>)>) {
        let ended = scanned.len() < self.read_ahead_scan(ahead).limit;
        let size = self.usize_page_size();
        let anchor_found = self.anchor.is_some() && scanned.first().map(|(p, _)| *p) == self.anchor;
        let mut pages = Vec::new();
        for pages_before in 1..=ahead {
            // The last row of the page before, in scan order, and its look-ahead row after it.
            let at = usize::from(anchor_found) + pages_before * size - 1;
            if at + 1 >= scanned.len() {
                break;
            }
            let end = at + size + 2;
            if end > scanned.len() && !ended {
                break;
            }
            let request = self.continued_at(scanned[at].0);
            let rows = scanned[at..end.min(scanned.len())].to_vec();
            pages.push((request, request.assemble(rows, false)));
        }
        scanned.truncate(self.main_scan().limit);
        (self.assemble(scanned, boundary_exists), pages)
    }

    /// The second read, given the positions the main scan returned (in scan order): one row
    /// on the anchor's side of the page, telling whether anything lies beyond the page there.
    ///
    /// `None` (nothing to read) when no anchor cursor was given, since the page then starts at
    /// the edge of the order; when the main scan found the anchor's own row, which is that
    /// neighbour; or when `scanned` is empty, since an empty page reports no neighbours.
    pub fn boundary_scan(&self, scanned: &[Position]) -> Option<Scan> {
        let anchor = self.anchor?;
        let nearest_to_anchor = *scanned.first()?;
        if nearest_to_anchor == anchor {
            return None;
        }
        Some(Scan {
            descending: !self.main_scan_descending(),
            after: Some(nearest_to_anchor),
            inclusive: false,
            limit: 1,
        })
    }

    /// Builds the page from the rows of [`main_scan`](Self::main_scan) (in scan order) and
    /// whether [`boundary_scan`](Self::boundary_scan) found a row (`false` if it was `None`).
    ///
    /// Drops the anchor's row and the look-ahead row, puts the rows in the chosen order, and
    /// derives the flags:
    /// the look-ahead tells about the page's far side from the anchor, `boundary_exists`
    /// about its near side. An empty page has both flags false and empty cursors.
    pub fn assemble<T>(&self, mut scanned: Vec<(Position, T)>, boundary_exists: bool) -> Page<T> {
        debug_assert!(
            self.is_main_scan_output(&scanned),
            "rows are not what main_scan asked for"
        );
        // The anchor's own row is not part of the page; it only proves a neighbour.
        let anchor_found = self.anchor.is_some() && scanned.first().map(|(p, _)| *p) == self.anchor;
        if anchor_found {
            scanned.remove(0);
        }
        let boundary_exists = boundary_exists || anchor_found;
        let page_size = self.usize_page_size();
        let look_ahead_exists = scanned.len() > page_size;
        scanned.truncate(page_size);
        let (has_next_page, has_previous_page) = match self.mode {
            Mode::First => (look_ahead_exists, boundary_exists),
            Mode::Last => {
                scanned.reverse();
                (boundary_exists, look_ahead_exists)
            }
        };
        let edges: Vec<Edge<T>> = scanned
            .into_iter()
            .map(|(position, node)| Edge {
                cursor: Cursor::new(position),
                node,
            })
            .collect();
        let info = match (edges.first(), edges.last()) {
            (Some(first), Some(last)) => PageInfo {
                has_next_page,
                has_previous_page,
                start_cursor: first.cursor,
                end_cursor: last.cursor,
            },
            _ => PageInfo {
                has_next_page: false,
                has_previous_page: false,
                start_cursor: Cursor::EMPTY,
                end_cursor: Cursor::EMPTY,
            },
        };
        Page { edges, info }
    }

    fn main_scan_descending(&self) -> bool {
        match self.mode {
            Mode::First => self.newest_first,
            Mode::Last => !self.newest_first,
        }
    }

    fn usize_page_size(&self) -> usize {
        // MAX_PAGE_SIZE fits every usize Rust supports.
        self.page_size as usize
    }

    /// Whether `scanned` is strictly monotonic in scan direction and beyond the anchor: a
    /// storage bug check for debug builds.
    fn is_main_scan_output<T>(&self, scanned: &[(Position, T)]) -> bool {
        let descending = self.main_scan_descending();
        let beyond = |a: Position, b: Position| if descending { b < a } else { b > a };
        let after_anchor = match (self.anchor, scanned.first()) {
            (Some(anchor), Some((first, _))) => *first == anchor || beyond(anchor, *first),
            _ => true,
        };
        after_anchor && scanned.windows(2).all(|pair| beyond(pair[0].0, pair[1].0))
    }
}

/// Parses a page size: ASCII digits only (no sign, no spaces), value in `1..=MAX_PAGE_SIZE`.
///
/// Leading zeros are accepted, as Go's `strconv.ParseInt` (which Vega's gateway uses for
/// `int32` query parameters) accepts them.
fn parse_page_size(parameter: &'static str, value: &str) -> Result<u32, Error> {
    let invalid = || Error::InvalidPageSize {
        parameter,
        value: value.to_owned(),
    };
    // `u32::from_str` alone would accept a leading '+'.
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    match value.parse::<u32>() {
        Ok(size) if (1..=MAX_PAGE_SIZE).contains(&size) => Ok(size),
        _ => Err(invalid()),
    }
}

/// Go's `strconv.ParseBool`: exactly these spellings, nothing else.
///
/// See: <https://pkg.go.dev/strconv#ParseBool>
fn parse_go_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;
