//! Share sessions (KIP-932): per (group, member), the partitions a member fetches from this
//! broker and the epoch its next ShareFetch or ShareAcknowledge must carry.
//!
//! Epoch 0 opens a session (replacing the member's previous one here, whose records go back);
//! -1 closes it (its acknowledgements applied first, then what the member still holds goes
//! back); any other epoch must be the session's current one (INVALID_SHARE_SESSION_EPOCH), for
//! a session that exists (SHARE_SESSION_NOT_FOUND). Each accepted request moves the epoch on
//! (past `i32::MAX` to 1, as Kafka does).
//!
//! Invariant (docs/invariants.md, invariant 14): a session's epoch only moves forward, by one,
//! on a request that named it; a request with another epoch changes nothing.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::error::ErrorCode;

/// A partition by topic id.
pub type Tp = (Uuid, i32);

struct Session {
    epoch: i32,
    partitions: BTreeSet<Tp>,
    last_used: Instant,
}

/// What a request may go on with, once its epoch is accepted.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// The session's partitions after the request's additions and removals.
    pub partitions: Vec<Tp>,
    /// Partitions of the member's previous session, replaced by a new one without them: what
    /// it holds in them goes back. A partition merely forgotten keeps its records with the
    /// member until it acknowledges them or their locks expire, as Kafka's do: a client drops
    /// a partition from its session after handing its records to the application, and
    /// acknowledges them later.
    pub dropped: Vec<Tp>,
    /// The request closes the session (epoch -1).
    pub closing: bool,
}

pub struct Sessions {
    map: Mutex<HashMap<(String, String), Session>>,
    /// The most sessions kept; a new one beyond it evicts the least recently used one idle
    /// for `idle`, else is refused (SHARE_SESSION_LIMIT_REACHED).
    max: usize,
    idle: Duration,
}

