//! ListConfigResources v0: Kafka 4.0's ListClientMetricsResources (KIP-1000), which lists the
//! client-metrics configuration resources of KIP-714 (named metric subscriptions for clients
//! that push telemetry). Strata has none: it takes telemetry under one subscription from its
//! settings (`client_telemetry_metrics`, see `telemetry/`) and refuses CLIENT_METRICS
//! resources in (Incremental)AlterConfigs, so the list is empty by construction, not by
//! omission. v1 (Kafka 4.1's KIP-1142, every config resource type) is
//! not advertised. Needs DESCRIBE_CONFIGS on the cluster, as in Kafka.

use kafka_protocol::messages::{ListConfigResourcesRequest, ListConfigResourcesResponse};

use crate::error::ErrorCode;
use crate::security::Access;
use strata_metadata::acl::AclOperation;

pub fn handle(_req: ListConfigResourcesRequest, access: &Access) -> ListConfigResourcesResponse {
    if !access.cluster(AclOperation::DescribeConfigs) {
        return ListConfigResourcesResponse::default()
            .with_error_code(ErrorCode::ClusterAuthorizationFailed.code());
    }
    ListConfigResourcesResponse::default()
}
