//! Share groups (KIP-932, "queues") with librdkafka's share consumer, through confluent-kafka's
//! `ShareConsumer` (`tests/share_consumer.py`, run with the venv `scripts/test.sh` installs):
//! several members on one partition, each record to one member at a time; explicit
//! acknowledgement with REJECT and RELEASE; the delivery limit; a member gone with its locks
//! held. Bad input with raw frames: acknowledgements of records never handed out, stale share
//! session epochs, a share heartbeat to a classic group.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::messages::share_acknowledge_request::{
    AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch as AckBatchA,
};
use kafka_protocol::messages::share_fetch_request::{
    AcknowledgementBatch, FetchPartition, FetchTopic,
};
use kafka_protocol::messages::{
    FindCoordinatorRequest, GroupId, ShareAcknowledgeRequest, ShareFetchRequest,
    ShareGroupHeartbeatRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use rdkafka::admin::TopicReplication;
use rdkafka::Offset;
use strata_tests::cluster::{CLUSTER_TIMEOUT, FAST};
use strata_tests::groups::GroupClient;
use strata_tests::{
    encode_batch, now_ms, repo_root, unique_topic, venv_python, wait_for, Broker, BrokerOpts,
    Cluster, KafkaConn, RawRecord,
};

const INVALID_REQUEST: i16 = 42;
const UNKNOWN_MEMBER_ID: i16 = 25;
const GROUP_ID_NOT_FOUND: i16 = 69;
const INVALID_RECORD_STATE: i16 = 121;
const SHARE_SESSION_NOT_FOUND: i16 = 122;
const INVALID_SHARE_SESSION_EPOCH: i16 = 123;

/// One record a share consumer was given.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Given {
    p: i32,
    o: i64,
    d: i32,
    v: String,
}

/// A share consumer process (see `tests/share_consumer.py`).
fn share_consumer(bootstrap: &str, group: &str, topic: &str, args: &[&str]) -> Child {
    Command::new(venv_python())
        .arg(repo_root().join("tests/share_consumer.py"))
        .args(["--bootstrap", bootstrap, "--group", group])
        .args(["--topic", topic])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the share consumer (python with confluent-kafka)")
}

fn parse_given(line: &str) -> Given {
    assert!(!line.contains("\"error\""), "share consumer error: {line}");
    let j: serde_json::Value = serde_json::from_str(line).expect("a JSON record");
    Given {
        p: j["p"].as_i64().expect("p") as i32,
        o: j["o"].as_i64().expect("o"),
        d: j["d"].as_i64().expect("d") as i32,
        v: j["v"].as_str().expect("v").to_string(),
    }
}

/// What a share consumer process was given, once it has ended.
fn given(child: Child) -> Vec<Given> {
    let out = child.wait_with_output().expect("share consumer output");
    (BufReader::new(&out.stdout[..]).lines())
        .map(|line| parse_given(&line.expect("utf-8 line")))
        .collect()
}

/// A share consumer whose records are read as it runs.
struct Running {
    child: Child,
    seen: Arc<Mutex<Vec<Given>>>,
    reader: std::thread::JoinHandle<()>,
}

impl Running {
    fn start(mut child: Child) -> Running {
        let out = child.stdout.take().expect("piped stdout");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let into = seen.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                into.lock().unwrap().push(parse_given(&line));
            }
        });
        Running {
            child,
            seen,
            reader,
        }
    }

    fn seen(&self) -> Vec<Given> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits for the process to end; everything it was given.
    fn end(mut self) -> Vec<Given> {
        self.child.wait().expect("share consumer exit");
        self.reader.join().expect("reader thread");
        let seen = self.seen.lock().unwrap();
        seen.clone()
    }
}

/// Produces `values` to `topic`-`partition`, one batch each.
fn produce(broker: &Broker, topic: &str, partition: i32, values: &[String]) {
    let mut conn = KafkaConn::connect(&broker.kafka_addr).expect("connect");
    for v in values {
        let batch = encode_batch(
            &[RawRecord::new(v.as_bytes(), v.as_bytes(), now_ms())],
            Compression::None,
            None,
        );
        conn.produce_ok(topic, partition, batch).expect("produce");
    }
}

/// Waits until the broker has started `n` share partitions (each member's first fetch starts
/// them at the log end: records produced after that are the group's).
fn wait_for_share_partitions(broker: &Broker, n: usize) {
    wait_for("share partitions started", Duration::from_secs(30), || {
        broker.output().matches("share partition started").count() >= n
    });
}

fn short_locks() -> BrokerOpts {
    BrokerOpts::new().env("STRATA_GROUP_SHARE_RECORD_LOCK_DURATION_MS", 15_000)
}

#[test]
fn members_share_partitions_and_every_record_is_accepted_once() {
    let broker = Broker::start_default();
    let topic = unique_topic("share-q");
    broker.create_topic(&topic, 2, &[]).unwrap();
    let group = unique_topic("share-g");
    let stop = std::env::temp_dir().join(format!("{group}.stop"));
    let stop_arg = stop.to_str().unwrap();
    let members: Vec<Running> = (0..3)
        .map(|_| {
            Running::start(share_consumer(
                &broker.kafka_addr,
                &group,
                &topic,
                &["--idle", "60", "--seconds", "90", "--stop-file", stop_arg],
            ))
        })
        .collect();
    wait_for_share_partitions(&broker, 2);
    let values: Vec<String> = (0..200).map(|i| format!("r{i}")).collect();
    produce(&broker, &topic, 0, &values[..100]);
    produce(&broker, &topic, 1, &values[100..]);
    let distinct = || {
        (members.iter())
            .flat_map(|m| m.seen())
            .map(|g| (g.p, g.o))
            .collect::<BTreeSet<_>>()
            .len()
    };
    wait_for("every record given", Duration::from_secs(60), || {
        distinct() >= 200
    });
    std::fs::write(&stop, b"").unwrap();
    let per_member: Vec<Vec<Given>> = members.into_iter().map(Running::end).collect();
    let _ = std::fs::remove_file(&stop);
    let all: Vec<&Given> = per_member.iter().flatten().collect();
    assert_eq!(all.len(), 200, "no record given twice: {all:?}");
    // A member may give back records it fetched but never handed to the application (a
    // partition moved to another member while they were buffered): RELEASE, which counts the
    // delivery. Nothing was given twice, so nothing came back more than once.
    let again: Vec<&&Given> = all.iter().filter(|g| g.d > 2).collect();
    assert!(again.is_empty(), "at most a second delivery: {again:?}");
    let values_seen: BTreeSet<&str> = all.iter().map(|g| g.v.as_str()).collect();
    assert_eq!(values_seen.len(), 200);
    let busy = per_member.iter().filter(|m| !m.is_empty()).count();
    assert!(busy >= 2, "the partitions were shared among the members");
    // Every record was accepted: a new member of the group is given none of them.
    let late = given(share_consumer(
        &broker.kafka_addr,
        &group,
        &topic,
        &["--idle", "5"],
    ));
    assert!(late.is_empty(), "nothing left to deliver: {late:?}");
}

