use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::group::state::{JoinRequest, JoinResult, Reply};
use crate::group::validate_group_id;
use crate::security::Access;
use strata_metadata::acl::AclOperation;

/// Kafka's `group.min.session.timeout.ms` / `group.max.session.timeout.ms`.
const MIN_SESSION: i32 = 1_000;
const MAX_SESSION: i32 = 1_800_000;

fn response(r: JoinResult, version: i16) -> JoinGroupResponse {
    let skip = r.skip_assignment;
    let members = r
        .members
        .into_iter()
        .map(|(id, instance, meta)| {
            JoinGroupResponseMember::default()
                .with_member_id(str_bytes(id))
                .with_group_instance_id(if version >= 5 {
                    instance.map(str_bytes)
                } else {
                    None
                })
                .with_metadata(meta)
        })
        .filter(|_| version >= 9 || !skip)
        .collect();
    let mut resp = JoinGroupResponse::default()
        .with_error_code(r.error.code())
        .with_generation_id(r.generation)
        .with_protocol_name(Some(str_bytes(r.protocol.unwrap_or_default())))
        .with_leader(str_bytes(r.leader))
        .with_member_id(str_bytes(r.member_id))
        .with_members(members);
    if version >= 7 {
        resp.protocol_type = r.protocol_type.map(str_bytes);
    }
    if version >= 9 {
        resp.skip_assignment = skip;
    }
    resp
}

pub async fn handle(
    broker: &Arc<Broker>,
    req: JoinGroupRequest,
    version: i16,
    client_id: &str,
    client_host: &str,
    access: &Access,
) -> JoinGroupResponse {
    let group_id = req.group_id.0.as_str().to_string();
    let fail = |code: ErrorCode| {
        response(
            JoinResult {
                error: code,
                generation: -1,
                protocol_type: None,
                protocol: None,
                leader: String::new(),
                member_id: req.member_id.as_str().to_string(),
                members: vec![],
                skip_assignment: false,
            },
            version,
        )
    };
    if !access.group(AclOperation::Read, &group_id) {
        return fail(ErrorCode::GroupAuthorizationFailed);
    }
    if let Err(e) = validate_group_id(&group_id) {
        return fail(e.code);
    }
    if !(MIN_SESSION..=MAX_SESSION).contains(&req.session_timeout_ms) {
        return fail(ErrorCode::InvalidSessionTimeout);
    }
    // The group's records go to `__consumer_offsets` (normally created by FindCoordinator).
    if let Err(e) = broker.groups.ensure_offsets_topic().await {
        return fail(e.code);
    }
    if let Err(e) = broker.groups.check(&group_id).await {
        return fail(e.code);
    }
    if let Some(reason) = req.reason.as_ref().filter(|_| version >= 8) {
        tracing::debug!(group = %group_id, member = %req.member_id.as_str(), reason = %reason.as_str(), "member (re)joins");
    }
    // v0 has no rebalance timeout: it is the session timeout.
    let rebalance = if version >= 1 {
        req.rebalance_timeout_ms
    } else {
        req.session_timeout_ms
    };
    let join = JoinRequest {
        member_id: req.member_id.as_str().to_string(),
        instance_id: req
            .group_instance_id
            .as_ref()
            .map(|s| s.as_str().to_string()),
        client_id: client_id.to_string(),
        client_host: client_host.to_string(),
        session_timeout: Duration::from_millis(req.session_timeout_ms as u64),
        rebalance_timeout: Duration::from_millis(rebalance.max(0) as u64),
        protocol_type: req.protocol_type.as_str().to_string(),
        protocols: req
            .protocols
            .iter()
            .map(|p| (p.name.as_str().to_string(), p.metadata.clone()))
            .collect(),
        require_known_member_id: version >= 4,
    };
    let result = match broker.groups.join(&group_id, join) {
        Reply::Now(r) => r,
        Reply::Later(rx) => match rx.await {
            Ok(r) => r,
            // The group was dropped while the join waited: moved to another coordinator, or
            // gone.
            Err(_) => {
                return fail(
                    broker
                        .groups
                        .check(&group_id)
                        .await
                        .err()
                        .map_or(ErrorCode::UnknownMemberId, |e| e.code),
                )
            }
        },
    };
    response(result, version)
}
