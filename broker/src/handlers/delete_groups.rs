use std::sync::Arc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use crate::broker::Broker;

pub fn handle(broker: &Arc<Broker>, req: DeleteGroupsRequest) -> DeleteGroupsResponse {
    let results = req
        .groups_names
        .into_iter()
        .map(|id| {
            let code = match broker.groups.check(broker, id.0.as_str()) {
                Err(e) => e.code,
                Ok(()) => broker.groups.delete(broker, id.0.as_str()),
            };
            DeletableGroupResult::default()
                .with_group_id(id)
                .with_error_code(code.code())
        })
        .collect();
    DeleteGroupsResponse::default().with_results(results)
}
