//! Replication between real broker processes: RF=3 with acks=all, a leader killed with
//! SIGKILL under load, min.insync.replicas, followers rejoining the ISR, and the group
//! coordinator moving with the leadership of its replicated `__consumer_offsets` partition.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kafka_protocol::records::Compression;
use rdkafka::admin::TopicReplication;
use rdkafka::Offset;
use strata_tests::cluster::{CLUSTER_TIMEOUT, FAST};
use strata_tests::raw::decode_records;
use strata_tests::{
    block_on, encode_batch, now_ms, unique_topic, wait_for, wait_for_some, Cluster, KafkaConn,
    RawRecord, TrackingProducer,
};

const NOT_ENOUGH_REPLICAS: i16 = 19;
const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i16 = 20;
const REQUEST_TIMED_OUT: i16 = 7;

#[test]
fn acks_all_records_survive_the_leader_being_killed_and_every_replica_converges() {
    let mut cluster = Cluster::start(3, 3, FAST);
    cluster.wait_controller();
    let topic = unique_topic("rf3");
    cluster.create_replicated_topic(
        &topic,
        2,
        TopicReplication::Fixed(3),
        &[("min.insync.replicas", "2")],
    );

    let cfg = cluster.producer_config();
    let producer = TrackingProducer::new(&cfg);
    let total = 4000;
    // Record `i` has key and value `k{i}` and goes to partition `i % 2`.
    let send = |range: std::ops::Range<usize>| {
        for i in range {
            let key = format!("k{i}");
            let partition = Some((i % 2) as i32);
            producer.send(
                i,
                &topic,
                partition,
                key.as_bytes(),
                key.as_bytes(),
                &[],
                None,
            );
        }
    };
    send(0..total / 2);
    producer.flush(Duration::from_secs(60));
    assert_eq!(producer.acked_count(), total / 2);

    // Kill the leader of partition 0 and keep producing: the clients move to the new leader.
    let leader = cluster.leaders(&topic)[0].expect("a leader");
    cluster.node(leader).kill9();
    send(total / 2..total);
    producer.flush(Duration::from_secs(90));
    let acked = producer.all_delivered(total);
    let new_leader = cluster.leaders(&topic)[0].expect("a new leader");
    assert_ne!(new_leader, leader);

    // Every acknowledged record is there, in acknowledged order per partition.
    let reader = (1..=3).find(|n| *n != leader).expect("a live node");
    let got = cluster.node(reader).consume_until(
        &topic,
        &[(0, Offset::Offset(0)), (1, Offset::Offset(0))],
        CLUSTER_TIMEOUT,
        |r| r.len() >= total,
    );
    let by_offset: BTreeMap<(i32, i64), Vec<u8>> = got
        .iter()
        .map(|r| ((r.partition, r.offset), r.key.clone().expect("key")))
        .collect();
    for (i, (p, off)) in acked.iter().enumerate() {
        assert_eq!(
            by_offset.get(&(*p, *off)).map(|k| k.as_slice()),
            Some(format!("k{i}").as_bytes()),
            "acknowledged record {i} at {p}/{off}"
        );
    }
    for p in 0..2 {
        let offsets: Vec<i64> = acked
            .iter()
            .filter(|(q, _)| *q == p)
            .map(|(_, o)| *o)
            .collect();
        assert!(
            offsets.windows(2).all(|w| w[0] < w[1]),
            "acknowledged order in partition {p}"
        );
    }

    // The killed broker comes back, truncates what it must, catches up and rejoins the ISR.
    cluster.node(leader).restart();
    cluster.wait_topic_healthy(&topic);
    let ends: BTreeSet<(i64, i64)> = [1u64, 2, 3]
        .iter()
        .map(|n| {
            let b = cluster.node(*n);
            let text = b.metrics();
            let end = |p: &str| {
                strata_tests::parse_prometheus(&text)
                    .into_iter()
                    .find(|s| {
                        s.name == "strata_log_end_offset"
                            && s.label("topic") == Some(topic.as_str())
                            && s.label("partition") == Some(p)
                    })
                    .map(|s| s.value as i64)
                    .unwrap_or(-1)
            };
            (end("0"), end("1"))
        })
        .collect();
    assert_eq!(
        ends.len(),
        1,
        "every replica has the same log end: {ends:?}"
    );
    for n in 1..=3 {
        let out = cluster.node(n).output();
        assert!(
            !out.contains("appending replicated batches failed"),
            "node {n} failed to append what it fetched"
        );
    }
    // The rejoin is an ISR expand, committed by a leader and counted there.
    let expands: f64 = (1..=3)
        .map(|n| {
            strata_tests::parse_prometheus(&cluster.node(n).metrics())
                .into_iter()
                .filter(|s| {
                    s.name == "strata_isr_changes_total" && s.label("change") == Some("expand")
                })
                .map(|s| s.value)
                .sum::<f64>()
        })
        .sum();
    assert!(expands >= 1.0, "ISR expands counted: {expands}");
}

