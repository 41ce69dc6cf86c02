//! Zone-aware traffic (KIP-392): three brokers, one per availability zone (their `rack`), and
//! consumers that name their zone. A consumer in a follower's zone reads from that follower —
//! the leader sends it there with `preferred_read_replica` and answers it no records — and
//! reads every record exactly once while that follower dies, drops out of the ISR, the leader
//! changes and the partition moves away; bytes are counted by zone crossed on `/metrics`.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::FetchRequest;
use kafka_protocol::protocol::StrBytes;
use rdkafka::admin::TopicReplication;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use strata_tests::cluster::{CLUSTER_TIMEOUT, FAST};
use strata_tests::http::parse_prometheus;
use strata_tests::{
    reassign, topic_name, unique_topic, venv_python, wait_for, Broker, Cluster, KafkaConn,
    NetSplit, TrackingProducer,
};

const ZONES: [&str; 3] = ["az1", "az2", "az3"];
const RACK_AWARE: &str = "org.apache.kafka.common.replica.RackAwareReplicaSelector";

fn env() -> Vec<(&'static str, &'static str)> {
    let mut env = FAST.to_vec();
    env.push(("STRATA_REPLICA_SELECTOR_CLASS", RACK_AWARE));
    env
}

/// A three-zone cluster with `env` (see [`env`]), and a new topic named after `prefix` on it.
fn zoned(
    env: &[(&str, &str)],
    prefix: &str,
    partitions: i32,
    replication: TopicReplication<'_>,
    configs: &[(&str, &str)],
) -> (Cluster, NetSplit, String) {
    let (mut cluster, split) = Cluster::start_in_zones(&ZONES, env);
    cluster.wait_controller();
    let topic = unique_topic(prefix);
    cluster.create_replicated_topic(&topic, partitions, replication, configs);
    (cluster, split, topic)
}

/// [`zoned`]'s usual case: one partition led by broker 1 (az1), followed in az2 and az3.
fn zoned_one(prefix: &str) -> (Cluster, NetSplit, String) {
    let rf3 = TopicReplication::Variable(&[&[1, 2, 3]]);
    zoned(&env(), prefix, 1, rf3, &[("min.insync.replicas", "2")])
}

/// `strata_zone_bytes_total` of one label set on a running member.
fn zone_bytes(b: &Broker, direction: &str, kind: &str, zone: &str) -> f64 {
    parse_prometheus(&b.metrics())
        .into_iter()
        .filter(|s| s.name == "strata_zone_bytes_total")
        .filter(|s| s.label("direction") == Some(direction) && s.label("kind") == Some(kind))
        .filter(|s| s.label("zone") == Some(zone))
        .map(|s| s.value)
        .sum()
}

/// Fetch bytes a member served consumers in its own zone, and in others.
fn served(b: &Broker) -> (f64, f64) {
    (
        zone_bytes(b, "out", "fetch", "same"),
        zone_bytes(b, "out", "fetch", "cross"),
    )
}

/// Produces records `from..to` (value `r-<i>`) to partition 0 with an idempotent acks=all
/// producer, and waits until each is acknowledged.
fn produce(cluster: &mut Cluster, topic: &str, from: usize, to: usize) {
    let cfg = cluster.producer_config();
    produce_with(cfg, topic, from, to);
}

/// [`produce`] with the producer config `cfg` (its bootstrap list, say).
fn produce_with(mut cfg: rdkafka::ClientConfig, topic: &str, from: usize, to: usize) {
    cfg.set("enable.idempotence", "true")
        .set("message.timeout.ms", "120000");
    let producer = TrackingProducer::new(&cfg);
    for i in from..to {
        let v = format!("r-{i}");
        producer.send(
            i - from,
            topic,
            Some(0),
            v.as_bytes(),
            v.as_bytes(),
            &[],
            None,
        );
    }
    producer.flush(Duration::from_secs(120));
    producer.all_delivered(to - from);
}

/// A consumer of partition 0 from the start, in `zone`.
fn consumer(cluster: &mut Cluster, topic: &str, zone: &str, isolation: &str) -> BaseConsumer {
    let mut cfg = cluster.consumer_config();
    cfg.set("client.rack", zone)
        .set("isolation.level", isolation)
        .set("topic.metadata.refresh.interval.ms", "1000");
    let c: BaseConsumer = cfg.create().expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    c.assign(&tpl).expect("assign");
    c
}

