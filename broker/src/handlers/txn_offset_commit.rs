use std::sync::Arc;

use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};

use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::group::store::{self, CommittedOffset};
use crate::group::{validate_group_id, Commit, Committer};
use crate::security::Access;
use crate::txn::messages::Join;
use strata_metadata::acl::AclOperation;

/// The group coordinator takes offsets committed inside a transaction: after checking with
/// the transaction's coordinator that the group's partition is in it (KIP-890 part 1) or,
/// from v5 on (transaction version 2, whose clients send no AddOffsetsToTxn), adding it
/// (part 2), they are written for the producer and become the group's once the transaction
/// commits ([`crate::group`]'s `txn_offsets`).
///
/// Needs WRITE on the transactional id, READ on the group and on each topic (a refused
/// topic's partitions answer TOPIC_AUTHORIZATION_FAILED).
pub async fn handle(
    broker: &Arc<Broker>,
    req: TxnOffsetCommitRequest,
    version: i16,
    access: &Access,
) -> TxnOffsetCommitResponse {
    let group = req.group_id.0.as_str().to_string();
    let now = broker.node.clock.now_ms();
    let refused = if !access.transactional_id(AclOperation::Write, &req.transactional_id) {
        Some(ErrorCode::TransactionalIdAuthorizationFailed)
    } else if !access.group(AclOperation::Read, &group) {
        Some(ErrorCode::GroupAuthorizationFailed)
    } else {
        None
    };
    let topic_allowed: Vec<bool> = (req.topics.iter())
        .map(|t| refused.is_none() && access.topic(AclOperation::Read, &t.name))
        .collect();
    let commits: Vec<Commit> = (req.topics.iter())
        .zip(&topic_allowed)
        .filter(|(_, allowed)| **allowed)
        .flat_map(|(t, _)| {
            t.partitions.iter().map(|p| Commit {
                topic: t.name.0.as_str().to_string(),
                partition: p.partition_index,
                offset: CommittedOffset {
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: (p.committed_metadata.as_ref())
                        .map(|m| m.as_str().to_string())
                        .unwrap_or_default(),
                    commit_timestamp: now,
                },
            })
        })
        .collect();
    let total = commits.len();
    let ready = async {
        validate_group_id(&group)?;
        broker.groups.ensure_offsets_topic().await?;
        broker.groups.check(&group).await?;
        let partition = (store::TOPIC.to_string(), store::partition_for(&group));
        let code = broker
            .txn
            .join_anywhere(
                req.transactional_id.0.as_str(),
                req.producer_id.0,
                req.producer_epoch,
                &[partition],
                if version >= 5 {
                    Join::Add
                } else {
                    Join::Verify
                },
            )
            .await?
            .into_iter()
            .next()
            .unwrap_or(ErrorCode::UnknownServerError);
        match code {
            ErrorCode::None => Ok(()),
            code => Err(ApiError::new(
                code,
                "the group is not in the producer's transaction",
            )),
        }
    };
    let codes = match ready.await {
        _ if total == 0 => vec![],
        Err(e) => vec![e.code; total],
        Ok(()) => {
            let committer = Committer {
                member_id: req.member_id.as_str(),
                instance_id: req.group_instance_id.as_deref(),
                generation: req.generation_id,
                transactional: true,
                version,
            };
            let (mut codes, pending) = broker.groups.txn_commit(
                &group,
                req.producer_id.0,
                req.producer_epoch,
                &committer,
                commits,
            );
            if let Some(pending) = pending {
                if let Err(code) = broker.groups.complete_txn_commit(pending).await {
                    for c in codes.iter_mut().filter(|c| **c == ErrorCode::None) {
                        *c = code;
                    }
                }
            }
            codes
        }
    };
    let mut codes = codes.into_iter();
    let refused = refused.unwrap_or(ErrorCode::TopicAuthorizationFailed);
    let topics = req
        .topics
        .into_iter()
        .zip(topic_allowed)
        .map(|(t, allowed)| {
            let partitions = (t.partitions.iter())
                .map(|p| {
                    let code = if allowed {
                        codes.next().map_or(0, |c| c.code())
                    } else {
                        refused.code()
                    };
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect();
            TxnOffsetCommitResponseTopic::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}
