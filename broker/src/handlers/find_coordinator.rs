use std::sync::Arc;

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::group::{store, validate_group_id};
use crate::security::Access;
use crate::share::{self, store::StateKey};
use crate::txn;
use strata_metadata::acl::AclOperation;

const GROUP: i8 = 0;
const TRANSACTION: i8 = 1;
/// A share partition's coordinator (KIP-932): the key is `group:topic-id:partition`.
const SHARE: i8 = 2;

/// The leader of the key's coordinator partition: a group's `__consumer_offsets` partition,
/// a transactional id's `__transaction_state` partition, a share partition's
/// `__share_group_state` partition (each topic created on first use). Needs DESCRIBE on the
/// group or transactional id; a share coordinator is for brokers (CLUSTER_ACTION, as Kafka's).
async fn locate(
    broker: &Broker,
    key: &str,
    key_type: i8,
    listener: &str,
    access: &Access,
) -> Result<(i32, String, i32), ApiError> {
    let (topic, partition) = match key_type {
        GROUP if !access.group(AclOperation::Describe, key) => {
            return Err(ApiError::new(
                ErrorCode::GroupAuthorizationFailed,
                "DESCRIBE on the group is not authorized",
            ))
        }
        TRANSACTION if !access.transactional_id(AclOperation::Describe, key) => {
            return Err(ApiError::new(
                ErrorCode::TransactionalIdAuthorizationFailed,
                "DESCRIBE on the transactional id is not authorized",
            ))
        }
        SHARE if !access.cluster(AclOperation::ClusterAction) => {
            return Err(ApiError::new(
                ErrorCode::ClusterAuthorizationFailed,
                "share coordinators are looked up by brokers (CLUSTER_ACTION)",
            ))
        }
        GROUP => {
            validate_group_id(key)?;
            broker.groups.ensure_offsets_topic().await?;
            (store::TOPIC, store::partition_for(key))
        }
        TRANSACTION => {
            txn::validate_id(key)?;
            broker.txn.ensure_topic().await?;
            (txn::store::TOPIC, txn::store::partition_for(key))
        }
        SHARE => {
            let k = StateKey::parse(key).ok_or_else(|| {
                ApiError::new(
                    ErrorCode::InvalidRequest,
                    format!("share coordinator key {key:?}: not group:topic-id:partition"),
                )
            })?;
            broker.shares.persister.coordinator.ensure_topic().await?;
            (share::store::TOPIC, k.state_partition())
        }
        other => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!("coordinator key type {other}"),
            ))
        }
    };
    let state = broker.node.metadata.state();
    let leader = state
        .partition(topic, partition)
        .and_then(|p| p.leader)
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::CoordinatorNotAvailable,
                format!("{topic}-{partition} has no leader"),
            )
        })?;
    let b = state.brokers.get(&leader).ok_or_else(|| {
        ApiError::new(
            ErrorCode::CoordinatorNotAvailable,
            "coordinator broker unknown",
        )
    })?;
    let (host, port) = b.endpoint(listener).ok_or_else(|| {
        ApiError::new(
            ErrorCode::CoordinatorNotAvailable,
            format!("the coordinator has no listener {listener}"),
        )
    })?;
    Ok((b.node_id as i32, host.to_string(), i32::from(port)))
}

pub async fn handle(
    broker: &Arc<Broker>,
    req: FindCoordinatorRequest,
    version: i16,
    listener: &str,
    access: &Access,
) -> FindCoordinatorResponse {
    if version >= 4 {
        let mut coordinators = Vec::with_capacity(req.coordinator_keys.len());
        for key in &req.coordinator_keys {
            let c = Coordinator::default().with_key(key.clone());
            coordinators.push(
                match locate(broker, key.as_str(), req.key_type, listener, access).await {
                    Ok((id, host, port)) => c
                        .with_node_id(BrokerId(id))
                        .with_host(str_bytes(host))
                        .with_port(port),
                    Err(e) => c
                        .with_node_id(BrokerId(-1))
                        .with_port(-1)
                        .with_error_code(e.code.code())
                        .with_error_message(Some(str_bytes(e.message))),
                },
            );
        }
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    match locate(broker, req.key.as_str(), req.key_type, listener, access).await {
        Ok((id, host, port)) => FindCoordinatorResponse::default()
            .with_node_id(BrokerId(id))
            .with_host(str_bytes(host))
            .with_port(port),
        Err(e) => {
            let r = FindCoordinatorResponse::default()
                .with_error_code(e.code.code())
                .with_node_id(BrokerId(-1))
                .with_port(-1);
            if version >= 1 {
                r.with_error_message(Some(str_bytes(e.message)))
            } else {
                r
            }
        }
    }
}