#[test]
fn rejected_records_and_records_at_the_delivery_limit_become_dead_letters() {
    let broker = Broker::start_default();
    let topic = unique_topic("share-dlq");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let group = unique_topic("share-g");
    let member = share_consumer(
        &broker.kafka_addr,
        &group,
        &topic,
        &[
            "--ack",
            "explicit",
            "--reject",
            "poison",
            "--release",
            "retry",
            "--idle",
            "6",
        ],
    );
    wait_for_share_partitions(&broker, 1);
    let values: Vec<String> = ["a", "poison", "b", "retry", "c"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    produce(&broker, &topic, 0, &values);
    let got = given(member);
    let mut deliveries: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for g in &got {
        deliveries.entry(&g.v).or_default().push(g.d);
    }
    assert_eq!(deliveries["a"], vec![1]);
    assert_eq!(
        deliveries["poison"],
        vec![1],
        "a rejected record is never delivered again"
    );
    assert_eq!(
        deliveries["retry"],
        vec![1, 2, 3, 4, 5],
        "a released record is delivered again up to the delivery limit"
    );
    assert_eq!(
        broker.metric("strata_share_dead_letters_total"),
        2.0,
        "the rejected record and the one at the limit"
    );
}

#[test]
fn a_member_gone_with_its_locks_held_hands_its_records_on_after_the_lock_duration() {
    let broker = Broker::start(short_locks());
    let topic = unique_topic("share-kill");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let group = unique_topic("share-g");
    let gone = share_consumer(
        &broker.kafka_addr,
        &group,
        &topic,
        &["--ack", "hold", "--idle", "20"],
    );
    wait_for_share_partitions(&broker, 1);
    let values: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
    produce(&broker, &topic, 0, &values);
    let held = given(gone);
    assert!(!held.is_empty(), "the first member was given records");
    let started = std::time::Instant::now();
    let next = share_consumer(
        &broker.kafka_addr,
        &group,
        &topic,
        &["--count", "10", "--idle", "40", "--seconds", "60"],
    );
    let got = given(next);
    let offsets: BTreeSet<i64> = got.iter().map(|g| g.o).collect();
    assert_eq!(
        offsets,
        (0..10).collect(),
        "every record reached the second member: held {held:?}, got {got:?}"
    );
    for g in &got {
        let was_held = held.iter().any(|h| h.o == g.o);
        assert_eq!(g.d, if was_held { 2 } else { 1 }, "{g:?}");
    }
    assert!(
        started.elapsed() >= Duration::from_secs(10),
        "the held records waited for their locks to expire"
    );
}

fn share_fetch(group: &str, member: &str, epoch: i32, topic_id: uuid::Uuid) -> ShareFetchRequest {
    ShareFetchRequest::default()
        .with_group_id(Some(GroupId(StrBytes::from_string(group.into()))))
        .with_member_id(Some(StrBytes::from_string(member.into())))
        .with_share_session_epoch(epoch)
        .with_max_wait_ms(200)
        .with_max_bytes(1 << 20)
        .with_max_records(100)
        .with_batch_size(100)
        .with_topics(vec![FetchTopic::default()
            .with_topic_id(topic_id)
            .with_partitions(vec![
                FetchPartition::default().with_partition_index(0)
            ])])
}

#[test]
fn bad_share_requests_get_kafkas_errors_and_disturb_nothing() {
    let mut broker = Broker::start_default();
    let topic = unique_topic("share-bad");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let topic_id = conn.topic_id(&topic).unwrap();
    let group = unique_topic("share-g");
    // Join, so the group exists.
    let hb = conn
        .request(
            1,
            &ShareGroupHeartbeatRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(group.clone())))
                .with_member_id(StrBytes::from_static_str("m1"))
                .with_member_epoch(0)
                .with_subscribed_topic_names(Some(vec![TopicName(StrBytes::from_string(
                    topic.clone(),
                ))])),
        )
        .unwrap();
    assert_eq!(hb.error_code, 0, "{:?}", hb.error_message);
    assert_eq!(hb.member_epoch, 1);
    // A heartbeat without a member id, and one from a member never seen.
    let hb = conn
        .request(
            1,
            &ShareGroupHeartbeatRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(group.clone())))
                .with_member_id(StrBytes::from_static_str("stranger"))
                .with_member_epoch(3),
        )
        .unwrap();
    assert_eq!(hb.error_code, UNKNOWN_MEMBER_ID);
    let hb = conn
        .request(
            1,
            &ShareGroupHeartbeatRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(group.clone())))
                .with_member_epoch(0),
        )
        .unwrap();
    assert_eq!(hb.error_code, INVALID_REQUEST);
    // A session that does not exist, then opened with acknowledgements.
    let r = conn
        .request(1, &share_fetch(&group, "m1", 5, topic_id))
        .unwrap();
    assert_eq!(r.error_code, SHARE_SESSION_NOT_FOUND);
    let mut with_acks = share_fetch(&group, "m1", 0, topic_id);
    with_acks.topics[0].partitions[0].acknowledgement_batches =
        vec![AcknowledgementBatch::default()
            .with_first_offset(0)
            .with_last_offset(0)
            .with_acknowledge_types(vec![1])];
    let r = conn.request(1, &with_acks).unwrap();
    assert_eq!(r.error_code, INVALID_REQUEST);
    // Opened properly; records handed out; then acknowledgements of records never handed out,
    // of an unknown type, and with a stale epoch.
    let r = conn
        .request(1, &share_fetch(&group, "m1", 0, topic_id))
        .unwrap();
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    // The first fetch started the share partition at the log's end; these are the group's.
    produce(&broker, &topic, 0, &["x".to_string(), "y".to_string()]);
    let r = conn
        .request(1, &share_fetch(&group, "m1", 1, topic_id))
        .unwrap();
    assert_eq!(r.error_code, 0);
    let acquired: Vec<(i64, i64)> = (r.responses.iter())
        .flat_map(|t| t.partitions.iter())
        .flat_map(|p| {
            p.acquired_records
                .iter()
                .map(|a| (a.first_offset, a.last_offset))
        })
        .collect();
    assert_eq!(acquired, vec![(0, 1)], "the member was handed both records");
    let ack = |epoch: i32, first: i64, last: i64, types: Vec<i8>| {
        ShareAcknowledgeRequest::default()
            .with_group_id(Some(GroupId(StrBytes::from_string(group.clone()))))
            .with_member_id(Some(StrBytes::from_static_str("m1")))
            .with_share_session_epoch(epoch)
            .with_topics(vec![AcknowledgeTopic::default()
                .with_topic_id(topic_id)
                .with_partitions(vec![AcknowledgePartition::default()
                    .with_partition_index(0)
                    .with_acknowledgement_batches(vec![AckBatchA::default()
                        .with_first_offset(first)
                        .with_last_offset(last)
                        .with_acknowledge_types(types)])])])
    };
    let code = |r: &kafka_protocol::messages::ShareAcknowledgeResponse| {
        (r.error_code, r.responses[0].partitions[0].error_code)
    };
    let r = conn.request(1, &ack(2, 5, 9, vec![1])).unwrap();
    assert_eq!(code(&r), (0, INVALID_RECORD_STATE));
    let r = conn.request(1, &ack(3, 0, 1, vec![9])).unwrap();
    assert_eq!(code(&r), (0, INVALID_REQUEST));
    let r = conn.request(1, &ack(3, 0, 1, vec![1])).unwrap();
    assert_eq!(r.error_code, INVALID_SHARE_SESSION_EPOCH);
    // Another member cannot acknowledge m1's records.
    let r = conn
        .request(1, &share_fetch(&group, "m2", 0, topic_id))
        .unwrap();
    assert_eq!(r.error_code, 0);
    let mut other = ack(1, 0, 1, vec![1]);
    other.member_id = Some(StrBytes::from_static_str("m2"));
    let r = conn.request(1, &other).unwrap();
    assert_eq!(code(&r), (0, INVALID_RECORD_STATE));
    // m1's own acknowledgement still works: nothing above disturbed its records.
    let r = conn.request(1, &ack(4, 0, 1, vec![1])).unwrap();
    assert_eq!(code(&r), (0, 0));
    // A share heartbeat to a classic group's id.
    let classic = unique_topic("classic-g");
    let committed = GroupClient::connect(&broker.kafka_addr)
        .unwrap()
        .commit(&classic, -1, "", &topic, &[(0, 1)])
        .unwrap();
    assert_eq!(committed, vec![(0, 0)]);
    let hb = conn
        .request(
            1,
            &ShareGroupHeartbeatRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(classic)))
                .with_member_id(StrBytes::from_static_str("m9"))
                .with_member_epoch(0)
                .with_subscribed_topic_names(Some(vec![TopicName(StrBytes::from_string(
                    topic.clone(),
                ))])),
        )
        .unwrap();
    assert_eq!(hb.error_code, GROUP_ID_NOT_FOUND);
    broker.assert_serves_new_clients();
}

