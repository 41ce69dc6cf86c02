//! Several log directories (JBOD, Kafka's `log.dirs`): new partitions go to the directory
//! holding the fewest, a restart finds each where it is, DescribeLogDirs lists every
//! directory; a directory that fails while the broker runs (its files removed) takes only its
//! own partitions offline — the broker keeps serving the others, says which directory failed
//! (metric, DescribeLogDirs, `strata cluster status`), and in a cluster the controller moves
//! those partitions' leadership to in-sync replicas with nothing acknowledged lost (KIP-858).
//! A directory that fills up has not failed: produce is refused until space returns, reads go
//! on, and no batch is torn.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kafka_protocol::messages::describe_log_dirs_response::DescribeLogDirsResult;
use kafka_protocol::messages::DescribeLogDirsRequest;
use rdkafka::admin::TopicReplication;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::Offset;
use strata_tests::cluster::{free_port, CLUSTER_TIMEOUT, FAST};
use strata_tests::{
    strata_bin, unique_topic, wait_for, Broker, BrokerOpts, Cluster, KafkaConn, TrackingProducer,
};

/// The partitions of `topic` whose directory is in log directory `dir`.
fn partitions_in(dir: &Path, topic: &str) -> BTreeSet<i32> {
    let prefix = format!("{topic}-");
    (std::fs::read_dir(dir).into_iter().flatten().flatten())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix(&prefix)?.parse().ok()
        })
        .collect()
}

fn describe_log_dirs(addr: &str) -> Vec<DescribeLogDirsResult> {
    let mut conn = KafkaConn::connect(addr).unwrap();
    let resp = conn
        .request(4, &DescribeLogDirsRequest::default().with_topics(None))
        .unwrap();
    assert_eq!(resp.error_code, 0);
    resp.results
}

/// Per log directory (as DescribeLogDirs names it, the path made absolute): its error code
/// and the partitions of `topic` it lists.
fn described(addr: &str, topic: &str) -> BTreeMap<String, (i16, BTreeSet<i32>)> {
    (describe_log_dirs(addr).into_iter())
        .map(|r| {
            let parts = (r.topics.iter())
                .filter(|t| t.name.0.as_str() == topic)
                .flat_map(|t| t.partitions.iter().map(|p| p.partition_index))
                .collect();
            (r.log_dir.to_string(), (r.error_code, parts))
        })
        .collect()
}

fn canonical(dir: &Path) -> String {
    std::fs::canonicalize(dir).unwrap().display().to_string()
}

/// Sends `n` records to each of `partitions`; every one must be acknowledged.
fn produce_acked(
    producer: &TrackingProducer,
    topic: &str,
    partitions: &[i32],
    n: usize,
    tag: &str,
) {
    let before = producer.deliveries().len();
    for (k, p) in partitions.iter().enumerate() {
        for i in 0..n {
            let value = format!("{tag}-{p}-{i}");
            let index = before + k * n + i;
            producer.send(index, topic, Some(*p), b"k", value.as_bytes(), &[], None);
        }
    }
    producer.flush(Duration::from_secs(90));
    let new = &producer.deliveries()[before..];
    assert_eq!(new.len(), partitions.len() * n);
    let failed: Vec<_> = new.iter().filter_map(|d| d.result.as_ref().err()).collect();
    assert!(failed.is_empty(), "unacknowledged: {failed:?}");
}

/// Removes a log directory the broker is writing to (its probe may create a file between
/// the removal of the contents and of the directory: then again).
fn remove_disk(dir: &Path) {
    wait_for("the log directory removed", Duration::from_secs(10), || {
        std::fs::remove_dir_all(dir).is_ok() || !dir.exists()
    });
}

