//! A network partition, not a crash: the leader of a partition is cut off from the other
//! members (raft and replication) while clients still reach it. It keeps appending what
//! clients send, but can acknowledge none of it with acks=all; the majority elects a new
//! leader and goes on; after healing, the old leader truncates its divergent suffix and its
//! log matches the new leader's byte for byte.

use std::path::Path;
use std::time::Duration;

use kafka_protocol::records::Compression;
use rdkafka::admin::TopicReplication;
use rdkafka::Offset;
use strata_tests::cluster::{CLUSTER_TIMEOUT, FAST};
use strata_tests::{
    encode_batch, now_ms, unique_topic, wait_for, wait_for_some, Cluster, KafkaConn, RawRecord,
    TrackingProducer,
};

/// Answers an isolated leader may give an acks=all write: it timed out waiting for the
/// followers, or the ISR (as it last knew it) is too small. Never success.
const REQUEST_TIMED_OUT: i16 = 7;
const NOT_ENOUGH_REPLICAS: i16 = 19;
const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i16 = 20;
const NOT_LEADER_OR_FOLLOWER: i16 = 6;

/// Every `.log` segment of `topic`-0 under `data_dir`, concatenated in offset order.
fn log_bytes(data_dir: &Path, topic: &str) -> Vec<u8> {
    let dir = data_dir.join(format!("{topic}-0"));
    let mut segments: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    segments.sort();
    segments
        .iter()
        .flat_map(|p| std::fs::read(p).expect("read segment"))
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn an_isolated_leader_acknowledges_nothing_and_is_truncated_to_the_new_leader_after_healing() {
    let (mut cluster, split) = Cluster::start_splittable(3, FAST);
    cluster.wait_controller();
    let topic = unique_topic("split");
    cluster.create_replicated_topic(
        &topic,
        1,
        TopicReplication::Fixed(3),
        &[("min.insync.replicas", "2")],
    );
    let old = cluster.leaders(&topic)[0].expect("a leader");
    let batch = |value: String| {
        encode_batch(
            &[RawRecord::new(value.clone(), value, now_ms())],
            Compression::None,
            None,
        )
    };
    let mut conn = KafkaConn::connect(&cluster.node(old).kafka_addr.clone()).unwrap();
    wait_for("the leader to take writes", CLUSTER_TIMEOUT, || {
        conn.produce(&topic, 0, batch("before-0".into()))
            .expect("produce")
            .error_code
            == 0
    });
    for i in 1..50 {
        conn.produce_ok(&topic, 0, batch(format!("before-{i}")))
            .expect("acks=all with every member connected");
    }

    // Cut the leader off. Three acks=all writes go to it at once: it appends them (clients
    // still reach it) but no follower can fetch them, so none may be acknowledged.
    split.isolate(old, 3);
    let sent: Vec<i32> = (0..3)
        .map(|i| {
            let req = KafkaConn::produce_request(&topic, 0, batch(format!("isolated-{i}")), 8_000);
            conn.send_produce(&req).expect("send")
        })
        .collect();
    let mut deposed = false;
    for id in sent {
        let answer = conn.produce_answer(id, &topic, 0).expect("an answer");
        // Already told it no longer leads: that write was refused before the append.
        deposed |= answer.error_code == NOT_LEADER_OR_FOLLOWER;
        eprintln!(
            "isolated leader {old} answered {} ({:?})",
            answer.error_code, answer.error_message
        );
        assert!(
            [
                REQUEST_TIMED_OUT,
                NOT_ENOUGH_REPLICAS,
                NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                NOT_LEADER_OR_FOLLOWER
            ]
            .contains(&answer.error_code),
            "an isolated leader answered {} ({:?}) to an acks=all write",
            answer.error_code,
            answer.error_message
        );
    }
    let isolated_log = log_bytes(cluster.node(old).data_dir(), &topic);
    assert!(
        deposed || contains(&isolated_log, b"isolated-2"),
        "the isolated leader appended the writes it could not acknowledge"
    );

    // The majority fences the old leader and elects another from the ISR.
    let majority: Vec<u64> = (1..=3).filter(|n| *n != old).collect();
    let new = wait_for_some("a new leader on the majority side", CLUSTER_TIMEOUT, || {
        cluster
            .unhealthy(majority[0], &topic)
            .and_then(|(_, leader)| leader)
            .filter(|l| *l != old)
    });
    // Writes acknowledged on the majority side, by a client that knows only its members.
    let mut cfg = cluster.producer_config();
    let bootstrap: Vec<String> = majority
        .iter()
        .map(|n| cluster.node(*n).kafka_addr.clone())
        .collect();
    cfg.set("bootstrap.servers", bootstrap.join(","));
    let producer = TrackingProducer::new(&cfg);
    for i in 0..50 {
        let v = format!("after-{i}");
        producer.send(i, &topic, Some(0), v.as_bytes(), v.as_bytes(), &[], None);
    }
    producer.flush(Duration::from_secs(60));
    producer.all_delivered(50);
    assert!(split.refused() > 0, "the cut closed member connections");

    // Heal: the old leader learns it was replaced, truncates its suffix, catches up and
    // rejoins the ISR.
    split.heal();
    cluster.wait_topic_healthy(&topic);
    assert_eq!(cluster.leaders(&topic)[0], Some(new));

    // Exactly the acknowledged records, in order; nothing written during the cut.
    let got =
        cluster
            .node(new)
            .consume_until(&topic, &[(0, Offset::Offset(0))], CLUSTER_TIMEOUT, |r| {
                r.len() >= 100
            });
    let values: Vec<String> = got
        .iter()
        .map(|r| String::from_utf8(r.value.clone().expect("value")).unwrap())
        .collect();
    let expected: Vec<String> = (0..50)
        .map(|i| format!("before-{i}"))
        .chain((0..50).map(|i| format!("after-{i}")))
        .collect();
    assert_eq!(values, expected);

    // Every replica holds the same bytes: the old leader's suffix is gone, replaced by what
    // the new leader wrote, batch for batch.
    wait_for(
        "the old leader to converge byte for byte",
        CLUSTER_TIMEOUT,
        || {
            let reference = log_bytes(cluster.node(new).data_dir(), &topic);
            (1..=3).all(|n| log_bytes(cluster.node(n).data_dir(), &topic) == reference)
        },
    );
    let healed = log_bytes(cluster.node(old).data_dir(), &topic);
    assert!(!contains(&healed, b"isolated-"));
    assert!(contains(&healed, b"after-49"));
    let out = cluster.node(old).output();
    assert!(
        out.contains("truncating the divergent suffix"),
        "the old leader logged its truncation"
    );
}

/// The controller's host vanishes (its addresses hang connections, as a terminated instance's
/// do) while it leads a partition. The survivors elect a new controller and keep their
/// sessions: a heartbeat held by the vanished controller is dropped for the new one as soon
/// as it is known, so no live broker is fenced, the partition's ISR keeps both survivors and
/// one of them leads it, with every acknowledged record. (A survivor fenced first would have
/// left the dead broker alone in the ISR: the partition offline until it came back.)
#[test]
fn a_vanished_controller_leading_a_partition_is_replaced_and_no_survivor_is_fenced() {
    let (mut cluster, split) = Cluster::start_splittable(3, FAST);
    let victim = cluster.wait_controller();
    let survivors: Vec<u64> = (1..=3).filter(|n| *n != victim).collect();
    let topic = unique_topic("vanish");
    let replicas: Vec<i32> = std::iter::once(victim)
        .chain(survivors.iter().copied())
        .map(|n| n as i32)
        .collect();
    cluster.create_replicated_topic(&topic, 1, TopicReplication::Variable(&[&replicas]), &[]);
    let producer = TrackingProducer::new(&cluster.producer_config());
    for i in 0..200 {
        let v = format!("v{i}");
        producer.send(i, &topic, Some(0), b"k", v.as_bytes(), &[], None);
    }
    producer.flush(Duration::from_secs(60));
    producer.all_delivered(200);
    assert_eq!(cluster.leaders(&topic)[0], Some(victim));

    split.vanish(victim);
    cluster.node(victim).kill9();
    let (state, isr) = wait_for_some("a survivor to lead the partition", CLUSTER_TIMEOUT, || {
        let body = cluster
            .node(survivors[0])
            .admin_get("/v1/cluster")
            .ok()?
            .body;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let p = v["unhealthy"]
            .as_array()?
            .iter()
            .find(|p| p["topic"] == topic.as_str())?
            .clone();
        let leader = p["leader"].as_u64()?;
        (leader != victim).then(|| (p["state"].to_string(), p["isr"].to_string()))
    });
    assert_eq!(state, "\"under_replicated\"");
    assert_eq!(
        isr,
        serde_json::json!(survivors).to_string(),
        "both survivors stayed in the ISR"
    );
    let new_controller = cluster.wait_controller();
    let out = cluster.node(new_controller).output();
    for s in &survivors {
        let fenced = format!("broker={s} ");
        assert!(
            !out.lines()
                .any(|l| l.contains("fencing it") && l.contains(&fenced)),
            "survivor {s} was fenced:\n{out}"
        );
    }

    let got = cluster.node(survivors[0]).consume_until(
        &topic,
        &[(0, Offset::Offset(0))],
        CLUSTER_TIMEOUT,
        |r| r.len() >= 200,
    );
    let values: Vec<String> = got
        .iter()
        .map(|r| String::from_utf8(r.value.clone().expect("value")).unwrap())
        .collect();
    assert_eq!(
        values,
        (0..200).map(|i| format!("v{i}")).collect::<Vec<_>>()
    );
}