/// A ShareAcknowledge of `first..=last` of partition 0 with one type.
fn share_ack(
    group: &str,
    member: &str,
    epoch: i32,
    topic_id: uuid::Uuid,
    (first, last): (i64, i64),
    kind: i8,
) -> ShareAcknowledgeRequest {
    ShareAcknowledgeRequest::default()
        .with_group_id(Some(GroupId(StrBytes::from_string(group.into()))))
        .with_member_id(Some(StrBytes::from_string(member.into())))
        .with_share_session_epoch(epoch)
        .with_topics(vec![AcknowledgeTopic::default()
            .with_topic_id(topic_id)
            .with_partitions(vec![AcknowledgePartition::default()
                .with_partition_index(0)
                .with_acknowledgement_batches(vec![AckBatchA::default()
                    .with_first_offset(first)
                    .with_last_offset(last)
                    .with_acknowledge_types(vec![kind])])])])
}

/// At the leader of partition 0 of `topic` (`conn`): `member` of `group` opens its share
/// session (which starts the share partition at the log end; a share fetch needs no
/// heartbeat first, as Kafka's does not), `values` are produced there one
/// batch each, and the member acquires them. Returns the offsets acquired and the session's
/// next epoch.
fn open_and_acquire(
    conn: &mut KafkaConn,
    produce_to: &str,
    group: &str,
    member: &str,
    topic: &str,
    values: &[String],
) -> (Vec<(i64, i64)>, i32) {
    let topic_id = conn.topic_id(topic).unwrap();
    let r = conn
        .request(1, &share_fetch(group, member, 0, topic_id))
        .unwrap();
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let mut producer = KafkaConn::connect(produce_to).expect("connect");
    for v in values {
        let batch = encode_batch(
            &[RawRecord::new(v.as_bytes(), v.as_bytes(), now_ms())],
            Compression::None,
            None,
        );
        producer.produce_ok(topic, 0, batch).expect("produce");
    }
    let mut acquired = Vec::new();
    let mut epoch = 1;
    wait_for("records acquired", Duration::from_secs(20), || {
        let r = conn
            .request(1, &share_fetch(group, member, epoch, topic_id))
            .unwrap();
        assert_eq!(r.error_code, 0, "{:?}", r.error_message);
        epoch += 1;
        acquired.extend(
            (r.responses.iter())
                .flat_map(|t| t.partitions.iter())
                .inspect(|p| assert_eq!(p.error_code, 0, "{:?}", p.error_message))
                .flat_map(|p| {
                    p.acquired_records
                        .iter()
                        .map(|a| (a.first_offset, a.last_offset))
                }),
        );
        acquired.iter().map(|(f, l)| l - f + 1).sum::<i64>() >= values.len() as i64
    });
    (acquired, epoch)
}

#[test]
fn acknowledged_records_survive_a_kill_9_and_acquired_ones_are_delivered_again() {
    let mut broker = Broker::start_default();
    let topic = unique_topic("share-durable");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let group = unique_topic("share-g");
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let topic_id = conn.topic_id(&topic).unwrap();
    let values: Vec<String> = (0..10).map(|i| format!("d{i}")).collect();
    let addr = broker.kafka_addr.clone();
    let (acquired, epoch) = open_and_acquire(&mut conn, &addr, &group, "m1", &topic, &values);
    assert_eq!(acquired.first().map(|a| a.0), Some(0));
    // Accept 0..=4: answered once durable.
    let r = conn
        .request(1, &share_ack(&group, "m1", epoch, topic_id, (0, 4), 1))
        .unwrap();
    assert_eq!(
        (r.error_code, r.responses[0].partitions[0].error_code),
        (0, 0)
    );
    assert!(broker.metric("strata_share_state_writes_total") >= 2.0);
    broker.kill9();
    broker.restart();
    // Nothing acknowledged comes again; what was only acquired does, as a second delivery.
    let got = given(share_consumer(
        &broker.kafka_addr,
        &group,
        &topic,
        &["--idle", "8", "--seconds", "40"],
    ));
    let offsets: Vec<i64> = got.iter().map(|g| g.o).collect();
    assert_eq!(offsets, (5..10).collect::<Vec<_>>(), "{got:?}");
    assert!(got.iter().all(|g| g.d == 2), "{got:?}");
}

