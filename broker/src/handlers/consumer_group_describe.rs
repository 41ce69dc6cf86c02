//! ConsumerGroupDescribe (KIP-848): a consumer group's epochs, members, their subscriptions
//! and their current and target assignments.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, TopicName,
};
use strata_metadata::acl::{AclOperation, ResourceType};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::group::consumer::{Tp, ASSIGNOR};
use crate::security::Access;

/// KIP-848's member type: a member of the consumer protocol.
const CONSUMER_MEMBER: i8 = 1;

/// Whether `group` may be described here: DESCRIBE on it, and this broker its coordinator.
pub(super) async fn describable(
    broker: &Broker,
    access: &Access,
    group: &str,
) -> Result<(), ApiError> {
    if !access.group(AclOperation::Describe, group) {
        return Err(ApiError::new(
            ErrorCode::GroupAuthorizationFailed,
            "DESCRIBE on the group is not authorized",
        ));
    }
    broker.groups.check(group).await.map(drop)
}

/// An assignment's partitions by topic id, in order.
pub(super) fn by_topic<'a>(
    tps: impl IntoIterator<Item = &'a Tp>,
) -> BTreeMap<uuid::Uuid, Vec<i32>> {
    let mut by_topic: BTreeMap<uuid::Uuid, Vec<i32>> = BTreeMap::new();
    for (topic, p) in tps {
        by_topic.entry(*topic).or_default().push(*p);
    }
    by_topic
}

pub async fn handle(
    broker: &Arc<Broker>,
    req: ConsumerGroupDescribeRequest,
    access: &Access,
) -> ConsumerGroupDescribeResponse {
    let state = broker.node.metadata.state();
    let name_of = |id: &uuid::Uuid| state.topic_by_id(id).map(|t| t.name.clone());
    let assignment = |tps: &BTreeSet<Tp>| {
        Assignment::default().with_topic_partitions(
            (by_topic(tps).into_iter())
                .map(|(id, partitions)| {
                    TopicPartitions::default()
                        .with_topic_id(id)
                        .with_topic_name(TopicName(str_bytes(name_of(&id).unwrap_or_default())))
                        .with_partitions(partitions)
                })
                .collect(),
        )
    };
    let mut groups = Vec::with_capacity(req.group_ids.len());
    for id in req.group_ids {
        let g = DescribedGroup::default().with_group_id(id.clone());
        if let Err(e) = describable(broker, access, id.0.as_str()).await {
            groups.push(
                g.with_error_code(e.code.code())
                    .with_error_message(Some(str_bytes(e.message))),
            );
            continue;
        }
        let described = broker.groups.describe_consumer_group(id.0.as_str(), |cg| {
            let members = cg
                .members
                .values()
                .map(|m| {
                    Member::default()
                        .with_member_id(str_bytes(m.id.clone()))
                        .with_instance_id(m.instance_id.clone().map(str_bytes))
                        .with_rack_id(m.rack_id.clone().map(str_bytes))
                        .with_member_epoch(m.epoch)
                        .with_client_id(str_bytes(m.client_id.clone()))
                        .with_client_host(str_bytes(m.client_host.clone()))
                        .with_subscribed_topic_names(
                            m.subscribed
                                .iter()
                                .map(|t| TopicName(str_bytes(t.clone())))
                                .collect(),
                        )
                        .with_subscribed_topic_regex(
                            m.regex.as_ref().map(|r| str_bytes(r.as_str().to_string())),
                        )
                        .with_assignment(assignment(&m.assigned))
                        .with_target_assignment(assignment(
                            &cg.target.get(&m.id).cloned().unwrap_or_default(),
                        ))
                        .with_member_type(CONSUMER_MEMBER)
                })
                .collect();
            (cg.state(), cg.epoch, cg.assignment_epoch, members)
        });
        groups.push(match described {
            Some((group_state, epoch, assignment_epoch, members)) => g
                .with_group_state(str_bytes(group_state))
                .with_group_epoch(epoch)
                .with_assignment_epoch(assignment_epoch)
                .with_assignor_name(str_bytes(ASSIGNOR))
                .with_members(members)
                .with_authorized_operations(if req.include_authorized_operations {
                    access.operations(ResourceType::Group, &id)
                } else {
                    i32::MIN
                }),
            None => g
                .with_error_code(ErrorCode::GroupIdNotFound.code())
                .with_error_message(Some(str_bytes(format!("{} is not a consumer group", id.0)))),
        });
    }
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}
