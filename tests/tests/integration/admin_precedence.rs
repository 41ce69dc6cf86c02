//! Kafka's error precedence in the admin APIs, table by table: when a request is wrong in two
//! ways, the answer names the one Kafka names. Alice (SASL PLAIN) holds prefixed ACLs —
//! DESCRIBE on `prec-vis-`, DELETE on `prec-del-`, ALTER and ALTER_CONFIGS on `prec-alt-` —
//! and nothing on `prec-hid-`; the PLAINTEXT listener is a super user that sets things up.

use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsAssignment, CreatePartitionsTopic,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    AlterConfigsRequest, BrokerId, CreatePartitionsRequest, DeleteTopicsRequest,
    IncrementalAlterConfigsRequest, MetadataRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use std::time::Duration;

use strata_tests::{wait_for, Broker, BrokerOpts, KafkaConn};

use super::security::{sasl_plain, strata, with_alice, PASSWORD};

const NONE: i16 = 0;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
const INVALID_PARTITIONS: i16 = 37;
const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
const INVALID_CONFIG: i16 = 40;
const INVALID_REQUEST: i16 = 42;
const UNKNOWN_TOPIC_ID: i16 = 100;

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const BROKER_LOGGER: i8 = 8;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn name(v: &str) -> TopicName {
    TopicName(s(v))
}

struct Fixture {
    broker: Broker,
    /// Alice's authenticated connection.
    alice: KafkaConn,
    /// A super user's.
    admin: KafkaConn,
}

/// A broker with alice's ACLs and the topics `prec-{del,vis,hid,alt}-a` (one partition each).
fn fixture() -> Fixture {
    let broker = with_alice(
        BrokerOpts::new()
            .env(
                "STRATA_LISTENERS",
                "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            )
            .env("STRATA_SASL_ENABLED_MECHANISMS", "PLAIN,SCRAM-SHA-256")
            .env("STRATA_AUTHORIZER_ENABLE", "true")
            .env("STRATA_SUPER_USERS", "User:ANONYMOUS"),
    );
    let plaintext = broker.listener("PLAINTEXT").to_string();
    for (operation, prefix) in [
        ("Describe", "prec-vis-"),
        ("Delete", "prec-del-"),
        ("Alter", "prec-alt-"),
        ("AlterConfigs", "prec-alt-"),
    ] {
        strata(&[
            "acl",
            "add",
            "--allow-principal",
            "User:alice",
            "--operation",
            operation,
            "--topic",
            prefix,
            "--resource-pattern-type",
            "prefixed",
            "-b",
            &plaintext,
        ]);
    }
    for t in ["prec-del-a", "prec-vis-a", "prec-hid-a", "prec-alt-a"] {
        broker.create_topic(t, 1, &[]).unwrap();
    }
    let mut alice = KafkaConn::connect(broker.listener("SASL_PLAINTEXT")).unwrap();
    assert_eq!(sasl_plain(&mut alice, "alice", PASSWORD).error_code, 0);
    let admin = KafkaConn::connect(&plaintext).unwrap();
    Fixture {
        broker,
        alice,
        admin,
    }
}

fn topic_id(conn: &mut KafkaConn, topic: &str) -> uuid::Uuid {
    let req = MetadataRequest::default().with_topics(Some(vec![
        MetadataRequestTopic::default().with_name(Some(name(topic)))
    ]));
    let resp = conn.request(12, &req).unwrap();
    assert_eq!(resp.topics[0].error_code, NONE, "{topic}");
    resp.topics[0].topic_id
}

fn exists(conn: &mut KafkaConn, topic: &str) -> bool {
    let req = MetadataRequest::default()
        .with_allow_auto_topic_creation(false)
        .with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(name(topic)))
        ]));
    conn.request(12, &req).unwrap().topics[0].error_code == NONE
}

