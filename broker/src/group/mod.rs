//! The group coordinator: consumer groups under Kafka's classic protocol and their committed
//! offsets.
//!
//! - [`state`] — one group's membership state machine (pure);
//! - [`store`] — the `__consumer_offsets` record format;
//! - [`lag`] — consumer lag in records and seconds, and its trend.
//!
//! The coordinator of a group is the leader of partition `partition_for(group)` of
//! `__consumer_offsets` (50 partitions, created on first use and replicated like any topic).
//! Two kinds of records go to that partition, as in Kafka: committed offsets, acknowledged
//! once the ISR holds them (the high watermark passed them), and the
//! group's metadata (GroupMetadata: generation, protocol, leader, members with their
//! subscriptions and assignments), appended when a generation completes (before the leader's
//! SyncGroup is answered), when the group becomes empty, when a static member is replaced, and
//! as a tombstone when the group is deleted.
//!
//! Invariants:
//! - This broker coordinates exactly the groups of the `__consumer_offsets` partitions it
//!   leads and has loaded at the current leader epoch ([`Coordinator::follow_leadership`]); a request for
//!   any other group gets NOT_COORDINATOR (led elsewhere), COORDINATOR_LOAD_IN_PROGRESS (led
//!   here, still loading) or COORDINATOR_NOT_AVAILABLE (offline), and clients find the
//!   coordinator again.
//! - A partition's groups are rebuilt from its whole log when leadership arrives (start-up,
//!   failover, restart) and dropped from memory when it leaves, so a stable group survives
//!   clean restarts, `kill -9` and coordinator moves alike: its members carry on heartbeating
//!   with their member ids and generation, and those that never come back expire after their
//!   session timeout, which rebalances the rest.
//! - A committed offset is visible (OffsetFetch, lag) only once the commit is acknowledged,
//!   that is once the ISR holds it; a commit that times out is not applied.

pub mod lag;
pub mod state;
pub mod store;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::log::{batch, records};
use crate::partition::Partition;
use state::{Group, GroupState, JoinRequest, JoinResult, Reply, SyncResult};
use store::{CommittedOffset, GroupMetadata};

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
    /// Wall-clock ms when the group was last seen with members (0: unknown).
    last_active_ms: i64,
}

