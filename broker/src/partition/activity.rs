//! Which partitions have housekeeping due, so an idle broker's tick costs nothing per
//! partition it hosts.
//!
//! Two kinds of work:
//! - **Due because of a write**: a time-based flush (`flush.ms`) of appended records and the
//!   fsync of a rolled segment. A partition that appends (as leader or follower) or rolls
//!   queues itself here, once; the tick visits exactly the queued ones and keeps those with
//!   work still pending.
//! - **Due because of time alone**: retention and the time-based roll of an idle active
//!   segment. A [`Sweep`] visits every hosted partition once per retention check interval,
//!   a slice per tick, so ten thousand partitions cost a few dozen visits per tick rather
//!   than ten thousand.
//!
//! Invariant: a partition with a pending write-driven task is queued or is being visited
//! (its `queued` flag is cleared before the visit, so an append during the visit queues it
//! again).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

use super::{Partition, TopicPartition};

/// The partitions queued for a visit; shared by every partition of a broker.
#[derive(Default)]
pub struct Activity {
    queue: Mutex<Vec<Weak<Partition>>>,
}

impl Activity {
    /// Queues `p` unless it is queued already (one atomic swap on the append path).
    pub(super) fn mark(&self, p: &Partition) {
        if !p.queued.swap(true, Ordering::AcqRel) {
            self.queue
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(p.me.clone());
        }
    }

    /// The queued partitions, each unqueued before it is handed out (a partition deleted
    /// since it queued itself is dropped).
    pub fn take(&self) -> Vec<Arc<Partition>> {
        let queued = std::mem::take(&mut *self.queue.lock().unwrap_or_else(|e| e.into_inner()));
        queued
            .into_iter()
            .filter_map(|w| w.upgrade())
            .inspect(|p| p.queued.store(false, Ordering::Release))
            .collect()
    }
}

/// A cursor over the hosted partitions that visits each once per `period` of ticks.
#[derive(Default)]
pub struct Sweep {
    /// The last partition visited; the next slice starts after it.
    last: Option<TopicPartition>,
}

impl Sweep {
    /// The next slice of `all` (sorted by topic and partition): `ceil(len / ticks_per_round)`
    /// partitions after the last one visited, wrapping around. Partitions added or removed
    /// between calls shift nothing: the cursor is a key, not an index.
    pub fn next<'a>(
        &mut self,
        all: &'a [Arc<Partition>],
        ticks_per_round: u64,
    ) -> Vec<&'a Arc<Partition>> {
        self.next_by(all, |p| &p.tp, ticks_per_round)
    }

    fn next_by<'a, T>(
        &mut self,
        all: &'a [T],
        key: impl Fn(&T) -> &TopicPartition,
        ticks_per_round: u64,
    ) -> Vec<&'a T> {
        if all.is_empty() {
            return Vec::new();
        }
        let per_tick = all.len().div_ceil(ticks_per_round.max(1) as usize);
        let start = match &self.last {
            Some(last) => all.partition_point(|p| key(p) <= last) % all.len(),
            None => 0,
        };
        let slice: Vec<&T> = all.iter().cycle().skip(start).take(per_tick).collect();
        self.last = slice.last().map(|p| key(p).clone());
        slice
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tps(n: i32) -> Vec<TopicPartition> {
        (0..n)
            .map(|partition| TopicPartition {
                topic: "t".to_string(),
                partition,
            })
            .collect()
    }

    fn visit(sweep: &mut Sweep, all: &[TopicPartition], ticks: u64) -> Vec<i32> {
        sweep
            .next_by(all, |t| t, ticks)
            .into_iter()
            .map(|t| t.partition)
            .collect()
    }

    #[test]
    fn a_round_of_ticks_visits_every_partition_once() {
        let all = tps(10);
        let mut sweep = Sweep::default();
        let mut seen: Vec<i32> = (0..4).flat_map(|_| visit(&mut sweep, &all, 4)).collect();
        // ceil(10 / 4) = 3 per tick: 12 visits, the first two partitions twice.
        assert_eq!(seen.len(), 12);
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen, (0..10).collect::<Vec<_>>());
        assert_eq!(visit(&mut sweep, &all, 4), vec![2, 3, 4]);
    }

    #[test]
    fn the_cursor_survives_partitions_coming_and_going() {
        let all = tps(6);
        let mut sweep = Sweep::default();
        assert_eq!(visit(&mut sweep, &all, 3), vec![0, 1]);
        // Partition 1 (the last visited) and 0 are gone: go on after where 1 was.
        let fewer: Vec<TopicPartition> = all[2..].to_vec();
        assert_eq!(visit(&mut sweep, &fewer, 2), vec![2, 3]);
        assert!(visit(&mut sweep, &[], 2).is_empty());
        // More ticks than partitions: one per tick.
        assert_eq!(visit(&mut sweep, &fewer, 100), vec![4]);
    }
}