#[test]
fn partitions_spread_over_log_dirs_and_a_failed_dir_takes_only_its_own_offline() {
    let disks = tempfile::tempdir().unwrap();
    let (d1, d2) = (disks.path().join("disk1"), disks.path().join("disk2"));
    let list = format!("{},{}", d1.display(), d2.display());
    let mut broker = Broker::start(BrokerOpts::new().env("STRATA_LOG_DIRS", &list));
    let topic = unique_topic("jbod");
    broker.create_topic(&topic, 4, &[]).unwrap();
    let (on1, on2) = (partitions_in(&d1, &topic), partitions_in(&d2, &topic));
    assert_eq!((on1.len(), on2.len()), (2, 2), "{on1:?} {on2:?}");
    let dirs = described(&broker.kafka_addr, &topic);
    assert_eq!(dirs.len(), 2, "{dirs:?}");
    assert_eq!(dirs[&canonical(&d1)], (0, on1.clone()));
    assert_eq!(dirs[&canonical(&d2)], (0, on2.clone()));

    let producer = TrackingProducer::new(&broker.producer_config());
    produce_acked(&producer, &topic, &[0, 1, 2, 3], 10, "before");
    // A restart finds every partition where it was.
    broker.restart();
    assert_eq!(partitions_in(&d1, &topic), on1);
    assert_eq!(partitions_in(&d2, &topic), on2);
    let all = broker.consume_n(&topic, &[0, 1, 2, 3], 40, Duration::from_secs(30));
    assert_eq!(all.len(), 40);

    // The second disk goes away under the running broker.
    remove_disk(&d2);
    let d2_name = d2.display().to_string();
    wait_for("disk2 reported offline", Duration::from_secs(15), || {
        broker.metric_labelled("strata_log_dir_offline", "dir", &d2_name) == 1.0
    });
    assert_eq!(
        broker.metric_labelled("strata_log_dir_offline", "dir", &d1.display().to_string()),
        0.0
    );
    assert_eq!(
        broker.metric_labelled("strata_log_dir_partitions", "dir", &d2_name),
        0.0,
        "its partitions are no longer hosted"
    );
    // Its partitions (one replica each) have no leader; the other disk's serve on.
    let consumer: BaseConsumer = broker.consumer_config().create().unwrap();
    wait_for(
        "disk2's partitions without a leader",
        Duration::from_secs(15),
        || {
            let md = consumer
                .fetch_metadata(Some(&topic), Duration::from_secs(5))
                .unwrap();
            let t = &md.topics()[0];
            t.partitions().iter().all(|p| {
                let offline = on2.contains(&p.id());
                (p.error() == Some(RDKafkaRespErr::RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE))
                    == offline
            })
        },
    );
    let healthy: Vec<i32> = on1.iter().copied().collect();
    let producer = TrackingProducer::new(&broker.producer_config());
    produce_acked(&producer, &topic, &healthy, 10, "after");
    let got = broker.consume_until(
        &topic,
        &healthy
            .iter()
            .map(|p| (*p, Offset::Beginning))
            .collect::<Vec<_>>(),
        Duration::from_secs(30),
        |r| r.len() >= 40,
    );
    assert_eq!(
        got.len(),
        40,
        "the healthy disk's partitions: 20 before, 20 after"
    );

    let dirs = described(&broker.kafka_addr, &topic);
    assert_eq!(dirs[&canonical(&d1)], (0, on1.clone()));
    let (error, listed) = dirs.iter().find(|(k, _)| k.ends_with("disk2")).unwrap().1;
    assert_eq!(
        (*error, listed.len()),
        (56, 0),
        "KAFKA_STORAGE_ERROR for disk2"
    );
    let out = Command::new(strata_bin())
        .args(["cluster", "status", "--admin-addr", &broker.admin_addr])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("failed_log_dir broker=1 dir={d2_name}")),
        "{text}"
    );

    // New partitions go to the healthy disk only.
    let more = unique_topic("jbod-after");
    broker.create_topic(&more, 2, &[]).unwrap();
    assert_eq!(partitions_in(&d1, &more).len(), 2);
    broker.assert_serves_new_clients();
}

