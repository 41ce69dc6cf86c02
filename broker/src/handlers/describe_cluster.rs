use std::sync::Arc;

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::security::Access;
use strata_metadata::acl::{AclOperation, ResourceType, CLUSTER_NAME};

pub fn handle(
    broker: &Arc<Broker>,
    req: DescribeClusterRequest,
    version: i16,
    listener: &str,
    access: &Access,
) -> DescribeClusterResponse {
    if !access.cluster(AclOperation::Describe) {
        return DescribeClusterResponse::default()
            .with_error_code(ErrorCode::ClusterAuthorizationFailed.code())
            .with_error_message(Some(str_bytes("DESCRIBE on the cluster is not authorized")));
    }
    let state = broker.node.metadata.state();
    // Brokers with this listener; fenced ones only when v2 asks for them (KIP-1073).
    let with_fenced = version >= 2 && req.include_fenced_brokers;
    let brokers = state
        .brokers
        .values()
        .filter(|b| with_fenced || !b.fenced)
        .filter_map(|b| {
            let (host, port) = b.endpoint(listener)?;
            Some(
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(b.node_id as i32))
                    .with_host(str_bytes(host))
                    .with_port(i32::from(port))
                    .with_rack(b.rack.clone().map(str_bytes))
                    .with_is_fenced(b.fenced),
            )
        })
        .collect();
    DescribeClusterResponse::default()
        .with_cluster_id(str_bytes(broker.node.config.cluster_id.clone()))
        .with_controller_id(BrokerId(
            broker.node.metadata.leader().map_or(-1, |l| l as i32),
        ))
        .with_brokers(brokers)
        .with_cluster_authorized_operations(if req.include_cluster_authorized_operations {
            access.operations(ResourceType::Cluster, CLUSTER_NAME)
        } else {
            i32::MIN
        })
}
