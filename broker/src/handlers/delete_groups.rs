use std::sync::Arc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::security::Access;
use strata_metadata::acl::AclOperation;

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
                let code = broker.groups.delete(id.0.as_str());
                if code == ErrorCode::None {
                    access.audit("group_deleted", serde_json::json!({ "group": id.as_str() }));
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
