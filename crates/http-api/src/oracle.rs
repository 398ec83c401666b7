//! `GET /api/v2/oracle/data`: a cursor-paginated page of oracle data, answered from the page
//! cache (`page_cache.rs`) when the same page was read since the last commit.

use std::ops::Range;
use std::sync::Arc;

use hyper::{Response, StatusCode};
use ledger_core::OracleSpecId;
use oracle_core::{Cursor, Page, PageRequest, PaginationParams};

use crate::App;
use crate::body::Body;
use crate::error::{ApiError, detail};
use crate::page_cache::PageKey;
use crate::query::{Query, fields};
use crate::respond::{Encoded, Style, whole};

/// The page `query` asks for; `tip_version` is the data version read with the answer's
/// `X-Block-Height`, when the store told one (`Health::chain_tip_with_version`).
pub(crate) async fn oracle_data(
    app: &App,
    query: &Query<'_>,
    style: Style,
    tip_version: Option<u64>,
) -> Result<Response<Body>, ApiError> {
    let spec = query
        .get(fields::ORACLE_SPEC_ID)?
        .map(str::parse::<OracleSpecId>)
        .transpose()
        .map_err(|err| {
            ApiError::invalid(
                detail::NOT_MAPPED,
                "invalid oracle spec ID",
                err.to_string(),
            )
        })?;
    // A page size keeps its empty value, so that `pagination.first=` is refused rather than
    // read as "no size".
    let params = PaginationParams {
        first: query.raw(fields::FIRST)?,
        after: query.get(fields::AFTER)?,
        last: query.raw(fields::LAST)?,
        before: query.get(fields::BEFORE)?,
        newest_first: query.get(fields::NEWEST_FIRST)?,
    };
    let page_request = PageRequest::parse(&params).map_err(|err| {
        ApiError::invalid(
            detail::INVALID_PAGINATION,
            "invalid pagination",
            err.to_string(),
        )
    })?;

    let key = PageKey {
        spec,
        request: page_request,
        style,
    };
    let cache = &app.inner.page_cache;
    // Known before the read: the page is stored only if the version is the same after it. The
    // version read with the answer's tip serves when there is one (its state holds the tip's
    // blocks); else it is asked now, after the tip, and so names a state that holds them.
    let version = if cache.enabled() {
        tip_version.or_else(|| app.data_version())
    } else {
        None
    };
    if let Some(version) = version
        && let Some(answer) = cache.get(&key, version)
    {
        app.inner.metrics.page_cache_hits.inc();
        return Ok(whole(StatusCode::OK, "application/json", answer));
    }
    if cache.enabled() {
        app.inner.metrics.page_cache_misses.inc();
    }
    let ahead = if version.is_some() && reads_ahead(&key) && cache.expected(&key) {
        AHEAD_PAGES
    } else {
        0
    };
    let Read {
        answer,
        ahead,
        next,
    } = read(app, key, ahead).await?;
    if let Some(version) = version {
        if let Some(next) = next {
            cache.expect(PageKey {
                request: next,
                ..key
            });
        }
        if app.data_version() == Some(version) {
            cache.insert(key, version, answer.clone());
            // After the page, so that the walk's next pages are the most recently used.
            for (request, answer) in ahead {
                cache.insert(PageKey { request, ..key }, version, answer);
                app.inner.metrics.pages_read_ahead.inc();
            }
        }
    }
    Ok(whole(StatusCode::OK, "application/json", answer))
}

/// How many pages a walk's page read from the store brings ahead into the page cache: a page
/// of 100 then reads 302 rows instead of 102, and a client paging on gets the next two pages
/// from memory (docs/PERFORMANCE.md, "Pages read ahead").
const AHEAD_PAGES: usize = 2;

/// Whether a page may be read with the walk's next pages ([`AHEAD_PAGES`]): a page after or
/// before a cursor, of at most [`INLINE_ROWS`] rows, as plain JSON (the pages read ahead are
/// rendered before they are asked for: compressing them too would cost more than a read
/// saves). It is, when a walk in progress was expected to ask for it: a page served before
/// ended at its cursor (`PageCache::expect`). A page asked for on its own, after a cursor kept
/// from some earlier walk, reads only itself: reading ahead would cost it a third more on
/// PostgreSQL and a half more on SQLite for pages nobody asks for. The first page and the
/// latest value of a spec, asked again and again, are cached whole already.
fn reads_ahead(key: &PageKey) -> bool {
    key.request.main_scan().after.is_some()
        && key.style.is_plain()
        && key.request.page_size() <= INLINE_ROWS
}