#[test]
fn acks_all_is_refused_below_min_insync_replicas() {
    // Voters 1-3; the partition lives on 1 (leader), 4 and 5, so killing both followers
    // leaves the metadata quorum able to shrink the ISR.
    let mut cluster = Cluster::start(5, 3, FAST);
    cluster.wait_controller();
    let topic = unique_topic("min-isr");
    cluster.create_replicated_topic(
        &topic,
        1,
        TopicReplication::Variable(&[&[1, 4, 5]]),
        &[("min.insync.replicas", "2")],
    );
    assert_eq!(cluster.leaders(&topic)[0], Some(1));
    let mut conn = KafkaConn::connect(&cluster.node(1).kafka_addr.clone()).unwrap();
    let batch = |i: i64| {
        encode_batch(
            &[RawRecord::new(format!("k{i}"), "v", now_ms())],
            Compression::None,
            None,
        )
    };
    // The leader may still be opening the partition it was just given.
    wait_for("node 1 to take writes", CLUSTER_TIMEOUT, || {
        conn.produce(&topic, 0, batch(0))
            .expect("produce")
            .error_code
            == 0
    });

    // Both followers die: once fenced they leave the ISR, and acks=all is refused.
    cluster.node(4).kill9();
    cluster.node(5).kill9();
    wait_for("the ISR to shrink to the leader", CLUSTER_TIMEOUT, || {
        conn.produce(&topic, 0, batch(1))
            .expect("produce")
            .error_code
            == NOT_ENOUGH_REPLICAS
    });
    // A follower back: the ISR grows again and writes are accepted.
    cluster.node(4).restart();
    wait_for("the ISR to grow back", CLUSTER_TIMEOUT, || {
        conn.produce(&topic, 0, batch(2))
            .expect("produce")
            .error_code
            == 0
    });
}

