//! The operator's workflow with the `strata` command against real brokers: drain a broker
//! under load, stop it with nothing under-replicated and unregister it; balance a cluster a
//! broker joined; run a plan in Kafka's reassignment JSON.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::admin::TopicReplication;
use strata_tests::cluster::{CLUSTER_TIMEOUT, FAST};
use strata_tests::{strata_bin, unique_topic, wait_for, Cluster, TrackingProducer};

/// Runs `strata <args>`; returns (exit code, stdout, stderr).
fn strata(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(strata_bin())
        .args(args)
        .output()
        .expect("run strata");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn strata_ok(args: &[&str]) -> String {
    let (code, out, err) = strata(args);
    assert_eq!(code, 0, "strata {args:?}\nstdout: {out}\nstderr: {err}");
    out
}

/// Replicas and preferred leaders per broker over every partition of `topics`.
fn counts(cluster: &mut Cluster, topics: &[&str]) -> (BTreeMap<u64, usize>, BTreeMap<u64, usize>) {
    let mut replicas = BTreeMap::new();
    let mut leaders = BTreeMap::new();
    for t in topics {
        for r in cluster.replicas(t) {
            for b in &r {
                *replicas.entry(*b).or_default() += 1;
            }
            if let Some(first) = r.first() {
                *leaders.entry(*first).or_default() += 1;
            }
        }
    }
    (replicas, leaders)
}

fn spread(m: &BTreeMap<u64, usize>, brokers: &[u64]) -> usize {
    let v: Vec<usize> = brokers
        .iter()
        .map(|b| m.get(b).copied().unwrap_or(0))
        .collect();
    v.iter().max().unwrap() - v.iter().min().unwrap()
}

/// An acks=all idempotent producer spreading records over `topic` until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
    producer: Arc<TrackingProducer>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(cluster: &mut Cluster, topic: &str) -> Load {
        let mut cfg = cluster.producer_config();
        cfg.set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .set("message.timeout.ms", "120000");
        let producer = Arc::new(TrackingProducer::new(&cfg));
        let (stop, sent) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
        );
        let thread = {
            let (stop, sent, producer, topic) = (
                stop.clone(),
                sent.clone(),
                producer.clone(),
                topic.to_string(),
            );
            std::thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) && i < 200_000 {
                    let key = format!("k{i}");
                    producer.send(i, &topic, None, key.as_bytes(), &[b'v'; 200], &[], None);
                    i += 1;
                    sent.store(i, Ordering::Relaxed);
                    if i % 50 == 0 {
                        std::thread::sleep(Duration::from_millis(5));
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

    /// Stops and checks every record was acknowledged, offsets dense per partition; returns
    /// the count per partition.
    fn finish(mut self) -> BTreeMap<i32, i64> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        self.producer.flush(Duration::from_secs(120));
        let n = self.sent.load(Ordering::Relaxed);
        let mut per: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
        for (p, o) in self.producer.all_delivered(n) {
            per.entry(p).or_default().push(o);
        }
        per.into_iter()
            .map(|(p, mut offsets)| {
                offsets.sort();
                for (i, o) in offsets.iter().enumerate() {
                    assert_eq!(
                        *o, i as i64,
                        "partition {p}: acknowledged offsets are dense"
                    );
                }
                (p, offsets.len() as i64)
            })
            .collect()
    }
}

#[test]
fn a_drained_broker_holds_nothing_stops_with_nothing_under_replicated_and_is_removed() {
    let mut cluster = Cluster::start(4, 3, FAST);
    cluster.wait_controller();
    let bootstrap = cluster.bootstrap();
    let topic = unique_topic("drain");
    cluster.create_replicated_topic(
        &topic,
        8,
        TopicReplication::Fixed(3),
        &[("min.insync.replicas", "2")],
    );
    let (before, _) = counts(&mut cluster, &[&topic]);
    assert!(
        before.get(&4).copied().unwrap_or(0) > 0,
        "broker 4 holds replicas: {before:?}"
    );
    let load = Load::start(&mut cluster, &topic);
    wait_for("records flowing", CLUSTER_TIMEOUT, || {
        load.producer.acked_count() > 500
    });

    // Removing a running broker, or a voter, is refused with what to do first.
    let (code, _, err) = strata(&["broker", "remove", "4", "-b", &bootstrap]);
    assert_ne!(code, 0);
    assert!(err.contains("running"), "{err}");
    let (code, _, err) = strata(&["broker", "remove", "1", "-b", &bootstrap]);
    assert_ne!(code, 0);
    assert!(
        err.contains("voter") && err.contains("remove-voter"),
        "{err}"
    );

    let out = strata_ok(&[
        "broker",
        "drain",
        "4",
        "-b",
        &bootstrap,
        "--max-concurrent",
        "3",
    ]);
    assert!(out.contains("drained broker=4"), "{out}");
    assert!(out.matches("completed ").count() >= 1, "{out}");
    let (after, leaders) = counts(&mut cluster, &[&topic]);
    assert_eq!(
        after.get(&4),
        None,
        "broker 4 still holds replicas: {after:?}"
    );
    assert!(!cluster.leaders(&topic).contains(&Some(4)));
    assert_eq!(leaders.values().sum::<usize>(), 8);

    // Stopped, it leaves nothing under-replicated; then it can be unregistered.
    cluster.node(4).terminate();
    cluster.wait_all("nothing unhealthy after broker 4 stopped", |v| {
        v["unhealthy"].as_array().is_some_and(|u| u.is_empty())
    });
    let out = strata_ok(&["broker", "remove", "4", "-b", &bootstrap]);
    assert!(out.contains("removed broker=4"), "{out}");
    cluster.wait_all("broker 4 gone from the cluster", |v| {
        v["brokers"]
            .as_array()
            .is_some_and(|b| b.iter().all(|b| b["id"] != 4))
    });
    let acked = load.finish();
    // Every acknowledged record is there, read through the remaining brokers.
    for (p, n) in acked {
        let (low, high) = cluster.member(1).watermarks(&topic, p);
        assert_eq!((low, high), (0, n), "partition {p}");
    }
}

#[test]
fn balance_spreads_replicas_and_leaders_over_a_broker_that_joined() {
    let mut cluster = Cluster::start(4, 3, FAST);
    cluster.wait_controller();
    let bootstrap = cluster.bootstrap();
    let topic = unique_topic("balance");
    // Twelve partitions on brokers 1..3 only, as before broker 4 joined.
    let assignment: Vec<Vec<i32>> = (0..12)
        .map(|i| (0..2).map(|k| ((i + k) % 3) + 1).collect())
        .collect();
    let refs: Vec<&[i32]> = assignment.iter().map(Vec::as_slice).collect();
    cluster.create_replicated_topic(&topic, 12, TopicReplication::Variable(&refs), &[]);
    let load = Load::start(&mut cluster, &topic);

    // --dry-run prints Kafka's plan JSON and moves nothing.
    let plan = strata_ok(&["cluster", "balance", "--dry-run", "-b", &bootstrap]);
    let v: serde_json::Value = serde_json::from_str(plan.trim()).expect("plan JSON");
    assert_eq!(v["version"], 1);
    assert!(!v["partitions"].as_array().unwrap().is_empty());
    let (replicas, _) = counts(&mut cluster, &[&topic]);
    assert_eq!(replicas.get(&4), None, "a dry run moved nothing");

    let out = strata_ok(&[
        "cluster",
        "balance",
        "-b",
        &bootstrap,
        "--max-concurrent",
        "4",
    ]);
    assert!(out.contains("completed "), "{out}");
    wait_for(
        "every partition led by its preferred replica",
        CLUSTER_TIMEOUT,
        || {
            let replicas = cluster.replicas(&topic);
            let leaders = cluster.leaders(&topic);
            replicas.len() == 12
                && replicas
                    .iter()
                    .zip(&leaders)
                    .all(|(r, l)| r.first().copied() == *l)
        },
    );
    let (replicas, leaders) = counts(&mut cluster, &[&topic]);
    let all = [1, 2, 3, 4];
    assert!(
        spread(&replicas, &all) <= 1,
        "replicas per broker: {replicas:?}"
    );
    assert!(
        spread(&leaders, &all) <= 1,
        "leaders per broker: {leaders:?}"
    );
    // Balanced now: a second run plans nothing.
    let (_, _, err) = strata(&["cluster", "balance", "--dry-run", "-b", &bootstrap]);
    assert!(err.contains(" 0 moves"), "{err}");
    let acked = load.finish();
    for (p, n) in acked {
        assert_eq!(
            cluster.member(4).watermarks(&topic, p).1,
            n,
            "partition {p}"
        );
    }
}

#[test]
fn a_plan_in_kafkas_format_runs_and_bad_plans_are_refused() {
    let mut cluster = Cluster::start(3, 3, FAST);
    cluster.wait_controller();
    let bootstrap = cluster.bootstrap();
    let topic = unique_topic("plan");
    cluster.create_replicated_topic(&topic, 2, TopicReplication::Variable(&[&[1], &[2]]), &[]);
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    let good = write(
        "good.json",
        &format!(
            r#"{{"version":1,"partitions":[{{"topic":"{topic}","partition":0,"replicas":[3,2],"log_dirs":["any","any"]}}]}}"#
        ),
    );
    let out = strata_ok(&["cluster", "reassign", "--plan", &good, "-b", &bootstrap]);
    assert!(
        out.contains(&format!("completed topic={topic} partition=0 replicas=3,2")),
        "{out}"
    );
    assert_eq!(cluster.replicas(&topic)[0], vec![3, 2]);
    let status = strata_ok(&["cluster", "reassign", "--status", "-b", &bootstrap]);
    assert!(status.contains("reassignments in_progress=0"), "{status}");

    // A plan naming an unknown broker, and one naming an unknown partition: refused with
    // Kafka's codes; nothing moves.
    let bad = write(
        "bad.json",
        &format!(
            r#"{{"version":1,"partitions":[{{"topic":"{topic}","partition":1,"replicas":[9]}},{{"topic":"{topic}","partition":5,"replicas":[1]}}]}}"#
        ),
    );
    let (code, out, err) = strata(&["cluster", "reassign", "--plan", &bad, "-b", &bootstrap]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        out.contains("partition=1") && out.contains("error=39"),
        "{out}"
    );
    assert!(
        out.contains("partition=5") && out.contains("error=3 "),
        "{out}"
    );
    assert_eq!(cluster.replicas(&topic)[1], vec![2]);
    let malformed = write(
        "malformed.json",
        r#"{"version":1,"partitions":[{"topic":"x"}]}"#,
    );
    let (code, _, err) = strata(&[
        "cluster", "reassign", "--plan", &malformed, "-b", &bootstrap,
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("reassignment JSON"), "{err}");
}

#[test]
fn internal_topics_grow_to_their_replication_factor_as_brokers_join() {
    let mut cluster = Cluster::start(1, 1, FAST);
    let topic = unique_topic("grow");
    cluster.create_replicated_topic(&topic, 1, TopicReplication::Fixed(1), &[]);
    // A group commits while the cluster is one broker: __consumer_offsets gets one replica.
    // `commit` returns what the group had committed before, then what it has now.
    let commit = |cluster: &mut Cluster, offset: i64| {
        use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
        let mut cfg = cluster.consumer_config();
        cfg.set("group.id", "grower");
        let c: BaseConsumer = cfg.create().unwrap();
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition(&topic, 0);
        let read = |c: &BaseConsumer, tpl: &rdkafka::TopicPartitionList| {
            let got = c
                .committed_offsets(tpl.clone(), Duration::from_secs(10))
                .unwrap();
            got.find_partition(&topic, 0).unwrap().offset()
        };
        let before = read(&c, &tpl);
        tpl.set_all_offsets(rdkafka::Offset::Offset(offset))
            .unwrap();
        c.commit(&tpl, CommitMode::Sync).unwrap();
        (before, read(&c, &tpl))
    };
    assert_eq!(commit(&mut cluster, 7).1, rdkafka::Offset::Offset(7));
    assert!(cluster
        .replicas("__consumer_offsets")
        .iter()
        .all(|r| r.len() == 1));

    // Two brokers join: every offsets partition grows to three replicas, in sync.
    cluster.add_member();
    cluster.add_member();
    wait_for(
        "__consumer_offsets at three replicas",
        Duration::from_secs(120),
        || {
            let r = cluster.replicas("__consumer_offsets");
            r.len() == 50 && r.iter().all(|r| r.len() == 3)
        },
    );
    cluster.wait_topic_healthy("__consumer_offsets");
    // What the group committed before is still there, and its commits carry on.
    assert_eq!(
        commit(&mut cluster, 9),
        (rdkafka::Offset::Offset(7), rdkafka::Offset::Offset(9))
    );
    let (replicas, _) = counts(&mut cluster, &["__consumer_offsets"]);
    assert_eq!(
        replicas.values().copied().collect::<Vec<_>>(),
        vec![50, 50, 50]
    );
}

#[test]
fn the_automatic_balancer_fills_a_broker_that_joined_and_replaces_one_that_died() {
    let env = [
        FAST,
        &[
            ("STRATA_AUTO_BALANCE_ENABLE", "true"),
            ("STRATA_AUTO_BALANCE_INTERVAL_MS", "500"),
            ("STRATA_AUTO_BALANCE_BROKER_DOWN_MS", "3000"),
        ][..],
    ]
    .concat();
    let mut cluster = Cluster::start(3, 3, &env);
    cluster.wait_controller();
    let topic = unique_topic("auto");
    cluster.create_replicated_topic(&topic, 8, TopicReplication::Fixed(2), &[]);
    let load = Load::start(&mut cluster, &topic);

    // A fourth broker joins: it gets its share without anyone asking.
    let joined = cluster.add_member();
    let all = [1, 2, 3, joined];
    wait_for(
        "replicas spread onto the new broker",
        Duration::from_secs(60),
        || {
            let (replicas, _) = counts(&mut cluster, &[&topic]);
            replicas.get(&joined).is_some_and(|n| *n > 0) && spread(&replicas, &all) <= 1
        },
    );
    cluster.wait_topic_healthy(&topic);

    // Broker 2 dies for good: its replicas are re-created on the live brokers.
    cluster.node(2).kill9();
    wait_for(
        "broker 2's replicas replaced",
        Duration::from_secs(60),
        || {
            let r = cluster.replicas(&topic);
            r.len() == 8 && r.iter().all(|r| r.len() == 2 && !r.contains(&2))
        },
    );
    cluster.wait_topic_healthy(&topic);
    let acked = load.finish();
    for (p, n) in acked {
        assert_eq!(
            cluster.member(1).watermarks(&topic, p).1,
            n,
            "partition {p}"
        );
    }
}
