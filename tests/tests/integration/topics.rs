//! Topics through librdkafka: metadata (one topic and all topics), auto-creation with
//! num_partitions, CreateTopics configs read back with DescribeConfigs, and the topic configs
//! that change behaviour (message.timestamp.type).

use std::time::Duration;

use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::IncrementalAlterConfigsRequest;
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{AdminOptions, AlterConfig, ResourceSpecifier};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Message, Timestamp};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::Offset;
use strata_tests::{
    block_on, now_ms, unique_topic, wait_for_some, Broker, BrokerOpts, KafkaConn, TrackingProducer,
};

#[test]
fn metadata_for_one_topic_and_for_all_topics_lists_partitions_and_an_ipv4_broker() {
    let broker = Broker::start_default();
    let topic = unique_topic("md");
    broker.create_topic(&topic, 4, &[]).unwrap();
    let consumer: BaseConsumer = broker.consumer_config().create().unwrap();

    let one = consumer
        .fetch_metadata(Some(&topic), Duration::from_secs(10))
        .expect("metadata for one topic");
    let t = one
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .expect("topic in metadata");
    assert_eq!(t.error(), None);
    assert_eq!(t.partitions().len(), 4);
    let b = &one.brokers()[0];
    assert_eq!(
        format!("{}:{}", b.host(), b.port()),
        broker.kafka_addr,
        "advertised broker address"
    );

    // librdkafka's all-topics request (Metadata v12 with a null topic array).
    let all = consumer
        .fetch_metadata(None, Duration::from_secs(10))
        .expect("metadata for all topics (librdkafka's all-topics Metadata request)");
    let t = all
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .expect("topic in all-topics metadata");
    assert_eq!(t.partitions().len(), 4);
}

#[test]
fn metadata_auto_creates_a_topic_with_num_partitions() {
    let broker = Broker::start(BrokerOpts::new().env("STRATA_NUM_PARTITIONS", 3));
    let topic = unique_topic("auto");
    let mut cfg = broker.consumer_config();
    // librdkafka asks for auto-creation in Metadata only when this is set (consumers default
    // to false).
    cfg.set("allow.auto.create.topics", "true");
    let consumer: BaseConsumer = cfg.create().unwrap();
    let partitions = wait_for_some(
        "the auto-created topic to have a leader",
        Duration::from_secs(20),
        || {
            let md = consumer
                .fetch_metadata(Some(&topic), Duration::from_secs(5))
                .ok()?;
            let t = md.topics().iter().find(|t| t.name() == topic)?;
            (t.error().is_none()
                && t.partitions().iter().all(|p| p.leader() >= 0)
                && !t.partitions().is_empty())
            .then(|| t.partitions().len())
        },
    );
    assert_eq!(
        partitions, 3,
        "partitions of a topic auto-created with STRATA_NUM_PARTITIONS=3"
    );

    // Produce auto-creates too.
    let topic2 = unique_topic("auto-produce");
    let producer = TrackingProducer::new(&broker.producer_config());
    producer.send(0, &topic2, None, b"k", b"v", &[], None);
    producer.flush(Duration::from_secs(30));
    producer.all_delivered(1);
    let md = consumer
        .fetch_metadata(Some(&topic2), Duration::from_secs(5))
        .unwrap();
    assert_eq!(md.topics()[0].partitions().len(), 3);
}

