//! Every API the broker advertises is answered: a request with default fields (empty lists,
//! zero ids, empty names) at every version ApiVersions lists gets a response frame with its
//! correlation id — an error code is a fine answer; silence or a dropped connection is not.
//! So an API advertised in `protocol::versions` but missing from the handlers' dispatch fails
//! here, whatever the dispatch's catch-all does.

use std::time::Duration;

use bytes::Buf;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, RequestKind, ResponseHeader};
use kafka_protocol::protocol::Decodable;
use strata_tests::raw::request_header;
use strata_tests::{Broker, KafkaConn};

/// A request of API `key` with every field at its default: `RequestKind`'s variants are
/// named as `ApiKey`'s, so the list below is every API the wire codec knows, not a copy of
/// what Strata advertises.
fn default_request(key: ApiKey) -> RequestKind {
    macro_rules! defaults {
        ($($api:ident),* $(,)?) => {
            match key {
                $(ApiKey::$api => RequestKind::$api(Default::default()),)*
            }
        };
    }
    let request = defaults!(
        Produce,
        Fetch,
        ListOffsets,
        Metadata,
        OffsetCommit,
        OffsetFetch,
        FindCoordinator,
        JoinGroup,
        Heartbeat,
        LeaveGroup,
        SyncGroup,
        DescribeGroups,
        ListGroups,
        SaslHandshake,
        ApiVersions,
        CreateTopics,
        DeleteTopics,
        DeleteRecords,
        InitProducerId,
        OffsetForLeaderEpoch,
        AddPartitionsToTxn,
        AddOffsetsToTxn,
        EndTxn,
        WriteTxnMarkers,
        TxnOffsetCommit,
        DescribeAcls,
        CreateAcls,
        DeleteAcls,
        DescribeConfigs,
        AlterConfigs,
        AlterReplicaLogDirs,
        DescribeLogDirs,
        SaslAuthenticate,
        CreatePartitions,
        CreateDelegationToken,
        RenewDelegationToken,
        ExpireDelegationToken,
        DescribeDelegationToken,
        DeleteGroups,
        ElectLeaders,
        IncrementalAlterConfigs,
        AlterPartitionReassignments,
        ListPartitionReassignments,
        OffsetDelete,
        DescribeClientQuotas,
        AlterClientQuotas,
        DescribeUserScramCredentials,
        AlterUserScramCredentials,
        Vote,
        BeginQuorumEpoch,
        EndQuorumEpoch,
        DescribeQuorum,
        AlterPartition,
        UpdateFeatures,
        Envelope,
        FetchSnapshot,
        DescribeCluster,
        DescribeProducers,
        BrokerRegistration,
        BrokerHeartbeat,
        UnregisterBroker,
        DescribeTransactions,
        ListTransactions,
        AllocateProducerIds,
        ConsumerGroupHeartbeat,
        ConsumerGroupDescribe,
        ControllerRegistration,
        GetTelemetrySubscriptions,
        PushTelemetry,
        AssignReplicasToDirs,
        ListConfigResources,
        DescribeTopicPartitions,
        ShareGroupHeartbeat,
        ShareGroupDescribe,
        ShareFetch,
        ShareAcknowledge,
        AddRaftVoter,
        RemoveRaftVoter,
        UpdateRaftVoter,
        InitializeShareGroupState,
        ReadShareGroupState,
        WriteShareGroupState,
        DeleteShareGroupState,
        ReadShareGroupStateSummary,
        DescribeShareGroupOffsets,
        AlterShareGroupOffsets,
        DeleteShareGroupOffsets,
    );
    match request {
        // acks=0 asks for no answer; acks=1 for one.
        RequestKind::Produce(p) => RequestKind::Produce(p.with_acks(1)),
        other => other,
    }
}

#[test]
fn every_advertised_api_answers_a_default_request_at_every_version() {
    let broker = Broker::start_default();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let advertised = conn.request(3, &ApiVersionsRequest::default()).unwrap();
    assert!(advertised.api_keys.len() > 40, "{:?}", advertised.api_keys);
    let mut answered = 0;
    for api in &advertised.api_keys {
        let key = ApiKey::try_from(api.api_key).expect("an API the codec knows");
        for version in api.min_version..=api.max_version {
            let what = format!("{key:?} v{version}");
            let mut buf = request_header(api.api_key, version, 7, "api-coverage");
            default_request(key)
                .encode(&mut buf, version)
                .unwrap_or_else(|e| panic!("{what}: a default request does not encode: {e}"));
            // A connection each: an authentication API may close its connection after it.
            let mut c = KafkaConn::connect(&broker.kafka_addr).unwrap();
            c.set_read_timeout(Duration::from_secs(20)).unwrap();
            c.send_frame(&buf).unwrap();
            let mut frame = (c.read_frame())
                .unwrap_or_else(|e| panic!("{what}: no answer: {e}"))
                .unwrap_or_else(|| panic!("{what}: the connection closed without an answer"));
            let header = ResponseHeader::decode(&mut frame, key.response_header_version(version))
                .unwrap_or_else(|e| panic!("{what}: bad response header: {e}"));
            assert_eq!(header.correlation_id, 7, "{what}");
            assert!(frame.has_remaining(), "{what}: an empty body");
            answered += 1;
        }
    }
    println!("{answered} API versions answered");
}
