//! Who waits for a partition to change: fetches waiting once (long polls) and fetch sessions
//! subscribed until they go.
//!
//! Lock rule: the waiters' lock is a leaf, held only to change the lists; nothing is notified
//! and no other lock is taken while it is held.

use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

use super::ChangeSet;

#[derive(Default)]
pub struct Waiters {
    lists: Mutex<Lists>,
}

#[derive(Default)]
struct Lists {
    /// Fetches waiting once, each dropped at the wake-up it waited for.
    once: Vec<Weak<Notify>>,
    /// Sessions subscribed until they go: each set and this partition's place in it.
    subscribed: Vec<(Weak<ChangeSet>, usize)>,
}

impl Waiters {
    fn lists(&self) -> std::sync::MutexGuard<'_, Lists> {
        self.lists.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the fetches waiting once and marks the subscribed sessions. The partition calls
    /// it after its published offsets show the change (see `local.rs`).
    pub(super) fn wake(&self) {
        let (once, subscribed) = {
            let mut w = self.lists();
            let once = std::mem::take(&mut w.once);
            w.subscribed.retain(|(set, _)| set.strong_count() > 0);
            let subscribed: Vec<(Arc<ChangeSet>, usize)> = (w.subscribed.iter())
                .filter_map(|(set, place)| Some((set.upgrade()?, *place)))
                .collect();
            (once, subscribed)
        };
        for w in once {
            if let Some(n) = w.upgrade() {
                n.notify_one();
            }
        }
        for (set, place) in subscribed {
            set.mark(place);
        }
    }

    /// Registers a fetch that waits for the next change (once: a fetch registered already
    /// is not added again).
    pub fn watch(&self, notify: &Arc<Notify>) {
        let mut w = self.lists();
        w.once.retain(|w| w.strong_count() > 0);
        let me = Arc::downgrade(notify);
        if !w.once.iter().any(|w| w.ptr_eq(&me)) {
            w.once.push(me);
        }
    }

    /// Subscribes `set` to every wake-up of this partition, marking `place` (again a no-op:
    /// a set holds one place per partition). Lasts as long as the set.
    pub fn subscribe(&self, set: &Arc<ChangeSet>, place: usize) {
        let mut w = self.lists();
        let me = Arc::downgrade(set);
        if (w.subscribed.iter()).any(|(s, p)| s.ptr_eq(&me) && *p == place) {
            return;
        }
        w.subscribed
            .retain(|(s, _)| s.strong_count() > 0 && !s.ptr_eq(&me));
        w.subscribed.push((me, place));
    }
}