#[test]
fn an_offline_partition_stays_offline_unless_unclean_election_is_allowed_and_the_loss_shows() {
    // Voters 1-3; the partition lives on learners 4 (leader) and 5, so killing both keeps the
    // metadata quorum.
    let mut cluster = Cluster::start(5, 3, FAST);
    cluster.wait_controller();
    let topic = unique_topic("unclean");
    cluster.create_replicated_topic(
        &topic,
        1,
        TopicReplication::Variable(&[&[4, 5]]),
        &[("min.insync.replicas", "1")],
    );
    let batch = |i: i64| {
        encode_batch(
            &[RawRecord::new(format!("k{i}"), "v", now_ms())],
            Compression::None,
            None,
        )
    };
    let leader_addr = cluster.node(4).kafka_addr.clone();
    let mut conn = KafkaConn::connect(&leader_addr).unwrap();
    // The leader may still be opening the partition it was just given (a retriable
    // NOT_LEADER_OR_FOLLOWER, as a client sees it).
    wait_for("node 4 to take writes", CLUSTER_TIMEOUT, || {
        conn.produce(&topic, 0, batch(0))
            .expect("produce")
            .error_code
            == 0
    });
    for i in 1..10 {
        conn.produce_ok(&topic, 0, batch(i)).expect("both replicas");
    }
    // 5 dies and leaves the ISR; 4 alone acknowledges ten more; then 4 dies too.
    cluster.node(5).kill9();
    wait_for("the ISR to shrink to 4", CLUSTER_TIMEOUT, || {
        cluster.unhealthy(1, &topic) == Some(("under_replicated".to_string(), Some(4)))
    });
    for i in 10..20 {
        conn.produce_ok(&topic, 0, batch(i)).expect("4 alone");
    }
    cluster.node(4).kill9();
    wait_for("the partition to go offline", CLUSTER_TIMEOUT, || {
        cluster
            .unhealthy(1, &topic)
            .is_some_and(|(s, _)| s == "offline")
    });
    cluster.node(5).restart();
    // 5 is back but was not in sync: with unclean election off the partition stays offline.
    assert!(
        !strata_tests::wait_until(Duration::from_secs(3), || {
            cluster
                .unhealthy(1, &topic)
                .is_none_or(|(s, _)| s != "offline")
        }),
        "the partition must stay offline"
    );
    assert_eq!(
        cluster.node(1).metric("strata_unclean_leader_elections"),
        0.0
    );

    // Allowed: 5 leads, and the ten records only 4 had are gone, visibly.
    let out = std::process::Command::new(strata_tests::strata_bin())
        .args([
            "topic",
            "alter",
            &topic,
            "-b",
            &cluster.node(1).kafka_addr.clone(),
        ])
        .args(["-c", "unclean.leader.election.enable=true"])
        .output()
        .expect("strata topic alter");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for("an unclean election", CLUSTER_TIMEOUT, || {
        cluster.leaders(&topic).first().copied().flatten() == Some(5)
    });
    assert_eq!(
        cluster.node(2).metric("strata_unclean_leader_elections"),
        1.0
    );
    let (_, high) = cluster.node(5).watermarks(&topic, 0);
    assert_eq!(high, 10, "records 10..20 were only on 4");

    // 4 returns, drops the suffix 5 does not have, and the replicas converge.
    cluster.node(4).restart();
    cluster.wait_topic_healthy(&topic);
    let mut conn = KafkaConn::connect(&cluster.node(5).kafka_addr.clone()).unwrap();
    assert_eq!(
        conn.produce_ok(&topic, 0, batch(99)).expect("new leader"),
        10
    );
}

/// The broker FindCoordinator names for `group`, asked through `via`, other than `not`
/// (retried while the coordinator is moving).
fn find_coordinator(cluster: &mut Cluster, via: u64, group: &str, not: Option<u64>) -> u64 {
    use kafka_protocol::messages::FindCoordinatorRequest;
    use kafka_protocol::protocol::StrBytes;
    let addr = cluster.node(via).kafka_addr.clone();
    wait_for_some("a group coordinator", CLUSTER_TIMEOUT, || {
        let mut conn = KafkaConn::connect(&addr).ok()?;
        let req = FindCoordinatorRequest::default()
            .with_key(StrBytes::from_string(group.to_string()))
            .with_key_type(0);
        let resp = conn.request(3, &req).ok()?;
        let id = resp.node_id.0 as u64;
        (resp.error_code == 0 && Some(id) != not).then_some(id)
    })
}

