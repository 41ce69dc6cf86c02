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
    encode_batch, now_ms, repo_root, unique_topic, wait_for, Broker, BrokerOpts, Cluster,
    KafkaConn, RawRecord,
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

fn python() -> String {
    std::env::var("STRATA_VENV_PYTHON").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        format!("{home}/.cache/strata-venv/bin/python")
    })
}

/// A share consumer process (see `tests/share_consumer.py`).
fn share_consumer(bootstrap: &str, group: &str, topic: &str, args: &[&str]) -> Child {
    Command::new(python())
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
    assert_eq!(got.len(), 4, "{got:?}");
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