/// Broker 2 holds replicas in two log directories and leads them; the second directory is
/// removed under load: the controller hands those partitions to broker 1, the first
/// directory's stay with broker 2, and every acknowledged record is read back.
#[test]
fn a_failed_log_dir_moves_its_leaders_and_loses_nothing_acknowledged() {
    let mut cluster = Cluster::start(1, 1, FAST);
    let disks = tempfile::tempdir().unwrap();
    let (d1, d2) = (disks.path().join("disk1"), disks.path().join("disk2"));
    let list = format!("{},{}", d1.display(), d2.display());
    let raft = format!("127.0.0.1:{}", free_port());
    let two = cluster.add_member_with(&raft, &[("STRATA_LOG_DIRS", list)]);
    assert_eq!(two, 2);
    let topic = unique_topic("jbod-cluster");
    let replicas: [&[i32]; 4] = [&[2, 1], &[2, 1], &[2, 1], &[2, 1]];
    cluster.create_replicated_topic(&topic, 4, TopicReplication::Variable(&replicas), &[]);
    let on2 = partitions_in(&d2, &topic);
    assert_eq!(on2.len(), 2);
    assert_eq!(cluster.leaders(&topic), vec![Some(2); 4]);

    let mut config = cluster.producer_config();
    config.set("retries", "1000").set("retry.backoff.ms", "100");
    let producer = TrackingProducer::new(&config);
    let all = [0, 1, 2, 3];
    produce_acked(&producer, &topic, &all, 50, "before");
    remove_disk(&d2);
    // Under load while the leadership moves: librdkafka retries what the broker refuses.
    produce_acked(&producer, &topic, &all, 50, "during");
    wait_for(
        "disk2's partitions led by broker 1",
        CLUSTER_TIMEOUT,
        || {
            let leaders = cluster.leaders(&topic);
            leaders.len() == 4
                && (0..4).all(|p| leaders[p] == Some(if on2.contains(&(p as i32)) { 1 } else { 2 }))
        },
    );
    produce_acked(&producer, &topic, &all, 50, "after");

    let acked: BTreeMap<(i32, i64), usize> = (producer.deliveries().into_iter())
        .map(|d| (d.result.unwrap(), d.index))
        .collect();
    assert_eq!(acked.len(), 600);
    let got = cluster.member(1).consume_until(
        &topic,
        &all.iter()
            .map(|p| (*p, Offset::Beginning))
            .collect::<Vec<_>>(),
        Duration::from_secs(60),
        |r| r.len() >= 600,
    );
    let read: BTreeSet<(i32, i64)> = got.iter().map(|r| (r.partition, r.offset)).collect();
    let lost: Vec<_> = acked.keys().filter(|k| !read.contains(k)).collect();
    assert!(lost.is_empty(), "acknowledged but not read back: {lost:?}");
    let status = cluster.member(1).admin_get("/v1/cluster").unwrap().body;
    assert!(status.contains("disk2"), "{status}");
}

/// AlterReplicaLogDirs on one partition, raw: the partition's error code.
fn alter_replica_log_dir(addr: &str, dir: &str, topic: &str, partition: i32) -> i16 {
    use kafka_protocol::messages::alter_replica_log_dirs_request::{
        AlterReplicaLogDir, AlterReplicaLogDirTopic,
    };
    use kafka_protocol::messages::AlterReplicaLogDirsRequest;
    let req = AlterReplicaLogDirsRequest::default().with_dirs(vec![AlterReplicaLogDir::default()
        .with_path(kafka_protocol::protocol::StrBytes::from_string(
            dir.to_string(),
        ))
        .with_topics(vec![AlterReplicaLogDirTopic::default()
            .with_name(strata_tests::raw::topic_name(topic))
            .with_partitions(vec![partition])])]);
    let resp = KafkaConn::connect(addr).unwrap().request(2, &req).unwrap();
    resp.results[0].partitions[0].error_code
}

