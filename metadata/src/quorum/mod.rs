//! [`Metadata`]: the handle the broker uses to run and talk to the metadata quorum.
//!
//! A node is a voter (listed in the voters of a new cluster, or promoted later) or a learner
//! (any other broker: it asks a voter to add it, then receives every entry). Either way it
//! holds the whole state machine and serves reads from it. Writes and heartbeats go to the
//! leader: locally when this node leads, otherwise over [`crate::rpc`].
//!
//! - [`startup`] — opening the store, initializing or joining the quorum, catching up;
//! - [`client`] — calls that need the leader (proposals, read barriers, heartbeats, voter
//!   changes), answered locally on the leader or forwarded to it over [`crate::rpc`];
//! - [`leader`] — the leader's side of those calls and the raft port's server;
//! - [`control`] — the controller loop on the leader, which applies the pure liveness rules of
//!   [`crate::controller`] (fencing, unclean elections, leader balance).
//!
//! Invariants:
//! - [`Metadata::open`] returns only once a leader is known and this node has applied every
//!   entry the leader had committed when asked, so the first [`Metadata::state`] a caller sees
//!   is up to date as of start-up, never a partial replay.
//! - A fresh store is initialized with the configured voters only by a node that is one of
//!   them (every voter initializing with the same voters is safe in raft); a stored
//!   membership is never re-initialized, and one that does not hold this node is refused.
//! - When `propose` returns `Ok`, the command is committed, applied *on this node* and
//!   visible in `state()`, wherever the leader is.
//! - A proposal is sent to a leader at most once: it is retried only when it was refused
//!   (not the leader) or never sent (no connection), so a command never applies twice
//!   through this path.
//! - Every wait has a deadline, except the start-up wait for a quorum, which logs what it is
//!   waiting for every few seconds; none sleeps a fixed time as synchronization.

mod client;
mod control;
mod leader;
mod startup;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

pub use crate::rpc::RaftTls;
use openraft::error::{ClientWriteError, ForwardToLeader, RaftError};
use openraft::metrics::WaitError;
use openraft::{Config, RaftMetrics, ServerState, SnapshotPolicy};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::command::NodeId;
use crate::controller::Liveness;
use crate::error::MetadataError;
use crate::rpc::{Peers, QuorumId, Refusal, Request, Response};
use crate::state::ClusterState;
use crate::status::QuorumStatus;
use crate::types::{Node, Raft};

/// How long a single-voter quorum may take to elect itself and replay its log.
const SINGLE_VOTER_STARTUP: Duration = Duration::from_secs(10);
/// Start-up with several voters waits for a quorum without a deadline, logging this often.
const STARTUP_PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// How long a write, read barrier or membership change may take to find a leader and commit.
const LEADER_CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one call to a peer may take.
const PEER_CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause before asking again when no leader is known or the one asked had just lost it.
const LEADER_RETRY: Duration = Duration::from_millis(50);
/// How long `snapshot` waits for the snapshot to be built.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(10);
/// A snapshot trigger is ignored while another build runs; re-trigger this often until ours
/// is built.
const SNAPSHOT_RETRIGGER: Duration = Duration::from_millis(500);
/// Build a snapshot (and purge the log behind it) every this many entries.
const SNAPSHOT_EVERY_ENTRIES: u64 = 1000;
/// Entries kept in the log behind a snapshot, so a slightly lagging follower can catch up
/// from the log rather than from a snapshot.
const LOG_KEPT_BEHIND_SNAPSHOT: u64 = 100;
/// File of the metadata directory holding the quorum id (see [`QuorumId`]).
const QUORUM_ID_FILE: &str = "quorum-id.json";
/// How often the controller looks for brokers whose session expired.
const CONTROLLER_TICK: Duration = Duration::from_millis(100);

/// Where and as whom to run the metadata quorum.
#[derive(Debug)]
pub struct MetadataOptions {
    /// This node's id.
    pub node_id: NodeId,
    /// Directory for the raft log, vote and snapshots; created if missing.
    pub dir: PathBuf,
    /// Bound listener for other nodes' calls (the raft port).
    pub listener: TcpListener,
    /// The voters of the cluster and their raft addresses. A fresh store is initialized with
    /// these when this node is one of them; a node not listed joins as a learner through them.
    /// This node's own entry may name port 0: the bound address is used instead.
    pub voters: BTreeMap<NodeId, String>,
    /// The address a learner gives the voters for its raft port; `None`: the bound address.
    pub advertised: Option<String>,
    /// A broker silent for this long is fenced by the controller.
    pub session_timeout: Duration,
    /// The controller's automatic preferred-leader rebalance; `None`: off.
    pub leader_balance: Option<LeaderBalance>,
    /// Mutual TLS on the raft port; `None`: plain TCP.
    pub tls: Option<RaftTls>,
}

