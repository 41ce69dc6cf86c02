//! One consumer group under Kafka's classic protocol, as a pure state machine: requests and clock
//! ticks in, responses (immediate or delivered later through a channel) out. No I/O here.
//!
//! Invariants:
//! - states move Empty → PreparingRebalance → CompletingRebalance → Stable, and back to
//!   PreparingRebalance on any membership change; Dead only after deletion;
//! - the generation increases by one each time a rebalance completes;
//! - a JoinGroup response is sent to every member that joined in the round when it completes;
//!   members that did not rejoin by the rebalance deadline are removed;
//! - SyncGroup responses carry the leader's assignment of the current generation only;
//! - a member that neither heartbeats nor waits on a request for its session timeout is removed.
//!
//! Persistence (Kafka's GroupMetadata records, written by the coordinator): a generation is
//! Stable only once the `store` callback given to the leader's SyncGroup has accepted the record
//! carrying its assignment; a group that becomes empty, or a static member replaced in a stable
//! group, asks for a record through [`Group::take_store`]. [`Group::from_metadata`] rebuilds a
//! group from its latest record: Stable with those members (each with a fresh session) or Empty.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;

use super::store::{GroupMetadata, MemberMetadata};
use crate::error::ErrorCode;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

#[derive(Debug, Clone)]
pub struct JoinResult {
    pub error: ErrorCode,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// (member id, instance id, metadata): only for the leader.
    pub members: Vec<(String, Option<String>, Bytes)>,
    /// A static leader rejoined a stable group unchanged: the assignment in force stays, so
    /// it must not compute one (KIP-814; clients before JoinGroup v9 get no members instead).
    pub skip_assignment: bool,
}

impl JoinResult {
    pub(super) fn error(error: ErrorCode, member_id: &str) -> JoinResult {
        JoinResult {
            error,
            generation: -1,
            protocol_type: None,
            protocol: None,
            leader: String::new(),
            member_id: member_id.to_string(),
            members: vec![],
            skip_assignment: false,
        }
    }
}

#[derive(Debug, Clone)]
pub struct SyncResult {
    pub error: ErrorCode,
    pub assignment: Bytes,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
}

impl SyncResult {
    fn error(error: ErrorCode) -> SyncResult {
        SyncResult {
            error,
            assignment: Bytes::new(),
            protocol_type: None,
            protocol: None,
        }
    }
}

/// A response now, or one that arrives when the round completes.
pub enum Reply<T> {
    Now(T),
    Later(oneshot::Receiver<T>),
}

pub struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    last_seen: Instant,
    join_waiter: Option<oneshot::Sender<JoinResult>>,
    sync_waiter: Option<oneshot::Sender<SyncResult>>,
}

impl Member {
    /// The metadata this member sent for `protocol` (empty if it did not offer it).
    pub fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .map(|(_, b)| b.clone())
            .unwrap_or_default()
    }
}

/// What a JoinGroup asks for.
pub struct JoinRequest {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// v4+: a new member first gets an id and must rejoin with it (KIP-394).
    pub require_known_member_id: bool,
}

pub struct Group {
    pub id: String,
    pub state: GroupState,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// Ids handed out with MEMBER_ID_REQUIRED, not yet joined.
    pending: HashSet<String>,
    deadline: Option<Instant>,
    /// `group.initial.rebalance.delay.ms`: the first round of an empty group waits this long
    /// for more members, and again after each newcomer, up to the rebalance timeout; so a fleet
    /// of consumers starting together forms one generation instead of one per arrival.
    pub initial_rebalance_delay: Duration,
    /// While the initial delay holds the round open: (until, no later than).
    hold: Option<(Instant, Instant)>,
    /// The group changed in a way that must be recorded (it became empty, or a static member
    /// was replaced in a stable group); see [`Group::take_store`].
    store_pending: bool,
}

impl Group {
    pub fn new(id: &str) -> Group {
        Group {
            id: id.to_string(),
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: BTreeMap::new(),
            pending: HashSet::new(),
            deadline: None,
            initial_rebalance_delay: Duration::ZERO,
            hold: None,
            store_pending: false,
        }
    }

    /// The group as its latest GroupMetadata record describes it: Stable with the recorded
    /// generation, leader, protocol, members and assignments, every member's session starting
    /// `now`; or Empty (keeping the generation) when the record has no members.
    pub fn from_metadata(id: &str, record: GroupMetadata, now: Instant) -> Group {
        let mut g = Group::new(id);
        g.generation = record.generation;
        g.protocol_type = Some(record.protocol_type);
        if record.members.is_empty() {
            return g;
        }
        let protocol = record.protocol.unwrap_or_default();
        for m in record.members {
            let ms = |v: i32| Duration::from_millis(v.max(0) as u64);
            g.members.insert(
                m.member_id.clone(),
                Member {
                    id: m.member_id,
                    instance_id: m.group_instance_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    session_timeout: ms(m.session_timeout),
                    rebalance_timeout: ms(m.rebalance_timeout),
                    protocols: vec![(protocol.clone(), m.subscription)],
                    assignment: m.assignment,
                    last_seen: now,
                    join_waiter: None,
                    sync_waiter: None,
                },
            );
        }
        g.leader = record.leader.filter(|l| g.members.contains_key(l));
        g.protocol = Some(protocol);
        g.state = GroupState::Stable;
        g
    }