/// A partition with closed segments moves to the other log directory while a producer writes
/// to it: the copy is paced, shows as the future replica, is swapped in, and every
/// acknowledged record is read back, before and after a restart.
#[test]
fn a_replica_moves_between_log_dirs_under_load_with_nothing_lost() {
    let disks = tempfile::tempdir().unwrap();
    let (d1, d2) = (disks.path().join("disk1"), disks.path().join("disk2"));
    let list = format!("{},{}", d1.display(), d2.display());
    let mut broker = Broker::start(BrokerOpts::new().env("STRATA_LOG_DIRS", &list).env(
        "STRATA_REPLICA_ALTER_LOG_DIRS_IO_MAX_BYTES_PER_SECOND",
        2 << 20,
    ));
    let topic = unique_topic("jbod-move");
    broker
        .create_topic(&topic, 1, &[("segment.bytes", "1048576")])
        .unwrap();
    let (from, to) = match partitions_in(&d1, &topic).is_empty() {
        true => (d2.clone(), d1.clone()),
        false => (d1.clone(), d2.clone()),
    };
    let producer = TrackingProducer::new(&broker.producer_config());
    let value = vec![b'v'; 1000];
    for i in 0..6000 {
        producer.send(i, &topic, Some(0), b"k", &value, &[], None);
    }
    producer.flush(Duration::from_secs(60));

    // Refusals first: a directory the broker does not have, a partition it does not host.
    assert_eq!(
        alter_replica_log_dir(&broker.kafka_addr, "/no/such/dir", &topic, 0),
        57
    );
    assert_eq!(
        alter_replica_log_dir(&broker.kafka_addr, &canonical(&to), &topic, 9),
        9
    );

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, config, topic) = (stop.clone(), broker.producer_config(), topic.clone());
        std::thread::spawn(move || {
            let producer = TrackingProducer::new(&config);
            let mut i = 6000;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                for _ in 0..50 {
                    producer.send(
                        i,
                        &topic,
                        Some(0),
                        b"k",
                        format!("during-{i}").as_bytes(),
                        &[],
                        None,
                    );
                    i += 1;
                }
                producer.flush(Duration::from_secs(60));
            }
            producer.deliveries()
        })
    };
    assert_eq!(
        alter_replica_log_dir(&broker.kafka_addr, &canonical(&to), &topic, 0),
        0
    );
    let future_seen = strata_tests::util::wait_until(Duration::from_secs(60), || {
        describe_log_dirs(&broker.kafka_addr).iter().any(|r| {
            r.log_dir.as_str() == canonical(&to)
                && r.topics
                    .iter()
                    .any(|t| t.partitions.iter().any(|p| p.is_future_key))
        }) || partitions_in(&to, &topic).contains(&0)
    });
    assert!(future_seen);
    wait_for(
        "the replica swapped into the other directory",
        Duration::from_secs(60),
        || partitions_in(&to, &topic).contains(&0) && !from.join(format!("{topic}-0")).exists(),
    );
    stop.store(true, std::sync::atomic::Ordering::Release);
    let during = writer.join().unwrap();
    let failed: Vec<_> = during
        .iter()
        .filter_map(|d| d.result.as_ref().err())
        .collect();
    assert!(
        failed.is_empty(),
        "unacknowledged during the move: {failed:?}"
    );
    assert!(!during.is_empty());
    let leftovers: Vec<_> = (std::fs::read_dir(&to).unwrap().flatten())
        .chain(std::fs::read_dir(&from).unwrap().flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".future") || n.ends_with(".retired"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert_eq!(
        broker.metric_labelled("strata_replica_dir_moves_total", "result", "moved"),
        1.0
    );

    let expected = 6000 + during.len();
    let check = |broker: &Broker| {
        let got = broker.consume_until(
            &topic,
            &[(0, Offset::Beginning)],
            Duration::from_secs(60),
            |r| r.len() >= expected,
        );
        let offsets: BTreeSet<i64> = got.iter().map(|r| r.offset).collect();
        assert_eq!(offsets.len(), expected, "every acknowledged record, once");
        for d in &during {
            let (_, offset) = d.result.clone().unwrap();
            let r = got.iter().find(|r| r.offset == offset).unwrap();
            assert_eq!(
                r.value.as_deref(),
                Some(format!("during-{}", d.index).as_bytes())
            );
        }
    };
    check(&broker);
    let dirs = described(&broker.kafka_addr, &topic);
    assert_eq!(dirs[&canonical(&to)].1, BTreeSet::from([0]));
    broker.restart();
    assert!(partitions_in(&to, &topic).contains(&0));
    check(&broker);
}