/// Polls until `got` holds `n` values, each the next record (`r-<offset order>`): a record
/// read twice or skipped fails at once.
fn read_to(c: &BaseConsumer, got: &mut Vec<String>, n: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while got.len() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "read {} of {n} records",
            got.len()
        );
        let Some(m) = c.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = match m {
            Ok(m) => m,
            Err(e) => {
                eprintln!("consumer error (retried): {e}");
                continue;
            }
        };
        let v = String::from_utf8(m.payload().unwrap().to_vec()).unwrap();
        assert_eq!(v, format!("r-{}", got.len()), "the next record, once");
        got.push(v);
    }
}

#[test]
fn a_consumer_reads_from_the_replica_in_its_zone_through_failures_leader_changes_and_moves() {
    let (mut cluster, split, topic) = zoned_one("zoned");
    assert_eq!(cluster.leaders(&topic)[0], Some(1));
    produce(&mut cluster, &topic, 0, 500);
    let c = consumer(&mut cluster, &topic, "az2", "read_uncommitted");
    let mut got = Vec::new();
    read_to(&c, &mut got, 500);
    // Broker 2 served it all; the leader, in az1, sent none of the records across zones.
    let (same2, _) = served(cluster.member(2));
    let (_, cross1) = served(cluster.member(1));
    assert!(
        same2 > 500.0 * 3.0,
        "broker 2 served its zone {same2} bytes"
    );
    assert_eq!(cross1, 0.0, "the leader served a consumer in another zone");
    // Replication is counted too: broker 2 took its copy across zones.
    assert!(zone_bytes(cluster.member(2), "in", "replication", "cross") > 0.0);
    assert!(zone_bytes(cluster.member(1), "out", "replication", "cross") > 0.0);

    // The follower dies: the consumer goes back to the leader and misses nothing.
    cluster.node(2).kill9();
    produce(&mut cluster, &topic, 500, 800);
    read_to(&c, &mut got, 800);
    let (_, cross1) = served(cluster.member(1));
    assert!(
        cross1 > 0.0,
        "the leader served the consumer while its zone's replica was down"
    );
    cluster.node(2).relaunch();
    cluster.node(2).wait_ready();
    cluster.wait_topic_healthy(&topic);
    produce(&mut cluster, &topic, 800, 900);
    read_to(&c, &mut got, 900);
    let served_before_cut = served(cluster.member(2)).0;

    // Cut off, the follower leaves the ISR; it stops serving, the consumer reads on from the
    // leader, and after healing from the follower again.
    split.isolate(2, 3);
    // Written on the majority's side, by a producer that knows only its members once they
    // have fenced broker 2: an idempotent producer's InitProducerId sent to the cut-off broker
    // waits out its quorum call, and librdkafka may keep choosing it.
    wait_for("the majority to fence broker 2", CLUSTER_TIMEOUT, || {
        let body = cluster.member(1).admin_get("/v1/cluster").map(|r| r.body);
        let v: serde_json::Value =
            serde_json::from_str(&body.unwrap_or_default()).unwrap_or_default();
        (v["brokers"].as_array())
            .is_some_and(|b| b.iter().any(|b| b["id"] == 2 && b["state"] == "fenced"))
    });
    let mut majority = cluster.producer_config();
    let members = [1, 3]
        .map(|id| cluster.member(id).kafka_addr.clone())
        .join(",");
    majority.set("bootstrap.servers", members);
    produce_with(majority, &topic, 900, 1100);
    read_to(&c, &mut got, 1100);
    split.heal();
    cluster.wait_topic_healthy(&topic);
    wait_for("the consumer back on broker 2", CLUSTER_TIMEOUT, || {
        produce(&mut cluster, &topic, got.len(), got.len() + 20);
        let n = got.len() + 20;
        read_to(&c, &mut got, n);
        served(cluster.member(2)).0 > served_before_cut
    });

    // A leader change: broker 3 leads; broker 2 is still the consumer's replica.
    let mut admin = KafkaConn::connect(&cluster.node(1).kafka_addr.clone()).unwrap();
    let moved = reassign::alter(&mut admin, &[(&topic, 0, Some(&[3, 1, 2]))], false).unwrap();
    assert_eq!(moved[0].code, 0, "{:?}", moved[0].message);
    cluster.node(1).kill9();
    wait_for("broker 3 to lead", CLUSTER_TIMEOUT, || {
        cluster.leaders(&topic).first().copied().flatten() == Some(3)
    });
    let n = got.len();
    produce(&mut cluster, &topic, n, n + 200);
    read_to(&c, &mut got, n + 200);
    cluster.node(1).relaunch();
    cluster.node(1).wait_ready();
    cluster.wait_topic_healthy(&topic);

    // The partition moves off broker 2: the consumer is sent back to a leader and reads on.
    let mut admin = KafkaConn::connect(&cluster.node(3).kafka_addr.clone()).unwrap();
    let moved = reassign::alter(&mut admin, &[(&topic, 0, Some(&[3, 1]))], true).unwrap();
    assert_eq!(moved[0].code, 0, "{:?}", moved[0].message);
    wait_for("broker 2 to leave the replicas", CLUSTER_TIMEOUT, || {
        cluster.replicas(&topic).first() == Some(&vec![3, 1])
    });
    let n = got.len();
    produce(&mut cluster, &topic, n, n + 200);
    read_to(&c, &mut got, n + 200);
    let distinct: BTreeSet<&String> = got.iter().collect();
    assert_eq!(distinct.len(), got.len());
}

