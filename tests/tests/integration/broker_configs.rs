//! Broker configs as Kafka's tools see them: DescribeConfigs on a BROKER lists every setting
//! under its Kafka name with its source, read-only flag, synonyms and documentation;
//! IncrementalAlterConfigs and the legacy AlterConfigs change the dynamic ones, cluster-wide
//! or for one broker, stored in the metadata quorum (so every broker follows, and a restart
//! keeps them); BROKER_LOGGER resources change log levels while the broker runs.

use std::time::Duration;

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, DescribeConfigsRequest, IncrementalAlterConfigsRequest,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::{AdminOptions, ConfigSource, ResourceSpecifier, TopicReplication};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord};
use strata_tests::cluster::CLUSTER_TIMEOUT;
use strata_tests::{block_on, unique_topic, wait_for, Broker, BrokerOpts, Cluster, KafkaConn};

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const BROKER_LOGGER: i8 = 8;

const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;

const INVALID_REQUEST: i16 = 42;
const INVALID_CONFIG: i16 = 40;

const DYNAMIC_TOPIC: i8 = 1;
const DYNAMIC_BROKER: i8 = 2;
const DYNAMIC_DEFAULT_BROKER: i8 = 3;
const STATIC_BROKER: i8 = 4;
const DEFAULT: i8 = 5;
const DYNAMIC_BROKER_LOGGER: i8 = 6;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// DescribeConfigs v4 of one resource with synonyms and documentation, raw (the rdkafka crate
/// shows neither).
fn describe(addr: &str, resource_type: i8, name: &str) -> DescribeConfigsResult {
    let req = DescribeConfigsRequest::default()
        .with_include_synonyms(true)
        .with_include_documentation(true)
        .with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(s(name))
            .with_configuration_keys(None)]);
    let mut conn = KafkaConn::connect(addr).unwrap();
    let mut resp = conn.request(4, &req).unwrap();
    resp.results.remove(0)
}

fn entry(r: &DescribeConfigsResult, name: &str) -> DescribeConfigsResourceResult {
    (r.configs.iter())
        .find(|c| c.name.as_str() == name)
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "{name} not described: error {} {:?}",
                r.error_code, r.error_message
            )
        })
}

fn value(e: &DescribeConfigsResourceResult) -> Option<&str> {
    e.value.as_ref().map(|v| v.as_str())
}

/// (name, value, source) of every synonym.
fn synonyms(e: &DescribeConfigsResourceResult) -> Vec<(String, Option<String>, i8)> {
    (e.synonyms.iter())
        .map(|y| {
            let v = y.value.as_ref().map(|v| v.to_string());
            (y.name.to_string(), v, y.source)
        })
        .collect()
}

fn syn(name: &str, value: &str, source: i8) -> (String, Option<String>, i8) {
    (name.to_string(), Some(value.to_string()), source)
}

/// IncrementalAlterConfigs of one resource: `(name, op, value)`; the resource's (error code,
/// message).
fn alter(
    addr: &str,
    resource_type: i8,
    name: &str,
    ops: &[(&str, i8, Option<&str>)],
    validate_only: bool,
) -> (i16, String) {
    let req = IncrementalAlterConfigsRequest::default()
        .with_validate_only(validate_only)
        .with_resources(vec![AlterConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(s(name))
            .with_configs(
                (ops.iter())
                    .map(|(k, op, v)| {
                        AlterableConfig::default()
                            .with_name(s(k))
                            .with_config_operation(*op)
                            .with_value(v.map(s))
                    })
                    .collect(),
            )]);
    let mut conn = KafkaConn::connect(addr).unwrap();
    let resp = conn.request(1, &req).unwrap();
    let r = &resp.responses[0];
    (
        r.error_code,
        r.error_message.as_deref().unwrap_or("").to_string(),
    )
}

fn alter_ok(addr: &str, resource_type: i8, name: &str, ops: &[(&str, i8, Option<&str>)]) {
    let (code, why) = alter(addr, resource_type, name, ops, false);
    assert_eq!(code, 0, "{ops:?} on {resource_type}/'{name}': {why}");
}