#[test]
fn topic_configs_given_at_creation_are_described_back() {
    let broker = Broker::start_default();
    let topic = unique_topic("configs");
    let configs = [
        ("segment.bytes", "1048576"),
        ("retention.ms", "3600000"),
        ("retention.bytes", "10485760"),
        ("flush.messages", "1000"),
        ("flush.ms", "5000"),
        ("max.message.bytes", "500000"),
        ("message.timestamp.type", "LogAppendTime"),
        ("cleanup.policy", "delete"),
        ("min.insync.replicas", "1"),
        ("index.interval.bytes", "8192"),
        ("segment.ms", "600000"),
        ("unclean.leader.election.enable", "false"),
    ];
    broker.create_topic(&topic, 1, &configs).unwrap();
    let admin = broker.admin();
    let res = block_on(admin.describe_configs(
        [&ResourceSpecifier::Topic(&topic)],
        &AdminOptions::new().request_timeout(Some(Duration::from_secs(10))),
    ))
    .expect("DescribeConfigs");
    let resource = res[0]
        .as_ref()
        .expect("DescribeConfigs result for the topic");
    let entries = resource.entry_map();
    let mut wrong = Vec::new();
    for (k, v) in configs {
        let got = entries.get(k).and_then(|e| e.value.as_deref());
        if got != Some(v) {
            wrong.push(format!("{k}: set {v}, described {got:?}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "configs described back wrongly:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn invalid_topic_configs_are_refused_at_creation() {
    let broker = Broker::start_default();
    let err = broker
        .create_topic(
            &unique_topic("shred"),
            1,
            &[("cleanup.policy", "compact,shred")],
        )
        .expect_err("cleanup.policy=compact,shred is not a policy and must be refused");
    assert!(
        format!("{err:#}").contains("InvalidConfig"),
        "error: {err:#}"
    );
    let err = broker
        .create_topic(
            &unique_topic("bad-ts"),
            1,
            &[("message.timestamp.type", "Sometimes")],
        )
        .expect_err("an invalid message.timestamp.type must be refused");
    assert!(
        format!("{err:#}").contains("InvalidConfig"),
        "error: {err:#}"
    );
}

#[test]
fn log_append_time_topics_stamp_records_with_the_broker_clock() {
    let broker = Broker::start_default();
    let topic = unique_topic("append-time");
    broker
        .create_topic(&topic, 1, &[("message.timestamp.type", "LogAppendTime")])
        .unwrap();
    let old = now_ms() - 86_400_000;
    let before = now_ms();
    let producer = TrackingProducer::new(&broker.producer_config());
    for i in 0..5 {
        producer.send(i, &topic, Some(0), b"k", b"v", &[], Some(old + i as i64));
    }
    producer.flush(Duration::from_secs(30));
    producer.all_delivered(5);
    let after = now_ms();

    let consumer =
        broker.assigned_consumer(&broker.consumer_config(), &topic, &[(0, Offset::Offset(0))]);
    let mut seen = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while seen < 5 {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out reading the records back"
        );
        let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        match m.timestamp() {
            Timestamp::LogAppendTime(ts) => assert!(
                (before - 1000..=after + 1000).contains(&ts),
                "log append time {ts} outside the produce window {before}..{after}"
            ),
            other => panic!(
                "record at offset {} has timestamp {other:?}, expected LogAppendTime",
                m.offset()
            ),
        }
        seen += 1;
    }
}

/// The effective value of one topic config, read with librdkafka's DescribeConfigs.
fn described(broker: &Broker, topic: &str, key: &str) -> Option<String> {
    let res = block_on(broker.admin().describe_configs(
        [&ResourceSpecifier::Topic(topic)],
        &AdminOptions::new().request_timeout(Some(Duration::from_secs(10))),
    ))
    .expect("DescribeConfigs");
    let resource = res[0].as_ref().expect("the topic's configs");
    resource.get(key).and_then(|e| e.value.clone())
}

/// Librdkafka's `alter_configs` is the legacy AlterConfigs: the configs it names become the
/// topic's whole set of overrides; the others go back to their defaults.
#[test]
fn legacy_alter_configs_replaces_the_whole_set_of_overrides() {
    let broker = Broker::start_default();
    let topic = unique_topic("legacy-alter");
    broker
        .create_topic(
            &topic,
            1,
            &[("retention.ms", "3600000"), ("segment.bytes", "1048576")],
        )
        .unwrap();
    let admin = broker.admin();
    let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(10)));
    let alter = |configs: &[(&str, &str)], opts: &AdminOptions| {
        let mut change = AlterConfig::new(ResourceSpecifier::Topic(&topic));
        for (k, v) in configs {
            change = change.set(k, v);
        }
        let res = block_on(admin.alter_configs([&change], opts)).expect("AlterConfigs");
        res.into_iter().next().expect("one result").map(|_| ())
    };

    alter(&[("max.message.bytes", "2000")], &opts).expect("a valid set is accepted");
    assert_eq!(
        described(&broker, &topic, "max.message.bytes").as_deref(),
        Some("2000")
    );
    assert_eq!(
        described(&broker, &topic, "retention.ms").as_deref(),
        Some("604800000"),
        "an override not named went back to the default"
    );
    assert_eq!(
        described(&broker, &topic, "segment.bytes").as_deref(),
        Some("1073741824")
    );

    // Refused as a whole, nothing changes: an invalid value, an unknown key, an unknown topic
    // (the rdkafka crate drops per-resource errors of this call, so they are read raw).
    for bad in [("cleanup.policy", "shred"), ("no.such.key", "1")] {
        let (code, why) = legacy_alter(&broker, &topic, &[("retention.ms", "1000"), bad]);
        assert_eq!(code, 40, "INVALID_CONFIG for {bad:?}: {why}");
    }
    assert_eq!(
        legacy_alter(&broker, "no-such-topic", &[("retention.ms", "1")]).0,
        3
    );
    // validate_only checks and changes nothing.
    alter(
        &[("retention.ms", "1000")],
        &AdminOptions::new()
            .request_timeout(Some(Duration::from_secs(10)))
            .validate_only(true),
    )
    .unwrap();
    assert_eq!(
        described(&broker, &topic, "max.message.bytes").as_deref(),
        Some("2000")
    );
    assert_eq!(
        described(&broker, &topic, "retention.ms").as_deref(),
        Some("604800000")
    );
}

/// The legacy AlterConfigs on one topic, raw: the resource's (error code, message).
fn legacy_alter(broker: &Broker, topic: &str, configs: &[(&str, &str)]) -> (i16, String) {
    use kafka_protocol::messages::alter_configs_request as legacy;
    let req = kafka_protocol::messages::AlterConfigsRequest::default().with_resources(vec![
        legacy::AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(topic.to_string()))
            .with_configs(
                (configs.iter())
                    .map(|(k, v)| {
                        legacy::AlterableConfig::default()
                            .with_name(StrBytes::from_string(k.to_string()))
                            .with_value(Some(StrBytes::from_string(v.to_string())))
                    })
                    .collect(),
            ),
    ]);
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let resp = conn.request(1, &req).unwrap();
    let r = &resp.responses[0];
    (
        r.error_code,
        r.error_message.as_deref().unwrap_or("").to_string(),
    )
}

/// IncrementalAlterConfigs on one topic config; the resource's (error code, message).
fn incremental(broker: &Broker, topic: &str, key: &str, op: i8, value: &str) -> (i16, String) {
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(topic.to_string()))
            .with_configs(vec![AlterableConfig::default()
                .with_name(StrBytes::from_string(key.to_string()))
                .with_config_operation(op)
                .with_value(Some(StrBytes::from_string(value.to_string())))]),
    ]);
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let resp = conn.request(1, &req).unwrap();
    let r = &resp.responses[0];
    (
        r.error_code,
        r.error_message.as_deref().unwrap_or("").to_string(),
    )
}

