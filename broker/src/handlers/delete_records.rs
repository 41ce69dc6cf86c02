use std::sync::Arc;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};

pub fn handle(broker: &Arc<Broker>, req: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let name = t.name.0.as_str().to_string();
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let r = DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index);
                    let outcome = broker
                        .partitions
                        .get(&name, p.partition_index)
                        .ok_or_else(|| {
                            ApiError::new(ErrorCode::UnknownTopicOrPartition, "unknown partition")
                        })
                        .and_then(|part| {
                            // -1 means "up to the high watermark".
                            let offset = if p.offset == -1 {
                                part.offsets().high_watermark
                            } else {
                                p.offset
                            };
                            part.delete_records_before(offset).map_err(ApiError::from)
                        });
                    match outcome {
                        Ok(low) => r.with_low_watermark(low),
                        Err(e) => r.with_error_code(e.code.code()).with_low_watermark(-1),
                    }
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    DeleteRecordsResponse::default().with_topics(topics)
}