    /// The GroupMetadata record of the group as it is now, stamped `state_timestamp_ms`.
    pub fn metadata(&self, state_timestamp_ms: i64) -> GroupMetadata {
        self.metadata_with(state_timestamp_ms, |m| m.assignment.clone())
    }

    fn metadata_with(
        &self,
        state_timestamp_ms: i64,
        assignment: impl Fn(&Member) -> Bytes,
    ) -> GroupMetadata {
        let protocol = self.protocol.clone();
        GroupMetadata {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation,
            protocol: protocol.clone(),
            leader: self.leader.clone(),
            current_state_timestamp: state_timestamp_ms,
            members: self
                .members
                .values()
                .map(|m| MemberMetadata {
                    member_id: m.id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout: duration_ms(m.rebalance_timeout),
                    session_timeout: duration_ms(m.session_timeout),
                    subscription: m
                        .protocols
                        .iter()
                        .find(|(n, _)| Some(n) == protocol.as_ref())
                        .map(|(_, b)| b.clone())
                        .unwrap_or_default(),
                    assignment: assignment(m),
                })
                .collect(),
        }
    }

    /// True once after a change that must be recorded with [`Group::metadata`].
    pub fn take_store(&mut self) -> bool {
        std::mem::take(&mut self.store_pending)
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn join(&mut self, req: JoinRequest, now: Instant) -> Reply<JoinResult> {
        if req.protocols.is_empty() || req.protocol_type.is_empty() {
            return Reply::Now(JoinResult::error(
                ErrorCode::InconsistentGroupProtocol,
                &req.member_id,
            ));
        }
        if !self.members.is_empty() {
            let same_type = self.protocol_type.as_deref() == Some(req.protocol_type.as_str());
            let shared = req.protocols.iter().any(|(name, _)| {
                self.members
                    .values()
                    .filter(|m| m.id != req.member_id)
                    .all(|m| m.protocols.iter().any(|(n, _)| n == name))
            });
            if !same_type || !shared {
                return Reply::Now(JoinResult::error(
                    ErrorCode::InconsistentGroupProtocol,
                    &req.member_id,
                ));
            }
        }
        let member_id = if req.member_id.is_empty() {
            let id = format!("{}-{}", req.client_id, uuid::Uuid::new_v4());
            if let Some(instance) = &req.instance_id {
                // A static member restarting: its old id is fenced and the new one takes its
                // place, assignment included. Unchanged metadata in a stable group means no
                // rebalance: it gets the current generation back (KIP-345).
                if let Some(old) = self.instance_member(instance) {
                    if let Some(mut m) = self.members.remove(&old) {
                        if let Some(w) = m.join_waiter.take() {
                            let _ = w.send(JoinResult::error(ErrorCode::FencedInstanceId, &old));
                        }
                        if let Some(w) = m.sync_waiter.take() {
                            let _ = w.send(SyncResult::error(ErrorCode::FencedInstanceId));
                        }
                        let unchanged = m.protocols == req.protocols;
                        m.id = id.clone();
                        m.last_seen = now;
                        m.session_timeout = req.session_timeout;
                        m.rebalance_timeout = req.rebalance_timeout;
                        self.members.insert(id.clone(), m);
                        if self.leader.as_deref() == Some(old.as_str()) {
                            self.leader = Some(id.clone());
                        }
                        if unchanged && self.state == GroupState::Stable {
                            self.store_pending = true;
                            let mut result = self.join_result_for(&id);
                            result.skip_assignment = result.leader == id;
                            return Reply::Now(result);
                        }
                        if let Some(m) = self.members.get_mut(&id) {
                            m.protocols = req.protocols.clone();
                        }
                    }
                }
            } else if req.require_known_member_id {
                self.pending.insert(id.clone());
                return Reply::Now(JoinResult::error(ErrorCode::MemberIdRequired, &id));
            }
            id
        } else if self.members.contains_key(&req.member_id) || self.pending.remove(&req.member_id) {
            req.member_id.clone()
        } else {
            return Reply::Now(JoinResult::error(
                ErrorCode::UnknownMemberId,
                &req.member_id,
            ));
        };
        let was_empty = self.members.is_empty();
        if was_empty {
            self.protocol_type = Some(req.protocol_type.clone());
        }
        let (tx, rx) = oneshot::channel();
        let changed = match self.members.get_mut(&member_id) {
            Some(m) => {
                let changed = m.protocols != req.protocols;
                m.protocols = req.protocols;
                m.session_timeout = req.session_timeout;
                m.rebalance_timeout = req.rebalance_timeout;
                m.last_seen = now;
                m.join_waiter = Some(tx);
                changed || self.leader.as_deref() == Some(member_id.as_str())
            }
            None => {
                self.members.insert(
                    member_id.clone(),
                    Member {
                        id: member_id.clone(),
                        instance_id: req.instance_id,
                        client_id: req.client_id,
                        client_host: req.client_host,
                        session_timeout: req.session_timeout,
                        rebalance_timeout: req.rebalance_timeout,
                        protocols: req.protocols,
                        assignment: Bytes::new(),
                        last_seen: now,
                        join_waiter: Some(tx),
                        sync_waiter: None,
                    },
                );
                true
            }
        };
        match self.state {
            GroupState::PreparingRebalance => {
                // A newcomer during the initial delay keeps the round open a while longer.
                if let Some((until, limit)) = &mut self.hold {
                    if changed {
                        *until = (now + self.initial_rebalance_delay).min(*limit).max(*until);
                    }
                }
            }
            GroupState::Empty if was_empty && !self.initial_rebalance_delay.is_zero() => {
                self.prepare_rebalance(now);
                let limit = self.deadline.unwrap_or(now);
                self.hold = Some(((now + self.initial_rebalance_delay).min(limit), limit));
            }
            // A follower rejoining a stable group with unchanged metadata gets the current
            // generation back without disturbing the others.
            GroupState::Stable | GroupState::CompletingRebalance if !changed => {
                let result = self.join_result_for(&member_id);
                if let Some(m) = self.members.get_mut(&member_id) {
                    m.join_waiter = None;
                }
                return Reply::Now(result);
            }
            _ => self.prepare_rebalance(now),
        }
        self.maybe_complete_join(now, false);
        Reply::Later(rx)
    }

    fn prepare_rebalance(&mut self, now: Instant) {
        for m in self.members.values_mut() {
            if let Some(w) = m.sync_waiter.take() {
                let _ = w.send(SyncResult::error(ErrorCode::RebalanceInProgress));
            }
        }
        let timeout = self
            .members
            .values()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or(Duration::from_secs(5));
        self.state = GroupState::PreparingRebalance;
        self.deadline = Some(now + timeout);
    }

    /// Completes the join round once every member has rejoined, or at the deadline (`force`),
    /// dropping those that did not.
    fn maybe_complete_join(&mut self, now: Instant, force: bool) {
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        if !force && self.hold.is_some_and(|(until, _)| now < until) {
            return;
        }
        self.hold = None;
        let all_joined = self.members.values().all(|m| m.join_waiter.is_some());
        if !all_joined && !force {
            return;
        }
        let absent: Vec<String> = self
            .members
            .values()
            .filter(|m| m.join_waiter.is_none())
            .map(|m| m.id.clone())
            .collect();
        for id in absent {
            self.members.remove(&id);
        }
        self.generation += 1;
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.protocol = None;
            self.leader = None;
            self.deadline = None;
            self.store_pending = true;
            return;
        }
        self.protocol = self.select_protocol();
        if !self
            .leader
            .as_ref()
            .is_some_and(|l| self.members.contains_key(l))
        {
            self.leader = self.members.keys().next().cloned();
        }
        self.state = GroupState::CompletingRebalance;
        self.deadline = Some(
            now + self
                .members
                .values()
                .map(|m| m.rebalance_timeout)
                .max()
                .unwrap_or_default(),
        );
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let result = self.join_result_for(&id);
            if let Some(w) = self.members.get_mut(&id).and_then(|m| m.join_waiter.take()) {
                let _ = w.send(result);
            }
        }
    }

    fn join_result_for(&self, member_id: &str) -> JoinResult {
        let leader = self.leader.clone().unwrap_or_default();
        let protocol = self.protocol.clone().unwrap_or_default();
        let members = if leader == member_id {
            self.members
                .values()
                .map(|m| {
                    (
                        m.id.clone(),
                        m.instance_id.clone(),
                        m.metadata_for(&protocol),
                    )
                })
                .collect()
        } else {
            vec![]
        };
        JoinResult {
            error: ErrorCode::None,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol: self.protocol.clone(),
            leader,
            member_id: member_id.to_string(),
            members,
            skip_assignment: false,
        }
    }

    /// Kafka's choice: among protocols every member supports, the one most members list first
    /// (ties broken by the members' preference order).
    fn select_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        let candidates: Vec<&String> = first
            .protocols
            .iter()
            .map(|(n, _)| n)
            .filter(|n| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(x, _)| x == *n))
            })
            .collect();
        let mut votes: BTreeMap<&String, usize> = BTreeMap::new();
        for m in self.members.values() {
            if let Some((n, _)) = m.protocols.iter().find(|(n, _)| candidates.contains(&n)) {
                *votes.entry(n).or_default() += 1;
            }
        }
        candidates
            .iter()
            .max_by_key(|c| {
                (
                    votes.get(*c).copied().unwrap_or(0),
                    std::cmp::Reverse(candidates.iter().position(|x| x == *c)),
                )
            })
            .map(|c| (*c).clone())
    }

    /// SyncGroup. The leader's completes the generation: `store` gets the group's record with
    /// the new assignment (stamped `now_ms`), and only once it has accepted it do the members
    /// get their assignments and the group turn Stable. If it fails, every waiting member gets
    /// its error and the group rebalances (as Kafka does when the append fails).
    pub fn sync(
        &mut self,
        member_id: &str,
        generation: i32,
        assignments: Vec<(String, Bytes)>,
        now: Instant,
        now_ms: i64,
        store: impl FnOnce(GroupMetadata) -> Result<(), ErrorCode>,
    ) -> Reply<SyncResult> {
        let Some(member) = self.members.get_mut(member_id) else {
            return Reply::Now(SyncResult::error(ErrorCode::UnknownMemberId));
        };
        member.last_seen = now;
        if generation != self.generation {
            return Reply::Now(SyncResult::error(ErrorCode::IllegalGeneration));
        }
        match self.state {
            GroupState::Stable => {
                let assignment = member.assignment.clone();
                Reply::Now(SyncResult {
                    error: ErrorCode::None,
                    assignment,
                    protocol_type: self.protocol_type.clone(),
                    protocol: self.protocol.clone(),
                })
            }
            GroupState::CompletingRebalance => {
                let (tx, rx) = oneshot::channel();
                member.sync_waiter = Some(tx);
                if self.leader.as_deref() == Some(member_id) {
                    let mut given: BTreeMap<String, Bytes> = assignments.into_iter().collect();
                    let assignment: BTreeMap<String, Bytes> = self
                        .members
                        .keys()
                        .map(|id| (id.clone(), given.remove(id).unwrap_or_default()))
                        .collect();
                    let record = self.metadata_with(now_ms, |m| {
                        assignment.get(&m.id).cloned().unwrap_or_default()
                    });
                    if let Err(code) = store(record) {
                        for m in self.members.values_mut() {
                            if let Some(w) = m.sync_waiter.take() {
                                let _ = w.send(SyncResult::error(code));
                            }
                        }
                        self.prepare_rebalance(now);
                        return Reply::Later(rx);
                    }
                    for (id, a) in assignment {
                        if let Some(m) = self.members.get_mut(&id) {
                            m.assignment = a;
                        }
                    }
                    self.state = GroupState::Stable;
                    self.deadline = None;
                    for m in self.members.values_mut() {
                        if let Some(w) = m.sync_waiter.take() {
                            let _ = w.send(SyncResult {
                                error: ErrorCode::None,
                                assignment: m.assignment.clone(),
                                protocol_type: self.protocol_type.clone(),
                                protocol: self.protocol.clone(),
                            });
                        }
                    }
                }
                Reply::Later(rx)
            }
            _ => Reply::Now(SyncResult::error(ErrorCode::RebalanceInProgress)),
        }
    }

    pub fn heartbeat(&mut self, member_id: &str, generation: i32, now: Instant) -> ErrorCode {
        let state = self.state;
        let current = self.generation;
        let Some(member) = self.members.get_mut(member_id) else {
            return ErrorCode::UnknownMemberId;
        };
        if generation != current {
            return ErrorCode::IllegalGeneration;
        }
        member.last_seen = now;
        match state {
            GroupState::PreparingRebalance => ErrorCode::RebalanceInProgress,
            _ => ErrorCode::None,
        }
    }

    /// Removes a member (LeaveGroup or expiry) and rebalances the rest.
    pub fn leave(&mut self, member_id: &str, now: Instant) -> ErrorCode {
        if !self.members.contains_key(member_id) {
            return ErrorCode::UnknownMemberId;
        }
        self.remove_member(member_id);
        if self.members.is_empty() {
            if self.state != GroupState::Dead {
                self.generation += 1;
                self.state = GroupState::Empty;
                self.protocol = None;
                self.leader = None;
                self.deadline = None;
                self.store_pending = true;
            }
        } else if self.state != GroupState::PreparingRebalance {
            self.prepare_rebalance(now);
        }
        self.maybe_complete_join(now, false);
        self.check();
        ErrorCode::None
    }

    /// Invariant 10 (docs/invariants.md), checked in debug builds after every leave, tick and
    /// completed join round: an empty group has no members, and a group past its join round
    /// (completing or stable) is led by one of its members.
    fn check(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        match self.state {
            GroupState::Empty => assert!(
                self.members.is_empty(),
                "invariant 10 (docs/invariants.md): group {} is Empty with {} members",
                self.id,
                self.members.len()
            ),
            GroupState::CompletingRebalance | GroupState::Stable => assert!(
                self.leader.as_ref().is_none_or(|l| self.members.contains_key(l)),
                "invariant 10 (docs/invariants.md): group {} at generation {} is led by {:?}, not a member",
                self.id,
                self.generation,
                self.leader
            ),
            GroupState::PreparingRebalance | GroupState::Dead => {}
        }
    }

    fn remove_member(&mut self, member_id: &str) {
        if let Some(mut m) = self.members.remove(member_id) {
            if let Some(w) = m.join_waiter.take() {
                let _ = w.send(JoinResult::error(ErrorCode::UnknownMemberId, member_id));
            }
            if let Some(w) = m.sync_waiter.take() {
                let _ = w.send(SyncResult::error(ErrorCode::UnknownMemberId));
            }
        }
        if self.leader.as_deref() == Some(member_id) {
            self.leader = None;
        }
    }

    /// Topics the members of a "consumer" group subscribe to, from their protocol metadata
    /// (ConsumerProtocolSubscription). `None` when the group is not a consumer group or a
    /// member's metadata cannot be read: then nothing can be ruled out.
    pub fn subscribed_topics(&self) -> Option<HashSet<String>> {
        use kafka_protocol::messages::ConsumerProtocolSubscription;
        use kafka_protocol::protocol::Decodable;
        if self.protocol_type.as_deref() != Some("consumer") {
            return None;
        }
        let mut topics = HashSet::new();
        for m in self.members.values() {
            let (_, meta) = m.protocols.first()?;
            let mut buf = meta.clone();
            if buf.len() < 2 {
                return None;
            }
            let version = i16::from_be_bytes([buf[0], buf[1]]);
            bytes::Buf::advance(&mut buf, 2);
            let sub = ConsumerProtocolSubscription::decode(&mut buf, version.clamp(0, 3)).ok()?;
            topics.extend(sub.topics.iter().map(|t| t.as_str().to_string()));
        }
        Some(topics)
    }

    pub fn instance_member(&self, instance_id: &str) -> Option<String> {
        self.members
            .values()
            .find(|m| m.instance_id.as_deref() == Some(instance_id))
            .map(|m| m.id.clone())
    }

    /// Expires silent members and completes rounds whose deadline passed. Returns the ids of
    /// members removed for their session timeout.
    pub fn tick(&mut self, now: Instant) -> Vec<String> {
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                m.join_waiter.is_none()
                    && m.sync_waiter.is_none()
                    && now.duration_since(m.last_seen) > m.session_timeout
            })
            .map(|m| m.id.clone())
            .collect();
        for id in &expired {
            self.leave(id, now);
        }
        if self.hold.is_some_and(|(until, _)| now >= until) {
            self.maybe_complete_join(now, false);
        }
        if self.deadline.is_some_and(|d| now >= d) {
            match self.state {
                GroupState::PreparingRebalance => self.maybe_complete_join(now, true),
                // The leader never sent its assignment: start over.
                GroupState::CompletingRebalance => self.prepare_rebalance(now),
                _ => self.deadline = None,
            }
        }
        self.check();
        expired
    }
}

