//! Moving replicas with Kafka's reassignment APIs, between real `strata` processes.
//!
//! A tiered partition moves onto a new broker under acks=all load and the new replica copies
//! only what the object store does not hold yet; an untiered one copies its whole log (and
//! changes its replication factor); a move to a broker that is down stays in progress until
//! cancelled, and resumes when asked again with the broker back; bad plans are refused with
//! Kafka's codes and move nothing.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::records::Compression;
use rdkafka::admin::TopicReplication;
use rdkafka::Offset;
use strata_tests::cluster::{CLUSTER_TIMEOUT, FAST};
use strata_tests::reassign::{self, Outcome};
use strata_tests::{
    encode_batch, now_ms, unique_topic, wait_for, Broker, Cluster, ConsumedRecord, Idempotence,
    KafkaConn, RawRecord, Rng, TrackingProducer,
};

const VALUE_LEN: usize = 1000;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const INVALID_REPLICATION_FACTOR: i16 = 38;
const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
const NO_REASSIGNMENT_IN_PROGRESS: i16 = 85;
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
const NOT_LEADER_OR_FOLLOWER: i16 = 6;

fn value(i: usize) -> Vec<u8> {
    let mut v = format!("r{i}:").into_bytes();
    v.extend(Rng::new(i as u64).text(VALUE_LEN));
    v
}

fn tier_env(store_url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("STRATA_OBJECT_STORE", store_url.to_string()),
        ("STRATA_REMOTE_LOG_MANAGER_TASK_INTERVAL_MS", "100".into()),
        ("STRATA_LOG_RETENTION_CHECK_INTERVAL_MS", "100".into()),
        ("STRATA_REMOTE_CACHE_MEMORY_BYTES", "8388608".into()),
        ("STRATA_REMOTE_CACHE_DISK_BYTES", "33554432".into()),
        ("STRATA_REMOTE_CACHE_REPLAY_MEMORY_BYTES", "8388608".into()),
        ("STRATA_REMOTE_CACHE_REPLAY_DISK_BYTES", "33554432".into()),
    ]
}

fn env_refs<'a>(owned: &'a [(&'static str, String)]) -> Vec<(&'a str, &'a str)> {
    owned.iter().map(|(k, v)| (*k, v.as_str())).collect()
}

/// `/v1/partitions` of `topic`'s partition 0 on `broker`.
fn tier_view(broker: &Broker, topic: &str) -> Option<serde_json::Value> {
    let body = broker
        .admin_get(&format!("/v1/partitions?topic={topic}"))
        .ok()?
        .body;
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v.as_array()?.first().cloned()
}

/// An acks=all idempotent producer writing record `i` (key `k{i}`, `value(i)`) to partition 0
/// in the background until stopped or `max` records.
struct Load {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
    producer: Arc<TrackingProducer>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(cluster: &mut Cluster, topic: &str, max: usize, ts0: i64) -> Load {
        let mut cfg = cluster.producer_config();
        cfg.set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .set("batch.size", "65536")
            .set("message.timeout.ms", "120000");
        let producer = Arc::new(TrackingProducer::new(&cfg));
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicUsize::new(0));
        let thread = {
            let (stop, producer, sent, topic) = (
                stop.clone(),
                producer.clone(),
                sent.clone(),
                topic.to_string(),
            );
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) && i < max {
                    let key = format!("k{i}");
                    producer.send(
                        i,
                        &topic,
                        Some(0),
                        key.as_bytes(),
                        &value(i),
                        &[],
                        Some(ts0 + i as i64),
                    );
                    i += 1;
                    sent.store(i, Ordering::Relaxed);
                    if i % 20 == 0 {
                        std::thread::sleep(Duration::from_millis(4));
                    }
                }
            })
        };
        Load {
            stop,
            sent,
            producer,
            thread: Some(thread),
        }
    }

    fn sent(&self) -> usize {
        self.sent.load(Ordering::Relaxed)
    }

    fn acked(&self) -> usize {
        self.producer.acked_count()
    }

    /// Stops, flushes and checks every record was acknowledged at offset `i`; returns how
    /// many were written.
    fn finish(mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        self.producer.flush(Duration::from_secs(120));
        let n = self.sent.load(Ordering::Relaxed);
        for (i, (_, offset)) in self.producer.all_delivered(n).iter().enumerate() {
            assert_eq!(*offset, i as i64, "record {i} acknowledged at {offset}");
        }
        n
    }
}

