//! The replicated cluster metadata and the pure function that applies commands to it.
//!
//! Invariants:
//! - [`ClusterState::apply`] is deterministic: it reads nothing but the state and the command
//!   (no clock, no randomness, no I/O, no hash-order iteration — every map is a `BTreeMap`), so
//!   every replica that applies the same log reaches byte-identical state.
//! - A rejected command leaves the state untouched (validation happens before any mutation).
//! - Every partition's replica list is non-empty, duplicate-free and names registered brokers
//!   (at the time it was assigned). The partitions of a topic are created with the same number
//!   of replicas; a reassignment may change one partition's ([`crate::reassignment`]).
//! - Topic names and topic ids are both unique, so [`ClusterState::topic_by_id`] is unambiguous.
//! - `next_producer_id` only increases; producer id blocks never overlap.
//! - Leader epochs and partition epochs only increase (invariant 6 of the design); see
//!   [`crate::leadership`] for the commands that move them.
//! - Broker epochs are unique: each registration gets one above every epoch issued before.
//! - Topics and partitions are shared between successive states (`Arc`): a command copies
//!   only the topics and partitions it changes, so applying one costs what it changes, not
//!   the size of the cluster, and a reader may tell an unchanged topic or partition from a
//!   changed one by pointer ([`Arc::ptr_eq`]). A command that changes nothing (rejected, or a
//!   no-op) copies nothing.
//! - `topic_ids` indexes `topics` by topic id exactly (kept by the only two commands that add
//!   or remove topics, and rebuilt when a state is decoded).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::acl::AclBinding;
use crate::command::{Command, CommandResult, Endpoint, NodeId, ScramCredential};
use crate::quota::{QuotaEntity, QuotaKey};

/// The first producer id handed out by a fresh cluster. Ids below it are never allocated, which
/// leaves room for well-known or test ids and keeps `0` (a common "unset" value) out of use.
pub const FIRST_PRODUCER_ID: i64 = 1000;

/// Kafka numbers partitions with an `i32`; a topic can never have more partitions than that.
const MAX_PARTITIONS: usize = i32::MAX as usize;

/// The whole cluster metadata: the state machine replicated by the raft quorum.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(from = "StoredState")]
pub struct ClusterState {
    /// Registered brokers by node id.
    pub brokers: BTreeMap<NodeId, BrokerInfo>,
    /// Topics by name.
    pub topics: BTreeMap<String, Arc<TopicInfo>>,
    /// Topic names by topic id.
    #[serde(skip)]
    topic_ids: BTreeMap<uuid::Uuid, String>,
    /// The first producer id of the next block [`Command::AllocateProducerIds`] hands out.
    /// [`ClusterState::default`] sets it to [`FIRST_PRODUCER_ID`].
    pub next_producer_id: i64,
    /// The last broker epoch handed out by [`Command::RegisterBroker`].
    #[serde(default)]
    pub broker_epochs_issued: i64,
    /// Unclean leader elections so far (each may have lost records): shown by every node.
    #[serde(default)]
    pub unclean_leader_elections: u64,
    /// Credentials (and, with the authorizer, ACLs): see [`crate::security`].
    #[serde(default)]
    pub security: Arc<SecurityState>,
    /// Dynamic broker configs by resource: `""` holds the cluster-wide defaults, a broker id
    /// that broker's own; each maps Kafka config names to values. No empty map is kept.
    #[serde(default)]
    pub broker_configs: Arc<BTreeMap<String, BTreeMap<String, String>>>,
    /// Dynamic group configs by group id (Kafka config names to values). No empty map is kept.
    #[serde(default)]
    pub group_configs: Arc<BTreeMap<String, BTreeMap<String, String>>>,
    /// Share-partition start offsets set by an operator, by share group: the latest of each
    /// share partition (see [`ShareReset`]).
    #[serde(default)]
    pub share_resets: Arc<BTreeMap<String, Vec<ShareReset>>>,
}

/// Where an operator set a share partition to start (AlterShareGroupOffsets), or that its
/// state was deleted (DeleteShareGroupOffsets: no offset). The partition's leader applies it
/// to the share partition when the state it holds has an older state epoch, and writes it with
/// this one.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ShareReset {
    pub topic_id: uuid::Uuid,
    pub partition: i32,
    /// Greater than that of every earlier reset of the share partition (the first is 1).
    pub state_epoch: i32,
    pub start_offset: Option<i64>,
}

impl Default for ClusterState {
    /// An empty cluster: no brokers, no topics, producer ids starting at [`FIRST_PRODUCER_ID`].
    fn default() -> Self {
        ClusterState {
            brokers: BTreeMap::new(),
            topics: BTreeMap::new(),
            topic_ids: BTreeMap::new(),
            next_producer_id: FIRST_PRODUCER_ID,
            broker_epochs_issued: 0,
            unclean_leader_elections: 0,
            security: Arc::default(),
            broker_configs: Arc::default(),
            group_configs: Arc::default(),
            share_resets: Arc::default(),
        }
    }
}

/// [`ClusterState`] as encoded: everything but the index, which is rebuilt from the topics.
#[derive(Deserialize)]
struct StoredState {
    brokers: BTreeMap<NodeId, BrokerInfo>,
    topics: BTreeMap<String, Arc<TopicInfo>>,
    next_producer_id: i64,
    #[serde(default)]
    broker_epochs_issued: i64,
    #[serde(default)]
    unclean_leader_elections: u64,
    #[serde(default)]
    security: Arc<SecurityState>,
    #[serde(default)]
    broker_configs: Arc<BTreeMap<String, BTreeMap<String, String>>>,
    #[serde(default)]
    group_configs: Arc<BTreeMap<String, BTreeMap<String, String>>>,
    #[serde(default)]
    share_resets: Arc<BTreeMap<String, Vec<ShareReset>>>,
}

impl From<StoredState> for ClusterState {
    fn from(s: StoredState) -> ClusterState {
        ClusterState {
            topic_ids: s
                .topics
                .values()
                .map(|t| (t.topic_id, t.name.clone()))
                .collect(),
            brokers: s.brokers,
            topics: s.topics,
            next_producer_id: s.next_producer_id,
            broker_epochs_issued: s.broker_epochs_issued,
            unclean_leader_elections: s.unclean_leader_elections,
            security: s.security,
            broker_configs: s.broker_configs,
            group_configs: s.group_configs,
            share_resets: s.share_resets,
        }
    }
}

