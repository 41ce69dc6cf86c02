//! Consumer groups under KIP-848's protocol (`group.protocol=consumer`): the coordinator
//! assigns the partitions itself (a server-side assignor) and moves each member to its share
//! of the target assignment by epochs, through ConsumerGroupHeartbeat alone. Pure: time and
//! topic metadata come in as arguments.
//!
//! Invariants:
//! - The group epoch bumps on every change of members, subscriptions or the subscribed topics'
//!   partition counts; the target assignment is recomputed at that epoch (`assignment_epoch`).
//! - A partition is owned by at most one member at a time: a member is given a partition only
//!   once no other member owns it or is revoking it (it has confirmed giving it up, or left,
//!   or was fenced).
//! - A member's epoch reaches the assignment epoch only once it has confirmed every revocation
//!   asked of it; a heartbeat carrying an epoch that is neither the member's current nor its
//!   previous one is fenced (FENCED_MEMBER_EPOCH), as is a member silent for the session
//!   timeout or slower than its rebalance timeout to revoke.
//! - A static member (one with an instance id) that leaves with epoch -2 keeps its place and
//!   its partitions for the session timeout: a member joining with its instance id in that
//!   time takes them over, epoch and all, without a rebalance. An instance id is one
//!   member's at a time: joining with one a live member holds is UNRELEASED_INSTANCE_ID.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use regex::Regex;
use uuid::Uuid;

use super::consumer_store::{CurrentRecord, Key, MemberRecord, Value};
use crate::error::ErrorCode;

/// A partition by topic id, as KIP-848 names them.
pub type Tp = (Uuid, i32);

/// Topic name → (id, partition count): what subscriptions resolve against.
pub type Topics = BTreeMap<String, (Uuid, i32)>;

/// The one server-side assignor, under Kafka's name for it.
pub const ASSIGNOR: &str = "uniform";

#[derive(Debug, Clone)]
pub struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub epoch: i32,
    previous_epoch: i32,
    rebalance_timeout: Duration,
    pub subscribed: BTreeSet<String>,
    /// Its subscription regex, compiled once when it changes (`as_str` is the pattern).
    pub regex: Option<Regex>,
    /// The topics its regex resolved to among those it may DESCRIBE, as of its last
    /// heartbeat (None: no authorizer, the regex is matched against every topic).
    resolved: Option<BTreeSet<String>>,
    /// What the member owns: what it was last told to keep or take.
    pub assigned: BTreeSet<Tp>,
    /// What it was told to give up and has not yet confirmed giving up.
    pub revoking: BTreeSet<Tp>,
    revoking_since: Option<Instant>,
    last_seen: Instant,
    /// A static member that left for a while (epoch -2): its place waits for its instance.
    pub away: bool,
    /// The assignment the last answer carried: an answer repeats it only when it changed.
    sent: Option<BTreeSet<Tp>>,
}

/// One ConsumerGroupHeartbeat, as the coordinator needs it.
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    /// None: unchanged since the last heartbeat.
    pub subscribed_topic_names: Option<Vec<String>>,
    pub subscribed_topic_regex: Option<String>,
    /// The partitions the member owns now; None: unchanged.
    pub owned: Option<Vec<Tp>>,
    pub client_id: String,
    pub client_host: String,
}

/// What a heartbeat is answered with.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub member_id: String,
    pub member_epoch: i32,
    /// The partitions the member is to own now, when that changed.
    pub assignment: Option<BTreeSet<Tp>>,
}

#[derive(Debug, Default)]
pub struct ConsumerGroup {
    pub epoch: i32,
    pub assignment_epoch: i32,
    pub members: BTreeMap<String, Member>,
    /// Member id → its partitions in the target assignment (at `assignment_epoch`).
    pub target: BTreeMap<String, BTreeSet<Tp>>,
    /// The subscribed topics' ids and partition counts the target was computed from.
    sized: BTreeMap<String, (Uuid, i32)>,
    /// Members whose records may have changed since the last [`ConsumerGroup::drain`].
    dirty: BTreeSet<String>,
    /// Whether the group epoch and target changed since the last drain.
    rebalanced: bool,
    /// The group's records as last drained: what the log holds for it.
    written: BTreeMap<Key, Value>,
    /// The last drain's records may not have reached the log: the next drain writes every
    /// record and tombstone again.
    unsure: bool,
}

/// Leaving epochs: a member leaving for good, a static member leaving for a while.
const LEAVE: i32 = -1;
const LEAVE_STATIC: i32 = -2;