/// DeleteTopics v6: by name, by id, both or neither; each answer's (name, code) in order.
#[test]
fn delete_topics_reports_the_error_kafka_reports_first() {
    let Fixture {
        broker: _broker,
        mut alice,
        mut admin,
    } = fixture();
    let by_name = |n: &str| DeleteTopicState::default().with_name(Some(name(n)));
    let by_id = |id: uuid::Uuid| DeleteTopicState::default().with_topic_id(id);
    let del_a = topic_id(&mut admin, "prec-del-a");
    let vis_a = topic_id(&mut admin, "prec-vis-a");
    let hid_a = topic_id(&mut admin, "prec-hid-a");
    let delete = |conn: &mut KafkaConn, topics: Vec<DeleteTopicState>| {
        let req = DeleteTopicsRequest::default()
            .with_topics(topics)
            .with_timeout_ms(10_000);
        let resp = conn.request(6, &req).unwrap();
        (resp.responses.iter())
            .map(|r| (r.name.as_ref().map(|n| n.0.to_string()), r.error_code))
            .collect::<Vec<_>>()
    };
    let named = |n: &str, code| (Some(n.to_string()), code);
    for (topics, want, why) in [
        (
            vec![by_name("prec-hid-ghost")],
            vec![named("prec-hid-ghost", TOPIC_AUTHORIZATION_FAILED)],
            "a name the caller may not describe, though it does not exist",
        ),
        (
            vec![by_name("prec-vis-ghost")],
            vec![named("prec-vis-ghost", UNKNOWN_TOPIC_OR_PARTITION)],
            "describable and unknown",
        ),
        (
            vec![by_name("prec-vis-a")],
            vec![named("prec-vis-a", TOPIC_AUTHORIZATION_FAILED)],
            "describable, exists, no DELETE",
        ),
        (
            vec![by_id(hid_a)],
            vec![(None, TOPIC_AUTHORIZATION_FAILED)],
            "by id, not describable: the name is not told",
        ),
        (
            vec![by_id(vis_a)],
            vec![named("prec-vis-a", TOPIC_AUTHORIZATION_FAILED)],
            "by id, describable: the name is told",
        ),
        (
            vec![by_id(uuid::Uuid::new_v4())],
            vec![(None, UNKNOWN_TOPIC_ID)],
            "an unknown id",
        ),
        (
            vec![by_name("prec-del-a"), by_name("prec-del-a")],
            vec![
                named("prec-del-a", INVALID_REQUEST),
                named("prec-del-a", INVALID_REQUEST),
            ],
            "named twice",
        ),
        (
            vec![by_name("prec-del-a").with_topic_id(del_a)],
            vec![named("prec-del-a", INVALID_REQUEST)],
            "by both name and id",
        ),
        (
            vec![DeleteTopicState::default()],
            vec![(None, INVALID_REQUEST)],
            "by neither",
        ),
        (
            vec![by_name("prec-del-a"), by_id(del_a)],
            vec![
                named("prec-del-a", INVALID_REQUEST),
                named("prec-del-a", INVALID_REQUEST),
            ],
            "a name and the id it resolves to",
        ),
    ] {
        assert_eq!(delete(&mut alice, topics), want, "{why}");
    }
    for t in ["prec-del-a", "prec-vis-a", "prec-hid-a"] {
        assert!(exists(&mut admin, t), "{t} was not deleted");
    }
    assert_eq!(
        delete(&mut alice, vec![by_name("prec-del-a")]),
        [named("prec-del-a", NONE)]
    );
    wait_for("the deletion to show", Duration::from_secs(10), || {
        !exists(&mut admin, "prec-del-a")
    });
}