/// Reads records `0..n` of partition 0 through `via` and checks each one.
fn check_all(via: &Broker, topic: &str, n: usize, ts0: i64) {
    let got = via.consume_until(
        topic,
        &[(0, Offset::Offset(0))],
        Duration::from_secs(180),
        |r| r.len() >= n,
    );
    for (i, r) in got.iter().take(n).enumerate() {
        let want = ConsumedRecord {
            partition: 0,
            offset: i as i64,
            timestamp: Some(ts0 + i as i64),
            key: Some(format!("k{i}").into_bytes()),
            value: Some(value(i)),
            headers: vec![],
        };
        assert!(*r == want, "record {i} differs: got offset {}", r.offset);
    }
}

fn ok(outcomes: &[Outcome]) {
    for o in outcomes {
        assert_eq!(o.code, 0, "{o:?}");
    }
}

/// Waits until the partition is done moving on every member, clients see `replicas`, and
/// the ISR is full.
fn wait_moved(cluster: &mut Cluster, conn: &mut KafkaConn, topic: &str, replicas: &[u64]) {
    wait_for("the reassignment to complete", CLUSTER_TIMEOUT, || {
        reassign::list(conn, Some(&[topic])).is_ok_and(|l| l.is_empty())
    });
    let t = topic.to_string();
    cluster.wait_all("no member sees the move in progress", move |v| {
        v["reassigning"]
            .as_array()
            .is_some_and(|r| r.iter().all(|p| p["topic"] != t.as_str()))
    });
    wait_for("clients to see the new replicas", CLUSTER_TIMEOUT, || {
        cluster.replicas(topic).first().map(Vec::as_slice) == Some(replicas)
    });
    cluster.wait_topic_healthy(topic);
}