/// Kafka's `auto.leader.rebalance.enable` settings: every `interval`, partitions whose
/// preferred replica could lead but does not are handed back to it, for each broker whose
/// share of such partitions exceeds `per_broker_percentage`.
#[derive(Debug, Clone, Copy)]
pub struct LeaderBalance {
    pub interval: Duration,
    pub per_broker_percentage: u32,
}

/// Handle to the running metadata quorum on this node. Cheap to clone.
#[derive(Clone)]
pub struct Metadata {
    inner: Arc<Inner>,
}

struct Inner {
    node_id: NodeId,
    raft: Raft,
    state: watch::Receiver<Arc<ClusterState>>,
    metrics: watch::Receiver<RaftMetrics<NodeId, Node>>,
    /// When the other nodes last accepted this node's AppendEntries (meaningful on the leader).
    contacts: Arc<crate::network::Contacts>,
    /// This node's raft log: its committed index (the quorum's high watermark).
    log: crate::log_store::LogReader,
    peers: Arc<Peers>,
    quorum_id: Arc<QuorumId>,
    dir: PathBuf,
    session_timeout: Duration,
    leader_balance: Option<LeaderBalance>,
    /// When the controller last checked the leader balance (reset when it takes over).
    balanced_at: Mutex<Option<std::time::Instant>>,
    liveness: Mutex<Liveness>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Set by `shutdown`: the raft port closes every connection instead of answering.
    stopped: std::sync::atomic::AtomicBool,
}

/// The raft configuration of the metadata quorum.
fn raft_config() -> Result<Config, MetadataError> {
    Config {
        cluster_name: "strata-metadata".to_string(),
        heartbeat_interval: 100,
        election_timeout_min: 300,
        election_timeout_max: 600,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(SNAPSHOT_EVERY_ENTRIES),
        max_in_snapshot_log_to_keep: LOG_KEPT_BEHIND_SNAPSHOT,
        ..Config::default()
    }
    .validate()
    .map_err(|e| MetadataError::Raft(format!("invalid raft config: {e}")))
}

fn wait_error(err: WaitError) -> MetadataError {
    match err {
        WaitError::Timeout(after, what) => MetadataError::Timeout { what, after },
        WaitError::ShuttingDown => MetadataError::Shutdown,
    }
}

fn not_leader(f: &ForwardToLeader<NodeId, Node>) -> Refusal {
    Refusal::NotLeader {
        leader: f
            .leader_id
            .zip(f.leader_node.as_ref().map(|n| n.addr.clone())),
    }
}

fn refusal<E: std::error::Error>(e: RaftError<NodeId, E>) -> Refusal {
    match e {
        RaftError::Fatal(f) => Refusal::Failed(format!("raft stopped: {f}")),
        RaftError::APIError(e) => Refusal::Failed(e.to_string()),
    }
}

fn write_refusal(e: RaftError<NodeId, ClientWriteError<NodeId, Node>>) -> Refusal {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => not_leader(&f),
        other => refusal(other),
    }
}

impl Metadata {
    /// Latest applied state (cheap: an `Arc` clone).
    pub fn state(&self) -> Arc<ClusterState> {
        self.inner.state.borrow().clone()
    }

    /// Subscribes to state changes: the receiver sees every newly applied state.
    pub fn subscribe(&self) -> watch::Receiver<Arc<ClusterState>> {
        self.inner.state.clone()
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.inner.node_id
    }

    /// Whether this node currently leads the metadata quorum (and so is the active controller).
    pub fn is_leader(&self) -> bool {
        let metrics = self.inner.metrics.borrow();
        metrics.state == ServerState::Leader && metrics.current_leader == Some(self.inner.node_id)
    }

    /// The node that leads the quorum (the active controller), as far as this node knows.
    pub fn leader(&self) -> Option<NodeId> {
        self.inner.metrics.borrow().current_leader
    }

    #[cfg(test)]
    fn raft(&self) -> &Raft {
        &self.inner.raft
    }

    /// Role, leader, term, log position and membership as this node sees them.
    pub fn status(&self) -> QuorumStatus {
        self.inner.status()
    }

    /// The quorum as its leader sees it (with every node's log end and last contact), asked
    /// of the leader when this node does not lead.
    pub async fn leader_status(&self) -> Result<QuorumStatus, MetadataError> {
        let inner = &self.inner;
        self.on_leader(
            Request::Status,
            false,
            || async { inner.local_status() },
            |r| match r {
                Response::Status(a) => Some(a),
                _ => None,
            },
        )
        .await
    }