/// CreatePartitions: a topic named twice, then authorization, then existence, then the
/// count, then the assignment (checked in validate_only too).
#[test]
fn create_partitions_reports_the_error_kafka_reports_first() {
    let Fixture {
        broker,
        mut alice,
        mut admin,
    } = fixture();
    let topic = |n: &str, count: i32, assignments: Option<Vec<Vec<i32>>>| {
        CreatePartitionsTopic::default()
            .with_name(name(n))
            .with_count(count)
            .with_assignments(assignments.map(|a| {
                (a.into_iter())
                    .map(|ids| {
                        CreatePartitionsAssignment::default()
                            .with_broker_ids(ids.into_iter().map(BrokerId).collect())
                    })
                    .collect()
            }))
    };
    let create = |conn: &mut KafkaConn, topics: Vec<CreatePartitionsTopic>, validate_only| {
        let req = CreatePartitionsRequest::default()
            .with_topics(topics)
            .with_timeout_ms(10_000)
            .with_validate_only(validate_only);
        let resp = conn.request(3, &req).unwrap();
        (resp.results.iter())
            .map(|r| (r.name.0.to_string(), r.error_code))
            .collect::<Vec<_>>()
    };
    let me = broker.node_id() as i32;
    let named = |n: &str, code| (n.to_string(), code);
    for (topics, validate_only, want, why) in [
        (
            vec![topic("prec-alt-a", 2, None), topic("prec-alt-a", 3, None)],
            false,
            vec![
                named("prec-alt-a", INVALID_REQUEST),
                named("prec-alt-a", INVALID_REQUEST),
            ],
            "named twice",
        ),
        (
            vec![topic("prec-hid-ghost", 0, None)],
            false,
            vec![named("prec-hid-ghost", TOPIC_AUTHORIZATION_FAILED)],
            "not authorized, unknown, bad count",
        ),
        (
            vec![topic("prec-alt-ghost", 0, None)],
            false,
            vec![named("prec-alt-ghost", UNKNOWN_TOPIC_OR_PARTITION)],
            "unknown, bad count",
        ),
        (
            vec![topic("prec-alt-a", 1, Some(vec![vec![77]]))],
            false,
            vec![named("prec-alt-a", INVALID_PARTITIONS)],
            "no new partition, bad assignment",
        ),
        (
            vec![topic("prec-alt-a", 3, Some(vec![vec![me]]))],
            false,
            vec![named("prec-alt-a", INVALID_REPLICA_ASSIGNMENT)],
            "one assignment for two partitions",
        ),
        (
            vec![topic("prec-alt-a", 2, Some(vec![vec![77]]))],
            true,
            vec![named("prec-alt-a", INVALID_REPLICA_ASSIGNMENT)],
            "an unknown broker, validate only",
        ),
        (
            vec![topic("prec-alt-a", 2, Some(vec![vec![me, me]]))],
            true,
            vec![named("prec-alt-a", INVALID_REPLICA_ASSIGNMENT)],
            "a broker twice, validate only",
        ),
        (
            vec![topic("prec-alt-a", 2, Some(vec![vec![me]]))],
            true,
            vec![named("prec-alt-a", NONE)],
            "a good assignment, validate only",
        ),
    ] {
        assert_eq!(create(&mut alice, topics, validate_only), want, "{why}");
    }
    let partitions = |conn: &mut KafkaConn| {
        let req = MetadataRequest::default().with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(name("prec-alt-a"))),
        ]));
        conn.request(12, &req).unwrap().topics[0].partitions.len()
    };
    assert_eq!(partitions(&mut admin), 1, "nothing was created");
    assert_eq!(
        create(&mut alice, vec![topic("prec-alt-a", 2, None)], false),
        [named("prec-alt-a", NONE)]
    );
    assert_eq!(partitions(&mut admin), 2);
}

