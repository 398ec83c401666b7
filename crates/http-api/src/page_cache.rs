//! Finished oracle data pages kept in memory while the store's data version stays the same.
//!
//! Oracle data are written once and read many times, and the same pages (the first page, a
//! spec's latest value) are asked for over and over. A page asked again since the last commit
//! is answered from here: no SQL, no rendering or compression, no hand-off to a blocking thread.
//!
//! Correctness rests on the rule of `OracleStore::data_version`: a read begun after a version
//! was answered shows at least the blocks of the chain tip answered with that version. A page
//! is stored with the version read before its read began, and only if the version read after
//! it ended is the same; it is served only to a request that reads that same version again,
//! whose `X-Block-Height` (taken before) is then no later than the data the page shows. On
//! SQLite a version is exactly one committed state; on PostgreSQL the store learns of commits
//! from the writer's announcements (or a poll, on a hot standby), so a page may show a commit
//! announced a moment later, never less than its answer's block height.
//!
//! A key holds everything an answer depends on: the spec filter, the validated pagination
//! request (so two spellings of one request share an entry) and the client's [`Style`]
//! (coding and `?pretty`). CORS headers are added per request after the answer, and errors are
//! never stored.
//!
//! Walks: the cache also remembers the requests that walks in progress ask for next, so that
//! such a request is read with the walk's next pages (`oracle.rs`, `reads_ahead`), and a page
//! asked on its own is not.
//!
//! Eviction: entries of an older version are useless, so seeing another version drops them all.
//! Within a version the least recently used go first, to keep the bodies' bytes (plus a fixed
//! overhead per entry) under the bound. The LRU list is hashlink's, which rusqlite already
//! brings into the build: an O(1) LRU by hand needs a linked list of its own.

use std::mem::size_of;
use std::sync::{Mutex, MutexGuard};

use hashlink::LruCache;
use ledger_core::OracleSpecId;
use oracle_core::PageRequest;

use crate::respond::{Encoded, Style};

/// Everything a page's answer depends on besides the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PageKey {
    /// The `oracleSpecId` filter.
    pub(crate) spec: Option<OracleSpecId>,
    /// The validated `pagination.*` parameters.
    pub(crate) request: PageRequest,
    /// The coding and indentation the client asked for.
    pub(crate) style: Style,
}

/// What an entry costs beyond its body: the key and value, the LRU list's links and the hash
/// table's slot, rounded up.
const ENTRY_OVERHEAD: usize = 192;

/// The cache: one lock around a small map, held for a lookup or an insert only.
pub(crate) struct PageCache {
    max_bytes: usize,
    state: Mutex<State>,
    /// The requests walks in progress ask for next (see [`PageCache::expect`]), the most
    /// recent [`WALKS`] of them, whatever the data version: a page is read with the walk's next
    /// pages only when its request is one of them.
    walks: Mutex<LruCache<PageKey, ()>>,
}

/// How many walks in progress [`PageCache::expect`] remembers: a key and a list entry each,
/// about 200 bytes.
const WALKS: usize = 4096;

struct State {
    /// The data version of every entry; `None` before the first lookup.
    version: Option<u64>,
    entries: LruCache<PageKey, Encoded>,
    /// The bodies' bytes plus [`ENTRY_OVERHEAD`] per entry.
    bytes: usize,
}

impl PageCache {
    /// A cache of at most `max_bytes`; 0 disables it.
    pub(crate) fn new(max_bytes: usize) -> Self {
        Self {
            max_bytes,
            state: Mutex::new(State {
                version: None,
                entries: LruCache::new_unbounded(),
                bytes: 0,
            }),
            walks: Mutex::new(LruCache::new(WALKS)),
        }
    }

    /// Notes that a walk in progress asks for `key` next: the page served before it ended at
    /// its cursor.
    pub(crate) fn expect(&self, key: PageKey) {
        lock(&self.walks).insert(key, ());
    }

    /// Whether a walk in progress was expected to ask for `key` ([`PageCache::expect`]).
    pub(crate) fn expected(&self, key: &PageKey) -> bool {
        lock(&self.walks).get(key).is_some()
    }

    /// False when the cache is disabled: then no version needs asking for.
    pub(crate) fn enabled(&self) -> bool {
        self.max_bytes > 0
    }

    /// The answer stored for `key` at `version`. A lookup at another version than that of the
    /// entries drops them all: they can no longer be served.
    pub(crate) fn get(&self, key: &PageKey, version: u64) -> Option<Encoded> {
        let mut state = self.lock();
        if state.version != Some(version) {
            // Freed after the lock is released, so that other requests do not wait for it.
            let stale = std::mem::replace(&mut state.entries, LruCache::new_unbounded());
            state.version = Some(version);
            state.bytes = 0;
            drop(state);
            drop(stale);
            return None;
        }
        state.entries.get(key).cloned()
    }

