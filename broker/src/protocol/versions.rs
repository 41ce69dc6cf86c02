//! The APIs and version ranges Strata advertises in ApiVersions and accepts.
//!
//! Each range is where the handler implements the semantics of every version in it, within
//! what the `kafka-protocol` crate can decode. APIs not listed are not advertised; a request
//! for one closes the connection, as Kafka does for an API it does not know.

use kafka_protocol::messages::ApiKey;

/// (api, min, max) for every implemented API.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 11),
    (ApiKey::Fetch, 4, 16),
    (ApiKey::ListOffsets, 1, 8),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::InitProducerId, 0, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 7),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 2, 8),
    (ApiKey::OffsetFetch, 1, 8),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::ElectLeaders, 0, 2),
];

pub fn range(api: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED
        .iter()
        .find(|(k, _, _)| *k == api)
        .map(|(_, min, max)| (*min, *max))
}

pub fn is_supported(api: ApiKey, version: i16) -> bool {
    range(api).is_some_and(|(min, max)| (min..=max).contains(&version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_advertised_range_is_within_what_the_codec_decodes() {
        for (api, min, max) in SUPPORTED {
            let codec = api.valid_versions();
            assert!(codec.min <= *min && *max <= codec.max, "{api:?}");
        }
    }
}