#[test]
fn broker_settings_are_described_under_kafka_names_with_sources_and_synonyms() {
    let broker = Broker::start(
        BrokerOpts::new()
            .env("STRATA_LOG_RETENTION_BYTES", 1 << 30)
            .env("STRATA_INTER_BROKER_SASL_PASSWORD", "hunter2"),
    );
    let id = broker.node_id();

    // Through librdkafka, as a UI or kafka-configs would read them.
    let admin = broker.admin();
    let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(10)));
    let res = block_on(admin.describe_configs([&ResourceSpecifier::Broker(id as i32)], &opts))
        .expect("DescribeConfigs");
    let configs = res[0].as_ref().expect("the broker's configs");
    let get = |name: &str| {
        configs
            .get(name)
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    let retention = get("log.retention.bytes");
    assert_eq!(retention.value.as_deref(), Some("1073741824"));
    assert_eq!(
        retention.source,
        ConfigSource::StaticBroker,
        "set in the environment"
    );
    assert!(!retention.is_read_only, "a dynamic setting");
    let partitions = get("num.partitions");
    assert_eq!(partitions.value.as_deref(), Some("1"));
    assert_eq!(partitions.source, ConfigSource::Default);
    assert!(partitions.is_read_only, "read at start only");
    assert_eq!(
        get("data.dir").source,
        ConfigSource::StaticBroker,
        "--data-dir"
    );
    let data_dir = get("data.dir").value.clone();
    assert_eq!(get("log.dirs").value, data_dir, "the logs are in data.dir");
    assert_eq!(
        get("node.id").value.as_deref(),
        Some(id.to_string().as_str())
    );
    assert_eq!(
        get("socket.request.max.bytes").value.as_deref(),
        Some("104857600")
    );
    assert_eq!(get("log.roll.ms").value.as_deref(), Some("604800000"));
    assert_eq!(
        get("group.initial.rebalance.delay.ms").value.as_deref(),
        Some("0")
    );
    let password = get("inter.broker.sasl.password");
    assert!(
        password.is_sensitive && password.value.is_none(),
        "{password:?}"
    );

    // Raw, with what librdkafka's answer leaves out: synonyms (winner first), types, docs.
    let r = describe(&broker.kafka_addr, BROKER, &id.to_string());
    assert_eq!(r.error_code, 0);
    let e = entry(&r, "log.retention.bytes");
    assert_eq!(
        synonyms(&e),
        [
            syn("log.retention.bytes", "1073741824", STATIC_BROKER),
            syn("log.retention.bytes", "-1", DEFAULT)
        ]
    );
    assert_eq!(e.config_type, 5, "LONG");
    assert!(e.documentation.as_deref().is_some_and(|d| !d.is_empty()));
    assert_eq!(entry(&r, "log.cleanup.policy").config_type, 7, "LIST");
    assert_eq!(
        entry(&r, "inter.broker.sasl.password").config_type,
        9,
        "PASSWORD"
    );
    assert!(synonyms(&entry(&r, "inter.broker.sasl.password"))
        .iter()
        .all(|(_, v, _)| v.is_none()));

    // A topic without overrides inherits the broker's setting, named among its synonyms.
    let topic = unique_topic("inherits");
    broker
        .create_topic(&topic, 1, &[("retention.ms", "3600000")])
        .unwrap();
    let t = describe(&broker.kafka_addr, TOPIC, &topic);
    let e = entry(&t, "retention.bytes");
    assert_eq!(
        (value(&e), e.config_source),
        (Some("1073741824"), STATIC_BROKER)
    );
    assert_eq!(
        synonyms(&e),
        [
            syn("log.retention.bytes", "1073741824", STATIC_BROKER),
            syn("log.retention.bytes", "-1", DEFAULT)
        ]
    );
    let e = entry(&t, "retention.ms");
    assert_eq!(e.config_source, DYNAMIC_TOPIC);
    assert_eq!(
        synonyms(&e),
        [
            syn("retention.ms", "3600000", DYNAMIC_TOPIC),
            syn("log.retention.ms", "604800000", DEFAULT)
        ]
    );

    // Another broker's resource is that broker's to answer.
    assert_eq!(
        describe(&broker.kafka_addr, BROKER, "7").error_code,
        INVALID_REQUEST
    );
}

