//! Where a partition's files are (its log directory, changed by a move, see `relocate.rs`)
//! and whether a write into them must stop (the topic deleted, a move in progress).
//!
//! Lock rule: the directory's lock is a leaf, held only to read or replace the `Arc`.
//! Invariant: a clean planned before a move completed never installs into the moved log: it
//! compares [`Placement::moves`] before and after (see `Partition::clean`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use super::dirs::LogDir;

pub struct Placement {
    dir: RwLock<Arc<LogDir>>,
    /// Set when the topic is deleted, so a clean in progress stops writing into the
    /// directory that is about to be removed.
    deleted: AtomicBool,
    /// Set while the partition is being moved to another log directory: a clean in progress
    /// stops, none installs its segments.
    moving: AtomicBool,
    /// Moves completed.
    moves: AtomicU64,
}

impl Placement {
    pub(super) fn new(dir: Arc<LogDir>) -> Placement {
        Placement {
            dir: RwLock::new(dir),
            deleted: AtomicBool::new(false),
            moving: AtomicBool::new(false),
            moves: AtomicU64::new(0),
        }
    }

    /// The log directory the partition's directory is in now.
    pub fn dir(&self) -> Arc<LogDir> {
        self.dir.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The move into `dir` is done (called with the log lock held, as the swap is).
    pub(super) fn moved_to(&self, dir: Arc<LogDir>) {
        *self.dir.write().unwrap_or_else(|p| p.into_inner()) = dir;
        self.moves.fetch_add(1, Ordering::AcqRel);
    }

    pub(super) fn moves(&self) -> u64 {
        self.moves.load(Ordering::Acquire)
    }

    pub(super) fn set_moving(&self, moving: bool) {
        self.moving.store(moving, Ordering::Release);
    }

    pub(super) fn delete(&self) {
        self.deleted.store(true, Ordering::Release);
    }

    pub(super) fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Acquire)
    }

    /// Deleted or moving: a clean must not write into the directory.
    pub(super) fn writes_stopped(&self) -> bool {
        self.is_deleted() || self.moving.load(Ordering::Acquire)
    }
}
