use std::sync::Arc;

use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;
use strata_metadata::acl::AclOperation;

/// KIP-664: the producers a partition leader knows, with the first offset of each one's open
/// transaction (how an operator finds a hanging transaction).
/// Needs READ on each topic.
pub fn handle(
    broker: &Arc<Broker>,
    req: DescribeProducersRequest,
    access: &Access,
) -> DescribeProducersResponse {
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let name = t.name.0.to_string();
            let authorized = access.topic(AclOperation::Read, &name);
            let partitions = t
                .partition_indexes
                .iter()
                .map(|&index| {
                    let r = PartitionResponse::default().with_partition_index(index);
                    let partition = if authorized {
                        broker.node.leader_partition(&name, index, -1)
                    } else {
                        Err(ApiError::new(
                            ErrorCode::TopicAuthorizationFailed,
                            "READ on the topic is not authorized",
                        ))
                    };
                    match partition {
                        Err(e) => r
                            .with_error_code(e.code.code())
                            .with_error_message(Some(str_bytes(e.message))),
                        Ok(p) => r.with_active_producers(
                            p.producers()
                                .into_iter()
                                .map(|v| {
                                    ProducerState::default()
                                        .with_producer_id(ProducerId(v.producer_id))
                                        .with_producer_epoch(v.epoch as i32)
                                        .with_last_sequence(v.last_sequence)
                                        .with_last_timestamp(v.last_timestamp)
                                        .with_coordinator_epoch(v.coordinator_epoch)
                                        .with_current_txn_start_offset(
                                            v.txn_first_offset.unwrap_or(-1),
                                        )
                                })
                                .collect(),
                        ),
                    }
                })
                .collect();
            TopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}
