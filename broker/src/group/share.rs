//! Share groups (KIP-932): members that read the same partitions together, each record handed
//! to one of them at a time by the partition's leader (`crate::share`). The coordinator keeps
//! only who is in the group, what each subscribes to and which partitions each is assigned:
//! there is nothing to revoke (a partition may be read by several members at once), so a
//! member takes its new assignment at its next heartbeat. Pure: time and topic metadata come in
//! as arguments.
//!
//! Invariants:
//! - The group epoch bumps on every change of members, subscriptions or the subscribed topics'
//!   partition counts, and the assignment is recomputed at that epoch; a member's epoch is the
//!   group epoch of the assignment it was last given.
//! - Every partition of a subscribed topic is assigned to at least one of its subscribers;
//!   with more subscribers than partitions, partitions are shared, each member getting one.
//! - A member id is the client's (it generates one and keeps it); a heartbeat with an epoch
//!   that is not the member's is FENCED_MEMBER_EPOCH, one from a member not in the group
//!   (expired, or never joined) UNKNOWN_MEMBER_ID.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::consumer::{Topics, Tp};
use crate::error::ErrorCode;

/// The assignor, under Kafka's name for its share-group assignor.
pub const ASSIGNOR: &str = "simple";

#[derive(Debug, Clone)]
pub struct Member {
    pub id: String,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub epoch: i32,
    pub subscribed: BTreeSet<String>,
    pub assigned: BTreeSet<Tp>,
    last_seen: Instant,
}

/// One ShareGroupHeartbeat, as the coordinator reads it.
#[derive(Debug, Clone)]
pub struct Heartbeat {
    pub member_id: String,
    /// 0 to join, -1 to leave, else the member's epoch.
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    /// None: unchanged since the last heartbeat.
    pub subscribed_topic_names: Option<Vec<String>>,
    pub client_id: String,
    pub client_host: String,
}

/// The answer to a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub member_id: String,
    pub member_epoch: i32,
    /// The member's partitions when they changed (or it joined); None: as before.
    pub assignment: Option<Vec<Tp>>,
}

#[derive(Debug, Default)]
pub struct ShareGroup {
    pub epoch: i32,
    pub members: BTreeMap<String, Member>,
    /// The subscribed topics' partition counts the assignment was computed for.
    sized: BTreeMap<String, i32>,
    /// Every topic a member subscribed to while the group existed here: where it may have
    /// share partitions (DescribeShareGroupOffsets of all its topics), members or not.
    pub topics_seen: BTreeSet<String>,
}