/// IncrementalAlterConfigs and the legacy AlterConfigs: the request's own shape (a resource
/// twice, a config twice, a missing value, an unknown resource type, another broker's id)
/// before authorization, then existence, then the configs.
#[test]
fn alter_configs_report_the_error_kafka_reports_first() {
    let Fixture {
        broker,
        mut alice,
        admin: _admin,
    } = fixture();
    let own = broker.node_id().to_string();
    type Config<'a> = (&'a str, i8, Option<&'a str>);
    let resource = |resource_type: i8, n: &str, configs: &[Config]| {
        AlterConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(s(n))
            .with_configs(
                (configs.iter())
                    .map(|(k, op, v)| {
                        AlterableConfig::default()
                            .with_name(s(k))
                            .with_config_operation(*op)
                            .with_value(v.map(s))
                    })
                    .collect(),
            )
    };
    let alter = |conn: &mut KafkaConn, resources: Vec<AlterConfigsResource>| {
        let req = IncrementalAlterConfigsRequest::default().with_resources(resources);
        let resp = conn.request(1, &req).unwrap();
        (resp.responses.iter())
            .map(|r| r.error_code)
            .collect::<Vec<_>>()
    };
    const SET: i8 = 0;
    let retention = [("retention.ms", SET, Some("1000"))];
    for (resources, want, why) in [
        (
            vec![
                resource(TOPIC, "prec-hid-a", &retention),
                resource(TOPIC, "prec-hid-a", &retention),
            ],
            vec![INVALID_REQUEST, INVALID_REQUEST],
            "a resource twice, not authorized",
        ),
        (
            vec![resource(
                TOPIC,
                "prec-hid-a",
                &[
                    ("retention.ms", SET, Some("1")),
                    ("retention.ms", SET, Some("2")),
                ],
            )],
            vec![INVALID_REQUEST],
            "a config twice, not authorized",
        ),
        (
            vec![resource(
                TOPIC,
                "prec-hid-a",
                &[("retention.ms", SET, None)],
            )],
            vec![INVALID_REQUEST],
            "SET without a value, not authorized",
        ),
        (
            vec![resource(99, "x", &retention)],
            vec![INVALID_REQUEST],
            "an unknown resource type",
        ),
        (
            vec![resource(
                BROKER,
                "7",
                &[("log.retention.ms", SET, Some("1"))],
            )],
            vec![INVALID_REQUEST],
            "another broker, not authorized",
        ),
        (
            vec![resource(
                BROKER,
                &own,
                &[("log.retention.ms", SET, Some("1"))],
            )],
            vec![CLUSTER_AUTHORIZATION_FAILED],
            "this broker, not authorized",
        ),
        (
            vec![resource(TOPIC, "prec-hid-a", &retention)],
            vec![TOPIC_AUTHORIZATION_FAILED],
            "not authorized",
        ),
        (
            vec![resource(
                TOPIC,
                "prec-alt-ghost",
                &[("no.such.key", SET, Some("1"))],
            )],
            vec![UNKNOWN_TOPIC_OR_PARTITION],
            "unknown topic, unknown key",
        ),
        (
            vec![resource(
                TOPIC,
                "prec-alt-a",
                &[("no.such.key", SET, Some("1"))],
            )],
            vec![INVALID_CONFIG],
            "unknown key",
        ),
        (
            vec![resource(TOPIC, "prec-alt-a", &[("retention.ms", 1, None)])],
            vec![NONE],
            "DELETE needs no value",
        ),
    ] {
        assert_eq!(alter(&mut alice, resources), want, "{why}");
    }

    use kafka_protocol::messages::alter_configs_request as legacy;
    let legacy_resource = |resource_type: i8, n: &str, configs: &[(&str, Option<&str>)]| {
        legacy::AlterConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(s(n))
            .with_configs(
                (configs.iter())
                    .map(|(k, v)| {
                        legacy::AlterableConfig::default()
                            .with_name(s(k))
                            .with_value(v.map(s))
                    })
                    .collect(),
            )
    };
    let legacy_alter = |conn: &mut KafkaConn, resources: Vec<legacy::AlterConfigsResource>| {
        let req = AlterConfigsRequest::default().with_resources(resources);
        let resp = conn.request(2, &req).unwrap();
        (resp.responses.iter())
            .map(|r| r.error_code)
            .collect::<Vec<_>>()
    };
    for (resources, want, why) in [
        (
            vec![
                legacy_resource(TOPIC, "prec-alt-a", &[("retention.ms", Some("1"))]),
                legacy_resource(TOPIC, "prec-alt-a", &[("retention.ms", Some("2"))]),
            ],
            vec![INVALID_REQUEST, INVALID_REQUEST],
            "legacy: a resource twice",
        ),
        (
            vec![legacy_resource(
                TOPIC,
                "prec-hid-a",
                &[("retention.ms", None)],
            )],
            vec![INVALID_REQUEST],
            "legacy: no value, not authorized",
        ),
        (
            vec![legacy_resource(
                BROKER_LOGGER,
                &own,
                &[("root", Some("DEBUG"))],
            )],
            vec![INVALID_REQUEST],
            "legacy: no BROKER_LOGGER",
        ),
        (
            vec![legacy_resource(
                TOPIC,
                "prec-hid-a",
                &[("retention.ms", Some("1"))],
            )],
            vec![TOPIC_AUTHORIZATION_FAILED],
            "legacy: not authorized",
        ),
        (
            vec![legacy_resource(
                TOPIC,
                "prec-alt-a",
                &[("retention.ms", Some("5000"))],
            )],
            vec![NONE],
            "legacy: allowed",
        ),
    ] {
        assert_eq!(legacy_alter(&mut alice, resources), want, "{why}");
    }
}