/// Kafka's mapping of a failed GroupMetadata append to the error members are told
/// (`appendGroupMetadataErrorToResponseError`).
fn store_error(code: ErrorCode) -> ErrorCode {
    match code {
        ErrorCode::UnknownTopicOrPartition => ErrorCode::CoordinatorNotAvailable,
        ErrorCode::KafkaStorageError => ErrorCode::NotCoordinator,
        ErrorCode::MessageTooLarge | ErrorCode::RecordListTooLarge => ErrorCode::UnknownServerError,
        c => c,
    }
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

/// The coordinator's table rebuilt from `__consumer_offsets` records read in log order: the
/// latest record per key wins and a tombstone deletes.
#[derive(Default)]
struct Rebuild {
    offsets: HashMap<String, Offsets>,
    metadata: HashMap<String, Option<GroupMetadata>>,
}

impl Rebuild {
    fn apply(&mut self, entry: store::Entry) {
        match entry {
            store::Entry::Offset {
                group,
                topic,
                partition,
                value,
            } => {
                let offsets = self.offsets.entry(group).or_default();
                match value {
                    Some(v) => offsets.insert((topic, partition), v),
                    None => offsets.remove(&(topic, partition)),
                };
            }
            store::Entry::Group { group, value } => {
                self.metadata.insert(group, value);
            }
            store::Entry::Other => {}
        }
    }

    /// The table as of `now` (sessions of loaded members start now) / `wall_ms`.
    fn finish(self, now: Instant, wall_ms: i64) -> HashMap<String, Entry> {
        let mut table: HashMap<String, Entry> = self
            .offsets
            .into_iter()
            .filter(|(_, o)| !o.is_empty())
            .map(|(g, offsets)| {
                (
                    g,
                    Entry {
                        offsets,
                        ..Entry::default()
                    },
                )
            })
            .collect();
        for (id, record) in self.metadata {
            let Some(record) = record else { continue };
            let entry = table.entry(id.clone()).or_default();
            entry.last_active_ms = if record.members.is_empty() {
                // Empty since the record was written (KIP-211's clock).
                record.current_state_timestamp.max(0)
            } else {
                wall_ms
            };
            entry.group = Some(Group::from_metadata(&id, record, now));
        }
        table
    }
}

#[derive(Default)]
pub struct Coordinator {
    groups: Mutex<HashMap<String, Entry>>,
    /// `__consumer_offsets` partitions whose groups are loaded here, with the leader epoch
    /// they were loaded at.
    loaded: Mutex<HashMap<i32, i32>>,
    /// One [`Coordinator::follow_leadership`] at a time (the metadata follower, housekeeping and topic
    /// creation all call it).
    syncing: tokio::sync::Mutex<()>,
    /// Woken at the end of every [`Coordinator::follow_leadership`].
    followed: tokio::sync::Notify,
}

/// An offset commit appended to the log and waiting for the ISR before it is acknowledged
/// ([`Coordinator::commit`], then [`Coordinator::complete_commit`]).
pub struct PendingCommit {
    group: String,
    partition: Arc<Partition>,
    last_offset: i64,
    leader_epoch: i32,
    accepted: Vec<Commit>,
}

/// Kafka's `offsets.commit.timeout.ms`: how long a commit waits for the ISR.
const COMMIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Kafka's mapping of a failed offset-commit append to the error the committer is told
/// (`GroupMetadataManager.storeOffsets`).
fn commit_error(code: ErrorCode) -> ErrorCode {
    match code {
        ErrorCode::UnknownTopicOrPartition
        | ErrorCode::NotEnoughReplicas
        | ErrorCode::NotEnoughReplicasAfterAppend => ErrorCode::CoordinatorNotAvailable,
        ErrorCode::NotLeaderOrFollower | ErrorCode::KafkaStorageError => ErrorCode::NotCoordinator,
        ErrorCode::MessageTooLarge | ErrorCode::RecordListTooLarge => {
            ErrorCode::InvalidCommitOffsetSize
        }
        c => c,
    }
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

/// How long a group request waits for its `__consumer_offsets` partition to load here.
const LOAD_WAIT: Duration = Duration::from_secs(5);

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
                // Coordinate the new partitions led here at once, not at the next metadata
                // change.
                self.follow_leadership(broker).await;
                Ok(())
            }
            Err(e) if e.code == ErrorCode::TopicAlreadyExists => Ok(()),
            Err(e) => Err(ApiError::new(ErrorCode::CoordinatorNotAvailable, e.message)),
        }
    }

    /// Whether this broker coordinates `group_id` now; the one check before serving any
    /// group request (see the module invariants). A partition led here but not loaded yet (its
    /// leadership arrived since the last metadata change or tick was followed, or the partition
    /// is still being opened) is waited for, up to [`LOAD_WAIT`], rather than sending the client
    /// away to retry: librdkafka gives up a commit on the first COORDINATOR_LOAD_IN_PROGRESS.
    pub async fn check(&self, broker: &Broker, group_id: &str) -> Result<(), ApiError> {
        let deadline = tokio::time::Instant::now() + LOAD_WAIT;
        loop {
            // Taken before looking, so a follow that ends in between still wakes this one.
            let followed = self.followed.notified();
            match self.check_loaded(broker, group_id) {
                Err(e) if e.code == ErrorCode::CoordinatorLoadInProgress => {
                    if tokio::time::timeout_at(deadline, followed).await.is_err() {
                        return Err(e);
                    }
                }
                answer => return answer,
            }
        }
    }

    fn check_loaded(&self, broker: &Broker, group_id: &str) -> Result<(), ApiError> {
        validate_group_id(group_id)?;
        let p = store::partition_for(group_id);
        let state = broker.metadata.state();
        let Some(info) = state.partition(store::TOPIC, p) else {
            return Err(ApiError::new(
                ErrorCode::CoordinatorNotAvailable,
                format!("{} does not exist yet", store::TOPIC),
            ));
        };
        match info.leader {
            Some(l) if l == broker.config.node_id => {}
            Some(l) => {
                return Err(ApiError::new(
                    ErrorCode::NotCoordinator,
                    format!("group {group_id} is coordinated by broker {l}"),
                ))
            }
            None => {
                return Err(ApiError::new(
                    ErrorCode::CoordinatorNotAvailable,
                    format!("{}-{p} has no leader", store::TOPIC),
                ))
            }
        }
        if self.loaded_lock().get(&p) != Some(&info.leader_epoch) {
            return Err(ApiError::new(
                ErrorCode::CoordinatorLoadInProgress,
                format!("loading the groups of {}-{p}", store::TOPIC),
            ));
        }
        Ok(())
    }

    fn loaded_lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, i32>> {
        self.loaded.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Follows the leadership of `__consumer_offsets`: loads the groups of every partition
    /// this broker has come to lead (at a new leader epoch) and drops those of partitions it
    /// no longer leads. Cheap when nothing changed; a failed load is retried on the next call.
    pub async fn follow_leadership(&self, broker: &Broker) {
        let _one = self.syncing.lock().await;
        let me = broker.config.node_id;
        let led: HashMap<i32, i32> = broker
            .metadata
            .state()
            .topic(store::TOPIC)
            .map(|t| {
                t.partitions
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.leader == Some(me))
                    .map(|(i, p)| (i as i32, p.leader_epoch))
                    .collect()
            })
            .unwrap_or_default();
        let stale: Vec<i32> = self
            .loaded_lock()
            .iter()
            .filter(|(p, epoch)| led.get(p) != Some(epoch))
            .map(|(p, _)| *p)
            .collect();
        for p in stale {
            self.loaded_lock().remove(&p);
            let mut groups = self.lock();
            let before = groups.len();
            groups.retain(|id, _| store::partition_for(id) != p);
            tracing::info!(
                partition = p,
                groups = before - groups.len(),
                "no longer coordinating the groups of {}-{p}",
                store::TOPIC
            );
        }
        for (p, epoch) in led {
            if self.loaded_lock().get(&p) == Some(&epoch) {
                continue;
            }
            // The partition takes its role from the same state; until it has, wait.
            let Some(part) = broker
                .partitions
                .get(store::TOPIC, p)
                .filter(|part| part.current_leader_epoch() == epoch && part.is_leader())
            else {
                continue;
            };
            let started = Instant::now();
            let loaded = Self::read_partition(&part);
            match loaded {
                Ok((records, rebuild)) => {
                    let table = rebuild.finish(Instant::now(), crate::partition::now_ms());
                    let stable = table
                        .values()
                        .filter(|e| e.group.as_ref().is_some_and(|g| !g.is_empty()))
                        .count();
                    let groups = table.len();
                    self.lock().extend(table);
                    self.loaded_lock().insert(p, epoch);
                    tracing::info!(
                        partition = p,
                        leader_epoch = epoch,
                        records,
                        groups,
                        stable,
                        ms = started.elapsed().as_millis() as u64,
                        "coordinating the groups of {}-{p}",
                        store::TOPIC
                    );
                }
                Err(e) => {
                    tracing::error!(partition = p, error = %e, "cannot load the groups of {}-{p}; retrying", store::TOPIC)
                }
            }
        }
        // Requests waiting in `check` look again: loaded, dropped, or still loading.
        self.followed.notify_waiters();
    }

    /// Rebuilds committed offsets and groups from one partition of `__consumer_offsets`, read
    /// from its start to its end: per key the latest record wins and a tombstone deletes.
    /// The end, not the high watermark: a leader keeps every record it has, and they all
    /// become committed.
    fn read_partition(part: &Partition) -> Result<(usize, Rebuild), ApiError> {
        let mut rebuild = Rebuild::default();
        let mut count = 0usize;
        let p = part.tp.partition;
        let mut offset = part.offsets().log_start;
        loop {
            let (bytes, o) = part.read_replica(offset, 1 << 20).map_err(ApiError::from)?;
            if bytes.is_empty() || offset >= o.log_end {
                break;
            }
            let storage_error = |e: String| {
                ApiError::new(
                    ErrorCode::KafkaStorageError,
                    format!("{}-{p}: {e}", store::TOPIC),
                )
            };
            for item in records::batches(&bytes) {
                let (h, b) = item.map_err(|e| storage_error(e.to_string()))?;
                // Continue after the batch's last offset, not its last record's: a
                // compacted batch may have lost its last records but keeps its span.
                offset = offset.max(h.next_offset());
                let section = records::section(&b, &h).map_err(|e| storage_error(e.to_string()))?;
                records::for_each(&section, &h, |r| {
                    offset = offset.max(r.offset + 1);
                    if r.offset < o.log_start {
                        return;
                    }
                    count += 1;
                    let (key, value) = (
                        r.key.map(|k| section.slice_ref(k)),
                        r.value.map(|v| section.slice_ref(v)),
                    );
                    match store::decode(key, value) {
                        Some(entry) => rebuild.apply(entry),
                        None => tracing::warn!(
                            partition = p,
                            offset = r.offset,
                            "skipping malformed record in {}",
                            store::TOPIC
                        ),
                    }
                })
                .map_err(|e| storage_error(e.to_string()))?;
            }
        }
        Ok((count, rebuild))
    }

    /// Appends records to the group's partition of `__consumer_offsets`.
    /// Only the leader appends: a coordinator that lost the partition gets NOT_COORDINATOR
    /// rather than writing into a follower's log. Returns the partition, the leader epoch
    /// appended under and the last offset written.
    fn persist(
        broker: &Broker,
        group: &str,
        records: &[(Bytes, Option<Bytes>)],
    ) -> Result<(Arc<Partition>, i32, i64), ApiError> {
        let partition = store::partition_for(group);
        let part = broker
            .leader_partition(store::TOPIC, partition, -1)
            .map_err(|e| ApiError::new(ErrorCode::NotCoordinator, e.message))?;
        let refs: Vec<batch::KeyValue<'_>> = records
            .iter()
            .map(|(k, v)| (Some(&k[..]), v.as_deref()))
            .collect();
        let epoch = part.current_leader_epoch();
        let info = part.append(&batch::build(&refs, crate::partition::now_ms()))?;
        Ok((part, epoch, info.last_offset))
    }

    /// Appends tombstones deleting the given committed offsets and, with `metadata`, the
    /// group's GroupMetadata record (nothing when there is nothing to delete).
    fn tombstone<'a>(
        broker: &Broker,
        group: &str,
        partitions: impl Iterator<Item = &'a (String, i32)>,
        metadata: bool,
    ) -> Result<(), ApiError> {
        let mut records: Vec<(Bytes, Option<Bytes>)> = partitions
            .map(|(t, p)| (store::offset_key(group, t, *p), None))
            .collect();
        if metadata {
            records.push((store::group_key(group), None));
        }
        if records.is_empty() {
            return Ok(());
        }
        Self::persist(broker, group, &records).map(|_| ())
    }

    /// Appends a GroupMetadata record.
    fn store_group(broker: &Broker, group: &str, record: &GroupMetadata) -> Result<(), ApiError> {
        let value = store::group_value(record).ok_or_else(|| {
            ApiError::new(
                ErrorCode::UnknownServerError,
                "a group metadata field is too long for Kafka's record layout",
            )
        })?;
        Self::persist(broker, group, &[(store::group_key(group), Some(value))]).map(|_| ())
    }

    /// Appends the group's record if its state machine asked for one (it became empty, or a
    /// static member was replaced). A failure is logged: the change stands in memory and the
    /// log keeps the previous record, which a restart would bring back.
    fn store_if_asked(broker: &Broker, id: &str, entry: &mut Entry) {
        let Some(group) = entry.group.as_mut() else {
            return;
        };
        if !group.take_store() {
            return;
        }
        let now = crate::partition::now_ms();
        if group.is_empty() {
            entry.last_active_ms = now;
        }
        if let Err(e) = Self::store_group(broker, id, &group.metadata(now)) {
            tracing::error!(group = id, error = %e, "cannot persist group metadata");
        }
    }

    pub fn join(&self, broker: &Broker, group_id: &str, req: JoinRequest) -> Reply<JoinResult> {
        let mut groups = self.lock();
        let entry = groups.entry(group_id.to_string()).or_default();
        let group = entry.group.get_or_insert_with(|| Group::new(group_id));
        if group.state == GroupState::Dead {
            *group = Group::new(group_id);
        }
        group.initial_rebalance_delay =
            std::time::Duration::from_millis(broker.config.group_initial_rebalance_delay_ms);
        let reply = group.join(req, Instant::now());
        // A join is activity: a group that only handed out a member id is not expired before
        // the member comes back with it.
        entry.last_active_ms = crate::partition::now_ms();
        Self::store_if_asked(broker, group_id, entry);
        reply
    }

    /// SyncGroup; the leader's is answered only after the generation's record is appended.
    pub fn sync(
        &self,
        broker: &Broker,
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
        let now_ms = crate::partition::now_ms();
        group.sync(
            member_id,
            generation,
            assignments,
            Instant::now(),
            now_ms,
            |record| {
                let generation = record.generation;
                Self::store_group(broker, group_id, &record).map_err(|e| {
                    tracing::error!(group = group_id, generation, error = %e, "cannot persist the group's assignment; rebalancing");
                    store_error(e.code)
                })
            },
        )
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
    pub fn leave(
        &self,
        broker: &Broker,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Vec<ErrorCode> {
        let mut groups = self.lock();
        let Some(entry) = groups.get_mut(group_id) else {
            return members.iter().map(|_| ErrorCode::UnknownMemberId).collect();
        };
        let Some(group) = entry.group.as_mut() else {
            return members.iter().map(|_| ErrorCode::UnknownMemberId).collect();
        };
        let now = Instant::now();
        let codes = members
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
            .collect();
        Self::store_if_asked(broker, group_id, entry);
        codes
    }

    /// Validates the committer and appends the commits; one error per commit, and the
    /// appended commits, which [`Coordinator::complete_commit`] acknowledges once the ISR has
    /// them.
    pub fn commit(
        &self,
        broker: &Broker,
        group_id: &str,
        member_id: &str,
        generation: i32,
        commits: Vec<Commit>,
    ) -> (Vec<ErrorCode>, Option<PendingCommit>) {
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
            return (commits.iter().map(|_| code).collect(), None);
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
        if records.is_empty() {
            return (errors, None);
        }
        match Self::persist(broker, group_id, &records) {
            Err(e) => {
                tracing::error!(group = group_id, error = %e, "cannot persist offset commit");
                let code = commit_error(e.code);
                (errors.iter().map(|_| code).collect(), None)
            }
            Ok((partition, leader_epoch, last_offset)) => (
                errors,
                Some(PendingCommit {
                    group: group_id.to_string(),
                    partition,
                    last_offset,
                    leader_epoch,
                    accepted,
                }),
            ),
        }
    }

    /// Waits until the ISR holds an appended commit, then makes it visible. `Err` is the
    /// error for every commit it carried.
    pub async fn complete_commit(&self, pending: PendingCommit) -> Result<(), ErrorCode> {
        let PendingCommit {
            group,
            partition,
            last_offset,
            leader_epoch,
            accepted,
        } = pending;
        partition
            .wait_committed(last_offset, leader_epoch, COMMIT_TIMEOUT)
            .await
            .map_err(commit_error)?;
        // Still ours: a group whose partition moved meanwhile is the new coordinator's, which
        // loads this commit from the log.
        let p = store::partition_for(&group);
        if self.loaded_lock().get(&p) != Some(&leader_epoch) {
            return Err(ErrorCode::NotCoordinator);
        }
        let mut groups = self.lock();
        let entry = groups.entry(group).or_default();
        for c in accepted {
            entry.offsets.insert((c.topic, c.partition), c.offset);
        }
        Ok(())
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
                // Mid-rebalance, Kafka lists the members without metadata or assignment.
                let stable = g.state == GroupState::Stable;
                let members = g
                    .members
                    .values()
                    .map(|m| {
                        let (meta, assignment) = if stable {
                            let meta = m
                                .protocols
                                .iter()
                                .find(|(n, _)| *n == protocol)
                                .map(|(_, b)| b.clone())
                                .unwrap_or_default();
                            (meta, m.assignment.clone())
                        } else {
                            (Bytes::new(), Bytes::new())
                        };
                        (
                            m.id.clone(),
                            m.instance_id.clone(),
                            m.client_id.clone(),
                            m.client_host.clone(),
                            meta,
                            assignment,
                        )
                    })
                    .collect();
                GroupView {
                    state: g.state.name(),
                    protocol_type: g.protocol_type.clone().unwrap_or_default(),
                    protocol,
                    members,
                }
            }
        }
    }

    /// DeleteGroups: only a group without members; its offsets and its metadata record are
    /// tombstoned.
    pub fn delete(&self, broker: &Broker, group_id: &str) -> ErrorCode {
        let mut groups = self.lock();
        let Some(entry) = groups.get(group_id) else {
            return ErrorCode::GroupIdNotFound;
        };
        if entry.group.as_ref().is_some_and(|g| !g.is_empty()) {
            return ErrorCode::NonEmptyGroup;
        }
        if let Err(e) = Self::tombstone(
            broker,
            group_id,
            entry.offsets.keys(),
            entry.group.is_some(),
        ) {
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
            Self::tombstone(broker, group_id, doomed.iter().copied(), false).map_err(|e| e.code)?;
            for (t, p) in doomed {
                entry.offsets.remove(&(t.clone(), *p));
            }
        }
        Ok(codes)
    }

    /// Deletes groups that have been empty for longer than `retention_ms` (KIP-211's clock:
    /// from the later of the newest commit and the last time the group had members): their
    /// committed offsets and metadata record are tombstoned, and the group is gone, as when
    /// Kafka's offset expiry leaves an empty group without offsets. Returns how many groups
    /// expired.
    pub fn expire_offsets(&self, broker: &Broker, now_ms: i64, retention_ms: i64) -> usize {
        let mut groups = self.lock();
        let expired: Vec<String> = groups
            .iter()
            .filter(|(_, e)| e.group.as_ref().is_none_or(|g| g.is_empty()))
            .filter(|(_, e)| {
                (!e.offsets.is_empty() || e.group.is_some())
                    && offsets_expired(&e.offsets, e.last_active_ms, now_ms, retention_ms)
            })
            .map(|(id, _)| id.clone())
            .collect();
        let mut done = 0;
        for id in expired {
            let Some(entry) = groups.get(&id) else {
                continue;
            };
            match Self::tombstone(broker, &id, entry.offsets.keys(), entry.group.is_some()) {
                Ok(()) => {
                    tracing::info!(group = %id, partitions = entry.offsets.len(), "empty group and its committed offsets expired (offsets_retention_minutes)");
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

    /// Session expiry and rebalance deadlines; called every 100 ms.
    pub fn tick(&self, broker: &Broker) {
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
            Self::store_if_asked(broker, id, entry);
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

    fn offset(group: &str, partition: i32, value: Option<i64>) -> store::Entry {
        store::Entry::Offset {
            group: group.into(),
            topic: "t".into(),
            partition,
            value: value.map(|offset| CommittedOffset {
                offset,
                leader_epoch: -1,
                metadata: String::new(),
                commit_timestamp: 1,
            }),
        }
    }

    fn record(generation: i32, members: &[(&str, &'static [u8])], ts: i64) -> GroupMetadata {
        GroupMetadata {
            protocol_type: "consumer".into(),
            generation,
            protocol: (!members.is_empty()).then(|| "range".to_string()),
            leader: members.first().map(|(m, _)| m.to_string()),
            current_state_timestamp: ts,
            members: members
                .iter()
                .map(|(m, a)| store::MemberMetadata {
                    member_id: m.to_string(),
                    group_instance_id: None,
                    client_id: format!("client-{m}"),
                    client_host: "/127.0.0.1".into(),
                    rebalance_timeout: 30_000,
                    session_timeout: 6_000,
                    subscription: Bytes::from_static(b"sub"),
                    assignment: Bytes::from_static(a),
                })
                .collect(),
        }
    }

    fn group(id: &str, value: Option<GroupMetadata>) -> store::Entry {
        store::Entry::Group {
            group: id.into(),
            value,
        }
    }

    #[test]
    fn loading_replays_records_in_order_and_tombstones_delete() {
        let mut r = Rebuild::default();
        for e in [
            // g1: two generations; the later one wins.
            offset("g1", 0, Some(5)),
            group("g1", Some(record(1, &[("m1", b"a1")], 10))),
            group("g1", Some(record(2, &[("m1", b"a1"), ("m2", b"a2")], 20))),
            offset("g1", 0, Some(9)),
            // g2: deleted (offsets and metadata tombstoned).
            group("g2", Some(record(3, &[("x", b"")], 10))),
            offset("g2", 0, Some(1)),
            offset("g2", 0, None),
            group("g2", None),
            // g3: deleted, then re-created and emptied at generation 7.
            group("g3", Some(record(4, &[("y", b"")], 10))),
            group("g3", None),
            group("g3", Some(record(7, &[], 1_234))),
            offset("g3", 1, Some(3)),
            // g4: simple commits only; g5: a stable group that later became empty.
            offset("g4", 2, Some(8)),
            group("g5", Some(record(1, &[("z", b"")], 10))),
            group("g5", Some(record(2, &[], 50))),
            store::Entry::Other,
        ] {
            r.apply(e);
        }
        let now = Instant::now();
        let table = r.finish(now, 99_000);
        let mut ids: Vec<&String> = table.keys().collect();
        ids.sort();
        assert_eq!(ids, ["g1", "g3", "g4", "g5"]);

        let g1 = &table["g1"];
        let g = g1.group.as_ref().unwrap();
        assert_eq!((g.state, g.generation), (GroupState::Stable, 2));
        assert_eq!(g.leader.as_deref(), Some("m1"));
        assert_eq!(g.members.len(), 2);
        assert_eq!(g.members["m2"].assignment, Bytes::from_static(b"a2"));
        assert_eq!(g1.offsets[&("t".to_string(), 0)].offset, 9);
        assert_eq!(g1.last_active_ms, 99_000, "a stable group is active now");

        let g3 = &table["g3"];
        let g = g3.group.as_ref().unwrap();
        assert_eq!((g.state, g.generation), (GroupState::Empty, 7));
        assert_eq!(
            g3.last_active_ms, 1_234,
            "empty since its record was written"
        );
        assert_eq!(g3.offsets.len(), 1);

        assert!(table["g4"].group.is_none());
        let g = table["g5"].group.as_ref().unwrap();
        assert_eq!((g.state, g.generation), (GroupState::Empty, 2));
        assert!(table["g5"].offsets.is_empty());
    }

    #[test]
    fn loaded_groups_are_listed_and_described_as_they_were() {
        let mut r = Rebuild::default();
        r.apply(group(
            "g1",
            Some(record(4, &[("m1", b"a1"), ("m2", b"a2")], 10)),
        ));
        r.apply(group("g2", Some(record(9, &[], 10))));
        let c = Coordinator::default();
        *c.lock() = r.finish(Instant::now(), 0);
        assert_eq!(
            c.list(),
            vec![
                ("g1".to_string(), "consumer".to_string(), "Stable"),
                ("g2".to_string(), "consumer".to_string(), "Empty"),
            ]
        );
        let view = c.describe("g1");
        assert_eq!(
            (
                view.state,
                view.protocol_type.as_str(),
                view.protocol.as_str()
            ),
            ("Stable", "consumer", "range")
        );
        let members: Vec<(String, String, Bytes, Bytes)> = view
            .members
            .into_iter()
            .map(|(id, _, client, _, meta, assignment)| (id, client, meta, assignment))
            .collect();
        assert_eq!(
            members,
            vec![
                (
                    "m1".to_string(),
                    "client-m1".to_string(),
                    Bytes::from_static(b"sub"),
                    Bytes::from_static(b"a1")
                ),
                (
                    "m2".to_string(),
                    "client-m2".to_string(),
                    Bytes::from_static(b"sub"),
                    Bytes::from_static(b"a2")
                ),
            ]
        );
        assert_eq!(c.heartbeat("g1", "m2", 4, None), ErrorCode::None);
        assert_eq!(
            c.heartbeat("g1", "m2", 3, None),
            ErrorCode::IllegalGeneration
        );
        assert_eq!(c.describe("g2").state, "Empty");
    }
}
