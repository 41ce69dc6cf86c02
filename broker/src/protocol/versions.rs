//! The APIs and version ranges Strata advertises in ApiVersions and accepts.
//!
//! Each range is where the handler implements the semantics of every version in it, within
//! what the `kafka-protocol` crate can decode. APIs not listed are not advertised; a request
//! for one closes the connection, as Kafka does for an API it does not know.

use kafka_protocol::messages::ApiKey;

/// An implemented API: its key, its name (in metrics and logs) and the versions accepted.
pub struct Api {
    pub key: ApiKey,
    pub name: &'static str,
    pub min: i16,
    pub max: i16,
}

const fn api(key: ApiKey, name: &'static str, min: i16, max: i16) -> Api {
    Api {
        key,
        name,
        min,
        max,
    }
}

/// Every implemented API: the one list of them (ApiVersions, request admission, metrics).
pub const SUPPORTED: &[Api] = &[
    api(ApiKey::Produce, "Produce", 3, 12),
    // Fetch v17 only adds KIP-853's replica directory id (KRaft voters'; consumers never send
    // it). ListOffsets v9 lets clients ask LATEST_TIERED (KIP-1005), v10 bounds the request
    // with a timeout (KIP-1075).
    api(ApiKey::Fetch, "Fetch", 4, 17),
    api(ApiKey::ListOffsets, "ListOffsets", 1, 10),
    // Metadata v13 only adds a top-level error code (KIP-1102's REBOOTSTRAP_REQUIRED, never
    // needed here: every broker answers from the same quorum state).
    api(ApiKey::Metadata, "Metadata", 0, 13),
    api(
        ApiKey::DescribeTopicPartitions,
        "DescribeTopicPartitions",
        0,
        0,
    ),
    api(ApiKey::ApiVersions, "ApiVersions", 0, 4),
    api(ApiKey::CreateTopics, "CreateTopics", 2, 7),
    api(ApiKey::DeleteTopics, "DeleteTopics", 1, 6),
    api(ApiKey::DeleteRecords, "DeleteRecords", 0, 2),
    api(ApiKey::InitProducerId, "InitProducerId", 0, 5),
    api(ApiKey::DescribeConfigs, "DescribeConfigs", 1, 4),
    api(ApiKey::CreatePartitions, "CreatePartitions", 0, 3),
    api(ApiKey::AlterConfigs, "AlterConfigs", 0, 2),
    api(
        ApiKey::IncrementalAlterConfigs,
        "IncrementalAlterConfigs",
        0,
        1,
    ),
    api(ApiKey::DescribeCluster, "DescribeCluster", 0, 2),
    // Client telemetry (KIP-714): see `telemetry/`.
    api(
        ApiKey::GetTelemetrySubscriptions,
        "GetTelemetrySubscriptions",
        0,
        0,
    ),
    api(ApiKey::PushTelemetry, "PushTelemetry", 0, 0),
    // v0 is Kafka 4.0's ListClientMetricsResources: see `handlers/list_config_resources.rs`.
    api(ApiKey::ListConfigResources, "ListConfigResources", 0, 0),
    api(ApiKey::DescribeQuorum, "DescribeQuorum", 0, 2),
    // The quorum's voters (KIP-853): see `handlers/raft_voters.rs`.
    api(ApiKey::AddRaftVoter, "AddRaftVoter", 0, 0),
    api(ApiKey::RemoveRaftVoter, "RemoveRaftVoter", 0, 0),
    // Feature levels (KIP-584): see `handlers/update_features.rs`.
    api(ApiKey::UpdateFeatures, "UpdateFeatures", 0, 2),
    // FindCoordinator v5 only says the client knows TRANSACTION_ABORTABLE (never an answer
    // here); v6 may ask for a share-group coordinator (KIP-932), refused as an unknown key
    // type: Strata hosts no share groups.
    api(ApiKey::FindCoordinator, "FindCoordinator", 0, 6),
    // JoinGroup v8 carries the member's reason (logged), v9 tells a static leader rejoining a
    // stable group to skip the assignment (KIP-814). OffsetCommit and OffsetFetch v9 are the
    // first a KIP-848 consumer may use: for classic groups they are v8; in a consumer-protocol
    // group both check the member and its epoch.
    // DescribeGroups v6 answers GROUP_ID_NOT_FOUND for an unknown group (KIP-1043).
    api(ApiKey::JoinGroup, "JoinGroup", 0, 9),
    api(ApiKey::SyncGroup, "SyncGroup", 0, 5),
    // KIP-848's consumer protocol: see `group/consumer.rs`.
    api(
        ApiKey::ConsumerGroupHeartbeat,
        "ConsumerGroupHeartbeat",
        0,
        1,
    ),
    api(ApiKey::ConsumerGroupDescribe, "ConsumerGroupDescribe", 0, 1),
    // KIP-932's share groups: see `group/share.rs` and `share/`. v1 is the first stable
    // version (v0 was Kafka 4.0's early access).
    api(ApiKey::ShareGroupHeartbeat, "ShareGroupHeartbeat", 1, 1),
    api(ApiKey::ShareGroupDescribe, "ShareGroupDescribe", 1, 1),
    // v2 (Kafka 4.2): RENEW acknowledgements (`IsRenewAck`) and the record-limit acquire
    // mode.
    api(ApiKey::ShareFetch, "ShareFetch", 1, 2),
    api(ApiKey::ShareAcknowledge, "ShareAcknowledge", 1, 2),
    api(
        ApiKey::DescribeShareGroupOffsets,
        "DescribeShareGroupOffsets",
        0,
        0,
    ),
    api(
        ApiKey::AlterShareGroupOffsets,
        "AlterShareGroupOffsets",
        0,
        0,
    ),
    api(
        ApiKey::DeleteShareGroupOffsets,
        "DeleteShareGroupOffsets",
        0,
        0,
    ),
    // The share coordinator's state RPCs, between brokers (CLUSTER_ACTION): a share
    // partition's leader reads and writes its durable state where `__share_group_state` keeps
    // it (see `crate::share::coordinator`).
    api(ApiKey::ReadShareGroupState, "ReadShareGroupState", 0, 0),
    api(ApiKey::WriteShareGroupState, "WriteShareGroupState", 0, 0),
    api(ApiKey::Heartbeat, "Heartbeat", 0, 4),
    api(ApiKey::LeaveGroup, "LeaveGroup", 0, 5),
    api(ApiKey::OffsetCommit, "OffsetCommit", 2, 9),
    api(ApiKey::OffsetFetch, "OffsetFetch", 1, 9),
    api(ApiKey::ListGroups, "ListGroups", 0, 5),
    api(ApiKey::DescribeGroups, "DescribeGroups", 0, 6),
    api(ApiKey::DeleteGroups, "DeleteGroups", 0, 2),
    api(ApiKey::OffsetDelete, "OffsetDelete", 0, 0),
    api(ApiKey::OffsetForLeaderEpoch, "OffsetForLeaderEpoch", 2, 4),
    api(ApiKey::ElectLeaders, "ElectLeaders", 0, 2),
    api(ApiKey::DescribeLogDirs, "DescribeLogDirs", 1, 4),
    api(ApiKey::AlterReplicaLogDirs, "AlterReplicaLogDirs", 1, 2),
    api(
        ApiKey::AlterPartitionReassignments,
        "AlterPartitionReassignments",
        0,
        1,
    ),
    api(
        ApiKey::ListPartitionReassignments,
        "ListPartitionReassignments",
        0,
        0,
    ),
    api(ApiKey::UnregisterBroker, "UnregisterBroker", 0, 0),
    // Transactions (KIP-98), with KIP-890 part 1's verification (AddPartitionsToTxn v4+ is
    // the brokers' batched form) and part 2's transaction version 2: EndTxn v5 bumps the
    // epoch and answers it, Produce v12 and TxnOffsetCommit v5 add their partition to the
    // transaction themselves (see `crate::txn`). InitProducerId v5, AddPartitionsToTxn v5 and
    // AddOffsetsToTxn v4 only say the client knows TRANSACTION_ABORTABLE, never answered here.
    api(ApiKey::AddPartitionsToTxn, "AddPartitionsToTxn", 0, 5),
    api(ApiKey::AddOffsetsToTxn, "AddOffsetsToTxn", 0, 4),
    api(ApiKey::EndTxn, "EndTxn", 0, 5),
    api(ApiKey::TxnOffsetCommit, "TxnOffsetCommit", 0, 5),
    api(ApiKey::WriteTxnMarkers, "WriteTxnMarkers", 1, 1),
    api(ApiKey::DescribeTransactions, "DescribeTransactions", 0, 0),
    api(ApiKey::ListTransactions, "ListTransactions", 0, 1),
    api(ApiKey::DescribeProducers, "DescribeProducers", 0, 0),
    // SASL (KIP-43, KIP-152). Handshake v0 is listed because librdkafka up to 2.0 requires it
    // before it offers SCRAM or PLAIN at all; every client that knows SaslAuthenticate then
    // sends its tokens in SaslAuthenticate requests. A pre-KIP-152 client's raw token after a
    // v0 handshake is not a Kafka request: its connection is closed as for any bad frame.
    api(ApiKey::SaslHandshake, "SaslHandshake", 0, 1),
    api(ApiKey::SaslAuthenticate, "SaslAuthenticate", 0, 2),
    api(
        ApiKey::DescribeUserScramCredentials,
        "DescribeUserScramCredentials",
        0,
        0,
    ),
    api(
        ApiKey::AlterUserScramCredentials,
        "AlterUserScramCredentials",
        0,
        0,
    ),
    // Delegation tokens (KIP-48): refused as by a Kafka cluster without a token secret key.
    api(ApiKey::CreateDelegationToken, "CreateDelegationToken", 1, 3),
    api(ApiKey::RenewDelegationToken, "RenewDelegationToken", 1, 2),
    api(ApiKey::ExpireDelegationToken, "ExpireDelegationToken", 1, 2),
    api(
        ApiKey::DescribeDelegationToken,
        "DescribeDelegationToken",
        1,
        3,
    ),
    // ACLs (KIP-140, KIP-290's pattern types; v0 is gone from Kafka 4.0 and the codec).
    api(ApiKey::CreateAcls, "CreateAcls", 1, 3),
    api(ApiKey::DescribeAcls, "DescribeAcls", 1, 3),
    api(ApiKey::DeleteAcls, "DeleteAcls", 1, 3),
    // Client quotas (KIP-546); user and client-id entities.
    api(ApiKey::DescribeClientQuotas, "DescribeClientQuotas", 0, 1),
    api(ApiKey::AlterClientQuotas, "AlterClientQuotas", 0, 1),
];

fn find(key: ApiKey) -> Option<&'static Api> {
    SUPPORTED.iter().find(|a| a.key == key)
}

pub fn is_supported(key: ApiKey, version: i16) -> bool {
    find(key).is_some_and(|a| (a.min..=a.max).contains(&version))
}

/// The API's name, for metrics ("Other" for one Strata does not implement).
pub fn name(key: ApiKey) -> &'static str {
    find(key).map_or("Other", |a| a.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_advertised_range_is_within_what_the_codec_decodes() {
        for a in SUPPORTED {
            let codec = a.key.valid_versions();
            assert!(codec.min <= a.min && a.max <= codec.max, "{:?}", a.key);
            assert_eq!(a.name, format!("{:?}", a.key));
        }
    }
}