#[test]
fn after_the_leader_is_killed_nothing_acknowledged_is_delivered_again() {
    let mut cluster = Cluster::start(3, 3, FAST);
    cluster.wait_controller();
    let topic = unique_topic("share-failover");
    cluster.create_replicated_topic(
        &topic,
        1,
        TopicReplication::Fixed(3),
        &[("min.insync.replicas", "2")],
    );
    let group = unique_topic("share-g");
    let leader = cluster.leaders(&topic)[0].expect("a leader");
    let addr = cluster.member(leader).kafka_addr.clone();
    let mut conn = KafkaConn::connect(&addr).unwrap();
    let topic_id = conn.topic_id(&topic).unwrap();
    let values: Vec<String> = (0..10).map(|i| format!("f{i}")).collect();
    let (acquired, epoch) = open_and_acquire(&mut conn, &addr, &group, "m1", &topic, &values);
    assert_eq!(acquired.first().map(|a| a.0), Some(0));
    let r = conn
        .request(1, &share_ack(&group, "m1", epoch, topic_id, (0, 5), 1))
        .unwrap();
    assert_eq!(
        (r.error_code, r.responses[0].partitions[0].error_code),
        (0, 0)
    );
    // The group's coordinator (`__consumer_offsets`, created at the first FindCoordinator) is
    // placed while every broker is up, as in any running cluster.
    wait_for("a group coordinator", CLUSTER_TIMEOUT, || {
        let req = FindCoordinatorRequest::default()
            .with_key(StrBytes::from_string(group.clone()))
            .with_key_type(0);
        conn.request(3, &req).is_ok_and(|r| r.error_code == 0)
    });
    cluster.node(leader).kill9();
    wait_for("a new leader", CLUSTER_TIMEOUT, || {
        cluster.leaders(&topic)[0].is_some_and(|l| l != leader)
    });
    let got = given(share_consumer(
        &cluster.bootstrap(),
        &group,
        &topic,
        &["--idle", "10", "--seconds", "60"],
    ));
    let offsets: Vec<i64> = got.iter().map(|g| g.o).collect();
    assert_eq!(offsets, (6..10).collect::<Vec<_>>(), "{got:?}");
}

/// IncrementalAlterConfigs of group `group`'s configs: `(name, value)` SET each; the error
/// code.
fn alter_group(addr: &str, group: &str, set: &[(&str, &str)]) -> i16 {
    alter(addr, 32, group, set)
}

/// IncrementalAlterConfigs of resource `name` of type `resource_type`: `(name, value)` SET
/// each; the error code.
fn alter(addr: &str, resource_type: i8, name: &str, set: &[(&str, &str)]) -> i16 {
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    use kafka_protocol::messages::IncrementalAlterConfigsRequest;
    let s = |v: &str| StrBytes::from_string(v.to_string());
    let req = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(s(name))
            .with_configs(
                (set.iter())
                    .map(|(k, v)| {
                        AlterableConfig::default()
                            .with_name(s(k))
                            .with_config_operation(0)
                            .with_value(Some(s(v)))
                    })
                    .collect(),
            ),
    ]);
    let mut conn = KafkaConn::connect(addr).unwrap();
    conn.request(1, &req).unwrap().responses[0].error_code
}

/// DescribeConfigs of group `group`: (name, value, source) of each config.
fn describe_group_configs(addr: &str, group: &str) -> Vec<(String, String, i8)> {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::DescribeConfigsRequest;
    let req =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(32)
            .with_resource_name(StrBytes::from_string(group.to_string()))
            .with_configuration_keys(None)]);
    let mut conn = KafkaConn::connect(addr).unwrap();
    let r = conn.request(4, &req).unwrap().results.remove(0);
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    (r.configs.iter())
        .map(|c| {
            let v = c.value.as_ref().map_or(String::new(), |v| v.to_string());
            (c.name.to_string(), v, c.config_source)
        })
        .collect()
}

#[test]
fn group_configs_set_before_the_group_exists_shape_its_share_partitions() {
    const INVALID_CONFIG: i16 = 40;
    let broker = Broker::start_default();
    let addr = broker.kafka_addr.clone();
    let topic = unique_topic("share-cfg");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let values: Vec<String> = (0..5).map(|i| format!("e{i}")).collect();
    produce(&broker, &topic, 0, &values);
    let group = unique_topic("share-g");
    // Kafka's bounds and names; nothing of a refused request is stored.
    for bad in [
        ("share.delivery.count.limit", "11"),
        ("share.record.lock.duration.ms", "1000"),
        ("share.auto.offset.reset", "by_duration:P1Y"),
        ("share.isolation.level", "serializable"),
        ("share.no.such.config", "1"),
    ] {
        let set = [bad, ("share.partition.max.record.locks", "500")];
        assert_eq!(alter_group(&addr, &group, &set), INVALID_CONFIG, "{bad:?}");
    }
    let described = describe_group_configs(&addr, &group);
    for default in [
        ("share.auto.offset.reset", "latest"),
        ("share.partition.max.record.locks", "2000"),
    ] {
        let want = (default.0.to_string(), default.1.to_string(), 5);
        assert!(described.contains(&want), "{want:?} in {described:?}");
    }
    let set = [
        ("share.auto.offset.reset", "earliest"),
        ("share.delivery.count.limit", "2"),
    ];
    assert_eq!(alter_group(&addr, &group, &set), 0);
    let described = describe_group_configs(&addr, &group);
    for want in [
        ("share.auto.offset.reset", "earliest", 8),
        ("share.delivery.count.limit", "2", 8),
        ("share.record.lock.duration.ms", "30000", 5),
    ] {
        let want = (want.0.to_string(), want.1.to_string(), want.2);
        assert!(described.contains(&want), "{want:?} in {described:?}");
    }
    // Earliest: the records produced before the group's first fetch are its; a released
    // record is archived after its second delivery.
    let got = given(share_consumer(
        &addr,
        &group,
        &topic,
        &["--ack", "explicit", "--release", "e1", "--idle", "6"],
    ));
    let mut deliveries: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for g in &got {
        deliveries.entry(&g.v).or_default().push(g.d);
    }
    assert_eq!(deliveries.len(), 5, "{got:?}");
    assert_eq!(deliveries["e0"], vec![1]);
    assert_eq!(deliveries["e1"], vec![1, 2], "the group's delivery limit");
    assert_eq!(broker.metric("strata_share_dead_letters_total"), 1.0);
}

#[test]
fn one_member_reads_many_partitions_and_no_record_waits_for_a_lock_to_expire() {
    let broker = Broker::start_default();
    let addr = broker.kafka_addr.clone();
    let topic = unique_topic("share-many");
    let partitions = 24;
    broker.create_topic(&topic, partitions, &[]).unwrap();
    for p in 0..partitions {
        let values: Vec<String> = (0..60).map(|i| format!("p{p}-{i}")).collect();
        produce(&broker, &topic, p, &values);
    }
    let group = unique_topic("share-g");
    assert_eq!(
        alter_group(&addr, &group, &[("share.auto.offset.reset", "earliest")]),
        0
    );
    // Each answer carries at most 500 records, so every fetch after the first carries
    // acknowledgements of partitions it has no records for: their record sets must be empty,
    // not null (librdkafka drops a whole answer with a null one, and its records then wait
    // for their locks, 30 s, to expire: past the member's 10 s of idleness here).
    let got = given(share_consumer(
        &addr,
        &group,
        &topic,
        &["--count", "1440", "--idle", "10", "--seconds", "60"],
    ));
    let distinct: BTreeSet<(i32, i64)> = got.iter().map(|g| (g.p, g.o)).collect();
    assert_eq!(distinct.len(), 1440, "every record of every partition");
    assert_eq!(got.len(), 1440, "none twice");
    assert!(got.iter().all(|g| g.d == 1), "each delivered once");
}

