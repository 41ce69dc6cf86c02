//! AddRaftVoter and RemoveRaftVoter (KIP-853; `kafka-metadata-quorum add-controller` and
//! `remove-controller`): the metadata quorum's voters changed through the Kafka API, as
//! `strata cluster add-voter|remove-voter` changes them through the admin port — one
//! membership change through raft (joint consensus), made by the leader whichever broker is
//! asked.
//!
//! A voter is added from the quorum's learners (Kafka's observers: nodes started with a
//! `--voters` list that does not name them), and the request's listeners must hold the raft
//! address the quorum already knows it by, as a Kafka controller must be reachable at the
//! endpoint it is added with. Strata's log directories have no ids, so `voter_directory_id`
//! is not checked.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::{
    AddRaftVoterRequest, AddRaftVoterResponse, RemoveRaftVoterRequest, RemoveRaftVoterResponse,
};
use kafka_protocol::protocol::StrBytes;
use strata_metadata::acl::AclOperation;
use strata_metadata::NodeId;

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;

/// What every voter change checks first: ALTER on the cluster, the cluster id (when the
/// request names one) and a sane node id.
fn admit(
    broker: &Broker,
    access: &Access,
    cluster_id: &Option<StrBytes>,
    voter_id: i32,
) -> Result<NodeId, ApiError> {
    if !access.cluster(AclOperation::Alter) {
        return Err(ApiError::new(
            ErrorCode::ClusterAuthorizationFailed,
            "ALTER on the cluster is not authorized",
        ));
    }
    // A client that does not know the cluster id sends none (or an empty one).
    if let Some(id) = cluster_id
        .as_ref()
        .filter(|id| !id.is_empty() && **id != *broker.node.config.cluster_id)
    {
        return Err(ApiError::new(
            ErrorCode::InconsistentClusterId,
            format!(
                "this is cluster {}, not {id}",
                broker.node.config.cluster_id
            ),
        ));
    }
    NodeId::try_from(voter_id)
        .map_err(|_| ApiError::new(ErrorCode::InvalidRequest, format!("node id {voter_id}")))
}

/// Runs the membership change within the request's timeout (none: the quorum's own).
async fn change(
    broker: &Broker,
    add: Vec<NodeId>,
    remove: Vec<NodeId>,
    timeout_ms: Option<i32>,
) -> Result<(), ApiError> {
    let change = broker.node.metadata.change_voters(add, remove);
    let result = match timeout_ms.filter(|t| *t > 0) {
        Some(t) => tokio::time::timeout(Duration::from_millis(t as u64), change)
            .await
            .map_err(|_| {
                ApiError::new(
                    ErrorCode::RequestTimedOut,
                    format!("the voter change did not commit within {t} ms"),
                )
            })?,
        None => change.await,
    };
    result.map_err(|e| ApiError::new(ErrorCode::InvalidRequest, e.to_string()))
}

async fn add_voter(
    broker: &Broker,
    req: &AddRaftVoterRequest,
    access: &Access,
) -> Result<(), ApiError> {
    let id = admit(broker, access, &req.cluster_id, req.voter_id)?;
    let status = (broker.node.metadata.leader_status().await)
        .map_err(|e| ApiError::new(ErrorCode::NotController, e.to_string()))?;
    if status.voters.contains_key(&id) {
        return Err(ApiError::new(
            ErrorCode::DuplicateVoter,
            format!("node {id} is already a voter"),
        ));
    }
    let Some(known) = status.learners.get(&id) else {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("node {id} is not an observer of the quorum: start it with --voters naming the quorum first"),
        ));
    };
    let named = (req.listeners.iter()).any(|l| {
        let host = l.host.as_str();
        let at = if host.contains(':') {
            format!("[{host}]:{}", l.port)
        } else {
            format!("{host}:{}", l.port)
        };
        at == *known
    });
    if !named {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("node {id} is known to the quorum at {known}: name that listener"),
        ));
    }
    change(broker, vec![id], vec![], Some(req.timeout_ms)).await
}

pub async fn add(
    broker: &Arc<Broker>,
    req: AddRaftVoterRequest,
    access: &Access,
) -> AddRaftVoterResponse {
    let outcome = add_voter(broker, &req, access).await;
    if outcome.is_ok() {
        tracing::info!(voter = req.voter_id, "AddRaftVoter: node promoted to voter");
    }
    let (code, message) = answer(outcome);
    AddRaftVoterResponse::default()
        .with_error_code(code)
        .with_error_message(message)
}

async fn remove_voter(
    broker: &Broker,
    req: &RemoveRaftVoterRequest,
    access: &Access,
) -> Result<(), ApiError> {
    let id = admit(broker, access, &req.cluster_id, req.voter_id)?;
    let status = (broker.node.metadata.leader_status().await)
        .map_err(|e| ApiError::new(ErrorCode::NotController, e.to_string()))?;
    if !status.voters.contains_key(&id) {
        return Err(ApiError::new(
            ErrorCode::VoterNotFound,
            format!("node {id} is not a voter"),
        ));
    }
    change(broker, vec![], vec![id], None).await
}

pub async fn remove(
    broker: &Arc<Broker>,
    req: RemoveRaftVoterRequest,
    access: &Access,
) -> RemoveRaftVoterResponse {
    let outcome = remove_voter(broker, &req, access).await;
    if outcome.is_ok() {
        tracing::info!(
            voter = req.voter_id,
            "RemoveRaftVoter: voter demoted to learner"
        );
    }
    let (code, message) = answer(outcome);
    RemoveRaftVoterResponse::default()
        .with_error_code(code)
        .with_error_message(message)
}

fn answer(outcome: Result<(), ApiError>) -> (i16, Option<StrBytes>) {
    match outcome {
        Ok(()) => (ErrorCode::None.code(), None),
        Err(e) => (e.code.code(), Some(str_bytes(e.message))),
    }
}