fn duration_ms(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(member: &str, client: &str) -> JoinRequest {
        JoinRequest {
            member_id: member.to_string(),
            instance_id: None,
            client_id: client.to_string(),
            client_host: "/127.0.0.1".into(),
            session_timeout: Duration::from_secs(10),
            rebalance_timeout: Duration::from_secs(30),
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::from_static(b"m"))],
            require_known_member_id: true,
        }
    }

    /// SyncGroup with a store that always succeeds.
    fn sync(
        g: &mut Group,
        member: &str,
        generation: i32,
        assignments: Vec<(String, Bytes)>,
        t: Instant,
    ) -> Reply<SyncResult> {
        g.sync(member, generation, assignments, t, 0, |_| Ok(()))
    }

    fn now_join(g: &mut Group, r: JoinRequest, t: Instant) -> JoinResult {
        match g.join(r, t) {
            Reply::Now(r) => r,
            Reply::Later(mut rx) => rx.try_recv().expect("round should have completed"),
        }
    }

    #[test]
    fn the_initial_delay_gathers_members_starting_together_into_one_generation() {
        let t = crate::clock::Clock::manual(0).instant();
        let secs = Duration::from_secs;
        let mut g = Group::new("g");
        g.initial_rebalance_delay = secs(3);
        let a = now_join(&mut g, req("", "a"), t).member_id;
        let Reply::Later(mut rx_a) = g.join(req(&a, "a"), t) else {
            panic!("the first member waits for the initial delay")
        };
        let b = now_join(&mut g, req("", "b"), t + secs(1)).member_id;
        let Reply::Later(mut rx_b) = g.join(req(&b, "b"), t + secs(1)) else {
            panic!("the second member waits too")
        };
        // The newcomer at 1 s moved the end of the delay to 4 s.
        g.tick(t + Duration::from_millis(3500));
        assert!(rx_a.try_recv().is_err(), "still gathering at 3.5 s");
        assert_eq!(g.state, GroupState::PreparingRebalance);
        g.tick(t + secs(4));
        let (ra, rb) = (rx_a.try_recv().unwrap(), rx_b.try_recv().unwrap());
        assert_eq!(
            (ra.generation, rb.generation),
            (1, 1),
            "one generation for both"
        );
        assert_eq!(g.members.len(), 2);
        assert_eq!(g.state, GroupState::CompletingRebalance);
    }

    #[test]
    fn the_initial_delay_never_outlasts_the_rebalance_timeout() {
        let t = crate::clock::Clock::manual(0).instant();
        let mut g = Group::new("g");
        g.initial_rebalance_delay = Duration::from_secs(20);
        let mut r = req("", "a");
        r.rebalance_timeout = Duration::from_secs(5);
        r.require_known_member_id = false;
        let Reply::Later(mut rx) = g.join(r, t) else {
            panic!("waits for the initial delay")
        };
        g.tick(t + Duration::from_secs(5));
        assert_eq!(rx.try_recv().unwrap().generation, 1);
    }

    #[test]
    fn a_new_member_gets_an_id_then_joins_and_leads_a_stable_group() {
        let t = crate::clock::Clock::manual(0).instant();
        let mut g = Group::new("g");
        let first = now_join(&mut g, req("", "c1"), t);
        assert_eq!(first.error, ErrorCode::MemberIdRequired);
        let joined = now_join(&mut g, req(&first.member_id, "c1"), t);
        assert_eq!(joined.error, ErrorCode::None);
        assert_eq!(joined.generation, 1);
        assert_eq!(joined.leader, first.member_id);
        assert_eq!(joined.members.len(), 1);
        assert_eq!(g.state, GroupState::CompletingRebalance);
        let Reply::Later(mut rx) = sync(
            &mut g,
            &first.member_id,
            1,
            vec![(first.member_id.clone(), Bytes::from_static(b"a"))],
            t,
        ) else {
            panic!("leader sync should wait for delivery")
        };
        assert_eq!(rx.try_recv().unwrap().assignment, Bytes::from_static(b"a"));
        assert_eq!(g.state, GroupState::Stable);
        assert_eq!(g.heartbeat(&first.member_id, 1, t), ErrorCode::None);
        assert_eq!(
            g.heartbeat(&first.member_id, 0, t),
            ErrorCode::IllegalGeneration
        );
        assert_eq!(g.heartbeat("nobody", 1, t), ErrorCode::UnknownMemberId);
    }

    #[test]
    fn a_second_member_triggers_a_rebalance_that_waits_for_the_first_to_rejoin() {
        let t = crate::clock::Clock::manual(0).instant();
        let mut g = Group::new("g");
        let a = now_join(&mut g, req("", "a"), t).member_id;
        let _ = now_join(&mut g, req(&a, "a"), t);
        let _ = sync(&mut g, &a, 1, vec![], t);
        let b = now_join(&mut g, req("", "b"), t).member_id;
        let Reply::Later(mut b_rx) = g.join(req(&b, "b"), t) else {
            panic!()
        };
        assert_eq!(g.state, GroupState::PreparingRebalance);
        assert_eq!(g.heartbeat(&a, 1, t), ErrorCode::RebalanceInProgress);
        assert!(b_rx.try_recv().is_err());
        let Reply::Later(mut a_rx) = g.join(req(&a, "a"), t) else {
            panic!()
        };
        let (ra, rb) = (a_rx.try_recv().unwrap(), b_rx.try_recv().unwrap());
        assert_eq!(ra.generation, 2);
        assert_eq!(rb.generation, 2);
        assert_eq!(ra.leader, a);
        assert_eq!(ra.members.len(), 2);
        assert!(rb.members.is_empty());
    }

    #[test]
    fn members_that_do_not_rejoin_are_dropped_at_the_deadline_and_silent_ones_expire() {
        let t = crate::clock::Clock::manual(0).instant();
        let mut g = Group::new("g");
        let a = now_join(&mut g, req("", "a"), t).member_id;
        let _ = now_join(&mut g, req(&a, "a"), t);
        let _ = sync(&mut g, &a, 1, vec![], t);
        let b = now_join(&mut g, req("", "b"), t).member_id;
        let Reply::Later(mut b_rx) = g.join(req(&b, "b"), t) else {
            panic!()
        };
        g.tick(t + Duration::from_secs(31));
        let rb = b_rx.try_recv().unwrap();
        assert_eq!(rb.leader, b);
        assert!(!g.members.contains_key(&a));
        let _ = sync(
            &mut g,
            &b,
            rb.generation,
            vec![],
            t + Duration::from_secs(31),
        );
        assert_eq!(g.tick(t + Duration::from_secs(45)), vec![b]);
        assert_eq!(g.state, GroupState::Empty);
    }

    #[test]
    fn a_static_member_restarting_in_a_stable_group_causes_no_rebalance() {
        let t = crate::clock::Clock::manual(0).instant();
        let mut g = Group::new("g");
        let mut first = req("", "a");
        first.instance_id = Some("i1".into());
        let joined = now_join(&mut g, first, t);
        let old = joined.member_id.clone();
        let _ = sync(
            &mut g,
            &old,
            1,
            vec![(old.clone(), Bytes::from_static(b"p0"))],
            t,
        );
        assert_eq!(g.state, GroupState::Stable);
        let mut again = req("", "a");
        again.instance_id = Some("i1".into());
        let rejoined = now_join(&mut g, again, t);
        assert_eq!(rejoined.error, ErrorCode::None);
        assert_eq!(rejoined.generation, 1, "no new generation");
        assert_ne!(rejoined.member_id, old);
        assert_eq!(g.state, GroupState::Stable);
        let Reply::Now(sync) = sync(&mut g, &rejoined.member_id, 1, vec![], t) else {
            panic!()
        };
        assert_eq!(sync.assignment, Bytes::from_static(b"p0"));
        assert_eq!(g.heartbeat(&old, 1, t), ErrorCode::UnknownMemberId);
        assert!(g.take_store(), "the new member id must be recorded");
        let record = g.metadata(5);
        assert_eq!(record.members.len(), 1);
        assert_eq!(record.members[0].member_id, rejoined.member_id);
        assert_eq!(record.members[0].group_instance_id.as_deref(), Some("i1"));
        assert_eq!(record.leader.as_deref(), Some(rejoined.member_id.as_str()));
    }

    #[test]
    fn incompatible_protocols_are_refused() {
        let t = crate::clock::Clock::manual(0).instant();
        let mut g = Group::new("g");
        let a = now_join(&mut g, req("", "a"), t).member_id;
        let _ = now_join(&mut g, req(&a, "a"), t);
        let mut other = req("", "b");
        other.protocols = vec![("roundrobin".into(), Bytes::new())];
        assert_eq!(
            now_join(&mut g, other, t).error,
            ErrorCode::InconsistentGroupProtocol
        );
        let mut other = req("", "b");
        other.protocol_type = "connect".into();
        assert_eq!(
            now_join(&mut g, other, t).error,
            ErrorCode::InconsistentGroupProtocol
        );
    }

    /// Two members, a the leader: a stable generation 2 with a → "pa", b → "pb". Returns the
    /// member ids and the record the leader's SyncGroup stored.
    fn stable_pair(g: &mut Group, t: Instant) -> (String, String, GroupMetadata) {
        let a = now_join(g, req("", "a"), t).member_id;
        let _ = now_join(g, req(&a, "a"), t);
        let _ = sync(g, &a, 1, vec![], t);
        let b = now_join(g, req("", "b"), t).member_id;
        let Reply::Later(mut b_join) = g.join(req(&b, "b"), t) else {
            panic!("b should wait for a to rejoin")
        };
        let _ = now_join(g, req(&a, "a"), t);
        assert_eq!(b_join.try_recv().unwrap().generation, 2);
        let Reply::Later(mut b_sync) = sync(g, &b, 2, vec![], t) else {
            panic!("a follower's SyncGroup waits for the leader")
        };
        let mut stored = None;
        let reply = g.sync(
            &a,
            2,
            vec![
                (a.clone(), Bytes::from_static(b"pa")),
                (b.clone(), Bytes::from_static(b"pb")),
            ],
            t,
            1_000,
            |record| {
                // The assignment is stored before anyone hears of it.
                assert!(b_sync.try_recv().is_err(), "b answered before the append");
                stored = Some(record);
                Ok(())
            },
        );
        let Reply::Later(mut a_sync) = reply else {
            panic!()
        };
        assert_eq!(
            a_sync.try_recv().unwrap().assignment,
            Bytes::from_static(b"pa")
        );
        assert_eq!(
            b_sync.try_recv().unwrap().assignment,
            Bytes::from_static(b"pb")
        );
        (
            a,
            b,
            stored.expect("the leader's SyncGroup stored the generation"),
        )
    }

    #[test]
    fn the_leaders_sync_stores_the_generation_with_every_assignment() {
        let t = crate::clock::Clock::manual(0).instant();
        let mut g = Group::new("g");
        let (a, b, record) = stable_pair(&mut g, t);
        assert_eq!(g.state, GroupState::Stable);
        let member = |id: &str, client: &str, assignment: &'static [u8]| MemberMetadata {
            member_id: id.to_string(),
            group_instance_id: None,
            client_id: client.into(),
            client_host: "/127.0.0.1".into(),
            rebalance_timeout: 30_000,
            session_timeout: 10_000,
            subscription: Bytes::from_static(b"m"),
            assignment: Bytes::from_static(assignment),
        };
        let mut members = vec![member(&a, "a", b"pa"), member(&b, "b", b"pb")];
        members.sort_by(|x, y| x.member_id.cmp(&y.member_id));
        assert_eq!(
            record,
            GroupMetadata {
                protocol_type: "consumer".into(),
                generation: 2,
                protocol: Some("range".into()),
                leader: Some(a.clone()),
                current_state_timestamp: 1_000,
                members,
            }
        );
        assert_eq!(g.metadata(1_000), record, "the group as it now stands");
        assert!(
            !g.take_store(),
            "a stored generation needs no second record"
        );
    }

    #[test]
    fn a_failed_store_answers_every_member_with_the_error_and_rebalances() {
        let t = crate::clock::Clock::manual(0).instant();
        let mut g = Group::new("g");
        let a = now_join(&mut g, req("", "a"), t).member_id;
        let _ = now_join(&mut g, req(&a, "a"), t);
        let b = now_join(&mut g, req("", "b"), t).member_id;
        let Reply::Later(mut b_join) = g.join(req(&b, "b"), t) else {
            panic!()
        };
        assert_eq!(now_join(&mut g, req(&a, "a"), t).generation, 2);
        assert_eq!(b_join.try_recv().unwrap().generation, 2);
        assert_eq!(g.state, GroupState::CompletingRebalance);
        let (leader, follower) = (a.clone(), b.clone());
        let Reply::Later(mut f_sync) = sync(&mut g, &follower, 2, vec![], t) else {
            panic!()
        };
        let Reply::Later(mut l_sync) = g.sync(
            &leader,
            2,
            vec![(follower.clone(), Bytes::from_static(b"x"))],
            t,
            0,
            |_| Err(ErrorCode::NotCoordinator),
        ) else {
            panic!()
        };
        assert_eq!(l_sync.try_recv().unwrap().error, ErrorCode::NotCoordinator);
        assert_eq!(f_sync.try_recv().unwrap().error, ErrorCode::NotCoordinator);
        assert_eq!(g.state, GroupState::PreparingRebalance);
        assert!(g.members.values().all(|m| m.assignment.is_empty()));
    }

    #[test]
    fn a_group_rebuilt_from_its_record_is_stable_and_expires_members_that_never_return() {
        let t = crate::clock::Clock::manual(0).instant();
        let mut g = Group::new("g");
        let (a, b, record) = stable_pair(&mut g, t);

        // Much later (a restart): every member's session starts when the group is loaded.
        let loaded_at = t + Duration::from_secs(3600);
        let mut g = Group::from_metadata("g", record, loaded_at);
        assert_eq!(g.state, GroupState::Stable);
        assert_eq!(g.generation, 2);
        assert_eq!(g.leader.as_deref(), Some(a.as_str()));
        assert_eq!(g.protocol.as_deref(), Some("range"));
        assert_eq!(g.protocol_type.as_deref(), Some("consumer"));
        assert_eq!(g.members[&b].client_id, "b");
        assert_eq!(g.members[&b].session_timeout, Duration::from_secs(10));
        assert_eq!(
            g.subscribed_topics(),
            None,
            "test metadata is not a subscription"
        );
        assert!(g.tick(loaded_at + Duration::from_secs(9)).is_empty());

        // a carries on: same id, same generation, same assignment, no rebalance.
        let later = loaded_at + Duration::from_secs(9);
        assert_eq!(g.heartbeat(&a, 2, later), ErrorCode::None);
        let Reply::Now(s) = sync(&mut g, &a, 2, vec![], later) else {
            panic!("a stable group answers SyncGroup at once")
        };
        assert_eq!(s.assignment, Bytes::from_static(b"pa"));
        assert_eq!(g.heartbeat(&a, 1, later), ErrorCode::IllegalGeneration);

        // b never comes back: it expires after its session, and a is asked to rejoin.
        let expiry = loaded_at + Duration::from_millis(10_001);
        assert_eq!(g.tick(expiry), vec![b.clone()]);
        assert_eq!(g.state, GroupState::PreparingRebalance);
        assert_eq!(g.heartbeat(&a, 2, expiry), ErrorCode::RebalanceInProgress);
        let rejoined = now_join(&mut g, req(&a, "a"), expiry);
        assert_eq!(rejoined.generation, 3);
        assert_eq!(rejoined.members.len(), 1);
    }

    #[test]
    fn a_group_that_empties_asks_to_be_recorded_and_comes_back_empty_with_its_generation() {
        let t = crate::clock::Clock::manual(0).instant();
        let mut g = Group::new("g");
        let a = now_join(&mut g, req("", "a"), t).member_id;
        let _ = now_join(&mut g, req(&a, "a"), t);
        let _ = sync(&mut g, &a, 1, vec![], t);
        assert!(!g.take_store());
        assert_eq!(g.leave(&a, t), ErrorCode::None);
        assert_eq!((g.state, g.generation), (GroupState::Empty, 2));
        assert!(g.take_store());
        assert!(!g.take_store(), "asked once");
        let record = g.metadata(77);
        assert_eq!(
            record,
            GroupMetadata {
                protocol_type: "consumer".into(),
                generation: 2,
                protocol: None,
                leader: None,
                current_state_timestamp: 77,
                members: vec![],
            }
        );

        let mut g = Group::from_metadata("g", record, t);
        assert_eq!((g.state, g.generation), (GroupState::Empty, 2));
        let c = now_join(&mut g, req("", "c"), t).member_id;
        assert_eq!(now_join(&mut g, req(&c, "c"), t).generation, 3);

        // Expiry of the last member empties the group too.
        let _ = sync(&mut g, &c, 3, vec![], t);
        assert_eq!(g.tick(t + Duration::from_secs(11)), vec![c]);
        assert_eq!((g.state, g.generation), (GroupState::Empty, 4));
        assert!(g.take_store());
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "invariant 10")]
    fn a_group_led_by_a_stranger_is_caught() {
        let t = crate::clock::Clock::manual(0).instant();
        let mut g = Group::new("g");
        let a = now_join(&mut g, req("", "a"), t).member_id;
        let joined = now_join(&mut g, req(&a, "a"), t);
        assert_eq!(
            (g.state, joined.leader),
            (GroupState::CompletingRebalance, a)
        );
        g.leader = Some("stranger".into());
        g.tick(t);
    }

    #[test]
    fn a_member_whose_session_lapses_on_the_clock_leaves_and_the_group_empties() {
        let clock = crate::clock::Clock::manual(0);
        let mut g = Group::new("g");
        let a = now_join(&mut g, req("", "a"), clock.instant()).member_id;
        now_join(&mut g, req(&a, "a"), clock.instant());
        clock.advance(Duration::from_secs(10));
        assert!(
            g.tick(clock.instant()).is_empty(),
            "at the session timeout, not past it"
        );
        clock.advance(Duration::from_millis(1));
        assert_eq!(g.tick(clock.instant()), [a]);
        assert_eq!((g.state, g.members.len()), (GroupState::Empty, 0));
    }
}
