//! What the handlers share in building answers: Kafka strings, and the refusals of the ACL
//! APIs. A leaf of `handlers`: the dispatch in `mod.rs` uses the handlers, the handlers use
//! this, and nothing here uses either.

use kafka_protocol::protocol::StrBytes;
use strata_metadata::acl::AclOperation;

use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;

/// Why a request of the ACL APIs is refused as a whole: no authorizer (SECURITY_DISABLED, as
/// Kafka answers), or the caller may not `op` the cluster.
pub(super) fn acl_api_refusal(
    broker: &Broker,
    access: &Access,
    op: AclOperation,
) -> Option<ApiError> {
    if !broker.security.authorizer().enabled() {
        return Some(ApiError::new(
            ErrorCode::SecurityDisabled,
            "No authorizer is configured on the broker (authorizer_enable = false)",
        ));
    }
    (!access.cluster(op)).then(|| cluster_denied(op))
}

/// CLUSTER_AUTHORIZATION_FAILED for `op` on the cluster.
pub(super) fn cluster_denied(op: AclOperation) -> ApiError {
    ApiError::new(
        ErrorCode::ClusterAuthorizationFailed,
        format!("{op:?} on the cluster is not authorized"),
    )
}

pub(super) fn str_bytes(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}
