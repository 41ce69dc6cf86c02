use std::sync::Arc;

use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};

use super::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};

/// Appends each partition's batches. With acks=0 the client expects no response at all.
pub async fn handle(
    broker: &Arc<Broker>,
    req: ProduceRequest,
    _version: i16,
) -> Option<ProduceResponse> {
    let acks = req.acks;
    let timeout = std::time::Duration::from_millis(req.timeout_ms.max(0) as u64);
    let mut responses = Vec::with_capacity(req.topic_data.len());
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
                Ok(Some(t)) => Ok(t),
                Ok(None) => Err(ApiError::new(
                    ErrorCode::UnknownTopicOrPartition,
                    format!("unknown topic '{name}'"),
                )),
                Err(e) => Err(e),
            }
        };
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        for p in topic.partition_data {
            let result = match &info {
                Err(e) => Err(e.clone()),
                Ok(_) => append(broker, &name, p.index, p.records.as_ref(), acks, timeout).await,
            };
            let resp = PartitionProduceResponse::default().with_index(p.index);
            partitions.push(match result {
                Ok((base_offset, log_append_time, log_start)) => resp
                    .with_base_offset(base_offset)
                    .with_log_append_time_ms(log_append_time)
                    .with_log_start_offset(log_start),
                Err(e) => {
                    broker.node.metrics.produce_error(e.code);
                    tracing::debug!(topic = %name, partition = p.index, error = %e, "produce refused");
                    resp.with_error_code(e.code.code())
                        .with_base_offset(-1)
                        .with_log_append_time_ms(-1)
                        .with_log_start_offset(-1)
                        .with_error_message(Some(str_bytes(e.message)))
                }
            });
        }
        responses.push(
            TopicProduceResponse::default()
                .with_name(topic.name)
                .with_partition_responses(partitions),
        );
    }
    if acks == 0 {
        return None;
    }
    Some(ProduceResponse::default().with_responses(responses))
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