#[test]
fn a_tiered_partition_moves_to_a_new_broker_copying_only_what_is_not_offloaded() {
    let store = tempfile::tempdir().unwrap();
    let tier = tier_env(&format!("file://{}", store.path().display()));
    let mut env = [FAST, &env_refs(&tier)[..]].concat();
    env.push((
        "STRATA_LOG",
        "info,strata_broker::replication=debug,strata_broker::handlers=debug,openraft=error",
    ));
    let mut cluster = Cluster::start(4, 3, &env);
    cluster.wait_controller();
    let topic = unique_topic("move-tiered");
    // Local copies are kept (long local retention, records timestamped now): the tail the new
    // replica needs is then visibly smaller than what the old replicas hold on disk.
    cluster.create_replicated_topic(
        &topic,
        1,
        TopicReplication::Variable(&[&[1, 2, 3]]),
        &[
            ("min.insync.replicas", "2"),
            ("segment.bytes", "1048576"),
            ("local.retention.ms", "600000"),
            ("remote.storage.enable", "true"),
        ],
    );
    let ts0 = now_ms();
    let load = Load::start(&mut cluster, &topic, 40_000, ts0);
    wait_for("8 MB acknowledged", CLUSTER_TIMEOUT, || {
        load.acked() >= 8_000
    });
    let remote_end = |c: &Cluster, id: u64| {
        tier_view(c.member(id), &topic).and_then(|v| v["remote_end"].as_i64())
    };
    wait_for("most of it offloaded", CLUSTER_TIMEOUT, || {
        remote_end(&cluster, 1).is_some_and(|e| e >= 6_000)
    });
    let offloaded_at_move = remote_end(&cluster, 1).unwrap();
    assert_eq!(
        cluster
            .member(4)
            .metric("strata_replication_fetched_bytes_total"),
        0.0
    );

    // Broker 4 takes broker 1's place, and leads when done (first in the target).
    let mut conn = KafkaConn::connect(&cluster.member(2).kafka_addr).unwrap();
    ok(&reassign::alter(&mut conn, &[(&topic, 0, Some(&[4, 2, 3]))], false).unwrap());
    if let Some(ongoing) = reassign::list(&mut conn, None).unwrap().first() {
        assert_eq!(
            ongoing,
            &(topic.clone(), 0, vec![4, 2, 3, 1], vec![4], vec![1]),
            "target first, then the replica leaving"
        );
    }
    wait_moved(&mut cluster, &mut conn, &topic, &[4, 2, 3]);
    wait_for("broker 4 to lead", CLUSTER_TIMEOUT, || {
        cluster.leaders(&topic).first() == Some(&Some(4))
    });
    // At most this many records were written before broker 4 led: all it could have fetched.
    let at_move = load.sent();
    wait_for(
        "records acknowledged by the new leader",
        CLUSTER_TIMEOUT,
        || load.acked() >= (at_move + 1_000).min(40_000),
    );
    let n = load.finish();

    // The new replica started at or past where the object store ended, and fetched about
    // what it holds; the others hold the whole history locally.
    let v4 = tier_view(cluster.member(4), &topic).unwrap();
    let v2 = tier_view(cluster.member(2), &topic).unwrap();
    let start4 = v4["local_start"].as_i64().unwrap();
    assert!(
        start4 >= offloaded_at_move,
        "broker 4 starts at {start4}, below the remote end {offloaded_at_move} at the move: {v4}"
    );
    assert_eq!(v2["local_start"], 0, "{v2}");
    let fetched = cluster
        .member(4)
        .metric("strata_replication_fetched_bytes_total");
    let history = v2["local_bytes"].as_f64().unwrap();
    let per_record = history / n as f64;
    let tail = (at_move as i64 - offloaded_at_move) as f64 * per_record;
    eprintln!(
        "moved: fetched {fetched} B; tail not offloaded at most {tail} B; whole log {history} B; joined at {start4} of {n}"
    );
    assert!(
        fetched <= 1.1 * tail + 65536.0,
        "fetched {fetched} B for a tail of at most {tail} B"
    );
    assert!(
        fetched < 0.5 * history,
        "fetched {fetched} B of a {history} B log: it copied history"
    );
    // Broker 1 no longer hosts the partition.
    wait_for("broker 1 to drop its copy", CLUSTER_TIMEOUT, || {
        !cluster
            .member(1)
            .data_dir()
            .join(format!("{topic}-0"))
            .exists()
    });

    // A producer still writing to the old leader is told where the partition went (KIP-951):
    // the new leader and epoch, and its address, without a metadata round trip.
    let mut old = KafkaConn::connect(&cluster.member(1).kafka_addr).unwrap();
    let req = KafkaConn::produce_request(
        &topic,
        0,
        encode_batch(
            &[RawRecord::new("x", "y", now_ms())],
            Compression::None,
            None,
        ),
        5_000,
    );
    let resp = old.request(11, &req).unwrap();
    let part = &resp.responses[0].partition_responses[0];
    assert_eq!(part.error_code, NOT_LEADER_OR_FOLLOWER, "{part:?}");
    assert_eq!(part.current_leader.leader_id.0, 4, "{part:?}");
    assert!(part.current_leader.leader_epoch >= 1, "{part:?}");
    assert_eq!(resp.node_endpoints.len(), 1, "{resp:?}");
    assert_eq!(
        format!(
            "{}:{}",
            resp.node_endpoints[0].host.as_str(),
            resp.node_endpoints[0].port
        ),
        cluster.member(4).kafka_addr
    );

    // Every acknowledged record, from offset 0, through the new leader: history from the
    // object store, the tail from its disk.
    check_all(cluster.member(4), &topic, n, ts0);
    let mut conn4 = KafkaConn::connect(&cluster.member(4).kafka_addr).unwrap();
    let (dir, total, usable, replicas) =
        reassign::describe_log_dirs(&mut conn4, Some((&topic, &[0]))).unwrap();
    assert!(dir.ends_with("data"), "{dir}");
    assert!(total > 0 && usable > 0 && usable <= total);
    assert_eq!(replicas.len(), 1);
    assert_eq!(
        (replicas[0].1, replicas[0].3),
        (0, 0),
        "the leader lags nothing"
    );
    assert!(replicas[0].2 > 0);
}

