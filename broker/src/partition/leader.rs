//! A partition leader's view of its followers: how far each has fetched, when each was last
//! caught up, and from that the high watermark and the ISR changes to propose.
//!
//! Invariants (docs/invariants.md 1, 3):
//! - The high watermark is the smallest log end of the ISR (this leader included) and never
//!   moves back while this leader leads; a follower whose position is unknown holds it where
//!   it is.
//! - A follower joins the ISR only once it holds everything below the high watermark and has
//!   reached this leader's epoch (its position is at or past where the epoch began), so a
//!   replica that may still hold an older leader's divergent suffix never counts.
//! - A follower leaves the ISR when it has not been caught up for `replica.lag.time.max.ms`.
//!   Caught up, as in Kafka: its fetch reached the leader's log end as of now, or as of its
//!   previous fetch (under steady load a follower is always a little behind "now", but it
//!   keeps reaching where the leader was one fetch ago).
//! - At most one ISR change is in flight: the next is computed from the state it commits.
//! - While an expansion is in flight, the high watermark counts the joining follower too (the
//!   "maximal ISR", as Kafka's KIP-497 leader does): the quorum may commit the expansion and,
//!   completing a reassignment, make that follower leader at once, so nothing it lacks may be
//!   acknowledged meanwhile.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How far one follower has got.
#[derive(Debug, Clone, Copy)]
struct Progress {
    /// The follower's log end, as its last fetch offset said; -1 before its first fetch.
    log_end: i64,
    last_caught_up: Instant,
    /// The leader's log end and the time at the follower's previous fetch.
    previous: Option<(i64, Instant)>,
}

impl Progress {
    /// A follower not heard from yet, with a full lag allowance from `now`.
    fn unknown(now: Instant) -> Progress {
        Progress {
            log_end: -1,
            last_caught_up: now,
            previous: None,
        }
    }
}

/// An ISR change to propose through the quorum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrChange {
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<u64>,
    /// A follower joins (else some leave).
    pub expand: bool,
}

#[derive(Debug)]
pub struct LeaderState {
    pub me: u64,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub replicas: Vec<u64>,
    pub isr: Vec<u64>,
    /// This leader's log end when it took over: where its epoch begins.
    pub epoch_start: i64,
    followers: HashMap<u64, Progress>,
    /// An ISR change was proposed and has not been seen in the metadata yet.
    change_in_flight: bool,
    /// The follower an in-flight expansion adds: it counts for the high watermark already.
    joining: Option<u64>,
}

impl LeaderState {
    /// A new leadership: every follower starts with a full lag allowance from `now`.
    pub fn new(
        me: u64,
        leader_epoch: i32,
        partition_epoch: i32,
        replicas: Vec<u64>,
        isr: Vec<u64>,
        log_end: i64,
        now: Instant,
    ) -> LeaderState {
        let followers = replicas
            .iter()
            .filter(|r| **r != me)
            .map(|r| (*r, Progress::unknown(now)))
            .collect();
        let s = LeaderState {
            me,
            leader_epoch,
            partition_epoch,
            replicas,
            isr,
            epoch_start: log_end,
            followers,
            change_in_flight: false,
            joining: None,
        };
        check_isr(s.me, &s.replicas, &s.isr);
        s
    }

    /// The metadata committed a new ISR (or partition epoch) for this leadership.
    pub fn update(
        &mut self,
        partition_epoch: i32,
        replicas: Vec<u64>,
        isr: Vec<u64>,
        now: Instant,
    ) {
        if partition_epoch != self.partition_epoch {
            self.change_in_flight = false;
            self.joining = None;
        }
        self.partition_epoch = partition_epoch;
        self.isr = isr;
        self.replicas = replicas;
        for r in &self.replicas {
            if *r != self.me {
                self.followers
                    .entry(*r)
                    .or_insert_with(|| Progress::unknown(now));
            }
        }
        let replicas = self.replicas.clone();
        self.followers.retain(|r, _| replicas.contains(r));
        check_isr(self.me, &self.replicas, &self.isr);
    }

    /// The high watermark the ISR allows, given this leader's log end; never below `current`.
    pub fn high_watermark(&self, leader_log_end: i64, current: i64) -> i64 {
        let mut hw = leader_log_end;
        for r in self.isr.iter().chain(self.joining.iter()) {
            if *r == self.me {
                continue;
            }
            match self.followers.get(r) {
                Some(p) if p.log_end >= 0 => hw = hw.min(p.log_end),
                _ => return current,
            }
        }
        hw.max(current)
    }

