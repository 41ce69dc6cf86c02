//! The partition's local log behind its lock, and the offsets published at each release of
//! the lock.
//!
//! Lock rule: the log lock is taken after the role's (`replica.rs`) and never before it; while
//! it is held only leaf locks (the waiters', the tier view's, the directory's) may be taken,
//! and it is never held across an await. Readers hold it only to slice mapped bytes.
//!
//! Invariant: the published offsets are the log's as of the last release of its lock (and the
//! last change of the tier view), published before an append wakes its waiters.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::log::Log;

/// Offsets of a partition at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offsets {
    pub log_start: i64,
    pub high_watermark: i64,
    /// Below it every transaction has ended: where read_committed readers stop (≤ HW).
    pub last_stable: i64,
    pub log_end: i64,
}

pub(super) struct LocalLog {
    log: Mutex<Log>,
    published: Published,
}

impl LocalLog {
    /// The log, its offsets published with those of the remote tier: its first readable
    /// offset (`None`: nothing there) and its floor.
    pub(super) fn new(log: Log, remote: (Option<i64>, i64)) -> LocalLog {
        let published = Published::new(remote);
        published.log(&log);
        LocalLog {
            log: Mutex::new(log),
            published,
        }
    }

    pub(super) fn lock(&self) -> LogGuard<'_> {
        LogGuard {
            // A panic while holding the lock cannot leave the log half-written (appends are
            // whole batches or an error), so a poisoned lock is still usable.
            log: self.log.lock().unwrap_or_else(|p| p.into_inner()),
            published: &self.published,
        }
    }

    /// The offsets as of the last release of the lock: no lock taken.
    pub(super) fn published(&self) -> Offsets {
        self.published.offsets()
    }

    /// The remote tier's start and floor changed to `remote`: the offsets they move are
    /// published.
    pub(super) fn remote_changed(&self, remote: (Option<i64>, i64)) {
        self.published.remote(remote);
        drop(self.lock());
    }
}

/// A partition's offsets, published each time the log lock is released (and when the remote
/// log changes), so a fetch can answer a partition with nothing new without taking the lock:
/// a fetch naming 10,000 partitions reads atomics for the ones that are idle. Published
/// before an append wakes its waiters, so a waiter always sees the append that woke it.
struct Published {
    log_start: AtomicI64,
    high_watermark: AtomicI64,
    last_stable: AtomicI64,
    log_end: AtomicI64,
    /// The remote log's first readable offset (`i64::MAX`: none) and floor, which
    /// `offsets_of` combines with the local log.
    remote_start: AtomicI64,
    remote_floor: AtomicI64,
}

impl Published {
    fn new(remote: (Option<i64>, i64)) -> Published {
        let p = Published {
            log_start: AtomicI64::new(0),
            high_watermark: AtomicI64::new(0),
            last_stable: AtomicI64::new(0),
            log_end: AtomicI64::new(0),
            remote_start: AtomicI64::new(i64::MAX),
            remote_floor: AtomicI64::new(0),
        };
        p.remote(remote);
        p
    }

    fn remote(&self, (start, floor): (Option<i64>, i64)) {
        self.remote_start
            .store(start.unwrap_or(i64::MAX), Ordering::Release);
        self.remote_floor.store(floor, Ordering::Release);
    }

    fn log(&self, log: &Log) {
        let local = log.log_start_offset();
        let start = self.remote_start.load(Ordering::Acquire).min(local);
        let end = log.log_end_offset();
        let start = start
            .max(self.remote_floor.load(Ordering::Acquire))
            .min(end);
        self.log_start.store(start, Ordering::Release);
        self.high_watermark
            .store(log.high_watermark(), Ordering::Release);
        self.last_stable
            .store(log.last_stable_offset().max(start), Ordering::Release);
        self.log_end.store(end, Ordering::Release);
    }

    fn offsets(&self) -> Offsets {
        Offsets {
            log_start: self.log_start.load(Ordering::Acquire),
            high_watermark: self.high_watermark.load(Ordering::Acquire),
            last_stable: self.last_stable.load(Ordering::Acquire),
            log_end: self.log_end.load(Ordering::Acquire),
        }
    }
}

/// The log lock, held: publishes the partition's offsets when released.
pub(super) struct LogGuard<'a> {
    log: std::sync::MutexGuard<'a, Log>,
    published: &'a Published,
}

impl std::ops::Deref for LogGuard<'_> {
    type Target = Log;
    fn deref(&self) -> &Log {
        &self.log
    }
}

impl std::ops::DerefMut for LogGuard<'_> {
    fn deref_mut(&mut self) -> &mut Log {
        &mut self.log
    }
}

impl Drop for LogGuard<'_> {
    fn drop(&mut self) {
        self.published.log(&self.log);
    }
}