/// Committed offsets of `group` on `topic`'s partitions, summed (a partition without a commit
/// counts 0), as a client that does not join sees them; `None` while any is unreadable.
fn committed_total(
    cluster: &mut Cluster,
    group: &str,
    topic: &str,
    partitions: i32,
) -> Option<i64> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let mut cfg = cluster.consumer_config();
    cfg.set("group.id", group);
    let consumer: BaseConsumer = cfg.create().ok()?;
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let got = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .ok()?;
    got.elements()
        .iter()
        .map(|e| match e.offset() {
            _ if e.error().is_err() => None,
            Offset::Offset(o) => Some(o),
            // Nothing committed for this partition (the member may not have read it yet).
            Offset::Invalid => Some(0),
            _ => None,
        })
        .sum()
}

/// Receives `n` records and appends their keys.
async fn recv_keys(
    consumer: &rdkafka::consumer::StreamConsumer,
    keys: &mut Vec<Vec<u8>>,
    n: usize,
) {
    use rdkafka::Message;
    for _ in 0..n {
        let m = tokio::time::timeout(CLUSTER_TIMEOUT, consumer.recv())
            .await
            .expect("records within the timeout")
            .expect("record");
        keys.push(m.key().expect("key").to_vec());
    }
}

#[test]
fn the_group_coordinator_moves_with_its_offsets_partition_and_keeps_every_acknowledged_commit() {
    use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
    let mut cluster = Cluster::start(3, 3, FAST);
    cluster.wait_controller();
    let topic = unique_topic("coord");
    cluster.create_replicated_topic(
        &topic,
        3,
        TopicReplication::Fixed(3),
        &[("min.insync.replicas", "2")],
    );
    let producer = TrackingProducer::new(&cluster.producer_config());
    for i in 0..900 {
        let key = format!("k{i}");
        producer.send(i, &topic, None, key.as_bytes(), key.as_bytes(), &[], None);
    }
    producer.flush(Duration::from_secs(60));
    producer.all_delivered(900);

    let group = unique_topic("coord-group");
    let mut cfg = cluster.consumer_config();
    cfg.set("group.id", &group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "true")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "10000")
        .set("heartbeat.interval.ms", "500");
    let mut keys = Vec::new();
    let (old, new) = block_on(async {
        // StreamConsumer needs the runtime to exist when it is created.
        let consumer: StreamConsumer = cfg.create().expect("consumer");
        consumer.subscribe(&[&topic]).expect("subscribe");
        recv_keys(&consumer, &mut keys, 600).await;
        consumer
            .commit_consumer_state(CommitMode::Sync)
            .expect("commit");

        // The coordinator dies right after acknowledging: the commit is on the ISR of its
        // offsets partition, and the new leader of that partition coordinates the group.
        let old = find_coordinator(&mut cluster, 1, &group, None);
        cluster.node(old).kill9();
        let via = (1..=3).find(|n| *n != old).unwrap();
        let new = find_coordinator(&mut cluster, via, &group, Some(old));
        wait_for(
            "the commit, read from the new coordinator",
            CLUSTER_TIMEOUT,
            || committed_total(&mut cluster, &group, &topic, 3) == Some(600),
        );

        // The same member goes on and commits through the new coordinator.
        recv_keys(&consumer, &mut keys, 300).await;
        consumer
            .commit_consumer_state(CommitMode::Sync)
            .expect("commit through the new coordinator");
        (old, new)
    });
    let unique: BTreeSet<&Vec<u8>> = keys.iter().collect();
    assert_eq!(unique.len(), 900, "every record once, none again");
    assert_eq!(committed_total(&mut cluster, &group, &topic, 3), Some(900));

    // The old coordinator returns as a follower of the offsets partition; the group stays
    // with the new one.
    cluster.node(old).restart();
    cluster.wait_topic_healthy("__consumer_offsets");
    assert_eq!(find_coordinator(&mut cluster, old, &group, None), new);
    assert_eq!(committed_total(&mut cluster, &group, &topic, 3), Some(900));
}

