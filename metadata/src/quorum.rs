//! [`Metadata`]: the handle the broker uses to run and talk to the metadata quorum.
//!
//! A node is a voter (listed in the voters of a new cluster, or promoted later) or a learner
//! (any other broker: it asks a voter to add it, then receives every entry). Either way it
//! holds the whole state machine and serves reads from it. Writes and heartbeats go to the
//! leader: locally when this node leads, otherwise over [`crate::rpc`].
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

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use openraft::error::{
    CheckIsLeaderError, ClientWriteError, ForwardToLeader, InitializeError, RaftError,
};
use openraft::metrics::WaitError;
use openraft::{ChangeMembers, Config, RaftMetrics, ServerState, SnapshotPolicy};
use serde::Serialize;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::command::{Command, CommandResult, NodeId};
use crate::controller::{Heartbeat, HeartbeatReply, Liveness, Verdict};
use crate::error::MetadataError;
use crate::log_store::LogStore;
use crate::network::TcpNetwork;
use crate::rpc::{self, CallError, Envelope, Peers, QuorumId, Refusal, Request, Response};
use crate::state::ClusterState;
use crate::state_machine::StateMachineStore;
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
    /// A broker silent for this long is fenced by the controller.
    pub session_timeout: Duration,
    /// The controller's automatic preferred-leader rebalance; `None`: off.
    pub leader_balance: Option<LeaderBalance>,
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

/// The quorum as this node sees it, for status pages and metrics.
#[derive(Clone, Debug, Serialize)]
pub struct QuorumStatus {
    pub node_id: NodeId,
    /// `leader`, `follower`, `candidate`, `learner` or `shutdown`.
    pub role: &'static str,
    pub leader: Option<NodeId>,
    pub term: u64,
    pub last_log_index: Option<u64>,
    pub last_applied_index: Option<u64>,
    pub voters: BTreeMap<NodeId, String>,
    pub learners: BTreeMap<NodeId, String>,
    /// On the leader: the last log index each node is known to hold.
    pub replication: Option<BTreeMap<NodeId, Option<u64>>>,
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
    /// Opens (or creates) the on-disk raft state, starts raft and the raft port, and joins the
    /// quorum: a fresh voter initializes it with `voters`, a fresh learner asks a voter to add
    /// it. Returns once a leader is known and this node has applied everything it committed.
    pub async fn open(opts: MetadataOptions) -> Result<Metadata, MetadataError> {
        let MetadataOptions {
            node_id,
            dir,
            listener,
            voters,
            session_timeout,
            leader_balance,
        } = opts;
        let bound = listener
            .local_addr()
            .map_err(|e| MetadataError::io("reading the raft listener's address", e))?;
        let voters: BTreeMap<NodeId, String> = voters
            .into_iter()
            .map(|(id, addr)| {
                let addr = if id == node_id && addr.ends_with(":0") {
                    bound.to_string()
                } else {
                    addr
                };
                (id, addr)
            })
            .collect();
        let my_addr = voters
            .get(&node_id)
            .cloned()
            .unwrap_or_else(|| bound.to_string());
        let quorum_id = Arc::new(QuorumId::default());
        if let Some(id) = crate::fs_util::read_json::<String>(&dir.join(QUORUM_ID_FILE))? {
            quorum_id.set(id);
        }
        let store_dir = dir.clone();
        let (log_store, state_machine, state) = tokio::task::spawn_blocking(move || {
            let dir = store_dir;
            let (log_store, report) = LogStore::open(&dir)?;
            tracing::info!(
                dir = %dir.display(),
                entries = report.entries,
                truncated_bytes = report.truncated_bytes,
                dropped_purged = report.dropped_purged,
                "opened metadata raft log"
            );
            let (state_machine, state) = StateMachineStore::open(&dir)?;
            Ok::<_, MetadataError>((log_store, state_machine, state))
        })
        .await
        .map_err(|e| MetadataError::Raft(format!("opening the metadata store panicked: {e}")))??;

        let peers = Arc::new(Peers::new(quorum_id.clone()));
        let config = Arc::new(raft_config()?);
        let network = TcpNetwork::new(peers.clone());
        let raft = Raft::new(node_id, config, network, log_store, state_machine).await?;
        let metadata = Metadata {
            inner: Arc::new(Inner {
                node_id,
                metrics: raft.metrics(),
                raft,
                state,
                peers,
                quorum_id,
                dir,
                session_timeout,
                leader_balance,
                balanced_at: Mutex::new(None),
                liveness: Mutex::new(Liveness::default()),
                tasks: Mutex::new(Vec::new()),
                stopped: std::sync::atomic::AtomicBool::new(false),
            }),
        };
        // Known before the raft port answers anyone: a fresh voter's id comes from the voters
        // it initializes with, an older store's from its membership.
        if metadata.inner.quorum_id.get().is_none() {
            let id = if let Some(m) = metadata.stored_membership().await? {
                let voters: BTreeSet<NodeId> = m.voter_ids().collect();
                Some(QuorumId::of_voters(
                    m.nodes()
                        .filter(|(id, _)| voters.contains(id))
                        .map(|(id, n)| (id, &n.addr)),
                ))
            } else if voters.contains_key(&node_id) {
                Some(QuorumId::of_voters(&voters))
            } else {
                None
            };
            if let Some(id) = id {
                metadata.inner.keep_quorum_id(id)?;
            }
        }
        let weak = Arc::downgrade(&metadata.inner);
        let server = tokio::spawn(serve(listener, weak.clone()));
        let controller = tokio::spawn(run_controller(weak));
        metadata
            .inner
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend([server, controller]);
        tracing::info!(node_id, raft_addr = %my_addr, "metadata node started");
        match metadata.become_ready(&voters, &my_addr).await {
            Ok(()) => Ok(metadata),
            Err(e) => {
                // Do not leave raft's tasks running behind a failed open.
                if let Err(stop) = metadata.shutdown().await {
                    tracing::warn!(error = %stop, "shutting down raft after a failed open");
                }
                Err(e)
            }
        }
    }

