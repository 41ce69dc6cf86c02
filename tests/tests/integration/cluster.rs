//! Clusters of real `strata` processes on loopback: the metadata quorum over TCP, broker
//! registration, heartbeats and fencing, leader moves, and the operator's view
//! (`strata cluster status`, metrics), and leadership handed back to preferred replicas
//! (automatically, and through ElectLeaders). `replication.rs` covers replication itself.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    add_raft_voter_request, AddRaftVoterRequest, RemoveRaftVoterRequest,
};
use rdkafka::admin::{AdminOptions, NewTopic, TopicReplication};
use strata_tests::cluster::CLUSTER_TIMEOUT;
use strata_tests::{
    block_on, strata_bin, unique_topic, wait_for, wait_for_some, Cluster, KafkaConn,
    TrackingProducer,
};

/// Fast failure detection, so the tests do not wait out production timeouts.
const FAST: &[(&str, &str)] = &[
    ("STRATA_BROKER_HEARTBEAT_INTERVAL_MS", "200"),
    ("STRATA_BROKER_SESSION_TIMEOUT_MS", "1500"),
];

fn cluster_status(admin: &str) -> (i32, String) {
    let out = Command::new(strata_bin())
        .args(["cluster", "status", "--admin-addr", admin])
        .output()
        .expect("run strata cluster status");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn cluster_cli(admin: &str, args: &[&str]) -> String {
    let out = Command::new(strata_bin())
        .arg("cluster")
        .args(args)
        .args(["--admin-addr", admin])
        .output()
        .expect("run strata cluster");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "strata cluster {args:?}: {text}");
    text
}

/// Produces `n` records to `topic` (any partition) and returns their (partition, offset).
fn produce(cluster: &mut Cluster, topic: &str, n: usize, tag: &str) -> Vec<(i32, i64)> {
    let cfg = cluster.producer_config();
    let producer = TrackingProducer::new(&cfg);
    for i in 0..n {
        let key = format!("{tag}-{i}");
        producer.send(i, topic, None, key.as_bytes(), key.as_bytes(), &[], None);
    }
    producer.flush(Duration::from_secs(60));
    producer.all_delivered(n)
}

#[test]
fn three_nodes_started_in_any_order_serve_topics_spread_over_all_of_them() {
    // Node 3 starts alone and waits for a quorum; then 1 and 2 arrive.
    let mut cluster = Cluster::start_first(3, 3, FAST, 3);
    let controller = cluster.wait_controller();
    cluster.wait_all(
        "every node to see 3 live brokers and the same controller",
        |v| {
            v["controller"].as_u64() == Some(controller)
                && v["brokers"]
                    .as_array()
                    .is_some_and(|b| b.len() == 3 && b.iter().all(|b| b["state"] == "live"))
        },
    );

    // A topic created through one node is led by all three and readable through any.
    let topic = unique_topic("spread");
    cluster
        .node(2)
        .create_topic(&topic, 6, &[])
        .expect("create topic");
    let leaders = cluster.leaders(&topic);
    assert_eq!(leaders.len(), 6);
    let leaders: BTreeSet<u64> = leaders.into_iter().map(|l| l.expect("a leader")).collect();
    assert_eq!(
        leaders,
        BTreeSet::from([1, 2, 3]),
        "leaders spread over the brokers"
    );
    let delivered = produce(&mut cluster, &topic, 3000, "r");
    assert_eq!(
        delivered.iter().map(|d| d.0).collect::<BTreeSet<_>>().len(),
        6,
        "every partition got records"
    );
    let got = cluster
        .node(1)
        .consume_n(&topic, &[0, 1, 2, 3, 4, 5], 3000, CLUSTER_TIMEOUT);
    let keys: BTreeSet<_> = got.iter().map(|r| r.key.clone().expect("key")).collect();
    assert_eq!(keys.len(), 3000, "every record, once");

    // More replicas than live brokers is refused.
    let admin = cluster.node(3).admin();
    let rf4 = NewTopic::new("rf4", 1, TopicReplication::Fixed(4));
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let result = block_on(admin.create_topics([&rf4], &opts)).expect("CreateTopics");
    let err = result[0]
        .clone()
        .expect_err("RF 4 on 3 brokers must be refused");
    assert_eq!(
        err.1,
        rdkafka::types::RDKafkaErrorCode::InvalidReplicationFactor,
        "{err:?}"
    );

    let (code, text) = cluster_status(&cluster.node(1).admin_addr.clone());
    assert_eq!(code, 0, "a healthy cluster: {text}");
    assert!(
        text.contains(&format!("controller={controller} ")),
        "{text}"
    );
    assert!(text.contains("voters=1,2,3 learners=-"), "{text}");
    assert_eq!(text.matches("state=live").count(), 3, "{text}");
}

