//! ShareGroupDescribe (KIP-932): a share group's epoch, members, their subscriptions and
//! assignments.

use std::collections::BTreeSet;
use std::sync::Arc;

use kafka_protocol::messages::share_group_describe_response::{
    Assignment, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::{ShareGroupDescribeRequest, ShareGroupDescribeResponse, TopicName};

use super::consumer_group_describe::{by_topic, describable};
use super::reply::str_bytes;
use crate::broker::Broker;
use crate::group::consumer::Tp;
use crate::group::share::ASSIGNOR;
use crate::security::Access;

pub async fn handle(
    broker: &Arc<Broker>,
    req: ShareGroupDescribeRequest,
    access: &Access,
) -> ShareGroupDescribeResponse {
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
        let described = broker.groups.describe_share_group(id.0.as_str(), |sg| {
            let members = (sg.members.values())
                .map(|m| {
                    Member::default()
                        .with_member_id(str_bytes(m.id.clone()))
                        .with_rack_id(m.rack_id.clone().map(str_bytes))
                        .with_member_epoch(m.epoch)
                        .with_client_id(str_bytes(m.client_id.clone()))
                        .with_client_host(str_bytes(m.client_host.clone()))
                        .with_subscribed_topic_names(
                            (m.subscribed.iter())
                                .map(|t| TopicName(str_bytes(t.clone())))
                                .collect(),
                        )
                        .with_assignment(assignment(&m.assigned))
                })
                .collect();
            (sg.state(), sg.epoch, members)
        });
        groups.push(match described {
            Ok((state, epoch, members)) => g
                .with_group_state(str_bytes(state))
                .with_group_epoch(epoch)
                .with_assignment_epoch(epoch)
                .with_assignor_name(str_bytes(ASSIGNOR))
                .with_members(members),
            Err(e) => g
                .with_error_code(e.code.code())
                .with_error_message(Some(str_bytes(e.message))),
        });
    }
    ShareGroupDescribeResponse::default().with_groups(groups)
}
