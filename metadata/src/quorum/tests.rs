//! The quorum end to end: real raft over TCP on loopback, stores in temporary directories.

use std::collections::BTreeMap;
use std::path::Path;

use super::*;
use crate::command::{Command, CommandResult};
use crate::controller::{Heartbeat, HeartbeatReply};
use crate::rpc::{Request, Response};

async fn opts(node_id: NodeId, dir: &Path) -> MetadataOptions {
    MetadataOptions {
        node_id,
        dir: dir.to_path_buf(),
        listener: TcpListener::bind("127.0.0.1:0").await.expect("bind"),
        voters: BTreeMap::from([(node_id, "127.0.0.1:0".to_string())]),
        advertised: None,
        session_timeout: Duration::from_secs(3),
        leader_balance: None,
        tls: None,
    }
}

async fn open(dir: &Path) -> Metadata {
    Metadata::open(opts(1, dir).await)
        .await
        .expect("open metadata")
}

async fn propose_ok(metadata: &Metadata, cmd: Command) {
    let result = metadata.propose(cmd.clone()).await.expect("propose");
    assert!(result.is_ok(), "{cmd:?} was rejected: {result:?}");
}

fn register(node_id: NodeId) -> Command {
    Command::RegisterBroker {
        node_id,
        host: "127.0.0.1".to_string(),
        port: 9092,
        rack: None,
        listeners: vec![],
        admin: None,
    }
}

fn create_topic(name: &str, partitions: usize) -> Command {
    Command::CreateTopic {
        name: name.to_string(),
        topic_id: uuid::Uuid::new_v4(),
        replicas: vec![vec![1]; partitions],
        configs: BTreeMap::from([("retention.ms".to_string(), "60000".to_string())]),
    }
}

#[tokio::test]
async fn a_fresh_directory_becomes_a_leader_that_applies_proposals() {
    let dir = tempfile::tempdir().expect("tempdir");
    let metadata = open(&dir.path().join("meta")).await;
    assert!(metadata.is_leader());
    assert_eq!(metadata.node_id(), 1);
    assert_eq!(*metadata.state(), ClusterState::default());

    let mut updates = metadata.subscribe();
    updates.borrow_and_update();
    propose_ok(&metadata, register(1)).await;
    assert!(updates.has_changed().expect("sender alive"));
    propose_ok(&metadata, create_topic("orders", 3)).await;
    assert_eq!(
        metadata
            .propose(create_topic("orders", 1))
            .await
            .expect("propose"),
        CommandResult::TopicAlreadyExists
    );
    assert_eq!(
        metadata
            .propose(Command::AllocateProducerIds { count: 10 })
            .await
            .expect("propose"),
        CommandResult::ProducerIds {
            first: 1000,
            count: 10
        }
    );

    let state = metadata.state();
    assert_eq!(state.topic("orders").map(|t| t.partitions.len()), Some(3));
    assert_eq!(state.next_producer_id, 1010);
    metadata.shutdown().await.expect("shutdown");
    assert!(!metadata.is_leader());
    assert!(matches!(
        metadata.propose(register(2)).await,
        Err(MetadataError::Shutdown)
    ));
    assert!(matches!(
        metadata.snapshot().await,
        Err(MetadataError::Shutdown)
    ));
    // The last state stays readable, and a second shutdown is harmless.
    assert_eq!(metadata.state(), state);
    metadata.shutdown().await.expect("second shutdown");
}