/// Sends a record of `size` bytes to one partition; the broker's error code, if any.
fn send(
    producer: &FutureProducer,
    topic: &str,
    partition: i32,
    size: usize,
) -> Option<RDKafkaErrorCode> {
    let payload = vec![b'x'; size];
    let record = FutureRecord::to(topic)
        .partition(partition)
        .key("k")
        .payload(&payload);
    match block_on(producer.send(record, Duration::from_secs(30))) {
        Ok(_) => None,
        Err((KafkaError::MessageProduction(code), _)) => Some(code),
        Err((e, _)) => panic!("produce to {topic}-{partition}: {e}"),
    }
}

const TOO_LARGE: Option<RDKafkaErrorCode> = Some(RDKafkaErrorCode::MessageSizeTooLarge);

/// `message.max.bytes` set cluster-wide through broker 1 reaches the partitions broker 2
/// leads; broker 2's own value wins over it on broker 2 only, and survives broker 2 being
/// killed; deleting both restores the file's value everywhere.
#[test]
fn dynamic_broker_configs_reach_every_broker_and_survive_a_restart() {
    let mut cluster = Cluster::start(2, 1, strata_tests::cluster::FAST);
    let topic = unique_topic("dynamic");
    cluster.create_replicated_topic(&topic, 2, TopicReplication::Variable(&[&[1], &[2]]), &[]);
    let own = unique_topic("own-override");
    cluster.create_replicated_topic(
        &own,
        1,
        TopicReplication::Variable(&[&[2]]),
        &[("max.message.bytes", "100000")],
    );
    let producer: FutureProducer = cluster.producer_config().create().unwrap();
    let (one, two) = (
        cluster.member(1).kafka_addr.clone(),
        cluster.member(2).kafka_addr.clone(),
    );
    assert_eq!(send(&producer, &topic, 1, 5000), None, "the file's 1 MB");

    alter_ok(
        &one,
        BROKER,
        "",
        &[("message.max.bytes", SET, Some("2000"))],
    );
    for partition in [0, 1] {
        wait_for(
            &format!("partition {partition} refusing 5000 bytes"),
            CLUSTER_TIMEOUT,
            || send(&producer, &topic, partition, 5000) == TOO_LARGE,
        );
    }
    assert_eq!(
        send(&producer, &own, 0, 5000),
        None,
        "a topic's override wins"
    );
    // The cluster-wide resource lists what was set for it; every broker shows it in force.
    let cluster_wide = describe(&one, BROKER, "");
    assert_eq!(cluster_wide.configs.len(), 1);
    let e = entry(&cluster_wide, "message.max.bytes");
    assert_eq!(
        (value(&e), e.config_source),
        (Some("2000"), DYNAMIC_DEFAULT_BROKER)
    );
    let e = entry(&describe(&two, TOPIC, &topic), "max.message.bytes");
    assert_eq!(
        (value(&e), e.config_source),
        (Some("2000"), DYNAMIC_DEFAULT_BROKER)
    );

    alter_ok(
        &two,
        BROKER,
        "2",
        &[("message.max.bytes", SET, Some("8000"))],
    );
    wait_for("broker 2's own value in force", CLUSTER_TIMEOUT, || {
        send(&producer, &topic, 1, 5000).is_none()
    });
    assert_eq!(
        send(&producer, &topic, 0, 5000),
        TOO_LARGE,
        "broker 1 keeps the cluster's"
    );
    let e = entry(&describe(&two, BROKER, "2"), "message.max.bytes");
    assert_eq!((value(&e), e.config_source), (Some("8000"), DYNAMIC_BROKER));
    assert_eq!(
        synonyms(&e),
        [
            syn("message.max.bytes", "8000", DYNAMIC_BROKER),
            syn("message.max.bytes", "2000", DYNAMIC_DEFAULT_BROKER),
            syn("message.max.bytes", "1048588", DEFAULT)
        ]
    );

    // Kept in the quorum: broker 2 killed and restarted has both layers back.
    cluster.node(2).kill9();
    cluster.node(2).restart();
    let two = cluster.member(2).kafka_addr.clone();
    let e = entry(&describe(&two, BROKER, "2"), "message.max.bytes");
    assert_eq!((value(&e), e.config_source), (Some("8000"), DYNAMIC_BROKER));
    wait_for(
        "broker 2 leading again with its value",
        CLUSTER_TIMEOUT,
        || send(&producer, &topic, 1, 5000).is_none(),
    );
    assert_eq!(send(&producer, &topic, 1, 9000), TOO_LARGE);

    alter_ok(&two, BROKER, "2", &[("message.max.bytes", DELETE, None)]);
    alter_ok(&one, BROKER, "", &[("message.max.bytes", DELETE, None)]);
    for partition in [0, 1] {
        wait_for(
            &format!("partition {partition} back to 1 MB"),
            CLUSTER_TIMEOUT,
            || send(&producer, &topic, partition, 50_000).is_none(),
        );
    }
    assert!(describe(&one, BROKER, "").configs.is_empty());
}