#[test]
fn read_committed_through_a_follower_sees_only_committed_records() {
    let (mut cluster, _split, topic) = zoned_one("zoned-txn");
    use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
    let mut cfg = cluster.producer_config();
    cfg.set("transactional.id", unique_topic("zoned-tx"))
        .set("enable.idempotence", "true");
    let p: ThreadedProducer<_> = cfg.create().expect("transactional producer");
    p.init_transactions(Duration::from_secs(30)).unwrap();
    let mut committed = 0;
    for round in 0..6 {
        p.begin_transaction().unwrap();
        for i in 0..50 {
            // Committed rounds carry the next values; aborted ones carry what must never show.
            let v = if round % 2 == 0 {
                format!("r-{}", committed + i)
            } else {
                "aborted".into()
            };
            p.send(BaseRecord::<(), _>::to(&topic).partition(0).payload(&v))
                .map_err(|(e, _)| e)
                .unwrap();
        }
        p.flush(Duration::from_secs(30)).unwrap();
        if round % 2 == 0 {
            p.commit_transaction(Duration::from_secs(30)).unwrap();
            committed += 50;
        } else {
            p.abort_transaction(Duration::from_secs(30)).unwrap();
        }
    }
    let c = consumer(&mut cluster, &topic, "az3", "read_committed");
    let mut got = Vec::new();
    read_to(&c, &mut got, committed);
    assert!(
        c.poll(Duration::from_secs(2)).is_none(),
        "nothing past the last commit"
    );
    let (same3, _) = served(cluster.member(3));
    assert!(
        same3 > 0.0,
        "broker 3 served its zone's read_committed consumer"
    );
    assert_eq!(served(cluster.member(1)).1, 0.0);
}

#[test]
fn kafka_python_reads_from_its_zone_and_history_replays_from_the_remote_tier_through_a_follower() {
    let store = tempfile::tempdir().unwrap();
    let url = format!("file://{}", store.path().display());
    let mut env = env();
    let tier = [
        ("STRATA_OBJECT_STORE", url.as_str()),
        ("STRATA_REMOTE_LOG_MANAGER_TASK_INTERVAL_MS", "100"),
        ("STRATA_LOG_RETENTION_CHECK_INTERVAL_MS", "100"),
    ];
    env.extend_from_slice(&tier);
    let (mut cluster, _split, topic) = zoned(
        &env,
        "zoned-tier",
        1,
        TopicReplication::Variable(&[&[1, 2, 3]]),
        &[
            ("min.insync.replicas", "2"),
            ("segment.ms", "100"),
            ("local.retention.ms", "500"),
            ("remote.storage.enable", "true"),
        ],
    );
    // In steps, so time-based rolls close segments for the leader to offload.
    for step in 0..6 {
        produce(&mut cluster, &topic, step * 500, step * 500 + 500);
        std::thread::sleep(Duration::from_millis(200));
    }
    // Every replica trims its local copy once the leader has offloaded it.
    wait_for(
        "local logs trimmed below offset 1000",
        CLUSTER_TIMEOUT,
        || (1..=3).all(|id| local_start(cluster.member(id), &topic) > 1000),
    );
    let script = r#"
import sys
from kafka import KafkaConsumer, TopicPartition
c = KafkaConsumer(bootstrap_servers=sys.argv[1].split(','), client_rack=sys.argv[3],
                  enable_auto_commit=False, auto_offset_reset='earliest',
                  consumer_timeout_ms=60000, fetch_max_wait_ms=100)
tp = TopicPartition(sys.argv[2], 0)
c.assign([tp])
c.seek_to_beginning(tp)
want = int(sys.argv[4])
n = 0
for m in c:
    assert m.value.decode() == 'r-%d' % n, (m.offset, m.value, n)
    n += 1
    if n == want:
        break
print(n)
"#;
    let out = Command::new(venv_python())
        .args(["-c", script, &cluster.bootstrap(), &topic, "az2", "3000"])
        .output()
        .expect("run kafka-python");
    assert!(
        out.status.success(),
        "kafka-python: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "3000");
    // Broker 2 served the replay, from the remote tier, to its own zone; the leader nothing.
    let (same2, _) = served(cluster.member(2));
    assert!(same2 > 3000.0 * 3.0, "broker 2 served {same2} bytes");
    assert!(
        zone_bytes(cluster.member(2), "in", "object_store", "regional") > 0.0,
        "broker 2 read the remote tier"
    );
    assert_eq!(served(cluster.member(1)).1, 0.0);
}

/// A member's local log start for partition 0 of `topic` (`/v1/partitions`).
fn local_start(b: &Broker, topic: &str) -> i64 {
    let body = b
        .admin_get(&format!("/v1/partitions?topic={topic}"))
        .map(|r| r.body)
        .unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    v[0]["local_start"].as_i64().unwrap_or(-1)
}

/// A raw consumer fetch (v12) of partition 0 from `offset`, naming `rack`.
fn fetch(conn: &mut KafkaConn, topic: &str, offset: i64, rack: &str) -> (i16, i64, i32, usize) {
    let req = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_rack_id(StrBytes::from_string(rack.to_string()))
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])]);
    let resp = conn.request(12, &req).expect("fetch");
    let p = &resp.responses[0].partitions[0];
    (
        p.error_code,
        p.high_watermark,
        p.preferred_read_replica.0,
        p.records.as_ref().map_or(0, |r| r.len()),
    )
}