/// DeleteRecords: authorization, then existence (topic and partition), then the offset; and
/// CreateAcls: ALTER on the cluster before the bindings, then the binding's own faults.
#[test]
fn delete_records_and_create_acls_report_the_error_kafka_reports_first() {
    use kafka_protocol::messages::create_acls_request::AclCreation;
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    use kafka_protocol::messages::{CreateAclsRequest, DeleteRecordsRequest};
    const OFFSET_OUT_OF_RANGE: i16 = 1;
    let Fixture {
        broker: _broker,
        mut alice,
        mut admin,
    } = fixture();
    let delete = |conn: &mut KafkaConn, topic: &str, partition: i32, offset: i64| {
        let req = DeleteRecordsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(vec![DeleteRecordsTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![DeleteRecordsPartition::default()
                    .with_partition_index(partition)
                    .with_offset(offset)])]);
        conn.request(2, &req).unwrap().topics[0].partitions[0].error_code
    };
    for (topic, partition, offset, want, why) in [
        (
            "prec-hid-ghost",
            0,
            5,
            TOPIC_AUTHORIZATION_FAILED,
            "not authorized, unknown",
        ),
        (
            "prec-hid-a",
            0,
            5,
            TOPIC_AUTHORIZATION_FAILED,
            "not authorized",
        ),
        (
            "prec-del-ghost",
            0,
            5,
            UNKNOWN_TOPIC_OR_PARTITION,
            "unknown topic, bad offset",
        ),
        (
            "prec-del-a",
            9,
            5,
            UNKNOWN_TOPIC_OR_PARTITION,
            "unknown partition, bad offset",
        ),
        (
            "prec-del-a",
            0,
            5,
            OFFSET_OUT_OF_RANGE,
            "beyond the high watermark",
        ),
        ("prec-del-a", 0, 0, NONE, "at the high watermark"),
    ] {
        assert_eq!(delete(&mut alice, topic, partition, offset), want, "{why}");
    }

    // ACL enums as Kafka numbers them.
    const CLUSTER: i8 = 4;
    const TOPIC_RESOURCE: i8 = 2;
    const LITERAL: i8 = 3;
    const READ: i8 = 3;
    const ALLOW: i8 = 3;
    let creation = |resource_type: i8, resource: &str| {
        AclCreation::default()
            .with_resource_type(resource_type)
            .with_resource_name(s(resource))
            .with_resource_pattern_type(LITERAL)
            .with_principal(s("User:bob"))
            .with_host(s("*"))
            .with_operation(READ)
            .with_permission_type(ALLOW)
    };
    let create = |conn: &mut KafkaConn, creations: Vec<AclCreation>| {
        let req = CreateAclsRequest::default().with_creations(creations);
        (conn.request(3, &req).unwrap().results.iter())
            .map(|r| r.error_code)
            .collect::<Vec<_>>()
    };
    let bad_and_good = || {
        vec![
            creation(CLUSTER, "not-the-cluster"),
            creation(TOPIC_RESOURCE, ""),
            creation(TOPIC_RESOURCE, "t"),
        ]
    };
    assert_eq!(
        create(&mut alice, bad_and_good()),
        [CLUSTER_AUTHORIZATION_FAILED; 3],
        "no ALTER on the cluster: every creation, bad or not"
    );
    assert_eq!(
        create(&mut admin, bad_and_good()),
        [INVALID_REQUEST, INVALID_REQUEST, NONE],
        "a cluster resource not named kafka-cluster; an empty name"
    );
}
