use std::sync::Arc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use crate::broker::Broker;

pub async fn handle(broker: &Arc<Broker>, req: DeleteGroupsRequest) -> DeleteGroupsResponse {
    let mut results = Vec::with_capacity(req.groups_names.len());
    for id in req.groups_names {
        let code = match broker.groups.check(id.0.as_str()).await {
            Err(e) => e.code,
            Ok(()) => broker.groups.delete(id.0.as_str()),
        };
        results.push(
            DeletableGroupResult::default()
                .with_group_id(id)
                .with_error_code(code.code()),
        );
    }
    DeleteGroupsResponse::default().with_results(results)
}