    /// Initializes or joins as the store and `voters` call for, then waits for a leader and
    /// catches up with it.
    async fn become_ready(
        &self,
        voters: &BTreeMap<NodeId, String>,
        my_addr: &str,
    ) -> Result<(), MetadataError> {
        let raft = &self.inner.raft;
        let node_id = self.inner.node_id;
        // A fresh node may already have a vote (a peer's vote request reached the raft port
        // before this point), so "fresh" means no membership entry yet, not an empty vote.
        if let Some(membership) = self.stored_membership().await? {
            let stored_voters: Vec<NodeId> = membership.voter_ids().collect();
            let member = membership.nodes().any(|(id, _)| *id == node_id);
            if !member {
                return Err(MetadataError::Raft(format!(
                    "node {node_id} is not a member of the stored metadata quorum (voters: {stored_voters:?})"
                )));
            }
            let configured: Vec<NodeId> = voters.keys().copied().collect();
            if configured != stored_voters && voters.contains_key(&node_id) {
                tracing::warn!(
                    ?configured,
                    stored = ?stored_voters,
                    "the configured voters differ from the stored membership, which wins (change voters with `strata cluster add-voter/remove-voter`)"
                );
            }
            if stored_voters == [node_id] {
                // The only voter: no need to wait out an election timeout.
                raft.trigger().elect().await?;
            }
        } else if voters.contains_key(&node_id) {
            tracing::info!(node_id, voters = ?voters.keys().collect::<Vec<_>>(), "initializing the metadata quorum");
            let members: BTreeMap<NodeId, Node> = voters
                .iter()
                .map(|(id, addr)| (*id, Node::new(addr.clone())))
                .collect();
            match raft.initialize(members).await {
                Ok(()) => {}
                // Another voter's initialization (or its vote request) reached this node first;
                // the leader sends the membership.
                Err(RaftError::APIError(InitializeError::NotAllowed(_))) => {}
                Err(e) => return Err(e.into()),
            }
        } else {
            self.join(voters, my_addr).await?;
        }

        let single = voters.len() == 1 && voters.contains_key(&node_id);
        let started = Instant::now();
        loop {
            let wait = if single {
                SINGLE_VOTER_STARTUP
            } else {
                STARTUP_PROGRESS_EVERY
            };
            match raft
                .wait(Some(wait))
                .metrics(|m| m.current_leader.is_some(), "a metadata leader")
                .await
            {
                Ok(_) => break,
                Err(WaitError::Timeout(..)) if !single => {
                    tracing::info!(
                        waited_s = started.elapsed().as_secs(),
                        voters = ?voters,
                        "waiting for a quorum of metadata voters to elect a leader"
                    );
                }
                Err(e) => return Err(wait_error(e)),
            }
        }
        loop {
            match self.catch_up().await {
                Ok(()) => return Ok(()),
                Err(MetadataError::NotLeader | MetadataError::Timeout { .. }) if !single => {
                    tracing::info!(
                        waited_s = started.elapsed().as_secs(),
                        "waiting to catch up with the metadata leader"
                    );
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The membership in this node's log or snapshot, `None` for a fresh node. Read from raft
    /// itself: its metrics are published asynchronously and may not show the stored
    /// membership yet right after start.
    async fn stored_membership(
        &self,
    ) -> Result<Option<openraft::Membership<NodeId, Node>>, MetadataError> {
        let effective = self
            .inner
            .raft
            .with_raft_state(|st| st.membership_state.effective().clone())
            .await?;
        Ok(effective
            .log_id()
            .is_some()
            .then(|| effective.membership().clone()))
    }

    /// Asks the voters until one (the leader) adds this node as a learner.
    async fn join(
        &self,
        voters: &BTreeMap<NodeId, String>,
        my_addr: &str,
    ) -> Result<(), MetadataError> {
        if voters.is_empty() {
            return Err(MetadataError::Raft(
                "this node is not a voter and no voter is configured to join through".to_string(),
            ));
        }
        let node_id = self.inner.node_id;
        let request = Request::Join {
            node_id,
            addr: my_addr.to_string(),
        };
        let started = Instant::now();
        let mut last_report = Instant::now();
        let mut targets: Vec<String> = voters.values().cloned().collect();
        let mut next = 0usize;
        loop {
            let addr = targets[next % targets.len()].clone();
            next += 1;
            match self
                .inner
                .peers
                .get(&addr)
                .call(&request, PEER_CALL_TIMEOUT)
                .await
            {
                Ok(Response::Joined(Ok(quorum))) => {
                    self.inner.keep_quorum_id(quorum)?;
                    tracing::info!(node_id, via = %addr, "joined the metadata quorum as a learner");
                    return Ok(());
                }
                Ok(Response::Joined(Err(Refusal::NotLeader {
                    leader: Some((_, leader)),
                }))) => {
                    // Ask the leader next.
                    if !targets.contains(&leader) {
                        targets.push(leader.clone());
                    }
                    next = targets.iter().position(|t| *t == leader).unwrap_or(next);
                    continue;
                }
                Ok(other) => {
                    tracing::debug!(via = %addr, answer = ?other, "join not accepted yet");
                }
                Err(e) => tracing::debug!(via = %addr, error = %e, "join: voter unreachable"),
            }
            if last_report.elapsed() >= STARTUP_PROGRESS_EVERY {
                last_report = Instant::now();
                tracing::info!(
                    waited_s = started.elapsed().as_secs(),
                    voters = ?voters,
                    "waiting for a metadata leader to add this node as a learner"
                );
            }
            tokio::time::sleep(LEADER_RETRY * 4).await;
        }
    }

    /// Waits until this node has applied everything the leader had committed when asked.
    async fn catch_up(&self) -> Result<(), MetadataError> {
        let index = self.read_index().await?;
        self.wait_applied(index).await
    }

    async fn wait_applied(&self, index: u64) -> Result<(), MetadataError> {
        self.inner
            .raft
            .wait(Some(LEADER_CALL_TIMEOUT))
            .applied_index_at_least(Some(index), "this node to apply a committed entry")
            .await
            .map(|_| ())
            .map_err(wait_error)
    }

    /// Runs `local` when this node leads, or sends `request` to the leader, until one answers
    /// or [`LEADER_CALL_TIMEOUT`] passes. `once`: the request must not run twice (see the
    /// module invariants).
    async fn on_leader<T, F, Fut>(
        &self,
        request: Request,
        once: bool,
        local: F,
        unpack: fn(Response) -> Option<Result<T, Refusal>>,
    ) -> Result<T, MetadataError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, Refusal>>,
    {
        let deadline = Instant::now() + LEADER_CALL_TIMEOUT;
        loop {
            let (leader, addr) = {
                let m = self.inner.metrics.borrow();
                if m.state == ServerState::Shutdown {
                    return Err(MetadataError::Shutdown);
                }
                let addr = m
                    .current_leader
                    .and_then(|l| m.membership_config.membership().get_node(&l).cloned());
                (m.current_leader, addr)
            };
            let answer = match (leader, addr) {
                (Some(l), _) if l == self.inner.node_id => Some(local().await),
                (Some(l), Some(node)) => {
                    let peer = self.inner.peers.get(&node.addr);
                    let sent = if once {
                        peer.call_once(&request, PEER_CALL_TIMEOUT).await
                    } else {
                        peer.call(&request, PEER_CALL_TIMEOUT)
                            .await
                            .map_err(CallError::NotSent)
                    };
                    match sent {
                        Ok(response) => match unpack(response) {
                            Some(answer) => Some(answer),
                            None => {
                                return Err(MetadataError::Raft(format!(
                                    "node {l} answered with the wrong message"
                                )))
                            }
                        },
                        Err(CallError::NotSent(e)) => {
                            tracing::debug!(leader = l, error = %e, "metadata leader unreachable");
                            None
                        }
                        Err(CallError::Unknown(e)) => {
                            return Err(MetadataError::Raft(format!(
                                "metadata leader {l} at {}: {e}",
                                node.addr
                            )))
                        }
                    }
                }
                _ => None,
            };
            match answer {
                Some(Ok(v)) => return Ok(v),
                Some(Err(Refusal::Failed(m))) => return Err(MetadataError::Raft(m)),
                Some(Err(Refusal::NotLeader { .. })) | None => {}
            }
            if Instant::now() >= deadline {
                return Err(MetadataError::NotLeader);
            }
            tokio::time::sleep(LEADER_RETRY).await;
        }
    }

    /// Proposes a command through raft and returns its result once committed and applied on
    /// this node.
    pub async fn propose(&self, cmd: Command) -> Result<CommandResult, MetadataError> {
        let inner = &self.inner;
        let (result, index) = self
            .on_leader(
                Request::Propose(cmd.clone()),
                true,
                || inner.local_propose(cmd.clone()),
                |r| match r {
                    Response::Proposed(a) => Some(a),
                    _ => None,
                },
            )
            .await?;
        self.wait_applied(index).await?;
        Ok(result)
    }

    /// The index a read must have applied to observe every write committed before the call.
    async fn read_index(&self) -> Result<u64, MetadataError> {
        let inner = &self.inner;
        self.on_leader(
            Request::ReadIndex,
            false,
            || inner.local_read_index(),
            |r| match r {
                Response::ReadIndex(a) => Some(a),
                _ => None,
            },
        )
        .await
    }

    /// Reports this broker's liveness to the controller.
    pub async fn heartbeat(&self, hb: Heartbeat) -> Result<HeartbeatReply, MetadataError> {
        let inner = &self.inner;
        self.on_leader(
            Request::Heartbeat(hb.clone()),
            false,
            || inner.local_heartbeat(hb.clone()),
            |r| match r {
                Response::Heartbeat(a) => Some(a),
                _ => None,
            },
        )
        .await
    }

    /// Promotes learners to voters (`add`) and demotes voters to learners (`remove`), in one
    /// membership change through raft (joint consensus).
    pub async fn change_voters(
        &self,
        add: Vec<NodeId>,
        remove: Vec<NodeId>,
    ) -> Result<(), MetadataError> {
        let inner = &self.inner;
        self.on_leader(
            Request::ChangeVoters {
                add: add.clone(),
                remove: remove.clone(),
            },
            true,
            || inner.local_change_voters(add.clone(), remove.clone()),
            |r| match r {
                Response::VotersChanged(a) => Some(a),
                _ => None,
            },
        )
        .await
    }

    /// Waits until the state satisfies `done`, for at most `timeout`.
    pub async fn wait_for_state(
        &self,
        timeout: Duration,
        what: &str,
        done: impl Fn(&ClusterState) -> bool,
    ) -> Result<Arc<ClusterState>, MetadataError> {
        let mut rx = self.inner.state.clone();
        let wait = async {
            loop {
                let state = rx.borrow_and_update().clone();
                if done(&state) {
                    return Ok(state);
                }
                if rx.changed().await.is_err() {
                    return Err(MetadataError::Shutdown);
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| MetadataError::Timeout {
                what: what.to_string(),
                after: timeout,
            })?
    }

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
        let m = self.inner.metrics.borrow();
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
            node_id: self.inner.node_id,
            role: match m.state {
                ServerState::Leader => "leader",
                ServerState::Follower => "follower",
                ServerState::Candidate => "candidate",
                ServerState::Learner => "learner",
                ServerState::Shutdown => "shutdown",
            },
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
        }
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
    /// Records the quorum id (first one wins) and keeps it in the metadata directory.
    fn keep_quorum_id(&self, id: String) -> Result<(), MetadataError> {
        let id = self.quorum_id.set(id).to_string();
        crate::fs_util::write_json_atomic(&self.dir.join(QUORUM_ID_FILE), &id)
    }

    fn current_term(&self) -> u64 {
        self.metrics.borrow().current_term
    }

    /// Proposes on this node (the leader). Bounded: a leader cut off from its quorum cannot
    /// commit, and its caller must not wait forever (the entry may still commit later, if
    /// this node keeps its leadership).
    async fn local_propose(&self, cmd: Command) -> Result<(CommandResult, u64), Refusal> {
        match tokio::time::timeout(LEADER_CALL_TIMEOUT, self.raft.client_write(cmd)).await {
            Ok(written) => written
                .map(|r| (r.data, r.log_id.index))
                .map_err(write_refusal),
            Err(_) => Err(Refusal::Failed(format!(
                "not committed within {LEADER_CALL_TIMEOUT:?}: no quorum of metadata voters reachable"
            ))),
        }
    }

    async fn local_read_index(&self) -> Result<u64, Refusal> {
        match self.raft.ensure_linearizable().await {
            Ok(log_id) => Ok(log_id.map_or(0, |l| l.index)),
            Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) => Err(not_leader(&f)),
            // A leader that could not hear from a quorum in time (peers still starting, or
            // slow) is not known to lead: callers retry until their deadline, as for a leader
            // change, rather than fail at once (a start-up raced this and exited).
            Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(q))) => {
                tracing::debug!(error = %q, "leadership not confirmed by a quorum");
                Err(Refusal::NotLeader { leader: None })
            }
            Err(e) => Err(refusal(e)),
        }
    }

    async fn local_join(&self, node_id: NodeId, addr: String) -> Result<String, Refusal> {
        let quorum = self.quorum_id.get().unwrap_or_default().to_string();
        let known = self
            .metrics
            .borrow()
            .membership_config
            .membership()
            .get_node(&node_id)
            .cloned();
        match known {
            Some(node) if node.addr == addr => return Ok(quorum),
            Some(node) => {
                return Err(Refusal::Failed(format!(
                    "node {node_id} is already a member at {}, not {addr}: node ids and raft addresses are fixed for the life of a cluster",
                    node.addr
                )))
            }
            None => {}
        }
        tracing::info!(node_id, %addr, "adding a learner to the metadata quorum");
        self.raft
            .add_learner(node_id, Node::new(addr), false)
            .await
            .map(|_| quorum)
            .map_err(write_refusal)
    }

    async fn local_change_voters(
        &self,
        add: Vec<NodeId>,
        remove: Vec<NodeId>,
    ) -> Result<(), Refusal> {
        if !add.is_empty() {
            self.raft
                .change_membership(ChangeMembers::AddVoterIds(add.into_iter().collect()), true)
                .await
                .map_err(write_refusal)?;
        }
        if !remove.is_empty() {
            self.raft
                .change_membership(
                    ChangeMembers::RemoveVoters(remove.into_iter().collect()),
                    true,
                )
                .await
                .map_err(write_refusal)?;
        }
        Ok(())
    }

    async fn local_heartbeat(&self, hb: Heartbeat) -> Result<HeartbeatReply, Refusal> {
        if self.metrics.borrow().current_leader != Some(self.node_id) {
            return Err(Refusal::NotLeader { leader: None });
        }
        let verdict = {
            let state = self.state.borrow().clone();
            let mut liveness = self.liveness.lock().unwrap_or_else(PoisonError::into_inner);
            liveness.observe_term(self.current_term(), std::time::Instant::now());
            liveness.heartbeat(&state, &hb, std::time::Instant::now())
        };
        match verdict {
            Verdict::Reply(reply) => Ok(reply),
            Verdict::SetFenced(fence) => {
                let cmd = if fence {
                    tracing::info!(broker = hb.node_id, "broker shutting down: fencing it");
                    Command::FenceBroker {
                        node_id: hb.node_id,
                        epoch: hb.epoch,
                    }
                } else {
                    tracing::info!(
                        broker = hb.node_id,
                        epoch = hb.epoch,
                        "broker heartbeats: unfencing it"
                    );
                    Command::UnfenceBroker {
                        node_id: hb.node_id,
                        epoch: hb.epoch,
                    }
                };
                match self.local_propose(cmd).await?.0 {
                    CommandResult::Ok => Ok(HeartbeatReply::Alive { fenced: fence }),
                    CommandResult::StaleBrokerEpoch { current } => Ok(HeartbeatReply::StaleEpoch {
                        current: Some(current),
                    }),
                    CommandResult::UnknownBroker => {
                        Ok(HeartbeatReply::StaleEpoch { current: None })
                    }
                    other => Err(Refusal::Failed(format!("unexpected {other:?}"))),
                }
            }
        }
    }

    /// One controller round on the leader: fence brokers whose session expired, elect leaders
    /// outside the ISR where a topic allows it, and now and then hand leadership back to
    /// preferred replicas.
    async fn control(&self) {
        self.fence_expired_and_elect_unclean().await;
        self.balance_leaders().await;
    }

    /// Every `leader_balance.interval`: preferred-leader elections where a broker's share of
    /// partitions led elsewhere passed the threshold. The first check waits a whole interval
    /// after this node became controller, so returning brokers catch up first.
    async fn balance_leaders(&self) {
        let Some(balance) = self.leader_balance else {
            return;
        };
        {
            let mut at = self
                .balanced_at
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let now = std::time::Instant::now();
            match *at {
                Some(t) if now.duration_since(t) < balance.interval => return,
                None => {
                    *at = Some(now);
                    return;
                }
                Some(_) => *at = Some(now),
            }
        }
        let partitions = self
            .state
            .borrow()
            .preferred_leader_imbalance(balance.per_broker_percentage);
        if partitions.is_empty() {
            return;
        }
        let count = partitions.len();
        match self
            .local_propose(Command::ElectPreferredLeaders { partitions })
            .await
        {
            Ok(_) => tracing::info!(
                partitions = count,
                "leadership handed back to preferred replicas"
            ),
            Err(e) => tracing::warn!(error = ?e, "preferred leader election failed; will retry"),
        }
    }

    async fn fence_expired_and_elect_unclean(&self) {
        let expired = {
            let state = self.state.borrow().clone();
            let mut liveness = self.liveness.lock().unwrap_or_else(PoisonError::into_inner);
            let now = std::time::Instant::now();
            liveness.observe_term(self.current_term(), now);
            liveness.expired(&state, now, self.session_timeout)
        };
        for (node_id, epoch, silent) in expired {
            tracing::warn!(
                broker = node_id,
                epoch,
                silent_ms = silent.as_millis() as u64,
                "broker missed its heartbeats for the session timeout: fencing it"
            );
            if let Err(e) = self
                .local_propose(Command::FenceBroker { node_id, epoch })
                .await
            {
                tracing::warn!(broker = node_id, error = ?e, "fencing failed; will retry");
            }
        }
        let candidates = self.state.borrow().unclean_candidates();
        for (topic_id, partition) in candidates {
            match self
                .local_propose(Command::ElectUncleanLeader {
                    topic_id,
                    partition,
                })
                .await
            {
                Ok((CommandResult::Ok, _)) => {
                    let state = self.state.borrow().clone();
                    let (topic, leader) = state
                        .topic_by_id(&topic_id)
                        .map(|t| {
                            let leader = usize::try_from(partition)
                                .ok()
                                .and_then(|i| t.partitions.get(i))
                                .and_then(|p| p.leader);
                            (t.name.clone(), leader)
                        })
                        .unwrap_or_default();
                    tracing::warn!(
                        %topic,
                        partition,
                        ?leader,
                        "UNCLEAN leader election: no in-sync replica was alive; records only the old ISR held are lost"
                    );
                }
                other => tracing::debug!(partition, answer = ?other, "unclean election not made"),
            }
        }
    }

    async fn handle(&self, request: Request) -> Response {
        match request {
            Request::AppendEntries(r) => Response::AppendEntries(self.raft.append_entries(r).await),
            Request::Vote(r) => Response::Vote(self.raft.vote(r).await),
            Request::InstallSnapshot(r) => {
                Response::InstallSnapshot(self.raft.install_snapshot(r).await)
            }
            Request::Propose(cmd) => Response::Proposed(self.local_propose(cmd).await),
            Request::Join { node_id, addr } => {
                Response::Joined(self.local_join(node_id, addr).await)
            }
            Request::Heartbeat(hb) => Response::Heartbeat(self.local_heartbeat(hb).await),
            Request::ReadIndex => Response::ReadIndex(self.local_read_index().await),
            Request::ChangeVoters { add, remove } => {
                Response::VotersChanged(self.local_change_voters(add, remove).await)
            }
        }
    }
}

/// Accepts connections on the raft port; each carries requests answered in order.
async fn serve(listener: TcpListener, inner: Weak<Inner>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(rpc::MAX_CONNECTIONS));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "raft port: accept failed");
                tokio::time::sleep(LEADER_RETRY).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "raft port: connection refused, {} open", rpc::MAX_CONNECTIONS);
            continue;
        };
        let inner = inner.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_connection(stream, inner).await {
                tracing::debug!(%peer, error = %e, "raft port: connection closed");
            }
            drop(slot);
        });
    }
}

