//! DescribeTopicPartitions (KIP-966; Kafka 4 admin clients describe topics with it): topics as
//! Metadata describes them, paged. A response holds at most `response_partition_limit`
//! partitions (capped at [`MAX_PARTITIONS`], Kafka's `max.request.partition.size.limit`), the
//! topics in name order, and a cursor (topic, partition) where the next request continues.
//!
//! Authorized per topic with DESCRIBE, as Metadata: listing every topic quietly leaves out the
//! ones the caller may not describe; a named one answers TOPIC_AUTHORIZATION_FAILED whether or
//! not it exists.

use std::sync::Arc;

use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{
    DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, TopicName,
};
use strata_metadata::acl::{AclOperation, ResourceType};

use super::metadata::partition_views;
use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::security::Access;

/// The most partitions one response holds, whatever the request asks (Kafka's default).
pub const MAX_PARTITIONS: usize = 2000;

pub fn handle(
    broker: &Arc<Broker>,
    req: DescribeTopicPartitionsRequest,
    listener: &str,
    access: &Access,
) -> DescribeTopicPartitionsResponse {
    let state = broker.node.metadata.state();
    let limit = usize::try_from(req.response_partition_limit)
        .ok()
        .filter(|l| *l > 0)
        .map_or(MAX_PARTITIONS, |l| l.min(MAX_PARTITIONS));
    let every_topic = req.topics.is_empty();
    let mut names: Vec<String> = if every_topic {
        (state.topics.keys())
            .filter(|n| access.sees(AclOperation::Describe, ResourceType::Topic, n))
            .cloned()
            .collect()
    } else {
        let mut named: Vec<String> = (req.topics.iter())
            .map(|t| t.name.0.as_str().to_string())
            .collect();
        named.sort();
        named.dedup();
        named
    };
    let error = |name: &str, code: ErrorCode| {
        DescribeTopicPartitionsResponseTopic::default()
            .with_name(Some(TopicName(str_bytes(name.to_string()))))
            .with_error_code(code.code())
            .with_topic_authorized_operations(i32::MIN)
    };
    let cursor = req
        .cursor
        .as_ref()
        .map(|c| (c.topic_name.0.as_str().to_string(), c.partition_index));
    if let Some((topic, partition)) = &cursor {
        // Kafka's checks: a cursor inside the named topics, at a partition that can exist.
        if *partition < 0 || (!every_topic && !names.contains(topic)) {
            return DescribeTopicPartitionsResponse::default().with_topics(
                names
                    .iter()
                    .map(|n| error(n, ErrorCode::InvalidRequest))
                    .collect(),
            );
        }
        // A cursor's topic deleted since the last page: the listing goes on after its name.
        names.retain(|n| n >= topic);
    }

    let mut topics = Vec::new();
    let mut left = limit;
    let mut next_cursor = None;
    for name in &names {
        if left == 0 {
            next_cursor = Some((name.clone(), 0));
            break;
        }
        if !every_topic && !access.topic(AclOperation::Describe, name) {
            topics.push(error(name, ErrorCode::TopicAuthorizationFailed));
            continue;
        }
        let Some(t) = state.topic(name) else {
            topics.push(error(name, ErrorCode::UnknownTopicOrPartition));
            continue;
        };
        let start = match &cursor {
            Some((topic, partition)) if topic == name => *partition as usize,
            _ => 0,
        };
        let end = t.partitions.len().min(start.saturating_add(left));
        let partitions: Vec<_> = partition_views(t, &state, listener)
            .enumerate()
            .take(end)
            .skip(start)
            .map(|(i, p)| {
                DescribeTopicPartitionsResponsePartition::default()
                    .with_partition_index(i as i32)
                    .with_error_code(p.error.code())
                    .with_leader_id(p.leader)
                    .with_leader_epoch(p.leader_epoch)
                    .with_replica_nodes(p.replicas)
                    .with_isr_nodes(p.isr)
                    // No eligible leader replicas (KIP-966's ELR) in Strata: empty, as a
                    // Kafka without ELR answers.
                    .with_eligible_leader_replicas(Some(Vec::new()))
                    .with_last_known_elr(Some(Vec::new()))
                    .with_offline_replicas(p.offline)
            })
            .collect();
        left -= partitions.len();
        topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(TopicName(str_bytes(name.clone()))))
                .with_topic_id(t.topic_id)
                .with_is_internal(name.starts_with("__"))
                .with_partitions(partitions)
                .with_topic_authorized_operations(access.operations(ResourceType::Topic, name)),
        );
        if end < t.partitions.len() {
            next_cursor = Some((name.clone(), end as i32));
            break;
        }
    }
    DescribeTopicPartitionsResponse::default()
        .with_topics(topics)
        .with_next_cursor(next_cursor.map(|(topic, partition)| {
            Cursor::default()
                .with_topic_name(TopicName(str_bytes(topic)))
                .with_partition_index(partition)
        }))
}