#[test]
fn broker_config_changes_are_checked_and_refusals_change_nothing() {
    let broker = Broker::start_default();
    let addr = &broker.kafka_addr;
    let id = broker.node_id().to_string();
    alter_ok(
        addr,
        BROKER,
        "",
        &[("log.retention.ms", SET, Some("3600000"))],
    );
    let before = describe(addr, BROKER, "");

    // Kafka answers INVALID_REQUEST for every broker config that fails validation (it wraps
    // the ConfigException), INVALID_CONFIG for a list operation on a config of another type.
    for (ops, code, why) in [
        (
            vec![("num.partitions", SET, Some("3"))],
            INVALID_REQUEST,
            "cannot change while the broker runs",
        ),
        (
            vec![("broker.id", SET, Some("3"))],
            INVALID_REQUEST,
            "cannot be updated dynamically",
        ),
        (
            vec![("ssl.keystore.location", SET, Some("/k"))],
            INVALID_REQUEST,
            "cannot be updated dynamically",
        ),
        (
            vec![("num.io.threads", SET, Some("many"))],
            INVALID_REQUEST,
            "not a number",
        ),
        (
            vec![("log.retention.ms", SET, Some("-5"))],
            INVALID_REQUEST,
            "log.retention.ms",
        ),
        (
            vec![("log.retention.ms", SET, Some("soon"))],
            INVALID_REQUEST,
            "not a number",
        ),
        (
            vec![("compression.type", SET, Some("brotli"))],
            INVALID_REQUEST,
            "brotli",
        ),
        (
            vec![("compression.zstd.level", SET, Some("99"))],
            INVALID_REQUEST,
            "compression.zstd.level",
        ),
        (
            vec![("log.segment.bytes", SET, Some("10"))],
            INVALID_REQUEST,
            "log.segment.bytes",
        ),
        (
            vec![("log.retention.ms", APPEND, Some("1"))],
            INVALID_CONFIG,
            "not one",
        ),
        (
            vec![("my.plugin.setting", APPEND, Some("1"))],
            INVALID_CONFIG,
            "unknown config",
        ),
        (
            vec![("log.retention.ms", 9, Some("1"))],
            INVALID_REQUEST,
            "unknown config operation",
        ),
        // All or none: a good change beside a bad one is not applied either.
        (
            vec![
                ("log.retention.bytes", SET, Some("1000")),
                ("log.cleanup.policy", SET, Some("shred")),
            ],
            INVALID_REQUEST,
            "shred",
        ),
        (
            vec![
                ("num.io.threads", SET, Some("8")),
                ("broker.id", SET, Some("3")),
            ],
            INVALID_REQUEST,
            "broker.id",
        ),
    ] {
        let (got, message) = alter(addr, BROKER, &id, &ops, false);
        assert_eq!(got, code, "{ops:?}: {message}");
        assert!(
            message.contains(why),
            "{ops:?}: '{message}' should say '{why}'"
        );
    }
    let (got, message) = alter(
        addr,
        BROKER,
        "7",
        &[("log.retention.ms", SET, Some("1"))],
        false,
    );
    assert_eq!(got, INVALID_REQUEST, "{message}");
    let (got, _) = alter(
        addr,
        BROKER,
        "",
        &[("log.retention.ms", SET, Some("1"))],
        true,
    );
    assert_eq!(got, 0, "validate_only accepts a good change");
    assert_eq!(describe(addr, BROKER, ""), before, "and nothing changed");
    let e = entry(&describe(addr, BROKER, &id), "log.retention.bytes");
    assert_eq!(e.config_source, DEFAULT);

    // A LIST setting takes APPEND; the topics without their own policy follow.
    alter_ok(
        addr,
        BROKER,
        "",
        &[("log.cleanup.policy", APPEND, Some("compact"))],
    );
    let e = entry(&describe(addr, BROKER, &id), "log.cleanup.policy");
    assert_eq!(
        (value(&e), e.config_source),
        (Some("delete,compact"), DYNAMIC_DEFAULT_BROKER)
    );

    // The legacy AlterConfigs makes the named configs the resource's whole set.
    use kafka_protocol::messages::alter_configs_request as legacy;
    let req =
        AlterConfigsRequest::default().with_resources(vec![legacy::AlterConfigsResource::default(
        )
        .with_resource_type(BROKER)
        .with_resource_name(s(""))
        .with_configs(vec![legacy::AlterableConfig::default()
            .with_name(s("log.retention.bytes"))
            .with_value(Some(s("5000000")))])]);
    let resp = KafkaConn::connect(addr).unwrap().request(1, &req).unwrap();
    assert_eq!(
        resp.responses[0].error_code, 0,
        "{:?}",
        resp.responses[0].error_message
    );
    let now = describe(addr, BROKER, "");
    let names: Vec<&str> = now.configs.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["log.retention.bytes"]);
}

