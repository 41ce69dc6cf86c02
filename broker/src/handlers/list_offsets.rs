use std::sync::Arc;

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;

pub fn handle(broker: &Arc<Broker>, req: ListOffsetsRequest, version: i16) -> ListOffsetsResponse {
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let name = t.name.0.as_str().to_string();
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let resp = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index);
                    match lookup(broker, &name, p.partition_index, p.timestamp) {
                        Ok((offset, timestamp)) => {
                            let resp = resp.with_offset(offset).with_timestamp(timestamp);
                            // Leader epochs exist from v4; earlier versions must leave the default.
                            if version >= 4 {
                                resp.with_leader_epoch(0)
                            } else {
                                resp
                            }
                        }
                        Err(e) => resp
                            .with_error_code(e.code.code())
                            .with_offset(-1)
                            .with_timestamp(-1),
                    }
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}

fn lookup(broker: &Broker, topic: &str, partition: i32, ts: i64) -> Result<(i64, i64), ApiError> {
    let p = broker.partitions.get(topic, partition).ok_or_else(|| {
        ApiError::new(
            ErrorCode::UnknownTopicOrPartition,
            format!("unknown {topic}-{partition}"),
        )
    })?;
    let o = p.offsets();
    Ok(match ts {
        LATEST => (o.high_watermark, -1),
        EARLIEST | EARLIEST_LOCAL => (o.log_start, -1),
        MAX_TIMESTAMP => match p.max_timestamp() {
            Some((offset, ts)) => (offset, ts),
            None => (-1, -1),
        },
        ts if ts < 0 => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!("timestamp {ts}"),
            ))
        }
        ts => p.offset_for_timestamp(ts)?.unwrap_or((-1, -1)),
    })
}