impl Sessions {
    pub fn new(max: usize, idle: Duration) -> Sessions {
        Sessions {
            map: Mutex::default(),
            max,
            idle,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Session>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Accepts (or refuses) a request of `member` with `epoch`, adding `named` to its session
    /// and removing `forgotten`. `fetch`: a ShareFetch (only a fetch may open a session).
    pub fn advance(
        &self,
        (group, member): (&str, &str),
        epoch: i32,
        named: &[Tp],
        forgotten: &[Tp],
        fetch: bool,
        now: Instant,
    ) -> Result<Step, ErrorCode> {
        let key = (group.to_string(), member.to_string());
        let mut map = self.lock();
        let mut step = Step::default();
        match epoch {
            0 => {
                if !fetch {
                    return Err(ErrorCode::InvalidShareSessionEpoch);
                }
                if let Some(old) = map.remove(&key) {
                    step.dropped.extend(old.partitions);
                } else if map.len() >= self.max && !self.evict_one(&mut map, now) {
                    return Err(ErrorCode::ShareSessionLimitReached);
                }
                let partitions: BTreeSet<Tp> = named.iter().copied().collect();
                step.dropped.retain(|tp| !partitions.contains(tp));
                step.partitions = partitions.iter().copied().collect();
                map.insert(
                    key,
                    Session {
                        epoch: 1,
                        partitions,
                        last_used: now,
                    },
                );
            }
            -1 => {
                let session = map.remove(&key).ok_or(ErrorCode::ShareSessionNotFound)?;
                step.partitions = session.partitions.into_iter().collect();
                step.closing = true;
            }
            e => {
                let session = map.get_mut(&key).ok_or(ErrorCode::ShareSessionNotFound)?;
                if e != session.epoch {
                    return Err(ErrorCode::InvalidShareSessionEpoch);
                }
                session.epoch = if e == i32::MAX { 1 } else { e + 1 };
                session.last_used = now;
                session.partitions.extend(named.iter().copied());
                for tp in forgotten {
                    session.partitions.remove(tp);
                }
                step.partitions = session.partitions.iter().copied().collect();
            }
        }
        Ok(step)
    }

    /// Removes the least recently used session idle for `idle`; whether there was one. Its
    /// member's records come back when their locks expire.
    fn evict_one(&self, map: &mut HashMap<(String, String), Session>, now: Instant) -> bool {
        let oldest = (map.iter())
            .filter(|(_, s)| now.saturating_duration_since(s.last_used) >= self.idle)
            .min_by_key(|(_, s)| s.last_used)
            .map(|(k, _)| k.clone());
        match oldest {
            Some(k) => map.remove(&k).is_some(),
            None => false,
        }
    }

    /// Every session of `group` goes (the group was deleted).
    pub fn drop_group(&self, group: &str) {
        self.lock().retain(|(g, _), _| g != group);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;

    fn tp(p: i32) -> Tp {
        (Uuid::from_u128(7), p)
    }

    #[test]
    fn epochs_open_advance_and_close_a_session() {
        let now = Clock::manual(0).instant();
        let s = Sessions::new(10, Duration::from_secs(60));
        assert_eq!(
            s.advance(("g", "m"), 1, &[], &[], true, now),
            Err(ErrorCode::ShareSessionNotFound)
        );
        assert_eq!(
            s.advance(("g", "m"), 0, &[tp(0)], &[], false, now),
            Err(ErrorCode::InvalidShareSessionEpoch),
            "ShareAcknowledge cannot open a session"
        );
        let step = s.advance(("g", "m"), 0, &[tp(0)], &[], true, now).unwrap();
        assert_eq!(step.partitions, vec![tp(0)]);
        // A stale epoch changes nothing: the next one is still 1.
        assert_eq!(
            s.advance(("g", "m"), 2, &[tp(1)], &[], true, now),
            Err(ErrorCode::InvalidShareSessionEpoch)
        );
        let step = s.advance(("g", "m"), 1, &[tp(1)], &[], true, now).unwrap();
        assert_eq!(step.partitions, vec![tp(0), tp(1)]);
        let step = s.advance(("g", "m"), 2, &[], &[tp(0)], true, now).unwrap();
        assert_eq!(step.partitions, vec![tp(1)]);
        assert!(
            step.dropped.is_empty(),
            "a forgotten partition keeps its locks"
        );
        let step = s.advance(("g", "m"), -1, &[], &[], false, now).unwrap();
        assert!(step.closing);
        assert_eq!(step.partitions, vec![tp(1)]);
        assert!(s.is_empty());
        assert_eq!(
            s.advance(("g", "m"), -1, &[], &[], true, now),
            Err(ErrorCode::ShareSessionNotFound)
        );
    }

    #[test]
    fn reopening_drops_what_the_old_session_had_and_the_limit_evicts_idle_sessions() {
        let clock = Clock::manual(0);
        let s = Sessions::new(1, Duration::from_secs(60));
        s.advance(("g", "m"), 0, &[tp(0), tp(1)], &[], true, clock.instant())
            .unwrap();
        let step = s
            .advance(("g", "m"), 0, &[tp(1)], &[], true, clock.instant())
            .unwrap();
        assert_eq!(step.dropped, vec![tp(0)]);
        assert_eq!(
            s.advance(("g", "other"), 0, &[tp(0)], &[], true, clock.instant()),
            Err(ErrorCode::ShareSessionLimitReached)
        );
        clock.advance(Duration::from_secs(60));
        s.advance(("g", "other"), 0, &[tp(0)], &[], true, clock.instant())
            .unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(
            s.advance(("g", "m"), 1, &[], &[], true, clock.instant()),
            Err(ErrorCode::ShareSessionNotFound),
            "evicted"
        );
    }

    #[test]
    fn the_epoch_wraps_to_one() {
        let now = Clock::manual(0).instant();
        let s = Sessions::new(10, Duration::from_secs(60));
        s.advance(("g", "m"), 0, &[], &[], true, now).unwrap();
        s.lock().get_mut(&("g".into(), "m".into())).unwrap().epoch = i32::MAX;
        s.advance(("g", "m"), i32::MAX, &[], &[], true, now)
            .unwrap();
        s.advance(("g", "m"), 1, &[], &[], true, now).unwrap();
    }
}
