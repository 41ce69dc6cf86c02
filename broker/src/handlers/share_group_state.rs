//! ReadShareGroupState (84) and WriteShareGroupState (85): another broker's share partitions
//! reading and writing their durable state in the share coordinator here
//! ([`crate::share::coordinator`]). Between brokers only: both need CLUSTER_ACTION (refused,
//! every partition answers CLUSTER_AUTHORIZATION_FAILED).

use std::sync::Arc;

use kafka_protocol::messages::{
    read_share_group_state_response as rresp, write_share_group_state_response as wresp,
    ReadShareGroupStateRequest, ReadShareGroupStateResponse, WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
};
use strata_metadata::acl::AclOperation;

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;
use crate::share::partition::Snapshot;
use crate::share::store::StateKey;

fn refused() -> ApiError {
    ApiError::new(
        ErrorCode::ClusterAuthorizationFailed,
        "share state is read and written by brokers only (CLUSTER_ACTION)",
    )
}

pub async fn read(
    broker: &Arc<Broker>,
    req: ReadShareGroupStateRequest,
    access: &Access,
) -> ReadShareGroupStateResponse {
    let authorized = access.cluster(AclOperation::ClusterAction);
    let coordinator = &broker.shares.persister.coordinator;
    let mut results = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let key = StateKey {
                group: req.group_id.to_string(),
                topic_id: t.topic_id,
                partition: p.partition,
            };
            let read = match authorized {
                true => coordinator.read(&key).await,
                false => Err(refused()),
            };
            let r = rresp::PartitionResult::default().with_partition(p.partition);
            partitions.push(match read {
                Ok(Some(s)) => r
                    .with_state_epoch(s.state_epoch)
                    .with_start_offset(s.snapshot.start)
                    .with_state_batches(
                        (s.snapshot.runs.iter())
                            .map(|&(first, last, state, count)| {
                                rresp::StateBatch::default()
                                    .with_first_offset(first)
                                    .with_last_offset(last)
                                    .with_delivery_state(state)
                                    .with_delivery_count(count.min(i16::MAX as u16) as i16)
                            })
                            .collect(),
                    ),
                Ok(None) => r
                    .with_error_code(ErrorCode::UnknownTopicOrPartition.code())
                    .with_error_message(Some(str_bytes(format!(
                        "no state kept for share partition {}",
                        key.name()
                    )))),
                Err(e) => r
                    .with_error_code(e.code.code())
                    .with_error_message(Some(str_bytes(e.message))),
            });
        }
        results.push(
            rresp::ReadStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    ReadShareGroupStateResponse::default().with_results(results)
}

pub async fn write(
    broker: &Arc<Broker>,
    req: WriteShareGroupStateRequest,
    access: &Access,
) -> WriteShareGroupStateResponse {
    let authorized = access.cluster(AclOperation::ClusterAction);
    let coordinator = &broker.shares.persister.coordinator;
    let mut results = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let key = StateKey {
                group: req.group_id.to_string(),
                topic_id: t.topic_id,
                partition: p.partition,
            };
            let snapshot = Snapshot {
                start: p.start_offset,
                runs: (p.state_batches.iter())
                    .map(|b| {
                        let count = u16::try_from(b.delivery_count).unwrap_or(0);
                        (b.first_offset, b.last_offset, b.delivery_state, count)
                    })
                    .collect(),
            };
            let written = match authorized {
                true => {
                    coordinator
                        .write(&key, p.leader_epoch, p.state_epoch, snapshot)
                        .await
                }
                false => Err(refused()),
            };
            let r = wresp::PartitionResult::default().with_partition(p.partition);
            partitions.push(match written {
                Ok(()) => r,
                Err(e) => r
                    .with_error_code(e.code.code())
                    .with_error_message(Some(str_bytes(e.message))),
            });
        }
        results.push(
            wresp::WriteStateResult::default()
                .with_topic_id(t.topic_id)
                .with_partitions(partitions),
        );
    }
    WriteShareGroupStateResponse::default().with_results(results)
}
