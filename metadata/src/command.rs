//! Typed commands of the metadata quorum and their results.
//!
//! A [`Command`] is the application payload of a raft log entry (openraft's `D`); a
//! [`CommandResult`] is what applying it to the [`ClusterState`](crate::ClusterState) returned
//! (openraft's `R`).
//!
//! Invariants:
//! - Commands are persisted in the raft log as JSON and replayed after every restart, so a
//!   variant or field, once released, keeps its name and meaning. New fields must be optional
//!   (`#[serde(default)]`) so older logs still decode.
//! - A rejected command (unknown topic, bad assignment, ...) is *not* an error: it is committed
//!   like any other command, changes nothing, and reports the reason in its [`CommandResult`].
//!   Errors ([`MetadataError`](crate::MetadataError)) are reserved for the quorum itself failing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::acl::AclBinding;
use crate::quota::QuotaAlteration;

/// Identifier of a node (broker and/or controller) in the cluster.
pub type NodeId = u64;

/// A change to the cluster metadata, replicated through raft and applied by
/// [`ClusterState::apply`](crate::ClusterState::apply).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum Command {
    /// Registers a broker under a new broker epoch, replacing any earlier registration of the
    /// same node id (that incarnation is fenced first). The broker starts fenced; its first
    /// heartbeat unfences it.
    RegisterBroker {
        node_id: NodeId,
        host: String,
        port: u16,
        rack: Option<String>,
        /// Every listener's advertised endpoint (`host`/`port` above are the inter-broker
        /// listener's). Empty in logs written before listeners existed.
        #[serde(default)]
        listeners: Vec<Endpoint>,
        /// Its admin HTTP port's advertised `host:port`, where the others ask for its part of
        /// a cluster-wide view. Absent in logs written before it was registered.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        admin: Option<String>,
    },
    /// Fences the broker's registration `epoch` (missed heartbeats, or a clean shutdown): it
    /// leaves every ISR it is not the last member of, and its partitions get new leaders from
    /// their ISR.
    FenceBroker { node_id: NodeId, epoch: i64 },
    /// Unfences the broker's registration `epoch` (it heartbeats): partitions without a leader
    /// whose ISR holds it are led by it.
    UnfenceBroker { node_id: NodeId, epoch: i64 },
    /// Unclean election for an offline partition whose topic allows it
    /// (`unclean.leader.election.enable`): the first live replica leads, alone in the ISR.
    /// Records only the previous ISR held are lost; the controller proposes it and counts it.
    ElectUncleanLeader {
        topic_id: uuid::Uuid,
        partition: i32,
    },
    /// Preferred-leader elections: each listed partition whose first replica is live and in
    /// the ISR but does not lead is led by it. Partitions where that does not hold are left
    /// as they are (the controller's automatic rebalance and the ElectLeaders API propose it).
    ElectPreferredLeaders { partitions: Vec<(uuid::Uuid, i32)> },
    /// A partition leader's change of its ISR (Kafka's AlterPartition): accepted only from
    /// the current leader at the current leader epoch and partition epoch.
    AlterPartition {
        topic_id: uuid::Uuid,
        partition: i32,
        leader: NodeId,
        leader_epoch: i32,
        partition_epoch: i32,
        isr: Vec<NodeId>,
    },
    /// Partition leaders' ISR changes, many in one entry (as Kafka's AlterPartition request
    /// carries many partitions): when a broker comes back, every partition it follows expands
    /// at once, and one entry per partition left the quorum minutes behind at 16,384
    /// partitions. Each change is judged on its own, exactly as [`Command::AlterPartition`];
    /// the result is [`CommandResult::Each`], one result per change in order.
    AlterPartitions { changes: Vec<IsrUpdate> },
    /// Creates a topic. `replicas` has one entry per partition: that partition's replica list,
    /// the first replica being the preferred leader.
    CreateTopic {
        name: String,
        topic_id: uuid::Uuid,
        replicas: Vec<Vec<NodeId>>,
        configs: BTreeMap<String, String>,
    },
    /// Deletes a topic.
    DeleteTopic { name: String },
    /// Appends partitions to a topic. `new_replicas` holds the replica lists of the *new*
    /// partitions only, in partition order.
    CreatePartitions {
        name: String,
        new_replicas: Vec<Vec<NodeId>>,
    },
    /// Changes a topic's configs: first sets every key of `set`, then removes every key of
    /// `delete` (back to the broker default).
    AlterTopicConfig {
        name: String,
        set: BTreeMap<String, String>,
        delete: Vec<String>,
    },
    /// Reserves a block of `count` producer ids.
    AllocateProducerIds { count: u64 },
    /// Records that a closed segment's objects are fully written and checked in the object
    /// store. Accepted only from the partition's current leader epoch, and only after the
    /// partition's last remote segment (see [`crate::remote`]).
    CommitRemoteSegment {
        topic_id: uuid::Uuid,
        partition: i32,
        segment: RemoteSegment,
    },
    /// Remote retention, step 1: marks every committed remote segment ending below
    /// `before_offset` as being deleted, which takes it out of the readable remote log, and
    /// raises the partition's log start floor to `before_offset` (records below it are gone
    /// even where a remaining segment still holds them: DeleteRecords).
    MarkRemoteSegmentsDeleting {
        topic_id: uuid::Uuid,
        partition: i32,
        before_offset: i64,
    },
    /// Remote retention, step 2 (after the objects are deleted): drops the records of
    /// segments marked deleting.
    DropRemoteSegments {
        topic_id: uuid::Uuid,
        partition: i32,
        ids: Vec<uuid::Uuid>,
    },
    /// Moves a partition to the `target` replicas (KIP-455's AlterPartitionReassignments), or
    /// cancels its reassignment in progress when `target` is `None`. See
    /// [`crate::reassignment`] for how the move proceeds and completes.
    ReassignPartition {
        topic: String,
        partition: i32,
        target: Option<Vec<NodeId>>,
    },
    /// Forgets a broker (Kafka's UnregisterBroker): accepted only while it is fenced (stopped)
    /// and holds no replica, so no partition loses a replica it counts on.
    UnregisterBroker { node_id: NodeId },
    /// Sets a user's SCRAM credential for one mechanism (KIP-554's AlterUserScramCredentials
    /// upsertion), replacing any earlier one.
    UpsertScramCredential {
        user: String,
        mechanism: String,
        credential: ScramCredential,
    },
    /// Removes a user's SCRAM credential for one mechanism.
    DeleteScramCredential { user: String, mechanism: String },
    /// Adds ACLs (CreateAcls); all or none: one invalid binding refuses the command. Adding
    /// one that exists changes nothing.
    CreateAcls { acls: Vec<AclBinding> },
    /// Removes these exact ACLs (DeleteAcls, after the broker resolved its filters); absent
    /// ones are ignored.
    DeleteAcls { acls: Vec<AclBinding> },
    /// Sets and removes client quotas (AlterClientQuotas), all or none: one invalid
    /// alteration refuses the command.
    AlterClientQuotas { alterations: Vec<QuotaAlteration> },
    /// A broker's log directory failed (KIP-858): its replicas in it go offline (see
    /// `ClusterState::fail_log_dir`). From the broker itself, at its current epoch.
    FailLogDir {
        node_id: NodeId,
        epoch: i64,
        dir: String,
        partitions: Vec<(uuid::Uuid, i32)>,
    },
    /// Changes dynamic broker configs (Kafka names): `resource` is `""` for the cluster-wide
    /// defaults or a broker id for that broker's own; first sets every key of `set`, then
    /// removes every key of `delete`. The broker checked the values before proposing.
    AlterBrokerConfig {
        resource: String,
        set: BTreeMap<String, String>,
        delete: Vec<String>,
    },
    /// Changes a group's dynamic configs (KIP-848's GROUP config resource, Kafka names), which
    /// may be set before the group exists: first sets every key of `set`, then removes every
    /// key of `delete`. The broker checked the names and values before proposing.
    AlterGroupConfig {
        group: String,
        set: BTreeMap<String, String>,
        delete: Vec<String>,
    },
    /// Sets where share group `group` starts reading share partitions
    /// (AlterShareGroupOffsets: `Some(offset)`), or forgets their state
    /// (DeleteShareGroupOffsets: `None`, so the next start follows `share.auto.offset.reset`).
    /// Each share partition named gets the next state epoch; the partitions' leaders apply it.
    /// The broker checked that the group has no members before proposing.
    ResetShareOffsets {
        group: String,
        offsets: Vec<(uuid::Uuid, i32, Option<i64>)>,
    },
    /// Points a topic's Iceberg table at a new metadata file (the broker's Iceberg catalog),
    /// or forgets the table (`location` `None`), only while it points at `expected`: a
    /// compare-and-set, so of two commits built on the same metadata one lands and the other
    /// is refused with [`CommandResult::IcebergConflict`] and rebuilt on the winner's. The
    /// commit's data files hold the records of `ranges`; each must start where the
    /// partition's table offsets end ([`crate::IcebergTable`]), or the whole command is
    /// refused with [`CommandResult::IcebergOffsetsMoved`]: no offset enters a table twice
    /// and none is skipped. Forgetting the table forgets its dead-letter table too.
    ///
    /// `dlq` names the topic's dead-letter table (`<topic>~dlq`, the records of a `value_json`
    /// topic that do not fit its schema) instead, which has its own metadata file and offsets.
    /// Its rows were read against the topic table's offsets `table_offsets` (by partition of
    /// `ranges`; absent: none yet): the commit is refused whole unless the table is still
    /// there, so dead letters never outlive the table they were sorted from (a rewrite).
    CommitIcebergTable {
        topic_id: uuid::Uuid,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        dlq: bool,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        table_offsets: BTreeMap<i32, i64>,
        expected: Option<String>,
        location: Option<String>,
        #[serde(default)]
        ranges: Vec<IcebergRange>,
    },
}

