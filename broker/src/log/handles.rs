//! The process's bounded cache of open segment files.
//!
//! A segment does not own its file descriptor: it asks this cache for one when it appends,
//! maps or syncs, and the cache keeps at most `capacity` files open, evicting by CLOCK (a
//! second chance for each file used since the hand last passed it). A broker holding 10,000
//! partitions therefore needs a descriptor per segment in use, not per segment hosted.
//!
//! Invariants:
//! - the cache holds at most `capacity` open files; a caller's `Arc<File>` keeps its file open
//!   past an eviction until the call ends, so the process briefly holds one more per
//!   operation in flight, never more;
//! - a file is reopened read + append, so a write through a reopened descriptor lands at the
//!   end of the file, where the segment's own size says it must (segments are only ever
//!   appended to through this cache);
//! - ids are never reused: an entry dropped with its segment cannot be found by another.
//!
//! Mappings need no descriptor (a mapping pins the file, not the fd), so a segment's mapping
//! outlives the eviction of its file; mappings are released by the log sweep instead
//! (`Log::release_idle_maps`).
//!
//! Reads are also lent descriptors, for a plaintext socket to send their bytes from the page
//! cache ([`FileSpan`], `server/write.rs`): one held per read of at least [`MIN_SPAN`] bytes
//! until its response is written, at most a quarter of `capacity` at a time (a response of
//! 16,384 partitions would otherwise hold one per partition past the cache's bound, and run
//! the process out of descriptors). A read refused one is sent as copied bytes, never delayed.
//! The process thus holds at most `capacity` + `capacity / 4` segment files, plus one per
//! operation in flight.

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use indexmap::IndexMap;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

/// Used until [`set_capacity`] is called (tests, tools): generous, as the process's limit is.
const DEFAULT_CAPACITY: usize = 4096;

struct Slot {
    file: Arc<File>,
    /// Used since the clock hand last passed.
    used: bool,
}

struct Clock {
    slots: IndexMap<u64, Slot>,
    hand: usize,
}

struct Handles {
    clock: Mutex<Clock>,
    capacity: AtomicUsize,
    next_id: AtomicU64,
    open: Gauge,
    reopened: Counter,
    lending: Lending,
}

/// Descriptors lent to spans now.
#[derive(Default)]
struct Lending {
    lent: AtomicUsize,
    gauge: Gauge,
}

impl Lending {
    /// One more descriptor, if fewer than `budget` are lent.
    fn take(&'static self, budget: usize) -> Option<Lease> {
        if self.lent.fetch_add(1, Ordering::AcqRel) >= budget {
            self.lent.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        self.gauge.inc();
        Some(Lease(self))
    }
}

/// Reads shorter than this are lent no descriptor: a socket sends them with the bytes around
/// them (the two system calls a span costs, a write for what precedes it and a sendfile, cost
/// more than the copy they would save).
pub const MIN_SPAN: usize = 16 * 1024;

/// Where bytes read from a segment lie in its file, with the descriptor lent for them (kept
/// open, even past an eviction, until every clone is dropped).
#[derive(Clone, Debug)]
pub struct FileSpan {
    pub file: Arc<File>,
    pub offset: u64,
    pub len: usize,
    _lease: Option<Arc<Lease>>,
}

/// One descriptor of the lending budget, given back when dropped.
struct Lease(&'static Lending);

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lease")
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.0.lent.fetch_sub(1, Ordering::AcqRel);
        self.0.gauge.dec();
    }
}

impl FileSpan {
    /// A span outside the lending budget (tests of what sends spans).
    #[cfg(test)]
    pub fn unleased(file: Arc<File>, offset: u64, len: usize) -> FileSpan {
        FileSpan {
            file,
            offset,
            len,
            _lease: None,
        }
    }
}

static HANDLES: LazyLock<Handles> = LazyLock::new(|| Handles {
    clock: Mutex::new(Clock {
        slots: IndexMap::new(),
        hand: 0,
    }),
    capacity: AtomicUsize::new(DEFAULT_CAPACITY),
    next_id: AtomicU64::new(0),
    open: Gauge::default(),
    reopened: Counter::default(),
    lending: Lending {
        lent: AtomicUsize::new(0),
        gauge: Gauge::default(),
    },
});

fn clock() -> std::sync::MutexGuard<'static, Clock> {
    HANDLES.clock.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Sets how many segment files the process keeps open (at least 1); takes effect at the next
/// insertion.
pub fn set_capacity(files: usize) {
    HANDLES.capacity.store(files.max(1), Ordering::Relaxed);
}

pub fn capacity() -> usize {
    HANDLES.capacity.load(Ordering::Relaxed)
}

/// Segment files held open now (`strata_open_segment_files`).
pub fn open_gauge() -> Gauge {
    HANDLES.open.clone()
}

/// Segment files opened again after an eviction (`strata_segment_file_reopens_total`): a
/// steady climb means the cache is smaller than the set of segments in use.
pub fn reopen_counter() -> Counter {
    HANDLES.reopened.clone()
}

/// Descriptors lent to spans now (`strata_segment_files_lent`).
pub fn lent_gauge() -> Gauge {
    HANDLES.lending.gauge.clone()
}