/// Kafka's dynamic broker configs that Strata has no use for, and names Kafka does not know
/// either (a plugin's), are stored, described with their source and type, and change nothing;
/// `min.insync.replicas` and Kafka's hours synonym of `log.retention.ms` do take effect.
#[test]
fn kafka_broker_configs_without_a_setting_are_stored_and_described() {
    let broker = Broker::start_default();
    let addr = &broker.kafka_addr;
    let id = broker.node_id().to_string();
    alter_ok(
        addr,
        BROKER,
        "",
        &[
            ("num.io.threads", SET, Some("16")),
            ("my.plugin.setting", SET, Some("on")),
            ("min.insync.replicas", SET, Some("2")),
            ("unclean.leader.election.enable", SET, Some("true")),
        ],
    );
    alter_ok(
        addr,
        BROKER,
        &id,
        &[
            ("num.io.threads", SET, Some("32")),
            ("log.retention.hours", SET, Some("2")),
        ],
    );
    let cluster = describe(addr, BROKER, "");
    let e = entry(&cluster, "num.io.threads");
    assert_eq!(
        (value(&e), e.config_source, e.config_type, e.read_only),
        (Some("16"), DYNAMIC_DEFAULT_BROKER, 3, false)
    );
    let own = describe(addr, BROKER, &id);
    let e = entry(&own, "num.io.threads");
    assert_eq!((value(&e), e.config_source), (Some("32"), DYNAMIC_BROKER));
    assert_eq!(
        synonyms(&e),
        [
            syn("num.io.threads", "32", DYNAMIC_BROKER),
            syn("num.io.threads", "16", DYNAMIC_DEFAULT_BROKER),
        ]
    );
    assert!((e.documentation.as_deref().unwrap_or("")).contains("no effect"));
    let e = entry(&own, "my.plugin.setting");
    assert_eq!(
        (value(&e), e.config_source),
        (Some("on"), DYNAMIC_DEFAULT_BROKER)
    );
    let e = entry(&own, "log.retention.ms");
    assert_eq!(value(&e), Some("7200000"), "two hours");
    assert_eq!(
        synonyms(&e)[0],
        syn("log.retention.hours", "2", DYNAMIC_BROKER)
    );
    let e = entry(&own, "min.insync.replicas");
    assert_eq!(
        (value(&e), e.config_source),
        (Some("2"), DYNAMIC_DEFAULT_BROKER)
    );

    // A topic without its own min.insync.replicas follows the broker's: on one broker, an
    // acks=all produce now finds too few in-sync replicas.
    let topic = unique_topic("min-isr-default");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let t = describe(addr, TOPIC, &topic);
    assert_eq!(value(&entry(&t, "min.insync.replicas")), Some("2"));
    let producer: FutureProducer = broker
        .client_config()
        .set("acks", "all")
        .set("retries", "0")
        .set("enable.idempotence", "false")
        .create()
        .unwrap();
    let sent = block_on(producer.send(
        FutureRecord::<(), str>::to(&topic).payload("x"),
        Duration::from_secs(10),
    ));
    assert!(
        matches!(
            sent,
            Err((
                KafkaError::MessageProduction(RDKafkaErrorCode::NotEnoughReplicas),
                _
            ))
        ),
        "{sent:?}"
    );

    // DELETE removes an inert name like any other; a static one cannot be deleted either.
    alter_ok(addr, BROKER, "", &[("my.plugin.setting", DELETE, None)]);
    let names: Vec<String> = (describe(addr, BROKER, "").configs.iter())
        .map(|c| c.name.to_string())
        .collect();
    assert_eq!(
        names,
        [
            "min.insync.replicas",
            "num.io.threads",
            "unclean.leader.election.enable"
        ]
    );
    let (code, why) = alter(addr, BROKER, "", &[("broker.id", DELETE, None)], false);
    assert_eq!(code, INVALID_REQUEST, "{why}");
}

