//! DescribeShareGroupOffsets (KIP-932): where a share group reads each partition from — its
//! share-partition start offset as kept by the share coordinator (an operator's reset counted
//! as soon as it is made), -1 where it has no state.

use std::sync::Arc;

use kafka_protocol::messages::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponseGroup as Group,
    DescribeShareGroupOffsetsResponsePartition as PartitionOut,
    DescribeShareGroupOffsetsResponseTopic as TopicOut,
};
use kafka_protocol::messages::{
    DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse, TopicName,
};
use strata_metadata::acl::AclOperation;

use super::consumer_group_describe::describable;
use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;

pub async fn handle(
    broker: &Arc<Broker>,
    req: DescribeShareGroupOffsetsRequest,
    access: &Access,
) -> DescribeShareGroupOffsetsResponse {
    let mut groups = Vec::with_capacity(req.groups.len());
    for g in req.groups {
        let id = g.group_id.0.to_string();
        let out = Group::default().with_group_id(g.group_id.clone());
        let named: Option<Vec<(String, Option<Vec<i32>>)>> = g.topics.map(|ts| {
            (ts.into_iter())
                .map(|t| (t.topic_name.0.to_string(), Some(t.partitions)))
                .collect()
        });
        groups.push(match describe(broker, access, &id, named).await {
            Ok(topics) => out.with_topics(topics),
            Err(e) => out
                .with_error_code(e.code.code())
                .with_error_message(Some(str_bytes(e.message))),
        });
    }
    DescribeShareGroupOffsetsResponse::default().with_groups(groups)
}

/// The group's topics as named (every partition of a topic named without partitions), or —
/// none named — every topic its members subscribed to while this broker coordinated it.
async fn describe(
    broker: &Arc<Broker>,
    access: &Access,
    group: &str,
    named: Option<Vec<(String, Option<Vec<i32>>)>>,
) -> Result<Vec<TopicOut>, ApiError> {
    describable(broker, access, group).await?;
    let named = match named {
        Some(n) => n,
        None => (broker.groups)
            .describe_share_group(group, |sg| sg.topics_seen.clone())?
            .into_iter()
            .map(|t| (t, None))
            .collect(),
    };
    let state = broker.node.metadata.state();
    let mut topics = Vec::with_capacity(named.len());
    for (name, partitions) in named {
        let info = state.topic(&name);
        let t = TopicOut::default()
            .with_topic_name(TopicName(str_bytes(name.clone())))
            .with_topic_id(info.map_or(uuid::Uuid::nil(), |t| t.topic_id));
        let all = || (0..info.map_or(0, |t| t.partitions.len() as i32)).collect();
        let mut out = Vec::new();
        for p in partitions.unwrap_or_else(all) {
            let o = PartitionOut::default().with_partition_index(p);
            let refused = if !access.topic(AclOperation::Describe, &name) {
                Some(ApiError::new(
                    ErrorCode::TopicAuthorizationFailed,
                    format!("DESCRIBE on topic '{name}' is not authorized"),
                ))
            } else if !info.is_some_and(|t| (0..t.partitions.len() as i32).contains(&p)) {
                Some(ApiError::new(
                    ErrorCode::UnknownTopicOrPartition,
                    format!("no partition {name}-{p}"),
                ))
            } else {
                None
            };
            let kept = match (refused, info) {
                (Some(e), _) => Err(e),
                (None, Some(t)) => broker.shares.kept_start(group, t.topic_id, p).await,
                (None, None) => Ok(None),
            };
            out.push(match kept {
                Ok(Some((start, epoch))) => o.with_start_offset(start).with_leader_epoch(epoch),
                Ok(None) => o.with_start_offset(-1).with_leader_epoch(-1),
                Err(e) => o
                    .with_start_offset(-1)
                    .with_leader_epoch(-1)
                    .with_error_code(e.code.code())
                    .with_error_message(Some(str_bytes(e.message))),
            });
        }
        topics.push(t.with_partitions(out));
    }
    Ok(topics)
}