/// A registered broker.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BrokerInfo {
    pub node_id: NodeId,
    pub host: String,
    pub port: u16,
    pub rack: Option<String>,
    /// Every listener's advertised endpoint; `host`/`port` are the inter-broker listener's.
    #[serde(default)]
    pub listeners: Vec<Endpoint>,
    /// Epoch of the broker's current registration: a heartbeat or fence naming another epoch
    /// is about an earlier incarnation of the process.
    #[serde(default)]
    pub epoch: i64,
    /// A fenced broker leads nothing and is out of every ISR it can leave: it registered and
    /// has not heartbeated since, or missed heartbeats for the session timeout, or is shutting
    /// down.
    #[serde(default)]
    pub fenced: bool,
    /// Log directories that failed in this registration (KIP-858); their replicas are
    /// [`PartitionInfo::offline`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub offline_log_dirs: Vec<String>,
    /// Its admin HTTP port's advertised `host:port` (see [`Command::RegisterBroker`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<String>,
}

/// Who may do what, and how much of a broker a client may use; changed by
/// [`crate::security`].
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SecurityState {
    /// Credentials by user, then by mechanism name (`SCRAM-SHA-256`, `SCRAM-SHA-512`).
    pub scram: BTreeMap<String, BTreeMap<String, ScramCredential>>,
    /// Every ACL, in one order on every node.
    #[serde(default)]
    pub acls: BTreeSet<AclBinding>,
    /// Client quotas by entity (never an empty map of quotas).
    #[serde(default, with = "crate::quota::entries")]
    pub quotas: BTreeMap<QuotaEntity, BTreeMap<QuotaKey, f64>>,
}

impl BrokerInfo {
    /// The broker's endpoint on listener `name`; a broker registered before listeners existed
    /// has one, under any name.
    pub fn endpoint(&self, name: &str) -> Option<(&str, u16)> {
        if self.listeners.is_empty() {
            return Some((&self.host, self.port));
        }
        self.listeners
            .iter()
            .find(|e| e.name == name)
            .map(|e| (e.host.as_str(), e.port))
    }
}

/// A topic and its partitions.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TopicInfo {
    pub name: String,
    pub topic_id: uuid::Uuid,
    /// Partition `i` is `partitions[i]`.
    pub partitions: Vec<Arc<PartitionInfo>>,
    /// Topic-level config overrides (Kafka names); absent keys take the broker default.
    pub configs: BTreeMap<String, String>,
    /// The topic's Iceberg table, once it exists (see [`Command::CommitIcebergTable`]).
    #[serde(default)]
    pub iceberg: Option<IcebergTable>,
    /// The topic's dead-letter table (`iceberg.mode=value_json`: the records whose values do
    /// not fit the schema), once one was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iceberg_dlq: Option<IcebergTable>,
}

/// Where a topic's Iceberg table is and how far each partition is in it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct IcebergTable {
    /// The table's current metadata file (its full URI).
    pub location: String,
    /// By partition: the offset after the last one the table holds (every offset below it,
    /// from the partition's first commit on, is in the table or was not translatable).
    pub next_offsets: BTreeMap<i32, i64>,
}

impl TopicInfo {
    /// [`Command::CommitIcebergTable`] on this topic: checked whole before anything changes.
    fn commit_iceberg(
        &mut self,
        dlq: bool,
        table_offsets: &BTreeMap<i32, i64>,
        expected: Option<&str>,
        location: Option<&str>,
        ranges: &[crate::command::IcebergRange],
    ) -> CommandResult {
        let partitions = self.partitions.len();
        if dlq {
            // Sorted from the table as it still is, or not at all.
            let table = self.iceberg.as_ref().map(|t| &t.next_offsets);
            for r in ranges {
                let next = table.and_then(|t| t.get(&r.partition).copied());
                if self.iceberg.is_none() || next != table_offsets.get(&r.partition).copied() {
                    return CommandResult::IcebergOffsetsMoved {
                        partition: r.partition,
                        next,
                    };
                }
            }
        }
        let table = match dlq {
            false => &mut self.iceberg,
            true => &mut self.iceberg_dlq,
        };
        let current = table.as_ref().map(|t| t.location.as_str());
        if current != expected {
            return CommandResult::IcebergConflict {
                current: current.map(str::to_string),
            };
        }
        let Some(location) = location else {
            *table = None;
            if !dlq {
                self.iceberg_dlq = None;
            }
            return CommandResult::Ok;
        };
        let mut next_offsets = (table.as_ref())
            .map(|t| t.next_offsets.clone())
            .unwrap_or_default();
        for r in ranges {
            let next = next_offsets.get(&r.partition).copied();
            let known = usize::try_from(r.partition).is_ok_and(|p| p < partitions);
            if !known || r.from > r.to || next.is_some_and(|n| n != r.from) {
                return CommandResult::IcebergOffsetsMoved {
                    partition: r.partition,
                    next,
                };
            }
            next_offsets.insert(r.partition, r.to);
        }
        *table = Some(IcebergTable {
            location: location.to_string(),
            next_offsets,
        });
        CommandResult::Ok
    }
}

/// One partition's replica set and leadership.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct PartitionInfo {
    /// Assigned replicas; the first is the preferred leader.
    pub replicas: Vec<NodeId>,
    /// Current leader, `None` if the partition is offline.
    pub leader: Option<NodeId>,
    /// In-sync replicas.
    pub isr: Vec<NodeId>,
    /// Bumped on every leader change.
    pub leader_epoch: i32,
    /// Bumped on every change of replicas, ISR or leader.
    pub partition_epoch: i32,
    /// Segments offloaded to the object store, in offset order (see [`crate::remote`]).
    #[serde(default)]
    pub remote: Vec<crate::command::RemoteSegment>,
    /// Records below this offset are deleted (retention or DeleteRecords reaching into the
    /// remote log), even where a remote segment still holds some of them.
    #[serde(default)]
    pub log_start_floor: i64,
    /// A reassignment in progress (KIP-455): replicas being added. They are in `replicas`
    /// (after the original ones) and join the ISR by catching up like any follower.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adding: Vec<NodeId>,
    /// A reassignment in progress: replicas that leave once every adding replica is in sync.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removing: Vec<NodeId>,
    /// Replicas whose broker lost the log directory holding them (KIP-858): never elected,
    /// out of the ISR unless the last member, until their broker registers again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub offline: Vec<NodeId>,
}

