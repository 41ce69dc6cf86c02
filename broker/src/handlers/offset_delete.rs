use std::sync::Arc;

use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};

use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::security::Access;
use strata_metadata::acl::AclOperation;

/// Needs DELETE on the group and READ on each topic (a refused topic's partitions answer
/// TOPIC_AUTHORIZATION_FAILED and keep their offsets).
pub async fn handle(
    broker: &Arc<Broker>,
    req: OffsetDeleteRequest,
    access: &Access,
) -> OffsetDeleteResponse {
    if !access.group(AclOperation::Delete, &req.group_id) {
        return OffsetDeleteResponse::default()
            .with_error_code(ErrorCode::GroupAuthorizationFailed.code());
    }
    if let Err(e) = broker.groups.check(req.group_id.0.as_str()).await {
        return OffsetDeleteResponse::default().with_error_code(e.code.code());
    }
    let topic_allowed: Vec<bool> = (req.topics.iter())
        .map(|t| access.topic(AclOperation::Read, &t.name))
        .collect();
    let partitions: Vec<(String, i32)> = req
        .topics
        .iter()
        .zip(&topic_allowed)
        .filter(|(_, allowed)| **allowed)
        .flat_map(|(t, _)| {
            t.partitions
                .iter()
                .map(|p| (t.name.0.as_str().to_string(), p.partition_index))
        })
        .collect();
    let codes = match broker
        .groups
        .delete_offsets(req.group_id.0.as_str(), &partitions)
    {
        Ok(codes) => codes,
        Err(code) => return OffsetDeleteResponse::default().with_error_code(code.code()),
    };
    let mut codes = codes.into_iter();
    let topics = req
        .topics
        .into_iter()
        .zip(topic_allowed)
        .map(|(t, allowed)| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let code = if allowed {
                        codes.next().map(|c| c.code()).unwrap_or(0)
                    } else {
                        ErrorCode::TopicAuthorizationFailed.code()
                    };
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect();
            OffsetDeleteResponseTopic::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    OffsetDeleteResponse::default().with_topics(topics)
}