/// `cleanup.policy` is a LIST config as in Kafka: tools APPEND `compact` to it (and the topic
/// then behaves as a compacted one) or SUBTRACT a policy; a non-list key refuses both.
#[test]
fn list_configs_take_append_and_subtract() {
    const APPEND: i8 = 2;
    const SUBTRACT: i8 = 3;
    const INVALID_CONFIG: i16 = 40;
    let broker = Broker::start_default();
    let topic = unique_topic("list-config");
    broker.create_topic(&topic, 1, &[]).unwrap();

    assert_eq!(
        incremental(&broker, &topic, "cleanup.policy", APPEND, "compact").0,
        0
    );
    assert_eq!(
        described(&broker, &topic, "cleanup.policy").as_deref(),
        Some("delete,compact")
    );
    // Compacted now: a record without a key is refused.
    let producer: FutureProducer = broker.producer_config().create().unwrap();
    let keyless = FutureRecord::<(), str>::to(&topic)
        .payload("v")
        .partition(0);
    let err = block_on(producer.send(keyless, Duration::from_secs(10)))
        .unwrap_err()
        .0;
    assert!(err.to_string().contains("InvalidRecord"), "{err}");
    // Appending what is there changes nothing.
    assert_eq!(
        incremental(&broker, &topic, "cleanup.policy", APPEND, "compact").0,
        0
    );
    assert_eq!(
        described(&broker, &topic, "cleanup.policy").as_deref(),
        Some("delete,compact")
    );
    assert_eq!(
        incremental(&broker, &topic, "cleanup.policy", SUBTRACT, "delete").0,
        0
    );
    assert_eq!(
        described(&broker, &topic, "cleanup.policy").as_deref(),
        Some("compact")
    );

    // Subtracting the last policy leaves an empty list, which Kafka accepts: neither deletion
    // nor compaction. Subtracting a value that is not there changes nothing.
    let (code, why) = incremental(&broker, &topic, "cleanup.policy", SUBTRACT, "compact");
    assert_eq!(code, 0, "{why}");
    assert_eq!(
        described(&broker, &topic, "cleanup.policy").as_deref(),
        Some("")
    );
    let (code, why) = incremental(&broker, &topic, "cleanup.policy", SUBTRACT, "delete");
    assert_eq!(code, 0, "{why}");
    assert_eq!(
        incremental(&broker, &topic, "cleanup.policy", APPEND, "compact").0,
        0
    );

    // Refused, nothing changes: a value that is no policy, a key that is not a list, an
    // unknown operation.
    let (code, why) = incremental(&broker, &topic, "cleanup.policy", APPEND, "shred");
    assert_eq!(code, INVALID_CONFIG, "{why}");
    let (code, why) = incremental(&broker, &topic, "retention.ms", APPEND, "1000");
    assert_eq!(
        (code, why.contains("not one")),
        (INVALID_CONFIG, true),
        "{why}"
    );
    let (code, why) = incremental(&broker, &topic, "cleanup.policy", 9, "delete");
    assert_eq!(code, 42, "INVALID_REQUEST: {why}");
    assert_eq!(
        described(&broker, &topic, "cleanup.policy").as_deref(),
        Some("compact")
    );
}