impl PartitionInfo {
    /// A new partition: every replica in sync, led by the first replica that is not fenced,
    /// epochs 0.
    fn new(replicas: Vec<NodeId>, brokers: &BTreeMap<NodeId, BrokerInfo>) -> Self {
        PartitionInfo {
            leader: replicas
                .iter()
                .copied()
                .find(|r| brokers.get(r).is_some_and(|b| !b.fenced)),
            isr: replicas.clone(),
            replicas,
            leader_epoch: 0,
            partition_epoch: 0,
            remote: Vec::new(),
            log_start_floor: 0,
            adding: Vec::new(),
            removing: Vec::new(),
            offline: Vec::new(),
        }
    }
}

impl ClusterState {
    /// The topic named `name`.
    pub fn topic(&self, name: &str) -> Option<&TopicInfo> {
        self.topics.get(name).map(|t| &**t)
    }

    /// Partition `partition` of the topic named `topic` (`None`: no such topic or partition).
    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionInfo> {
        let i = usize::try_from(partition).ok()?;
        self.topic(topic)?.partitions.get(i).map(|p| &**p)
    }

    /// The topic whose id is `id`.
    pub fn topic_by_id(&self, id: &uuid::Uuid) -> Option<&TopicInfo> {
        self.topics.get(self.topic_ids.get(id)?).map(|t| &**t)
    }

    /// The topic named `name`, to change: copied first if an earlier state shares it.
    pub(crate) fn topic_mut(&mut self, name: &str) -> Option<&mut TopicInfo> {
        self.topics.get_mut(name).map(Arc::make_mut)
    }

    /// Applies `change` to every partition for which `wants` holds, copying only those (and
    /// their topics): the others stay shared with earlier states.
    pub(crate) fn change_partitions(
        &mut self,
        wants: impl Fn(&PartitionInfo) -> bool,
        mut change: impl FnMut(&mut PartitionInfo),
    ) {
        for topic in self.topics.values_mut() {
            if !topic.partitions.iter().any(|p| wants(p)) {
                continue;
            }
            for p in Arc::make_mut(topic).partitions.iter_mut() {
                if wants(p) {
                    change(Arc::make_mut(p));
                }
            }
        }
    }

    /// Applies `cmd`, returning what happened. Pure and deterministic; a rejected command
    /// changes nothing.
    pub fn apply(&mut self, cmd: &Command) -> CommandResult {
        match cmd {
            Command::RegisterBroker {
                node_id,
                host,
                port,
                rack,
                listeners,
                admin,
            } => self.register_broker(*node_id, host, *port, rack, listeners, admin),
            Command::FenceBroker { node_id, epoch } => self.fence_broker(*node_id, *epoch),
            Command::UnfenceBroker { node_id, epoch } => self.unfence_broker(*node_id, *epoch),
            Command::ElectUncleanLeader {
                topic_id,
                partition,
            } => self.elect_unclean(topic_id, *partition),
            Command::ElectPreferredLeaders { partitions } => self.elect_preferred(partitions),
            Command::AlterPartition {
                topic_id,
                partition,
                leader,
                leader_epoch,
                partition_epoch,
                isr,
            } => self.alter_partition(
                topic_id,
                *partition,
                *leader,
                (*leader_epoch, *partition_epoch),
                isr,
            ),
            Command::AlterPartitions { changes } => CommandResult::Each(
                changes
                    .iter()
                    .map(|c| {
                        self.alter_partition(
                            &c.topic_id,
                            c.partition,
                            c.leader,
                            (c.leader_epoch, c.partition_epoch),
                            &c.isr,
                        )
                    })
                    .collect(),
            ),
            Command::CreateTopic {
                name,
                topic_id,
                replicas,
                configs,
            } => {
                if self.topics.contains_key(name) || self.topic_ids.contains_key(topic_id) {
                    return CommandResult::TopicAlreadyExists;
                }
                if replicas.is_empty() {
                    return CommandResult::InvalidPartitions(
                        "a topic needs at least one partition".to_string(),
                    );
                }
                if replicas.len() > MAX_PARTITIONS {
                    return CommandResult::InvalidPartitions(format!(
                        "{} partitions is more than the maximum {MAX_PARTITIONS}",
                        replicas.len()
                    ));
                }
                if let Err(reason) = self.check_assignment(replicas, 0, None) {
                    return CommandResult::InvalidReplicaAssignment(reason);
                }
                self.topics.insert(
                    name.clone(),
                    Arc::new(TopicInfo {
                        name: name.clone(),
                        topic_id: *topic_id,
                        partitions: replicas
                            .iter()
                            .map(|r| Arc::new(PartitionInfo::new(r.clone(), &self.brokers)))
                            .collect(),
                        configs: configs.clone(),
                        iceberg: None,
                        iceberg_dlq: None,
                    }),
                );
                self.topic_ids.insert(*topic_id, name.clone());
                CommandResult::Ok
            }
            Command::DeleteTopic { name } => match self.topics.remove(name) {
                Some(t) => {
                    self.topic_ids.remove(&t.topic_id);
                    self.forget_share_resets(&t.topic_id);
                    CommandResult::Ok
                }
                None => CommandResult::UnknownTopic,
            },
            Command::CreatePartitions { name, new_replicas } => {
                let Some(topic) = self.topics.get(name) else {
                    return CommandResult::UnknownTopic;
                };
                let existing = topic.partitions.len();
                if new_replicas.is_empty() {
                    return CommandResult::InvalidPartitions(format!(
                        "topic {name} already has {existing} partitions; the new count must be greater"
                    ));
                }
                if new_replicas.len() > MAX_PARTITIONS - existing.min(MAX_PARTITIONS) {
                    return CommandResult::InvalidPartitions(format!(
                        "{existing} + {} partitions is more than the maximum {MAX_PARTITIONS}",
                        new_replicas.len()
                    ));
                }
                let replication_factor = topic.partitions.first().map(|p| p.replication_factor());
                if let Err(reason) =
                    self.check_assignment(new_replicas, existing, replication_factor)
                {
                    return CommandResult::InvalidReplicaAssignment(reason);
                }
                let new: Vec<Arc<PartitionInfo>> = new_replicas
                    .iter()
                    .map(|r| Arc::new(PartitionInfo::new(r.clone(), &self.brokers)))
                    .collect();
                if let Some(topic) = self.topic_mut(name) {
                    topic.partitions.extend(new);
                }
                CommandResult::Ok
            }
            Command::AlterTopicConfig { name, set, delete } => {
                let Some(topic) = self.topic_mut(name) else {
                    return CommandResult::UnknownTopic;
                };
                for (key, value) in set {
                    topic.configs.insert(key.clone(), value.clone());
                }
                for key in delete {
                    topic.configs.remove(key);
                }
                CommandResult::Ok
            }
            Command::CommitIcebergTable {
                topic_id,
                dlq,
                table_offsets,
                expected,
                location,
                ranges,
            } => {
                let Some(name) = self.topic_ids.get(topic_id).cloned() else {
                    return CommandResult::UnknownTopic;
                };
                let Some(topic) = self.topic_mut(&name) else {
                    return CommandResult::UnknownTopic;
                };
                topic.commit_iceberg(
                    *dlq,
                    table_offsets,
                    expected.as_deref(),
                    location.as_deref(),
                    ranges,
                )
            }
            Command::AllocateProducerIds { count } => {
                let first = self.next_producer_id;
                // Never wraps: if fewer than `count` ids remain, grant what remains (unreachable
                // in practice — it would take 2^63 ids).
                let remaining = u64::try_from(i64::MAX - first).unwrap_or(0);
                let granted = (*count).min(remaining);
                // `granted <= i64::MAX - first`, so this neither fails nor overflows.
                self.next_producer_id = first + i64::try_from(granted).unwrap_or(0);
                CommandResult::ProducerIds {
                    first,
                    count: granted,
                }
            }
            Command::CommitRemoteSegment {
                topic_id,
                partition,
                segment,
            } => self.commit_remote_segment(topic_id, *partition, segment),
            Command::MarkRemoteSegmentsDeleting {
                topic_id,
                partition,
                before_offset,
            } => self.mark_remote_deleting(topic_id, *partition, *before_offset),
            Command::DropRemoteSegments {
                topic_id,
                partition,
                ids,
            } => self.drop_remote_segments(topic_id, *partition, ids),
            Command::ReassignPartition {
                topic,
                partition,
                target,
            } => self.reassign(topic, *partition, target.as_deref()),
            Command::UnregisterBroker { node_id } => self.unregister_broker(*node_id),
            Command::UpsertScramCredential {
                user,
                mechanism,
                credential,
            } => self.upsert_scram(user, mechanism, credential),
            Command::DeleteScramCredential { user, mechanism } => {
                self.delete_scram(user, mechanism)
            }
            Command::CreateAcls { acls } => self.create_acls(acls),
            Command::DeleteAcls { acls } => self.delete_acls(acls),
            Command::AlterClientQuotas { alterations } => self.alter_quotas(alterations),
            Command::AlterBrokerConfig {
                resource,
                set,
                delete,
            } => self.alter_broker_config(resource, set, delete),
            Command::AlterGroupConfig { group, set, delete } => {
                alter_configs(&mut self.group_configs, group, set, delete);
                CommandResult::Ok
            }
            Command::ResetShareOffsets { group, offsets } => {
                self.reset_share_offsets(group, offsets);
                CommandResult::Ok
            }
            Command::FailLogDir {
                node_id,
                epoch,
                dir,
                partitions,
            } => self.fail_log_dir(*node_id, *epoch, dir, partitions),
        }
    }

