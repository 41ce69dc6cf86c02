//! Feature levels (KIP-584): what ApiVersions reports and UpdateFeatures changes.
//!
//! Kafka gates protocol generations behind cluster-wide feature levels that clients read from
//! ApiVersions. Strata's levels are fixed by what it implements: `group.version` 1 (KIP-848's
//! consumer protocol, always on) and `transaction.version` 2 (KIP-890 part 2's epoch bump per
//! transaction, always on for clients that know it: Kafka 4.0's level for a new cluster) and
//! `share.version` 2 (KIP-932's share groups with KIP-1191's dead-letter topics, always on), so
//! each is supported at exactly its level and finalized there. UpdateFeatures
//! may therefore only confirm a feature's level; any other level is INVALID_UPDATE_VERSION
//! with the level this cluster has, and a feature Strata does not have (`metadata.version`,
//! `kraft.version`: KRaft's own) is named unknown. Nothing is stored, so nothing changes,
//! whatever the request.

use kafka_protocol::messages::api_versions_response::{FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::update_features_response::UpdatableFeatureResult;
use kafka_protocol::messages::{UpdateFeaturesRequest, UpdateFeaturesResponse};

use super::reply::str_bytes;
use crate::error::ErrorCode;
use crate::security::Access;
use strata_metadata::acl::AclOperation;

/// (name, level) of each feature this broker implements: supported at that level only.
const LEVELS: &[(&str, i16)] = &[
    ("group.version", 1),
    ("transaction.version", 2),
    ("share.version", 2),
];

/// The levels ApiVersions (v3+) reports: supported, and finalized where above 0.
pub fn levels() -> (Vec<SupportedFeatureKey>, Vec<FinalizedFeatureKey>) {
    let supported = (LEVELS.iter())
        .map(|(name, level)| {
            SupportedFeatureKey::default()
                .with_name(str_bytes(*name))
                .with_min_version(*level)
                .with_max_version(*level)
        })
        .collect();
    let finalized = (LEVELS.iter())
        .filter(|(_, level)| *level > 0)
        .map(|(name, level)| {
            FinalizedFeatureKey::default()
                .with_name(str_bytes(*name))
                .with_min_version_level(*level)
                .with_max_version_level(*level)
        })
        .collect();
    (supported, finalized)
}

/// Why `level` cannot be finalized for `feature` (None: it can, and already is).
fn refusal(feature: &str, level: i16) -> Option<String> {
    match LEVELS.iter().find(|(name, _)| *name == feature) {
        None => Some(format!("unknown feature {feature}")),
        Some((_, have)) if *have != level => Some(format!(
            "{feature} level {level} is not supported: this cluster has {have} only"
        )),
        Some(_) => None,
    }
}

pub fn handle(req: UpdateFeaturesRequest, version: i16, access: &Access) -> UpdateFeaturesResponse {
    let (code, message) = if !access.cluster(AclOperation::Alter) {
        (
            ErrorCode::ClusterAuthorizationFailed,
            Some("ALTER on the cluster is not authorized".to_string()),
        )
    } else {
        // All or nothing, as Kafka's controller: the first refusal fails the request.
        match req
            .feature_updates
            .iter()
            .find_map(|u| refusal(u.feature.as_str(), u.max_version_level))
        {
            Some(why) => (ErrorCode::InvalidUpdateVersion, Some(why)),
            None => (ErrorCode::None, None),
        }
    };
    let mut resp = UpdateFeaturesResponse::default()
        .with_error_code(code.code())
        .with_error_message(message.clone().map(str_bytes));
    // v2 answers at the top level only; before, every feature carries the request's outcome.
    if version < 2 {
        resp.results = req
            .feature_updates
            .iter()
            .map(|u| {
                UpdatableFeatureResult::default()
                    .with_feature(u.feature.clone())
                    .with_error_code(code.code())
                    .with_error_message(message.clone().map(str_bytes))
            })
            .collect();
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_implemented_level_of_a_known_feature_is_accepted() {
        assert_eq!(refusal("transaction.version", 2), None);
        assert_eq!(refusal("group.version", 1), None);
        assert_eq!(refusal("share.version", 2), None);
        assert!(refusal("share.version", 1).is_some_and(|m| m.contains("has 2 only")));
        assert!(refusal("group.version", 0).is_some_and(|m| m.contains("has 1 only")));
        assert!(refusal("transaction.version", 0).is_some_and(|m| m.contains("has 2 only")));
        assert!(refusal("group.version", -1).is_some());
        assert!(refusal("metadata.version", 21).is_some_and(|m| m.contains("unknown")));
    }
}
