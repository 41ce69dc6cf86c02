use std::sync::Arc;

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};

use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::group::store::CommittedOffset;
use crate::group::{validate_group_id, Commit, Committer};
use crate::security::Access;
use strata_metadata::acl::AclOperation;

/// `__consumer_offsets` exists (it is created on first use) and this broker coordinates the
/// group.
async fn coordinator_ready(broker: &Broker, group: &str) -> Result<(), ApiError> {
    validate_group_id(group)?;
    broker.groups.ensure_offsets_topic().await?;
    broker.groups.check(group).await
}

/// Needs READ on the group and on each topic; partitions of a refused topic answer
/// TOPIC_AUTHORIZATION_FAILED and are not committed.
pub async fn handle(
    broker: &Arc<Broker>,
    req: OffsetCommitRequest,
    version: i16,
    access: &Access,
) -> OffsetCommitResponse {
    let group = req.group_id.0.as_str().to_string();
    let group_allowed = access.group(AclOperation::Read, &group);
    let topic_allowed: Vec<bool> = (req.topics.iter())
        .map(|t| group_allowed && access.topic(AclOperation::Read, &t.name))
        .collect();
    let now = broker.node.clock.now_ms();
    let commits: Vec<Commit> = req
        .topics
        .iter()
        .zip(&topic_allowed)
        .filter(|(_, allowed)| **allowed)
        .flat_map(|(t, _)| {
            t.partitions.iter().map(|p| Commit {
                topic: t.name.0.as_str().to_string(),
                partition: p.partition_index,
                offset: CommittedOffset {
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p
                        .committed_metadata
                        .as_ref()
                        .map(|m| m.as_str().to_string())
                        .unwrap_or_default(),
                    commit_timestamp: now,
                },
            })
        })
        .collect();
    let total = commits.len();
    let codes = match coordinator_ready(broker, &group).await {
        _ if total == 0 => vec![],
        Err(e) => vec![e.code; total],
        Ok(()) => {
            let committer = Committer {
                member_id: req.member_id.as_str(),
                instance_id: req.group_instance_id.as_deref(),
                generation: req.generation_id_or_member_epoch,
                transactional: false,
                version,
            };
            let (mut codes, pending) = broker.groups.commit(&group, &committer, commits);
            // Acknowledged only once the ISR holds the commit.
            if let Some(pending) = pending {
                if let Err(code) = broker.groups.complete_commit(pending).await {
                    for c in codes.iter_mut().filter(|c| **c == ErrorCode::None) {
                        *c = code;
                    }
                }
            }
            codes
        }
    };
    let mut codes = codes.into_iter();
    let refused = if group_allowed {
        ErrorCode::TopicAuthorizationFailed
    } else {
        ErrorCode::GroupAuthorizationFailed
    };
    let topics = req
        .topics
        .into_iter()
        .zip(topic_allowed)
        .map(|(t, allowed)| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let code = if allowed {
                        codes.next().map(|c| c.code()).unwrap_or(0)
                    } else {
                        refused.code()
                    };
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}
