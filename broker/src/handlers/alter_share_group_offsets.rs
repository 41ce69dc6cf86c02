//! AlterShareGroupOffsets (KIP-932): an operator sets where a share group reads partitions
//! from, only while the group has no members (NON_EMPTY_GROUP otherwise) — or before it
//! exists. The offsets go through the metadata quorum (one command for the request); each
//! partition's leader applies its reset to the share partition, which starts again there with
//! nothing in flight (see `share/mod.rs`).

use std::sync::Arc;

use kafka_protocol::messages::alter_share_group_offsets_response::{
    AlterShareGroupOffsetsResponsePartition as PartitionOut,
    AlterShareGroupOffsetsResponseTopic as TopicOut,
};
use kafka_protocol::messages::{AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse};
use strata_metadata::acl::AclOperation;
use strata_metadata::Command;

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;

/// Checks that apply to the whole group: the operation on it authorized, this broker its
/// coordinator, no members.
pub(super) async fn changeable(
    broker: &Broker,
    access: &Access,
    group: &str,
    op: AclOperation,
) -> Result<(), ApiError> {
    if !access.group(op, group) {
        return Err(ApiError::new(
            ErrorCode::GroupAuthorizationFailed,
            format!("{op:?} on the group is not authorized"),
        ));
    }
    broker.groups.check(group).await?;
    broker.groups.check_share_group_empty(group)
}

/// A partition of the request and why it was refused, if it was.
type Refusal = (i32, Option<ApiError>);

pub async fn handle(
    broker: &Arc<Broker>,
    req: AlterShareGroupOffsetsRequest,
    access: &Access,
) -> AlterShareGroupOffsetsResponse {
    let group = req.group_id.0.to_string();
    if let Err(e) = changeable(broker, access, &group, AclOperation::Read).await {
        return AlterShareGroupOffsetsResponse::default()
            .with_error_code(e.code.code())
            .with_error_message(Some(str_bytes(e.message)));
    }
    let state = broker.node.metadata.state();
    let mut offsets = Vec::new();
    let mut responses: Vec<(TopicOut, Vec<Refusal>)> = Vec::new();
    for t in &req.topics {
        let name = t.topic_name.0.as_str();
        let info = state.topic(name);
        let out = TopicOut::default()
            .with_topic_name(t.topic_name.clone())
            .with_topic_id(info.map_or(uuid::Uuid::nil(), |i| i.topic_id));
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let refused = if !access.topic(AclOperation::Read, name) {
                Some(ApiError::new(
                    ErrorCode::TopicAuthorizationFailed,
                    format!("READ on topic '{name}' is not authorized"),
                ))
            } else if !info
                .is_some_and(|i| (0..i.partitions.len() as i32).contains(&p.partition_index))
            {
                Some(ApiError::new(
                    ErrorCode::UnknownTopicOrPartition,
                    format!("no partition {name}-{}", p.partition_index),
                ))
            } else if p.start_offset < 0 {
                Some(ApiError::new(
                    ErrorCode::InvalidRequest,
                    format!(
                        "start offset {} of {name}-{}",
                        p.start_offset, p.partition_index
                    ),
                ))
            } else {
                None
            };
            if let (None, Some(i)) = (&refused, info) {
                offsets.push((i.topic_id, p.partition_index, Some(p.start_offset)));
            }
            partitions.push((p.partition_index, refused));
        }
        responses.push((out, partitions));
    }
    let applied = match offsets.is_empty() {
        true => Ok(()),
        false => reset(broker, &group, offsets).await,
    };
    AlterShareGroupOffsetsResponse::default().with_responses(
        (responses.into_iter())
            .map(|(t, partitions)| {
                t.with_partitions(
                    (partitions.into_iter())
                        .map(|(p, refused)| {
                            let e = refused.or_else(|| applied.clone().err());
                            let o = PartitionOut::default().with_partition_index(p);
                            match e {
                                Some(e) => o
                                    .with_error_code(e.code.code())
                                    .with_error_message(Some(str_bytes(e.message))),
                                None => o,
                            }
                        })
                        .collect(),
                )
            })
            .collect(),
    )
}

/// Proposes the resets; `Ok` once the quorum holds them.
pub(super) async fn reset(
    broker: &Broker,
    group: &str,
    offsets: Vec<(uuid::Uuid, i32, Option<i64>)>,
) -> Result<(), ApiError> {
    let count = offsets.len();
    broker
        .node
        .apply(Command::ResetShareOffsets {
            group: group.to_string(),
            offsets,
        })
        .await?;
    tracing::info!(group, partitions = count, "share group offsets reset");
    Ok(())
}
