//! ConsumerGroupHeartbeat (KIP-848): joining, staying in and leaving a consumer group whose
//! partitions the coordinator assigns ([`crate::group::consumer`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::group::consumer::{Heartbeat, ASSIGNOR};
use crate::group::validate_group_id;
use crate::security::Access;
use strata_metadata::acl::{AclOperation, ResourceType};

async fn beat(
    broker: &Broker,
    req: ConsumerGroupHeartbeatRequest,
    client_id: &str,
    client_host: &str,
    access: &Access,
) -> Result<ConsumerGroupHeartbeatResponse, ApiError> {
    let group_id = req.group_id.0.as_str().to_string();
    if !access.group(AclOperation::Read, &group_id) {
        return Err(ApiError::new(
            ErrorCode::GroupAuthorizationFailed,
            "READ on the group is not authorized",
        ));
    }
    validate_group_id(&group_id)?;
    // As Kafka: a member may subscribe only to topics it may describe.
    if let Some(denied) = (req.subscribed_topic_names.iter().flatten())
        .find(|t| !access.topic(AclOperation::Describe, t.0.as_str()))
    {
        return Err(ApiError::new(
            ErrorCode::TopicAuthorizationFailed,
            format!("DESCRIBE on topic {} is not authorized", denied.0),
        ));
    }
    if req
        .server_assignor
        .as_ref()
        .is_some_and(|a| a.as_str() != ASSIGNOR)
    {
        return Err(ApiError::new(
            ErrorCode::UnsupportedAssignor,
            format!("the only server assignor here is {ASSIGNOR}"),
        ));
    }
    if req.member_epoch == 0
        && (req.subscribed_topic_names.is_none() && req.subscribed_topic_regex.is_none()
            || req.rebalance_timeout_ms <= 0
            || req.topic_partitions.is_none())
    {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "joining needs a subscription, a rebalance timeout and the owned partitions",
        ));
    }
    if let Some(re) = &req.subscribed_topic_regex {
        regex::Regex::new(re.as_str()).map_err(|e| {
            ApiError::new(
                ErrorCode::InvalidRegularExpression,
                format!("subscribed_topic_regex: {e}"),
            )
        })?;
    }
    broker.groups.ensure_offsets_topic().await?;
    broker.groups.check(&group_id).await?;
    let hb = Heartbeat {
        member_id: req.member_id.as_str().to_string(),
        member_epoch: req.member_epoch,
        instance_id: req.instance_id.as_ref().map(|s| s.as_str().to_string()),
        rack_id: req.rack_id.as_ref().map(|s| s.as_str().to_string()),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        subscribed_topic_names: req
            .subscribed_topic_names
            .as_ref()
            .map(|v| v.iter().map(|t| t.0.as_str().to_string()).collect()),
        subscribed_topic_regex: req
            .subscribed_topic_regex
            .as_ref()
            .map(|s| s.as_str().to_string()),
        owned: req.topic_partitions.as_ref().map(|tps| {
            tps.iter()
                .flat_map(|t| t.partitions.iter().map(move |p| (t.topic_id, *p)))
                .collect()
        }),
        client_id: client_id.to_string(),
        client_host: client_host.to_string(),
    };
    // With an authorizer, a regex resolves to the topics the member may describe.
    let may_describe = |t: &str| access.sees(AclOperation::Describe, ResourceType::Topic, t);
    let (answer, appended) = broker.groups.consumer_heartbeat(
        &group_id,
        hb,
        access
            .enforcing()
            .then_some(&may_describe as &dyn Fn(&str) -> bool),
    )?;
    if let Some(appended) = appended {
        appended.committed().await?;
    }
    let assignment = answer.assignment.map(|tps| {
        let mut by_topic: BTreeMap<uuid::Uuid, Vec<i32>> = BTreeMap::new();
        for (topic, p) in tps {
            by_topic.entry(topic).or_default().push(p);
        }
        Assignment::default().with_topic_partitions(
            by_topic
                .into_iter()
                .map(|(topic_id, partitions)| {
                    TopicPartitions::default()
                        .with_topic_id(topic_id)
                        .with_partitions(partitions)
                })
                .collect(),
        )
    });
    Ok(ConsumerGroupHeartbeatResponse::default()
        .with_member_id(Some(str_bytes(answer.member_id)))
        .with_member_epoch(answer.member_epoch)
        .with_heartbeat_interval_ms(broker.node.config.group_consumer_heartbeat_interval_ms as i32)
        .with_assignment(assignment))
}

pub async fn handle(
    broker: &Arc<Broker>,
    req: ConsumerGroupHeartbeatRequest,
    client_id: &str,
    client_host: &str,
    access: &Access,
) -> ConsumerGroupHeartbeatResponse {
    beat(broker, req, client_id, client_host, access)
        .await
        .unwrap_or_else(|e| {
            ConsumerGroupHeartbeatResponse::default()
                .with_error_code(e.code.code())
                .with_error_message(Some(str_bytes(e.message)))
        })
}
