//! Topics through librdkafka: metadata (one topic and all topics), auto-creation with
//! num_partitions, CreateTopics configs read back with DescribeConfigs, and the topic configs
//! that change behaviour (message.timestamp.type).

use std::time::Duration;

use rdkafka::admin::{AdminOptions, ResourceSpecifier};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Message, Timestamp};
use rdkafka::Offset;
use strata_tests::{
    block_on, now_ms, unique_topic, wait_for_some, Broker, BrokerOpts, TrackingProducer,
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