#[test]
fn killing_the_controller_elects_another_and_a_dead_brokers_partitions_go_offline_then_return() {
    let mut cluster = Cluster::start(3, 3, FAST);
    let old = cluster.wait_controller();
    let topic = unique_topic("failover");
    let survivor = (1..=3).find(|n| *n != old).expect("another node");
    cluster
        .node(survivor)
        .create_topic(&topic, 3, &[])
        .expect("create topic");
    let before = produce(&mut cluster, &topic, 600, "before");
    let leaders = cluster.leaders(&topic);
    let orphaned: Vec<usize> = (0..3).filter(|p| leaders[*p] == Some(old)).collect();

    let killed_at = Instant::now();
    cluster.node(old).kill9();
    let new = cluster.wait_controller();
    let elected_after = killed_at.elapsed();
    assert_ne!(new, old);
    eprintln!("controller failover: {} ms", elected_after.as_millis());

    // The dead broker is fenced after its session timeout: its partitions have no leader,
    // which the new controller counts and `cluster status` reports.
    let admin = cluster.node(new).admin_addr.clone();
    cluster.wait_all("the killed broker to be fenced", |v| {
        v["brokers"]
            .as_array()
            .is_some_and(|b| b.iter().any(|b| b["id"] == old && b["state"] == "fenced"))
    });
    let offline = cluster.node(new).metric("strata_offline_partitions");
    assert!(
        offline as usize >= orphaned.len(),
        "{offline} offline partitions"
    );
    let (code, text) = cluster_status(&admin);
    assert_eq!(code, 2, "unhealthy while a broker is down: {text}");
    for p in &orphaned {
        assert!(
            text.contains(&format!(
                "unhealthy topic={topic} partition={p} state=offline leader=none"
            )),
            "{text}"
        );
    }

    // Metadata keeps working without the old controller: a new topic, led by live brokers.
    let topic2 = unique_topic("after-failover");
    cluster
        .node(new)
        .create_topic(&topic2, 2, &[])
        .expect("create topic after failover");
    let leaders2 = cluster.leaders(&topic2);
    assert!(
        leaders2.iter().all(|l| l.is_some() && *l != Some(old)),
        "{leaders2:?}"
    );
    produce(&mut cluster, &topic2, 100, "after");

    // The killed broker comes back: its partitions are led by it again, with their data.
    cluster.node(old).restart();
    wait_for(
        "the restarted broker to lead its partitions again",
        CLUSTER_TIMEOUT,
        || {
            let l = cluster.leaders(&topic);
            orphaned
                .iter()
                .all(|p| l.get(*p).copied().flatten() == Some(old))
        },
    );
    let got = cluster
        .node(survivor)
        .consume_n(&topic, &[0, 1, 2], before.len(), CLUSTER_TIMEOUT);
    assert_eq!(got.len(), before.len());
    let (code, text) = cluster_status(&admin);
    assert_eq!(code, 0, "healthy again: {text}");
}

