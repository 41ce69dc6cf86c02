//! Raft transport between metadata voters.
//!
//! **Today this is the single-node transport**: [`UnreachableNetwork`] answers every RPC with
//! [`RPCError::Unreachable`]. A single voter never sends an RPC (it is its own quorum), so this
//! is complete for one node. Multi-voter quorums need a real transport (TCP between voters);
//! it will be another [`RaftNetworkFactory`] implementation in this module, passed to the same
//! generic start-up path (`Metadata::start`), with nothing else changing.
//!
//! Invariants:
//! - A transport never fabricates a response: failing to reach a peer is reported as
//!   `Unreachable` (raft backs off and retries), never as a vote or append result.

use std::io;

use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};

use crate::command::NodeId;
use crate::types::{Node, TypeConfig};

/// The single-node transport: creates connections whose every RPC fails as unreachable.
/// To be replaced by a TCP transport when multi-voter quorums arrive.
#[derive(Clone, Copy, Debug, Default)]
pub struct UnreachableNetwork;

/// A "connection" to a peer that cannot be reached.
#[derive(Clone, Copy, Debug)]
pub struct UnreachableConnection {
    target: NodeId,
}

impl UnreachableConnection {
    fn error<E: std::error::Error>(&self) -> RPCError<NodeId, Node, E> {
        let cause = io::Error::new(
            io::ErrorKind::NotConnected,
            format!(
                "metadata node {} is unreachable: this build has only the single-node raft transport",
                self.target
            ),
        );
        RPCError::Unreachable(Unreachable::new(&cause))
    }
}

impl RaftNetworkFactory<TypeConfig> for UnreachableNetwork {
    type Network = UnreachableConnection;

    async fn new_client(&mut self, target: NodeId, _node: &Node) -> UnreachableConnection {
        UnreachableConnection { target }
    }
}

impl RaftNetwork<TypeConfig> for UnreachableConnection {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        Err(self.error())
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, Node, RaftError<NodeId, InstallSnapshotError>>,
    > {
        Err(self.error())
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        Err(self.error())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use openraft::Vote;

    use super::*;

    #[tokio::test]
    async fn every_rpc_reports_the_peer_unreachable() {
        let mut network = UnreachableNetwork;
        let mut conn = network.new_client(2, &Node::default()).await;
        let option = RPCOption::new(Duration::from_millis(100));
        let vote = conn
            .vote(VoteRequest::new(Vote::new(1, 1), None), option)
            .await;
        assert!(matches!(vote, Err(RPCError::Unreachable(_))), "{vote:?}");
        let option = RPCOption::new(Duration::from_millis(100));
        let append = conn
            .append_entries(
                AppendEntriesRequest {
                    vote: Vote::new(1, 1),
                    prev_log_id: None,
                    entries: vec![],
                    leader_commit: None,
                },
                option,
            )
            .await;
        assert!(
            matches!(append, Err(RPCError::Unreachable(_))),
            "{append:?}"
        );
    }
}
