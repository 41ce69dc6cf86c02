use std::sync::Arc;

use kafka_protocol::messages::{SyncGroupRequest, SyncGroupResponse};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::group::state::Reply;
use crate::security::Access;
use strata_metadata::acl::AclOperation;

pub async fn handle(
    broker: &Arc<Broker>,
    req: SyncGroupRequest,
    version: i16,
    access: &Access,
) -> SyncGroupResponse {
    if !access.group(AclOperation::Read, &req.group_id) {
        return SyncGroupResponse::default()
            .with_error_code(ErrorCode::GroupAuthorizationFailed.code());
    }
    if let Err(e) = broker.groups.check(req.group_id.0.as_str()).await {
        return SyncGroupResponse::default().with_error_code(e.code.code());
    }
    let assignments = req
        .assignments
        .iter()
        .map(|a| (a.member_id.as_str().to_string(), a.assignment.clone()))
        .collect();
    let reply = broker.groups.sync(
        req.group_id.0.as_str(),
        req.member_id.as_str(),
        req.generation_id,
        req.group_instance_id.as_ref().map(|s| s.as_str()),
        assignments,
    );
    let result = match reply {
        Reply::Now(r) => r,
        Reply::Later(rx) => match rx.await {
            Ok(r) => r,
            // Dropped while waiting: the group moved to another coordinator, or a rebalance
            // replaced this generation.
            Err(_) => {
                let code = broker
                    .groups
                    .check(req.group_id.0.as_str())
                    .await
                    .err()
                    .map_or(ErrorCode::RebalanceInProgress, |e| e.code);
                return SyncGroupResponse::default().with_error_code(code.code());
            }
        },
    };
    let mut resp = SyncGroupResponse::default()
        .with_error_code(result.error.code())
        .with_assignment(result.assignment);
    if version >= 5 {
        resp.protocol_type = result.protocol_type.map(str_bytes);
        resp.protocol_name = result.protocol.map(str_bytes);
    }
    resp
}