/// Produces one record of `value` with headers `headers` to `topic`-0.
fn produce_with_headers(broker: &Broker, topic: &str, value: &str, headers: &[(&str, &str)]) {
    let mut conn = KafkaConn::connect(&broker.kafka_addr).expect("connect");
    let mut r = RawRecord::new(value.as_bytes(), value.as_bytes(), now_ms());
    r.headers = (headers.iter())
        .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
        .collect();
    let batch = encode_batch(&[r], Compression::None, None);
    conn.produce_ok(topic, 0, batch).expect("produce");
}

fn header<'a>(r: &'a strata_tests::clients::ConsumedRecord, name: &str) -> Option<&'a str> {
    (r.headers.iter())
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| v.as_deref())
        .map(|v| std::str::from_utf8(v).unwrap())
}

#[test]
fn dead_letters_reach_the_groups_dead_letter_topic_with_kafkas_headers() {
    const INVALID_CONFIG: i16 = 40;
    let broker = Broker::start(BrokerOpts::new().env(
        "STRATA_ERRORS_DEADLETTERQUEUE_AUTO_CREATE_TOPICS_ENABLE",
        "true",
    ));
    let addr = broker.kafka_addr.clone();
    let topic = unique_topic("share-src");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let group = unique_topic("share-g");
    // Kafka's rules for the name, at alter time.
    for bad in ["__dlq.orders", "orders.dead", "dlq.bad/name"] {
        let set = [("errors.deadletterqueue.topic.name", bad)];
        assert_eq!(alter_group(&addr, &group, &set), INVALID_CONFIG, "{bad}");
    }
    // A topic that does not allow share groups' dead letters: they wait, retried and counted.
    let dlq = format!("dlq.{topic}");
    broker.create_topic(&dlq, 1, &[]).unwrap();
    let set = [
        ("share.auto.offset.reset", "earliest"),
        ("share.delivery.count.limit", "2"),
        ("errors.deadletterqueue.topic.name", dlq.as_str()),
        ("errors.deadletterqueue.copy.record.enable", "true"),
    ];
    assert_eq!(alter_group(&addr, &group, &set), 0);
    produce_with_headers(&broker, &topic, "a", &[]);
    produce_with_headers(&broker, &topic, "poison", &[("trace", "t-1")]);
    produce_with_headers(&broker, &topic, "retry", &[]);
    produce_with_headers(&broker, &topic, "b", &[]);
    let got = given(share_consumer(
        &addr,
        &group,
        &topic,
        &[
            "--ack",
            "explicit",
            "--reject",
            "poison",
            "--release",
            "retry",
            "--idle",
            "5",
        ],
    ));
    assert_eq!(got.len(), 5, "retry twice, the others once: {got:?}");
    wait_for("a refused write counted", Duration::from_secs(20), || {
        broker.metric_labelled("strata_share_dlq_write_retries_total", "group", &group) >= 1.0
    });
    assert_eq!(broker.metric("strata_share_dlq_pending"), 2.0);
    // The operator lets the topic take them: the next attempt writes both.
    assert_eq!(
        alter(
            &addr,
            2,
            &dlq,
            &[("errors.deadletterqueue.group.enable", "true")]
        ),
        0
    );
    let letters = broker.consume_until(
        &dlq,
        &[(0, Offset::Beginning)],
        Duration::from_secs(40),
        |r| r.len() >= 2,
    );
    assert_eq!(letters.len(), 2, "{letters:?}");
    let poison = &letters[0];
    assert_eq!(poison.value.as_deref(), Some(&b"poison"[..]), "copied");
    assert_eq!(poison.key.as_deref(), Some(&b"poison"[..]));
    assert_eq!(
        header(poison, "trace"),
        Some("t-1"),
        "the source's headers too"
    );
    assert_eq!(header(poison, "__dlq.errors.topic"), Some(topic.as_str()));
    assert_eq!(header(poison, "__dlq.errors.partition"), Some("0"));
    assert_eq!(header(poison, "__dlq.errors.offset"), Some("1"));
    assert_eq!(header(poison, "__dlq.errors.group"), Some(group.as_str()));
    assert_eq!(header(poison, "__dlq.errors.delivery.count"), Some("1"));
    assert_eq!(
        header(poison, "__dlq.errors.message"),
        Some("Offset rejected by client.")
    );
    let retry = &letters[1];
    assert_eq!(header(retry, "__dlq.errors.offset"), Some("2"));
    assert_eq!(header(retry, "__dlq.errors.delivery.count"), Some("2"));
    assert_eq!(
        header(retry, "__dlq.errors.message"),
        Some("Offset delivery count exceeded the threshold.")
    );
    wait_for("nothing pending", Duration::from_secs(10), || {
        broker.metric("strata_share_dlq_pending") == 0.0
    });
    assert_eq!(
        broker.metric_labelled("strata_share_dlq_records_written_total", "group", &group),
        2.0
    );
    // Written, the dead letters are done with: a new member of the group gets nothing.
    let late = given(share_consumer(&addr, &group, &topic, &["--idle", "4"]));
    assert!(late.is_empty(), "{late:?}");
    // Replayed, they are back in their source partition as they were.
    let planned = broker.cli_ok(&["share", "dlq", "replay", "--topic", &dlq, "--group", &group]);
    assert!(
        planned.contains("replayed=2") && planned.contains("executed=false"),
        "{planned}"
    );
    let replayed = broker.cli_ok(&[
        "share",
        "dlq",
        "replay",
        "--topic",
        &dlq,
        "--group",
        &group,
        "--execute",
    ]);
    assert!(replayed.contains("replayed=2"), "{replayed}");
    let back = broker.consume_until(
        &topic,
        &[(0, Offset::Offset(4))],
        Duration::from_secs(20),
        |r| r.len() >= 2,
    );
    assert_eq!(back[0].value.as_deref(), Some(&b"poison"[..]));
    assert_eq!(header(&back[0], "trace"), Some("t-1"));
    assert!(
        back[0].headers.iter().all(|(k, _)| !k.starts_with("__dlq")),
        "{:?}",
        back[0].headers
    );
    assert_eq!(back[1].value.as_deref(), Some(&b"retry"[..]));

    // A missing topic is created when the cluster says so; without copying, only headers.
    let other = unique_topic("share-g");
    let auto = format!("dlq.auto-{other}");
    let set = [
        ("share.auto.offset.reset", "earliest"),
        ("errors.deadletterqueue.topic.name", auto.as_str()),
    ];
    assert_eq!(alter_group(&addr, &other, &set), 0);
    let got = given(share_consumer(
        &addr,
        &other,
        &topic,
        &["--ack", "explicit", "--reject", "b", "--idle", "5"],
    ));
    assert_eq!(got.len(), 6, "the 4 records and the 2 replayed: {got:?}");
    wait_for(
        "the dead-letter topic created and written",
        Duration::from_secs(20),
        || broker.metric_labelled("strata_share_dlq_records_written_total", "group", &other) == 1.0,
    );
    let letters = broker.consume_until(
        &auto,
        &[(0, Offset::Beginning)],
        Duration::from_secs(20),
        |r| !r.is_empty(),
    );
    assert_eq!(letters[0].value, None, "not copied");
    assert_eq!(header(&letters[0], "__dlq.errors.offset"), Some("3"));
}

