use std::sync::Arc;

use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};

use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::security::Access;
use crate::txn::messages::MarkerSpec;
use strata_metadata::acl::AclOperation;

/// A transaction coordinator's markers for partitions led here (inter-broker): each written
/// and acknowledged by the ISR before it is answered ([`crate::txn::markers`]).
/// From transaction coordinators only: needs CLUSTER_ACTION (refused, every partition answers
/// CLUSTER_AUTHORIZATION_FAILED).
pub async fn handle(
    broker: &Arc<Broker>,
    req: WriteTxnMarkersRequest,
    access: &Access,
) -> WriteTxnMarkersResponse {
    let authorized = access.cluster(AclOperation::ClusterAction);
    let mut markers = Vec::with_capacity(req.markers.len());
    for m in req.markers {
        let spec = MarkerSpec {
            producer_id: m.producer_id.0,
            producer_epoch: m.producer_epoch,
            coordinator_epoch: m.coordinator_epoch,
            commit: m.transaction_result,
        };
        let partitions: Vec<(String, i32)> = (m.topics.iter())
            .flat_map(|t| {
                let name = t.name.0.to_string();
                t.partition_indexes.iter().map(move |p| (name.clone(), *p))
            })
            .collect();
        let mut codes = if authorized {
            broker.txn.write_markers_here(&spec, &partitions).await
        } else {
            vec![ErrorCode::ClusterAuthorizationFailed; partitions.len()]
        }
        .into_iter();
        let topics = m
            .topics
            .into_iter()
            .map(|t| {
                let partitions = (t.partition_indexes.iter())
                    .map(|p| {
                        WritableTxnMarkerPartitionResult::default()
                            .with_partition_index(*p)
                            .with_error_code(codes.next().map_or(0, |c| c.code()))
                    })
                    .collect();
                WritableTxnMarkerTopicResult::default()
                    .with_name(t.name)
                    .with_partitions(partitions)
            })
            .collect();
        markers.push(
            WritableTxnMarkerResult::default()
                .with_producer_id(m.producer_id)
                .with_topics(topics),
        );
    }
    WriteTxnMarkersResponse::default().with_markers(markers)
}
