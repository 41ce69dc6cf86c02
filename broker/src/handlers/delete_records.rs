use std::sync::Arc;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;
use strata_metadata::acl::AclOperation;
use strata_metadata::Command;

pub async fn handle(
    broker: &Arc<Broker>,
    req: DeleteRecordsRequest,
    access: &Access,
) -> DeleteRecordsResponse {
    let mut topics = Vec::with_capacity(req.topics.len());
    for t in req.topics {
        let name = t.name.0.as_str().to_string();
        let authorized = access.topic(AclOperation::Delete, &name);
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in t.partitions {
            let r = DeleteRecordsPartitionResult::default().with_partition_index(p.partition_index);
            if !authorized {
                partitions.push(
                    r.with_error_code(ErrorCode::TopicAuthorizationFailed.code())
                        .with_low_watermark(-1),
                );
                continue;
            }
            partitions.push(
                match delete(broker, &name, p.partition_index, p.offset).await {
                    Ok(low) => {
                        access.audit(
                            "records_deleted",
                            serde_json::json!({
                                "topic": &name,
                                "partition": p.partition_index,
                                "before_offset": low,
                            }),
                        );
                        r.with_low_watermark(low)
                    }
                    Err(e) => r.with_error_code(e.code.code()).with_low_watermark(-1),
                },
            );
        }
        topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(t.name)
                .with_partitions(partitions),
        );
    }
    DeleteRecordsResponse::default().with_topics(topics)
}

/// Moves the log start to `offset` (-1: the high watermark). Where that reaches into the
/// remote log, the quorum records the new floor and the remote segments wholly below it are
/// marked for deletion (the tier deletes their objects); local segments below it go at once.
async fn delete(
    broker: &Broker,
    topic: &str,
    partition: i32,
    offset: i64,
) -> Result<i64, ApiError> {
    let part = broker.node.leader_partition(topic, partition, -1)?;
    let offsets = part.offsets();
    let offset = if offset == -1 {
        offsets.high_watermark
    } else {
        offset
    };
    if offset < 0 || offset > offsets.high_watermark {
        return Err(ApiError::new(
            ErrorCode::OffsetOutOfRange,
            format!(
                "offset {offset} is out of range [{}, {}]",
                offsets.log_start, offsets.high_watermark
            ),
        ));
    }
    let config = part.log_config();
    if config.compact && !config.delete {
        // The log refuses it with the reason; ask it before touching the quorum.
        return part.delete_records_before(offset).map_err(ApiError::from);
    }
    if offset > offsets.log_start && part.remote().start().is_some() {
        broker
            .node
            .apply(Command::MarkRemoteSegmentsDeleting {
                topic_id: part.topic_id,
                partition,
                before_offset: offset,
            })
            .await?;
        broker.node.sync_partitions()?;
    }
    part.delete_records_before(offset.max(part.local_log_start()))
        .map_err(ApiError::from)?;
    Ok(part.offsets().log_start)
}
