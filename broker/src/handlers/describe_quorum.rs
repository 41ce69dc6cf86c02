//! DescribeQuorum (KIP-595; `kafka-metadata-quorum describe`): the metadata quorum as its
//! leader sees it, on any broker (one that does not lead asks the leader over the raft port,
//! as Kafka's brokers forward it to the active controller).
//!
//! Kafka's metadata log `__cluster_metadata`-0 stands for the openraft log: offsets are raft
//! log indexes + 1 (exclusive ends, as Kafka's log end offsets are), the epoch is the raft term,
//! the high watermark the committed index + 1. Voters are openraft's voters, observers its
//! learners; each node's log end is what the leader knows it replicated, and its last fetch
//! and last caught-up times are when it last accepted the leader's AppendEntries (the leader's
//! own are now, as in Kafka).

use std::sync::Arc;

use kafka_protocol::messages::describe_quorum_response::{
    Listener, Node, PartitionData, ReplicaState, TopicData,
};
use kafka_protocol::messages::{BrokerId, DescribeQuorumRequest, DescribeQuorumResponse};
use strata_metadata::acl::AclOperation;
use strata_metadata::QuorumStatus;

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::security::Access;

/// The topic Kafka's clients name for the metadata quorum.
const METADATA_TOPIC: &str = "__cluster_metadata";

pub async fn handle(
    broker: &Arc<Broker>,
    req: DescribeQuorumRequest,
    version: i16,
    access: &Access,
) -> DescribeQuorumResponse {
    if !access.cluster(AclOperation::Describe) {
        return DescribeQuorumResponse::default()
            .with_error_code(ErrorCode::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str_bytes("DESCRIBE on the cluster is not authorized")));
    }
    let quorum = |topic: &str, partition: i32| topic == METADATA_TOPIC && partition == 0;
    // The leader is asked only when a request names the quorum's partition.
    let asked = (req.topics.iter())
        .any(|t| (t.partitions.iter()).any(|p| quorum(t.topic_name.0.as_str(), p.partition_index)));
    let status = match asked {
        true => Some(broker.node.metadata.leader_status().await),
        false => None,
    };
    let nodes = match &status {
        Some(Ok(s)) if version >= 2 => listeners(s),
        _ => Vec::new(),
    };
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = (t.partitions.iter())
                .map(|p| {
                    let answer = PartitionData::default().with_partition_index(p.partition_index);
                    match &status {
                        Some(Ok(s)) if quorum(t.topic_name.0.as_str(), p.partition_index) => {
                            describe(s, version, answer, broker.node.clock.now_ms())
                        }
                        Some(Err(e)) if quorum(t.topic_name.0.as_str(), p.partition_index) => {
                            answer
                                .with_error_code(ErrorCode::NotLeaderOrFollower.code())
                                .with_error_message(Some(str_bytes(e.to_string())))
                        }
                        _ => answer
                            .with_error_code(ErrorCode::UnknownTopicOrPartition.code())
                            .with_error_message(Some(str_bytes(format!(
                                "the metadata quorum is {METADATA_TOPIC}-0"
                            )))),
                    }
                })
                .collect();
            TopicData::default()
                .with_topic_name(t.topic_name)
                .with_partitions(partitions)
        })
        .collect();
    DescribeQuorumResponse::default()
        .with_topics(topics)
        .with_nodes(nodes)
}

fn describe(s: &QuorumStatus, version: i16, answer: PartitionData, now_ms: i64) -> PartitionData {
    let (mut voters, mut observers) = (Vec::new(), Vec::new());
    for r in s.replicas(now_ms) {
        let state = ReplicaState::default()
            .with_replica_id(BrokerId(r.id as i32))
            .with_log_end_offset(r.log_end);
        let state = if version >= 1 {
            state
                .with_last_fetch_timestamp(r.last_fetch_ms)
                .with_last_caught_up_timestamp(r.last_caught_up_ms)
        } else {
            state
        };
        if r.voter {
            voters.push(state)
        } else {
            observers.push(state)
        }
    }
    answer
        .with_leader_id(BrokerId(s.leader.map_or(-1, |l| l as i32)))
        .with_leader_epoch(i32::try_from(s.term).unwrap_or(i32::MAX))
        .with_high_watermark(s.high_watermark())
        .with_current_voters(voters)
        .with_observers(observers)
}

/// v2's nodes: each voter's raft endpoint as a `CONTROLLER` listener.
fn listeners(s: &QuorumStatus) -> Vec<Node> {
    (s.voters.iter())
        .filter_map(|(id, addr)| {
            let (host, port) = addr.rsplit_once(':')?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            Some(
                Node::default()
                    .with_node_id(BrokerId(*id as i32))
                    .with_listeners(vec![Listener::default()
                        .with_name(str_bytes("CONTROLLER"))
                        .with_host(str_bytes(host.to_string()))
                        .with_port(port.parse().ok()?)]),
            )
        })
        .collect()
}