#[tokio::test]
async fn state_survives_a_restart_and_proposals_continue_after_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let metadata = open(dir.path()).await;
    propose_ok(&metadata, register(1)).await;
    propose_ok(&metadata, create_topic("a", 2)).await;
    propose_ok(
        &metadata,
        Command::AlterTopicConfig {
            name: "a".to_string(),
            set: BTreeMap::from([("cleanup.policy".to_string(), "compact".to_string())]),
            delete: vec!["retention.ms".to_string()],
        },
    )
    .await;
    propose_ok(&metadata, Command::AllocateProducerIds { count: 5 }).await;
    let before = metadata.state();
    metadata.shutdown().await.expect("shutdown");

    let reopened = open(dir.path()).await;
    assert_eq!(reopened.state(), before);
    propose_ok(
        &reopened,
        Command::CreatePartitions {
            name: "a".to_string(),
            new_replicas: vec![vec![1]],
        },
    )
    .await;
    assert_eq!(
        reopened
            .propose(Command::AllocateProducerIds { count: 1 })
            .await
            .expect("propose"),
        CommandResult::ProducerIds {
            first: 1005,
            count: 1
        }
    );
    let after = reopened.state();
    assert_eq!(after.topic("a").map(|t| t.partitions.len()), Some(3));
    reopened.shutdown().await.expect("shutdown");

    let third = open(dir.path()).await;
    assert_eq!(third.state(), after);
    third.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn state_is_rebuilt_from_a_snapshot_plus_the_log_after_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let metadata = open(dir.path()).await;
    propose_ok(&metadata, register(1)).await;
    propose_ok(&metadata, create_topic("before-snapshot", 1)).await;
    metadata.snapshot().await.expect("snapshot");
    assert!(dir.path().join("snapshot").join("snapshot.json").exists());
    // A second snapshot with nothing new applied also completes.
    metadata.snapshot().await.expect("second snapshot");

    propose_ok(&metadata, create_topic("after-snapshot", 2)).await;
    propose_ok(
        &metadata,
        Command::DeleteTopic {
            name: "before-snapshot".to_string(),
        },
    )
    .await;
    let before = metadata.state();
    metadata.shutdown().await.expect("shutdown");

    let reopened = open(dir.path()).await;
    assert_eq!(reopened.state(), before);
    assert!(reopened.state().topic("before-snapshot").is_none());
    assert!(reopened.state().topic("after-snapshot").is_some());
    propose_ok(&reopened, create_topic("after-reopen", 1)).await;
    let after = reopened.state();
    reopened.snapshot().await.expect("snapshot after reopen");
    reopened.shutdown().await.expect("shutdown");

    // Everything now comes from the snapshot alone.
    let third = open(dir.path()).await;
    assert_eq!(third.state(), after);
    third.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn automatic_snapshots_purge_the_log_without_losing_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let metadata = open(dir.path()).await;
    propose_ok(&metadata, register(1)).await;
    let proposals = SNAPSHOT_EVERY_ENTRIES + 200;
    for _ in 0..proposals {
        propose_ok(&metadata, Command::AllocateProducerIds { count: 1 }).await;
    }
    metadata
        .raft()
        .wait(Some(Duration::from_secs(10)))
        .metrics(
            |m| m.purged.is_some(),
            "the log to be purged behind a snapshot",
        )
        .await
        .expect("purged");
    let before = metadata.state();
    assert_eq!(before.next_producer_id, 1000 + proposals as i64);
    metadata.shutdown().await.expect("shutdown");

    let reopened = open(dir.path()).await;
    assert_eq!(reopened.state(), before);
    reopened.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn a_torn_log_tail_left_by_a_crash_does_not_stop_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let metadata = open(dir.path()).await;
    propose_ok(&metadata, register(1)).await;
    propose_ok(&metadata, create_topic("t", 1)).await;
    let before = metadata.state();
    metadata.shutdown().await.expect("shutdown");

    // What a crash in the middle of the next append leaves behind.
    let mut log = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.path().join(crate::log_store::LOG_FILE))
        .expect("open raft.log");
    std::io::Write::write_all(&mut log, &[200, 1, 0, 0, 1, 2, 3, 4, b'{']).expect("write");
    drop(log);

    let reopened = open(dir.path()).await;
    assert_eq!(reopened.state(), before);
    propose_ok(&reopened, create_topic("u", 1)).await;
    reopened.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn a_raft_core_stopped_by_a_storage_error_is_reported_as_failed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("meta");
    let metadata = open(&store).await;
    propose_ok(&metadata, register(1)).await;
    let failed = metadata.failed();
    tokio::pin!(failed);
    assert!(
        tokio::time::timeout(Duration::from_millis(200), &mut failed)
            .await
            .is_err(),
        "a running core is not failed"
    );
    // The store's files go away under it: the next vote, commit or snapshot write fails.
    std::fs::remove_dir_all(&store).expect("remove the store");
    let _ = metadata.propose(create_topic("t", 1)).await;
    let _ = metadata.snapshot().await;
    let err = tokio::time::timeout(Duration::from_secs(10), failed)
        .await
        .expect("the failure is reported");
    assert!(err.to_string().contains("raft core stopped"), "{err}");
    let _ = metadata.shutdown().await;
}

#[tokio::test]
async fn shutdown_is_not_a_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    let metadata = open(dir.path()).await;
    let watcher = metadata.clone();
    let failed = tokio::spawn(async move { watcher.failed().await });
    metadata.shutdown().await.expect("shutdown");
    assert!(
        tokio::time::timeout(Duration::from_millis(300), failed)
            .await
            .is_err(),
        "a core stopped on purpose is not reported as failed"
    );
}

#[tokio::test]
async fn a_store_of_another_node_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let metadata = open(dir.path()).await;
    metadata.shutdown().await.expect("shutdown");

    let err = Metadata::open(opts(2, dir.path()).await)
        .await
        .err()
        .expect("must refuse");
    assert!(matches!(err, MetadataError::Raft(_)), "{err}");
}