#[test]
fn an_untiered_partition_moves_by_copying_its_whole_log_and_may_change_its_replication_factor() {
    // Moves are throttled to 1 MB/s per receiving broker: the 3 MB log takes several rounds.
    let env = [
        FAST,
        &[("STRATA_REPLICA_MOVE_MAX_BYTES_PER_SECOND", "1000000")][..],
    ]
    .concat();
    let mut cluster = Cluster::start(3, 3, &env);
    cluster.wait_controller();
    let topic = unique_topic("move-full");
    cluster.create_replicated_topic(&topic, 1, TopicReplication::Variable(&[&[1]]), &[]);
    let ts0 = now_ms() - 3_600_000;
    let load = Load::start(&mut cluster, &topic, 3_000, ts0);
    wait_for("records acknowledged", CLUSTER_TIMEOUT, || {
        load.acked() >= 1_500
    });

    let mut conn = KafkaConn::connect(&cluster.member(3).kafka_addr).unwrap();
    // Without allow_replication_factor_change, one replica to two is refused.
    let refused = reassign::alter(&mut conn, &[(&topic, 0, Some(&[2, 3]))], false).unwrap();
    assert_eq!(refused[0].code, INVALID_REPLICATION_FACTOR, "{refused:?}");
    ok(&reassign::alter(&mut conn, &[(&topic, 0, Some(&[2, 3]))], true).unwrap());
    wait_moved(&mut cluster, &mut conn, &topic, &[2, 3]);
    let n = load.finish();
    // Both new replicas copied the whole log from offset 0, through the move budget.
    for id in [2, 3] {
        let fetched = cluster
            .member(id)
            .metric("strata_replication_fetched_bytes_total");
        assert!(
            fetched >= 1_500.0 * VALUE_LEN as f64,
            "broker {id} fetched {fetched} B"
        );
        let moved = cluster
            .member(id)
            .metric("strata_reassignment_fetched_bytes_total");
        assert!(
            moved >= 1_500.0 * VALUE_LEN as f64,
            "broker {id} moved {moved} B"
        );
        let throttled = cluster
            .member(id)
            .metric("strata_reassignment_throttled_total");
        assert!(
            throttled > 0.0,
            "broker {id}: the budget never held a move back"
        );
        let mut c = KafkaConn::connect(&cluster.member(id).kafka_addr).unwrap();
        let (_, _, _, replicas) =
            reassign::describe_log_dirs(&mut c, Some((&topic, &[0]))).unwrap();
        assert_eq!(replicas.len(), 1, "broker {id}: {replicas:?}");
    }
    check_all(cluster.member(2), &topic, n, ts0);
    wait_for("broker 1 to drop its copy", CLUSTER_TIMEOUT, || {
        !cluster
            .member(1)
            .data_dir()
            .join(format!("{topic}-0"))
            .exists()
    });
}