/// `key=value` fields of the CLI's lines that have `field=want`.
fn lines_with<'a>(out: &'a str, field: &str, want: &str) -> Vec<BTreeMap<&'a str, &'a str>> {
    (out.lines())
        .map(|l| {
            (l.split_whitespace())
                .filter_map(|kv| kv.split_once('='))
                .collect::<BTreeMap<_, _>>()
        })
        .filter(|m| m.get(field) == Some(&want))
        .collect()
}

#[test]
fn operators_list_describe_reset_and_delete_share_groups_with_the_cli() {
    const NON_EMPTY_GROUP: i16 = 68;
    let broker = Broker::start_default();
    let addr = broker.kafka_addr.clone();
    let topic = unique_topic("share-ops");
    broker.create_topic(&topic, 2, &[]).unwrap();
    for p in 0..2 {
        let values: Vec<String> = (0..5).map(|i| format!("p{p}-{i}")).collect();
        produce(&broker, &topic, p, &values);
    }
    let group = unique_topic("share-g");
    assert_eq!(
        alter_group(&addr, &group, &[("share.auto.offset.reset", "earliest")]),
        0
    );
    let got = given(share_consumer(
        &addr,
        &group,
        &topic,
        &["--count", "10", "--idle", "5"],
    ));
    assert_eq!(got.len(), 10);

    let listed = broker.cli_ok(&["share", "list"]);
    assert_eq!(lines_with(&listed, "group", &group).len(), 1, "{listed}");
    let described = broker.cli_ok(&["share", "describe", &group]);
    let parts = lines_with(&described, "topic", &topic);
    assert_eq!(parts.len(), 2, "{described}");
    for p in &parts {
        assert_eq!(
            (p["start_offset"], p["log_end"], p["lag"]),
            ("5", "5", "0"),
            "{described}"
        );
    }

    // A member present: the offsets stay as they are (NON_EMPTY_GROUP).
    let stop = std::env::temp_dir().join(format!("{group}.stop"));
    let member = Running::start(share_consumer(
        &addr,
        &group,
        &topic,
        &[
            "--idle",
            "60",
            "--seconds",
            "60",
            "--stop-file",
            stop.to_str().unwrap(),
        ],
    ));
    wait_for("the member joined", Duration::from_secs(30), || {
        broker
            .cli_ok(&["share", "describe", &group])
            .contains("members=1")
    });
    let refused = broker.cli(&[
        "share",
        "reset-offsets",
        &group,
        "--topic",
        &topic,
        "--to-earliest",
        "--execute",
    ]);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains(&format!("error {NON_EMPTY_GROUP}")),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    std::fs::write(&stop, b"").unwrap();
    assert!(member.end().is_empty());
    let _ = std::fs::remove_file(&stop);
    wait_for("the member left", Duration::from_secs(30), || {
        broker
            .cli_ok(&["share", "describe", &group])
            .contains("members=0")
    });

    // A plan first, then applied: partition 1 from offset 2 again.
    let planned = broker.cli_ok(&[
        "share",
        "reset-offsets",
        &group,
        "--topic",
        &topic,
        "--partition",
        "1",
        "--to-offset",
        "2",
    ]);
    assert!(
        planned.contains("partition=1 new_start_offset=2"),
        "{planned}"
    );
    let described = broker.cli_ok(&["share", "describe", &group]);
    assert!(
        lines_with(&described, "partition", "1")[0]["start_offset"] == "5",
        "not applied yet"
    );
    broker.cli_ok(&[
        "share",
        "reset-offsets",
        &group,
        "--topic",
        &topic,
        "--partition",
        "1",
        "--to-offset",
        "2",
        "--execute",
    ]);
    let described = broker.cli_ok(&["share", "describe", &group]);
    assert_eq!(
        lines_with(&described, "partition", "1")[0]["start_offset"],
        "2",
        "{described}"
    );
    let again = given(share_consumer(
        &addr,
        &group,
        &topic,
        &["--count", "3", "--idle", "5"],
    ));
    let offsets: BTreeSet<(i32, i64, i32)> = again.iter().map(|g| (g.p, g.o, g.d)).collect();
    assert_eq!(
        offsets,
        [(1, 2, 1), (1, 3, 1), (1, 4, 1)].into_iter().collect(),
        "from the new start, as new records"
    );

    // The state of the topic deleted: the next member starts as share.auto.offset.reset says.
    broker.cli_ok(&["share", "delete", &group, "--topic", &topic]);
    let all = given(share_consumer(
        &addr,
        &group,
        &topic,
        &["--count", "10", "--idle", "5"],
    ));
    assert_eq!(all.len(), 10, "earliest again: {all:?}");
    // And the group itself.
    wait_for("the member left", Duration::from_secs(30), || {
        broker
            .cli_ok(&["share", "describe", &group])
            .contains("members=0")
    });
    broker.cli_ok(&["share", "delete", &group]);
    assert_eq!(
        lines_with(&broker.cli_ok(&["share", "list"]), "group", &group).len(),
        0
    );
    // Its state went with it: a new group of the same id starts where its configs say.
    let fresh = given(share_consumer(
        &addr,
        &group,
        &topic,
        &["--count", "10", "--idle", "5"],
    ));
    assert_eq!(fresh.len(), 10, "from the earliest again: {fresh:?}");
    assert!(fresh.iter().all(|g| g.d == 1), "as new records: {fresh:?}");
}