impl ShareGroup {
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Kafka's share group states: Empty or Stable (a share group never rebalances in steps).
    pub fn state(&self) -> &'static str {
        if self.is_empty() {
            "Empty"
        } else {
            "Stable"
        }
    }

    /// Every topic any member subscribes to.
    pub fn subscribed_topics(&self) -> BTreeSet<String> {
        (self.members.values())
            .flat_map(|m| m.subscribed.iter().cloned())
            .collect()
    }

    pub fn heartbeat(
        &mut self,
        hb: Heartbeat,
        topics: &Topics,
        now: Instant,
    ) -> Result<Answer, ErrorCode> {
        if hb.member_id.is_empty() || hb.member_id.len() > 255 {
            return Err(ErrorCode::InvalidRequest);
        }
        match hb.member_epoch {
            -1 => {
                if self.members.remove(&hb.member_id).is_some() {
                    self.reassign(topics);
                }
                return Ok(Answer {
                    member_id: hb.member_id,
                    member_epoch: -1,
                    assignment: None,
                });
            }
            0 => {
                let Some(names) = hb.subscribed_topic_names.clone() else {
                    return Err(ErrorCode::InvalidRequest);
                };
                // A member joining again (its client restarted the session) keeps its id.
                let member = self.members.entry(hb.member_id.clone()).or_insert(Member {
                    id: hb.member_id.clone(),
                    rack_id: None,
                    client_id: String::new(),
                    client_host: String::new(),
                    epoch: 0,
                    subscribed: BTreeSet::new(),
                    assigned: BTreeSet::new(),
                    last_seen: now,
                });
                member.epoch = 0;
                member.subscribed = names.into_iter().collect();
            }
            epoch => {
                let Some(member) = self.members.get(&hb.member_id) else {
                    return Err(ErrorCode::UnknownMemberId);
                };
                if epoch != member.epoch {
                    return Err(ErrorCode::FencedMemberEpoch);
                }
            }
        }
        let member = self.members.get_mut(&hb.member_id).expect("present");
        member.last_seen = now;
        member.client_id = hb.client_id;
        member.client_host = hb.client_host;
        if hb.rack_id.is_some() {
            member.rack_id = hb.rack_id;
        }
        if let Some(names) = hb.subscribed_topic_names {
            member.subscribed = names.into_iter().collect();
        }
        let before = member.assigned.clone();
        let joining = member.epoch == 0;
        self.reassign(topics);
        let member = self.members.get_mut(&hb.member_id).expect("present");
        let changed = joining || member.assigned != before || member.epoch != self.epoch;
        member.epoch = self.epoch;
        Ok(Answer {
            member_id: member.id.clone(),
            member_epoch: member.epoch,
            assignment: changed.then(|| member.assigned.iter().copied().collect()),
        })
    }

    /// Members silent for `session` leave. Returns whether any did.
    pub fn expire(&mut self, now: Instant, session: Duration, topics: &Topics) -> bool {
        let before = self.members.len();
        self.members
            .retain(|_, m| now.saturating_duration_since(m.last_seen) < session);
        let expired = self.members.len() != before;
        if expired {
            self.reassign(topics);
        }
        expired
    }

    /// Recomputes the assignment when members, subscriptions or partition counts changed,
    /// bumping the group epoch.
    fn reassign(&mut self, topics: &Topics) {
        let sized: BTreeMap<String, i32> = (self.subscribed_topics().into_iter())
            .filter_map(|t| topics.get(&t).map(|(_, n)| (t, *n)))
            .collect();
        let target = assign(&self.members, topics);
        self.topics_seen.extend(sized.keys().cloned());
        let unchanged = sized == self.sized
            && (self.members.iter()).all(|(id, m)| target.get(id) == Some(&m.assigned));
        if unchanged {
            return;
        }
        self.sized = sized;
        self.epoch += 1;
        for (id, m) in self.members.iter_mut() {
            m.assigned = target.get(id).cloned().unwrap_or_default();
        }
    }
}