/// A span of `len` bytes at `offset` in segment `id`'s file (opened with `open` if evicted):
/// `None` when shorter than [`MIN_SPAN`], when the lending budget is spent, or when the file
/// cannot be opened.
pub(super) fn span(
    id: u64,
    open: impl FnOnce() -> io::Result<File>,
    offset: u64,
    len: usize,
) -> Option<FileSpan> {
    if len < MIN_SPAN {
        return None;
    }
    let lease = Arc::new(HANDLES.lending.take((capacity() / 4).max(1))?);
    let file = get(id, open).ok()?;
    Some(FileSpan {
        file,
        offset,
        len,
        _lease: Some(lease),
    })
}

/// A fresh id for a segment's entry.
pub(super) fn next_id() -> u64 {
    HANDLES.next_id.fetch_add(1, Ordering::Relaxed)
}

/// Caches a file the segment `id` just opened, and returns it shared.
pub(super) fn insert(id: u64, file: File) -> Arc<File> {
    let file = Arc::new(file);
    let capacity = capacity();
    let mut clock = clock();
    clock.evict_to(capacity.saturating_sub(1));
    clock.slots.insert(
        id,
        Slot {
            file: file.clone(),
            used: true,
        },
    );
    HANDLES.open.set(clock.slots.len() as i64);
    file
}

/// The file of segment `id`, opened with `open` (outside the cache's lock) if the cache
/// evicted it.
pub(super) fn get(id: u64, open: impl FnOnce() -> io::Result<File>) -> io::Result<Arc<File>> {
    if let Some(slot) = clock().slots.get_mut(&id) {
        slot.used = true;
        return Ok(slot.file.clone());
    }
    let file = open()?;
    HANDLES.reopened.inc();
    Ok(insert(id, file))
}

/// Drops segment `id`'s entry (its segment is gone). Callers holding the file keep it open.
pub(super) fn forget(id: u64) {
    let mut clock = clock();
    // The last slot moves into the removed one's place; a hand left past the end wraps.
    clock.slots.swap_remove(&id);
    HANDLES.open.set(clock.slots.len() as i64);
}

impl Clock {
    /// Evicts until at most `keep` files are held.
    fn evict_to(&mut self, keep: usize) {
        while self.slots.len() > keep {
            if self.hand >= self.slots.len() {
                self.hand = 0;
            }
            let (_, slot) = self
                .slots
                .get_index_mut(self.hand)
                .expect("hand within the slots");
            if slot.used {
                slot.used = false;
                self.hand += 1;
            } else {
                // The last slot moves into the hand's place and is looked at next.
                self.slots.swap_remove_index(self.hand);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp_file() -> File {
        tempfile::tempfile().unwrap()
    }

    #[test]
    fn clock_evicts_unused_first_and_keeps_the_bound() {
        let mut clock = Clock {
            slots: IndexMap::new(),
            hand: 0,
        };
        for id in 0..4 {
            clock.slots.insert(
                id,
                Slot {
                    file: Arc::new(tmp_file()),
                    used: id % 2 == 0,
                },
            );
        }
        clock.evict_to(2);
        let mut kept: Vec<u64> = clock.slots.keys().copied().collect();
        kept.sort_unstable();
        assert_eq!(
            kept,
            vec![0, 2],
            "the two files used since the hand passed stay"
        );
        // Both now lost their second chance: the next eviction takes one of them.
        clock.evict_to(1);
        assert_eq!(clock.slots.len(), 1);
        clock.evict_to(0);
        assert!(clock.slots.is_empty());
    }

    #[test]
    fn descriptors_are_lent_within_the_budget_and_given_back() {
        let lending: &'static Lending = Box::leak(Box::default());
        let held: Vec<Arc<Lease>> = (0..3).map(|_| Arc::new(lending.take(3).unwrap())).collect();
        assert!(lending.take(3).is_none(), "the budget is spent");
        assert_eq!(lending.gauge.get(), 3);
        let clones = held.clone();
        drop(held);
        assert!(lending.take(3).is_none(), "clones hold their lease");
        drop(clones);
        assert_eq!(lending.gauge.get(), 0);
        assert!(lending.take(3).is_some(), "given back");
    }

    #[test]
    fn short_reads_are_lent_nothing_and_long_ones_their_file() {
        let id = next_id();
        let file = insert(id, tmp_file());
        assert!(span(id, || unreachable!(), 0, MIN_SPAN - 1).is_none());
        let s = span(id, || unreachable!(), 7, MIN_SPAN).unwrap();
        assert!(Arc::ptr_eq(&s.file, &file));
        assert_eq!((s.offset, s.len), (7, MIN_SPAN));
        forget(id);
    }

    #[test]
    fn an_evicted_file_is_reopened_and_a_forgotten_one_is_gone() {
        let a = next_id();
        let first = insert(a, tmp_file());
        let again = get(a, || panic!("cached: must not reopen")).unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        forget(a);
        let reopened_before = HANDLES.reopened.get();
        let reopened = get(a, || Ok(tmp_file())).unwrap();
        assert!(!Arc::ptr_eq(&first, &reopened));
        assert!(HANDLES.reopened.get() > reopened_before);
        forget(a);
    }
}