    /// How far `follower` has fetched (None: not a follower here).
    pub fn follower_end(&self, follower: u64) -> Option<i64> {
        self.followers.get(&follower).map(|p| p.log_end)
    }

    /// Records a follower's fetch from `offset` (it holds everything below). Returns an ISR
    /// expansion to propose, if this fetch qualifies the follower.
    pub fn fetched(
        &mut self,
        follower: u64,
        offset: i64,
        leader_log_end: i64,
        high_watermark: i64,
        now: Instant,
    ) -> Option<IsrChange> {
        let p = self.followers.get_mut(&follower)?;
        p.log_end = offset;
        if offset >= leader_log_end {
            p.last_caught_up = now;
        } else if let Some((end, at)) = p.previous {
            if offset >= end && at > p.last_caught_up {
                p.last_caught_up = at;
            }
        }
        p.previous = Some((leader_log_end, now));
        let qualifies =
            !self.isr.contains(&follower) && offset >= high_watermark && offset >= self.epoch_start;
        if qualifies && !self.change_in_flight {
            let mut isr = self.isr.clone();
            isr.push(follower);
            self.joining = Some(follower);
            return Some(self.propose(isr));
        }
        None
    }

    /// An ISR shrink to propose: followers not caught up for longer than `max_lag`.
    pub fn shrink(&mut self, now: Instant, max_lag: Duration) -> Option<IsrChange> {
        if self.change_in_flight {
            return None;
        }
        let out: Vec<u64> = self
            .isr
            .iter()
            .copied()
            .filter(|r| *r != self.me)
            .filter(|r| {
                self.followers
                    .get(r)
                    .is_some_and(|p| now.saturating_duration_since(p.last_caught_up) > max_lag)
            })
            .collect();
        if out.is_empty() {
            return None;
        }
        let isr = self
            .isr
            .iter()
            .copied()
            .filter(|r| !out.contains(r))
            .collect();
        Some(self.propose(isr))
    }

    fn propose(&mut self, isr: Vec<u64>) -> IsrChange {
        check_isr(self.me, &self.replicas, &isr);
        self.change_in_flight = true;
        IsrChange {
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
            expand: isr.len() > self.isr.len(),
            isr,
        }
    }

    /// The proposal is decided (committed and applied, or not): the next fetch or tick may
    /// propose again.
    pub fn change_settled(&mut self) {
        self.change_in_flight = false;
        self.joining = None;
    }

    /// Followers' log ends (-1: unknown), for metrics and status.
    pub fn follower_log_ends(&self) -> Vec<(u64, i64)> {
        let mut v: Vec<_> = self
            .followers
            .iter()
            .map(|(r, p)| (*r, p.log_end))
            .collect();
        v.sort_unstable();
        v
    }
}