/// One DescribeTopicPartitions page: (topic, partition, leader) of each partition, the error
/// of each topic that has one, and the next cursor.
type Page = (
    Vec<(String, i32, i32)>,
    Vec<(String, i16)>,
    Option<(String, i32)>,
);

fn describe_page(
    conn: &mut KafkaConn,
    topics: &[&str],
    limit: i32,
    cursor: Option<(&str, i32)>,
) -> Page {
    use kafka_protocol::messages::describe_topic_partitions_request::{Cursor, TopicRequest};
    use kafka_protocol::messages::{DescribeTopicPartitionsRequest, TopicName};
    let name = |n: &str| TopicName(StrBytes::from_string(n.to_string()));
    let req = DescribeTopicPartitionsRequest::default()
        .with_topics(
            topics
                .iter()
                .map(|t| TopicRequest::default().with_name(name(t)))
                .collect(),
        )
        .with_response_partition_limit(limit)
        .with_cursor(cursor.map(|(t, p)| {
            Cursor::default()
                .with_topic_name(name(t))
                .with_partition_index(p)
        }));
    let resp = conn.request(0, &req).unwrap();
    let mut partitions = Vec::new();
    let mut errors = Vec::new();
    for t in resp.topics {
        let topic = t.name.map(|n| n.0.to_string()).unwrap_or_default();
        if t.error_code != 0 {
            errors.push((topic, t.error_code));
            continue;
        }
        for p in t.partitions {
            partitions.push((topic.clone(), p.partition_index, p.leader_id.0));
        }
    }
    let next = resp
        .next_cursor
        .map(|c| (c.topic_name.0.to_string(), c.partition_index));
    (partitions, errors, next)
}