    /// Stores the answer to `key`, read entirely at `version`, evicting the least recently used
    /// entries to stay within the bound. Nothing is stored if a lookup has seen another version
    /// meanwhile (the answer is already stale, or the store moved on), nor an answer larger
    /// than the whole bound.
    pub(crate) fn insert(&self, key: PageKey, version: u64, answer: Encoded) {
        let added = cost(&answer);
        if added > self.max_bytes {
            return;
        }
        let mut state = self.lock();
        if state.version != Some(version) {
            return;
        }
        if let Some(replaced) = state.entries.insert(key, answer) {
            // Two requests for one page missed together: the later copy replaces the first.
            state.bytes -= cost(&replaced);
        }
        state.bytes += added;
        while state.bytes > self.max_bytes {
            let (_, evicted) = state
                .entries
                .remove_lru()
                .expect("the counted bytes belong to entries");
            state.bytes -= cost(&evicted);
        }
    }

    /// The entries and their counted bytes, for tests.
    #[cfg(test)]
    pub(crate) fn usage(&self) -> (usize, usize) {
        let state = self.lock();
        (state.entries.len(), state.bytes)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}

/// Every change leaves the maps (and the entries' byte count) consistent before anything that
/// could panic: a poisoned lock is recovered.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What an entry counts against the bound.
fn cost(answer: &Encoded) -> usize {
    answer.bytes.len() + ENTRY_OVERHEAD
}

/// The overhead must cover what an entry really holds besides its body.
const _: () =
    assert!(size_of::<PageKey>() + size_of::<Encoded>() + 4 * size_of::<usize>() <= ENTRY_OVERHEAD);

#[cfg(test)]
mod tests {
    use oracle_core::PaginationParams;

    use super::*;
    use crate::coding::Coding;

    fn key(first: &str) -> PageKey {
        let params = PaginationParams {
            first: Some(first),
            ..PaginationParams::default()
        };
        PageKey {
            spec: None,
            request: PageRequest::parse(&params).unwrap(),
            style: Style::default(),
        }
    }

    fn answer(len: usize) -> Encoded {
        Encoded::new(vec![b'x'; len], Coding::Identity)
    }

    #[test]
    fn keeps_the_bytes_under_the_bound_dropping_the_least_recently_used() {
        let cache = PageCache::new(3 * (100 + ENTRY_OVERHEAD));
        assert!(cache.get(&key("1"), 7).is_none());
        for first in ["1", "2", "3"] {
            cache.insert(key(first), 7, answer(100));
        }
        assert_eq!(cache.usage(), (3, 3 * (100 + ENTRY_OVERHEAD)));
        // "1" is used again, so "2" is the least recently used when "4" needs room.
        assert!(cache.get(&key("1"), 7).is_some());
        cache.insert(key("4"), 7, answer(100));
        assert_eq!(cache.usage(), (3, 3 * (100 + ENTRY_OVERHEAD)));
        assert!(cache.get(&key("2"), 7).is_none());
        for first in ["1", "3", "4"] {
            assert!(cache.get(&key(first), 7).is_some(), "{first}");
        }
        // A larger answer evicts as many as it needs; one larger than the bound is not kept.
        cache.insert(key("5"), 7, answer(250));
        assert_eq!(cache.usage(), (2, 350 + 2 * ENTRY_OVERHEAD));
        cache.insert(key("6"), 7, answer(3 * (100 + ENTRY_OVERHEAD)));
        assert_eq!(cache.usage(), (2, 350 + 2 * ENTRY_OVERHEAD));
        // The same key again replaces its entry, counted once.
        cache.insert(key("5"), 7, answer(50));
        assert_eq!(cache.usage(), (2, 150 + 2 * ENTRY_OVERHEAD));
    }

    #[test]
    fn another_version_drops_every_entry_and_late_inserts_of_the_old_one() {
        let cache = PageCache::new(1 << 20);
        assert!(cache.get(&key("1"), 1).is_none());
        cache.insert(key("1"), 1, answer(10));
        assert!(cache.get(&key("1"), 1).is_some());
        assert!(cache.get(&key("1"), 2).is_none());
        assert_eq!(cache.usage(), (0, 0));
        // A read that began at version 1 and ends now is stale: not stored.
        cache.insert(key("1"), 1, answer(10));
        assert_eq!(cache.usage(), (0, 0));
        cache.insert(key("1"), 2, answer(10));
        assert!(cache.get(&key("1"), 2).is_some());
    }

    #[test]
    fn a_disabled_cache_stores_nothing() {
        let cache = PageCache::new(0);
        assert!(!cache.enabled());
        assert!(cache.get(&key("1"), 1).is_none());
        cache.insert(key("1"), 1, answer(0));
        assert_eq!(cache.usage(), (0, 0));
    }
}