#[test]
fn a_move_to_a_dead_broker_waits_can_be_cancelled_and_resumes_when_it_is_back() {
    let mut cluster = Cluster::start(3, 3, FAST);
    cluster.wait_controller();
    let topic = unique_topic("move-cancel");
    cluster.create_replicated_topic(&topic, 1, TopicReplication::Variable(&[&[1, 2]]), &[]);
    let ts0 = now_ms() - 3_600_000;
    let load = Load::start(&mut cluster, &topic, 500, ts0);
    wait_for("records acknowledged", CLUSTER_TIMEOUT, || {
        load.acked() >= 500
    });

    cluster.node(3).kill9();
    let mut conn = KafkaConn::connect(&cluster.member(1).kafka_addr).unwrap();
    ok(&reassign::alter(&mut conn, &[(&topic, 0, Some(&[1, 3]))], false).unwrap());
    // Broker 3 cannot catch up: once the controller has fenced it, the move is still in
    // progress, visible to every broker.
    cluster.wait_all("broker 3 fenced", |v| {
        v["brokers"]
            .as_array()
            .is_some_and(|b| b.iter().any(|b| b["id"] == 3 && b["state"] == "fenced"))
    });
    for via in [1, 2] {
        let mut c = KafkaConn::connect(&cluster.member(via).kafka_addr).unwrap();
        assert_eq!(
            reassign::list(&mut c, Some(&[&topic])).unwrap(),
            vec![(topic.clone(), 0, vec![1, 3, 2], vec![3], vec![2])],
            "via broker {via}"
        );
    }
    // Operators see it: `strata topic describe`, `strata cluster status` and /metrics.
    let out = std::process::Command::new(strata_tests::strata_bin())
        .args(["topic", "describe", &topic, "-b", &cluster.bootstrap()])
        .args(["--admin-addr", &cluster.member(1).admin_addr])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("replicas=1,3,2") && text.contains("adding=3 removing=2"),
        "{text}"
    );
    let controller = cluster.wait_controller();
    assert_eq!(
        cluster
            .member(controller)
            .metric("strata_reassigning_partitions"),
        1.0
    );
    // Cancelled: back to the original replicas, and nothing left to cancel.
    ok(&reassign::alter(&mut conn, &[(&topic, 0, None)], false).unwrap());
    assert!(reassign::list(&mut conn, None).unwrap().is_empty());
    let again = reassign::alter(&mut conn, &[(&topic, 0, None)], false).unwrap();
    assert_eq!(again[0].code, NO_REASSIGNMENT_IN_PROGRESS, "{again:?}");
    wait_moved(&mut cluster, &mut conn, &topic, &[1, 2]);

    // Broker 3 is back: the same move now completes.
    cluster.node(3).restart();
    ok(&reassign::alter(&mut conn, &[(&topic, 0, Some(&[1, 3]))], false).unwrap());
    wait_moved(&mut cluster, &mut conn, &topic, &[1, 3]);
    let n = load.finish();
    check_all(cluster.member(3), &topic, n, ts0);
}

#[test]
fn bad_reassignments_are_refused_with_kafkas_codes_and_move_nothing() {
    let broker = Broker::start_default();
    let topic = unique_topic("move-bad");
    broker.create_topic(&topic, 2, &[]).unwrap();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let out = reassign::alter(
        &mut conn,
        &[
            (&topic, 0, Some(&[9])),
            (&topic, 1, Some(&[1, 1])),
            (&topic, 7, Some(&[1])),
            ("no-such-topic", 0, Some(&[1])),
            (&topic, 0, Some(&[])),
            (&topic, 1, Some(&[-1])),
            (&topic, 0, None),
        ],
        true,
    )
    .unwrap();
    let codes: Vec<(i32, i16)> = out.iter().map(|o| (o.partition, o.code)).collect();
    assert_eq!(
        codes,
        vec![
            (0, INVALID_REPLICA_ASSIGNMENT),
            (1, INVALID_REPLICA_ASSIGNMENT),
            (7, UNKNOWN_TOPIC_OR_PARTITION),
            (0, INVALID_REPLICA_ASSIGNMENT),
            (1, INVALID_REPLICA_ASSIGNMENT),
            (0, NO_REASSIGNMENT_IN_PROGRESS),
            // Answers are grouped by topic, in the order topics first appear.
            (0, UNKNOWN_TOPIC_OR_PARTITION),
        ],
        "{out:?}"
    );
    for o in &out {
        assert!(o.message.as_ref().is_some_and(|m| !m.is_empty()), "{o:?}");
    }
    assert!(
        out[0].message.as_ref().unwrap().contains("broker 9"),
        "{out:?}"
    );
    assert!(reassign::list(&mut conn, None).unwrap().is_empty());
    // Nothing moved: still one replica on broker 1 for both partitions.
    let (_, _, _, replicas) = reassign::describe_log_dirs(&mut conn, None).unwrap();
    let mine: Vec<i32> = replicas
        .iter()
        .filter(|r| r.0 == topic)
        .map(|r| r.1)
        .collect();
    assert_eq!(mine.len(), 2, "{replicas:?}");
    // A same-replicas target is accepted and changes nothing.
    ok(&reassign::alter(&mut conn, &[(&topic, 0, Some(&[1]))], false).unwrap());
    assert!(reassign::list(&mut conn, None).unwrap().is_empty());
}