/// A logger's level set through BROKER_LOGGER takes effect at once (its debug lines appear),
/// bad levels are refused, and a restart starts from `STRATA_LOG` again, as Kafka's log4j
/// levels do.
#[test]
fn log_levels_change_while_the_broker_runs_and_not_beyond() {
    let mut broker = Broker::start_default();
    let id = broker.node_id().to_string();
    let addr = broker.kafka_addr.clone();
    let loggers = describe(&addr, BROKER_LOGGER, &id);
    let root = entry(&loggers, "root");
    assert_eq!(
        (value(&root), root.config_source),
        (Some("INFO"), DYNAMIC_BROKER_LOGGER)
    );
    assert_eq!(value(&entry(&loggers, "openraft")), Some("WARN"));
    assert_eq!(value(&entry(&loggers, "strata_broker")), Some("INFO"));

    // A topic config change is logged at debug by the partition registry.
    let topic = unique_topic("loggers");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let change = |v: &str| alter_ok(&addr, TOPIC, &topic, &[("retention.ms", SET, Some(v))]);
    let debug_lines = |b: &Broker| {
        (b.output().lines())
            .filter(|l| l.contains("DEBUG") && l.contains("applied a metadata change"))
            .count()
    };
    change("1000000");
    assert_eq!(debug_lines(&broker), 0, "debug is off at INFO");

    alter_ok(
        &addr,
        BROKER_LOGGER,
        &id,
        &[("strata_broker::partition", SET, Some("DEBUG"))],
    );
    let e = entry(
        &describe(&addr, BROKER_LOGGER, &id),
        "strata_broker::partition",
    );
    assert_eq!(value(&e), Some("DEBUG"));
    change("2000000");
    wait_for("the registry's debug line", Duration::from_secs(10), || {
        debug_lines(&broker) > 0
    });

    for (ops, code) in [
        (vec![("strata_broker", SET, Some("LOUD"))], INVALID_CONFIG),
        (vec![("root", DELETE, None)], INVALID_CONFIG),
        (vec![("not a logger", SET, Some("INFO"))], INVALID_CONFIG),
        (
            vec![("strata_broker", APPEND, Some("INFO"))],
            INVALID_REQUEST,
        ),
    ] {
        let (got, message) = alter(&addr, BROKER_LOGGER, &id, &ops, false);
        assert_eq!(got, code, "{ops:?}: {message}");
    }
    let (got, _) = alter(
        &addr,
        BROKER_LOGGER,
        "7",
        &[("root", SET, Some("INFO"))],
        false,
    );
    assert_eq!(got, INVALID_REQUEST, "another broker's loggers");

    alter_ok(
        &addr,
        BROKER_LOGGER,
        &id,
        &[("strata_broker::partition", DELETE, None)],
    );
    let loggers = describe(&addr, BROKER_LOGGER, &id);
    assert!(
        !loggers
            .configs
            .iter()
            .any(|c| c.name.as_str() == "strata_broker::partition"),
        "back to its parent's level"
    );

    alter_ok(
        &addr,
        BROKER_LOGGER,
        &id,
        &[("openraft", SET, Some("ERROR"))],
    );
    broker.restart();
    let loggers = describe(&broker.kafka_addr, BROKER_LOGGER, &id);
    assert_eq!(
        value(&entry(&loggers, "openraft")),
        Some("WARN"),
        "STRATA_LOG's again"
    );
}