/// The offsets `from .. to` of one partition, in one Iceberg commit's data files (control
/// records and aborted transactions among them are in no file, but covered all the same).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct IcebergRange {
    pub partition: i32,
    pub from: i64,
    pub to: i64,
}

/// One partition's ISR change in [`Command::AlterPartitions`]: the fields of
/// [`Command::AlterPartition`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct IsrUpdate {
    pub topic_id: uuid::Uuid,
    pub partition: i32,
    pub leader: NodeId,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<NodeId>,
}

/// The outcome of applying one [`Command`] (or a raft-internal entry, which yields `Ok`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum CommandResult {
    /// The command was applied.
    Ok,
    /// `RegisterBroker`: the broker's new epoch.
    BrokerRegistered { epoch: i64 },
    /// The broker is not registered.
    UnknownBroker,
    /// A fence or unfence for an earlier registration than the broker's current `epoch`.
    StaleBrokerEpoch { current: i64 },
    /// Producer ids `first .. first + count` are reserved for the proposer.
    ProducerIds { first: i64, count: u64 },
    /// `CreateTopic`: a topic with this name (or this topic id) already exists.
    TopicAlreadyExists,
    /// The named topic does not exist.
    UnknownTopic,
    /// The partition count is invalid (no partitions, or too many).
    InvalidPartitions(String),
    /// A replica list is empty, has duplicates, names an unregistered broker, or its length
    /// differs from the topic's other partitions.
    InvalidReplicaAssignment(String),
    /// The topic exists but has no such partition.
    UnknownPartition,
    /// A remote segment or ISR change from an older leader epoch (or another leader) than the
    /// partition's.
    FencedLeaderEpoch { current: i32 },
    /// An ISR change based on an older partition epoch than the current one.
    InvalidUpdateVersion { current: i32 },
    /// An ISR that is not a subset of the replicas holding the leader, or adds a fenced broker.
    InvalidIsr(String),
    /// A remote segment that does not start after the partition's last one, or is malformed.
    InvalidRemoteSegment(String),
    /// A cancel (`ReassignPartition` without a target) for a partition that is not moving.
    NoReassignmentInProgress,
    /// `UnregisterBroker` of a broker that is running or still holds replicas: why.
    BrokerInUse(String),
    /// The command is malformed: why.
    InvalidRequest(String),
    /// The command names something (a credential) that does not exist.
    NotFound,
    /// `CommitIcebergTable`: the table's metadata file is not the one expected; this one is.
    IcebergConflict { current: Option<String> },
    /// `CommitIcebergTable`: a range does not start where the partition's table offsets end
    /// (`next`, `None` for a partition with none yet).
    IcebergOffsetsMoved { partition: i32, next: Option<i64> },
    /// A command of many independent changes (`AlterPartitions`): each one's result, in order.
    Each(Vec<CommandResult>),
}