/// Reads and renders the page: on this async worker when the store's pages are local and the
/// page is cheap to finish (plain JSON of at most [`INLINE_ROWS`] rows), since handing it to a
/// blocking thread and back costs more than such a read (two thread wake-ups, measured in
/// docs/PERFORMANCE.md); on a blocking thread otherwise.
async fn read(app: &App, key: PageKey, ahead: usize) -> Result<Read, ApiError> {
    let permit = app.page_permit().await?;
    let store = Arc::clone(&app.inner.oracle);
    let inline =
        store.pages_are_local() && key.style.is_plain() && key.request.page_size() <= INLINE_ROWS;
    let work = move || {
        let _permit = permit;
        store
            .oracle_pages(key.spec.as_ref(), &key.request, ahead)
            .map(|read| {
                // The walk goes on after the last page read.
                let next = match read.ahead.last() {
                    Some((request, page)) => request.next_request(page),
                    None => key.request.next_request(&read.page),
                };
                Read {
                    answer: key.style.json(render(&read.page, &read.nodes)),
                    ahead: (read.ahead.iter())
                        .map(|(request, page)| {
                            (*request, key.style.json(render(page, &read.nodes)))
                        })
                        .collect(),
                    next,
                }
            })
    };
    let page = if inline {
        // A read that panics answers 500, as it does from a blocking thread, rather than
        // taking the connection down with it.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(work))
            .map_err(|_| internal("the page's read panicked".into()))?
    } else {
        // Rendering and compressing a page of up to 5000 rows is CPU work too: it stays on
        // the blocking thread with the read.
        tokio::task::spawn_blocking(work)
            .await
            .map_err(|join| internal(join.into()))?
    };
    app.record_read(&page);
    page.map_err(|err| ApiError::storage(detail::ORACLE_DATA_SERVICE, FAILED, err))
}

/// A page read from the store, rendered.
struct Read {
    /// The page's answer.
    answer: Encoded,
    /// The answers of the pages read ahead with it, each with its request.
    ahead: Vec<(PageRequest, Encoded)>,
    /// The request a walk asks for after the last of them, if anything lies beyond.
    next: Option<PageRequest>,
}

/// The most rows of a page read on the async worker: Vega's default page size. Larger pages,
/// up to 5000 rows, hold the worker too long and go to a blocking thread.
const INLINE_ROWS: u32 = oracle_core::DEFAULT_PAGE_SIZE;

/// Vega's detail message for a page the store could not serve.
const FAILED: &str = "failed retrieve data for oracle data";

/// A page whose read ended without an answer (it panicked, or its blocking task was cancelled).
fn internal(source: Box<dyn std::error::Error + Send + Sync>) -> ApiError {
    ApiError::Internal {
        detail: detail::ORACLE_DATA_SERVICE,
        message: FAILED,
        source,
    }
}

/// `v2ListOracleDataResponse`, assembled around the nodes' JSON stored at ingest: each edge's
/// node is the range of its JSON in `nodes`.
pub(crate) fn render(page: &Page<Range<usize>>, nodes: &[u8]) -> Vec<u8> {
    let bytes: usize = page.edges.iter().map(|edge| edge.node.len() + 64).sum();
    let mut out = Vec::with_capacity(bytes + 256);
    out.extend_from_slice(br#"{"oracleData":{"edges":["#);
    for (index, edge) in page.edges.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        out.extend_from_slice(br#"{"node":"#);
        out.extend_from_slice(&nodes[edge.node.clone()]);
        out.extend_from_slice(br#","cursor":"#);
        push_cursor(&mut out, &edge.cursor);
        out.push(b'}');
    }
    let info = &page.info;
    out.extend_from_slice(br#"],"pageInfo":{"hasNextPage":"#);
    out.extend_from_slice(bool_text(info.has_next_page));
    out.extend_from_slice(br#","hasPreviousPage":"#);
    out.extend_from_slice(bool_text(info.has_previous_page));
    out.extend_from_slice(br#","startCursor":"#);
    push_cursor(&mut out, &info.start_cursor);
    out.extend_from_slice(br#","endCursor":"#);
    push_cursor(&mut out, &info.end_cursor);
    out.extend_from_slice(b"}}}");
    out
}

/// Cursors are URL-safe base64: nothing in them needs JSON escaping.
fn push_cursor(out: &mut Vec<u8>, cursor: &Cursor) {
    out.push(b'"');
    out.extend_from_slice(cursor.as_bytes());
    out.push(b'"');
}

fn bool_text(value: bool) -> &'static [u8] {
    if value { b"true" } else { b"false" }
}