impl ConsumerGroup {
    /// Kafka's states of a consumer group, for ListGroups and ConsumerGroupDescribe.
    pub fn state(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.assignment_epoch < self.epoch {
            "Assigning"
        } else if self.members.values().any(|m| {
            m.epoch != self.assignment_epoch
                || !m.revoking.is_empty()
                || self.target.get(&m.id) != Some(&m.assigned)
        }) {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// A member's current epoch, for the offset commits it makes (None: no such member).
    pub fn member_epoch(&self, member_id: &str) -> Option<i32> {
        self.members.get(member_id).map(|m| m.epoch)
    }

    /// Handles one heartbeat at `now`. `new_id` names a member joining without an id.
    /// `may_describe`, with an authorizer, is what the member's principal may DESCRIBE: its
    /// regex resolves to those topics only, as in Kafka.
    pub fn heartbeat(
        &mut self,
        hb: Heartbeat,
        topics: &Topics,
        now: Instant,
        session_timeout: Duration,
        new_id: impl FnOnce() -> String,
        may_describe: Option<&dyn Fn(&str) -> bool>,
    ) -> Result<Answer, ErrorCode> {
        let answer = self.beat(hb, topics, now, session_timeout, new_id, may_describe);
        self.check();
        answer
    }

    /// Invariant 10 (docs/invariants.md), checked in debug builds after every heartbeat and
    /// expiry: no partition is owned (assigned or being revoked) by two members at once, and
    /// no member's epoch or the target's is ahead of the group's.
    fn check(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        assert!(
            self.assignment_epoch <= self.epoch,
            "invariant 10 (docs/invariants.md): target epoch {} ahead of the group epoch {}",
            self.assignment_epoch,
            self.epoch
        );
        let mut owners: BTreeMap<Tp, &str> = BTreeMap::new();
        for m in self.members.values() {
            assert!(
                m.epoch <= self.epoch,
                "invariant 10 (docs/invariants.md): member {} at epoch {} ahead of the group epoch {}",
                m.id,
                m.epoch,
                self.epoch
            );
            for tp in m.assigned.iter().chain(&m.revoking) {
                if let Some(other) = owners.insert(*tp, &m.id) {
                    panic!(
                        "invariant 10 (docs/invariants.md): {tp:?} owned by both {other} and {}",
                        m.id
                    );
                }
            }
        }
    }

    fn beat(
        &mut self,
        hb: Heartbeat,
        topics: &Topics,
        now: Instant,
        session_timeout: Duration,
        new_id: impl FnOnce() -> String,
        may_describe: Option<&dyn Fn(&str) -> bool>,
    ) -> Result<Answer, ErrorCode> {
        self.expire(now, session_timeout, topics);
        match hb.member_epoch {
            LEAVE_STATIC if hb.instance_id.is_some() => {
                let m = (self.members.get_mut(&hb.member_id)).ok_or(ErrorCode::UnknownMemberId)?;
                if m.instance_id != hb.instance_id {
                    return Err(ErrorCode::FencedInstanceId);
                }
                m.away = true;
                m.last_seen = now;
                self.dirty.insert(hb.member_id.clone());
                return Ok(Answer {
                    member_id: hb.member_id,
                    member_epoch: LEAVE_STATIC,
                    assignment: None,
                });
            }
            LEAVE | LEAVE_STATIC => {
                if self.members.remove(&hb.member_id).is_none() {
                    return Err(ErrorCode::UnknownMemberId);
                }
                self.dirty.insert(hb.member_id.clone());
                self.rebalance(topics);
                return Ok(Answer {
                    member_id: hb.member_id,
                    member_epoch: hb.member_epoch,
                    assignment: None,
                });
            }
            _ => {}
        }
        let (id, mut changed) = match hb.member_epoch {
            // Joining is a membership change, whatever its subscription; taking a static
            // member's place over is not.
            0 => match self.take_over(&hb, now, new_id)? {
                Ok(id) => (id, false),
                Err(new_id) => (self.join(&hb, now, new_id), true),
            },
            epoch if epoch > 0 => {
                let m = self
                    .members
                    .get(&hb.member_id)
                    .ok_or(ErrorCode::UnknownMemberId)?;
                if epoch != m.epoch && epoch != m.previous_epoch {
                    return Err(ErrorCode::FencedMemberEpoch);
                }
                if m.away || (hb.instance_id.is_some() && m.instance_id != hb.instance_id) {
                    return Err(ErrorCode::FencedInstanceId);
                }
                (hb.member_id.clone(), false)
            }
            _ => return Err(ErrorCode::InvalidRequest),
        };
        self.dirty.insert(id.clone());
        if let Some(m) = self.members.get_mut(&id) {
            m.last_seen = now;
            if hb.rebalance_timeout_ms > 0 {
                m.rebalance_timeout = Duration::from_millis(hb.rebalance_timeout_ms as u64);
            }
            if let Some(names) = &hb.subscribed_topic_names {
                let names: BTreeSet<String> = names.iter().cloned().collect();
                changed |= names != m.subscribed;
                m.subscribed = names;
            }
            if let Some(re) = &hb.subscribed_topic_regex {
                if re != m.regex.as_ref().map_or("", Regex::as_str) {
                    m.regex = compile(re);
                    changed = true;
                }
            }
            if let Some(may_describe) = may_describe {
                let resolved = (m.regex.as_ref()).map(|re| {
                    (matching(re, topics))
                        .filter(|t| may_describe(t))
                        .cloned()
                        .collect()
                });
                changed |= resolved != m.resolved;
                m.resolved = resolved;
            }
            if let Some(owned) = &hb.owned {
                // What it no longer reports it has given up.
                let owned: BTreeSet<Tp> = owned.iter().copied().collect();
                m.revoking.retain(|tp| owned.contains(tp));
                if m.revoking.is_empty() {
                    m.revoking_since = None;
                }
                // It does not own what it was told: it missed an answer; tell it again.
                if owned != m.assigned.union(&m.revoking).copied().collect() {
                    m.sent = None;
                }
            }
            if hb.member_epoch > 0 && hb.member_epoch != m.epoch {
                // It missed the answer that moved it to its current epoch.
                m.sent = None;
            }
        }
        if changed || self.sized != self.sizes(topics) {
            self.rebalance(topics);
        }
        Ok(self.reconcile(&id, now))
    }

    /// A joining member with the instance id of a static member that left for a while takes
    /// its place: its epoch, its partitions and its share of the target, under the new member
    /// id, with no rebalance. `Ok(Err(new_id))` when there is no such place: the member joins
    /// as a new one; UNRELEASED_INSTANCE_ID when a live member holds the instance id.
    fn take_over<F: FnOnce() -> String>(
        &mut self,
        hb: &Heartbeat,
        now: Instant,
        new_id: F,
    ) -> Result<Result<String, F>, ErrorCode> {
        let Some(instance) = &hb.instance_id else {
            return Ok(Err(new_id));
        };
        let Some(old) = (self.members.values())
            .find(|m| m.instance_id.as_ref() == Some(instance))
            .map(|m| m.id.clone())
        else {
            return Ok(Err(new_id));
        };
        let away = self.members.get(&old).is_some_and(|m| m.away);
        if !away && old != hb.member_id {
            return Err(ErrorCode::UnreleasedInstanceId);
        }
        if !away {
            // The live member itself starting over: it joins as new, and owns nothing now.
            self.members.remove(&old);
            self.dirty.insert(old);
            return Ok(Err(new_id));
        }
        let Some(mut m) = self.members.remove(&old) else {
            return Ok(Err(new_id));
        };
        let id = if hb.member_id.is_empty() {
            new_id()
        } else {
            hb.member_id.clone()
        };
        m.id = id.clone();
        m.away = false;
        m.last_seen = now;
        m.sent = None;
        m.client_id = hb.client_id.clone();
        m.client_host = hb.client_host.clone();
        if hb.rack_id.is_some() {
            m.rack_id = hb.rack_id.clone();
        }
        if let Some(target) = self.target.remove(&old) {
            self.target.insert(id.clone(), target);
        }
        self.dirty.insert(old);
        self.members.insert(id.clone(), m);
        Ok(Ok(id))
    }

    /// A member joins (epoch 0): new, or one that lost its state and starts over (it owns
    /// nothing now).
    fn join(&mut self, hb: &Heartbeat, now: Instant, new_id: impl FnOnce() -> String) -> String {
        let id = if hb.member_id.is_empty() {
            new_id()
        } else {
            hb.member_id.clone()
        };
        let subscribed = hb
            .subscribed_topic_names
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        self.members.insert(
            id.clone(),
            Member {
                id: id.clone(),
                instance_id: hb.instance_id.clone(),
                rack_id: hb.rack_id.clone(),
                client_id: hb.client_id.clone(),
                client_host: hb.client_host.clone(),
                epoch: 0,
                previous_epoch: 0,
                rebalance_timeout: Duration::from_millis(hb.rebalance_timeout_ms.max(0) as u64),
                subscribed,
                regex: hb.subscribed_topic_regex.as_deref().and_then(compile),
                resolved: None,
                assigned: BTreeSet::new(),
                revoking: BTreeSet::new(),
                revoking_since: None,
                last_seen: now,
                away: false,
                sent: None,
            },
        );
        id
    }

    /// Members silent for the session timeout, or slower than their rebalance timeout to
    /// revoke, leave the group; what they owned is free for the others.
    pub fn expire(&mut self, now: Instant, session_timeout: Duration, topics: &Topics) -> bool {
        let before = self.members.len();
        let dirty = &mut self.dirty;
        self.members.retain(|id, m| {
            let silent = now.saturating_duration_since(m.last_seen) > session_timeout;
            let stuck = m
                .revoking_since
                .is_some_and(|t| now.saturating_duration_since(t) > m.rebalance_timeout);
            if silent || stuck {
                dirty.insert(id.clone());
            }
            !(silent || stuck)
        });
        let expired = self.members.len() != before;
        if expired {
            self.rebalance(topics);
        }
        self.check();
        expired
    }

    /// The subscribed topics' ids and partition counts.
    fn sizes(&self, topics: &Topics) -> BTreeMap<String, (Uuid, i32)> {
        (self.members.values())
            .flat_map(|m| subscription(m, topics))
            .filter_map(|t| topics.get(&t).map(|found| (t, *found)))
            .collect()
    }

    /// Bumps the group epoch and computes the target assignment at it.
    fn rebalance(&mut self, topics: &Topics) {
        self.rebalanced = true;
        self.epoch += 1;
        self.sized = self.sizes(topics);
        self.target = assign(&self.members, &self.target, topics);
        self.assignment_epoch = self.epoch;
    }

    /// Moves member `id` one step towards its target: first it gives up what it must, then,
    /// once it has, it takes its epoch and whatever of its target nobody else holds.
    fn reconcile(&mut self, id: &str, now: Instant) -> Answer {
        let target = self.target.get(id).cloned().unwrap_or_default();
        let held_elsewhere: BTreeSet<Tp> = (self.members.values())
            .filter(|m| m.id != id)
            .flat_map(|m| m.assigned.iter().chain(m.revoking.iter()).copied())
            .collect();
        let assignment_epoch = self.assignment_epoch;
        let Some(m) = self.members.get_mut(id) else {
            return Answer {
                member_id: id.to_string(),
                member_epoch: LEAVE,
                assignment: None,
            };
        };
        let revoke: BTreeSet<Tp> = m.assigned.difference(&target).copied().collect();
        if !revoke.is_empty() {
            m.assigned.retain(|tp| !revoke.contains(tp));
            m.revoking.extend(revoke);
            m.revoking_since.get_or_insert(now);
        }
        if m.revoking.is_empty() {
            let free: Vec<Tp> = target
                .iter()
                .filter(|tp| !held_elsewhere.contains(tp))
                .copied()
                .collect();
            m.assigned.extend(free);
            if m.epoch != assignment_epoch {
                m.previous_epoch = m.epoch;
                m.epoch = assignment_epoch;
            }
        }
        let assignment = (m.sent.as_ref() != Some(&m.assigned)).then(|| m.assigned.clone());
        if assignment.is_some() {
            m.sent = Some(m.assigned.clone());
        }
        Answer {
            member_id: m.id.clone(),
            member_epoch: m.epoch,
            assignment,
        }
    }
}

/// The group's records in `__consumer_offsets` ([`super::consumer_store`]): what changes is
/// drained after every heartbeat and expiry and appended before the member is answered; a
/// coordinator taking the group over restores it from them.
impl ConsumerGroup {
    /// The records that changed since the last drain (None: a tombstone), in the order Kafka
    /// writes them: the group epoch and subscribed topics, the target, the members.
    pub fn drain(&mut self) -> Vec<(Key, Option<Value>)> {
        let mut image: Vec<(Key, Option<Value>)> = Vec::new();
        if std::mem::take(&mut self.rebalanced) {
            let topics = (self.sized.iter())
                .map(|(name, (id, count))| (name.clone(), *id, *count))
                .collect();
            image.push((Key::GroupEpoch, Some(Value::GroupEpoch(self.epoch))));
            image.push((Key::Partitions, Some(Value::Partitions(self.epoch, topics))));
            for key in self.written.keys() {
                if let Key::Target(m) = key {
                    if !self.target.contains_key(m) {
                        image.push((key.clone(), None));
                    }
                }
            }
            for (m, tps) in &self.target {
                image.push((Key::Target(m.clone()), Some(Value::Target(tps.clone()))));
            }
            image.push((
                Key::TargetEpoch,
                Some(Value::TargetEpoch(self.assignment_epoch)),
            ));
        }
        for id in std::mem::take(&mut self.dirty) {
            let target = self.target.get(&id);
            let Some(m) = self.members.get(&id) else {
                image.push((Key::Member(id.clone()), None));
                image.push((Key::Target(id.clone()), None));
                image.push((Key::Current(id), None));
                continue;
            };
            image.push((Key::Member(id.clone()), Some(Value::Member(m.record()))));
            image.push((
                Key::Target(id.clone()),
                target.map(|t| Value::Target(t.clone())),
            ));
            image.push((Key::Current(id), Some(Value::Current(m.current(target)))));
        }
        let unsure = std::mem::take(&mut self.unsure);
        let written = &mut self.written;
        image.retain(|(key, value)| match value {
            Some(v) if written.get(key) == Some(v) => false,
            Some(v) => {
                written.insert(key.clone(), v.clone());
                true
            }
            None => written.remove(key).is_some() || unsure,
        });
        image
    }

    /// The last drain's records may not be in the log (the append failed): the next drain
    /// writes the whole group again, tombstones included.
    pub fn forget_written(&mut self) {
        let members = std::mem::take(&mut self.written)
            .into_keys()
            .filter_map(|k| match k {
                Key::Member(m) | Key::Target(m) | Key::Current(m) => Some(m),
                _ => None,
            });
        self.dirty.extend(members);
        self.dirty.extend(self.members.keys().cloned());
        self.rebalanced = true;
        self.unsure = true;
    }

    /// Every record the log holds for the group: what deleting it tombstones.
    pub fn written_keys(&self) -> impl Iterator<Item = &Key> {
        self.written.keys()
    }

    /// The group as its records left it. Every member's session starts `now`; it may keep
    /// heartbeating at its epoch as if the coordinator had not moved.
    pub fn restore(written: BTreeMap<Key, Value>, now: Instant) -> ConsumerGroup {
        let mut g = ConsumerGroup::default();
        let mut records = BTreeMap::new();
        let mut currents = BTreeMap::new();
        for (key, value) in &written {
            match (key, value) {
                (Key::GroupEpoch, Value::GroupEpoch(e)) => g.epoch = *e,
                (Key::TargetEpoch, Value::TargetEpoch(e)) => g.assignment_epoch = *e,
                (Key::Partitions, Value::Partitions(_, topics)) => {
                    g.sized = (topics.iter())
                        .map(|(name, id, count)| (name.clone(), (*id, *count)))
                        .collect();
                }
                (Key::Target(m), Value::Target(tps)) => {
                    g.target.insert(m.clone(), tps.clone());
                }
                (Key::Member(m), Value::Member(r)) => {
                    records.insert(m.clone(), r);
                }
                (Key::Current(m), Value::Current(c)) => {
                    currents.insert(m.clone(), c);
                }
                // The decoder pairs every key with its own kind of value.
                _ => {}
            }
        }
        for (id, r) in records {
            let away = currents.get(&id).is_some_and(|c| c.epoch == LEAVE_STATIC);
            let (epoch, previous_epoch, assigned, revoking) = match currents.get(&id) {
                Some(c) if away => (c.previous_epoch, c.previous_epoch, &c.assigned, &c.revoking),
                Some(c) => (c.epoch, c.previous_epoch, &c.assigned, &c.revoking),
                None => (0, 0, &BTreeSet::new(), &BTreeSet::new()),
            };
            let member = Member {
                id: id.clone(),
                instance_id: r.instance_id.clone(),
                rack_id: r.rack_id.clone(),
                client_id: r.client_id.clone(),
                client_host: r.client_host.clone(),
                epoch,
                previous_epoch,
                rebalance_timeout: Duration::from_millis(r.rebalance_timeout_ms.max(0) as u64),
                subscribed: r.subscribed.clone(),
                regex: r.regex.as_deref().and_then(compile),
                resolved: None,
                assigned: assigned.clone(),
                revoking: revoking.clone(),
                revoking_since: (!revoking.is_empty()).then_some(now),
                last_seen: now,
                away,
                sent: None,
            };
            g.members.insert(id, member);
        }
        g.target.retain(|m, _| g.members.contains_key(m));
        g.written = written;
        g
    }
}

impl Member {
    fn record(&self) -> MemberRecord {
        MemberRecord {
            instance_id: self.instance_id.clone(),
            rack_id: self.rack_id.clone(),
            client_id: self.client_id.clone(),
            client_host: self.client_host.clone(),
            subscribed: self.subscribed.clone(),
            regex: self.regex.as_ref().map(|r| r.as_str().to_string()),
            rebalance_timeout_ms: self.rebalance_timeout.as_millis().min(i32::MAX as u128) as i32,
        }
    }

    /// Its current assignment; a static member away is written at epoch -2 with its own
    /// epoch as the previous one, to be restored with it.
    fn current(&self, target: Option<&BTreeSet<Tp>>) -> CurrentRecord {
        let state = if !self.revoking.is_empty() {
            1 // UNREVOKED_PARTITIONS
        } else if target.is_some_and(|t| t != &self.assigned) {
            2 // UNRELEASED_PARTITIONS
        } else {
            0 // STABLE
        };
        let (epoch, previous_epoch) = if self.away {
            (LEAVE_STATIC, self.epoch)
        } else {
            (self.epoch, self.previous_epoch)
        };
        CurrentRecord {
            epoch,
            previous_epoch,
            state,
            assigned: self.assigned.clone(),
            revoking: self.revoking.clone(),
        }
    }
}

/// The topics a member subscribes to: by name, and those whose name matches its regex (among
/// those it may describe, when an authorizer resolved it).
fn subscription(m: &Member, topics: &Topics) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = m.subscribed.clone();
    if let Some(resolved) = &m.resolved {
        out.extend(resolved.iter().filter(|t| topics.contains_key(*t)).cloned());
    } else if let Some(re) = &m.regex {
        out.extend(matching(re, topics).cloned());
    }
    out
}

/// The topics `re` matches, internal ones aside.
fn matching<'a>(re: &'a Regex, topics: &'a Topics) -> impl Iterator<Item = &'a String> {
    (topics.keys()).filter(move |t| !t.starts_with("__") && re.is_match(t))
}

/// A subscription regex, compiled. An empty one is none, as Kafka reads it (librdkafka sends
/// "" when it subscribes by name); one that does not compile was refused by the handler.
fn compile(re: &str) -> Option<Regex> {
    (!re.is_empty()).then(|| Regex::new(re).ok()).flatten()
}

/// Kafka's uniform assignor, sticky: each partition of a subscribed topic goes to one member
/// subscribed to it; a partition stays with its previous owner while that owner is under its
/// fair share, the rest go to the least loaded subscriber (ties to the smallest member id).
fn assign(
    members: &BTreeMap<String, Member>,
    previous: &BTreeMap<String, BTreeSet<Tp>>,
    topics: &Topics,
) -> BTreeMap<String, BTreeSet<Tp>> {
    let subscriptions: BTreeMap<&str, BTreeSet<String>> = members
        .values()
        .map(|m| (m.id.as_str(), subscription(m, topics)))
        .collect();
    let mut partitions: Vec<(String, Tp)> = Vec::new();
    let wanted: BTreeSet<&String> = subscriptions.values().flatten().collect();
    for name in wanted {
        if let Some((id, count)) = topics.get(name) {
            partitions.extend((0..*count).map(|p| (name.clone(), (*id, p))));
        }
    }
    let mut out: BTreeMap<String, BTreeSet<Tp>> = members
        .keys()
        .map(|id| (id.clone(), BTreeSet::new()))
        .collect();
    if members.is_empty() {
        return out;
    }
    // Every member gets `floor` partitions or one more, and only `extra` of them one more:
    // four partitions over three members are 2, 1, 1, never 2, 2, 0.
    let floor = partitions.len() / members.len();
    let mut extra = partitions.len() % members.len();
    let owner: BTreeMap<Tp, &String> = previous
        .iter()
        .flat_map(|(m, tps)| tps.iter().map(move |tp| (*tp, m)))
        .collect();
    let mut rest = Vec::new();
    // Previous owners keep up to `floor` first, then one more each while extras remain.
    let mut over = Vec::new();
    for (topic, tp) in partitions {
        let owned_by = owner.get(&tp).copied().filter(|m| {
            subscriptions
                .get(m.as_str())
                .is_some_and(|s| s.contains(&topic))
        });
        match owned_by.and_then(|m| out.get_mut(m)) {
            Some(a) if a.len() < floor => {
                a.insert(tp);
            }
            Some(_) => over.push((topic, tp)),
            None => rest.push((topic, tp)),
        }
    }
    for (topic, tp) in over {
        let owned_by = owner.get(&tp).copied();
        match owned_by.and_then(|m| out.get_mut(m)) {
            Some(a) if extra > 0 && a.len() == floor => {
                a.insert(tp);
                extra -= 1;
            }
            _ => rest.push((topic, tp)),
        }
    }
    // The most constrained first (fewest subscribers), so that a topic only some members
    // read is not left to land on members already full of the others.
    let subscribers = |topic: &String| subscriptions.values().filter(|s| s.contains(topic)).count();
    rest.sort_by_key(|(topic, tp)| (subscribers(topic), *tp));
    for (topic, tp) in rest {
        let least = (subscriptions.iter())
            .filter(|(_, s)| s.contains(&topic))
            .map(|(m, _)| *m)
            .min_by_key(|m| (out.get(*m).map_or(0, BTreeSet::len), *m));
        if let Some(m) = least {
            if let Some(a) = out.get_mut(m) {
                a.insert(tp);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SESSION: Duration = Duration::from_secs(45);

    fn topics(specs: &[(&str, i32)]) -> Topics {
        specs
            .iter()
            .map(|(n, c)| (n.to_string(), (Uuid::from_u128(n.len() as u128 + 7), *c)))
            .collect()
    }

    fn hb(
        id: &str,
        epoch: i32,
        subscribe: Option<&[&str]>,
        owned: Option<&BTreeSet<Tp>>,
    ) -> Heartbeat {
        Heartbeat {
            member_id: id.to_string(),
            member_epoch: epoch,
            rebalance_timeout_ms: 30_000,
            subscribed_topic_names: subscribe.map(|s| s.iter().map(|t| t.to_string()).collect()),
            owned: owned.map(|o| o.iter().copied().collect()),
            ..Heartbeat::default()
        }
    }

    fn beat(g: &mut ConsumerGroup, t: &Topics, now: Instant, h: Heartbeat) -> Answer {
        g.heartbeat(h, t, now, SESSION, || unreachable!("ids are given"), None)
            .expect("heartbeat")
    }

    /// No partition is ever owned by two members, whatever the order of heartbeats.
    fn assert_exclusive(g: &ConsumerGroup) {
        let mut seen = BTreeSet::new();
        for m in g.members.values() {
            for tp in m.assigned.iter().chain(&m.revoking) {
                assert!(seen.insert(*tp), "{tp:?} owned twice: {g:#?}");
            }
        }
    }

    #[test]
    fn a_lone_member_gets_every_partition_and_the_group_epoch() {
        let t = topics(&[("orders", 4)]);
        let mut g = ConsumerGroup::default();
        let now = crate::clock::Clock::manual(0).instant();
        let a = beat(&mut g, &t, now, hb("a", 0, Some(&["orders"]), None));
        assert_eq!(a.member_epoch, g.epoch);
        assert_eq!(a.assignment.map(|s| s.len()), Some(4));
        assert_eq!(g.state(), "Stable");
        // Nothing changed: no assignment repeated.
        let again = beat(&mut g, &t, now, hb("a", a.member_epoch, None, None));
        assert_eq!(
            (again.member_epoch, again.assignment),
            (a.member_epoch, None)
        );
    }

    #[test]
    fn a_second_member_gets_partitions_only_after_the_first_revokes_them() {
        let t = topics(&[("orders", 6)]);
        let mut g = ConsumerGroup::default();
        let now = crate::clock::Clock::manual(0).instant();
        let a = beat(&mut g, &t, now, hb("a", 0, Some(&["orders"]), None));
        let a_owns = a.assignment.unwrap();
        let b = beat(&mut g, &t, now, hb("b", 0, Some(&["orders"]), None));
        assert_eq!(b.assignment, Some(BTreeSet::new()), "all six still with a");
        assert_eq!(g.state(), "Reconciling");
        assert_exclusive(&g);
        // a is told to keep three: it revokes the others and says so.
        let a2 = beat(
            &mut g,
            &t,
            now,
            hb("a", a.member_epoch, None, Some(&a_owns)),
        );
        let keep = a2.assignment.unwrap();
        assert_eq!(keep.len(), 3);
        assert_eq!(a2.member_epoch, a.member_epoch, "not until it has revoked");
        assert_exclusive(&g);
        let b2 = beat(
            &mut g,
            &t,
            now,
            hb("b", b.member_epoch, None, Some(&BTreeSet::new())),
        );
        assert_eq!(b2.assignment, None, "nothing released yet");
        let a3 = beat(&mut g, &t, now, hb("a", a2.member_epoch, None, Some(&keep)));
        assert_eq!(a3.member_epoch, g.assignment_epoch);
        let b3 = beat(
            &mut g,
            &t,
            now,
            hb("b", b2.member_epoch, None, Some(&BTreeSet::new())),
        );
        let b_owns = b3.assignment.unwrap();
        assert_eq!(b_owns.len(), 3);
        assert!(b_owns.is_disjoint(&keep));
        assert_exclusive(&g);
        assert_eq!(g.state(), "Stable");
    }

    #[test]
    fn a_leaving_or_silent_member_frees_its_partitions() {
        let t = topics(&[("orders", 4)]);
        let mut g = ConsumerGroup::default();
        let now = crate::clock::Clock::manual(0).instant();
        let a = beat(&mut g, &t, now, hb("a", 0, Some(&["orders"]), None));
        let mut owned = a.assignment.unwrap();
        let b = beat(&mut g, &t, now, hb("b", 0, Some(&["orders"]), None));
        let a = beat(&mut g, &t, now, hb("a", a.member_epoch, None, Some(&owned)));
        owned = a.assignment.unwrap();
        let a = beat(&mut g, &t, now, hb("a", a.member_epoch, None, Some(&owned)));
        let b = beat(
            &mut g,
            &t,
            now,
            hb("b", b.member_epoch, None, Some(&BTreeSet::new())),
        );
        assert_eq!(b.assignment.map(|s| s.len()), Some(2));
        // a leaves: b gets all four at its next heartbeat.
        let left = beat(&mut g, &t, now, hb("a", -1, None, None));
        assert_eq!(left.member_epoch, -1);
        let b = beat(&mut g, &t, now, hb("b", b.member_epoch, None, None));
        assert_eq!(b.assignment.map(|s| s.len()), Some(4));
        // b falls silent past the session timeout: a newcomer gets everything.
        let later = now + SESSION + Duration::from_secs(1);
        let c = beat(&mut g, &t, later, hb("c", 0, Some(&["orders"]), None));
        assert_eq!(c.assignment.map(|s| s.len()), Some(4));
        assert!(!g.members.contains_key("b"));
        assert!(a.member_epoch > 0);
    }

    #[test]
    fn stale_and_unknown_members_are_refused() {
        let t = topics(&[("orders", 2)]);
        let mut g = ConsumerGroup::default();
        let now = crate::clock::Clock::manual(0).instant();
        let a = beat(&mut g, &t, now, hb("a", 0, Some(&["orders"]), None));
        let err = |g: &mut ConsumerGroup, h| g.heartbeat(h, &t, now, SESSION, String::new, None);
        assert_eq!(
            err(&mut g, hb("a", a.member_epoch + 5, None, None)),
            Err(ErrorCode::FencedMemberEpoch)
        );
        assert_eq!(
            err(&mut g, hb("zz", 3, None, None)),
            Err(ErrorCode::UnknownMemberId)
        );
        assert_eq!(
            err(&mut g, hb("zz", -1, None, None)),
            Err(ErrorCode::UnknownMemberId)
        );
        assert_eq!(
            err(&mut g, hb("a", -7, None, None)),
            Err(ErrorCode::InvalidRequest)
        );
    }

    #[test]
    fn a_member_slow_to_revoke_is_removed_after_its_rebalance_timeout() {
        let t = topics(&[("orders", 4)]);
        let mut g = ConsumerGroup::default();
        let now = crate::clock::Clock::manual(0).instant();
        let a = beat(&mut g, &t, now, hb("a", 0, Some(&["orders"]), None));
        let owned = a.assignment.unwrap();
        beat(&mut g, &t, now, hb("b", 0, Some(&["orders"]), None));
        beat(&mut g, &t, now, hb("a", a.member_epoch, None, Some(&owned)));
        // a never confirms; b keeps heartbeating.
        let later = now + Duration::from_secs(31);
        let b_epoch = g.members["b"].epoch;
        let b = beat(
            &mut g,
            &t,
            later,
            hb("b", b_epoch, None, Some(&BTreeSet::new())),
        );
        assert!(!g.members.contains_key("a"), "fenced for not revoking");
        assert_eq!(b.assignment.map(|s| s.len()), Some(4));
    }

    #[test]
    fn the_assignor_is_balanced_sticky_and_respects_subscriptions() {
        let t = topics(&[("a", 6), ("bb", 2)]);
        let member = |id: &str, subs: &[&str]| Member {
            id: id.into(),
            instance_id: None,
            rack_id: None,
            client_id: String::new(),
            client_host: String::new(),
            epoch: 0,
            previous_epoch: 0,
            rebalance_timeout: Duration::ZERO,
            subscribed: subs.iter().map(|s| s.to_string()).collect(),
            regex: None,
            resolved: None,
            assigned: BTreeSet::new(),
            revoking: BTreeSet::new(),
            revoking_since: None,
            last_seen: crate::clock::Clock::manual(0).instant(),
            away: false,
            sent: None,
        };
        let mut members = BTreeMap::new();
        for (id, subs) in [("m1", &["a", "bb"][..]), ("m2", &["a"][..])] {
            members.insert(id.to_string(), member(id, subs));
        }
        let first = assign(&members, &BTreeMap::new(), &t);
        let bb = t["bb"].0;
        assert!(
            first["m2"].iter().all(|(topic, _)| *topic != bb),
            "m2 is not subscribed to bb"
        );
        assert_eq!(first.values().map(BTreeSet::len).sum::<usize>(), 8);
        assert_eq!((first["m1"].len(), first["m2"].len()), (4, 4));
        members.insert("m3".into(), member("m3", &["a", "bb"]));
        let second = assign(&members, &first, &t);
        let moved = ["m1", "m2"]
            .iter()
            .map(|m| first[*m].difference(&second[*m]).count())
            .sum::<usize>();
        assert!(moved <= 3, "sticky: {first:?} -> {second:?}");
        assert!(
            second.values().all(|s| (2..=3).contains(&s.len())),
            "{second:?}"
        );
        // Four partitions, two members with two each, a third joins: 2, 1, 1 (a sticky
        // owner keeping its two would leave the newcomer idle).
        let t = topics(&[("a", 4)]);
        let mut members = BTreeMap::new();
        for id in ["m1", "m2"] {
            members.insert(id.to_string(), member(id, &["a"]));
        }
        let first = assign(&members, &BTreeMap::new(), &t);
        members.insert("m3".into(), member("m3", &["a"]));
        let second = assign(&members, &first, &t);
        let mut sizes: Vec<usize> = second.values().map(BTreeSet::len).collect();
        sizes.sort();
        assert_eq!(sizes, vec![1, 1, 2], "{second:?}");
        assert_eq!(
            ["m1", "m2"]
                .iter()
                .map(|m| first[*m].difference(&second[*m]).count())
                .sum::<usize>(),
            1,
            "one partition moves"
        );
    }

    fn static_hb(id: &str, instance: &str, epoch: i32, subscribe: Option<&[&str]>) -> Heartbeat {
        Heartbeat {
            instance_id: Some(instance.to_string()),
            ..hb(id, epoch, subscribe, None)
        }
    }

    #[test]
    fn a_static_member_that_comes_back_within_its_session_takes_its_place_without_a_rebalance() {
        let t = topics(&[("orders", 4)]);
        let mut g = ConsumerGroup::default();
        let now = crate::clock::Clock::manual(0).instant();
        let a = beat(
            &mut g,
            &t,
            now,
            static_hb("a1", "app-a", 0, Some(&["orders"])),
        );
        let b = beat(&mut g, &t, now, hb("b", 0, Some(&["orders"]), None));
        // Both settle on two partitions each.
        let a = beat(
            &mut g,
            &t,
            now,
            static_hb("a1", "app-a", a.member_epoch, None),
        );
        let b = beat(
            &mut g,
            &t,
            now,
            hb("b", b.member_epoch, None, Some(&BTreeSet::new())),
        );
        let _ = beat(
            &mut g,
            &t,
            now,
            static_hb("a1", "app-a", a.member_epoch, None),
        );
        let _ = beat(&mut g, &t, now, hb("b", b.member_epoch, None, None));
        let owned_by_a = g.members["a1"].assigned.clone();
        assert_eq!(owned_by_a.len(), 2, "{g:#?}");
        let epoch = g.epoch;

        // a's process restarts: it leaves for a while, and its place waits.
        let left = beat(
            &mut g,
            &t,
            now,
            static_hb("a1", "app-a", LEAVE_STATIC, None),
        );
        assert_eq!(left.member_epoch, LEAVE_STATIC);
        assert_eq!(g.epoch, epoch, "no rebalance");
        assert_eq!(g.members["a1"].assigned, owned_by_a);
        // Another process cannot take an instance id a live member holds.
        assert_eq!(
            g.heartbeat(
                static_hb("b2", "app-b", 0, Some(&["orders"])),
                &t,
                now,
                SESSION,
                || unreachable!(),
                None
            )
            .map(|_| ()),
            Ok(())
        );
        let epoch = g.epoch;
        assert_eq!(
            g.heartbeat(
                static_hb("x", "app-b", 0, Some(&["orders"])),
                &t,
                now,
                SESSION,
                || unreachable!(),
                None
            ),
            Err(ErrorCode::UnreleasedInstanceId)
        );
        // The new process of app-a takes a's place: its epoch and partitions, at once.
        let back = beat(
            &mut g,
            &t,
            now,
            static_hb("a2", "app-a", 0, Some(&["orders"])),
        );
        assert_eq!(g.epoch, epoch, "no rebalance");
        assert_eq!(back.member_id, "a2");
        assert_eq!(back.assignment, Some(owned_by_a));
        assert!(!g.members.contains_key("a1"));
        // The old process is fenced.
        assert_eq!(
            g.heartbeat(
                static_hb("a1", "app-a", a.member_epoch, None),
                &t,
                now,
                SESSION,
                || unreachable!(),
                None
            ),
            Err(ErrorCode::UnknownMemberId)
        );
        assert_exclusive(&g);
    }

    #[test]
    fn a_static_member_away_past_its_session_is_replaced_by_a_rebalance() {
        let t = topics(&[("orders", 4)]);
        let mut g = ConsumerGroup::default();
        let now = crate::clock::Clock::manual(0).instant();
        let a = beat(
            &mut g,
            &t,
            now,
            static_hb("a1", "app-a", 0, Some(&["orders"])),
        );
        beat(
            &mut g,
            &t,
            now,
            static_hb("a1", "app-a", LEAVE_STATIC, None),
        );
        let epoch = g.epoch;
        let later = now + SESSION + Duration::from_secs(1);
        assert!(g.expire(later, SESSION, &t));
        assert!(g.members.is_empty());
        assert!(g.epoch > epoch);
        // Coming back now is joining anew.
        let back = beat(
            &mut g,
            &t,
            later,
            static_hb("a2", "app-a", 0, Some(&["orders"])),
        );
        assert!(back.member_epoch > a.member_epoch);
    }

    #[test]
    fn an_empty_regex_is_no_regex() {
        let t = topics(&[("orders", 2), ("users", 2)]);
        let mut g = ConsumerGroup::default();
        let join = Heartbeat {
            subscribed_topic_regex: Some(String::new()),
            ..hb("a", 0, Some(&["orders"]), None)
        };
        let a = beat(&mut g, &t, crate::clock::Clock::manual(0).instant(), join);
        let orders = t["orders"].0;
        let got = a.assignment.unwrap();
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(|(id, _)| *id == orders), "{got:?}");
        assert!(g.members["a"].regex.is_none());
    }

    #[test]
    fn a_regex_resolves_to_the_topics_the_member_may_describe() {
        let t = topics(&[("orders-eu", 2), ("orders-secret", 2), ("users", 2)]);
        let mut g = ConsumerGroup::default();
        let now = crate::clock::Clock::manual(0).instant();
        let join = Heartbeat {
            subscribed_topic_regex: Some("orders-.*".to_string()),
            ..hb("a", 0, None, Some(&BTreeSet::new()))
        };
        let not_secret = |topic: &str| topic != "orders-secret";
        let a = g
            .heartbeat(join, &t, now, SESSION, || unreachable!(), Some(&not_secret))
            .unwrap();
        let eu = t["orders-eu"].0;
        assert!(
            a.assignment
                .as_ref()
                .unwrap()
                .iter()
                .all(|(id, _)| *id == eu),
            "{a:?}"
        );
        assert_eq!(a.assignment.map(|s| s.len()), Some(2));
        // Granted DESCRIBE on the secret topic: its next heartbeat brings it in.
        let everything = |_: &str| true;
        let epoch = g.epoch;
        let again = g
            .heartbeat(
                hb("a", a.member_epoch, None, None),
                &t,
                now,
                SESSION,
                || unreachable!(),
                Some(&everything),
            )
            .unwrap();
        assert!(g.epoch > epoch, "a rebalance");
        assert_eq!(again.assignment.map(|s| s.len()), Some(4));
    }

    /// The log after `records` were appended: latest per key, tombstones delete.
    fn replay(log: &mut BTreeMap<Key, Value>, records: Vec<(Key, Option<Value>)>) {
        for (k, v) in records {
            match v {
                Some(v) => log.insert(k, v),
                None => log.remove(&k),
            };
        }
    }

    fn same_state(a: &ConsumerGroup, b: &ConsumerGroup) {
        assert_eq!(
            (a.epoch, a.assignment_epoch, &a.target, &a.sized, a.state()),
            (b.epoch, b.assignment_epoch, &b.target, &b.sized, b.state())
        );
        let view = |g: &ConsumerGroup| -> Vec<_> {
            (g.members.values())
                .map(|m| {
                    let m = m.clone();
                    // An away member's record keeps its epoch only (its previous one is
                    // of no use to the instance that takes its place).
                    let previous = (!m.away).then_some(m.previous_epoch);
                    (
                        m.id,
                        m.instance_id,
                        m.epoch,
                        previous,
                        m.assigned,
                        m.revoking,
                        m.away,
                    )
                })
                .collect()
        };
        assert_eq!(view(a), view(b));
    }

    #[test]
    fn the_drained_records_restore_a_group_mid_rebalance_and_it_carries_on() {
        let t = topics(&[("orders", 6)]);
        let mut g = ConsumerGroup::default();
        let mut log = BTreeMap::new();
        let now = crate::clock::Clock::manual(0).instant();
        let a = beat(&mut g, &t, now, hb("a", 0, Some(&["orders"]), None));
        let first = g.drain();
        let keys: Vec<&Key> = first.iter().map(|(k, _)| k).collect();
        assert!(keys.contains(&&Key::GroupEpoch) && keys.contains(&&Key::Current("a".into())));
        replay(&mut log, first);
        // A heartbeat that changes nothing writes nothing.
        beat(&mut g, &t, now, hb("a", a.member_epoch, None, None));
        assert_eq!(g.drain(), vec![]);
        // b joins; a is asked to revoke half: the group is mid-rebalance.
        let b = beat(
            &mut g,
            &t,
            now,
            static_hb("b", "app-b", 0, Some(&["orders"])),
        );
        let a_owns = a.assignment.clone().unwrap();
        let a2 = beat(
            &mut g,
            &t,
            now,
            hb("a", a.member_epoch, None, Some(&a_owns)),
        );
        replay(&mut log, g.drain());
        assert_eq!(g.state(), "Reconciling");

        let mut r = ConsumerGroup::restore(log.clone(), now);
        same_state(&g, &r);
        assert_eq!(
            r.drain(),
            vec![],
            "the restored group is what the log holds"
        );
        // Both carry on the same way: a confirms its revocation at its epoch, b gets its share.
        let keep = a2.assignment.unwrap();
        for group in [&mut g, &mut r] {
            let a3 = beat(group, &t, now, hb("a", a2.member_epoch, None, Some(&keep)));
            assert_eq!(a3.member_epoch, group.assignment_epoch);
            let b2 = beat(
                group,
                &t,
                now,
                hb("b", b.member_epoch, None, Some(&BTreeSet::new())),
            );
            assert_eq!(b2.assignment.map(|s| s.len()), Some(3));
        }
        same_state(&g, &r);
        replay(&mut log, r.drain());

        // A static member away is restored away, and its instance takes its place back.
        beat(&mut r, &t, now, static_hb("b", "app-b", LEAVE_STATIC, None));
        replay(&mut log, r.drain());
        let mut r2 = ConsumerGroup::restore(log.clone(), now);
        same_state(&r, &r2);
        assert!(r2.members["b"].away);
        let epoch = r2.epoch;
        let back = beat(
            &mut r2,
            &t,
            now,
            static_hb("b2", "app-b", 0, Some(&["orders"])),
        );
        assert_eq!(
            (r2.epoch, back.assignment.map(|s| s.len())),
            (epoch, Some(3))
        );

        // Leaving tombstones the member's records.
        let a_epoch = r2.members["a"].epoch;
        beat(&mut r2, &t, now, hb("a", a_epoch, None, None));
        r2.drain();
        beat(&mut r2, &t, now, hb("a", LEAVE, None, None));
        let gone = r2.drain();
        for k in [
            Key::Member("a".into()),
            Key::Target("a".into()),
            Key::Current("a".into()),
        ] {
            assert!(
                gone.contains(&(k.clone(), None)),
                "{k:?} tombstoned: {gone:?}"
            );
        }
    }

    #[test]
    fn after_a_failed_append_the_next_drain_writes_the_whole_group_again() {
        let t = topics(&[("orders", 2)]);
        let mut g = ConsumerGroup::default();
        let now = crate::clock::Clock::manual(0).instant();
        beat(&mut g, &t, now, hb("a", 0, Some(&["orders"]), None));
        let b = beat(&mut g, &t, now, hb("b", 0, Some(&["orders"]), None));
        let everything = g.drain();
        beat(&mut g, &t, now, hb("b", b.member_epoch, None, None));
        beat(&mut g, &t, now, hb("b", LEAVE, None, None));
        g.forget_written();
        let again = g.drain();
        assert!(
            again.contains(&(Key::Current("b".into()), None)),
            "{again:?}"
        );
        assert!(again
            .iter()
            .any(|(k, v)| *k == Key::Current("a".into()) && v.is_some()));
        assert!(again.len() >= everything.len() - 1);
        assert_eq!(g.drain(), vec![]);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "invariant 10")]
    fn a_partition_owned_by_two_members_is_caught() {
        let t = topics(&[("orders", 2)]);
        let mut g = ConsumerGroup::default();
        let now = crate::clock::Clock::manual(0).instant();
        let a = beat(&mut g, &t, now, hb("a", 0, Some(&["orders"]), None));
        beat(&mut g, &t, now, hb("b", 0, Some(&["orders"]), None));
        let stolen = *a.assignment.unwrap().iter().next().unwrap();
        g.members.get_mut("b").unwrap().assigned.insert(stolen);
        g.expire(now, SESSION, &t);
    }
}