#[test]
fn five_nodes_with_two_learners_promoted_to_voters_survive_losing_two() {
    let mut cluster = Cluster::start(5, 3, FAST);
    cluster.wait_controller();
    let admin = cluster.node(4).admin_addr.clone();
    let (_, text) = cluster_status(&admin);
    assert!(text.contains("voters=1,2,3 learners=4,5"), "{text}");
    assert!(
        text.contains("asked_role=learner"),
        "a learner serves the status: {text}"
    );

    // Learners are brokers like the others: they lead partitions.
    let topic = unique_topic("five");
    cluster
        .node(5)
        .create_topic(&topic, 10, &[])
        .expect("create topic");
    let leaders: BTreeSet<u64> = cluster.leaders(&topic).into_iter().flatten().collect();
    assert_eq!(leaders.len(), 5, "{leaders:?}");

    let out = cluster_cli(&admin, &["add-voter", "4"]);
    assert!(out.contains("voters [1, 2, 3, 4]"), "{out}");
    // Node 5 through the Kafka API (KIP-853's AddRaftVoter), asked of a learner: the
    // listener must be the raft address the quorum knows it by, the cluster id this one.
    let raft5 = cluster.node(5).raft_addr.clone();
    let (host, port) = raft5.rsplit_once(':').unwrap();
    let port: u16 = port.parse().unwrap();
    let mut conn = KafkaConn::connect(&cluster.node(5).kafka_addr.clone()).unwrap();
    let add = |conn: &mut KafkaConn, cluster_id: Option<&str>, id: i32, port: u16| {
        let req = AddRaftVoterRequest::default()
            .with_cluster_id(cluster_id.map(|c| c.to_string().into()))
            .with_timeout_ms(30_000)
            .with_voter_id(id)
            .with_listeners(vec![add_raft_voter_request::Listener::default()
                .with_name("CONTROLLER".into())
                .with_host(host.to_string().into())
                .with_port(port)]);
        let r = conn.request(0, &req).unwrap();
        (r.error_code, r.error_message.map(|m| m.to_string()))
    };
    let (code, why) = add(&mut conn, Some("another-cluster"), 5, port);
    assert_eq!(code, 104, "INCONSISTENT_CLUSTER_ID: {why:?}");
    let (code, why) = add(&mut conn, None, 5, port + 1);
    assert_eq!(code, 42, "INVALID_REQUEST: {why:?}");
    assert!(why.is_some_and(|w| w.contains(&raft5)));
    let (code, why) = add(&mut conn, None, 9, port);
    assert_eq!(code, 42, "node 9 is no observer: {why:?}");
    assert_eq!(add(&mut conn, None, 5, port), (0, None));
    assert_eq!(add(&mut conn, None, 5, port).0, 126, "DUPLICATE_VOTER");
    cluster.wait_all("every node to see five voters", |v| {
        v["quorum"]["voters"]
            .as_object()
            .is_some_and(|m| m.len() == 5)
    });

    // Two of five voters down (one of them the controller): three still make a quorum.
    let controller = cluster.wait_controller();
    let other = (1..=5).find(|n| *n != controller).expect("another voter");
    cluster.node(controller).kill9();
    cluster.node(other).kill9();
    let new = cluster.wait_controller();
    assert!(new != controller && new != other);
    let t2 = unique_topic("three-of-five");
    let live = (1..=5)
        .find(|n| *n != controller && *n != other)
        .expect("a live node");
    cluster
        .node(live)
        .create_topic(&t2, 3, &[])
        .expect("create with 3 of 5 voters");

    // RemoveRaftVoter of a node that is no voter: VOTER_NOT_FOUND, nothing changes.
    let mut conn = KafkaConn::connect(&cluster.node(live).kafka_addr.clone()).unwrap();
    let r = conn
        .request(0, &RemoveRaftVoterRequest::default().with_voter_id(9))
        .unwrap();
    assert_eq!(r.error_code, 127, "{r:?}");

    // A bad voter change is refused with the reason.
    let out = Command::new(strata_bin())
        .args(["cluster", "add-voter", "9", "--admin-addr"])
        .arg(cluster.node(live).admin_addr.clone())
        .output()
        .expect("run");
    assert!(!out.status.success(), "node 9 is not a learner");
}

/// DescribeQuorum asked of any node (a follower, a learner) answers with the leader's view:
/// three voters, the learner as an observer, each one's log end and when it last fetched and
/// caught up; `strata cluster status` shows the same.
#[test]
fn describe_quorum_from_any_node_is_the_leaders_view_of_voters_and_observers() {
    let mut cluster = Cluster::start(4, 3, FAST);
    let controller = cluster.wait_controller() as i32;
    for asked in 1..=4u64 {
        let addr = cluster.node(asked).kafka_addr.clone();
        let mut conn = KafkaConn::connect(&addr).unwrap();
        let q = wait_for_some(
            "every node caught up in the leader's view",
            CLUSTER_TIMEOUT,
            || {
                let q = conn.describe_quorum("__cluster_metadata", 0).ok()?;
                let all = q.voters.iter().chain(&q.observers);
                all.clone()
                    .all(|(_, end, fetch, caught)| *end > 0 && *fetch > 0 && *caught > 0)
                    .then_some(q)
            },
        );
        assert_eq!(
            (q.error_code, q.leader),
            (0, controller),
            "asked node {asked}: {q:?}"
        );
        let ids =
            |v: &[strata_tests::raw::QuorumReplica]| v.iter().map(|r| r.0).collect::<Vec<_>>();
        assert_eq!(ids(&q.voters), [1, 2, 3], "asked node {asked}");
        assert_eq!(ids(&q.observers), [4], "asked node {asked}");
        assert!(q.high_watermark > 0, "{q:?}");
        assert_eq!(q.nodes.len(), 3, "each voter's controller listener: {q:?}");
    }
    let admin = cluster.node(4).admin_addr.clone();
    let (_, text) = cluster_status(&admin);
    for line in [
        "quorum_replica id=1 kind=voter",
        "quorum_replica id=4 kind=observer",
    ] {
        assert!(text.contains(line), "{line} in:\n{text}");
    }
}