#[test]
fn bad_share_offset_requests_get_kafkas_errors() {
    use kafka_protocol::messages::alter_share_group_offsets_request::{
        AlterShareGroupOffsetsRequestPartition as P, AlterShareGroupOffsetsRequestTopic as T,
    };
    use kafka_protocol::messages::AlterShareGroupOffsetsRequest;
    const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    let broker = Broker::start_default();
    let topic = unique_topic("share-bad-offsets");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let group = unique_topic("share-g");
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let s = |v: &str| StrBytes::from_string(v.to_string());
    conn.request(
        3,
        &FindCoordinatorRequest::default()
            .with_key(s(&group))
            .with_key_type(0),
    )
    .unwrap();
    let alter = |conn: &mut KafkaConn, group: &str, topic: &str, partition: i32, offset: i64| {
        let req = AlterShareGroupOffsetsRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(vec![T::default()
                .with_topic_name(TopicName(s(topic)))
                .with_partitions(vec![P::default()
                    .with_partition_index(partition)
                    .with_start_offset(offset)])]);
        let r = conn.request(0, &req).unwrap();
        let p = r.responses.first().and_then(|t| t.partitions.first());
        (r.error_code, p.map_or(0, |p| p.error_code))
    };
    assert_eq!(
        alter(&mut conn, &group, &topic, 0, -5),
        (0, INVALID_REQUEST)
    );
    assert_eq!(
        alter(&mut conn, &group, &topic, 7, 0),
        (0, UNKNOWN_TOPIC_OR_PARTITION)
    );
    assert_eq!(
        alter(&mut conn, &group, "no-such-topic", 0, 0),
        (0, UNKNOWN_TOPIC_OR_PARTITION)
    );
    // A classic group's id is not a share group's.
    let classic = unique_topic("classic-g");
    let consumer: rdkafka::consumer::BaseConsumer = broker
        .consumer_config()
        .set("group.id", &classic)
        .create()
        .unwrap();
    let mut offsets = rdkafka::TopicPartitionList::new();
    offsets
        .add_partition_offset(&topic, 0, Offset::Offset(0))
        .unwrap();
    rdkafka::consumer::Consumer::commit(&consumer, &offsets, rdkafka::consumer::CommitMode::Sync)
        .unwrap();
    assert_eq!(
        alter(&mut conn, &classic, &topic, 0, 0),
        (GROUP_ID_NOT_FOUND, 0)
    );
    // Nothing refused was kept: the group still has no state of the topic.
    use kafka_protocol::messages::describe_share_group_offsets_request::{
        DescribeShareGroupOffsetsRequestGroup as G, DescribeShareGroupOffsetsRequestTopic as DT,
    };
    use kafka_protocol::messages::DescribeShareGroupOffsetsRequest;
    let req = DescribeShareGroupOffsetsRequest::default().with_groups(vec![G::default()
        .with_group_id(GroupId(s(&group)))
        .with_topics(Some(vec![DT::default()
            .with_topic_name(TopicName(s(&topic)))
            .with_partitions(vec![0])]))]);
    let r = conn.request(0, &req).unwrap();
    let p = &r.groups[0].topics[0].partitions[0];
    assert_eq!((p.error_code, p.start_offset), (0, -1));
}

/// Jepsen-style: records go through a share group while its members are SIGKILLed and
/// replaced and the broker is SIGKILLed and restarted. Checked at the end: every record was
/// accepted at least once (a late member finds nothing left), every poison record is on the
/// dead-letter topic, nothing else is; duplicates (deliveries to a member that died before
/// acknowledging) are counted and reported, not failed.
#[test]
fn a_queue_under_member_and_broker_kills_loses_nothing_and_dead_letters_only_poison() {
    let mut broker = Broker::start(short_locks());
    let addr = broker.kafka_addr.clone();
    let topic = unique_topic("share-jepsen");
    let dlq = format!("dlq.{topic}");
    broker.create_topic(&topic, 4, &[]).unwrap();
    broker
        .create_topic(&dlq, 1, &[("errors.deadletterqueue.group.enable", "true")])
        .unwrap();
    let group = unique_topic("share-g");
    let set = [
        ("share.auto.offset.reset", "earliest"),
        ("errors.deadletterqueue.topic.name", dlq.as_str()),
        ("errors.deadletterqueue.copy.record.enable", "true"),
    ];
    assert_eq!(alter_group(&addr, &group, &set), 0);
    let n = 2_000;
    let value = |i: usize| match i % 97 {
        0 => format!("poison{i}"),
        _ => format!("r{i}"),
    };
    for p in 0..4 {
        let values: Vec<String> = (0..n).filter(|i| i % 4 == p).map(value).collect();
        produce(&broker, &topic, p as i32, &values);
    }
    let stop = std::env::temp_dir().join(format!("{group}.stop"));
    let member = |addr: &str| {
        Running::start(share_consumer(
            addr,
            &group,
            &topic,
            &[
                "--ack",
                "explicit",
                "--reject-prefix",
                "poison",
                "--idle",
                "120",
                "--seconds",
                "180",
                "--stop-file",
                stop.to_str().unwrap(),
            ],
        ))
    };
    let mut seen: Vec<Given> = Vec::new();
    let distinct = |seen: &[Given], members: &[Running]| {
        (seen.iter().chain(
            members
                .iter()
                .flat_map(|m| m.seen())
                .collect::<Vec<_>>()
                .iter(),
        ))
        .map(|g| g.v.clone())
        .collect::<BTreeSet<_>>()
        .len()
    };
    // Three members; one SIGKILLed with records in hand and replaced.
    let mut members: Vec<Running> = (0..3).map(|_| member(&addr)).collect();
    wait_for("a third given", Duration::from_secs(60), || {
        distinct(&seen, &members) >= n / 3
    });
    let mut victim = members.remove(0);
    victim.child.kill().unwrap();
    seen.extend(victim.end());
    members.push(member(&addr));
    // The broker SIGKILLed under them (the members die with it, as applications would be
    // restarted), then everything comes back.
    wait_for("two thirds given", Duration::from_secs(60), || {
        distinct(&seen, &members) >= 2 * n / 3
    });
    broker.kill9();
    for mut m in members.drain(..) {
        m.child.kill().unwrap();
        seen.extend(m.end());
    }
    broker.restart();
    let addr = broker.kafka_addr.clone();
    let members: Vec<Running> = (0..3).map(|_| member(&addr)).collect();
    wait_for("every record given", Duration::from_secs(120), || {
        distinct(&seen, &members) >= n
    });
    // The dead letters of the poison records (REJECTed at once) reach the dead-letter topic.
    let poison: BTreeSet<String> = (0..n).filter(|i| i % 97 == 0).map(value).collect();
    let letters = broker.consume_until(
        &dlq,
        &[(0, Offset::Beginning)],
        Duration::from_secs(60),
        |r| {
            let values: BTreeSet<String> = r
                .iter()
                .filter_map(|x| {
                    x.value
                        .as_ref()
                        .map(|v| String::from_utf8_lossy(v).to_string())
                })
                .collect();
            poison.is_subset(&values)
        },
    );
    std::fs::write(&stop, b"").unwrap();
    for m in members {
        seen.extend(m.end());
    }
    let _ = std::fs::remove_file(&stop);
    let dead: Vec<String> = (letters.iter())
        .filter_map(|x| {
            x.value
                .as_ref()
                .map(|v| String::from_utf8_lossy(v).to_string())
        })
        .collect();
    let dead_set: BTreeSet<&String> = dead.iter().collect();
    assert!(
        poison.iter().all(|p| dead_set.contains(p)),
        "every poison record dead-lettered"
    );
    assert!(
        dead.iter().all(|v| v.starts_with("poison")),
        "nothing else: {dead:?}"
    );
    let all: BTreeSet<&str> = seen.iter().map(|g| g.v.as_str()).collect();
    assert_eq!(all.len(), n, "every record delivered");
    // Every record is done with: after the dead members' locks expire, nothing is left.
    let late = given(share_consumer(
        &addr,
        &group,
        &topic,
        &["--idle", "25", "--seconds", "60"],
    ));
    let late: Vec<&Given> = late.iter().filter(|g| !g.v.starts_with("poison")).collect();
    // Records given to a member killed before it acknowledged them come again, once their
    // locks expire: those may be the late member's. Anything else left is a lost ack.
    let duplicates = seen.len() + late.len() - all.len();
    eprintln!(
        "queue check: {n} records, {} deliveries, {duplicates} duplicate deliveries, {} dead letters ({} distinct), {} left for a late member",
        seen.len() + late.len(),
        dead.len(),
        dead_set.len(),
        late.len()
    );
    let given_once_acked: BTreeSet<&str> = late.iter().map(|g| g.v.as_str()).collect();
    assert!(
        late.iter().all(|g| g.d >= 2),
        "only records a dead member held come to a late member: {given_once_acked:?}"
    );
}

