//! Raft transport between metadata nodes: openraft's RPCs over [`crate::rpc`] (TCP).
//!
//! Invariants:
//! - A transport never fabricates a response: a peer that cannot be reached is reported as
//!   `Unreachable` (raft backs off and retries), any other failure as a network error, and
//!   only what the peer answered is returned as its answer.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};

use crate::command::NodeId;
use crate::log_store::LogReader;
use crate::rpc::{Peer, Peers, Request, Response};
use crate::status::Contact;
use crate::types::{Node, TypeConfig};

/// When the leader last heard from each node, as DescribeQuorum reports it (KIP-595's
/// `lastFetchTimestamp` and `lastCaughtUpTimestamp`, in ms since the epoch): openraft's metrics
/// carry each node's replicated index but not when it answered.
#[derive(Debug, Default)]
pub struct Contacts(Mutex<BTreeMap<NodeId, Contact>>);

impl Contacts {
    pub fn get(&self, node: NodeId) -> Option<Contact> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&node)
            .copied()
    }

    fn accepted(&self, node: NodeId, caught_up: bool) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let mut all = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let c = all.entry(node).or_default();
        c.last_fetch_ms = now;
        if caught_up {
            c.last_caught_up_ms = now;
        }
    }
}

/// Creates a [`TcpConnection`] per raft replication stream or vote.
#[derive(Clone)]
pub(crate) struct TcpNetwork {
    peers: Arc<Peers>,
    contacts: Arc<Contacts>,
    log: LogReader,
}

impl TcpNetwork {
    pub(crate) fn new(peers: Arc<Peers>, contacts: Arc<Contacts>, log: LogReader) -> TcpNetwork {
        TcpNetwork {
            peers,
            contacts,
            log,
        }
    }
}

/// Raft's view of one peer.
pub(crate) struct TcpConnection {
    target: NodeId,
    peer: Arc<Peer>,
    contacts: Arc<Contacts>,
    log: LogReader,
}

impl RaftNetworkFactory<TypeConfig> for TcpNetwork {
    type Network = TcpConnection;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> TcpConnection {
        TcpConnection {
            target,
            peer: self.peers.get(&node.addr),
            contacts: self.contacts.clone(),
            log: self.log.clone(),
        }
    }
}

// The error type is openraft's (`RaftNetwork`'s signatures), not ours to shrink.
#[allow(clippy::result_large_err)]
impl TcpConnection {
    async fn send<E: std::error::Error>(
        &self,
        req: Request,
        option: &RPCOption,
    ) -> Result<Response, RPCError<NodeId, Node, E>> {
        self.peer
            .call(&req, option.hard_ttl())
            .await
            .map_err(|e| match e.kind() {
                io::ErrorKind::ConnectionRefused | io::ErrorKind::NotConnected => {
                    RPCError::Unreachable(Unreachable::new(&e))
                }
                _ => RPCError::Network(NetworkError::new(&e)),
            })
    }

    fn remote<T, E>(&self, answer: Result<T, RaftError<NodeId, E>>) -> RPCResult<T, E>
    where
        E: std::error::Error,
    {
        answer.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    fn unexpected<T, E: std::error::Error>(&self, got: &Response) -> RPCResult<T, E> {
        let e = io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "node {} at {} answered with the wrong message: {got:?}",
                self.target,
                self.peer.addr()
            ),
        );
        Err(RPCError::Network(NetworkError::new(&e)))
    }
}

type RPCResult<T, E> = Result<T, RPCError<NodeId, Node, RaftError<NodeId, E>>>;

impl RaftNetwork<TypeConfig> for TcpConnection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RPCResult<AppendEntriesResponse<NodeId>, openraft::error::Infallible> {
        // What the node holds once it accepts this, against the log end when it was sent.
        let end = (rpc.entries.last().map(|e| e.log_id.index)).or(rpc.prev_log_id.map(|l| l.index));
        let leader_end = self.log.last_index();
        match self.send(Request::AppendEntries(rpc), &option).await? {
            Response::AppendEntries(answer) => {
                if let Ok(AppendEntriesResponse::Success) = &answer {
                    self.contacts.accepted(self.target, end >= leader_end);
                }
                self.remote(answer)
            }
            other => self.unexpected(&other),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RPCResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        match self.send(Request::InstallSnapshot(rpc), &option).await? {
            Response::InstallSnapshot(answer) => self.remote(answer),
            other => self.unexpected(&other),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RPCResult<VoteResponse<NodeId>, openraft::error::Infallible> {
        match self.send(Request::Vote(rpc), &option).await? {
            Response::Vote(answer) => self.remote(answer),
            other => self.unexpected(&other),
        }
    }
}