/// A small filesystem of its own (tmpfs, so the test needs root, as CI has), unmounted on drop.
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    fn mount(size: &str) -> SmallFs {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mount a {size} tmpfs (the disk-full test needs root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        SmallFs { dir }
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// A log directory that fills up: produce is answered KAFKA_STORAGE_ERROR (nothing
/// acknowledged that is not stored), reads go on, nothing is lost or torn, and once space
/// returns produce works again by itself — and everything acknowledged survives a kill -9.
#[test]
fn a_full_log_directory_refuses_produce_keeps_serving_reads_and_recovers_when_space_returns() {
    use strata_tests::{encode_batch, RawRecord};
    const KAFKA_STORAGE_ERROR: i16 = 56;
    let fs = SmallFs::mount("6m");
    let disk = fs.dir.path().to_path_buf();
    // What the test frees later, so that space comes back.
    let filler = disk.join("filler");
    std::fs::write(&filler, vec![7u8; 3 << 20]).unwrap();
    let mut broker = Broker::start(BrokerOpts::new().env("STRATA_LOG_DIRS", disk.display()));
    let topic = unique_topic("disk-full");
    broker
        .create_topic(&topic, 1, &[("segment.bytes", "1048576")])
        .unwrap();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let mut acked: Vec<String> = Vec::new();
    let produce = |conn: &mut KafkaConn, acked: &mut Vec<String>| {
        let n = acked.len();
        let values: Vec<String> = (n..n + 16)
            .map(|i| format!("{i:08}-{}", "x".repeat(4000)))
            .collect();
        let records: Vec<RawRecord> = values
            .iter()
            .map(|v| RawRecord::new(b"k".to_vec(), v.as_bytes().to_vec(), 1))
            .collect();
        let batch = encode_batch(&records, kafka_protocol::records::Compression::None, None);
        let p = conn.produce(&topic, 0, batch).unwrap();
        if p.error_code == 0 {
            assert_eq!(p.base_offset, n as i64, "offsets stay dense");
            acked.extend(values);
        }
        p.error_code
    };
    // A first read brings up what a consumer's group needs (__consumer_offsets), as on any
    // broker that has served consumers before its disk filled.
    assert_eq!(produce(&mut conn, &mut acked), 0);
    broker.consume_until(
        &topic,
        &[(0, Offset::Beginning)],
        Duration::from_secs(60),
        |r| r.len() >= 16,
    );
    let mut refused = 0;
    for _ in 0..200 {
        match produce(&mut conn, &mut acked) {
            0 => {}
            KAFKA_STORAGE_ERROR => {
                refused += 1;
                if refused == 3 {
                    break;
                }
            }
            code => panic!("produce to a full disk: error {code}, not KAFKA_STORAGE_ERROR"),
        }
    }
    assert_eq!(
        refused,
        3,
        "the disk never filled ({} records)",
        acked.len()
    );
    eprintln!("disk full after {} records", acked.len());
    assert!(acked.len() > 100, "only {} records fit", acked.len());

    // Reads go on while the disk is full.
    let fetched = conn.fetch(&topic, 0, 0, 1 << 20).unwrap();
    let p = &fetched.responses[0].partitions[0];
    assert_eq!(p.error_code, 0, "a fetch from the full disk");
    assert!(p.records.as_ref().is_some_and(|r| !r.is_empty()), "records");
    let read = |broker: &Broker, want: usize| {
        let got = broker.consume_until(
            &topic,
            &[(0, Offset::Beginning)],
            Duration::from_secs(60),
            |r| r.len() >= want,
        );
        let values: Vec<String> = got
            .iter()
            .map(|r| String::from_utf8(r.value.clone().unwrap()).unwrap())
            .collect();
        assert_eq!(values.len(), want);
        values
    };
    assert_eq!(
        read(&broker, acked.len()),
        acked,
        "what was acknowledged, in order"
    );

    // Space returns: produce works again, with no operator action.
    std::fs::remove_file(&filler).unwrap();
    wait_for("produce to work again", Duration::from_secs(30), || {
        produce(&mut conn, &mut acked) == 0
    });
    for _ in 0..10 {
        assert_eq!(produce(&mut conn, &mut acked), 0);
    }
    assert_eq!(read(&broker, acked.len()), acked);
    broker.kill9();
    broker.restart();
    assert_eq!(read(&broker, acked.len()), acked, "after kill -9");
}