#[test]
fn a_learner_binding_every_interface_is_known_by_its_advertised_name_across_restarts() {
    let mut cluster = Cluster::start(3, 3, FAST);
    cluster.wait_controller();
    // As a Kubernetes pod: bound on every interface, known by a name that outlives its IP.
    let port = strata_tests::cluster::free_port();
    let name = format!("localhost:{port}");
    let id = cluster.add_member_with(
        &format!("0.0.0.0:{port}"),
        &[("STRATA_ADVERTISED_RAFT_ADDR", name.clone())],
    );
    let learner_is_named = |v: &serde_json::Value| {
        v["quorum"]["learners"][id.to_string()].as_str() == Some(name.as_str())
    };
    cluster.wait_all("the learner known by its name", learner_is_named);
    cluster.node(id).kill9();
    cluster.node(id).relaunch();
    cluster.node(id).wait_ready();
    cluster.wait_all("the learner still known by its name", learner_is_named);
    let topic = unique_topic("named-learner");
    cluster
        .node(id)
        .create_topic(&topic, 4, &[])
        .expect("the restarted learner serves");
}

#[test]
fn a_full_cluster_restart_keeps_topics_data_committed_offsets_and_groups() {
    let mut cluster = Cluster::start(3, 3, FAST);
    cluster.wait_controller();
    let topic = unique_topic("restart-all");
    cluster
        .node(1)
        .create_topic(&topic, 3, &[])
        .expect("create topic");
    let delivered = produce(&mut cluster, &topic, 900, "x");

    // A consumer group commits its position through whichever broker coordinates it.
    let group = unique_topic("restart-group");
    {
        use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
        let mut cfg = cluster.consumer_config();
        cfg.set("group.id", &group)
            .set("enable.auto.offset.store", "true");
        block_on(async {
            // StreamConsumer needs the runtime to exist when it is created.
            let consumer: StreamConsumer = cfg.create().expect("consumer");
            consumer.subscribe(&[&topic]).expect("subscribe");
            for _ in 0..900 {
                tokio::time::timeout(CLUSTER_TIMEOUT, consumer.recv())
                    .await
                    .expect("records within the timeout")
                    .expect("record");
            }
            consumer
                .commit_consumer_state(CommitMode::Sync)
                .expect("commit");
        });
    }

    for n in 1..=3 {
        cluster.node(n).terminate();
    }
    for n in 1..=3 {
        cluster.node(n).relaunch();
    }
    for n in 1..=3 {
        cluster.node(n).wait_ready();
    }
    cluster.wait_controller();
    let got = cluster
        .node(2)
        .consume_n(&topic, &[0, 1, 2], delivered.len(), CLUSTER_TIMEOUT);
    let keys: BTreeSet<_> = got.iter().map(|r| r.key.clone().expect("key")).collect();
    assert_eq!(keys.len(), delivered.len());

    // The group's committed offsets survived: nothing is left to read.
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let mut cfg = cluster.consumer_config();
    cfg.set("group.id", &group);
    let consumer: BaseConsumer = cfg.create().expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..3 {
        tpl.add_partition(&topic, p);
    }
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(20))
        .expect("committed offsets");
    let total: i64 = committed
        .elements()
        .iter()
        .map(|e| match e.offset() {
            rdkafka::Offset::Offset(o) => o,
            other => panic!("no committed offset: {other:?}"),
        })
        .sum();
    assert_eq!(total, 900);

    // And the group itself: its coordinator (wherever its offsets partition is led now)
    // describes it as it was left, a consumer group with no members.
    let view = wait_for_some(
        "the group described after the restart",
        CLUSTER_TIMEOUT,
        || cluster.node(1).describe_group(&group).ok().flatten(),
    );
    assert_eq!(
        (view.state.as_str(), view.protocol_type.as_str()),
        ("Empty", "consumer")
    );
    assert!(view.members.is_empty());
}

