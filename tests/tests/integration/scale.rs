//! Partition scale: a broker holding thousands of partitions serves a consumer group over all
//! of them (librdkafka: full fetches naming every partition) with every record exactly once,
//! and keeps every acknowledged record across a kill -9 and a clean restart; followers of a
//! 3-node cluster replicate thousands of partitions and keep their ISR full.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rdkafka::admin::TopicReplication;
use strata_tests::cluster::FAST;
use strata_tests::groups::{unique_group, Member};
use strata_tests::{unique_topic, wait_for, Broker, BrokerOpts, Cluster, TrackingProducer};

const PARTITIONS: i32 = 2_000;

/// The records a consumer group reads from `topic`, by (partition, offset), once each: a
/// second copy of any record fails the test.
fn read_as_group(broker: &Broker, topic: &str, expected: usize) -> BTreeMap<(i32, i64), String> {
    let member = Member::start("scale", broker.group_config(&unique_group("scale")), topic);
    wait_for(
        &format!("the group to read {expected} records"),
        Duration::from_secs(180),
        || member.record_count() >= expected,
    );
    let records = member.close();
    let mut seen = BTreeMap::new();
    for r in records {
        let value = String::from_utf8(r.value.clone().unwrap_or_default()).expect("utf-8 value");
        let previous = seen.insert((r.partition, r.offset), value);
        assert!(
            previous.is_none(),
            "{}/{} delivered twice",
            r.partition,
            r.offset
        );
    }
    seen
}

#[test]
fn thousands_of_partitions_are_read_exactly_once_and_survive_kill_and_restart() {
    // Fewer open segment files than partitions: appends, reads and recovery go through
    // files the cache evicted and reopens.
    let mut broker =
        Broker::start(BrokerOpts::new().env("STRATA_MAX_OPEN_SEGMENT_FILES", OPEN_FILES));
    let topic = unique_topic("scale");
    broker.create_topic(&topic, PARTITIONS, &[]).unwrap();
    let mut acked = broker.produce_to_each(&topic, PARTITIONS, 2, "before");
    assert_eq!(acked.len(), 2 * PARTITIONS as usize);
    assert_eq!(read_as_group(&broker, &topic, acked.len()), acked);
    assert_files_bounded(&broker);

    // kill -9: nothing flushed but what the page cache holds; every acknowledged record is
    // still there, and the partitions take new writes.
    broker.kill9();
    broker.restart();
    acked.extend(broker.produce_to_each(&topic, PARTITIONS, 1, "after-kill"));
    assert_eq!(read_as_group(&broker, &topic, acked.len()), acked);

    // A clean restart opens every log without rescanning it.
    broker.terminate();
    broker.restart();
    assert_eq!(read_as_group(&broker, &topic, acked.len()), acked);
    for p in [0, PARTITIONS / 2, PARTITIONS - 1] {
        assert_eq!(broker.watermarks(&topic, p), (0, 3), "partition {p}");
    }
    assert_files_bounded(&broker);
}

const OPEN_FILES: usize = 256;

/// The broker holds at most `OPEN_FILES` segment files, far fewer descriptors than it has
/// partitions, and got there by reopening evicted files.
fn assert_files_bounded(broker: &Broker) {
    let open = broker.metric("strata_open_segment_files");
    assert!(open <= OPEN_FILES as f64, "{open} segment files open");
    assert!(broker.metric("strata_segment_file_reopens_total") > 0.0);
    let fds = broker.metric("strata_process_open_fds");
    assert!(
        fds < f64::from(PARTITIONS),
        "{fds} descriptors for {PARTITIONS} partitions"
    );
}

#[test]
fn followers_replicate_thousands_of_partitions_and_the_isr_stays_full() {
    let mut cluster = Cluster::start(3, 3, FAST);
    cluster.wait_controller();
    let topic = unique_topic("scale-rf3");
    cluster.create_replicated_topic(
        &topic,
        PARTITIONS,
        TopicReplication::Fixed(3),
        &[("min.insync.replicas", "2")],
    );
    let producer = TrackingProducer::new(&cluster.producer_config().set("acks", "all").clone());
    let send = |producer: &TrackingProducer, round: usize| {
        for p in 0..PARTITIONS {
            let i = round * PARTITIONS as usize + p as usize;
            let key = format!("k{i}");
            producer.send(
                i,
                &topic,
                Some(p),
                key.as_bytes(),
                key.as_bytes(),
                &[],
                None,
            );
        }
    };
    send(&producer, 0);
    producer.flush(Duration::from_secs(120));
    assert_eq!(producer.acked_count(), PARTITIONS as usize);
    cluster.wait_topic_healthy(&topic);

    // A follower killed and restarted truncates and catches up on every partition it holds,
    // and every partition is back to a full ISR.
    let leader0 = cluster.leaders(&topic)[0].expect("a leader");
    let follower = (1..=3).find(|n| *n != leader0).expect("a follower");
    cluster.node(follower).kill9();
    send(&producer, 1);
    producer.flush(Duration::from_secs(120));
    assert_eq!(producer.acked_count(), 2 * PARTITIONS as usize);
    cluster.node(follower).restart();
    cluster.wait_topic_healthy(&topic);
    let consumed = cluster.any_running().consume_n(
        &topic,
        &(0..PARTITIONS).collect::<Vec<_>>(),
        2 * PARTITIONS as usize,
        Duration::from_secs(120),
    );
    assert_eq!(consumed.len(), 2 * PARTITIONS as usize);
    let keys: BTreeSet<_> = consumed.iter().filter_map(|r| r.key.clone()).collect();
    assert_eq!(
        keys.len(),
        2 * PARTITIONS as usize,
        "a record read twice or lost"
    );

    // Idle, every follower stays in every ISR though its incremental fetches name no
    // partition: the leader counts it caught up from its periodic full report. Watched over
    // three replica_lag_time_max_ms (2 s here) of the followers' long polls.
    let shrinks = |cluster: &mut Cluster| -> f64 {
        (1..=3)
            .map(|n| {
                cluster
                    .node(n)
                    .metric_labelled("strata_isr_changes_total", "change", "shrink")
            })
            .sum()
    };
    let incremental = |cluster: &mut Cluster| -> f64 {
        (1..=3)
            .map(|n| cluster.node(n).metric("strata_fetch_incremental_total"))
            .sum()
    };
    let shrunk_before = shrinks(&mut cluster);
    let started = std::time::Instant::now();
    let fetched_before = incremental(&mut cluster);
    wait_for(
        "idle follower fetches over three lag limits",
        Duration::from_secs(60),
        || {
            started.elapsed() > Duration::from_secs(6)
                && incremental(&mut cluster) > fetched_before + 12.0
        },
    );
    assert_eq!(
        shrinks(&mut cluster),
        shrunk_before,
        "an idle follower left an ISR"
    );
}
