use std::sync::Arc;

use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse};

use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::security::Access;
use strata_metadata::acl::AclOperation;

pub async fn handle(
    broker: &Arc<Broker>,
    req: LeaveGroupRequest,
    version: i16,
    access: &Access,
) -> LeaveGroupResponse {
    let group = req.group_id.0.as_str();
    if !access.group(AclOperation::Read, group) {
        return LeaveGroupResponse::default()
            .with_error_code(ErrorCode::GroupAuthorizationFailed.code());
    }
    if let Err(e) = broker.groups.check(group).await {
        return LeaveGroupResponse::default().with_error_code(e.code.code());
    }
    // v0–2 name one member; v3+ a batch, by member id or instance id.
    if version < 3 {
        let code = broker
            .groups
            .leave(group, &[(req.member_id.as_str().to_string(), None)])[0];
        return LeaveGroupResponse::default().with_error_code(code.code());
    }
    let members: Vec<(String, Option<String>)> = req
        .members
        .iter()
        .map(|m| {
            (
                m.member_id.as_str().to_string(),
                m.group_instance_id.as_ref().map(|s| s.as_str().to_string()),
            )
        })
        .collect();
    let codes = broker.groups.leave(group, &members);
    let responses = req
        .members
        .into_iter()
        .zip(&codes)
        .map(|(m, code)| {
            MemberResponse::default()
                .with_member_id(m.member_id)
                .with_group_instance_id(m.group_instance_id)
                .with_error_code(code.code())
        })
        .collect();
    // Per-member errors; the top-level code is for group-level failures, as in Kafka.
    LeaveGroupResponse::default().with_members(responses)
}
