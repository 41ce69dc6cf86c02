//! Which of many partitions changed, for a reader that stays: an incremental fetch session
//! (a follower's, most of all) subscribes each of its partitions once, under the place it has
//! in the session, and every wake-up of a partition (an append, a high watermark move, a
//! deletion) marks that place. A fetch then reads the places marked since the last one and
//! those its request names, not every partition of the session, and waits on one [`Notify`]
//! for all of them: at 10,000 partitions a replication round costs the partitions that
//! changed.
//!
//! Invariants:
//! - a partition marks its subscribers after its published offsets show what woke it, so a
//!   reader that [`ChangeSet::take`]s a place and then reads the published offsets sees at
//!   least that change;
//! - a place is listed once however often it is marked until it is taken: what a set holds is
//!   bounded by the places it was made for;
//! - a set no reader holds any more is dropped by the partitions at their next wake-up (they
//!   hold it weakly).

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

/// The places marked since the last [`ChangeSet::take`].
pub struct ChangeSet {
    marked: Mutex<Marked>,
    notify: Notify,
}

impl std::fmt::Debug for ChangeSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChangeSet")
    }
}

struct Marked {
    /// Places in the order they were marked.
    places: Vec<usize>,
    /// Whether each place is in `places`.
    listed: Vec<bool>,
}

impl ChangeSet {
    /// A set for places `0..places`.
    pub fn new(places: usize) -> Arc<ChangeSet> {
        Arc::new(ChangeSet {
            marked: Mutex::new(Marked {
                places: Vec::new(),
                listed: vec![false; places],
            }),
            notify: Notify::new(),
        })
    }

    /// Marks `place` changed and wakes the reader (a place out of range is ignored).
    pub fn mark(&self, place: usize) {
        {
            let mut m = self.marked.lock().unwrap_or_else(PoisonError::into_inner);
            match m.listed.get_mut(place) {
                Some(listed) if !*listed => *listed = true,
                _ => return,
            }
            m.places.push(place);
        }
        self.notify.notify_one();
    }

    /// The places marked since the last call, in the order they were marked.
    pub fn take(&self) -> Vec<usize> {
        let mut m = self.marked.lock().unwrap_or_else(PoisonError::into_inner);
        let places = std::mem::take(&mut m.places);
        for &p in &places {
            m.listed[p] = false;
        }
        places
    }

    /// Resolves once a place is marked (at once if one was marked since the last wait).
    pub async fn changed(&self) {
        self.notify.notified().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_is_listed_once_until_taken() {
        let set = ChangeSet::new(4);
        set.mark(2);
        set.mark(0);
        set.mark(2);
        set.mark(9);
        assert_eq!(set.take(), vec![2, 0]);
        assert!(set.take().is_empty());
        set.mark(2);
        assert_eq!(set.take(), vec![2]);
    }

    #[tokio::test]
    async fn a_mark_before_the_wait_is_not_lost() {
        let set = ChangeSet::new(1);
        set.mark(0);
        tokio::time::timeout(std::time::Duration::from_secs(5), set.changed())
            .await
            .expect("the earlier mark resolves the wait");
    }
}