/// KIP-966: pages of at most the limit, topics in name order, a cursor that continues exactly
/// where the last page stopped; bad cursors answered as Kafka answers them.
#[test]
fn describe_topic_partitions_pages_with_a_cursor() {
    let broker = Broker::start_default();
    let prefix = unique_topic("dtp");
    let (a, b, c) = (
        format!("{prefix}-a"),
        format!("{prefix}-b"),
        format!("{prefix}-c"),
    );
    for (t, n) in [(&a, 5), (&b, 3), (&c, 1)] {
        broker.create_topic(t, n, &[]).unwrap();
    }
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let named = [c.as_str(), a.as_str(), b.as_str()];

    let mut seen = Vec::new();
    let mut cursor: Option<(String, i32)> = None;
    let mut pages = 0;
    loop {
        let (parts, errors, next) = describe_page(
            &mut conn,
            &named,
            4,
            cursor.as_ref().map(|(t, p)| (t.as_str(), *p)),
        );
        assert!(errors.is_empty(), "{errors:?}");
        assert!(parts.len() <= 4, "page of {} partitions", parts.len());
        assert!(parts.iter().all(|(_, _, leader)| *leader == 1));
        seen.extend(parts.into_iter().map(|(t, p, _)| (t, p)));
        pages += 1;
        match next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    let want: Vec<(String, i32)> = [(&a, 5), (&b, 3), (&c, 1)]
        .into_iter()
        .flat_map(|(t, n)| (0..n).map(move |p| (t.clone(), p)))
        .collect();
    assert_eq!(seen, want, "every partition once, in topic-name order");
    assert_eq!(pages, 3);
    // Exactly at the end of a topic, the cursor names the next topic's first partition.
    let (_, _, next) = describe_page(&mut conn, &named, 5, None);
    assert_eq!(next, Some((b.clone(), 0)));

    // Every topic (none named): ours among them, each partition once.
    let mut all = Vec::new();
    let mut cursor: Option<(String, i32)> = None;
    loop {
        let (parts, _, next) = describe_page(
            &mut conn,
            &[],
            2,
            cursor.as_ref().map(|(t, p)| (t.as_str(), *p)),
        );
        all.extend(parts.into_iter().map(|(t, p, _)| (t, p)));
        match next {
            Some(n) => cursor = Some(n),
            None => break,
        }
    }
    let ours: Vec<_> = all
        .into_iter()
        .filter(|(t, _)| t.starts_with(&prefix))
        .collect();
    assert_eq!(ours, want);

    // An unknown named topic; a cursor outside the named topics or at a negative partition.
    let (_, errors, _) = describe_page(&mut conn, &[&a, "dtp-no-such-topic"], 100, None);
    assert_eq!(errors, [("dtp-no-such-topic".to_string(), 3)]);
    let (parts, errors, _) = describe_page(&mut conn, &[&a], 100, Some((&c, 0)));
    assert_eq!((parts.len(), errors), (0, vec![(a.clone(), 42)]));
    let (_, errors, _) = describe_page(&mut conn, &[&a], 100, Some((&a, -1)));
    assert_eq!(errors, [(a.clone(), 42)]);

    // A cursor naming a topic deleted since: every-topic listing goes on after its name.
    let deleted = block_on(
        broker
            .admin()
            .delete_topics(&[b.as_str()], &AdminOptions::new()),
    );
    deleted.unwrap()[0].as_ref().expect("topic deleted");
    let (parts, _, _) = describe_page(&mut conn, &[], 2000, Some((&b, 1)));
    assert!(
        parts.iter().all(|(t, _, _)| *t > b) && parts.iter().any(|(t, _, _)| *t == c),
        "{parts:?}"
    );
}

/// DescribeQuorum on a node alone: it leads, is the only voter, holds the whole log, and its
/// controller listener is its raft port; any other partition is unknown.
#[test]
fn describe_quorum_on_a_single_voter() {
    let broker = Broker::start_default();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let q = conn.describe_quorum("__cluster_metadata", 0).unwrap();
    assert_eq!((q.error_code, q.leader), (0, 1), "{q:?}");
    assert!(q.epoch >= 1, "{q:?}");
    assert_eq!(q.voters.len(), 1, "{q:?}");
    let (id, log_end, fetch, caught_up) = q.voters[0];
    assert_eq!(id, 1);
    assert!(q.high_watermark > 0 && q.high_watermark <= log_end, "{q:?}");
    assert!(fetch > 0 && caught_up > 0, "{q:?}");
    assert!(q.observers.is_empty());
    let raft_port: u16 = broker
        .raft_addr
        .rsplit_once(':')
        .unwrap()
        .1
        .parse()
        .unwrap();
    assert_eq!(q.nodes, [(1, "127.0.0.1".to_string(), raft_port)]);

    let other = conn.describe_quorum("__cluster_metadata", 1).unwrap();
    assert_eq!(other.error_code, 3, "UNKNOWN_TOPIC_OR_PARTITION");
    let other = conn.describe_quorum("not-the-quorum", 0).unwrap();
    assert_eq!(other.error_code, 3);
}

/// ApiVersions advertises Kafka 4.0's versions of what Strata implements, and each answers
/// as 4.0 does: DescribeCluster v2 lists fenced brokers only when asked (KIP-1073), Metadata
/// v13 carries its top-level error code, the feature levels are reported and UpdateFeatures
/// refuses what is not implemented, FindCoordinator v6 finds a share partition's coordinator.
#[test]
fn the_kafka_4_api_versions_are_advertised_and_answer() {
    use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
    use kafka_protocol::messages::{
        ApiKey, ApiVersionsRequest, DescribeClusterRequest, FindCoordinatorRequest,
        MetadataRequest, UpdateFeaturesRequest,
    };
    let broker = Broker::start_default();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let answer = conn.request(3, &ApiVersionsRequest::default()).unwrap();
    let features: Vec<(String, i16, i16)> = answer
        .supported_features
        .iter()
        .map(|f| (f.name.to_string(), f.min_version, f.max_version))
        .collect();
    assert_eq!(
        features,
        [
            ("group.version".to_string(), 1, 1),
            ("transaction.version".to_string(), 2, 2),
            ("share.version".to_string(), 2, 2)
        ]
    );
    let finalized: Vec<(String, i16)> = answer
        .finalized_features
        .iter()
        .map(|f| (f.name.to_string(), f.max_version_level))
        .collect();
    assert_eq!(
        finalized,
        [
            ("group.version".to_string(), 1),
            ("transaction.version".to_string(), 2),
            ("share.version".to_string(), 2)
        ]
    );
    let versions = answer.api_keys;
    let max = |key: ApiKey| {
        versions
            .iter()
            .find(|v| v.api_key == key as i16)
            .map(|v| v.max_version)
    };
    for (key, v) in [
        (ApiKey::Metadata, 13),
        (ApiKey::JoinGroup, 9),
        (ApiKey::OffsetCommit, 9),
        (ApiKey::OffsetFetch, 9),
        (ApiKey::DescribeGroups, 6),
        (ApiKey::DescribeCluster, 2),
        (ApiKey::FindCoordinator, 6),
        (ApiKey::UpdateFeatures, 2),
        (ApiKey::AddRaftVoter, 0),
        (ApiKey::ConsumerGroupHeartbeat, 1),
        (ApiKey::ConsumerGroupDescribe, 1),
        (ApiKey::RemoveRaftVoter, 0),
        (ApiKey::CreateDelegationToken, 3),
        (ApiKey::RenewDelegationToken, 2),
        (ApiKey::ExpireDelegationToken, 2),
        (ApiKey::DescribeDelegationToken, 3),
        (ApiKey::Produce, 12),
        (ApiKey::InitProducerId, 5),
        (ApiKey::AddPartitionsToTxn, 5),
        (ApiKey::AddOffsetsToTxn, 4),
        (ApiKey::EndTxn, 5),
        (ApiKey::TxnOffsetCommit, 5),
        (ApiKey::ListConfigResources, 0),
        (ApiKey::GetTelemetrySubscriptions, 0),
        (ApiKey::PushTelemetry, 0),
    ] {
        assert_eq!(max(key), Some(v), "{key:?}");
    }

    let cluster = conn
        .request(
            2,
            &DescribeClusterRequest::default().with_include_fenced_brokers(true),
        )
        .unwrap();
    assert_eq!(cluster.error_code, 0);
    assert_eq!(cluster.brokers.len(), 1);
    assert!(!cluster.brokers[0].is_fenced);
    let md = conn
        .request(13, &MetadataRequest::default().with_topics(Some(vec![])))
        .unwrap();
    assert_eq!((md.error_code, md.brokers.len()), (0, 1));

    // ListClientMetricsResources (ListConfigResources v0): none exist here.
    let listed = conn
        .request(
            0,
            &kafka_protocol::messages::ListConfigResourcesRequest::default(),
        )
        .unwrap();
    assert_eq!(
        (listed.error_code, listed.config_resources.len()),
        (0, 0),
        "{listed:?}"
    );

    // UpdateFeatures v1: per-feature results, all or nothing.
    let update = |feature: &str, level: i16| {
        FeatureUpdateKey::default()
            .with_feature(feature.to_string().into())
            .with_max_version_level(level)
            .with_upgrade_type(1)
    };
    let r = conn
        .request(
            1,
            &UpdateFeaturesRequest::default()
                .with_feature_updates(vec![update("group.version", 1), update("group.version", 0)]),
        )
        .unwrap();
    assert_eq!(r.error_code, 95, "INVALID_UPDATE_VERSION: {r:?}");
    assert!(r.results.iter().all(|f| f.error_code == 95), "{r:?}");
    let r = conn
        .request(
            1,
            &UpdateFeaturesRequest::default()
                .with_feature_updates(vec![update("transaction.version", 2)]),
        )
        .unwrap();
    assert_eq!((r.error_code, r.results[0].error_code), (0, 0), "{r:?}");

    // FindCoordinator v6 may name a share partition's coordinator (KIP-932), keyed
    // group:topic-id:partition; a key of another form is INVALID_REQUEST.
    let r = conn
        .request(
            6,
            &FindCoordinatorRequest::default()
                .with_key_type(2)
                .with_coordinator_keys(vec![
                    "g:topic:0".to_string().into(),
                    format!("g:{}:0", uuid::Uuid::new_v4()).into(),
                ]),
        )
        .unwrap();
    assert_eq!(r.coordinators[0].error_code, 42, "INVALID_REQUEST: {r:?}");
    assert_eq!(r.coordinators[1].error_code, 0, "{r:?}");
    assert_eq!(r.coordinators[1].node_id.0, 1, "{r:?}");
}

/// One CreateTopics request (v7) for `name` with these fields: the topic's error code.
fn create_raw(
    conn: &mut KafkaConn,
    name: &str,
    partitions: i32,
    replication_factor: i16,
    configs: &[(&str, Option<&str>)],
) -> i16 {
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
    use kafka_protocol::messages::{CreateTopicsRequest, TopicName};
    let topic = CreatableTopic::default()
        .with_name(TopicName(StrBytes::from_string(name.to_string())))
        .with_num_partitions(partitions)
        .with_replication_factor(replication_factor)
        .with_configs(
            configs
                .iter()
                .map(|(k, v)| {
                    CreatableTopicConfig::default()
                        .with_name(StrBytes::from_string(k.to_string()))
                        .with_value(v.map(|v| StrBytes::from_string(v.to_string())))
                })
                .collect(),
        );
    let req = CreateTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![topic]);
    conn.request(7, &req).expect("CreateTopics").topics[0].error_code
}

