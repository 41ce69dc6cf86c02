use std::sync::Arc;

use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};

use crate::broker::Broker;

pub async fn handle(broker: &Arc<Broker>, req: HeartbeatRequest) -> HeartbeatResponse {
    if let Err(e) = broker.groups.check(req.group_id.0.as_str()).await {
        return HeartbeatResponse::default().with_error_code(e.code.code());
    }
    let code = broker.groups.heartbeat(
        req.group_id.0.as_str(),
        req.member_id.as_str(),
        req.generation_id,
        req.group_instance_id.as_ref().map(|s| s.as_str()),
    );
    HeartbeatResponse::default().with_error_code(code.code())
}