/// One idempotent batch of `n` 1 kB records from `(pid, epoch)` at sequence `seq`.
fn idempotent_batch(pid: i64, epoch: i16, seq: i32, n: usize) -> bytes::Bytes {
    let records: Vec<RawRecord> = (0..n)
        .map(|i| RawRecord::new(format!("p{}", seq as usize + i), value(i), now_ms()))
        .collect();
    encode_batch(
        &records,
        Compression::None,
        Some(Idempotence {
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
        }),
    )
}

#[test]
fn a_retry_of_a_batch_the_new_replica_never_copied_is_still_answered_as_a_duplicate() {
    let store = tempfile::tempdir().unwrap();
    let tier = tier_env(&format!("file://{}", store.path().display()));
    let env = [FAST, &env_refs(&tier)[..]].concat();
    let mut cluster = Cluster::start(2, 1, &env);
    cluster.wait_controller();
    let topic = unique_topic("move-idem");
    cluster.create_replicated_topic(
        &topic,
        1,
        TopicReplication::Variable(&[&[1]]),
        &[
            ("segment.bytes", "1048576"),
            ("remote.storage.enable", "true"),
        ],
    );
    let mut conn = KafkaConn::connect(&cluster.member(1).kafka_addr).unwrap();
    let (pid, epoch) = conn.init_producer_id().unwrap();
    // The idempotent producer writes five batches, then others fill the segment: its last
    // batch ends up in an offloaded segment, below where a new replica starts.
    let mut last = (0, 0);
    for b in 0..5 {
        let offset = conn
            .produce_ok(&topic, 0, idempotent_batch(pid, epoch, b * 50, 50))
            .unwrap();
        last = (b * 50, offset);
    }
    let filler: Vec<RawRecord> = (0..100)
        .map(|i| RawRecord::new(format!("f{i}"), value(i), now_ms()))
        .collect();
    for _ in 0..14 {
        conn.produce_ok(&topic, 0, encode_batch(&filler, Compression::None, None))
            .unwrap();
    }
    wait_for("the producer's batches offloaded", CLUSTER_TIMEOUT, || {
        tier_view(cluster.member(1), &topic)
            .and_then(|v| v["remote_end"].as_i64())
            .is_some_and(|e| e > last.1 + 50)
    });

    ok(&reassign::alter(&mut conn, &[(&topic, 0, Some(&[2]))], false).unwrap());
    let mut conn = KafkaConn::connect(&cluster.member(2).kafka_addr).unwrap();
    wait_moved(&mut cluster, &mut conn, &topic, &[2]);
    let start = tier_view(cluster.member(2), &topic).unwrap()["local_start"]
        .as_i64()
        .unwrap();
    assert!(
        start > last.1 + 50,
        "broker 2 starts at {start}, after the batch"
    );

    // The producer retries its last batch (an ack it never got): the new leader knows it.
    let (seq, offset) = last;
    let retry = conn
        .produce(&topic, 0, idempotent_batch(pid, epoch, seq, 50))
        .unwrap();
    assert_eq!(
        (retry.error_code, retry.base_offset),
        (0, offset),
        "a duplicate is answered with its original offset"
    );
    let end = conn.list_offset(&topic, 0, -1).unwrap().1;
    // The next batch in sequence is appended; one with a gap is refused.
    let next = conn
        .produce_ok(&topic, 0, idempotent_batch(pid, epoch, seq + 50, 50))
        .unwrap();
    assert_eq!(next, end, "appended at the log end");
    let gap = conn
        .produce(&topic, 0, idempotent_batch(pid, epoch, seq + 500, 50))
        .unwrap();
    assert_eq!(gap.error_code, OUT_OF_ORDER_SEQUENCE_NUMBER, "{gap:?}");
}

