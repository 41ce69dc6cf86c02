//! AlterPartitionReassignments (KIP-455: `kafka-reassign-partitions --execute` and
//! `--cancel`, `Admin.alterPartitionReassignments`, `strata cluster reassign`). Each partition
//! is one command through the metadata quorum, so any broker takes the request and the move
//! survives a controller failover; how a move proceeds is `strata_metadata`'s reassignment
//! module. A target that changes the replication factor is refused when the client says so
//! (v1's `allow_replication_factor_change`, KIP-860).

use std::sync::Arc;

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse,
};
use strata_metadata::Command;

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;
use strata_metadata::acl::AclOperation;

pub async fn handle(
    broker: &Arc<Broker>,
    req: AlterPartitionReassignmentsRequest,
    version: i16,
    access: &Access,
) -> AlterPartitionReassignmentsResponse {
    if !access.cluster(AclOperation::Alter) {
        return AlterPartitionReassignmentsResponse::default()
            .with_error_code(ErrorCode::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str_bytes("ALTER on the cluster is not authorized")));
    }
    // v0 has no flag: a replication factor change is allowed, as before KIP-860.
    let allow_rf_change = version == 0 || req.allow_replication_factor_change;
    let mut responses = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let topic = t.name.0.as_str().to_string();
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let target = p
                .replicas
                .map(|r| r.iter().map(|b| b.0).collect::<Vec<i32>>());
            let audited = serde_json::json!({
                "topic": &topic,
                "partition": p.partition_index,
                "replicas": &target,
            });
            let outcome =
                reassign(broker, &topic, p.partition_index, target, allow_rf_change).await;
            if outcome.is_ok() {
                access.audit("reassignment", audited);
            }
            let r =
                ReassignablePartitionResponse::default().with_partition_index(p.partition_index);
            partitions.push(match outcome {
                Ok(()) => r,
                Err(e) => {
                    tracing::info!(topic, partition = p.partition_index, code = ?e.code, error = %e.message, "reassignment refused");
                    r.with_error_code(e.code.code())
                        .with_error_message(Some(str_bytes(e.message)))
                }
            });
        }
        responses.push(
            ReassignableTopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions),
        );
    }
    AlterPartitionReassignmentsResponse::default()
        .with_allow_replication_factor_change(allow_rf_change)
        .with_responses(responses)
}

async fn reassign(
    broker: &Arc<Broker>,
    topic: &str,
    partition: i32,
    target: Option<Vec<i32>>,
    allow_rf_change: bool,
) -> Result<(), ApiError> {
    let target = match target {
        None => None,
        Some(ids) => {
            if ids.is_empty() {
                return Err(ApiError::new(
                    ErrorCode::InvalidReplicaAssignment,
                    format!("{topic}-{partition}: the target replica list is empty"),
                ));
            }
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                let id = u64::try_from(id).map_err(|_| {
                    ApiError::new(
                        ErrorCode::InvalidReplicaAssignment,
                        format!("{topic}-{partition}: broker id {id} is negative"),
                    )
                })?;
                out.push(id);
            }
            Some(out)
        }
    };
    if let (Some(target), false) = (&target, allow_rf_change) {
        let state = broker.node.metadata.state();
        if let Some(info) = state.partition(topic, partition) {
            let current = info.target_replicas().len();
            if target.len() != current {
                return Err(ApiError::new(
                    ErrorCode::InvalidReplicationFactor,
                    format!(
                        "{topic}-{partition}: the target has {} replicas, the partition {current}, and the request does not allow a replication factor change",
                        target.len()
                    ),
                ));
            }
        }
    }
    let cancel = target.is_none();
    broker
        .node
        .apply(Command::ReassignPartition {
            topic: topic.to_string(),
            partition,
            target: target.clone(),
        })
        .await?;
    if cancel {
        tracing::info!(topic, partition, "reassignment cancelled");
    } else {
        tracing::info!(topic, partition, target = ?target, "reassignment started");
    }
    Ok(())
}