/// Partitions led by their first replica: 1, 2, 3.
const PREFERRED: &[&[i32]] = &[&[1, 2, 3], &[2, 3, 1], &[3, 1, 2]];

/// Kills broker 2, waits until partition 1 has moved off it, restarts it and waits until it
/// is back in every ISR.
fn bounce_broker_2(cluster: &mut Cluster, topic: &str) {
    cluster.node(2).kill9();
    wait_for("partition 1 to move off broker 2", CLUSTER_TIMEOUT, || {
        cluster
            .leaders(topic)
            .get(1)
            .copied()
            .flatten()
            .is_some_and(|l| l != 2)
    });
    cluster.node(2).restart();
    cluster.wait_topic_healthy(topic);
}

#[test]
fn the_controller_hands_leadership_back_to_preferred_replicas() {
    let mut env = FAST.to_vec();
    env.push(("STRATA_LEADER_IMBALANCE_CHECK_INTERVAL_MS", "1000"));
    let mut cluster = Cluster::start(3, 3, &env);
    cluster.wait_controller();
    let topic = unique_topic("preferred");
    cluster.create_replicated_topic(&topic, 3, TopicReplication::Variable(PREFERRED), &[]);
    assert_eq!(cluster.leaders(&topic), vec![Some(1), Some(2), Some(3)]);
    bounce_broker_2(&mut cluster, &topic);
    wait_for(
        "broker 2 to lead partition 1 again",
        CLUSTER_TIMEOUT,
        || cluster.leaders(&topic) == vec![Some(1), Some(2), Some(3)],
    );
}

#[test]
fn elect_leaders_moves_leadership_to_the_preferred_replica_on_request() {
    use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
    use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;

    let mut env = FAST.to_vec();
    env.push(("STRATA_AUTO_LEADER_REBALANCE_ENABLE", "false"));
    let mut cluster = Cluster::start(3, 3, &env);
    cluster.wait_controller();
    let topic = unique_topic("elect");
    cluster.create_replicated_topic(&topic, 3, TopicReplication::Variable(PREFERRED), &[]);
    bounce_broker_2(&mut cluster, &topic);
    let moved = cluster.leaders(&topic);
    assert_ne!(moved[1], Some(2), "no automatic rebalance when it is off");

    let elect = |cluster: &mut Cluster, kind: i8, partitions: Vec<i32>| {
        let mut conn = KafkaConn::connect(&cluster.node(3).kafka_addr.clone()).unwrap();
        let req = ElectLeadersRequest::default()
            .with_election_type(kind)
            .with_timeout_ms(10_000)
            .with_topic_partitions(Some(vec![TopicPartitions::default()
                .with_topic(TopicName(StrBytes::from_string(topic.clone())))
                .with_partitions(partitions)]));
        let resp: ElectLeadersResponse = conn.request(2, &req).unwrap();
        assert_eq!(resp.error_code, 0);
        let mut codes: Vec<(i32, i16)> = resp.replica_election_results[0]
            .partition_result
            .iter()
            .map(|r| (r.partition_id, r.error_code))
            .collect();
        codes.sort();
        codes
    };
    // Preferred: partition 1 moves back; 0 and 2 need nothing (ELECTION_NOT_NEEDED); 7 does
    // not exist.
    assert_eq!(
        elect(&mut cluster, 0, vec![0, 1, 2, 7]),
        vec![(0, 84), (1, 0), (2, 84), (7, 3)]
    );
    wait_for(
        "every member to see the preferred leaders",
        CLUSTER_TIMEOUT,
        || cluster.leaders(&topic) == vec![Some(1), Some(2), Some(3)],
    );
    // Unclean on partitions that have leaders: nothing to do, nothing lost.
    assert_eq!(elect(&mut cluster, 1, vec![0, 1]), vec![(0, 84), (1, 84)]);
    assert_eq!(
        cluster.node(1).metric("strata_unclean_leader_elections"),
        0.0
    );
}