async fn serve_connection(mut stream: TcpStream, inner: Weak<Inner>) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let peer = stream.peer_addr()?;
    while let Some(Envelope { quorum, request }) = rpc::read_frame(&mut stream).await? {
        let Some(inner) = inner.upgrade() else {
            return Ok(());
        };
        if inner.stopped.load(std::sync::atomic::Ordering::Acquire) {
            // Peers reconnect and reach whatever now listens on this address.
            return Ok(());
        }
        if let Some(mine) = inner.quorum_id.get() {
            let joining = quorum.is_none() && matches!(request, Request::Join { .. });
            if quorum.as_deref() != Some(mine) && !joining {
                tracing::warn!(
                    %peer,
                    theirs = ?quorum,
                    mine,
                    "refusing a raft request from another metadata quorum (a reused address, or wrong --voters?)"
                );
                return Ok(());
            }
        }
        let response = inner.handle(request).await;
        drop(inner);
        rpc::write_response(&mut stream, &response).await?;
    }
    Ok(())
}

/// The controller loop: on the leader, one [`Inner::control`] round per tick.
async fn run_controller(inner: Weak<Inner>) {
    let mut tick = tokio::time::interval(CONTROLLER_TICK);
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let leads = {
            let m = inner.metrics.borrow();
            m.state == ServerState::Leader && m.current_leader == Some(inner.node_id)
        };
        if leads {
            inner.control().await;
        } else {
            *inner
                .balanced_at
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use super::*;

    async fn opts(node_id: NodeId, dir: &Path) -> MetadataOptions {
        MetadataOptions {
            node_id,
            dir: dir.to_path_buf(),
            listener: TcpListener::bind("127.0.0.1:0").await.expect("bind"),
            voters: BTreeMap::from([(node_id, "127.0.0.1:0".to_string())]),
            session_timeout: Duration::from_secs(3),
            leader_balance: None,
        }
    }

    async fn open(dir: &Path) -> Metadata {
        Metadata::open(opts(1, dir).await)
            .await
            .expect("open metadata")
    }

    async fn propose_ok(metadata: &Metadata, cmd: Command) {
        let result = metadata.propose(cmd.clone()).await.expect("propose");
        assert!(result.is_ok(), "{cmd:?} was rejected: {result:?}");
    }

    fn register(node_id: NodeId) -> Command {
        Command::RegisterBroker {
            node_id,
            host: "127.0.0.1".to_string(),
            port: 9092,
            rack: None,
        }
    }

    fn create_topic(name: &str, partitions: usize) -> Command {
        Command::CreateTopic {
            name: name.to_string(),
            topic_id: uuid::Uuid::new_v4(),
            replicas: vec![vec![1]; partitions],
            configs: BTreeMap::from([("retention.ms".to_string(), "60000".to_string())]),
        }
    }

    #[tokio::test]
    async fn a_fresh_directory_becomes_a_leader_that_applies_proposals() {
        let dir = tempfile::tempdir().expect("tempdir");
        let metadata = open(&dir.path().join("meta")).await;
        assert!(metadata.is_leader());
        assert_eq!(metadata.node_id(), 1);
        assert_eq!(*metadata.state(), ClusterState::default());

        let mut updates = metadata.subscribe();
        updates.borrow_and_update();
        propose_ok(&metadata, register(1)).await;
        assert!(updates.has_changed().expect("sender alive"));
        propose_ok(&metadata, create_topic("orders", 3)).await;
        assert_eq!(
            metadata
                .propose(create_topic("orders", 1))
                .await
                .expect("propose"),
            CommandResult::TopicAlreadyExists
        );
        assert_eq!(
            metadata
                .propose(Command::AllocateProducerIds { count: 10 })
                .await
                .expect("propose"),
            CommandResult::ProducerIds {
                first: 1000,
                count: 10
            }
        );

        let state = metadata.state();
        assert_eq!(state.topic("orders").map(|t| t.partitions.len()), Some(3));
        assert_eq!(state.next_producer_id, 1010);
        metadata.shutdown().await.expect("shutdown");
        assert!(!metadata.is_leader());
        assert!(matches!(
            metadata.propose(register(2)).await,
            Err(MetadataError::Shutdown)
        ));
        assert!(matches!(
            metadata.snapshot().await,
            Err(MetadataError::Shutdown)
        ));
        // The last state stays readable, and a second shutdown is harmless.
        assert_eq!(metadata.state(), state);
        metadata.shutdown().await.expect("second shutdown");
    }

    #[tokio::test]
    async fn state_survives_a_restart_and_proposals_continue_after_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let metadata = open(dir.path()).await;
        propose_ok(&metadata, register(1)).await;
        propose_ok(&metadata, create_topic("a", 2)).await;
        propose_ok(
            &metadata,
            Command::AlterTopicConfig {
                name: "a".to_string(),
                set: BTreeMap::from([("cleanup.policy".to_string(), "compact".to_string())]),
                delete: vec!["retention.ms".to_string()],
            },
        )
        .await;
        propose_ok(&metadata, Command::AllocateProducerIds { count: 5 }).await;
        let before = metadata.state();
        metadata.shutdown().await.expect("shutdown");

        let reopened = open(dir.path()).await;
        assert_eq!(reopened.state(), before);
        propose_ok(
            &reopened,
            Command::CreatePartitions {
                name: "a".to_string(),
                new_replicas: vec![vec![1]],
            },
        )
        .await;
        assert_eq!(
            reopened
                .propose(Command::AllocateProducerIds { count: 1 })
                .await
                .expect("propose"),
            CommandResult::ProducerIds {
                first: 1005,
                count: 1
            }
        );
        let after = reopened.state();
        assert_eq!(after.topic("a").map(|t| t.partitions.len()), Some(3));
        reopened.shutdown().await.expect("shutdown");

        let third = open(dir.path()).await;
        assert_eq!(third.state(), after);
        third.shutdown().await.expect("shutdown");
    }

    #[tokio::test]
    async fn state_is_rebuilt_from_a_snapshot_plus_the_log_after_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let metadata = open(dir.path()).await;
        propose_ok(&metadata, register(1)).await;
        propose_ok(&metadata, create_topic("before-snapshot", 1)).await;
        metadata.snapshot().await.expect("snapshot");
        assert!(dir.path().join("snapshot").join("snapshot.json").exists());
        // A second snapshot with nothing new applied also completes.
        metadata.snapshot().await.expect("second snapshot");

        propose_ok(&metadata, create_topic("after-snapshot", 2)).await;
        propose_ok(
            &metadata,
            Command::DeleteTopic {
                name: "before-snapshot".to_string(),
            },
        )
        .await;
        let before = metadata.state();
        metadata.shutdown().await.expect("shutdown");

        let reopened = open(dir.path()).await;
        assert_eq!(reopened.state(), before);
        assert!(reopened.state().topic("before-snapshot").is_none());
        assert!(reopened.state().topic("after-snapshot").is_some());
        propose_ok(&reopened, create_topic("after-reopen", 1)).await;
        let after = reopened.state();
        reopened.snapshot().await.expect("snapshot after reopen");
        reopened.shutdown().await.expect("shutdown");

        // Everything now comes from the snapshot alone.
        let third = open(dir.path()).await;
        assert_eq!(third.state(), after);
        third.shutdown().await.expect("shutdown");
    }

    #[tokio::test]
    async fn automatic_snapshots_purge_the_log_without_losing_state() {
        let dir = tempfile::tempdir().expect("tempdir");
        let metadata = open(dir.path()).await;
        propose_ok(&metadata, register(1)).await;
        let proposals = SNAPSHOT_EVERY_ENTRIES + 200;
        for _ in 0..proposals {
            propose_ok(&metadata, Command::AllocateProducerIds { count: 1 }).await;
        }
        metadata
            .raft()
            .wait(Some(Duration::from_secs(10)))
            .metrics(
                |m| m.purged.is_some(),
                "the log to be purged behind a snapshot",
            )
            .await
            .expect("purged");
        let before = metadata.state();
        assert_eq!(before.next_producer_id, 1000 + proposals as i64);
        metadata.shutdown().await.expect("shutdown");

        let reopened = open(dir.path()).await;
        assert_eq!(reopened.state(), before);
        reopened.shutdown().await.expect("shutdown");
    }

    #[tokio::test]
    async fn a_torn_log_tail_left_by_a_crash_does_not_stop_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let metadata = open(dir.path()).await;
        propose_ok(&metadata, register(1)).await;
        propose_ok(&metadata, create_topic("t", 1)).await;
        let before = metadata.state();
        metadata.shutdown().await.expect("shutdown");

        // What a crash in the middle of the next append leaves behind.
        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join(crate::log_store::LOG_FILE))
            .expect("open raft.log");
        std::io::Write::write_all(&mut log, &[200, 1, 0, 0, 1, 2, 3, 4, b'{']).expect("write");
        drop(log);

        let reopened = open(dir.path()).await;
        assert_eq!(reopened.state(), before);
        propose_ok(&reopened, create_topic("u", 1)).await;
        reopened.shutdown().await.expect("shutdown");
    }

    #[tokio::test]
    async fn a_store_of_another_node_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let metadata = open(dir.path()).await;
        metadata.shutdown().await.expect("shutdown");

        let err = Metadata::open(opts(2, dir.path()).await)
            .await
            .err()
            .expect("must refuse");
        assert!(matches!(err, MetadataError::Raft(_)), "{err}");
    }

    /// Listeners on free loopback ports for nodes `1..=n`, and the voters map naming them.
    async fn listeners(n: u64) -> (Vec<TcpListener>, BTreeMap<NodeId, String>) {
        let mut ls = Vec::new();
        let mut voters = BTreeMap::new();
        for id in 1..=n {
            let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            voters.insert(id, l.local_addr().expect("addr").to_string());
            ls.push(l);
        }
        (ls, voters)
    }

    fn node_opts(
        node_id: NodeId,
        dir: &Path,
        listener: TcpListener,
        voters: &BTreeMap<NodeId, String>,
    ) -> MetadataOptions {
        MetadataOptions {
            node_id,
            dir: dir.join(format!("node-{node_id}")),
            listener,
            voters: voters.clone(),
            session_timeout: Duration::from_millis(500),
            leader_balance: None,
        }
    }

    async fn wait_same_state(nodes: &[&Metadata], want: &Arc<ClusterState>) {
        for n in nodes {
            n.wait_for_state(Duration::from_secs(10), "replicated state", |s| {
                s == &**want
            })
            .await
            .unwrap_or_else(|e| panic!("node {}: {e}", n.node_id()));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn three_voters_started_in_any_order_agree_and_survive_the_leader_stopping() {
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter("info")
            .try_init();
        let dir = tempfile::tempdir().expect("tempdir");
        let (ls, voters) = listeners(3).await;
        let mut ls = ls.into_iter();
        let (l1, l2, l3) = (ls.next().unwrap(), ls.next().unwrap(), ls.next().unwrap());
        // Node 3 starts alone and waits; then 1 and 2 arrive.
        let three = tokio::spawn(Metadata::open(node_opts(3, dir.path(), l3, &voters)));
        let one = tokio::spawn(Metadata::open(node_opts(1, dir.path(), l1, &voters)));
        let two = Metadata::open(node_opts(2, dir.path(), l2, &voters))
            .await
            .expect("open 2");
        let one = one.await.expect("join").expect("open 1");
        let three = three.await.expect("join").expect("open 3");
        let nodes = [&one, &two, &three];
        let leaders: Vec<_> = nodes.iter().filter(|n| n.is_leader()).collect();
        assert_eq!(leaders.len(), 1, "exactly one leader");
        let leader_id = leaders[0].node_id();
        assert!(nodes.iter().all(|n| n.leader() == Some(leader_id)));
        assert_eq!(one.status().voters.len(), 3);

        // Proposals from every node, leader or not, apply everywhere.
        for n in nodes {
            propose_ok(n, register(n.node_id())).await;
            assert!(
                n.state().brokers.contains_key(&n.node_id()),
                "read your write"
            );
        }
        propose_ok(&two, create_topic("t", 2)).await;
        let want = two.state();
        wait_same_state(&nodes, &want).await;

        // Stop the leader: the other two elect a new one and keep accepting writes.
        let (stopped, rest): (Vec<&Metadata>, Vec<&Metadata>) =
            nodes.iter().partition(|n| n.node_id() == leader_id);
        stopped[0].shutdown().await.expect("shutdown");
        propose_ok(rest[0], create_topic("after-failover", 1)).await;
        let want = rest[0].state();
        wait_same_state(&rest, &want).await;
        let new_leader = rest[0].leader().expect("a leader");
        assert_ne!(new_leader, leader_id);

        // The old leader comes back on its address and catches up.
        let listener = TcpListener::bind(&voters[&leader_id])
            .await
            .expect("rebind");
        let back = Metadata::open(node_opts(leader_id, dir.path(), listener, &voters))
            .await
            .expect("reopen");
        assert!(
            back.state().topic("after-failover").is_some(),
            "caught up at open"
        );
        for n in [&back, rest[0], rest[1]] {
            n.shutdown().await.expect("shutdown");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_learner_joins_catches_up_from_a_snapshot_and_can_be_made_a_voter() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut ls, voters) = listeners(1).await;
        let one = Metadata::open(node_opts(1, dir.path(), ls.remove(0), &voters))
            .await
            .expect("open 1");
        propose_ok(&one, register(1)).await;
        for _ in 0..SNAPSHOT_EVERY_ENTRIES + 50 {
            propose_ok(&one, Command::AllocateProducerIds { count: 1 }).await;
        }
        one.raft()
            .wait(Some(Duration::from_secs(10)))
            .metrics(
                |m| m.purged.is_some(),
                "the log to be purged behind a snapshot",
            )
            .await
            .expect("purged");

        // Node 2 is not a voter: it joins through node 1 and receives the snapshot.
        let l2 = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let two = Metadata::open(node_opts(2, dir.path(), l2, &voters))
            .await
            .expect("open learner");
        assert_eq!(two.state(), one.state());
        assert_eq!(two.status().role, "learner");
        assert!(one.status().learners.contains_key(&2));
        // A learner's proposals go to the leader.
        propose_ok(&two, register(2)).await;
        assert!(one.state().brokers.contains_key(&2));

        one.change_voters(vec![2], vec![]).await.expect("promote");
        assert_eq!(one.status().voters.len(), 2);
        two.change_voters(vec![], vec![2]).await.expect("demote");
        let status = one.status();
        assert_eq!((status.voters.len(), status.learners.len()), (1, 1));
        two.shutdown().await.expect("shutdown");
        one.shutdown().await.expect("shutdown");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_controller_unfences_on_heartbeat_and_fences_silent_or_departing_brokers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut ls, voters) = listeners(1).await;
        let meta = Metadata::open(node_opts(1, dir.path(), ls.remove(0), &voters))
            .await
            .expect("open");
        let mut epochs = BTreeMap::new();
        for id in [1, 2] {
            let CommandResult::BrokerRegistered { epoch } =
                meta.propose(register(id)).await.expect("register")
            else {
                panic!("register");
            };
            epochs.insert(id, epoch);
        }
        propose_ok(
            &meta,
            Command::CreateTopic {
                name: "t".to_string(),
                topic_id: uuid::Uuid::new_v4(),
                replicas: vec![vec![2, 1]],
                configs: BTreeMap::new(),
            },
        )
        .await;
        assert_eq!(meta.state().topics["t"].partitions[0].leader, None);
        let hb = |id: NodeId, shutting_down| Heartbeat {
            node_id: id,
            epoch: epochs[&id],
            shutting_down,
        };
        for id in [1, 2] {
            let reply = meta.heartbeat(hb(id, false)).await.expect("heartbeat");
            assert_eq!(reply, HeartbeatReply::Alive { fenced: false });
        }
        let p = &meta.state().topics["t"].partitions[0];
        assert!(p.leader.is_some(), "an unfenced ISR member leads");

        // Broker 2 goes silent: fenced after the session timeout; 1 keeps heartbeating.
        let keep_alive = {
            let meta = meta.clone();
            let hb = hb(1, false);
            tokio::spawn(async move {
                loop {
                    let _ = meta.heartbeat(hb.clone()).await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        let state = meta
            .wait_for_state(Duration::from_secs(10), "broker 2 fenced", |s| {
                s.brokers[&2].fenced
            })
            .await
            .expect("fenced");
        assert!(!state.brokers[&1].fenced);
        assert_eq!(state.topics["t"].partitions[0].leader, Some(1));
        assert_eq!(state.topics["t"].partitions[0].isr, vec![1]);

        // A stale epoch is told to register again.
        let mut stale = hb(2, false);
        stale.epoch -= 1;
        assert_eq!(
            meta.heartbeat(stale).await.expect("heartbeat"),
            HeartbeatReply::StaleEpoch {
                current: Some(epochs[&2])
            }
        );
        // A clean shutdown fences at once.
        keep_alive.abort();
        assert_eq!(
            meta.heartbeat(hb(1, true)).await.expect("heartbeat"),
            HeartbeatReply::Alive { fenced: true }
        );
        assert!(meta.state().brokers[&1].fenced);
        meta.shutdown().await.expect("shutdown");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_node_of_another_quorum_gets_no_answer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut lx, vx) = listeners(1).await;
        let x = Metadata::open(node_opts(1, &dir.path().join("x"), lx.remove(0), &vx))
            .await
            .expect("open x");
        let (mut ly, vy) = listeners(1).await;
        let y = Metadata::open(node_opts(1, &dir.path().join("y"), ly.remove(0), &vy))
            .await
            .expect("open y");
        assert_ne!(x.inner.quorum_id.get(), y.inner.quorum_id.get());
        // Y's node asks X's address, as after a port reuse: refused, connection closed.
        let from_y = y.inner.peers.get(&vx[&1]);
        let answer = from_y
            .call(&Request::ReadIndex, Duration::from_secs(5))
            .await;
        assert!(answer.is_err(), "{answer:?}");
        // X's own peers are answered.
        let from_x = x.inner.peers.get(&vx[&1]);
        let answer = from_x
            .call(&Request::ReadIndex, Duration::from_secs(5))
            .await
            .expect("answered");
        assert!(matches!(answer, Response::ReadIndex(Ok(_))), "{answer:?}");
        // The id survives a restart.
        let id = x.inner.quorum_id.get().map(str::to_string);
        x.shutdown().await.expect("shutdown");
        let again = TcpListener::bind(&vx[&1]).await.expect("rebind");
        let x2 = Metadata::open(node_opts(1, &dir.path().join("x"), again, &vx))
            .await
            .expect("reopen x");
        assert_eq!(x2.inner.quorum_id.get().map(str::to_string), id);
        x2.shutdown().await.expect("shutdown");
        y.shutdown().await.expect("shutdown");
    }
}
