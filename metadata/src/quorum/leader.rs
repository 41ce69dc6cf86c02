//! The leader's side of client calls ([`Inner`]'s `local_*`), and the raft port's server that
//! answers them for other nodes.

use std::sync::{Arc, PoisonError, Weak};

use openraft::error::{CheckIsLeaderError, RaftError};
use openraft::ChangeMembers;
use tokio::net::TcpListener;

use super::*;
use crate::command::{Command, CommandResult, NodeId};
use crate::controller::{Heartbeat, HeartbeatReply, Verdict};
use crate::error::MetadataError;
use crate::rpc::{self, Envelope, Refusal, Request, Response};
use crate::types::Node;

impl Inner {
    /// Records the quorum id (first one wins) and keeps it in the metadata directory.
    pub(super) fn keep_quorum_id(&self, id: String) -> Result<(), MetadataError> {
        let id = self.quorum_id.set(id).to_string();
        crate::fs_util::write_json_atomic(&self.dir.join(QUORUM_ID_FILE), &id)
    }

    pub(super) fn current_term(&self) -> u64 {
        self.metrics.borrow().current_term
    }

    /// Proposes on this node (the leader). Bounded: a leader cut off from its quorum cannot
    /// commit, and its caller must not wait forever (the entry may still commit later, if
    /// this node keeps its leadership).
    pub(super) async fn local_propose(
        &self,
        cmd: Command,
    ) -> Result<(CommandResult, u64), Refusal> {
        match tokio::time::timeout(LEADER_CALL_TIMEOUT, self.raft.client_write(cmd)).await {
            Ok(written) => written
                .map(|r| (r.data, r.log_id.index))
                .map_err(write_refusal),
            Err(_) => Err(Refusal::Failed(format!(
                "not committed within {LEADER_CALL_TIMEOUT:?}: no quorum of metadata voters reachable"
            ))),
        }
    }

    pub(super) async fn local_read_index(&self) -> Result<u64, Refusal> {
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

    pub(super) async fn local_join(
        &self,
        node_id: NodeId,
        addr: String,
    ) -> Result<String, Refusal> {
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

    pub(super) async fn local_change_voters(
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

    pub(super) async fn local_heartbeat(&self, hb: Heartbeat) -> Result<HeartbeatReply, Refusal> {
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

    pub(super) async fn handle(&self, request: Request) -> Response {
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
            Request::Status => Response::Status(self.local_status()),
        }
    }
}

/// Accepts connections on the raft port; each carries requests answered in order.
pub(super) async fn serve(listener: TcpListener, inner: Weak<Inner>, tls: Option<RaftTls>) {
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
        let tls = tls.clone();
        tokio::spawn(async move {
            let stream = match rpc::accept(stream, tls.as_ref()).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(%peer, error = %e, "raft port: connection refused (TLS)");
                    return;
                }
            };
            if let Err(e) = serve_connection(stream, peer, inner).await {
                tracing::debug!(%peer, error = %e, "raft port: connection closed");
            }
            drop(slot);
        });
    }
}

async fn serve_connection(
    mut stream: rpc::Conn,
    peer: std::net::SocketAddr,
    inner: Weak<Inner>,
) -> std::io::Result<()> {
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
