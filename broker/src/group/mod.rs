//! The group coordinator: consumer groups under Kafka's classic protocol and their committed
//! offsets.
//!
//! - [`state`] — one group's membership state machine (pure);
//! - [`store`] — the `__consumer_offsets` record format;
//! - [`lag`] — consumer lag in records and seconds, and its trend.
//!
//! The coordinator of a group is the leader of partition `partition_for(group)` of
//! `__consumer_offsets` (50 partitions, created on first use). Commits are appended to that
//! partition before they are acknowledged and the table is rebuilt from it at start-up, so
//! committed offsets survive clean restarts and `kill -9` alike. Group membership itself is
//! kept in memory: after a restart members rejoin (they are told UNKNOWN_MEMBER_ID), as with a
//! Kafka coordinator failover.

pub mod lag;
pub mod state;
pub mod store;

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Instant;

use bytes::Bytes;

use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::log::batch;
use state::{Group, GroupState, JoinRequest, JoinResult, Reply, SyncResult};
use store::CommittedOffset;

/// Longest group id accepted.
const MAX_GROUP_ID: usize = 255;
/// Kafka's `offset.metadata.max.bytes`.
const MAX_OFFSET_METADATA: usize = 4096;

type Offsets = BTreeMap<(String, i32), CommittedOffset>;
/// Per topic, per partition: the committed offset, if any.
pub type TopicOffsets = Vec<(String, Vec<(i32, Option<CommittedOffset>)>)>;

#[derive(Default)]
struct Entry {
    group: Option<Group>,
    offsets: Offsets,
    /// Wall-clock ms when the group was last seen with members (0: not since start-up).
    last_active_ms: i64,
}

/// Whether an empty group's offsets have outlived `offsets.retention.minutes` (KIP-211): the
/// clock starts at the later of its newest commit and the moment it was last seen with members.
fn offsets_expired(offsets: &Offsets, last_active_ms: i64, now_ms: i64, retention_ms: i64) -> bool {
    let newest_commit = offsets
        .values()
        .map(|o| o.commit_timestamp)
        .max()
        .unwrap_or(0);
    retention_ms >= 0 && now_ms - newest_commit.max(last_active_ms) > retention_ms
}

#[derive(Default)]
pub struct Coordinator {
    groups: Mutex<HashMap<String, Entry>>,
}

pub fn validate_group_id(id: &str) -> Result<(), ApiError> {
    if id.is_empty() || id.len() > MAX_GROUP_ID {
        return Err(ApiError::new(
            ErrorCode::InvalidGroupId,
            format!(
                "group id must be 1..={MAX_GROUP_ID} bytes, got {}",
                id.len()
            ),
        ));
    }
    Ok(())
}

/// One partition's commit in an OffsetCommit request.
pub struct Commit {
    pub topic: String,
    pub partition: i32,
    pub offset: CommittedOffset,
}

/// A group as DescribeGroups shows it.
pub struct GroupView {
    pub state: &'static str,
    pub protocol_type: String,
    pub protocol: String,
    /// (member id, instance id, client id, client host, metadata of the chosen protocol, assignment)
    pub members: Vec<(String, Option<String>, String, String, Bytes, Bytes)>,
}

impl Coordinator {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.groups.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates `__consumer_offsets` if it does not exist yet, compacted like Kafka's: the latest
    /// record per key (a group's offset for one partition, or its metadata) is all that is kept.
    /// A topic made by an older Strata (delete policy, no retention) is switched to compaction.
    pub async fn ensure_offsets_topic(&self, broker: &Broker) -> Result<(), ApiError> {
        let mut configs = BTreeMap::new();
        configs.insert("cleanup.policy".to_string(), "compact".to_string());
        configs.insert("segment.bytes".to_string(), (100 * 1024 * 1024).to_string());
        if let Some(topic) = broker.metadata.state().topic(store::TOPIC) {
            if topic.configs.get("cleanup.policy").map(String::as_str) != Some("compact") {
                broker
                    .apply(strata_metadata::Command::AlterTopicConfig {
                        name: store::TOPIC.to_string(),
                        set: configs,
                        delete: vec!["retention.ms".to_string()],
                    })
                    .await?;
                broker.sync_partitions()?;
                tracing::info!("switched {} to cleanup.policy=compact", store::TOPIC);
            }
            return Ok(());
        }
        match broker
            .create_internal_topic(store::TOPIC, store::PARTITIONS, configs)
            .await
        {
            Ok(()) => {
                tracing::info!("created {}", store::TOPIC);
                Ok(())
            }
            Err(e) if e.code == ErrorCode::TopicAlreadyExists => Ok(()),
            Err(e) => Err(ApiError::new(ErrorCode::CoordinatorNotAvailable, e.message)),
        }
    }