/// KIP-848: a consumer-protocol group's records replicate with `__consumer_offsets`; when
/// its coordinator is killed, the new leader of the partition restores the group at the same
/// epochs and the librdkafka member carries on without a rebalance, reading every record once.
#[test]
fn a_consumer_protocol_group_moves_with_its_coordinator_without_a_rebalance() {
    use kafka_protocol::messages::{ConsumerGroupDescribeRequest, GroupId};
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::Message;
    let mut cluster = Cluster::start(3, 3, FAST);
    cluster.wait_controller();
    let topic = unique_topic("kip848-coord");
    cluster.create_replicated_topic(
        &topic,
        3,
        TopicReplication::Fixed(3),
        &[("min.insync.replicas", "2")],
    );
    let producer = TrackingProducer::new(&cluster.producer_config());
    let produce = |from: usize, to: usize| {
        for i in from..to {
            let key = format!("k{i}");
            producer.send(i, &topic, None, key.as_bytes(), key.as_bytes(), &[], None);
        }
        producer.flush(Duration::from_secs(60));
        producer.all_delivered(to);
    };
    produce(0, 300);
    let group = unique_topic("kip848-coord-group");
    let mut cfg = cluster.consumer_config();
    cfg.set("group.id", &group)
        .set("group.protocol", "consumer")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest");
    let consumer: BaseConsumer = cfg.create().expect("consumer");
    consumer.subscribe(&[&topic]).expect("subscribe");
    let mut keys = BTreeSet::new();
    let read = |n: usize, keys: &mut BTreeSet<Vec<u8>>| {
        wait_for("records read", CLUSTER_TIMEOUT, || {
            while let Some(Ok(m)) = consumer.poll(Duration::from_millis(50)) {
                assert!(keys.insert(m.key().expect("key").to_vec()), "read twice");
            }
            keys.len() >= n
        });
    };
    read(300, &mut keys);
    let describe = |cluster: &mut Cluster, node: u64| {
        let mut conn = KafkaConn::connect(&cluster.node(node).kafka_addr).ok()?;
        let request = ConsumerGroupDescribeRequest::default()
            .with_group_ids(vec![GroupId(group.clone().into())]);
        let g = conn.request(1, &request).ok()?.groups.into_iter().next()?;
        let member = g.members.first()?;
        (g.error_code == 0).then(|| {
            (
                g.group_epoch,
                member.member_id.to_string(),
                member.member_epoch,
            )
        })
    };
    let old = find_coordinator(&mut cluster, 1, &group, None);
    let before = describe(&mut cluster, old).expect("described");

    cluster.node(old).kill9();
    let via = (1..=3).find(|n| *n != old).unwrap();
    let after = wait_for_some("the group at its new coordinator", CLUSTER_TIMEOUT, || {
        let new = find_coordinator(&mut cluster, via, &group, Some(old));
        describe(&mut cluster, new)
    });
    assert_eq!(after, before, "restored at the same epochs");
    produce(300, 600);
    read(600, &mut keys);
    let new = find_coordinator(&mut cluster, via, &group, Some(old));
    assert_eq!(
        describe(&mut cluster, new),
        Some(before),
        "no rebalance: the member carried on at its epoch"
    );
}