/// Listeners on free loopback ports for nodes `1..=n`, and the voters map naming them.
async fn listeners(n: u64) -> (Vec<TcpListener>, BTreeMap<NodeId, String>) {
    let mut ls = Vec::new();
    let mut voters = BTreeMap::new();
    for id in 1..=n {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        voters.insert(id, l.local_addr().expect("addr").to_string());
        ls.push(l);
    }
    (ls, voters)
}

fn node_opts(
    node_id: NodeId,
    dir: &Path,
    listener: TcpListener,
    voters: &BTreeMap<NodeId, String>,
) -> MetadataOptions {
    MetadataOptions {
        node_id,
        dir: dir.join(format!("node-{node_id}")),
        listener,
        voters: voters.clone(),
        advertised: None,
        session_timeout: Duration::from_millis(500),
        leader_balance: None,
        tls: None,
    }
}

async fn wait_same_state(nodes: &[&Metadata], want: &Arc<ClusterState>) {
    for n in nodes {
        n.wait_for_state(Duration::from_secs(10), "replicated state", |s| {
            s == &**want
        })
        .await
        .unwrap_or_else(|e| panic!("node {}: {e}", n.node_id()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_voters_started_in_any_order_agree_and_survive_the_leader_stopping() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("info")
        .try_init();
    let dir = tempfile::tempdir().expect("tempdir");
    let (ls, voters) = listeners(3).await;
    let mut ls = ls.into_iter();
    let (l1, l2, l3) = (ls.next().unwrap(), ls.next().unwrap(), ls.next().unwrap());
    // Node 3 starts alone and waits; then 1 and 2 arrive.
    let three = tokio::spawn(Metadata::open(node_opts(3, dir.path(), l3, &voters)));
    let one = tokio::spawn(Metadata::open(node_opts(1, dir.path(), l1, &voters)));
    let two = Metadata::open(node_opts(2, dir.path(), l2, &voters))
        .await
        .expect("open 2");
    let one = one.await.expect("join").expect("open 1");
    let three = three.await.expect("join").expect("open 3");
    let nodes = [&one, &two, &three];
    let leaders: Vec<_> = nodes.iter().filter(|n| n.is_leader()).collect();
    assert_eq!(leaders.len(), 1, "exactly one leader");
    let leader_id = leaders[0].node_id();
    assert!(nodes.iter().all(|n| n.leader() == Some(leader_id)));
    assert_eq!(one.status().voters.len(), 3);

    // Proposals from every node, leader or not, apply everywhere.
    for n in nodes {
        propose_ok(n, register(n.node_id())).await;
        assert!(
            n.state().brokers.contains_key(&n.node_id()),
            "read your write"
        );
    }
    propose_ok(&two, create_topic("t", 2)).await;
    let want = two.state();
    wait_same_state(&nodes, &want).await;

    // Stop the leader: the other two elect a new one and keep accepting writes.
    let (stopped, rest): (Vec<&Metadata>, Vec<&Metadata>) =
        nodes.iter().partition(|n| n.node_id() == leader_id);
    stopped[0].shutdown().await.expect("shutdown");
    propose_ok(rest[0], create_topic("after-failover", 1)).await;
    let want = rest[0].state();
    wait_same_state(&rest, &want).await;
    let new_leader = rest[0].leader().expect("a leader");
    assert_ne!(new_leader, leader_id);

    // The old leader comes back on its address and catches up.
    let listener = TcpListener::bind(&voters[&leader_id])
        .await
        .expect("rebind");
    let back = Metadata::open(node_opts(leader_id, dir.path(), listener, &voters))
        .await
        .expect("reopen");
    assert!(
        back.state().topic("after-failover").is_some(),
        "caught up at open"
    );
    for n in [&back, rest[0], rest[1]] {
        n.shutdown().await.expect("shutdown");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_joins_catches_up_from_a_snapshot_and_can_be_made_a_voter() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut ls, voters) = listeners(1).await;
    let one = Metadata::open(node_opts(1, dir.path(), ls.remove(0), &voters))
        .await
        .expect("open 1");
    propose_ok(&one, register(1)).await;
    for _ in 0..SNAPSHOT_EVERY_ENTRIES + 50 {
        propose_ok(&one, Command::AllocateProducerIds { count: 1 }).await;
    }
    one.raft()
        .wait(Some(Duration::from_secs(10)))
        .metrics(
            |m| m.purged.is_some(),
            "the log to be purged behind a snapshot",
        )
        .await
        .expect("purged");

    // Node 2 is not a voter: it joins through node 1 and receives the snapshot.
    let l2 = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let two = Metadata::open(node_opts(2, dir.path(), l2, &voters))
        .await
        .expect("open learner");
    assert_eq!(two.state(), one.state());
    assert_eq!(two.status().role, "learner");
    assert!(one.status().learners.contains_key(&2));
    // A learner's proposals go to the leader.
    propose_ok(&two, register(2)).await;
    assert!(one.state().brokers.contains_key(&2));

    one.change_voters(vec![2], vec![]).await.expect("promote");
    assert_eq!(one.status().voters.len(), 2);
    two.change_voters(vec![], vec![2]).await.expect("demote");
    let status = one.status();
    assert_eq!((status.voters.len(), status.learners.len()), (1, 1));
    two.shutdown().await.expect("shutdown");
    one.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_unfences_on_heartbeat_and_fences_silent_or_departing_brokers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut ls, voters) = listeners(1).await;
    let meta = Metadata::open(node_opts(1, dir.path(), ls.remove(0), &voters))
        .await
        .expect("open");
    let mut epochs = BTreeMap::new();
    for id in [1, 2] {
        let CommandResult::BrokerRegistered { epoch } =
            meta.propose(register(id)).await.expect("register")
        else {
            panic!("register");
        };
        epochs.insert(id, epoch);
    }
    propose_ok(
        &meta,
        Command::CreateTopic {
            name: "t".to_string(),
            topic_id: uuid::Uuid::new_v4(),
            replicas: vec![vec![2, 1]],
            configs: BTreeMap::new(),
        },
    )
    .await;
    assert_eq!(meta.state().topics["t"].partitions[0].leader, None);
    let hb = |id: NodeId, shutting_down| Heartbeat {
        node_id: id,
        epoch: epochs[&id],
        shutting_down,
    };
    for id in [1, 2] {
        let reply = meta.heartbeat(hb(id, false)).await.expect("heartbeat");
        assert_eq!(reply, HeartbeatReply::Alive { fenced: false });
    }
    let p = &meta.state().topics["t"].partitions[0];
    assert!(p.leader.is_some(), "an unfenced ISR member leads");

    // Broker 2 goes silent: fenced after the session timeout; 1 keeps heartbeating.
    let keep_alive = {
        let meta = meta.clone();
        let hb = hb(1, false);
        tokio::spawn(async move {
            loop {
                let _ = meta.heartbeat(hb.clone()).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let state = meta
        .wait_for_state(Duration::from_secs(10), "broker 2 fenced", |s| {
            s.brokers[&2].fenced
        })
        .await
        .expect("fenced");
    assert!(!state.brokers[&1].fenced);
    assert_eq!(state.topics["t"].partitions[0].leader, Some(1));
    assert_eq!(state.topics["t"].partitions[0].isr, vec![1]);

    // A stale epoch is told to register again.
    let mut stale = hb(2, false);
    stale.epoch -= 1;
    assert_eq!(
        meta.heartbeat(stale).await.expect("heartbeat"),
        HeartbeatReply::StaleEpoch {
            current: Some(epochs[&2])
        }
    );
    // A clean shutdown fences at once.
    keep_alive.abort();
    assert_eq!(
        meta.heartbeat(hb(1, true)).await.expect("heartbeat"),
        HeartbeatReply::Alive { fenced: true }
    );
    assert!(meta.state().brokers[&1].fenced);
    meta.shutdown().await.expect("shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_of_another_quorum_gets_no_answer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut lx, vx) = listeners(1).await;
    let x = Metadata::open(node_opts(1, &dir.path().join("x"), lx.remove(0), &vx))
        .await
        .expect("open x");
    let (mut ly, vy) = listeners(1).await;
    let y = Metadata::open(node_opts(1, &dir.path().join("y"), ly.remove(0), &vy))
        .await
        .expect("open y");
    assert_ne!(x.inner.quorum_id.get(), y.inner.quorum_id.get());
    // Y's node asks X's address, as after a port reuse: refused, connection closed.
    let from_y = y.inner.peers.get(&vx[&1]);
    let answer = from_y
        .call(&Request::ReadIndex, Duration::from_secs(5))
        .await;
    assert!(answer.is_err(), "{answer:?}");
    // X's own peers are answered.
    let from_x = x.inner.peers.get(&vx[&1]);
    let answer = from_x
        .call(&Request::ReadIndex, Duration::from_secs(5))
        .await
        .expect("answered");
    assert!(matches!(answer, Response::ReadIndex(Ok(_))), "{answer:?}");
    // The id survives a restart.
    let id = x.inner.quorum_id.get().map(str::to_string);
    x.shutdown().await.expect("shutdown");
    let again = TcpListener::bind(&vx[&1]).await.expect("rebind");
    let x2 = Metadata::open(node_opts(1, &dir.path().join("x"), again, &vx))
        .await
        .expect("reopen x");
    assert_eq!(x2.inner.quorum_id.get().map(str::to_string), id);
    x2.shutdown().await.expect("shutdown");
    y.shutdown().await.expect("shutdown");
}