#[test]
fn a_move_survives_sigkill_of_the_destination_the_controller_and_the_leader() {
    // Moves throttled to 400 kB/s: the 3 MB log takes long enough to kill things mid-move.
    let env = [
        FAST,
        &[("STRATA_REPLICA_MOVE_MAX_BYTES_PER_SECOND", "400000")][..],
    ]
    .concat();
    let mut cluster = Cluster::start(4, 3, &env);
    cluster.wait_controller();
    let topic = unique_topic("move-kill");
    cluster.create_replicated_topic(
        &topic,
        1,
        TopicReplication::Variable(&[&[1, 2, 3]]),
        &[("min.insync.replicas", "2")],
    );
    let ts0 = now_ms() - 3_600_000;
    let load = Load::start(&mut cluster, &topic, 6_000, ts0);
    wait_for("3 MB acknowledged", CLUSTER_TIMEOUT, || {
        load.acked() >= 3_000
    });
    let mut conn = KafkaConn::connect(&cluster.member(2).kafka_addr).unwrap();
    ok(&reassign::alter(&mut conn, &[(&topic, 0, Some(&[4, 2, 3]))], false).unwrap());
    let moving = vec![(topic.clone(), 0, vec![4, 2, 3, 1], vec![4], vec![1])];
    let copied = |c: &Cluster| {
        c.member(4)
            .metric("strata_reassignment_fetched_bytes_total")
    };
    wait_for("broker 4 copying", CLUSTER_TIMEOUT, || {
        copied(&cluster) > 0.0
    });

    // The destination dies mid-copy and comes back: the move goes on from what it has.
    cluster.node(4).kill9();
    assert_eq!(reassign::list(&mut conn, None).unwrap(), moving);
    cluster.node(4).restart();
    wait_for("broker 4 copying again", CLUSTER_TIMEOUT, || {
        copied(&cluster) > 0.0
    });

    // The controller dies: the move is in the quorum, so the next controller has it.
    let controller = cluster.wait_controller();
    cluster.node(controller).kill9();
    let next = cluster.wait_controller();
    assert_ne!(next, controller);
    let via = [1, 2, 3].into_iter().find(|b| *b != controller).unwrap();
    let mut conn = KafkaConn::connect(&cluster.member(via).kafka_addr).unwrap();
    let listed = reassign::list(&mut conn, None).unwrap();
    assert!(
        listed.is_empty() || listed == moving,
        "the move is in progress or done, never something else: {listed:?}"
    );
    cluster.node(controller).restart();

    // The partition's leader dies: a new one from the ISR serves the copy.
    let leader = cluster.leaders(&topic)[0].expect("a leader");
    cluster.node(leader).kill9();
    wait_for("a new leader", CLUSTER_TIMEOUT, || {
        cluster.leaders(&topic)[0].is_some_and(|l| l != leader)
    });
    cluster.node(leader).restart();

    let mut conn = KafkaConn::connect(&cluster.member(4).kafka_addr).unwrap();
    wait_moved(&mut cluster, &mut conn, &topic, &[4, 2, 3]);
    let n = load.finish();
    check_all(cluster.member(4), &topic, n, ts0);
}
