use std::sync::Arc;

use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};

use crate::broker::Broker;

pub async fn handle(broker: &Arc<Broker>, req: OffsetDeleteRequest) -> OffsetDeleteResponse {
    if let Err(e) = broker.groups.check(req.group_id.0.as_str()).await {
        return OffsetDeleteResponse::default().with_error_code(e.code.code());
    }
    let partitions: Vec<(String, i32)> = req
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.0.as_str().to_string(), p.partition_index))
        })
        .collect();
    let codes = match broker
        .groups
        .delete_offsets(req.group_id.0.as_str(), &partitions)
    {
        Ok(codes) => codes,
        Err(code) => return OffsetDeleteResponse::default().with_error_code(code.code()),
    };
    let mut codes = codes.into_iter();
    let topics = req
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(codes.next().map(|c| c.code()).unwrap_or(0))
                })
                .collect();
            OffsetDeleteResponseTopic::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    OffsetDeleteResponse::default().with_topics(topics)
}