#[test]
fn bad_racks_and_fetches_to_the_wrong_replica_are_sent_back_to_the_leader() {
    let rf2 = TopicReplication::Variable(&[&[1, 2]]);
    let (mut cluster, split, topic) =
        zoned(&env(), "zoned-bad", 1, rf2, &[("min.insync.replicas", "1")]);
    produce(&mut cluster, &topic, 0, 100);
    let mut leader = KafkaConn::connect(&cluster.node(1).kafka_addr.clone()).unwrap();
    let mut follower = KafkaConn::connect(&cluster.node(2).kafka_addr.clone()).unwrap();
    let mut other = KafkaConn::connect(&cluster.node(3).kafka_addr.clone()).unwrap();
    let (code, hw, preferred, bytes) = fetch(&mut leader, &topic, 0, "az2");
    assert_eq!(
        (code, hw, preferred, bytes),
        (0, 100, 2, 0),
        "sent to broker 2, no records"
    );
    // Of the leader's zone, of no zone, of an absurdly long one, of a zone with no replica:
    // read from the leader.
    for rack in ["az1", "", &"z".repeat(100_000), "az3"] {
        let (code, _, preferred, bytes) = fetch(&mut leader, &topic, 0, rack);
        assert_eq!((code, preferred), (0, -1), "rack of {} bytes", rack.len());
        assert!(bytes > 0);
    }
    // The follower serves up to its high watermark, never past it.
    let (code, hw, _, bytes) = fetch(&mut follower, &topic, 0, "az2");
    assert_eq!((code, hw), (0, 100));
    assert!(bytes > 0);
    let (code, _, _, bytes) = fetch(&mut follower, &topic, 100, "az2");
    assert_eq!((code, bytes), (0, 0));
    let (code, ..) = fetch(&mut follower, &topic, 101, "az2");
    assert_eq!(code, 1, "OFFSET_OUT_OF_RANGE past the follower's log end");
    // No replica here at all.
    let (code, ..) = fetch(&mut other, &topic, 0, "az3");
    assert_eq!(code, 6, "NOT_LEADER_OR_FOLLOWER");
    // Old consumers (v10, no rack) read from leaders only.
    let v10 = FetchRequest::default()
        .with_max_bytes(1 << 20)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name(&topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_partition_max_bytes(1 << 20)])]);
    let resp = follower.request(10, &v10).unwrap();
    assert_eq!(resp.responses[0].partitions[0].error_code, 6);
    // A rack that is not UTF-8: the request is malformed; the broker carries on.
    let mut raw = KafkaConn::connect(&cluster.node(1).kafka_addr.clone()).unwrap();
    let (_, mut frame) = raw
        .encode_request(
            12,
            &FetchRequest::default().with_rack_id(StrBytes::from_static_str("az")),
        )
        .unwrap();
    let at = frame.windows(2).rposition(|w| w == b"az").unwrap();
    frame[at] = 0xff;
    raw.send_frame(&frame).unwrap();
    let _ = raw.closed_within(Duration::from_secs(2));
    assert_eq!(
        fetch(&mut leader, &topic, 0, "az1").0,
        0,
        "the broker serves on"
    );

    // Cut off from the others, the follower stops serving (it may be out of the ISR without
    // knowing), and the leader stops naming it.
    split.isolate(2, 3);
    wait_for("the follower to refuse", CLUSTER_TIMEOUT, || {
        fetch(&mut follower, &topic, 0, "az2").0 == 78
    });
    wait_for("the leader to stop naming it", CLUSTER_TIMEOUT, || {
        fetch(&mut leader, &topic, 0, "az2").2 == -1
    });
    split.heal();
    cluster.wait_topic_healthy(&topic);
    wait_for("the leader to name it again", CLUSTER_TIMEOUT, || {
        fetch(&mut leader, &topic, 0, "az2").2 == 2
    });
}

