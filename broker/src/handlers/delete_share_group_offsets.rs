//! DeleteShareGroupOffsets (KIP-932): an operator forgets a share group's state of whole
//! topics, only while the group has no members; their share partitions start again as
//! `share.auto.offset.reset` says when next read. Through the quorum, as
//! AlterShareGroupOffsets.

use std::sync::Arc;

use kafka_protocol::messages::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic as TopicOut;
use kafka_protocol::messages::{DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse};
use strata_metadata::acl::AclOperation;

use super::alter_share_group_offsets::{changeable, reset};
use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;

pub async fn handle(
    broker: &Arc<Broker>,
    req: DeleteShareGroupOffsetsRequest,
    access: &Access,
) -> DeleteShareGroupOffsetsResponse {
    let group = req.group_id.0.to_string();
    if let Err(e) = changeable(broker, access, &group, AclOperation::Delete).await {
        return DeleteShareGroupOffsetsResponse::default()
            .with_error_code(e.code.code())
            .with_error_message(Some(str_bytes(e.message)));
    }
    let state = broker.node.metadata.state();
    let mut offsets = Vec::new();
    let mut topics: Vec<(TopicOut, Option<ApiError>)> = Vec::new();
    for t in &req.topics {
        let name = t.topic_name.0.as_str();
        let info = state.topic(name);
        let out = TopicOut::default()
            .with_topic_name(t.topic_name.clone())
            .with_topic_id(info.map_or(uuid::Uuid::nil(), |i| i.topic_id));
        let refused = match info {
            _ if !access.topic(AclOperation::Read, name) => Some(ApiError::new(
                ErrorCode::TopicAuthorizationFailed,
                format!("READ on topic '{name}' is not authorized"),
            )),
            None => Some(ApiError::new(
                ErrorCode::UnknownTopicOrPartition,
                format!("unknown topic '{name}'"),
            )),
            Some(i) => {
                offsets.extend((0..i.partitions.len() as i32).map(|p| (i.topic_id, p, None)));
                None
            }
        };
        topics.push((out, refused));
    }
    let applied = match offsets.is_empty() {
        true => Ok(()),
        false => reset(broker, &group, offsets).await,
    };
    DeleteShareGroupOffsetsResponse::default().with_responses(
        (topics.into_iter())
            .map(
                |(t, refused)| match refused.or_else(|| applied.clone().err()) {
                    Some(e) => t
                        .with_error_code(e.code.code())
                        .with_error_message(Some(str_bytes(e.message))),
                    None => t,
                },
            )
            .collect(),
    )
}
