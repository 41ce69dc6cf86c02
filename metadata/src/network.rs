//! Raft transport between metadata nodes: openraft's RPCs over [`crate::rpc`] (TCP).
//!
//! Invariants:
//! - A transport never fabricates a response: a peer that cannot be reached is reported as
//!   `Unreachable` (raft backs off and retries), any other failure as a network error, and
//!   only what the peer answered is returned as its answer.

use std::io;
use std::sync::Arc;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};

use crate::command::NodeId;
use crate::rpc::{Peer, Peers, Request, Response};
use crate::types::{Node, TypeConfig};

/// Creates a [`TcpConnection`] per raft replication stream or vote.
#[derive(Clone, Debug)]
pub(crate) struct TcpNetwork {
    peers: Arc<Peers>,
}

impl TcpNetwork {
    pub(crate) fn new(peers: Arc<Peers>) -> TcpNetwork {
        TcpNetwork { peers }
    }
}

/// Raft's view of one peer.
#[derive(Debug)]
pub(crate) struct TcpConnection {
    target: NodeId,
    peer: Arc<Peer>,
}

impl RaftNetworkFactory<TypeConfig> for TcpNetwork {
    type Network = TcpConnection;

    async fn new_client(&mut self, target: NodeId, node: &Node) -> TcpConnection {
        TcpConnection {
            target,
            peer: self.peers.get(&node.addr),
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
        match self.send(Request::AppendEntries(rpc), &option).await? {
            Response::AppendEntries(answer) => self.remote(answer),
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