/// Invariant 9 (docs/invariants.md), checked in debug builds wherever this leader takes an ISR
/// from the metadata or proposes one: the ISR is a set of the replicas and holds the leader.
/// The controller refuses any other; a leader holding one would count the wrong replicas
/// toward the high watermark.
fn check_isr(leader: u64, replicas: &[u64], isr: &[u64]) {
    if cfg!(debug_assertions) {
        let distinct = isr.iter().collect::<std::collections::BTreeSet<_>>().len() == isr.len();
        assert!(
            distinct && isr.contains(&leader) && isr.iter().all(|r| replicas.contains(r)),
            "invariant 9 (docs/invariants.md): ISR {isr:?} is not a set of the replicas \
             {replicas:?} holding the leader {leader}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader(isr: &[u64], log_end: i64, now: Instant) -> LeaderState {
        LeaderState::new(1, 5, 0, vec![1, 2, 3], isr.to_vec(), log_end, now)
    }

    #[test]
    fn the_high_watermark_is_the_smallest_isr_log_end_and_never_moves_back() {
        let now = crate::clock::Clock::manual(0).instant();
        let mut l = leader(&[1, 2, 3], 100, now);
        assert_eq!(
            l.high_watermark(120, 100),
            100,
            "followers' positions unknown"
        );
        l.fetched(2, 110, 120, 100, now);
        assert_eq!(l.high_watermark(120, 100), 100, "3 still unknown");
        l.fetched(3, 105, 120, 100, now);
        assert_eq!(l.high_watermark(120, 100), 105);
        l.fetched(3, 120, 120, 105, now);
        assert_eq!(l.high_watermark(120, 105), 110);
        assert_eq!(l.high_watermark(120, 115), 115, "never back");
        let alone = leader(&[1], 100, now);
        assert_eq!(
            alone.high_watermark(130, 100),
            130,
            "a lone ISR commits at once"
        );
    }

    #[test]
    fn a_follower_joins_once_it_has_the_high_watermark_and_this_epoch() {
        let now = crate::clock::Clock::manual(0).instant();
        let mut l = leader(&[1, 2], 100, now);
        assert_eq!(
            l.fetched(3, 90, 120, 95, now),
            None,
            "behind the high watermark"
        );
        let change = l.fetched(3, 100, 120, 100, now).expect("joins");
        assert_eq!(change.isr, vec![1, 2, 3]);
        assert_eq!((change.leader_epoch, change.partition_epoch), (5, 0));
        assert_eq!(
            l.fetched(3, 120, 120, 100, now),
            None,
            "one change in flight"
        );
        l.update(1, vec![1, 2, 3], vec![1, 2, 3], now);
        assert_eq!(l.fetched(3, 120, 120, 120, now), None, "already in");

        let mut fresh = leader(&[1], 100, now);
        assert_eq!(
            fresh.fetched(2, 90, 100, 90, now),
            None,
            "before this epoch began"
        );
    }

    #[test]
    fn a_follower_always_one_fetch_behind_under_load_stays_caught_up() {
        let t0 = crate::clock::Clock::manual(0).instant();
        let lag = Duration::from_secs(10);
        let mut l = leader(&[1, 2], 0, t0);
        // Each fetch reaches where the leader was at the previous fetch, never "now".
        for i in 1..=30u64 {
            let t = t0 + Duration::from_secs(i);
            l.fetched(2, (i as i64 - 1) * 100, i as i64 * 100, 0, t);
        }
        assert_eq!(l.shrink(t0 + Duration::from_secs(31), lag), None);
        // A follower that stops advancing does fall out.
        assert!(l.shrink(t0 + Duration::from_secs(45), lag).is_some());
    }

    #[test]
    fn a_follower_not_caught_up_for_the_lag_limit_leaves() {
        let t0 = crate::clock::Clock::manual(0).instant();
        let lag = Duration::from_secs(10);
        let mut l = leader(&[1, 2, 3], 100, t0);
        l.fetched(2, 100, 100, 100, t0 + Duration::from_secs(8));
        assert_eq!(l.shrink(t0 + Duration::from_secs(9), lag), None);
        let change = l
            .shrink(t0 + Duration::from_secs(11), lag)
            .expect("3 is out");
        assert_eq!(change.isr, vec![1, 2]);
        assert_eq!(
            l.shrink(t0 + Duration::from_secs(30), lag),
            None,
            "in flight"
        );
        l.change_settled();
        let change = l
            .shrink(t0 + Duration::from_secs(30), lag)
            .expect("both out");
        assert_eq!(change.isr, vec![1]);
    }

    #[test]
    fn a_joining_follower_holds_the_high_watermark_while_its_expansion_is_in_flight() {
        let now = crate::clock::Clock::manual(0).instant();
        let mut s = leader(&[1, 2], 100, now);
        s.fetched(2, 100, 100, 100, now);
        // Follower 3 reaches the high watermark: its expansion is proposed.
        let change = s.fetched(3, 100, 100, 100, now).expect("expansion");
        assert_eq!(change.isr, vec![1, 2, 3]);
        // The leader appends and 2 follows, but 3 has not: nothing past 100 is committed,
        // since the quorum may make 3 leader as it commits the expansion.
        s.fetched(2, 150, 150, 100, now);
        assert_eq!(s.high_watermark(150, 100), 100);
        s.fetched(3, 150, 150, 100, now);
        assert_eq!(s.high_watermark(150, 100), 150);
        // A failed proposal drops it from the count again.
        s.change_settled();
        s.fetched(2, 170, 170, 150, now);
        assert_eq!(s.high_watermark(170, 150), 170);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "invariant 9")]
    fn an_isr_without_the_leader_is_caught() {
        let now = crate::clock::Clock::manual(0).instant();
        let mut l = leader(&[1, 2], 0, now);
        l.update(1, vec![1, 2, 3], vec![2, 3], now);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "invariant 9")]
    fn an_isr_naming_a_broker_outside_the_replicas_is_caught() {
        let now = crate::clock::Clock::manual(0).instant();
        leader(&[1, 4], 0, now);
    }
}