/// Per topic: its partitions over its subscribers (sorted by id, for a stable answer), round
/// robin; with more subscribers than partitions, each subscriber gets one partition and the
/// partitions are shared.
fn assign(members: &BTreeMap<String, Member>, topics: &Topics) -> BTreeMap<String, BTreeSet<Tp>> {
    let mut out: BTreeMap<String, BTreeSet<Tp>> = members
        .keys()
        .map(|id| (id.clone(), BTreeSet::new()))
        .collect();
    let mut by_topic: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for m in members.values() {
        for t in &m.subscribed {
            by_topic.entry(t).or_default().push(&m.id);
        }
    }
    for (topic, subscribers) in by_topic {
        let Some(&(id, partitions)) = topics.get(topic) else {
            continue;
        };
        if partitions <= 0 {
            continue;
        }
        let n = subscribers.len();
        if n <= partitions as usize {
            for p in 0..partitions {
                let m = subscribers[p as usize % n];
                out.get_mut(m).expect("member").insert((id, p));
            }
        } else {
            for (i, m) in subscribers.iter().enumerate() {
                let p = (i % partitions as usize) as i32;
                out.get_mut(*m).expect("member").insert((id, p));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use uuid::Uuid;

    fn join(member: &str, topics: &[&str]) -> Heartbeat {
        Heartbeat {
            member_id: member.into(),
            member_epoch: 0,
            rack_id: None,
            subscribed_topic_names: Some(topics.iter().map(|t| t.to_string()).collect()),
            client_id: "c".into(),
            client_host: "h".into(),
        }
    }

    fn beat(member: &str, epoch: i32) -> Heartbeat {
        Heartbeat {
            subscribed_topic_names: None,
            member_epoch: epoch,
            ..join(member, &[])
        }
    }

    #[test]
    fn members_share_partitions_and_every_partition_is_read() {
        let now = Clock::manual(0).instant();
        let id = Uuid::new_v4();
        let topics: Topics = [("t".to_string(), (id, 2))].into();
        let mut g = ShareGroup::default();
        let a = g.heartbeat(join("a", &["t"]), &topics, now).unwrap();
        assert_eq!(a.assignment, Some(vec![(id, 0), (id, 1)]));
        assert_eq!(a.member_epoch, 1);
        let b = g.heartbeat(join("b", &["t"]), &topics, now).unwrap();
        assert_eq!(b.assignment, Some(vec![(id, 1)]));
        // `a` learns its new assignment at its next heartbeat, with the new epoch.
        let a = g.heartbeat(beat("a", 1), &topics, now).unwrap();
        assert_eq!((a.member_epoch, a.assignment), (2, Some(vec![(id, 0)])));
        // Three members over two partitions: each gets one, partition 0 is shared.
        g.heartbeat(join("c", &["t"]), &topics, now).unwrap();
        let held: Vec<_> = g.members.values().map(|m| m.assigned.clone()).collect();
        assert!(held.iter().all(|a| a.len() == 1));
        let covered: BTreeSet<_> = held.iter().flatten().collect();
        assert_eq!(covered.len(), 2);
        // `a` catches up with the new epoch; then nothing changed: no assignment in the answer.
        let a = g.heartbeat(beat("a", 2), &topics, now).unwrap();
        assert_eq!((a.member_epoch, a.assignment), (3, Some(vec![(id, 0)])));
        let a = g.heartbeat(beat("a", 3), &topics, now).unwrap();
        assert_eq!(a.assignment, None);
    }

    #[test]
    fn stale_epochs_unknown_members_and_silent_members_are_refused_or_expire() {
        let clock = Clock::manual(0);
        let id = Uuid::new_v4();
        let topics: Topics = [("t".to_string(), (id, 1))].into();
        let mut g = ShareGroup::default();
        g.heartbeat(join("a", &["t"]), &topics, clock.instant())
            .unwrap();
        assert_eq!(
            g.heartbeat(beat("a", 7), &topics, clock.instant()),
            Err(ErrorCode::FencedMemberEpoch)
        );
        assert_eq!(
            g.heartbeat(beat("zz", 1), &topics, clock.instant()),
            Err(ErrorCode::UnknownMemberId)
        );
        assert_eq!(
            g.heartbeat(beat("", 0), &topics, clock.instant()),
            Err(ErrorCode::InvalidRequest)
        );
        clock.advance(Duration::from_secs(44));
        assert!(!g.expire(clock.instant(), Duration::from_secs(45), &topics));
        clock.advance(Duration::from_secs(1));
        assert!(g.expire(clock.instant(), Duration::from_secs(45), &topics));
        assert!(g.is_empty());
        assert_eq!(g.state(), "Empty");
        // Leaving is answered with epoch -1.
        g.heartbeat(join("b", &["t"]), &topics, clock.instant())
            .unwrap();
        let left = g
            .heartbeat(beat("b", -1), &topics, clock.instant())
            .unwrap();
        assert_eq!(left.member_epoch, -1);
        assert!(g.is_empty());
    }

    #[test]
    fn new_partitions_are_assigned_at_the_next_heartbeat() {
        let now = Clock::manual(0).instant();
        let id = Uuid::new_v4();
        let mut g = ShareGroup::default();
        let one: Topics = [("t".to_string(), (id, 1))].into();
        let a = g.heartbeat(join("a", &["t", "later"]), &one, now).unwrap();
        assert_eq!(a.assignment, Some(vec![(id, 0)]));
        let two: Topics = [("t".to_string(), (id, 2))].into();
        let a = g.heartbeat(beat("a", a.member_epoch), &two, now).unwrap();
        assert_eq!(a.assignment, Some(vec![(id, 0), (id, 1)]));
    }
}