/// Kafka's precedence when a CreateTopics topic is wrong in two ways: a bad name first, then
/// existence, then its configs, then partitions and replication factor.
#[test]
fn create_topics_reports_the_error_kafka_reports_first() {
    const INVALID_TOPIC_EXCEPTION: i16 = 17;
    const INVALID_PARTITIONS: i16 = 37;
    const INVALID_REPLICATION_FACTOR: i16 = 38;
    const TOPIC_ALREADY_EXISTS: i16 = 36;
    const INVALID_CONFIG: i16 = 40;
    let broker = Broker::start_default();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let topic = unique_topic("precedence");
    assert_eq!(create_raw(&mut conn, &topic, 1, 1, &[]), 0);
    let fresh = unique_topic("precedence-new");
    for (name, partitions, rf, configs, want, why) in [
        (
            &topic,
            1,
            5,
            vec![],
            TOPIC_ALREADY_EXISTS,
            "exists, too few brokers",
        ),
        (
            &topic,
            0,
            1,
            vec![],
            TOPIC_ALREADY_EXISTS,
            "exists, no partitions",
        ),
        (
            &topic,
            1,
            1,
            vec![("retention.ms", None)],
            TOPIC_ALREADY_EXISTS,
            "exists, null config",
        ),
        (
            &topic,
            1,
            1,
            vec![("no.such.key", Some("1"))],
            TOPIC_ALREADY_EXISTS,
            "exists, unknown key",
        ),
        (
            &"bad/name".to_string(),
            0,
            9,
            vec![],
            INVALID_TOPIC_EXCEPTION,
            "bad name, bad sizes",
        ),
        (
            &fresh,
            0,
            9,
            vec![("no.such.key", Some("1"))],
            INVALID_CONFIG,
            "config before sizes",
        ),
        (
            &fresh,
            0,
            9,
            vec![],
            INVALID_PARTITIONS,
            "partitions before replication",
        ),
        (
            &fresh,
            1,
            9,
            vec![],
            INVALID_REPLICATION_FACTOR,
            "too few brokers",
        ),
    ] {
        assert_eq!(
            create_raw(&mut conn, name, partitions, rf, &configs),
            want,
            "{why}"
        );
    }
}

