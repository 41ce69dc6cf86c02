use std::sync::Arc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::security::Access;
use strata_metadata::acl::AclOperation;

/// A deleted share group's share partitions are forgotten too, as Kafka deletes their state:
/// a new group of the same id starts as `share.auto.offset.reset` says, not where the old one
/// stopped.
async fn forget_share_state(
    broker: &Broker,
    group: &str,
    topics: std::collections::BTreeSet<String>,
) -> ErrorCode {
    let state = broker.node.metadata.state();
    let offsets: Vec<(uuid::Uuid, i32, Option<i64>)> = (topics.iter())
        .filter_map(|t| state.topic(t))
        .flat_map(|t| (0..t.partitions.len() as i32).map(move |p| (t.topic_id, p, None)))
        .collect();
    if offsets.is_empty() {
        return ErrorCode::None;
    }
    match super::alter_share_group_offsets::reset(broker, group, offsets).await {
        Ok(()) => ErrorCode::None,
        Err(e) => {
            tracing::warn!(group, error = %e.message, "share group deleted, its share state not forgotten");
            e.code
        }
    }
}

pub async fn handle(
    broker: &Arc<Broker>,
    req: DeleteGroupsRequest,
    access: &Access,
) -> DeleteGroupsResponse {
    let mut results = Vec::with_capacity(req.groups_names.len());
    for id in req.groups_names {
        let code = match broker.groups.check(id.0.as_str()).await {
            _ if !access.group(AclOperation::Delete, &id) => ErrorCode::GroupAuthorizationFailed,
            Err(e) => e.code,
            Ok(()) => {
                let topics = (broker.groups)
                    .describe_share_group(id.0.as_str(), |sg| sg.topics_seen.clone())
                    .ok();
                let mut code = broker.groups.delete(id.0.as_str());
                if code == ErrorCode::None {
                    access.audit("group_deleted", serde_json::json!({ "group": id.as_str() }));
                    if let Some(topics) = topics {
                        code = forget_share_state(broker, id.0.as_str(), topics).await;
                    }
                }
                code
            }
        };
        results.push(
            DeletableGroupResult::default()
                .with_group_id(id)
                .with_error_code(code.code()),
        );
    }
    DeleteGroupsResponse::default().with_results(results)
}
