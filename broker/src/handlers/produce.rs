use std::sync::Arc;

use kafka_protocol::messages::produce_response::{
    LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{BrokerId, ProduceRequest, ProduceResponse};

use super::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};

/// Appends each partition's batches. With acks=0 the client expects no response at all.
///
/// A partition refused because this broker does not lead it (any more) carries the current
/// leader and epoch, and the response the leaders' addresses (KIP-951, v10+): the client
/// redirects at once instead of waiting for a metadata refresh, which is what a leadership
/// move (a reassignment, a balance, a failover) otherwise costs every producer.
pub async fn handle(
    broker: &Arc<Broker>,
    req: ProduceRequest,
    version: i16,
) -> Option<ProduceResponse> {
    let mut leaders_named: Vec<u64> = Vec::new();
    let acks = req.acks;
    let timeout = std::time::Duration::from_millis(req.timeout_ms.max(0) as u64);
    let mut topics = Vec::with_capacity(req.topic_data.len());
    for topic in req.topic_data {
        let name = topic.name.0.as_str().to_string();
        let info = if acks != 0 && acks != 1 && acks != -1 {
            Err(ApiError::new(
                ErrorCode::InvalidRequiredAcks,
                format!("acks={acks}"),
            ))
        } else if name.starts_with("__") {
            Err(ApiError::new(
                ErrorCode::InvalidTopicException,
                format!("'{name}' is an internal topic"),
            ))
        } else if req.transactional_id.is_some() {
            Err(ApiError::new(
                ErrorCode::TransactionalIdNotFound,
                "transactions are not supported yet",
            ))
        } else {
            match broker.node.topic_or_create(&name, true).await {
                Ok(Some(_)) => Ok(()),
                Ok(None) => Err(ApiError::new(
                    ErrorCode::UnknownTopicOrPartition,
                    format!("unknown topic '{name}'"),
                )),
                Err(e) => Err(e),
            }
        };
        topics.push((topic.name, name, info, topic.partition_data));
    }
    // Every partition is appended before any waits for its ISR (each future appends at its
    // first poll, in request order, then waits): the acks=all waits overlap, so a request
    // naming N partitions waits one replication round, not N in a row.
    let results = futures::future::join_all(topics.iter().flat_map(|(_, name, info, parts)| {
        parts.iter().map(move |p| async move {
            match info {
                Err(e) => Err(e.clone()),
                Ok(()) => append(broker, name, p.index, p.records.as_ref(), acks, timeout).await,
            }
        })
    }))
    .await;
    let mut results = results.into_iter();
    let mut responses = Vec::with_capacity(topics.len());
    for (topic_name, name, _, parts) in topics {
        let mut partitions = Vec::with_capacity(parts.len());
        for p in parts {
            let result = results.next().expect("one result per partition");
            let resp = PartitionProduceResponse::default().with_index(p.index);
            partitions.push(match result {
                Ok((base_offset, log_append_time, log_start)) => resp
                    .with_base_offset(base_offset)
                    .with_log_append_time_ms(log_append_time)
                    .with_log_start_offset(log_start),
                Err(e) => {
                    broker.node.metrics.produce_error(e.code);
                    tracing::debug!(topic = %name, partition = p.index, error = %e, "produce refused");
                    let moved = matches!(
                        e.code,
                        ErrorCode::NotLeaderOrFollower | ErrorCode::FencedLeaderEpoch
                    );
                    let resp = resp
                        .with_error_code(e.code.code())
                        .with_base_offset(-1)
                        .with_log_append_time_ms(-1)
                        .with_log_start_offset(-1)
                        .with_error_message(Some(str_bytes(e.message)));
                    match broker.node.metadata.state().partition(&name, p.index) {
                        Some(info) if moved && version >= 10 => {
                            if let Some(l) = info.leader {
                                if !leaders_named.contains(&l) {
                                    leaders_named.push(l);
                                }
                            }
                            resp.with_current_leader(
                                LeaderIdAndEpoch::default()
                                    .with_leader_id(BrokerId(info.leader.map_or(-1, |l| l as i32)))
                                    .with_leader_epoch(info.leader_epoch),
                            )
                        }
                        _ => resp,
                    }
                }
            });
        }
        responses.push(
            TopicProduceResponse::default()
                .with_name(topic_name)
                .with_partition_responses(partitions),
        );
    }
    if acks == 0 {
        return None;
    }
    let state = broker.node.metadata.state();
    let node_endpoints = leaders_named
        .iter()
        .filter_map(|id| state.brokers.get(id))
        .filter(|b| !b.fenced)
        .map(|b| {
            NodeEndpoint::default()
                .with_node_id(BrokerId(b.node_id as i32))
                .with_host(str_bytes(b.host.clone()))
                .with_port(i32::from(b.port))
                .with_rack(b.rack.clone().map(str_bytes))
        })
        .collect();
    Some(
        ProduceResponse::default()
            .with_responses(responses)
            .with_node_endpoints(node_endpoints),
    )
}

/// Appends one partition's batches; with acks=all, waits until the ISR holds them.
async fn append(
    broker: &Broker,
    name: &str,
    partition: i32,
    records: Option<&bytes::Bytes>,
    acks: i16,
    timeout: std::time::Duration,
) -> Result<(i64, i64, i64), ApiError> {
    let p = broker.node.leader_partition(name, partition, -1)?;
    let records = records.ok_or_else(|| ApiError::new(ErrorCode::InvalidRecord, "null records"))?;
    let info = p
        .produce(records, acks, timeout, |info| {
            if !info.duplicate {
                broker.node.metrics.produced(name, info.records, info.bytes);
            }
        })
        .await?;
    Ok((info.base_offset, info.log_append_time, info.log_start))
}