/// Every topic config Kafka 4.0 defines is accepted, stored and described, those with no
/// effect here included; Kafka's validation still refuses bad values.
#[test]
fn kafkas_topic_configs_without_effect_here_are_accepted_and_described() {
    const INVALID_CONFIG: i16 = 40;
    let broker = Broker::start_default();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let topic = unique_topic("noop-configs");
    let configs = [
        ("file.delete.delay.ms", "1000"),
        ("preallocate", "true"),
        ("segment.jitter.ms", "5"),
        ("segment.index.bytes", "4096"),
        ("max.compaction.lag.ms", "60000"),
        ("message.format.version", "3.0-IV1"),
        ("message.timestamp.difference.max.ms", "1000"),
        ("leader.replication.throttled.replicas", "*"),
    ];
    let with: Vec<(&str, Option<&str>)> = configs.iter().map(|(k, v)| (*k, Some(*v))).collect();
    assert_eq!(create_raw(&mut conn, &topic, 1, 1, &with), 0);
    for (k, v) in configs {
        assert_eq!(described(&broker, &topic, k).as_deref(), Some(v), "{k}");
    }
    assert_eq!(
        described(&broker, &topic, "remote.log.copy.disable").as_deref(),
        Some("false"),
        "a default, described"
    );
    let bad = unique_topic("noop-configs-bad");
    for (k, v) in [
        ("segment.index.bytes", "1"),
        ("file.delete.delay.ms", "-1"),
        ("preallocate", "maybe"),
    ] {
        assert_eq!(
            create_raw(&mut conn, &bad, 1, 1, &[(k, Some(v))]),
            INVALID_CONFIG,
            "{k}={v}"
        );
    }
    // The legacy AlterConfigs (librdkafka's alter_configs) takes the deprecated keys too.
    let mut change = rdkafka::admin::AlterConfig::new(ResourceSpecifier::Topic(&topic));
    change = change
        .set("message.timestamp.difference.max.ms", "2000")
        .set("message.downconversion.enable", "false");
    let res = block_on(broker.admin().alter_configs(
        [&change],
        &AdminOptions::new().request_timeout(Some(Duration::from_secs(10))),
    ))
    .expect("AlterConfigs");
    assert!(res[0].is_ok(), "{res:?}");
    assert_eq!(
        described(&broker, &topic, "message.downconversion.enable").as_deref(),
        Some("false")
    );
}
