//! Feature levels (KIP-584): what ApiVersions reports and UpdateFeatures changes.
//!
//! Kafka gates protocol generations behind cluster-wide feature levels that clients read from
//! ApiVersions. Strata implements level 0 of the two features clients act on —
//! `transaction.version` (level 2 is KIP-890 part 2's epoch bump per transaction) and
//! `group.version` (level 1 is KIP-848's consumer protocol) — so it reports each as supported
//! from 0 to 0 and finalizes none (a level-0 feature is "off", which Kafka lists nowhere).
//! UpdateFeatures may therefore only confirm level 0; any other level is
//! INVALID_UPDATE_VERSION with the range this cluster supports, and a feature Strata does not
//! have (`metadata.version`, `kraft.version`: KRaft's own) is named unknown. Nothing is
//! stored, so nothing changes, whatever the request.

use kafka_protocol::messages::api_versions_response::SupportedFeatureKey;
use kafka_protocol::messages::update_features_response::UpdatableFeatureResult;
use kafka_protocol::messages::{UpdateFeaturesRequest, UpdateFeaturesResponse};

use super::str_bytes;
use crate::error::ErrorCode;
use crate::security::Access;
use strata_metadata::acl::AclOperation;

/// (name, lowest level, highest level) of each feature this broker implements.
const SUPPORTED: &[(&str, i16, i16)] = &[("group.version", 0, 0), ("transaction.version", 0, 0)];

/// The supported features, for ApiVersions v3+.
pub fn supported() -> Vec<SupportedFeatureKey> {
    SUPPORTED
        .iter()
        .map(|(name, min, max)| {
            SupportedFeatureKey::default()
                .with_name(str_bytes(*name))
                .with_min_version(*min)
                .with_max_version(*max)
        })
        .collect()
}

/// Why `level` cannot be finalized for `feature` (None: it can, and already is).
fn refusal(feature: &str, level: i16) -> Option<String> {
    match SUPPORTED.iter().find(|(name, ..)| *name == feature) {
        None => Some(format!("unknown feature {feature}")),
        Some((_, min, max)) if !(*min..=*max).contains(&level) => Some(format!(
            "{feature} level {level} is not supported: this cluster supports {min} to {max}"
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
    fn only_level_zero_of_a_known_feature_is_accepted() {
        assert_eq!(refusal("transaction.version", 0), None);
        assert_eq!(refusal("group.version", 0), None);
        assert!(refusal("transaction.version", 2).is_some_and(|m| m.contains("0 to 0")));
        assert!(refusal("group.version", -1).is_some());
        assert!(refusal("metadata.version", 21).is_some_and(|m| m.contains("unknown")));
    }
}