    /// Builds a snapshot of everything applied so far and waits until it is on disk.
    pub async fn snapshot(&self) -> Result<(), MetadataError> {
        let target = self.inner.metrics.borrow().last_applied;
        let deadline = Instant::now() + SNAPSHOT_TIMEOUT;
        loop {
            self.inner.raft.trigger().snapshot().await?;
            let now = Instant::now();
            if now >= deadline {
                return Err(MetadataError::Timeout {
                    what: "a metadata snapshot to be built".to_string(),
                    after: SNAPSHOT_TIMEOUT,
                });
            }
            let wait = SNAPSHOT_RETRIGGER.min(deadline - now);
            match self
                .inner
                .raft
                .wait(Some(wait))
                .metrics(|m| m.snapshot >= target, "a metadata snapshot to be built")
                .await
            {
                Ok(_) => return Ok(()),
                Err(WaitError::Timeout(..)) => continue,
                Err(WaitError::ShuttingDown) => return Err(MetadataError::Shutdown),
            }
        }
    }

    /// Resolves when this node's raft core has quit on an error (a log, vote or snapshot
    /// write failed: a full disk, no descriptors left) and so can no longer vote, replicate or
    /// apply. openraft does not restart its core; the caller should fail-stop, as Kafka's
    /// brokers halt on a fatal metadata error, and let its supervisor start it again from
    /// its files. Never resolves for a core stopped by [`Metadata::shutdown`].
    pub async fn failed(&self) -> MetadataError {
        let mut metrics = self.inner.metrics.clone();
        loop {
            if let Err(fatal) = &metrics.borrow_and_update().running_state {
                if !matches!(fatal, openraft::error::Fatal::Stopped) {
                    return MetadataError::Raft(format!("the raft core stopped: {fatal}"));
                }
            }
            if metrics.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// Shuts raft and the raft port down. Every acknowledged entry is already fsynced, so
    /// nothing is lost; later calls on this handle (or its clones) fail with
    /// [`MetadataError::Shutdown`].
    pub async fn shutdown(&self) -> Result<(), MetadataError> {
        self.inner
            .stopped
            .store(true, std::sync::atomic::Ordering::Release);
        let tasks: Vec<_> = self
            .inner
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
            .collect();
        // Aborting only schedules the cancellation; awaiting each task means its future (and
        // with it the raft port's listener) is dropped before this returns, so the address can
        // be bound again at once.
        for task in &tasks {
            task.abort();
        }
        for task in tasks {
            let _ = task.await;
        }
        self.inner
            .raft
            .shutdown()
            .await
            .map_err(|e| MetadataError::Raft(format!("raft task failed during shutdown: {e}")))
    }
}

impl Inner {
    fn status(&self) -> QuorumStatus {
        let m = self.metrics.borrow();
        let membership = m.membership_config.membership();
        let voter_ids: BTreeSet<NodeId> = membership.voter_ids().collect();
        let (mut voters, mut learners) = (BTreeMap::new(), BTreeMap::new());
        for (id, node) in membership.nodes() {
            if voter_ids.contains(id) {
                voters.insert(*id, node.addr.clone());
            } else {
                learners.insert(*id, node.addr.clone());
            }
        }
        QuorumStatus {
            node_id: self.node_id,
            role: match m.state {
                ServerState::Leader => "leader",
                ServerState::Follower => "follower",
                ServerState::Candidate => "candidate",
                ServerState::Learner => "learner",
                ServerState::Shutdown => "shutdown",
            }
            .to_string(),
            leader: m.current_leader,
            term: m.current_term,
            last_log_index: m.last_log_index,
            last_applied_index: m.last_applied.map(|l| l.index),
            voters,
            learners,
            replication: m.replication.as_ref().map(|r| {
                r.iter()
                    .map(|(id, log)| (*id, log.map(|l| l.index)))
                    .collect()
            }),
            committed_index: self.log.committed_index(),
            contacts: (membership.nodes())
                .filter_map(|(id, _)| Some((*id, self.contacts.get(*id)?)))
                .collect(),
        }
    }

    /// This node's status if it leads the quorum, else who does.
    fn local_status(&self) -> Result<QuorumStatus, Refusal> {
        let status = self.status();
        if status.role == "leader" && status.leader == Some(self.node_id) {
            return Ok(status);
        }
        let leader = status.leader.and_then(|l| {
            let addr = (status.voters.get(&l)).or_else(|| status.learners.get(&l))?;
            Some((l, addr.clone()))
        });
        Err(Refusal::NotLeader { leader })
    }
}