#[test]
fn pinned_leaders_lead_from_their_zone_and_come_back_after_a_failure() {
    let pin = [("leaders.preference", "racks:az3")];
    let (mut cluster, _split, topic) = zoned(&env(), "pinned", 4, TopicReplication::Fixed(3), &pin);
    assert_eq!(cluster.leaders(&topic), vec![Some(3); 4], "placed in az3");
    // The operator moves the producers, and the pin, to az2 (racks listed by preference).
    cluster.node(1).cli_ok(&[
        "topic",
        "alter",
        &topic,
        "--config",
        "leaders.preference=racks:az2,az3",
    ]);
    wait_for("leaders in az2", CLUSTER_TIMEOUT, || {
        cluster.leaders(&topic) == vec![Some(2); 4]
    });
    // A producer in az2 (its client id says so) sends nothing across zones.
    let mut cfg = cluster.producer_config();
    cfg.set("client.id", "orders strata_az=az2");
    let producer = TrackingProducer::new(&cfg);
    for i in 0..400usize {
        let v = format!("r-{i}");
        producer.send(
            i,
            &topic,
            Some((i % 4) as i32),
            v.as_bytes(),
            v.as_bytes(),
            &[],
            None,
        );
    }
    producer.flush(Duration::from_secs(60));
    producer.all_delivered(400);
    assert!(zone_bytes(cluster.member(2), "in", "produce", "same") > 400.0 * 3.0);
    assert_eq!(zone_bytes(cluster.member(2), "in", "produce", "cross"), 0.0);
    // Its pinned broker down, a partition is led by the next preference; back, it leads again.
    cluster.node(2).kill9();
    wait_for("leaders in az3 while az2 is down", CLUSTER_TIMEOUT, || {
        cluster.leaders(&topic) == vec![Some(3); 4]
    });
    cluster.node(2).relaunch();
    cluster.node(2).wait_ready();
    wait_for("leaders back in az2", CLUSTER_TIMEOUT, || {
        cluster.leaders(&topic) == vec![Some(2); 4]
    });
    // A bad preference is refused with the reason.
    let out = cluster.node(1).cli(&[
        "topic",
        "alter",
        &topic,
        "--config",
        "leaders.preference=az1",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("leaders.preference"));
}

#[test]
fn kafka_python_reads_on_from_the_leader_when_its_zones_replica_dies() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let (mut cluster, _split, topic) = zoned_one("zoned-py");
    produce(&mut cluster, &topic, 0, 300);
    // Reads 600 records in order from offset 0, saying `half` after the first 300.
    let script = r#"
import sys
from kafka import KafkaConsumer, TopicPartition
c = KafkaConsumer(bootstrap_servers=sys.argv[1].split(','), client_rack='az2',
                  enable_auto_commit=False, auto_offset_reset='earliest',
                  consumer_timeout_ms=90000, fetch_max_wait_ms=100,
                  reconnect_backoff_max_ms=500)
tp = TopicPartition(sys.argv[2], 0)
c.assign([tp])
c.seek_to_beginning(tp)
n = 0
for m in c:
    assert m.value.decode() == 'r-%d' % n, (m.offset, m.value, n)
    n += 1
    if n == 300:
        print('half', flush=True)
    if n == 600:
        break
print(n, flush=True)
"#;
    let mut child = Command::new(venv_python())
        .args(["-c", script, &cluster.bootstrap(), &topic])
        .stdout(Stdio::piped())
        .spawn()
        .expect("run kafka-python");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "half");
    assert!(served(cluster.member(2)).0 > 0.0, "it read from broker 2");
    cluster.node(2).kill9();
    produce(&mut cluster, &topic, 300, 600);
    assert_eq!(lines.next().unwrap().unwrap(), "600");
    assert!(child.wait().unwrap().success());
    assert!(
        served(cluster.member(1)).1 > 0.0,
        "the leader served it the rest"
    );
}
