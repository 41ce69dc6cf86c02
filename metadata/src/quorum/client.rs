//! Calls that need the leader, with forwarding: answered here when this node leads, else sent
//! to the leader over [`crate::rpc`], retried only when refused or never sent.
//!
//! Invariant: a repeatable call never waits on a deposed leader — once another leader (or
//! none) is known, it is dropped and sent again, so a heartbeat reaches a new controller
//! within its grace period even when the old one's host hangs connections.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use openraft::ServerState;
use tokio::time::Instant;

use super::*;
use crate::command::{Command, CommandResult, NodeId};
use crate::controller::{Heartbeat, HeartbeatReply};
use crate::error::MetadataError;
use crate::rpc::{CallError, Refusal, Request, Response};
use crate::state::ClusterState;

impl Metadata {
    /// Runs `local` when this node leads, or sends `request` to the leader, until one answers
    /// or [`LEADER_CALL_TIMEOUT`] passes. `once`: the request must not run twice (see the
    /// module invariants).
    pub(super) async fn on_leader<T, F, Fut>(
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
                        // A leader that vanished (its host gone: connections hang rather
                        // than fail) would hold a repeatable call for the whole peer timeout
                        // after a new leader is known; a heartbeat held so is a broker fenced
                        // by the new controller. The call is dropped as soon as the leader
                        // changes and sent to the new one.
                        tokio::select! {
                            r = peer.call(&request, PEER_CALL_TIMEOUT) => r.map_err(CallError::NotSent),
                            () = self.deposed(l) => Err(CallError::NotSent(std::io::Error::other(
                                format!("node {l} stopped leading while the call waited"),
                            ))),
                        }
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

    /// Resolves once this node sees a leader other than `leader` (or none); never if it
    /// stops watching.
    async fn deposed(&self, leader: NodeId) {
        let mut metrics = self.inner.metrics.clone();
        if metrics
            .wait_for(|m| m.current_leader != Some(leader))
            .await
            .is_err()
        {
            std::future::pending::<()>().await;
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
    pub(super) async fn read_index(&self) -> Result<u64, MetadataError> {
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
}
