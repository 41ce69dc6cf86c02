//! ShareGroupHeartbeat (KIP-932): joining, staying in and leaving a share group
//! ([`crate::group::share`]).

use std::sync::Arc;

use kafka_protocol::messages::share_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse};
use strata_metadata::acl::AclOperation;

use super::consumer_group_describe::by_topic;
use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::group::share::Heartbeat;
use crate::group::validate_group_id;
use crate::security::Access;

async fn beat(
    broker: &Broker,
    req: ShareGroupHeartbeatRequest,
    client_id: &str,
    client_host: &str,
    access: &Access,
) -> Result<ShareGroupHeartbeatResponse, ApiError> {
    let group_id = req.group_id.0.as_str().to_string();
    if !access.group(AclOperation::Read, &group_id) {
        return Err(ApiError::new(
            ErrorCode::GroupAuthorizationFailed,
            "READ on the group is not authorized",
        ));
    }
    validate_group_id(&group_id)?;
    if let Some(denied) = (req.subscribed_topic_names.iter().flatten())
        .find(|t| !access.topic(AclOperation::Describe, t.0.as_str()))
    {
        return Err(ApiError::new(
            ErrorCode::TopicAuthorizationFailed,
            format!("DESCRIBE on topic {} is not authorized", denied.0),
        ));
    }
    if req.member_id.is_empty() {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "a share group member sends the member id it generated",
        ));
    }
    if req.member_epoch == 0
        && req
            .subscribed_topic_names
            .as_ref()
            .is_none_or(|t| t.is_empty())
    {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "joining needs the subscribed topic names",
        ));
    }
    broker.groups.ensure_offsets_topic().await?;
    broker.groups.check(&group_id).await?;
    let hb = Heartbeat {
        member_id: req.member_id.as_str().to_string(),
        member_epoch: req.member_epoch,
        rack_id: req.rack_id.as_ref().map(|s| s.as_str().to_string()),
        subscribed_topic_names: req
            .subscribed_topic_names
            .as_ref()
            .map(|v| v.iter().map(|t| t.0.as_str().to_string()).collect()),
        client_id: client_id.to_string(),
        client_host: client_host.to_string(),
    };
    let answer = broker.groups.share_heartbeat(&group_id, hb)?;
    let assignment = answer.assignment.map(|tps| {
        Assignment::default().with_topic_partitions(
            (by_topic(&tps).into_iter())
                .map(|(topic_id, partitions)| {
                    TopicPartitions::default()
                        .with_topic_id(topic_id)
                        .with_partitions(partitions)
                })
                .collect(),
        )
    });
    Ok(ShareGroupHeartbeatResponse::default()
        .with_member_id(Some(str_bytes(answer.member_id)))
        .with_member_epoch(answer.member_epoch)
        .with_heartbeat_interval_ms(broker.node.config.group_share_heartbeat_interval_ms as i32)
        .with_assignment(assignment))
}

pub async fn handle(
    broker: &Arc<Broker>,
    req: ShareGroupHeartbeatRequest,
    client_id: &str,
    client_host: &str,
    access: &Access,
) -> ShareGroupHeartbeatResponse {
    beat(broker, req, client_id, client_host, access)
        .await
        .unwrap_or_else(|e| {
            ShareGroupHeartbeatResponse::default()
                .with_error_code(e.code.code())
                .with_error_message(Some(str_bytes(e.message)))
        })
}
