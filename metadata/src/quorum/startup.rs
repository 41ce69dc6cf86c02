//! Start-up: open the raft store, initialize a new cluster's voters or join as a learner, and
//! wait until this node has caught up with the leader (see the invariants in [`super`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

use openraft::error::{InitializeError, RaftError};
use openraft::metrics::WaitError;
use tokio::time::Instant;

use super::control::run_controller;
use super::leader::serve;
use super::*;
use crate::command::NodeId;
use crate::controller::Liveness;
use crate::error::MetadataError;
use crate::log_store::LogStore;
use crate::network::TcpNetwork;
use crate::rpc::{Peers, QuorumId, Refusal, Request, Response};
use crate::state_machine::StateMachineStore;
use crate::types::{Node, Raft};

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
            advertised,
            session_timeout,
            leader_balance,
            tls,
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
        let my_addr = (voters.get(&node_id).cloned())
            .or(advertised)
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

        let peers = Arc::new(Peers::new(quorum_id.clone(), tls.clone()));
        let config = Arc::new(raft_config()?);
        let contacts = Arc::new(crate::network::Contacts::default());
        let log = log_store.reader();
        let network = TcpNetwork::new(peers.clone(), contacts.clone(), log.clone());
        let raft = Raft::new(node_id, config, network, log_store, state_machine).await?;
        let metadata = Metadata {
            inner: Arc::new(Inner {
                node_id,
                metrics: raft.metrics(),
                contacts,
                log,
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
        let server = tokio::spawn(serve(listener, weak.clone(), tls));
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
    pub(super) async fn become_ready(
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
    pub(super) async fn stored_membership(
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
    pub(super) async fn join(
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
    pub(super) async fn catch_up(&self) -> Result<(), MetadataError> {
        let index = self.read_index().await?;
        self.wait_applied(index).await
    }

    pub(super) async fn wait_applied(&self, index: u64) -> Result<(), MetadataError> {
        self.inner
            .raft
            .wait(Some(LEADER_CALL_TIMEOUT))
            .applied_index_at_least(Some(index), "this node to apply a committed entry")
            .await
            .map(|_| ())
            .map_err(wait_error)
    }
}