#[test]
fn version_2_renews_locks_and_limits_records_exactly() {
    const RENEW: i8 = 4;
    let broker = Broker::start(short_locks());
    let topic = unique_topic("share-v2");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let group = unique_topic("share-g");
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let topic_id = conn.topic_id(&topic).unwrap();
    let r = conn
        .request(2, &share_fetch(&group, "m1", 0, topic_id))
        .unwrap();
    assert_eq!(r.error_code, 0);
    // One batch of 10 records.
    let mut producer = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let records: Vec<RawRecord> = (0..10)
        .map(|i| RawRecord::new(format!("k{i}"), format!("v{i}"), now_ms()))
        .collect();
    producer
        .produce_ok(&topic, 0, encode_batch(&records, Compression::None, None))
        .unwrap();
    // An acquire mode v2 does not have: refused.
    let bad = share_fetch(&group, "m1", 1, topic_id).with_share_acquire_mode(7);
    assert_eq!(conn.request(2, &bad).unwrap().error_code, INVALID_REQUEST);
    // Record-limit mode: 3 of the batch's 10, not the whole batch.
    let mut epoch = 1;
    let mut acquired = Vec::new();
    wait_for("records acquired", Duration::from_secs(20), || {
        let req = share_fetch(&group, "m1", epoch, topic_id)
            .with_max_records(3)
            .with_share_acquire_mode(1);
        let r = conn.request(2, &req).unwrap();
        assert_eq!(r.error_code, 0, "{:?}", r.error_message);
        epoch += 1;
        acquired.extend(
            (r.responses.iter())
                .flat_map(|t| t.partitions.iter())
                .flat_map(|p| {
                    p.acquired_records
                        .iter()
                        .map(|a| (a.first_offset, a.last_offset))
                }),
        );
        !acquired.is_empty()
    });
    assert_eq!(acquired, vec![(0, 2)]);
    // 10 s into the 15 s lock: RENEW only with IsRenewAck, and only in v2.
    std::thread::sleep(Duration::from_secs(10));
    let renew = share_ack(&group, "m1", epoch, topic_id, (0, 2), RENEW);
    let r = conn.request(1, &renew).unwrap();
    assert_eq!(
        r.responses[0].partitions[0].error_code, INVALID_REQUEST,
        "v1 has no RENEW"
    );
    epoch += 1;
    let renew = share_ack(&group, "m1", epoch, topic_id, (0, 2), RENEW).with_is_renew_ack(true);
    let r = conn.request(2, &renew).unwrap();
    assert_eq!(
        (r.error_code, r.responses[0].partitions[0].error_code),
        (0, 0)
    );
    assert_eq!(r.acquisition_lock_timeout_ms, 15_000);
    epoch += 1;
    // A renewing fetch hands nothing out, though 3..=9 are there to be had.
    let renew_fetch = share_fetch(&group, "m1", epoch, topic_id).with_is_renew_ack(true);
    let r = conn.request(2, &renew_fetch).unwrap();
    assert_eq!(r.error_code, 0);
    assert!(
        (r.responses.iter())
            .flat_map(|t| &t.partitions)
            .all(|p| p.acquired_records.is_empty()),
        "a renewal hands nothing out"
    );
    epoch += 1;
    // 18 s after the acquisition, past its first lock: still this member's, renewed.
    std::thread::sleep(Duration::from_secs(8));
    let r = conn
        .request(2, &share_ack(&group, "m1", epoch, topic_id, (0, 2), 1))
        .unwrap();
    assert_eq!(
        (r.error_code, r.responses[0].partitions[0].error_code),
        (0, 0),
        "accepted within the renewed lock"
    );
}

#[test]
fn a_share_group_reads_offloaded_history_from_offset_zero() {
    let broker = Broker::start(BrokerOpts::new().quick_tiering());
    let topic = unique_topic("share-tiered");
    broker
        .create_topic(
            &topic,
            1,
            &[
                ("segment.bytes", "1048576"),
                ("local.retention.ms", "1000"),
                ("remote.storage.enable", "true"),
            ],
        )
        .unwrap();
    // 5,000 records of 1 KiB in batches of 100: five closed segments and more.
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let value = vec![b'h'; 1024];
    for b in 0..50 {
        let records: Vec<RawRecord> = (0..100)
            .map(|i| RawRecord::new(format!("k{}", b * 100 + i), value.clone(), now_ms()))
            .collect();
        conn.produce_ok(&topic, 0, encode_batch(&records, Compression::None, None))
            .unwrap();
    }
    let dir = broker.data_dir().join(format!("{topic}-0"));
    let local_segments = || {
        (std::fs::read_dir(&dir).unwrap().flatten())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
            .count()
    };
    wait_for(
        "history offloaded and gone from the local disk",
        Duration::from_secs(60),
        || broker.metric("strata_tier_uploaded_segments_total") >= 3.0 && local_segments() <= 2,
    );
    let group = unique_topic("share-g");
    let addr = broker.kafka_addr.clone();
    assert_eq!(
        alter_group(&addr, &group, &[("share.auto.offset.reset", "earliest")]),
        0
    );
    let got = given(share_consumer(
        &addr,
        &group,
        &topic,
        &["--count", "5000", "--idle", "10"],
    ));
    let offsets: BTreeSet<i64> = got.iter().map(|g| g.o).collect();
    assert_eq!(
        offsets,
        (0..5000).collect(),
        "from offset 0, the remote tier's records first"
    );
    assert_eq!(got.len(), 5000, "each once");
}
