use std::sync::Arc;

use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{GroupId, OffsetFetchRequest, OffsetFetchResponse, TopicName};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;
use strata_metadata::acl::{AclOperation, ResourceType};

type Wanted = Option<Vec<(String, Vec<i32>)>>;

pub async fn handle(
    broker: &Arc<Broker>,
    req: OffsetFetchRequest,
    version: i16,
    access: &Access,
) -> OffsetFetchResponse {
    // DESCRIBE on the group; on each topic, listed (refused ones left out) or named (refused
    // ones answered TOPIC_AUTHORIZATION_FAILED).
    let visible = |listing_all: bool, topic: &str| {
        !listing_all || access.sees(AclOperation::Describe, ResourceType::Topic, topic)
    };
    let denied = |listing_all: bool, topic: &str| {
        !listing_all && !access.topic(AclOperation::Describe, topic)
    };
    // KIP-447 (v7+): a consumer that requires stable offsets is told UNSTABLE_OFFSET_COMMIT for a
    // partition whose offset waits for a transaction's marker, and retries.
    let stable = req.require_stable;
    let unstable =
        |group: &str, topic: &str, p: i32| stable && broker.groups.unstable(group, topic, p);
    // v8+ asks for several groups at once; earlier versions for one.
    if version >= 8 {
        let mut checks = Vec::with_capacity(req.groups.len());
        for g in &req.groups {
            let id = g.group_id.0.as_str();
            let checked = match check(broker, access, id).await {
                // v9 names the fetching member of a consumer-protocol group (KIP-848).
                Ok(()) if version >= 9 => broker.groups.check_fetching_member(
                    id,
                    g.member_id.as_ref().map(|m| m.as_str()),
                    g.member_epoch,
                ),
                other => other,
            };
            checks.push(checked);
        }
        let groups = req
            .groups
            .into_iter()
            .zip(checks)
            .map(|(g, checked)| {
                let wanted: Wanted = g.topics.map(|ts| {
                    ts.into_iter()
                        .map(|t| (t.name.0.as_str().to_string(), t.partition_indexes))
                        .collect()
                });
                let listing_all = wanted.is_none();
                let group = OffsetFetchResponseGroup::default().with_group_id(g.group_id.clone());
                if let Err(e) = checked {
                    return group.with_error_code(e.code.code());
                }
                let id = g.group_id.0.as_str();
                let topics = broker
                    .groups
                    .fetch(id, wanted)
                    .into_iter()
                    .filter(|(t, _)| visible(listing_all, t))
                    .map(|(t, parts)| {
                        let denied = denied(listing_all, &t);
                        let partitions = parts
                            .into_iter()
                            .map(|(p, v)| {
                                let r = OffsetFetchResponsePartitions::default()
                                    .with_partition_index(p);
                                if denied {
                                    return r
                                        .with_committed_offset(-1)
                                        .with_committed_leader_epoch(-1)
                                        .with_error_code(
                                            ErrorCode::TopicAuthorizationFailed.code(),
                                        );
                                }
                                if unstable(id, &t, p) {
                                    return r
                                        .with_committed_offset(-1)
                                        .with_committed_leader_epoch(-1)
                                        .with_error_code(ErrorCode::UnstableOffsetCommit.code());
                                }
                                match v {
                                    Some(v) => r
                                        .with_committed_offset(v.offset)
                                        .with_committed_leader_epoch(v.leader_epoch)
                                        .with_metadata(Some(str_bytes(v.metadata))),
                                    None => r
                                        .with_committed_offset(-1)
                                        .with_committed_leader_epoch(-1)
                                        .with_metadata(Some(str_bytes(""))),
                                }
                            })
                            .collect();
                        OffsetFetchResponseTopics::default()
                            .with_name(TopicName(str_bytes(t)))
                            .with_partitions(partitions)
                    })
                    .collect();
                group.with_topics(topics)
            })
            .collect();
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let group: GroupId = req.group_id;
    if let Err(e) = check(broker, access, group.0.as_str()).await {
        let r = OffsetFetchResponse::default();
        return if version >= 2 {
            r.with_error_code(e.code.code())
        } else {
            r
        };
    }
    let wanted: Wanted = req.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name.0.as_str().to_string(), t.partition_indexes))
            .collect()
    });
    let listing_all = wanted.is_none();
    let topics = broker
        .groups
        .fetch(group.0.as_str(), wanted)
        .into_iter()
        .filter(|(t, _)| visible(listing_all, t))
        .map(|(t, parts)| {
            let denied = denied(listing_all, &t);
            let partitions = parts
                .into_iter()
                .map(|(p, v)| {
                    let r = OffsetFetchResponsePartition::default().with_partition_index(p);
                    if denied {
                        return r
                            .with_committed_offset(-1)
                            .with_committed_leader_epoch(-1)
                            .with_error_code(ErrorCode::TopicAuthorizationFailed.code());
                    }
                    if unstable(group.0.as_str(), &t, p) {
                        return r
                            .with_committed_offset(-1)
                            .with_committed_leader_epoch(-1)
                            .with_error_code(ErrorCode::UnstableOffsetCommit.code());
                    }
                    let r = match v {
                        Some(v) => r
                            .with_committed_offset(v.offset)
                            .with_metadata(Some(str_bytes(v.metadata)))
                            .with_committed_leader_epoch(v.leader_epoch),
                        None => r
                            .with_committed_offset(-1)
                            .with_metadata(Some(str_bytes("")))
                            .with_committed_leader_epoch(-1),
                    };
                    // Leader epochs exist from v5.
                    if version < 5 {
                        r.with_committed_leader_epoch(-1)
                    } else {
                        r
                    }
                })
                .collect();
            OffsetFetchResponseTopic::default()
                .with_name(TopicName(str_bytes(t)))
                .with_partitions(partitions)
        })
        .collect();
    OffsetFetchResponse::default().with_topics(topics)
}

async fn check(broker: &Broker, access: &Access, group: &str) -> Result<(), ApiError> {
    if !access.group(AclOperation::Describe, group) {
        return Err(ApiError::new(
            ErrorCode::GroupAuthorizationFailed,
            "DESCRIBE on the group is not authorized",
        ));
    }
    broker.groups.check(group).await
}