    /// The dynamic configs of `resource` (`""`: cluster-wide defaults, else a broker id).
    pub fn broker_config(&self, resource: &str) -> Option<&BTreeMap<String, String>> {
        self.broker_configs.get(resource)
    }

    fn alter_broker_config(
        &mut self,
        resource: &str,
        set: &BTreeMap<String, String>,
        delete: &[String],
    ) -> CommandResult {
        if !resource.is_empty() && resource.parse::<NodeId>().is_err() {
            return CommandResult::InvalidRequest(format!(
                "broker config resource '{resource}' is neither empty (cluster-wide) nor a broker id"
            ));
        }
        if set.is_empty()
            && delete.iter().all(|k| {
                self.broker_config(resource)
                    .is_none_or(|c| !c.contains_key(k))
            })
        {
            return CommandResult::Ok;
        }
        alter_configs(&mut self.broker_configs, resource, set, delete);
        CommandResult::Ok
    }

    /// The dynamic configs of group `group`.
    pub fn group_config(&self, group: &str) -> Option<&BTreeMap<String, String>> {
        self.group_configs.get(group)
    }

    /// The latest reset of share group `group`'s share partition of (`topic_id`, `partition`).
    pub fn share_reset(
        &self,
        group: &str,
        topic_id: &uuid::Uuid,
        partition: i32,
    ) -> Option<&ShareReset> {
        (self.share_resets.get(group)?.iter())
            .find(|r| r.topic_id == *topic_id && r.partition == partition)
    }

    /// A deleted topic's share resets go with it (a topic made again has another id).
    fn forget_share_resets(&mut self, topic_id: &uuid::Uuid) {
        let named = |r: &ShareReset| r.topic_id == *topic_id;
        if !self.share_resets.values().flatten().any(named) {
            return;
        }
        let all = Arc::make_mut(&mut self.share_resets);
        for resets in all.values_mut() {
            resets.retain(|r| !named(r));
        }
        all.retain(|_, resets| !resets.is_empty());
    }

    fn reset_share_offsets(&mut self, group: &str, offsets: &[(uuid::Uuid, i32, Option<i64>)]) {
        let all = Arc::make_mut(&mut self.share_resets);
        let resets = all.entry(group.to_string()).or_default();
        for &(topic_id, partition, start_offset) in offsets {
            match (resets.iter_mut()).find(|r| r.topic_id == topic_id && r.partition == partition) {
                Some(r) => {
                    r.state_epoch = r.state_epoch.saturating_add(1);
                    r.start_offset = start_offset;
                }
                None => resets.push(ShareReset {
                    topic_id,
                    partition,
                    state_epoch: 1,
                    start_offset,
                }),
            }
        }
    }