impl CommandResult {
    /// True for the results that mean the command was applied (`Ok`, `ProducerIds`,
    /// `BrokerRegistered`, and `Each`, whose changes each say whether they were).
    pub fn is_ok(&self) -> bool {
        matches!(
            self,
            CommandResult::Ok
                | CommandResult::ProducerIds { .. }
                | CommandResult::BrokerRegistered { .. }
                | CommandResult::Each(_)
        )
    }
}

/// Where clients of one named listener reach a broker (Kafka's broker endpoint).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Endpoint {
    pub name: String,
    pub host: String,
    pub port: u16,
}

/// What a broker needs to verify a SCRAM client, and nothing from which it could act as one:
/// the salt, the iteration count and RFC 5802's StoredKey and ServerKey.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

/// One segment in the object store.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct RemoteSegment {
    /// Unique per upload; part of the object keys, so a retried upload never overwrites a
    /// committed object.
    pub id: uuid::Uuid,
    pub base_offset: i64,
    /// Offset of the segment's last batch's last record (inclusive).
    pub last_offset: i64,
    /// Bytes of the log object.
    pub size_bytes: u64,
    /// Bytes of the index object.
    #[serde(default)]
    pub index_size_bytes: u64,
    pub max_timestamp: i64,
    /// Leader epoch of the leader that uploaded it.
    pub leader_epoch: i32,
    /// CRC-32C of the log object, checked on every read from the store.
    pub crc32c: u32,
    pub state: RemoteSegmentState,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum RemoteSegmentState {
    Committed,
    /// Expired by retention; its objects are being deleted.
    Deleting,
}
