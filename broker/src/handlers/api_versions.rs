use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};

use crate::error::ErrorCode;
use crate::protocol::versions::SUPPORTED;

fn api_keys() -> Vec<ApiVersion> {
    SUPPORTED
        .iter()
        .map(|a| {
            ApiVersion::default()
                .with_api_key(a.key as i16)
                .with_min_version(a.min)
                .with_max_version(a.max)
        })
        .collect()
}

pub fn handle(_req: ApiVersionsRequest, _version: i16) -> ApiVersionsResponse {
    let (supported, finalized) = super::update_features::levels();
    ApiVersionsResponse::default()
        .with_api_keys(api_keys())
        .with_supported_features(supported)
        // The levels never change: one epoch for the life of the cluster.
        .with_finalized_features_epoch(0)
        .with_finalized_features(finalized)
}

/// What a client asking for an ApiVersions version newer than ours gets: a v0 response with
/// UNSUPPORTED_VERSION and our ranges, from which it picks a version and retries (KIP-511).
pub fn unsupported_version_response() -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_error_code(ErrorCode::UnsupportedVersion.code())
        .with_api_keys(api_keys())
}