    /// Rebuilds committed offsets by reading `__consumer_offsets` from the start.
    pub fn load(&self, broker: &Broker) -> Result<usize, ApiError> {
        let mut table: HashMap<String, Entry> = HashMap::new();
        let mut records = 0usize;
        for p in 0..store::PARTITIONS as i32 {
            let Some(part) = broker.partitions.get(store::TOPIC, p) else {
                continue;
            };
            let mut offset = part.offsets().log_start;
            loop {
                let (bytes, o) = part.read(offset, 1 << 20).map_err(ApiError::from)?;
                if bytes.is_empty() || offset >= o.high_watermark {
                    break;
                }
                let mut buf = bytes.clone();
                while !buf.is_empty() {
                    // Continue after the batch's last offset, not its last record's: a
                    // compacted batch may have lost its last records but keeps its span.
                    if let Ok(h) = crate::log::batch::BatchHeader::parse(&buf) {
                        offset = offset.max(h.next_offset());
                    }
                    let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut buf)
                        .map_err(|e| {
                            ApiError::new(
                                ErrorCode::KafkaStorageError,
                                format!("{}-{p}: {e}", store::TOPIC),
                            )
                        })?;
                    for r in set.records {
                        offset = offset.max(r.offset + 1);
                        if r.offset < o.log_start {
                            continue;
                        }
                        records += 1;
                        match store::decode(r.key, r.value) {
                            Some(store::Entry::Offset {
                                group,
                                topic,
                                partition,
                                value,
                            }) => {
                                let offsets = &mut table.entry(group).or_default().offsets;
                                match value {
                                    Some(v) => offsets.insert((topic, partition), v),
                                    None => offsets.remove(&(topic, partition)),
                                };
                            }
                            Some(store::Entry::Other) => {}
                            None => tracing::warn!(
                                partition = p,
                                offset = r.offset,
                                "skipping malformed record in {}",
                                store::TOPIC
                            ),
                        }
                    }
                }
            }
        }
        table.retain(|_, e| !e.offsets.is_empty());
        *self.lock() = table;
        Ok(records)
    }

    /// Appends records to the group's partition of `__consumer_offsets`.
    fn persist(
        broker: &Broker,
        group: &str,
        records: &[(Bytes, Option<Bytes>)],
    ) -> Result<(), ApiError> {
        let partition = store::partition_for(group);
        let part = broker
            .partitions
            .get(store::TOPIC, partition)
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::CoordinatorNotAvailable,
                    format!("{}-{partition} is not here", store::TOPIC),
                )
            })?;
        let refs: Vec<batch::KeyValue<'_>> = records
            .iter()
            .map(|(k, v)| (Some(&k[..]), v.as_deref()))
            .collect();
        part.append(&batch::build(&refs, crate::partition::now_ms()))?;
        Ok(())
    }

    /// Appends tombstones deleting the given committed offsets (nothing when there are none).
    fn tombstone<'a>(
        broker: &Broker,
        group: &str,
        partitions: impl Iterator<Item = &'a (String, i32)>,
    ) -> Result<(), ApiError> {
        let records: Vec<(Bytes, Option<Bytes>)> = partitions
            .map(|(t, p)| (store::offset_key(group, t, *p), None))
            .collect();
        if records.is_empty() {
            return Ok(());
        }
        Self::persist(broker, group, &records)
    }

    pub fn join(&self, group_id: &str, req: JoinRequest) -> Reply<JoinResult> {
        let mut groups = self.lock();
        let entry = groups.entry(group_id.to_string()).or_default();
        let group = entry.group.get_or_insert_with(|| Group::new(group_id));
        if group.state == GroupState::Dead {
            *group = Group::new(group_id);
        }
        group.join(req, Instant::now())
    }

    pub fn sync(
        &self,
        group_id: &str,
        member_id: &str,
        generation: i32,
        instance_id: Option<&str>,
        assignments: Vec<(String, Bytes)>,
    ) -> Reply<SyncResult> {
        let mut groups = self.lock();
        let Some(group) = groups.get_mut(group_id).and_then(|e| e.group.as_mut()) else {
            return Reply::Now(SyncResult {
                error: ErrorCode::UnknownMemberId,
                assignment: Bytes::new(),
                protocol_type: None,
                protocol: None,
            });
        };
        if let Err(code) = check_instance(group, member_id, instance_id) {
            return Reply::Now(SyncResult {
                error: code,
                assignment: Bytes::new(),
                protocol_type: None,
                protocol: None,
            });
        }
        group.sync(member_id, generation, assignments, Instant::now())
    }

    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        generation: i32,
        instance_id: Option<&str>,
    ) -> ErrorCode {
        let mut groups = self.lock();
        let Some(group) = groups.get_mut(group_id).and_then(|e| e.group.as_mut()) else {
            return ErrorCode::UnknownMemberId;
        };
        if let Err(code) = check_instance(group, member_id, instance_id) {
            return code;
        }
        group.heartbeat(member_id, generation, Instant::now())
    }

    /// Removes members, by member id or (for static members) by instance id.
    pub fn leave(&self, group_id: &str, members: &[(String, Option<String>)]) -> Vec<ErrorCode> {
        let mut groups = self.lock();
        let Some(group) = groups.get_mut(group_id).and_then(|e| e.group.as_mut()) else {
            return members.iter().map(|_| ErrorCode::UnknownMemberId).collect();
        };
        let now = Instant::now();
        members
            .iter()
            .map(|(member_id, instance)| {
                let id = match instance {
                    Some(i) => match group.instance_member(i) {
                        Some(id) if member_id.is_empty() || *member_id == id => id,
                        Some(_) => return ErrorCode::FencedInstanceId,
                        None => return ErrorCode::UnknownMemberId,
                    },
                    None => member_id.clone(),
                };
                group.leave(&id, now)
            })
            .collect()
    }

    /// Validates the committer and appends the commits; one error per commit.
    pub fn commit(
        &self,
        broker: &Broker,
        group_id: &str,
        member_id: &str,
        generation: i32,
        commits: Vec<Commit>,
    ) -> Vec<ErrorCode> {
        let mut groups = self.lock();
        let entry = groups.entry(group_id.to_string()).or_default();
        let group_error = match entry.group.as_ref().filter(|g| !g.is_empty()) {
            // A group with no members takes "simple" commits (generation -1, no member) only.
            None if generation < 0 && member_id.is_empty() => None,
            None if generation >= 0 => Some(ErrorCode::IllegalGeneration),
            None => Some(ErrorCode::UnknownMemberId),
            // Kafka refuses commits only while assignments are being handed out. During
            // PreparingRebalance the generation is still current, and cooperative members
            // commit what they are giving up right then, before they rejoin.
            Some(g) if g.state == GroupState::CompletingRebalance => {
                Some(ErrorCode::RebalanceInProgress)
            }
            Some(g) if !g.members.contains_key(member_id) => Some(ErrorCode::UnknownMemberId),
            Some(g) if g.generation != generation => Some(ErrorCode::IllegalGeneration),
            Some(_) => None,
        };
        if let Some(code) = group_error {
            return commits.iter().map(|_| code).collect();
        }
        let state = broker.metadata.state();
        let mut errors = Vec::with_capacity(commits.len());
        let mut records = Vec::new();
        let mut accepted = Vec::new();
        for c in commits {
            let known = state
                .topic(&c.topic)
                .is_some_and(|t| c.partition >= 0 && (c.partition as usize) < t.partitions.len());
            errors.push(if !known {
                ErrorCode::UnknownTopicOrPartition
            } else if c.offset.metadata.len() > MAX_OFFSET_METADATA {
                ErrorCode::OffsetMetadataTooLarge
            } else {
                records.push((
                    store::offset_key(group_id, &c.topic, c.partition),
                    Some(store::offset_value(&c.offset)),
                ));
                accepted.push(c);
                ErrorCode::None
            });
        }
        if !records.is_empty() {
            if let Err(e) = Self::persist(broker, group_id, &records) {
                tracing::error!(group = group_id, error = %e, "cannot persist offset commit");
                return errors.iter().map(|_| e.code).collect();
            }
            for c in accepted {
                entry.offsets.insert((c.topic, c.partition), c.offset);
            }
        }
        errors
    }

    /// Committed offsets of a group: the listed partitions, or all when `None`.
    pub fn fetch(&self, group_id: &str, wanted: Option<Vec<(String, Vec<i32>)>>) -> TopicOffsets {
        let groups = self.lock();
        let offsets = groups.get(group_id).map(|e| &e.offsets);
        match wanted {
            Some(topics) => topics
                .into_iter()
                .map(|(t, parts)| {
                    let v = parts
                        .into_iter()
                        .map(|p| (p, offsets.and_then(|o| o.get(&(t.clone(), p)).cloned())))
                        .collect();
                    (t, v)
                })
                .collect(),
            None => {
                let mut by_topic: BTreeMap<String, Vec<(i32, Option<CommittedOffset>)>> =
                    BTreeMap::new();
                for ((t, p), v) in offsets.into_iter().flatten() {
                    by_topic
                        .entry(t.clone())
                        .or_default()
                        .push((*p, Some(v.clone())));
                }
                by_topic.into_iter().collect()
            }
        }
    }

    /// Every committed offset: (group, topic, partition, offset).
    pub fn committed(&self) -> Vec<(String, String, i32, i64)> {
        let groups = self.lock();
        let mut out: Vec<_> = groups
            .iter()
            .flat_map(|(g, e)| {
                e.offsets
                    .iter()
                    .map(move |((t, p), v)| (g.clone(), t.clone(), *p, v.offset))
            })
            .collect();
        out.sort();
        out
    }

    /// (group id, protocol type, state) of every group with members or offsets.
    pub fn list(&self) -> Vec<(String, String, &'static str)> {
        let groups = self.lock();
        let mut out: Vec<_> = groups
            .iter()
            .map(|(id, e)| match &e.group {
                Some(g) => (
                    id.clone(),
                    g.protocol_type.clone().unwrap_or_default(),
                    g.state.name(),
                ),
                None => (id.clone(), String::new(), GroupState::Empty.name()),
            })
            .filter(|(_, _, s)| *s != GroupState::Dead.name())
            .collect();
        out.sort();
        out
    }

    pub fn describe(&self, group_id: &str) -> GroupView {
        let groups = self.lock();
        match groups.get(group_id).and_then(|e| e.group.as_ref()) {
            None if groups.contains_key(group_id) => GroupView {
                state: "Empty",
                protocol_type: String::new(),
                protocol: String::new(),
                members: vec![],
            },
            None => GroupView {
                state: "Dead",
                protocol_type: String::new(),
                protocol: String::new(),
                members: vec![],
            },
            Some(g) => {
                let protocol = g.protocol.clone().unwrap_or_default();
                let members = if g.state == GroupState::Stable {
                    g.members
                        .values()
                        .map(|m| {
                            let meta = m
                                .protocols
                                .iter()
                                .find(|(n, _)| *n == protocol)
                                .map(|(_, b)| b.clone())
                                .unwrap_or_default();
                            (
                                m.id.clone(),
                                m.instance_id.clone(),
                                m.client_id.clone(),
                                m.client_host.clone(),
                                meta,
                                m.assignment.clone(),
                            )
                        })
                        .collect()
                } else {
                    vec![]
                };
                GroupView {
                    state: g.state.name(),
                    protocol_type: g.protocol_type.clone().unwrap_or_default(),
                    protocol,
                    members,
                }
            }
        }
    }

    /// DeleteGroups: only a group without members; its offsets are tombstoned.
    pub fn delete(&self, broker: &Broker, group_id: &str) -> ErrorCode {
        let mut groups = self.lock();
        let Some(entry) = groups.get(group_id) else {
            return ErrorCode::GroupIdNotFound;
        };
        if entry.group.as_ref().is_some_and(|g| !g.is_empty()) {
            return ErrorCode::NonEmptyGroup;
        }
        if let Err(e) = Self::tombstone(broker, group_id, entry.offsets.keys()) {
            return e.code;
        }
        groups.remove(group_id);
        ErrorCode::None
    }

    /// OffsetDelete: removes committed offsets, except of topics a live consumer group
    /// subscribes to (GROUP_SUBSCRIBED_TO_TOPIC), as Kafka does.
    pub fn delete_offsets(
        &self,
        broker: &Broker,
        group_id: &str,
        partitions: &[(String, i32)],
    ) -> Result<Vec<ErrorCode>, ErrorCode> {
        let mut groups = self.lock();
        let Some(entry) = groups.get_mut(group_id) else {
            return Err(ErrorCode::GroupIdNotFound);
        };
        let live = entry.group.as_ref().filter(|g| !g.is_empty());
        let subscribed = match live {
            None => Default::default(),
            Some(g) => match g.subscribed_topics() {
                Some(t) => t,
                // Subscriptions unknown (not a consumer group): refuse rather than delete an
                // offset a live member may depend on.
                None => return Err(ErrorCode::NonEmptyGroup),
            },
        };
        let codes: Vec<ErrorCode> = partitions
            .iter()
            .map(|(t, _)| {
                if subscribed.contains(t) {
                    ErrorCode::GroupSubscribedToTopic
                } else {
                    ErrorCode::None
                }
            })
            .collect();
        let doomed: Vec<&(String, i32)> = partitions
            .iter()
            .zip(&codes)
            .filter(|(_, c)| **c == ErrorCode::None)
            .map(|(p, _)| p)
            .collect();
        if !doomed.is_empty() {
            Self::tombstone(broker, group_id, doomed.iter().copied()).map_err(|e| e.code)?;
            for (t, p) in doomed {
                entry.offsets.remove(&(t.clone(), *p));
            }
        }
        Ok(codes)
    }

    /// Session expiry and rebalance deadlines; called every 100 ms.
    /// Deletes (tombstones) the committed offsets of groups that have been empty for longer
    /// than `retention_ms`. Returns how many groups expired.
    pub fn expire_offsets(&self, broker: &Broker, now_ms: i64, retention_ms: i64) -> usize {
        let mut groups = self.lock();
        let expired: Vec<String> = groups
            .iter()
            .filter(|(_, e)| e.group.as_ref().is_none_or(|g| g.is_empty()))
            .filter(|(_, e)| {
                !e.offsets.is_empty()
                    && offsets_expired(&e.offsets, e.last_active_ms, now_ms, retention_ms)
            })
            .map(|(id, _)| id.clone())
            .collect();
        let mut done = 0;
        for id in expired {
            let Some(entry) = groups.get(&id) else {
                continue;
            };
            match Self::tombstone(broker, &id, entry.offsets.keys()) {
                Ok(()) => {
                    tracing::info!(group = %id, partitions = entry.offsets.len(), "committed offsets expired (offsets_retention_minutes)");
                    groups.remove(&id);
                    done += 1;
                }
                Err(e) => {
                    tracing::warn!(group = %id, error = %e, "cannot expire committed offsets")
                }
            }
        }
        done
    }

    pub fn tick(&self) {
        let now = Instant::now();
        let wall = crate::partition::now_ms();
        for (id, entry) in self.lock().iter_mut() {
            if entry.group.as_ref().is_some_and(|g| !g.is_empty()) {
                entry.last_active_ms = wall;
            }
            if let Some(g) = entry.group.as_mut() {
                for member in g.tick(now) {
                    tracing::info!(group = %id, member, "member expired after its session timeout");
                }
            }
        }
    }
}

/// A static member's instance id must still belong to the member id it came with.
fn check_instance(
    group: &Group,
    member_id: &str,
    instance_id: Option<&str>,
) -> Result<(), ErrorCode> {
    match instance_id.and_then(|i| group.instance_member(i)) {
        Some(current) if current != member_id => Err(ErrorCode::FencedInstanceId),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(commit_ts: &[i64]) -> Offsets {
        commit_ts
            .iter()
            .enumerate()
            .map(|(i, ts)| {
                (
                    ("t".to_string(), i as i32),
                    CommittedOffset {
                        offset: 1,
                        leader_epoch: -1,
                        metadata: String::new(),
                        commit_timestamp: *ts,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn offsets_expire_only_after_retention_from_the_newest_commit_or_last_activity() {
        let o = offsets(&[1_000, 5_000]);
        assert!(
            !offsets_expired(&o, 0, 10_000, 6_000),
            "newest commit is 5 s old"
        );
        assert!(offsets_expired(&o, 0, 11_001, 6_000));
        assert!(
            !offsets_expired(&o, 9_000, 11_001, 6_000),
            "members were active until 9 s"
        );
        assert!(
            !offsets_expired(&o, 0, i64::MAX, -1),
            "-1 keeps offsets forever"
        );
    }
}
