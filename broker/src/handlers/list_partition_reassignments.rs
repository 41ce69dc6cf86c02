//! ListPartitionReassignments (KIP-455: `kafka-reassign-partitions --verify`,
//! `Admin.listPartitionReassignments`): the partitions that are moving, with their replicas
//! and the adding and removing sets, read from the metadata state. Partitions that are not
//! moving (or do not exist) are left out, as in Kafka.

use std::sync::Arc;

use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    BrokerId, ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};
use strata_metadata::{NodeId, PartitionInfo};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::security::Access;
use strata_metadata::acl::AclOperation;

pub fn handle(
    broker: &Arc<Broker>,
    req: ListPartitionReassignmentsRequest,
    access: &Access,
) -> ListPartitionReassignmentsResponse {
    if !access.cluster(AclOperation::Describe) {
        return ListPartitionReassignmentsResponse::default()
            .with_error_code(ErrorCode::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str_bytes("DESCRIBE on the cluster is not authorized")));
    }
    let state = broker.node.metadata.state();
    let mut topics = Vec::new();
    let mut add = |name: &str, partitions: Vec<OngoingPartitionReassignment>| {
        if !partitions.is_empty() {
            topics.push(
                OngoingTopicReassignment::default()
                    .with_name(TopicName(str_bytes(name)))
                    .with_partitions(partitions),
            );
        }
    };
    match req.topics {
        None => {
            for t in state.topics.values() {
                let moving = t
                    .partitions
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.is_moving())
                    .map(|(i, p)| ongoing(i as i32, p))
                    .collect();
                add(&t.name, moving);
            }
        }
        Some(wanted) => {
            for w in wanted {
                let name = w.name.0.as_str();
                let moving = w
                    .partition_indexes
                    .iter()
                    .filter_map(|i| {
                        let p = state.partition(name, *i)?;
                        p.is_moving().then(|| ongoing(*i, p))
                    })
                    .collect();
                add(name, moving);
            }
        }
    }
    ListPartitionReassignmentsResponse::default().with_topics(topics)
}

fn ongoing(index: i32, p: &PartitionInfo) -> OngoingPartitionReassignment {
    let ids = |v: &[NodeId]| v.iter().map(|r| BrokerId(*r as i32)).collect();
    OngoingPartitionReassignment::default()
        .with_partition_index(index)
        .with_replicas(ids(&p.replicas))
        .with_adding_replicas(ids(&p.adding))
        .with_removing_replicas(ids(&p.removing))
}
