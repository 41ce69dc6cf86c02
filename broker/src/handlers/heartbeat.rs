use std::sync::Arc;

use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};

use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::security::Access;
use strata_metadata::acl::AclOperation;

pub async fn handle(
    broker: &Arc<Broker>,
    req: HeartbeatRequest,
    access: &Access,
) -> HeartbeatResponse {
    if !access.group(AclOperation::Read, &req.group_id) {
        return HeartbeatResponse::default()
            .with_error_code(ErrorCode::GroupAuthorizationFailed.code());
    }
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
