//! OffsetForLeaderEpoch: where a leader epoch ends in this partition's log. A consumer asks
//! after a leader change, with the epoch of the last record it read, to find out whether the
//! log was truncated below its position (KIP-320); a follower asks before fetching from a
//! new leader. Only the leader answers.

use std::sync::Arc;

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use strata_metadata::acl::AclOperation;

use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::security::Access;

/// A follower (a broker id in the request) needs CLUSTER_ACTION; a consumer DESCRIBE on the
/// topic.
pub fn handle(
    broker: &Arc<Broker>,
    req: OffsetForLeaderEpochRequest,
    access: &Access,
) -> OffsetForLeaderEpochResponse {
    let follower = (req.replica_id.0 >= 0).then(|| access.cluster(AclOperation::ClusterAction));
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let name = t.topic.0.as_str().to_string();
            let authorized =
                follower.unwrap_or_else(|| access.topic(AclOperation::Describe, &name));
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let resp = EpochEndOffset::default().with_partition(p.partition);
                    if !authorized {
                        return resp
                            .with_error_code(ErrorCode::TopicAuthorizationFailed.code())
                            .with_leader_epoch(-1)
                            .with_end_offset(-1);
                    }
                    match broker
                        .node
                        .leader_partition(&name, p.partition, p.current_leader_epoch)
                    {
                        Ok(part) => {
                            let (epoch, end) = part.end_offset_for_epoch(p.leader_epoch);
                            resp.with_leader_epoch(epoch).with_end_offset(end)
                        }
                        Err(e) => resp
                            .with_error_code(e.code.code())
                            .with_leader_epoch(-1)
                            .with_end_offset(-1),
                    }
                })
                .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(t.topic)
                .with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}