    /// Checks replica lists for partitions numbered from `first_partition`: each must be
    /// non-empty, duplicate-free, name only registered brokers, and have the same length as
    /// the others (and as `replication_factor`, if the topic already has partitions).
    pub fn check_assignment(
        &self,
        assignment: &[Vec<NodeId>],
        first_partition: usize,
        replication_factor: Option<usize>,
    ) -> Result<(), String> {
        let expected = replication_factor.or_else(|| assignment.first().map(Vec::len));
        for (i, replicas) in assignment.iter().enumerate() {
            let partition = first_partition + i;
            if replicas.is_empty() {
                return Err(format!("partition {partition} has no replicas"));
            }
            let mut seen = BTreeSet::new();
            for broker in replicas {
                if !seen.insert(*broker) {
                    return Err(format!(
                        "partition {partition} lists broker {broker} more than once"
                    ));
                }
                if !self.brokers.contains_key(broker) {
                    return Err(format!(
                        "partition {partition} names broker {broker}, which is not registered"
                    ));
                }
            }
            if let Some(expected) = expected {
                if replicas.len() != expected {
                    return Err(format!(
                        "partition {partition} has {} replicas but the topic's replication factor is {expected}",
                        replicas.len()
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Sets `set` and removes `delete` in the configs of `resource`, dropping a map left empty;
/// copies nothing when nothing changes.
fn alter_configs(
    all: &mut Arc<BTreeMap<String, BTreeMap<String, String>>>,
    resource: &str,
    set: &BTreeMap<String, String>,
    delete: &[String],
) {
    let unchanged = set
        .iter()
        .all(|(k, v)| all.get(resource).and_then(|c| c.get(k)) == Some(v))
        && delete
            .iter()
            .all(|k| all.get(resource).is_none_or(|c| !c.contains_key(k)));
    if unchanged {
        return;
    }
    let all = Arc::make_mut(all);
    let configs = all.entry(resource.to_string()).or_default();
    configs.extend(set.iter().map(|(k, v)| (k.clone(), v.clone())));
    for key in delete {
        configs.remove(key);
    }
    if configs.is_empty() {
        all.remove(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Registers the broker and unfences it, as its first heartbeat would.
    fn register(state: &mut ClusterState, node_id: NodeId) {
        let result = state.apply(&Command::RegisterBroker {
            node_id,
            host: format!("host-{node_id}"),
            port: 9092,
            rack: None,
            listeners: vec![],
            admin: None,
        });
        let CommandResult::BrokerRegistered { epoch } = result else {
            panic!("{result:?}");
        };
        assert_eq!(
            state.apply(&Command::UnfenceBroker { node_id, epoch }),
            CommandResult::Ok
        );
    }

    fn cluster_with_brokers(ids: &[NodeId]) -> ClusterState {
        let mut state = ClusterState::default();
        for id in ids {
            register(&mut state, *id);
        }
        state
    }

    fn create_topic(name: &str, replicas: Vec<Vec<NodeId>>) -> Command {
        Command::CreateTopic {
            name: name.to_string(),
            topic_id: uuid::Uuid::new_v4(),
            replicas,
            configs: BTreeMap::new(),
        }
    }

    fn assert_rejected_unchanged(state: &mut ClusterState, cmd: Command) -> CommandResult {
        let before = state.clone();
        let result = state.apply(&cmd);
        assert!(
            !result.is_ok(),
            "{cmd:?} should be rejected, got {result:?}"
        );
        assert_eq!(
            *state, before,
            "a rejected command must not change the state"
        );
        result
    }

    #[test]
    fn a_fresh_state_is_empty_and_hands_out_producer_ids_from_1000() {
        let state = ClusterState::default();
        assert!(state.brokers.is_empty());
        assert!(state.topics.is_empty());
        assert_eq!(state.next_producer_id, FIRST_PRODUCER_ID);
        assert_eq!(FIRST_PRODUCER_ID, 1000);
    }

    #[test]
    fn register_broker_inserts_and_then_replaces_the_broker() {
        let mut state = ClusterState::default();
        register(&mut state, 1);
        assert_eq!(state.brokers[&1].host, "host-1");

        let result = state.apply(&Command::RegisterBroker {
            node_id: 1,
            host: "new-host".to_string(),
            port: 19092,
            rack: Some("rack-a".to_string()),
            listeners: vec![],
            admin: None,
        });
        assert_eq!(result, CommandResult::BrokerRegistered { epoch: 2 });
        assert_eq!(state.brokers.len(), 1);
        assert_eq!(
            state.brokers[&1],
            BrokerInfo {
                node_id: 1,
                host: "new-host".to_string(),
                port: 19092,
                rack: Some("rack-a".to_string()),
                listeners: vec![],
                admin: None,
                epoch: 2,
                fenced: true,
                offline_log_dirs: vec![],
            }
        );
    }

    #[test]
    fn create_topic_starts_each_partition_led_by_its_first_replica_with_full_isr() {
        let mut state = cluster_with_brokers(&[1, 2, 3]);
        let topic_id = uuid::Uuid::new_v4();
        let configs = BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]);
        let result = state.apply(&Command::CreateTopic {
            name: "orders".to_string(),
            topic_id,
            replicas: vec![vec![1, 2], vec![2, 3], vec![3, 1]],
            configs: configs.clone(),
        });
        assert_eq!(result, CommandResult::Ok);

        let topic = state.topic("orders").expect("topic exists");
        assert_eq!(topic.name, "orders");
        assert_eq!(topic.topic_id, topic_id);
        assert_eq!(topic.configs, configs);
        assert_eq!(topic.partitions.len(), 3);
        assert_eq!(
            *topic.partitions[1],
            PartitionInfo {
                replicas: vec![2, 3],
                leader: Some(2),
                isr: vec![2, 3],
                leader_epoch: 0,
                partition_epoch: 0,
                remote: vec![],
                log_start_floor: 0,
                adding: vec![],
                removing: vec![],
                offline: vec![],
            }
        );
        assert_eq!(
            state.topic_by_id(&topic_id).map(|t| &t.name[..]),
            Some("orders")
        );
        assert!(state.topic_by_id(&uuid::Uuid::new_v4()).is_none());
        assert!(state.topic("missing").is_none());
    }

    #[test]
    fn create_topic_rejects_an_existing_name_or_topic_id() {
        let mut state = cluster_with_brokers(&[1]);
        let topic_id = uuid::Uuid::new_v4();
        let cmd = Command::CreateTopic {
            name: "t".to_string(),
            topic_id,
            replicas: vec![vec![1]],
            configs: BTreeMap::new(),
        };
        assert_eq!(state.apply(&cmd), CommandResult::Ok);

        let same_name = create_topic("t", vec![vec![1]]);
        assert_eq!(
            assert_rejected_unchanged(&mut state, same_name),
            CommandResult::TopicAlreadyExists
        );
        let same_id = Command::CreateTopic {
            name: "other".to_string(),
            topic_id,
            replicas: vec![vec![1]],
            configs: BTreeMap::new(),
        };
        assert_eq!(
            assert_rejected_unchanged(&mut state, same_id),
            CommandResult::TopicAlreadyExists
        );
    }

    #[test]
    fn create_topic_rejects_zero_partitions() {
        let mut state = cluster_with_brokers(&[1]);
        let result = assert_rejected_unchanged(&mut state, create_topic("t", vec![]));
        assert!(
            matches!(result, CommandResult::InvalidPartitions(_)),
            "{result:?}"
        );
    }

    #[test]
    fn create_topic_rejects_empty_duplicate_unregistered_or_uneven_replica_lists() {
        let mut state = cluster_with_brokers(&[1, 2]);
        for replicas in [
            vec![vec![1], vec![]],
            vec![vec![1, 1]],
            vec![vec![1, 3]],
            vec![vec![1, 2], vec![2]],
        ] {
            let result = assert_rejected_unchanged(&mut state, create_topic("t", replicas));
            assert!(
                matches!(result, CommandResult::InvalidReplicaAssignment(_)),
                "{result:?}"
            );
        }
    }

    #[test]
    fn delete_topic_removes_it_and_rejects_an_unknown_topic() {
        let mut state = cluster_with_brokers(&[1]);
        assert_eq!(
            state.apply(&create_topic("t", vec![vec![1]])),
            CommandResult::Ok
        );
        let delete = Command::DeleteTopic {
            name: "t".to_string(),
        };
        assert_eq!(state.apply(&delete), CommandResult::Ok);
        assert!(state.topic("t").is_none());
        assert_eq!(
            assert_rejected_unchanged(&mut state, delete),
            CommandResult::UnknownTopic
        );
    }

    #[test]
    fn create_partitions_appends_new_partitions_after_the_existing_ones() {
        let mut state = cluster_with_brokers(&[1, 2]);
        assert_eq!(
            state.apply(&create_topic("t", vec![vec![1, 2]])),
            CommandResult::Ok
        );
        let result = state.apply(&Command::CreatePartitions {
            name: "t".to_string(),
            new_replicas: vec![vec![2, 1], vec![1, 2]],
        });
        assert_eq!(result, CommandResult::Ok);
        let partitions = &state.topics["t"].partitions;
        assert_eq!(partitions.len(), 3);
        assert_eq!(partitions[0].replicas, vec![1, 2]);
        assert_eq!(partitions[1].replicas, vec![2, 1]);
        assert_eq!(partitions[1].leader, Some(2));
        assert_eq!(partitions[2].isr, vec![1, 2]);
    }

    #[test]
    fn create_partitions_rejects_an_unknown_topic_no_new_partitions_and_bad_assignments() {
        let mut state = cluster_with_brokers(&[1, 2]);
        assert_eq!(
            state.apply(&create_topic("t", vec![vec![1, 2]])),
            CommandResult::Ok
        );

        let unknown = Command::CreatePartitions {
            name: "missing".to_string(),
            new_replicas: vec![vec![1, 2]],
        };
        assert_eq!(
            assert_rejected_unchanged(&mut state, unknown),
            CommandResult::UnknownTopic
        );

        let none = Command::CreatePartitions {
            name: "t".to_string(),
            new_replicas: vec![],
        };
        let result = assert_rejected_unchanged(&mut state, none);
        assert!(
            matches!(result, CommandResult::InvalidPartitions(_)),
            "{result:?}"
        );

        for new_replicas in [
            vec![vec![]],
            vec![vec![2, 2]],
            vec![vec![1, 9]],
            vec![vec![1]],
            vec![vec![1, 2], vec![2]],
        ] {
            let cmd = Command::CreatePartitions {
                name: "t".to_string(),
                new_replicas,
            };
            let result = assert_rejected_unchanged(&mut state, cmd);
            assert!(
                matches!(result, CommandResult::InvalidReplicaAssignment(_)),
                "{result:?}"
            );
        }
    }

    #[test]
    fn alter_topic_config_sets_then_deletes_keys() {
        let mut state = cluster_with_brokers(&[1]);
        let create = Command::CreateTopic {
            name: "t".to_string(),
            topic_id: uuid::Uuid::new_v4(),
            replicas: vec![vec![1]],
            configs: BTreeMap::from([
                ("retention.ms".to_string(), "1".to_string()),
                ("segment.bytes".to_string(), "2".to_string()),
            ]),
        };
        assert_eq!(state.apply(&create), CommandResult::Ok);

        let result = state.apply(&Command::AlterTopicConfig {
            name: "t".to_string(),
            set: BTreeMap::from([
                ("retention.ms".to_string(), "10".to_string()),
                ("cleanup.policy".to_string(), "compact".to_string()),
                ("max.message.bytes".to_string(), "3".to_string()),
            ]),
            delete: vec!["segment.bytes".to_string(), "max.message.bytes".to_string()],
        });
        assert_eq!(result, CommandResult::Ok);
        assert_eq!(
            state.topics["t"].configs,
            BTreeMap::from([
                ("cleanup.policy".to_string(), "compact".to_string()),
                ("retention.ms".to_string(), "10".to_string()),
            ])
        );
    }

    #[test]
    fn iceberg_commits_compare_and_set_the_location_and_continue_each_partition() {
        let mut state = cluster_with_brokers(&[1]);
        let topic_id = uuid::Uuid::new_v4();
        let create = Command::CreateTopic {
            name: "t".into(),
            topic_id,
            replicas: vec![vec![1], vec![1]],
            configs: BTreeMap::new(),
        };
        assert_eq!(state.apply(&create), CommandResult::Ok);
        let range = |partition, from, to| crate::IcebergRange {
            partition,
            from,
            to,
        };
        let commit =
            |expected: Option<&str>, location: Option<&str>, ranges| Command::CommitIcebergTable {
                topic_id,
                dlq: false,
                table_offsets: BTreeMap::new(),
                expected: expected.map(str::to_string),
                location: location.map(str::to_string),
                ranges,
            };
        // Created: a partition's first range may start anywhere (its log start).
        let first = commit(None, Some("m1"), vec![range(0, 5, 10)]);
        assert_eq!(state.apply(&first), CommandResult::Ok);
        // The same commit again (a retry after a lost reply): the location moved on.
        assert_eq!(
            state.apply(&first),
            CommandResult::IcebergConflict {
                current: Some("m1".into())
            }
        );
        // Built on the right metadata but repeating offsets (a stale leader): refused whole.
        let stale = commit(
            Some("m1"),
            Some("m2"),
            vec![range(1, 0, 3), range(0, 7, 12)],
        );
        assert_eq!(
            state.apply(&stale),
            CommandResult::IcebergOffsetsMoved {
                partition: 0,
                next: Some(10)
            }
        );
        for bad in [range(2, 0, 1), range(-1, 0, 1), range(1, 5, 4)] {
            let r = state.apply(&commit(Some("m1"), Some("m2"), vec![bad]));
            assert!(
                matches!(r, CommandResult::IcebergOffsetsMoved { .. }),
                "{bad:?}"
            );
        }
        let table = state.topics["t"].iceberg.clone().unwrap();
        assert_eq!(table.location, "m1");
        assert_eq!(table.next_offsets, BTreeMap::from([(0, 10)]));
        let next = commit(
            Some("m1"),
            Some("m2"),
            vec![range(1, 0, 3), range(0, 10, 12)],
        );
        assert_eq!(state.apply(&next), CommandResult::Ok);
        let table = state.topics["t"].iceberg.clone().unwrap();
        assert_eq!(table.next_offsets, BTreeMap::from([(0, 12), (1, 3)]));
        // The dead-letter table is its own: its own location and offsets, the table's untouched.
        // Its rows are sorted from the table as it is now: from partition 0's offset 12.
        let dlq = |expected: Option<&str>, location: &str, ranges, base: i64| {
            Command::CommitIcebergTable {
                topic_id,
                dlq: true,
                table_offsets: BTreeMap::from([(0, base)]),
                expected: expected.map(str::to_string),
                location: Some(location.to_string()),
                ranges,
            }
        };
        assert!(!state.apply(&dlq(Some("m2"), "d1", vec![], 12)).is_ok());
        let stale = dlq(None, "d1", vec![range(0, 4, 20)], 10);
        assert_eq!(
            state.apply(&stale),
            CommandResult::IcebergOffsetsMoved {
                partition: 0,
                next: Some(12)
            }
        );
        let first = dlq(None, "d1", vec![range(0, 12, 20)], 12);
        assert_eq!(state.apply(&first), CommandResult::Ok);
        let gap = dlq(Some("d1"), "d2", vec![range(0, 15, 30)], 12);
        assert!(!state.apply(&gap).is_ok());
        let next = dlq(Some("d1"), "d2", vec![range(0, 20, 30)], 12);
        assert_eq!(state.apply(&next), CommandResult::Ok);
        let dead = state.topics["t"].iceberg_dlq.clone().unwrap();
        assert_eq!(
            (dead.location.as_str(), dead.next_offsets),
            ("d2", BTreeMap::from([(0, 30)]))
        );
        assert_eq!(state.topics["t"].iceberg, Some(table));
        // Forgotten (rewrite starts over), only from the current location.
        assert!(!state.apply(&commit(Some("m1"), None, vec![])).is_ok());
        assert_eq!(
            state.apply(&commit(Some("m2"), None, vec![])),
            CommandResult::Ok
        );
        assert_eq!(state.topics["t"].iceberg, None);
        assert_eq!(
            state.topics["t"].iceberg_dlq, None,
            "forgotten with its table"
        );
    }

    #[test]
    fn group_configs_are_kept_per_group_before_the_group_exists_and_empty_ones_dropped() {
        let mut state = ClusterState::default();
        let alter = |set: &[(&str, &str)], delete: &[&str]| Command::AlterGroupConfig {
            group: "workers".into(),
            set: (set.iter())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            delete: delete.iter().map(|k| k.to_string()).collect(),
        };
        let cmd = alter(&[("share.auto.offset.reset", "earliest")], &[]);
        assert_eq!(state.apply(&cmd), CommandResult::Ok);
        assert_eq!(
            (state.group_config("workers")).and_then(|c| c.get("share.auto.offset.reset")),
            Some(&"earliest".to_string())
        );
        let before = state.group_configs.clone();
        assert_eq!(state.apply(&cmd), CommandResult::Ok);
        assert!(
            Arc::ptr_eq(&before, &state.group_configs),
            "a no-op copies nothing"
        );
        let cmd = alter(&[], &["share.auto.offset.reset"]);
        assert_eq!(state.apply(&cmd), CommandResult::Ok);
        assert!(state.group_config("workers").is_none());
    }

    #[test]
    fn share_resets_take_the_next_state_epoch_per_share_partition() {
        let mut state = ClusterState::default();
        let t = uuid::Uuid::from_u128(7);
        let reset = |offsets: Vec<(uuid::Uuid, i32, Option<i64>)>| Command::ResetShareOffsets {
            group: "workers".into(),
            offsets,
        };
        state.apply(&reset(vec![(t, 0, Some(10)), (t, 1, Some(20))]));
        state.apply(&reset(vec![(t, 0, None)]));
        let r0 = state.share_reset("workers", &t, 0).unwrap();
        assert_eq!((r0.state_epoch, r0.start_offset), (2, None));
        let r1 = state.share_reset("workers", &t, 1).unwrap();
        assert_eq!((r1.state_epoch, r1.start_offset), (1, Some(20)));
        assert!(state.share_reset("workers", &t, 2).is_none());
        assert!(state.share_reset("others", &t, 0).is_none());
        // Kept across a snapshot.
        let json = serde_json::to_string(&state).unwrap();
        let back: ClusterState = serde_json::from_str(&json).unwrap();
        assert_eq!(back.share_resets, state.share_resets);
    }

    #[test]
    fn broker_configs_are_kept_per_resource_and_empty_ones_dropped() {
        let mut state = ClusterState::default();
        let alter =
            |resource: &str, set: &[(&str, &str)], delete: &[&str]| Command::AlterBrokerConfig {
                resource: resource.to_string(),
                set: (set.iter())
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                delete: delete.iter().map(|k| k.to_string()).collect(),
            };
        let before = state.broker_configs.clone();
        assert_eq!(state.apply(&alter("", &[], &["x"])), CommandResult::Ok);
        assert!(
            Arc::ptr_eq(&before, &state.broker_configs),
            "a no-op copies nothing"
        );
        let cmd = alter("", &[("log.retention.ms", "1000")], &[]);
        assert_eq!(state.apply(&cmd), CommandResult::Ok);
        let cmd = alter(
            "2",
            &[("log.retention.ms", "5"), ("message.max.bytes", "9")],
            &[],
        );
        assert_eq!(state.apply(&cmd), CommandResult::Ok);
        assert_eq!(
            state
                .broker_config("")
                .and_then(|c| c.get("log.retention.ms"))
                .map(String::as_str),
            Some("1000")
        );
        assert_eq!(state.broker_config("2").map(BTreeMap::len), Some(2));
        let cmd = alter("2", &[], &["log.retention.ms", "message.max.bytes"]);
        assert_eq!(state.apply(&cmd), CommandResult::Ok);
        assert_eq!(
            state.broker_config("2"),
            None,
            "an emptied resource is dropped"
        );
        let result = assert_rejected_unchanged(&mut state, alter("two", &[("a", "b")], &[]));
        assert!(
            matches!(result, CommandResult::InvalidRequest(_)),
            "{result:?}"
        );
    }

    #[test]
    fn alter_topic_config_rejects_an_unknown_topic() {
        let mut state = ClusterState::default();
        let cmd = Command::AlterTopicConfig {
            name: "missing".to_string(),
            set: BTreeMap::new(),
            delete: vec![],
        };
        assert_eq!(
            assert_rejected_unchanged(&mut state, cmd),
            CommandResult::UnknownTopic
        );
    }

    #[test]
    fn allocate_producer_ids_hands_out_consecutive_non_overlapping_blocks() {
        let mut state = ClusterState::default();
        assert_eq!(
            state.apply(&Command::AllocateProducerIds { count: 100 }),
            CommandResult::ProducerIds {
                first: 1000,
                count: 100
            }
        );
        assert_eq!(
            state.apply(&Command::AllocateProducerIds { count: 5 }),
            CommandResult::ProducerIds {
                first: 1100,
                count: 5
            }
        );
        assert_eq!(state.next_producer_id, 1105);
    }

    #[test]
    fn allocate_producer_ids_never_wraps_past_the_largest_id() {
        let mut state = ClusterState {
            next_producer_id: i64::MAX - 3,
            ..ClusterState::default()
        };
        assert_eq!(
            state.apply(&Command::AllocateProducerIds { count: u64::MAX }),
            CommandResult::ProducerIds {
                first: i64::MAX - 3,
                count: 3
            }
        );
        assert_eq!(state.next_producer_id, i64::MAX);
    }

    #[test]
    fn applying_the_same_commands_yields_the_same_state() {
        let commands = [
            Command::RegisterBroker {
                node_id: 1,
                host: "a".to_string(),
                port: 1,
                rack: None,
                listeners: vec![],
                admin: None,
            },
            create_topic("x", vec![vec![1]]),
            Command::AllocateProducerIds { count: 7 },
            create_topic("x", vec![vec![1]]),
            Command::DeleteTopic {
                name: "nope".to_string(),
            },
        ];
        let mut a = ClusterState::default();
        let mut b = ClusterState::default();
        let results_a: Vec<_> = commands.iter().map(|c| a.apply(c)).collect();
        let results_b: Vec<_> = commands.iter().map(|c| b.apply(c)).collect();
        assert_eq!(a, b);
        assert_eq!(results_a, results_b);
        let json = serde_json::to_string(&a).expect("serialize");
        let back: ClusterState = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back, a);
    }

    /// Two topics, `a` (partitions 0 and 1) and `b`, on brokers 1 and 2.
    fn two_topics() -> ClusterState {
        let mut state = cluster_with_brokers(&[1, 2]);
        assert!(state
            .apply(&create_topic("a", vec![vec![1, 2], vec![2, 1]]))
            .is_ok());
        assert!(state.apply(&create_topic("b", vec![vec![1, 2]])).is_ok());
        state
    }

    fn shrink_isr(state: &ClusterState, topic: &str, partition: i32, epoch: i32) -> Command {
        let t = state.topic(topic).expect("topic");
        let p = &t.partitions[partition as usize];
        Command::AlterPartition {
            topic_id: t.topic_id,
            partition,
            leader: p.leader.expect("leader"),
            leader_epoch: epoch,
            partition_epoch: p.partition_epoch,
            isr: vec![p.leader.expect("leader")],
        }
    }

    #[test]
    fn a_command_copies_only_the_topic_and_partition_it_changes() {
        let before = two_topics();
        let mut after = before.clone();
        let cmd = shrink_isr(&after, "a", 1, 0);
        assert_eq!(after.apply(&cmd), CommandResult::Ok);
        assert_eq!(after.topics["a"].partitions[1].isr, vec![2]);
        assert!(!Arc::ptr_eq(&before.topics["a"], &after.topics["a"]));
        assert!(!Arc::ptr_eq(
            &before.topics["a"].partitions[1],
            &after.topics["a"].partitions[1]
        ));
        assert!(Arc::ptr_eq(
            &before.topics["a"].partitions[0],
            &after.topics["a"].partitions[0]
        ));
        assert!(Arc::ptr_eq(&before.topics["b"], &after.topics["b"]));
    }

    #[test]
    fn a_rejected_or_idle_command_copies_nothing() {
        let before = two_topics();
        let mut after = before.clone();
        let stale = shrink_isr(&after, "a", 0, 7);
        assert!(matches!(
            after.apply(&stale),
            CommandResult::FencedLeaderEpoch { .. }
        ));
        // Every partition is led by its preferred replica already: nothing to elect.
        let everything: Vec<(uuid::Uuid, i32)> = after
            .topics
            .values()
            .flat_map(|t| (0..t.partitions.len() as i32).map(move |i| (t.topic_id, i)))
            .collect();
        let elect = Command::ElectPreferredLeaders {
            partitions: everything,
        };
        assert_eq!(after.apply(&elect), CommandResult::Ok);
        for (name, topic) in &after.topics {
            assert!(
                Arc::ptr_eq(topic, &before.topics[name]),
                "{name} was copied"
            );
        }
    }

    #[test]
    fn fencing_copies_exactly_the_partitions_it_touches() {
        let mut before = cluster_with_brokers(&[1, 2, 3]);
        assert!(before
            .apply(&create_topic("on12", vec![vec![1, 2]]))
            .is_ok());
        assert!(before
            .apply(&create_topic("on23", vec![vec![2, 3]]))
            .is_ok());
        let mut after = before.clone();
        let epoch = after.brokers[&1].epoch;
        assert_eq!(
            after.apply(&Command::FenceBroker { node_id: 1, epoch }),
            CommandResult::Ok
        );
        assert_eq!(after.topics["on12"].partitions[0].leader, Some(2));
        assert!(!Arc::ptr_eq(&before.topics["on12"], &after.topics["on12"]));
        assert!(Arc::ptr_eq(&before.topics["on23"], &after.topics["on23"]));
    }

    #[test]
    fn topics_are_found_by_id_after_create_delete_and_decode() {
        let mut state = two_topics();
        let a = state.topics["a"].topic_id;
        let b = state.topics["b"].topic_id;
        assert_eq!(state.topic_by_id(&a).map(|t| t.name.as_str()), Some("a"));
        let json = serde_json::to_vec(&state).expect("encode");
        let decoded: ClusterState = serde_json::from_slice(&json).expect("decode");
        assert_eq!(decoded, state);
        assert_eq!(decoded.topic_by_id(&b).map(|t| t.name.as_str()), Some("b"));
        assert_eq!(
            state.apply(&Command::DeleteTopic {
                name: "a".to_string()
            }),
            CommandResult::Ok
        );
        assert!(state.topic_by_id(&a).is_none());
        // The index is not part of the encoding.
        assert!(!String::from_utf8_lossy(&json).contains("topic_ids"));
    }
}
