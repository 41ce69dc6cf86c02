//! The group coordinator: consumer groups under Kafka's classic protocol and KIP-848's
//! consumer protocol, and their committed offsets.
//!
//! - [`state`] — one group's membership state machine (pure);
//! - [`consumer`] — a KIP-848 consumer group: epochs, the server-side assignor and each
//!   member's reconciliation (pure); [`consumer_membership`] drives it;
//! - [`store`] — the `__consumer_offsets` record format; [`consumer_store`] — a KIP-848
//!   group's records in it; [`wire`] — Kafka's message encoding both use;
//! - [`load`] — following the leadership of `__consumer_offsets`: loading a partition's groups
//!   when it arrives, dropping them when it leaves, and the coordinator check;
//! - [`persist`] — appending group and offset records to the group's partition;
//! - [`membership`] — join, sync, heartbeat, leave and session expiry;
//! - [`offsets`] — committing, fetching, deleting and expiring committed offsets;
//! - [`txn_offsets`] — offsets committed inside a transaction, visible once it commits;
//! - [`listing`] — ListGroups, DescribeGroups, DeleteGroups;
//! - [`lag`] — consumer lag in records and seconds, and its trend;
//! - [`share`] — a share group (KIP-932): members, subscriptions, the assignment (pure);
//!   [`share_membership`] drives it.
//!
//! The coordinator of a group is the leader of partition `partition_for(group)` of
//! `__consumer_offsets` (50 partitions, created on first use and replicated like any topic).
//! Two kinds of records go to that partition, as in Kafka: committed offsets, acknowledged
//! once the ISR holds them (the high watermark passed them), and the
//! group's metadata (GroupMetadata: generation, protocol, leader, members with their
//! subscriptions and assignments), appended when a generation completes (before the leader's
//! SyncGroup is answered), when the group becomes empty, when a static member is replaced, and
//! as a tombstone when the group is deleted. A KIP-848 consumer group writes Kafka's records
//! for its epoch, members, target and current assignments whenever a heartbeat or an expiry
//! changes them, before the member is answered.
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
//!   with their member ids and generation (or member epoch), and those that never come back
//!   expire after their session timeout, which rebalances the rest.
//! - A committed offset is visible (OffsetFetch, lag) only once the commit is acknowledged,
//!   that is once the ISR holds it; a commit that times out is not applied.

pub mod config;
pub mod consumer;
mod consumer_membership;
mod consumer_store;
pub mod lag;
pub mod lag_leaders;
mod listing;
mod load;
mod membership;
mod offsets;
mod persist;
pub mod share;
mod share_membership;
pub mod state;
pub mod store;
mod txn_offsets;
mod wire;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::coordination::Coordination;
use crate::error::{ApiError, ErrorCode};
use crate::node::Node;
use crate::partition::Partition;
pub use offsets::Committer;
use state::Group;
use store::CommittedOffset;
pub use txn_offsets::PendingTxnCommit;

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
    /// The group under KIP-848's consumer protocol, when it is one ([`consumer`]).
    consumer: Option<consumer::ConsumerGroup>,
    /// The share group (KIP-932), when it is one ([`share`]).
    share: Option<share::ShareGroup>,
    offsets: Offsets,
    /// Wall-clock ms when the group was last seen with members (0: unknown).
    last_active_ms: i64,
    /// Offsets committed in transactions still open, per producer id ([`txn_offsets`]).
    pending_txn: HashMap<i64, Offsets>,
}

pub struct Coordinator {
    node: Arc<Node>,
    groups: Mutex<HashMap<String, Entry>>,
    /// The `__consumer_offsets` partitions led here and loaded.
    coordination: Coordination,
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

/// An offset commit appended to the log and waiting for the ISR before it is acknowledged
/// ([`Coordinator::commit`], then [`Coordinator::complete_commit`]).
pub struct PendingCommit {
    group: String,
    partition: Arc<Partition>,
    last_offset: i64,
    leader_epoch: i32,
    accepted: Vec<Commit>,
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
    pub fn new(node: Arc<Node>) -> Coordinator {
        Coordinator {
            node,
            groups: Mutex::default(),
            coordination: Coordination::new(store::TOPIC),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.groups.lock().unwrap_or_else(|p| p.into_inner())
    }
}