#[test]
fn pipelined_acks_all_produces_on_one_connection_are_appended_and_answered_in_order() {
    let mut cluster = Cluster::start(3, 3, FAST);
    cluster.wait_controller();
    let topic = unique_topic("pipelined");
    const PARTITIONS: i32 = 8;
    let on_node_1: Vec<&[i32]> = vec![&[1, 2, 3]; PARTITIONS as usize];
    cluster.create_replicated_topic(
        &topic,
        PARTITIONS,
        TopicReplication::Variable(&on_node_1),
        &[("min.insync.replicas", "2")],
    );
    let addr = cluster.node(1).kafka_addr.clone();
    let mut conn = KafkaConn::connect(&addr).unwrap();
    let batch = |key: String| {
        encode_batch(
            &[RawRecord::new(key, "v", now_ms())],
            Compression::None,
            None,
        )
    };
    // The leader may still be opening the partitions it was just given.
    for p in 0..PARTITIONS {
        wait_for("node 1 to take writes", CLUSTER_TIMEOUT, || {
            conn.produce(&topic, p, batch(format!("warm-{p}")))
                .expect("produce")
                .error_code
                == 0
        });
    }
    let pipelined_before = cluster.node(1).metric("strata_produce_pipelined_total");

    // One partition per request, as librdkafka sends them, all in flight on one connection,
    // with a ListOffsets in the middle: it must see every record sent before it.
    enum Sent {
        Produce(i32, i32, String),
        ListOffsets(i32, i64),
    }
    let mut sent = Vec::new();
    let mut per_partition = vec![1i64; PARTITIONS as usize];
    for i in 0..48 {
        let p = i % PARTITIONS;
        if i == 24 {
            let id = conn.send_list_offset(&topic, 3, -1).unwrap();
            sent.push(Sent::ListOffsets(id, per_partition[3]));
        }
        let key = format!("r{i}");
        let req = KafkaConn::produce_request(&topic, p, batch(key.clone()), 10_000);
        sent.push(Sent::Produce(conn.send_produce(&req).unwrap(), p, key));
        per_partition[p as usize] += 1;
    }
    // Answers come in the order sent (recv checks each correlation id), and each partition's
    // offsets in the order its requests were sent.
    let mut next = vec![1i64; PARTITIONS as usize];
    let mut keys = BTreeMap::new();
    for s in sent {
        match s {
            Sent::Produce(id, p, key) => {
                let a = conn.produce_answer(id, &topic, p).unwrap();
                assert_eq!(a.error_code, 0, "{key}: {:?}", a.error_message);
                assert_eq!(a.base_offset, next[p as usize], "{key} out of order");
                next[p as usize] += 1;
                keys.insert((p, a.base_offset), key);
            }
            Sent::ListOffsets(id, expected) => {
                let (code, end, _) = conn.list_offset_answer(id).unwrap();
                assert_eq!((code, end), (0, expected));
            }
        }
    }
    assert!(
        cluster.node(1).metric("strata_produce_pipelined_total") > pipelined_before,
        "no produce was appended while an earlier one waited for its ISR"
    );
    // Every record is where its answer said.
    for p in 0..PARTITIONS {
        let resp = conn.fetch(&topic, p, 0, 100).unwrap();
        let records = resp.responses[0].partitions[0]
            .records
            .clone()
            .expect("records");
        let got: BTreeMap<i64, String> = decode_records(records)
            .unwrap()
            .into_iter()
            .map(|r| (r.offset, String::from_utf8(r.key.unwrap()).unwrap()))
            .collect();
        for ((_, offset), key) in keys.range((p, 0)..(p + 1, 0)) {
            assert_eq!(got.get(offset), Some(key), "{topic}-{p} offset {offset}");
        }
    }

    // Both followers die: pipelined acks=all produces fail as the ISR says (timed out while
    // the dead replicas are still in it, refused once it shrinks), still answered in order on
    // the same connection.
    cluster.node(2).kill9();
    cluster.node(3).kill9();
    let ids: Vec<_> = (0..PARTITIONS)
        .map(|p| {
            let req = KafkaConn::produce_request(&topic, p, batch(format!("late-{p}")), 1_000);
            (conn.send_produce(&req).unwrap(), p)
        })
        .collect();
    for (id, p) in ids {
        let a = conn.produce_answer(id, &topic, p).unwrap();
        assert!(
            [
                REQUEST_TIMED_OUT,
                NOT_ENOUGH_REPLICAS,
                NOT_ENOUGH_REPLICAS_AFTER_APPEND
            ]
            .contains(&a.error_code),
            "{topic}-{p}: {} {:?}",
            a.error_code,
            a.error_message
        );
    }
    let (code, _, _) = conn.list_offset(&topic, 0, -1).unwrap();
    assert_eq!(code, 0, "the connection still serves");
}
