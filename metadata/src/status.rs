//! The metadata quorum as a node sees it ([`QuorumStatus`]) and each node as the leader sees
//! it ([`ReplicaView`]): what `/v1/cluster`, the controller metrics and DescribeQuorum show.
//! A module of its own, below both the quorum and its transport, which both carry it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::command::NodeId;

/// The quorum as this node sees it, for status pages and metrics.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct QuorumStatus {
    pub node_id: NodeId,
    /// `leader`, `follower`, `candidate`, `learner` or `shutdown`.
    pub role: String,
    pub leader: Option<NodeId>,
    pub term: u64,
    pub last_log_index: Option<u64>,
    pub last_applied_index: Option<u64>,
    pub voters: BTreeMap<NodeId, String>,
    pub learners: BTreeMap<NodeId, String>,
    /// On the leader: the last log index each node is known to hold.
    pub replication: Option<BTreeMap<NodeId, Option<u64>>>,
    /// The last index this node knows committed (the quorum's high watermark).
    pub committed_index: Option<u64>,
    /// On the leader: when each other node last accepted an AppendEntries, and last caught up
    /// with the leader's log end (ms since the epoch).
    pub contacts: BTreeMap<NodeId, Contact>,
}

/// When the leader last heard from one node (KIP-595's `lastFetchTimestamp` and
/// `lastCaughtUpTimestamp`, ms since the epoch), as the raft transport records it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contact {
    /// The last AppendEntries (heartbeats included) the node accepted.
    pub last_fetch_ms: i64,
    /// The last time an accepted AppendEntries brought the node to the leader's log end as it
    /// was when sent.
    pub last_caught_up_ms: i64,
}

/// One node of the quorum as its leader sees it (KIP-595's replica state): log end offsets are
/// raft indexes + 1 (exclusive, as Kafka's), -1 where unknown; times in ms since the epoch.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ReplicaView {
    pub id: NodeId,
    /// A voter, else an observer (a learner).
    pub voter: bool,
    pub log_end: i64,
    pub last_fetch_ms: i64,
    pub last_caught_up_ms: i64,
}

impl QuorumStatus {
    /// The raft log's high watermark as a Kafka offset: the committed index + 1.
    pub fn high_watermark(&self) -> i64 {
        self.committed_index.map_or(-1, |i| i as i64 + 1)
    }

    /// Every voter then every learner as this status (a leader's) sees it at `now_ms`; the
    /// leader's own times are now, as Kafka reports them.
    pub fn replicas(&self, now_ms: i64) -> Vec<ReplicaView> {
        let view = |id: NodeId, voter: bool| {
            if Some(id) == self.leader {
                let log_end = self.last_log_index.map_or(0, |i| i as i64 + 1);
                return ReplicaView {
                    id,
                    voter,
                    log_end,
                    last_fetch_ms: now_ms,
                    last_caught_up_ms: now_ms,
                };
            }
            let log_end = (self.replication.as_ref())
                .and_then(|r| r.get(&id).copied().flatten())
                .map_or(-1, |i| i as i64 + 1);
            let contact = self.contacts.get(&id);
            let time = |t: Option<i64>| t.filter(|t| *t > 0).unwrap_or(-1);
            ReplicaView {
                id,
                voter,
                log_end,
                last_fetch_ms: time(contact.map(|c| c.last_fetch_ms)),
                last_caught_up_ms: time(contact.map(|c| c.last_caught_up_ms)),
            }
        };
        (self.voters.keys().map(|id| view(*id, true)))
            .chain(self.learners.keys().map(|id| view(*id, false)))
            .collect()
    }
}
