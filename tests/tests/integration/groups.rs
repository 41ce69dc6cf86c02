//! Consumer groups: the broker coordinates subscribed librdkafka consumers (and `strata consume
//! --group` processes), keeps their committed offsets in `__consumer_offsets` across clean and
//! crash restarts, and answers bad group requests with Kafka's error codes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use kafka_protocol::records::Compression;
use rdkafka::admin::AdminOptions;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use strata_tests::groups::{
    assert_exactly_once, group_error, unique_group, wait_for_stable_assignment, CliMember,
    GroupClient, Member, HEARTBEAT_INTERVAL_MS, SESSION_TIMEOUT_MS,
};
use strata_tests::{
    block_on, encode_batch, now_ms, unique_topic, wait_for, wait_for_some, wait_until, Broker,
    BrokerOpts, ConsumedRecord, KafkaConn, RawRecord,
};

/// How long a group may take to settle (joins, the initial rebalance delay, syncs).
const SETTLE: Duration = Duration::from_secs(60);
/// How long an assignment must stay unchanged to count as stable.
const STABLE_FOR: Duration = Duration::from_secs(2);

fn named(mut cfg: ClientConfig, client_id: &str) -> ClientConfig {
    cfg.set("client.id", client_id);
    cfg
}

/// A subscribed consumer that stores (for the next commit) only records below a per-partition
/// stop offset, so a commit lands exactly at that offset.
struct Processor {
    consumer: BaseConsumer,
    topic: String,
    stop_at: BTreeMap<i32, i64>,
    processed: BTreeMap<i32, Vec<i64>>,
}

impl Processor {
    fn subscribe(broker: &Broker, group: &str, topic: &str, stop_at: &BTreeMap<i32, i64>) -> Self {
        let mut cfg = broker.group_config(group);
        cfg.set("enable.auto.offset.store", "false");
        let consumer: BaseConsumer = cfg.create().expect("create consumer");
        consumer.subscribe(&[topic]).expect("subscribe");
        Processor {
            consumer,
            topic: topic.to_string(),
            stop_at: stop_at.clone(),
            processed: BTreeMap::new(),
        }
    }

    fn step(&mut self) {
        match self.consumer.poll(Duration::from_millis(50)) {
            Some(Ok(m)) => {
                assert_eq!(m.topic(), self.topic);
                let stop = self.stop_at.get(&m.partition()).copied().unwrap_or(0);
                if m.offset() < stop {
                    self.consumer
                        .store_offset_from_message(&m)
                        .expect("store offset");
                    self.processed
                        .entry(m.partition())
                        .or_default()
                        .push(m.offset());
                }
            }
            Some(Err(e)) => eprintln!("consumer error (retried by librdkafka): {e}"),
            None => {}
        }
    }

    fn done(&self) -> bool {
        self.stop_at.iter().all(|(p, stop)| {
            self.processed
                .get(p)
                .and_then(|v| v.last())
                .is_some_and(|last| *last == stop - 1)
        })
    }

    /// Processes until every partition reached its stop offset, then commits synchronously.
    fn run_and_commit(mut self, timeout: Duration) -> BTreeMap<i32, Vec<i64>> {
        let deadline = Instant::now() + timeout;
        while !self.done() {
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?} processing up to {:?}; processed {:?}",
                self.stop_at,
                self.processed
                    .iter()
                    .map(|(p, v)| (p, v.len()))
                    .collect::<Vec<_>>()
            );
            self.step();
        }
        self.commit();
        self.processed
    }

    fn commit(&self) {
        self.consumer
            .commit_consumer_state(CommitMode::Sync)
            .expect("commit_consumer_state(Sync)");
        // The committing member itself reads its commits back.
        let committed = self
            .consumer
            .committed(Duration::from_secs(10))
            .expect("committed()");
        let got: BTreeMap<i32, i64> = committed
            .elements_for_topic(&self.topic)
            .iter()
            .filter_map(|e| match e.offset() {
                Offset::Offset(o) => Some((e.partition(), o)),
                _ => None,
            })
            .collect();
        assert_eq!(got, self.stop_at, "committed() right after the commit");
    }
}

/// A new member of `group` consumes `topic` until each partition's last offset (`ends[p]` is
/// the log end); returns what it read per partition.
fn consume_as_new_member(
    broker: &Broker,
    group: &str,
    topic: &str,
    ends: &BTreeMap<i32, i64>,
    timeout: Duration,
) -> BTreeMap<i32, Vec<ConsumedRecord>> {
    let consumer: BaseConsumer = broker.group_config(group).create().expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let deadline = Instant::now() + timeout;
    let mut out: BTreeMap<i32, Vec<ConsumedRecord>> = BTreeMap::new();
    let done = |out: &BTreeMap<i32, Vec<ConsumedRecord>>| {
        ends.iter().all(|(p, end)| {
            out.get(p)
                .and_then(|v| v.last())
                .is_some_and(|r| r.offset == end - 1)
        })
    };
    while !done(&out) {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} resuming group {group}: read {:?}",
            out.iter()
                .map(|(p, v)| (p, v.first().map(|r| r.offset), v.len()))
                .collect::<Vec<_>>()
        );
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => out
                .entry(m.partition())
                .or_default()
                .push(ConsumedRecord::from_message(&m)),
            Some(Err(e)) => eprintln!("consumer error (retried by librdkafka): {e}"),
            None => {}
        }
    }
    out
}

/// Asserts `got[p]` is exactly offsets `from[p]..ends[p]`, in order.
fn assert_resumed_at(
    got: &BTreeMap<i32, Vec<ConsumedRecord>>,
    from: &BTreeMap<i32, i64>,
    ends: &BTreeMap<i32, i64>,
) {
    for (p, start) in from {
        let offsets: Vec<i64> = got
            .get(p)
            .map(|v| v.iter().map(|r| r.offset).collect())
            .unwrap_or_default();
        assert_eq!(
            offsets.first(),
            Some(start),
            "first offset the resumed group read from partition {p}"
        );
        assert_eq!(
            offsets,
            (*start..ends[p]).collect::<Vec<_>>(),
            "offsets the resumed group read from partition {p}"
        );
    }
}

#[test]
fn members_starting_together_are_assigned_once_thanks_to_the_initial_rebalance_delay() {
    starting_together_is_one_generation(false);
}

/// The same with `group.instance.id` (static members join with no member id and are never
/// asked for one): both in the first generation, no second rebalance, no revoke.
#[test]
fn static_members_starting_together_form_one_generation() {
    starting_together_is_one_generation(true);
}

fn starting_together_is_one_generation(fixed: bool) {
    let broker =
        Broker::start(BrokerOpts::new().env("STRATA_GROUP_INITIAL_REBALANCE_DELAY_MS", 3000));
    let topic = unique_topic("initial-delay");
    broker.create_topic(&topic, 6, &[]).unwrap();
    let group = unique_group("initial-delay");
    let members: Vec<Member> = (0..3)
        .map(|i| {
            let name = format!("member-{i}");
            let mut cfg = named(broker.group_config(&group), &name);
            if fixed {
                cfg.set("group.instance.id", &name);
            }
            let m = Member::start(&name, cfg, &topic);
            std::thread::sleep(Duration::from_millis(300));
            m
        })
        .collect();
    let refs: Vec<&Member> = members.iter().collect();
    wait_for_stable_assignment(&refs, 6, STABLE_FOR, SETTLE);
    for m in &members {
        let assigned: Vec<_> = m
            .assignment_history()
            .into_iter()
            .filter(|a| !a.is_empty())
            .collect();
        assert_eq!(
            assigned.len(),
            1,
            "{} was assigned more than once (one generation per arrival?): {assigned:?}",
            m.name
        );
    }
}

#[test]
fn three_members_share_six_partitions_exactly_once() {
    let broker = Broker::start_default();
    let topic = unique_topic("share-six");
    broker.create_topic(&topic, 6, &[]).unwrap();
    let group = unique_group("share-six");

    let members: Vec<Member> = (0..3)
        .map(|i| {
            let name = format!("member-{i}");
            Member::start(&name, named(broker.group_config(&group), &name), &topic)
        })
        .collect();
    let refs: Vec<&Member> = members.iter().collect();
    let stable = wait_for_stable_assignment(&refs, 6, STABLE_FOR, SETTLE);
    let stable_at = Instant::now();
    for (m, a) in members.iter().zip(&stable) {
        assert_eq!(
            a.len(),
            2,
            "{} holds {a:?}; six partitions over three members",
            m.name
        );
    }
    let view = broker
        .describe_group(&group)
        .unwrap()
        .expect("group listed");
    assert_eq!(view.members.len(), 3, "members in DescribeGroups: {view:?}");

    let expected = broker.produce_to_each(&topic, 6, 100, "once");
    wait_for("the group to consume all 600 records", SETTLE, || {
        members.iter().map(Member::record_count).sum::<usize>() >= expected.len()
    });
    // Nothing more may arrive: a second delivery would be a duplicate.
    let extra = wait_until(Duration::from_secs(1), || {
        members.iter().map(Member::record_count).sum::<usize>() > expected.len()
    });

    for (m, a) in members.iter().zip(&stable) {
        assert_eq!(&m.assignment(), a, "{} assignment changed", m.name);
        assert!(
            m.assigned_since().is_some_and(|t| t <= stable_at),
            "{} was reassigned after the group settled: {:?}",
            m.name,
            m.assignment_history()
        );
        for r in m.records() {
            assert!(
                a.contains(&r.partition),
                "{} consumed {}/{} outside its assignment {a:?}",
                m.name,
                r.partition,
                r.offset
            );
        }
    }
    let all: Vec<ConsumedRecord> = members.iter().flat_map(Member::records).collect();
    assert_exactly_once(&all, &expected);
    assert!(!extra, "more records consumed than produced");
}

#[test]
fn a_member_killed_is_replaced_after_its_session_timeout() {
    let broker = Broker::start_default();
    let topic = unique_topic("killed-member");
    broker.create_topic(&topic, 6, &[]).unwrap();
    let group = unique_group("killed-member");
    let session = SESSION_TIMEOUT_MS.to_string();
    let heartbeat = HEARTBEAT_INTERVAL_MS.to_string();

    let survivors: Vec<Member> = (0..2)
        .map(|i| {
            let name = format!("survivor-{i}");
            Member::start(&name, named(broker.group_config(&group), &name), &topic)
        })
        .collect();
    let mut victim = CliMember::start(
        &broker,
        &topic,
        &group,
        &[
            ("client.id", "victim"),
            ("session.timeout.ms", &session),
            ("heartbeat.interval.ms", &heartbeat),
            ("auto.commit.interval.ms", "100"),
            ("fetch.wait.max.ms", "100"),
        ],
    );

    // The three members settle: the victim holds what the survivors do not.
    let all: BTreeSet<i32> = (0..6).collect();
    let victim_parts = wait_for_some("three members sharing six partitions", SETTLE, || {
        let view = broker.describe_group(&group).ok()??;
        let v = view.member("victim")?.partitions(&topic);
        let held: Vec<BTreeSet<i32>> = survivors.iter().map(Member::assignment).collect();
        let total = v.len() + held.iter().map(BTreeSet::len).sum::<usize>();
        let union: BTreeSet<i32> = held.iter().flatten().chain(&v).copied().collect();
        let settled = view.state == "Stable"
            && view.members.len() == 3
            && total == 6
            && union == all
            && !v.is_empty()
            && held.iter().all(|h| !h.is_empty())
            && survivors.iter().all(|m| {
                m.assigned_since()
                    .is_some_and(|t| t.elapsed() >= STABLE_FOR)
            });
        settled.then_some(v)
    });
    assert!(victim.is_running(), "victim exited:\n{}", victim.output());

    // Records before the kill: the victim reads and auto-commits its share.
    let before = broker.produce_to_each(&topic, 6, 10, "before");
    wait_for(
        "the victim to print its partitions' records",
        SETTLE,
        || {
            let got: BTreeSet<(i32, i64)> = victim
                .records()
                .iter()
                .map(|r| (r.partition, r.offset))
                .collect();
            victim_parts
                .iter()
                .all(|p| (0..10).all(|o| got.contains(&(*p, o))))
        },
    );
    for r in victim.records() {
        assert!(
            victim_parts.contains(&r.partition),
            "victim printed {}/{} outside its assignment {victim_parts:?}",
            r.partition,
            r.offset
        );
        assert_eq!(Some(&r.value), before.get(&(r.partition, r.offset)));
    }
    let parts: Vec<i32> = victim_parts.iter().copied().collect();
    let want: BTreeMap<i32, Option<i64>> = parts.iter().map(|p| (*p, Some(10))).collect();
    wait_for("the victim's auto-commits", SETTLE, || {
        broker
            .committed(&group, &topic, &parts)
            .is_ok_and(|c| c == want)
    });

    victim.kill9();
    let killed_at = Instant::now();
    let after = broker.produce_to_each(&topic, 6, 10, "after");

    let refs: Vec<&Member> = survivors.iter().collect();
    let taken_over = wait_for_stable_assignment(&refs, 6, Duration::ZERO, SETTLE);
    let replaced_after = killed_at.elapsed();
    let view = broker
        .describe_group(&group)
        .unwrap()
        .expect("group listed");
    assert_eq!(
        view.members.len(),
        2,
        "members after the victim's session expired: {view:?}"
    );
    assert!(
        view.member("victim").is_none(),
        "victim still listed: {view:?}"
    );
    // Heartbeats every 500 ms: the session cannot have expired sooner than 5.5 s after the kill.
    assert!(
        replaced_after >= Duration::from_millis(u64::from(SESSION_TIMEOUT_MS) - 1_000),
        "the victim's partitions moved {replaced_after:?} after kill -9, before its {}ms \
         session could expire",
        SESSION_TIMEOUT_MS
    );
    eprintln!("victim's partitions {victim_parts:?} reassigned {replaced_after:?} after kill -9: {taken_over:?}");

    wait_for(
        "the survivors to consume every record produced after the kill",
        SETTLE,
        || {
            let got: BTreeSet<(i32, i64)> = survivors
                .iter()
                .flat_map(Member::records)
                .map(|r| (r.partition, r.offset))
                .collect();
            after.keys().all(|k| got.contains(k))
        },
    );
    let records: Vec<ConsumedRecord> = survivors.iter().flat_map(Member::records).collect();
    for r in &records {
        let want = before
            .get(&(r.partition, r.offset))
            .or_else(|| after.get(&(r.partition, r.offset)));
        assert_eq!(
            r.value.as_deref(),
            want.map(String::as_bytes),
            "value at {}/{}",
            r.partition,
            r.offset
        );
    }
    // The victim's partitions resume at its committed offset: nothing skipped, nothing redone.
    for p in &victim_parts {
        let offsets: BTreeSet<i64> = records
            .iter()
            .filter(|r| r.partition == *p)
            .map(|r| r.offset)
            .collect();
        assert_eq!(
            offsets,
            (10..20).collect(),
            "offsets of the victim's partition {p} read by the survivors"
        );
    }
}

fn committed_offsets_survive(restart: impl FnOnce(&mut Broker)) {
    let mut broker = Broker::start_default();
    let topic = unique_topic("commit-restart");
    broker.create_topic(&topic, 2, &[]).unwrap();
    let group = unique_group("commit-restart");
    broker.produce_to_each(&topic, 2, 100, "restart");
    let ends: BTreeMap<i32, i64> = [(0, 100), (1, 100)].into();

    let stop_at: BTreeMap<i32, i64> = [(0, 37), (1, 61)].into();
    let processed = Processor::subscribe(&broker, &group, &topic, &stop_at).run_and_commit(SETTLE);
    for (p, offsets) in &processed {
        assert_eq!(
            offsets,
            &(0..stop_at[p]).collect::<Vec<_>>(),
            "partition {p}"
        );
    }
    // A later, lower commit of partition 0 replaces the earlier one: the latest commit wins.
    GroupClient::connect(&broker.kafka_addr)
        .unwrap()
        .simple_commit_ok(&group, &topic, &[(0, 20)]);
    let stop_at: BTreeMap<i32, i64> = [(0, 20), (1, 61)].into();
    let want: BTreeMap<i32, Option<i64>> = stop_at.iter().map(|(p, o)| (*p, Some(*o))).collect();
    assert_eq!(broker.committed(&group, &topic, &[0, 1]).unwrap(), want);

    restart(&mut broker);

    // The coordinator may answer COORDINATOR_LOAD_IN_PROGRESS while it rebuilds its state.
    let committed = wait_for_some("OffsetFetch after the restart", SETTLE, || {
        broker.committed(&group, &topic, &[0, 1]).ok()
    });
    assert_eq!(
        committed, want,
        "committed offsets after the restart (librdkafka)"
    );
    let mut raw = GroupClient::connect(&broker.kafka_addr).unwrap();
    assert_eq!(
        raw.fetched_offsets(&group, &topic, &[0, 1]),
        stop_at,
        "committed offsets after the restart (raw OffsetFetch)"
    );

    let got = consume_as_new_member(&broker, &group, &topic, &ends, SETTLE);
    assert_resumed_at(&got, &stop_at, &ends);
}

#[test]
fn committed_offsets_survive_a_clean_restart() {
    committed_offsets_survive(|broker| {
        broker.terminate();
        broker.restart();
    });
}

#[test]
fn committed_offsets_survive_a_kill_9() {
    committed_offsets_survive(|broker| {
        broker.kill9();
        broker.restart();
    });
}

#[test]
fn deleted_groups_and_offsets_stay_deleted_after_a_kill_9() {
    let mut broker = Broker::start_default();
    let topic = unique_topic("deleted-restart");
    broker.create_topic(&topic, 2, &[]).unwrap();
    let (gone, trimmed, kept) = (
        unique_group("gone"),
        unique_group("trimmed"),
        unique_group("kept"),
    );
    let mut c = GroupClient::connect(&broker.kafka_addr).unwrap();
    c.simple_commit_ok(&gone, &topic, &[(0, 5), (1, 6)]);
    c.simple_commit_ok(&trimmed, &topic, &[(0, 7), (1, 8)]);
    c.simple_commit_ok(&kept, &topic, &[(0, 9), (1, 10)]);
    assert_eq!(
        c.delete_groups(&[&gone]).unwrap(),
        vec![(gone.clone(), group_error::NONE)]
    );
    assert_eq!(
        c.offset_delete(&trimmed, &topic, &[0]).unwrap(),
        (0, vec![(0, 0)])
    );

    broker.kill9();
    broker.restart();

    let mut c = wait_for_some("a group client after the restart", SETTLE, || {
        GroupClient::connect(&broker.kafka_addr).ok()
    });
    // The coordinator may answer COORDINATOR_LOAD_IN_PROGRESS while it rebuilds its state.
    let fetch = |c: &mut GroupClient, g: &str| {
        let (err, parts) = wait_for_some("OffsetFetch after the restart", SETTLE, || {
            c.fetch_offsets(g, &topic, &[0, 1])
                .ok()
                .filter(|(e, _)| *e != group_error::COORDINATOR_LOAD_IN_PROGRESS)
        });
        assert_eq!(err, 0, "OffsetFetch of {g} after the restart");
        parts
            .into_iter()
            .map(|f| {
                assert_eq!(f.error, 0, "OffsetFetch of {g}, partition {}", f.partition);
                (f.partition, f.offset)
            })
            .collect::<BTreeMap<i32, i64>>()
    };
    assert_eq!(
        fetch(&mut c, &kept),
        [(0, 9), (1, 10)].into(),
        "untouched group"
    );
    assert_eq!(
        fetch(&mut c, &gone),
        [(0, -1), (1, -1)].into(),
        "deleted group"
    );
    assert_eq!(
        fetch(&mut c, &trimmed),
        [(0, -1), (1, 8)].into(),
        "deleted offset"
    );
    let listed = broker.list_groups().unwrap();
    assert!(
        !listed.iter().any(|(n, _, _)| *n == gone),
        "deleted group listed after the restart: {listed:?}"
    );
}

#[test]
fn a_member_that_leaves_hands_over_its_partitions_before_its_session_could_expire() {
    let broker = Broker::start_default();
    let topic = unique_topic("leaving");
    broker.create_topic(&topic, 4, &[]).unwrap();
    let group = unique_group("leaving");
    let stayer = Member::start("stayer", broker.group_config(&group), &topic);
    let leaver = Member::start("leaver", broker.group_config(&group), &topic);
    let shared = wait_for_stable_assignment(&[&stayer, &leaver], 4, STABLE_FOR, SETTLE);
    assert!(shared.iter().all(|a| a.len() == 2), "{shared:?}");

    let left_at = Instant::now();
    leaver.close();
    let all: BTreeSet<i32> = (0..4).collect();
    wait_for("the stayer to own every partition", SETTLE, || {
        stayer.assignment() == all
    });
    let handed_over = left_at.elapsed();
    // LeaveGroup rebalances at once; without it the move would wait for the 6 s session.
    assert!(
        handed_over < Duration::from_millis(u64::from(SESSION_TIMEOUT_MS) - 1_000),
        "partitions moved {handed_over:?} after the member left"
    );
    let view = broker
        .describe_group(&group)
        .unwrap()
        .expect("group listed");
    assert_eq!(
        (view.state.as_str(), view.members.len()),
        ("Stable", 1),
        "{view:?}"
    );
}

#[test]
fn a_static_member_restarting_within_its_session_keeps_its_partitions_without_a_rebalance() {
    let broker = Broker::start_default();
    let topic = unique_topic("static");
    broker.create_topic(&topic, 4, &[]).unwrap();
    let group = unique_group("static");
    let cfg = |instance: &str| {
        let mut cfg = named(broker.group_config(&group), instance);
        // Long enough that the restart below never races the session.
        cfg.set("group.instance.id", instance)
            .set("session.timeout.ms", "30000");
        cfg
    };
    let steady = Member::start("steady", cfg("steady"), &topic);
    let restarting = Member::start("restarting", cfg("restarting"), &topic);
    let before = wait_for_stable_assignment(&[&steady, &restarting], 4, STABLE_FOR, SETTLE);
    let steady_history = steady.assignment_history();

    // A static member does not send LeaveGroup on close; its replacement rejoins by instance id.
    restarting.close();
    let restarted = Member::start("restarted", cfg("restarting"), &topic);
    let after = wait_for_stable_assignment(&[&steady, &restarted], 4, STABLE_FOR, SETTLE);
    assert_eq!(
        after, before,
        "assignments after the static member restarted"
    );
    assert_eq!(
        steady.assignment_history(),
        steady_history,
        "the other member was never revoked (no rebalance)"
    );
    let view = broker
        .describe_group(&group)
        .unwrap()
        .expect("group listed");
    assert_eq!(view.members.len(), 2, "{view:?}");
}

#[test]
fn two_groups_on_one_topic_keep_independent_offsets() {
    let broker = Broker::start_default();
    let topic = unique_topic("two-groups");
    broker.create_topic(&topic, 3, &[]).unwrap();
    broker.produce_to_each(&topic, 3, 40, "two");
    let ends: BTreeMap<i32, i64> = (0..3).map(|p| (p, 40)).collect();
    let (group_a, group_b) = (unique_group("group-a"), unique_group("group-b"));
    let stop_a: BTreeMap<i32, i64> = [(0, 10), (1, 25), (2, 39)].into();
    let stop_b: BTreeMap<i32, i64> = [(0, 30), (1, 3), (2, 17)].into();

    // Both groups run at once, each owning every partition.
    let mut a = Processor::subscribe(&broker, &group_a, &topic, &stop_a);
    let mut b = Processor::subscribe(&broker, &group_b, &topic, &stop_b);
    let deadline = Instant::now() + SETTLE;
    while !(a.done() && b.done()) {
        assert!(Instant::now() < deadline, "timed out running both groups");
        a.step();
        b.step();
    }
    let all: BTreeSet<i32> = (0..3).collect();
    for (name, proc_) in [("a", &a), ("b", &b)] {
        let assigned: BTreeSet<i32> = proc_
            .consumer
            .assignment()
            .unwrap()
            .elements_for_topic(&topic)
            .iter()
            .map(|e| e.partition())
            .collect();
        assert_eq!(
            assigned, all,
            "group {name}'s only member owns every partition"
        );
    }
    a.commit();
    b.commit();
    drop((a, b));

    let some = |m: &BTreeMap<i32, i64>| -> BTreeMap<i32, Option<i64>> {
        m.iter().map(|(p, o)| (*p, Some(*o))).collect()
    };
    assert_eq!(
        broker.committed(&group_a, &topic, &[0, 1, 2]).unwrap(),
        some(&stop_a)
    );
    assert_eq!(
        broker.committed(&group_b, &topic, &[0, 1, 2]).unwrap(),
        some(&stop_b)
    );

    let got_b = consume_as_new_member(&broker, &group_b, &topic, &ends, SETTLE);
    assert_resumed_at(&got_b, &stop_b, &ends);
    let got_a = consume_as_new_member(&broker, &group_a, &topic, &ends, SETTLE);
    assert_resumed_at(&got_a, &stop_a, &ends);
    // Group b reading to the end committed nothing, and did not move group a.
    assert_eq!(
        broker.committed(&group_a, &topic, &[0, 1, 2]).unwrap(),
        some(&stop_a)
    );
}

#[test]
fn a_group_resumes_from_a_commit_in_the_middle_of_a_batch() {
    let broker = Broker::start_default();
    let topic = unique_topic("mid-batch-commit");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let records: Vec<RawRecord> = (0..100)
        .map(|o| RawRecord::new(format!("r{o}"), format!("value {o}"), now_ms()))
        .collect();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let base = conn
        .produce_ok(&topic, 0, encode_batch(&records, Compression::None, None))
        .unwrap();
    assert_eq!(base, 0, "base offset of the one 100-record batch");
    let group = unique_group("mid-batch-commit");

    {
        let consumer: BaseConsumer = broker.group_config(&group).create().unwrap();
        consumer.subscribe(&[&topic]).unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + SETTLE;
        while got.len() < 100 {
            assert!(Instant::now() < deadline, "read {} of 100", got.len());
            if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                got.push(m.offset());
            }
        }
        assert_eq!(got, (0..100).collect::<Vec<_>>());
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 0, Offset::Offset(37))
            .unwrap();
        consumer.commit(&tpl, CommitMode::Sync).unwrap();
    }
    assert_eq!(
        broker.committed(&group, &topic, &[0]).unwrap(),
        [(0, Some(37))].into()
    );

    let ends: BTreeMap<i32, i64> = [(0, 100)].into();
    let got = consume_as_new_member(&broker, &group, &topic, &ends, SETTLE);
    assert_resumed_at(&got, &[(0, 37)].into(), &ends);
    for r in &got[&0] {
        assert_eq!(r.key.as_deref(), Some(format!("r{}", r.offset).as_bytes()));
        assert_eq!(
            r.value.as_deref(),
            Some(format!("value {}", r.offset).as_bytes())
        );
    }
}

#[test]
fn find_coordinator_names_this_broker_for_single_and_batched_keys() {
    let broker = Broker::start_default();
    let (host, port) = broker.kafka_addr.rsplit_once(':').unwrap();
    let port: i32 = port.parse().unwrap();
    let mut c = GroupClient::connect(&broker.kafka_addr).unwrap();

    let group = unique_group("coordinator");
    let (err, node, h, p) = c.find_coordinator(&group).unwrap();
    assert_eq!(err, 0, "FindCoordinator error");
    assert_eq!((h.as_str(), p), (host, port), "coordinator address");
    assert!(node >= 0, "coordinator node id {node}");

    let keys = [group.as_str(), "another-group", "a-third"];
    let got = c.find_coordinators(&keys).unwrap();
    let got_keys: Vec<&str> = got.iter().map(|c| c.key.as_str()).collect();
    assert_eq!(got_keys, keys, "one coordinator per key, in order");
    for c in &got {
        assert_eq!(c.error, 0, "error for {}", c.key);
        assert_eq!(
            (c.node_id, c.host.as_str(), c.port),
            (node, host, port),
            "coordinator for {}",
            c.key
        );
    }
}

#[test]
fn bad_group_requests_get_kafka_error_codes_and_other_groups_keep_working() {
    let mut broker = Broker::start_default();
    let topic = unique_topic("bad-group-requests");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let mut c = GroupClient::connect(&broker.kafka_addr).unwrap();
    let mut round = 0;
    let mut another_group_works = |c: &mut GroupClient| {
        round += 1;
        let g = unique_group("healthy");
        c.simple_commit_ok(&g, &topic, &[(0, round)]);
        assert_eq!(c.fetched_offsets(&g, &topic, &[0]), [(0, round)].into());
    };

    // A commit outside group management (generation -1, no member) creates a simple group.
    let simple = unique_group("simple");
    c.simple_commit_ok(&simple, &topic, &[(0, 7)]);
    assert_eq!(c.fetched_offsets(&simple, &topic, &[0]), [(0, 7)].into());

    // A member of a generation of a group that does not exist: ILLEGAL_GENERATION for
    // OffsetCommit v8, the version this client uses (v9 is told GROUP_ID_NOT_FOUND).
    let ghost = unique_group("ghost");
    assert_eq!(
        c.commit(&ghost, 5, "x", &topic, &[(0, 3)]).unwrap(),
        vec![(0, group_error::ILLEGAL_GENERATION)],
        "OffsetCommit by member \"x\" of generation 5 of a group that does not exist"
    );
    assert_eq!(c.fetched_offsets(&ghost, &topic, &[0]), [(0, -1)].into());
    another_group_works(&mut c);

    // A real member makes the group non-empty.
    let live = unique_group("live");
    let joined = c
        .join(&live, 30_000, &topic)
        .unwrap()
        .unwrap_or_else(|e| panic!("JoinGroup failed with error {e}"));
    assert!(!joined.member_id.is_empty(), "member id assigned");
    assert_eq!(joined.leader, joined.member_id, "the only member leads");
    assert_eq!(joined.members, vec![joined.member_id.clone()]);
    assert!(joined.generation >= 1, "generation {}", joined.generation);
    let (err, mine) = c
        .sync(
            &live,
            joined.generation,
            &joined.member_id,
            &topic,
            &[(&joined.member_id, vec![0])],
        )
        .unwrap();
    assert_eq!((err, mine), (0, [0].into()), "SyncGroup by the leader");
    assert_eq!(
        c.heartbeat(&live, joined.generation, &joined.member_id)
            .unwrap(),
        0,
        "Heartbeat of the current generation"
    );
    assert_eq!(
        c.commit(
            &live,
            joined.generation,
            &joined.member_id,
            &topic,
            &[(0, 11)]
        )
        .unwrap(),
        vec![(0, 0)],
        "OffsetCommit by the member"
    );

    assert_eq!(
        c.commit(&live, 5, "not-a-member", &topic, &[(0, 99)])
            .unwrap(),
        vec![(0, group_error::UNKNOWN_MEMBER_ID)],
        "OffsetCommit by an unknown member of a non-empty group"
    );
    assert_eq!(
        c.heartbeat(&live, joined.generation - 1, &joined.member_id)
            .unwrap(),
        group_error::ILLEGAL_GENERATION,
        "Heartbeat with a stale generation"
    );
    assert_eq!(
        c.commit(
            &live,
            joined.generation - 1,
            &joined.member_id,
            &topic,
            &[(0, 98)]
        )
        .unwrap(),
        vec![(0, group_error::ILLEGAL_GENERATION)],
        "OffsetCommit with a stale generation"
    );
    assert_eq!(
        c.fetched_offsets(&live, &topic, &[0]),
        [(0, 11)].into(),
        "rejected commits left the member's commit alone"
    );
    another_group_works(&mut c);

    let resp = c.join_request("", "", 30_000, &topic).unwrap();
    assert_eq!(
        resp.error_code,
        group_error::INVALID_GROUP_ID,
        "JoinGroup with an empty group id"
    );
    another_group_works(&mut c);

    let longest = "g".repeat(255);
    c.simple_commit_ok(&longest, &topic, &[(0, 255)]);
    assert_eq!(c.fetched_offsets(&longest, &topic, &[0]), [(0, 255)].into());
    let resp = c
        .join_request(&"g".repeat(256), "", 30_000, &topic)
        .unwrap();
    assert_eq!(
        resp.error_code,
        group_error::INVALID_GROUP_ID,
        "JoinGroup with a 256-byte group id"
    );
    another_group_works(&mut c);

    assert_eq!(c.leave(&live, &joined.member_id).unwrap(), 0, "LeaveGroup");
    // The member that left is a zombie now: its commit, with its old id and generation, must
    // not move the group's offsets (Kafka: UNKNOWN_MEMBER_ID), nor its heartbeat or leave.
    assert_eq!(
        c.commit(
            &live,
            joined.generation,
            &joined.member_id,
            &topic,
            &[(0, 3)]
        )
        .unwrap(),
        vec![(0, group_error::UNKNOWN_MEMBER_ID)],
        "OffsetCommit by a member that left"
    );
    assert_eq!(
        c.heartbeat(&live, joined.generation, &joined.member_id)
            .unwrap(),
        group_error::UNKNOWN_MEMBER_ID,
        "Heartbeat by a member that left"
    );
    assert_eq!(
        c.leave(&live, &joined.member_id).unwrap(),
        group_error::UNKNOWN_MEMBER_ID,
        "LeaveGroup by a member that left"
    );
    broker.assert_running();
    let mut fresh = GroupClient::connect(&broker.kafka_addr).unwrap();
    another_group_works(&mut fresh);
    assert_eq!(fresh.fetched_offsets(&live, &topic, &[0]), [(0, 11)].into());
}

#[test]
fn a_member_that_stops_heartbeating_is_removed_after_its_session_timeout() {
    let broker = Broker::start_default();
    let topic = unique_topic("silent-member");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let group = unique_group("silent-member");
    let mut c = GroupClient::connect(&broker.kafka_addr).unwrap();
    let session = SESSION_TIMEOUT_MS as i32;
    let joined = c
        .join(&group, session, &topic)
        .unwrap()
        .unwrap_or_else(|e| panic!("JoinGroup failed with error {e}"));
    let (err, _) = c
        .sync(
            &group,
            joined.generation,
            &joined.member_id,
            &topic,
            &[(&joined.member_id, vec![0])],
        )
        .unwrap();
    assert_eq!(err, 0, "SyncGroup");
    assert_eq!(
        c.heartbeat(&group, joined.generation, &joined.member_id)
            .unwrap(),
        0
    );
    let last_heartbeat = Instant::now();

    let view = broker
        .describe_group(&group)
        .unwrap()
        .expect("group listed");
    assert_eq!((view.state.as_str(), view.members.len()), ("Stable", 1));
    wait_for("the silent member to expire", SETTLE, || {
        broker
            .describe_group(&group)
            .ok()
            .flatten()
            .is_some_and(|v| v.members.is_empty())
    });
    let expired_after = last_heartbeat.elapsed();
    assert!(
        expired_after >= Duration::from_millis(u64::from(SESSION_TIMEOUT_MS) - 500),
        "member removed {expired_after:?} after its last heartbeat; session is {session} ms"
    );
    let view = broker
        .describe_group(&group)
        .unwrap()
        .expect("group listed");
    assert_eq!(view.state, "Empty", "state after the only member expired");
    assert_eq!(
        c.heartbeat(&group, joined.generation, &joined.member_id)
            .unwrap(),
        group_error::UNKNOWN_MEMBER_ID,
        "Heartbeat of the expired member"
    );
}

#[test]
fn list_and_describe_groups() {
    let broker = Broker::start_default();
    let topic = unique_topic("described");
    broker.create_topic(&topic, 4, &[]).unwrap();
    let group = unique_group("described");
    let cfg = |name: &str| {
        let mut cfg = named(broker.group_config(&group), name);
        cfg.set("partition.assignment.strategy", "roundrobin");
        cfg
    };
    let members = [
        Member::start("member-a", cfg("member-a"), &topic),
        Member::start("member-b", cfg("member-b"), &topic),
    ];
    let stable = wait_for_stable_assignment(&[&members[0], &members[1]], 4, STABLE_FOR, SETTLE);

    // A simple group: commits only, never a member.
    let simple = unique_group("simple-listed");
    GroupClient::connect(&broker.kafka_addr)
        .unwrap()
        .simple_commit_ok(&simple, &topic, &[(0, 1)]);

    let view = broker
        .describe_group(&group)
        .unwrap()
        .expect("group listed");
    assert_eq!(view.name, group);
    assert_eq!(view.state, "Stable");
    assert_eq!(view.protocol_type, "consumer");
    assert_eq!(view.protocol, "roundrobin");
    assert_eq!(view.members.len(), 2, "{view:?}");
    let ids: BTreeSet<&str> = view.members.iter().map(|m| m.member_id.as_str()).collect();
    assert_eq!(ids.len(), 2, "distinct member ids: {view:?}");
    assert!(ids.iter().all(|id| !id.is_empty()), "{view:?}");
    for (m, a) in members.iter().zip(&stable) {
        let v = view
            .member(&m.name)
            .unwrap_or_else(|| panic!("{} not described: {view:?}", m.name));
        assert_eq!(
            &v.partitions(&topic),
            a,
            "{}'s assignment as described",
            m.name
        );
    }

    let listed = broker.list_groups().unwrap();
    let find = |g: &str| listed.iter().find(|(n, _, _)| n == g).cloned();
    let (_, ptype, state) = find(&group).unwrap_or_else(|| panic!("{group} not in {listed:?}"));
    assert_eq!((ptype.as_str(), state.as_str()), ("consumer", "Stable"));
    let (_, _, state) = find(&simple).unwrap_or_else(|| panic!("{simple} not in {listed:?}"));
    assert_eq!(state, "Empty", "a group with commits and no members");

    for m in members {
        m.close();
    }
    let view = broker
        .describe_group(&group)
        .unwrap()
        .expect("group listed");
    assert_eq!(
        (view.state.as_str(), view.members.len()),
        ("Empty", 0),
        "after both members left: {view:?}"
    );
}

#[test]
fn describe_groups_reports_where_each_member_connects_from() {
    let broker = Broker::start_default();
    let topic = unique_topic("client-host");
    broker.create_topic(&topic, 2, &[]).unwrap();
    let group = unique_group("client-host");
    let member = Member::start("host", named(broker.group_config(&group), "host"), &topic);
    wait_for_stable_assignment(&[&member], 2, STABLE_FOR, SETTLE);
    let view = broker
        .describe_group(&group)
        .unwrap()
        .expect("group listed");
    let m = view.member("host").unwrap_or_else(|| panic!("{view:?}"));
    // Kafka answers the member's address as Java prints it: "/127.0.0.1".
    assert!(
        m.client_host.contains("127.0.0.1"),
        "client host of the member: {:?}",
        m.client_host
    );
}

#[test]
fn delete_groups_removes_an_empty_group_and_refuses_one_with_members() {
    let broker = Broker::start_default();
    let topic = unique_topic("deleted");
    broker.create_topic(&topic, 2, &[]).unwrap();
    broker.produce_to_each(&topic, 2, 20, "deleted");
    let admin = broker.admin();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));

    // A group whose only member committed and left.
    let empty = unique_group("empty");
    let stop_at: BTreeMap<i32, i64> = [(0, 12), (1, 20)].into();
    Processor::subscribe(&broker, &empty, &topic, &stop_at).run_and_commit(SETTLE);
    let view = broker
        .describe_group(&empty)
        .unwrap()
        .expect("group listed");
    assert_eq!((view.state.as_str(), view.members.len()), ("Empty", 0));

    // A group with a live member.
    let busy = unique_group("busy");
    let member = Member::start("busy", broker.group_config(&busy), &topic);
    let assigned = wait_for_stable_assignment(&[&member], 2, STABLE_FOR, SETTLE);

    let results = block_on(admin.delete_groups(&[&busy], &opts)).unwrap();
    assert_eq!(
        results,
        vec![Err((busy.clone(), RDKafkaErrorCode::NonEmptyGroup))],
        "DeleteGroups of a group with a member"
    );
    let mut raw = GroupClient::connect(&broker.kafka_addr).unwrap();
    assert_eq!(
        raw.delete_groups(&[&busy]).unwrap(),
        vec![(busy.clone(), group_error::NON_EMPTY_GROUP)]
    );
    let view = broker.describe_group(&busy).unwrap().expect("group listed");
    assert_eq!((view.state.as_str(), view.members.len()), ("Stable", 1));
    assert_eq!(
        member.assignment(),
        assigned[0],
        "the member kept its partitions"
    );

    let results = block_on(admin.delete_groups(&[&empty], &opts)).unwrap();
    assert_eq!(
        results,
        vec![Ok(empty.clone())],
        "DeleteGroups of an empty group"
    );
    assert_eq!(
        raw.fetched_offsets(&empty, &topic, &[0, 1]),
        [(0, -1), (1, -1)].into(),
        "OffsetFetch after the group was deleted"
    );
    assert_eq!(
        broker.committed(&empty, &topic, &[0, 1]).unwrap(),
        [(0, None), (1, None)].into()
    );
    let listed = broker.list_groups().unwrap();
    assert!(
        !listed.iter().any(|(n, _, _)| *n == empty),
        "deleted group still listed: {listed:?}"
    );
    assert_eq!(
        raw.delete_groups(&[&empty]).unwrap(),
        vec![(empty.clone(), group_error::GROUP_ID_NOT_FOUND)],
        "deleting it again"
    );

    // The name is free again: a new member starts from the beginning.
    let ends: BTreeMap<i32, i64> = [(0, 20), (1, 20)].into();
    let got = consume_as_new_member(&broker, &empty, &topic, &ends, SETTLE);
    assert_resumed_at(&got, &[(0, 0), (1, 0)].into(), &ends);
}

#[test]
fn offset_delete_removes_one_partitions_commit_from_an_empty_group() {
    let broker = Broker::start_default();
    let topic = unique_topic("offset-delete");
    broker.create_topic(&topic, 2, &[]).unwrap();
    let mut c = GroupClient::connect(&broker.kafka_addr).unwrap();

    let idle = unique_group("idle");
    c.simple_commit_ok(&idle, &topic, &[(0, 5), (1, 6)]);
    assert_eq!(
        c.offset_delete(&idle, &topic, &[0]).unwrap(),
        (0, vec![(0, 0)]),
        "OffsetDelete in an empty group"
    );
    assert_eq!(
        c.fetched_offsets(&idle, &topic, &[0, 1]),
        [(0, -1), (1, 6)].into(),
        "only partition 0's commit is gone"
    );
}

#[test]
fn offset_delete_refuses_a_topic_a_running_group_is_subscribed_to() {
    let broker = Broker::start_default();
    let topic = unique_topic("subscribed");
    let old_topic = unique_topic("unsubscribed");
    broker.create_topic(&topic, 2, &[]).unwrap();
    broker.create_topic(&old_topic, 1, &[]).unwrap();
    let mut c = GroupClient::connect(&broker.kafka_addr).unwrap();

    // A member subscribed to `topic` (only) holds the group's commits of both topics.
    let live = unique_group("subscribed");
    let joined = c
        .join(&live, 30_000, &topic)
        .unwrap()
        .unwrap_or_else(|e| panic!("JoinGroup failed with error {e}"));
    let (err, _) = c
        .sync(
            &live,
            joined.generation,
            &joined.member_id,
            &topic,
            &[(&joined.member_id, vec![0, 1])],
        )
        .unwrap();
    assert_eq!(err, 0, "SyncGroup");
    assert_eq!(
        c.commit(
            &live,
            joined.generation,
            &joined.member_id,
            &topic,
            &[(0, 9)]
        )
        .unwrap(),
        vec![(0, 0)]
    );
    assert_eq!(
        c.commit(
            &live,
            joined.generation,
            &joined.member_id,
            &old_topic,
            &[(0, 4)]
        )
        .unwrap(),
        vec![(0, 0)]
    );

    let (err, parts) = c.offset_delete(&live, &topic, &[0]).unwrap();
    assert_eq!(err, 0, "OffsetDelete top-level error");
    assert_eq!(
        parts,
        vec![(0, group_error::GROUP_SUBSCRIBED_TO_TOPIC)],
        "OffsetDelete of a topic the group is subscribed to"
    );
    assert_eq!(c.fetched_offsets(&live, &topic, &[0]), [(0, 9)].into());

    // A topic the members no longer subscribe to can be cleaned up while the group runs.
    assert_eq!(
        c.offset_delete(&live, &old_topic, &[0]).unwrap(),
        (0, vec![(0, 0)]),
        "OffsetDelete of a topic the running group is not subscribed to"
    );
    assert_eq!(c.fetched_offsets(&live, &old_topic, &[0]), [(0, -1)].into());
}

#[test]
fn offsets_of_an_empty_group_expire_after_offsets_retention_and_stay_gone_after_a_restart() {
    // Retention 0 minutes, checked every 200 ms: an empty group's offsets go at the next check.
    let mut broker = Broker::start(
        strata_tests::BrokerOpts::new()
            .env("STRATA_OFFSETS_RETENTION_MINUTES", 0)
            .env("STRATA_LOG_RETENTION_CHECK_INTERVAL_MS", 200),
    );
    let topic = unique_topic("expiry");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let group = unique_group("expiring");
    let mut c = GroupClient::connect(&broker.kafka_addr).unwrap();
    c.simple_commit_ok(&group, &topic, &[(0, 5)]);
    let offset = |c: &mut GroupClient| {
        c.fetch_offsets(&group, &topic, &[0])
            .ok()
            .map(|(_, p)| p[0].offset)
    };
    assert!(
        wait_until(Duration::from_secs(15), || offset(&mut c) == Some(-1)),
        "the committed offset did not expire"
    );
    broker.kill9();
    broker.restart();
    let mut c = wait_for_some(
        "a group client after the restart",
        Duration::from_secs(15),
        || GroupClient::connect(&broker.kafka_addr).ok(),
    );
    assert_eq!(
        offset(&mut c),
        Some(-1),
        "expired offsets must not come back from the log"
    );
}

/// JoinGroup v9 (KIP-814): a static leader restarting into a stable group with unchanged
/// metadata keeps the assignment in force — v9 says so (skip the assignment; the members
/// still come, so it keeps watching their subscriptions), an older client gets no members.
/// DescribeGroups v6 answers GROUP_ID_NOT_FOUND for a group that does not exist (KIP-1043),
/// v5 describes it Dead.
#[test]
fn a_static_leader_rejoining_a_stable_group_skips_the_assignment() {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
    use kafka_protocol::messages::{
        DescribeGroupsRequest, GroupId, JoinGroupRequest, JoinGroupResponse, SyncGroupRequest,
    };
    let broker = Broker::start_default();
    let group = unique_group("static-leader");
    let mut c = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let join = |c: &mut KafkaConn, version: i16| -> JoinGroupResponse {
        let req = JoinGroupRequest::default()
            .with_group_id(GroupId(group.clone().into()))
            .with_session_timeout_ms(30_000)
            .with_rebalance_timeout_ms(30_000)
            .with_group_instance_id(Some("instance-a".into()))
            .with_protocol_type("consumer".into())
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name("range".into())
                .with_metadata(bytes::Bytes::from_static(b"subscription"))])
            .with_reason(Some("a test restarts it".into()));
        c.request(version, &req).unwrap()
    };
    let sync = |c: &mut KafkaConn, j: &JoinGroupResponse, assignment: &'static [u8]| {
        let assignments = if assignment.is_empty() {
            vec![]
        } else {
            vec![SyncGroupRequestAssignment::default()
                .with_member_id(j.member_id.clone())
                .with_assignment(bytes::Bytes::from_static(assignment))]
        };
        let req = SyncGroupRequest::default()
            .with_group_id(GroupId(group.clone().into()))
            .with_generation_id(j.generation_id)
            .with_member_id(j.member_id.clone())
            .with_group_instance_id(Some("instance-a".into()))
            .with_protocol_type(Some("consumer".into()))
            .with_protocol_name(Some("range".into()))
            .with_assignments(assignments);
        let r = c.request(5, &req).unwrap();
        assert_eq!(r.error_code, 0, "{r:?}");
        r.assignment
    };

    let first = join(&mut c, 9);
    assert_eq!(first.error_code, 0, "{first:?}");
    assert_eq!(first.leader, first.member_id);
    assert!(!first.skip_assignment);
    assert_eq!(first.members.len(), 1);
    assert_eq!(&sync(&mut c, &first, b"partitions")[..], b"partitions");

    // The process restarts: same instance id, no member id.
    let again = join(&mut c, 9);
    assert_eq!(again.error_code, 0, "{again:?}");
    assert_ne!(again.member_id, first.member_id, "a new member id");
    assert_eq!(again.leader, again.member_id, "still the leader");
    assert_eq!(again.generation_id, first.generation_id, "no rebalance");
    assert!(again.skip_assignment, "{again:?}");
    assert_eq!(again.members.len(), 1, "the members, to watch");
    assert_eq!(
        &sync(&mut c, &again, b"")[..],
        b"partitions",
        "the assignment in force"
    );
    // The old process is a zombie: its commit and heartbeat name an instance that is another
    // member's now (FENCED_INSTANCE_ID); the new member's get past that check (to the topic,
    // which does not exist here).
    let commit = |c: &mut KafkaConn, j: &JoinGroupResponse| {
        use kafka_protocol::messages::offset_commit_request::{
            OffsetCommitRequestPartition, OffsetCommitRequestTopic,
        };
        use kafka_protocol::messages::{OffsetCommitRequest, TopicName};
        let req = OffsetCommitRequest::default()
            .with_group_id(GroupId(group.clone().into()))
            .with_generation_id_or_member_epoch(j.generation_id)
            .with_member_id(j.member_id.clone())
            .with_group_instance_id(Some("instance-a".into()))
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(TopicName("no-such-topic".into()))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(5)])]);
        c.request(9, &req).unwrap().topics[0].partitions[0].error_code
    };
    let heartbeat = |c: &mut KafkaConn, j: &JoinGroupResponse| {
        let req = kafka_protocol::messages::HeartbeatRequest::default()
            .with_group_id(GroupId(group.clone().into()))
            .with_generation_id(j.generation_id)
            .with_member_id(j.member_id.clone())
            .with_group_instance_id(Some("instance-a".into()));
        c.request(4, &req).unwrap().error_code
    };
    const FENCED_INSTANCE_ID: i16 = 82;
    assert_eq!(
        commit(&mut c, &first),
        FENCED_INSTANCE_ID,
        "the zombie's commit"
    );
    assert_eq!(
        heartbeat(&mut c, &first),
        FENCED_INSTANCE_ID,
        "the zombie's heartbeat"
    );
    assert_eq!(
        commit(&mut c, &again),
        3,
        "UNKNOWN_TOPIC_OR_PARTITION, past the fencing"
    );
    assert_eq!(heartbeat(&mut c, &again), 0);
    let old = join(&mut c, 7);
    assert_eq!((old.error_code, old.leader == old.member_id), (0, true));
    assert!(old.members.is_empty(), "before v9: nothing to assign from");

    let describe = |c: &mut KafkaConn, version: i16, id: &str| {
        let req =
            DescribeGroupsRequest::default().with_groups(vec![GroupId(id.to_string().into())]);
        let mut r = c.request(version, &req).unwrap();
        r.groups.remove(0)
    };
    let known = describe(&mut c, 6, &group);
    assert_eq!(
        (known.error_code, known.group_state.as_str()),
        (0, "Stable")
    );
    let unknown = describe(&mut c, 6, "no-such-group");
    assert_eq!(unknown.error_code, 69, "GROUP_ID_NOT_FOUND: {unknown:?}");
    assert!(unknown
        .error_message
        .is_some_and(|m| m.contains("not found")));
    let unknown = describe(&mut c, 5, "no-such-group");
    assert_eq!(
        (unknown.error_code, unknown.group_state.as_str()),
        (0, "Dead")
    );
}

/// A librdkafka consumer in a KIP-848 group (`group.protocol=consumer`).
fn kip848_consumer(broker: &Broker, group: &str, topic: &str) -> BaseConsumer {
    kip848_consumer_as(broker, group, topic, None)
}

/// The same, static when `instance` names its `group.instance.id`.
fn kip848_consumer_as(
    broker: &Broker,
    group: &str,
    topic: &str,
    instance: Option<&str>,
) -> BaseConsumer {
    let mut cfg = broker.client_config();
    if let Some(instance) = instance {
        cfg.set("group.instance.id", instance);
    }
    cfg.set("group.id", group)
        .set("group.protocol", "consumer")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        .set("fetch.wait.max.ms", "100");
    let c: BaseConsumer = cfg.create().expect("consumer");
    c.subscribe(&[topic]).expect("subscribe");
    c
}

fn assigned(c: &BaseConsumer) -> BTreeSet<i32> {
    c.assignment()
        .map(|tpl| tpl.elements().iter().map(|e| e.partition()).collect())
        .unwrap_or_default()
}

/// KIP-848's consumer protocol with librdkafka: the coordinator assigns the partitions; a
/// second member gets its share only after the first gave it up (no partition is ever read
/// by both); commits carry the member epoch; a member leaving hands everything to the
/// other; ConsumerGroupDescribe and ListGroups show the group; a new member resumes from the
/// committed offsets.
#[test]
fn consumer_protocol_members_share_hand_over_and_resume_from_commits() {
    use kafka_protocol::messages::{ConsumerGroupDescribeRequest, GroupId, ListGroupsRequest};
    let broker =
        Broker::start(BrokerOpts::new().env("STRATA_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS", 300));
    let topic = unique_topic("kip848");
    broker.create_topic(&topic, 6, &[]).unwrap();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let group = unique_group("kip848");
    let a = kip848_consumer(&broker, &group, &topic);
    let mut seen: BTreeMap<(i32, i64), &'static str> = BTreeMap::new();
    let drain =
        |c: &BaseConsumer, who: &'static str, seen: &mut BTreeMap<(i32, i64), &'static str>| {
            while let Some(m) = c.poll(Duration::from_millis(50)) {
                let m = m.expect("consume");
                let before = seen.insert((m.partition(), m.offset()), who);
                assert!(before.is_none() || before == Some(who), "read twice: {m:?}");
            }
        };
    wait_for("a to own all six", SETTLE, || {
        drain(&a, "a", &mut seen);
        assigned(&a).len() == 6
    });
    let b = kip848_consumer(&broker, &group, &topic);
    wait_for("three partitions each", SETTLE, || {
        drain(&a, "a", &mut seen);
        drain(&b, "b", &mut seen);
        let (pa, pb) = (assigned(&a), assigned(&b));
        pa.len() == 3 && pb.len() == 3 && pa.is_disjoint(&pb)
    });
    // Records written now are read by their partition's owner only.
    let records: Vec<RawRecord> = (0..600)
        .map(|i| RawRecord::new(format!("k{i}"), format!("v{i}"), now_ms()))
        .collect();
    for p in 0..6 {
        let batch = encode_batch(&records[p * 100..(p + 1) * 100], Compression::None, None);
        conn.produce_ok(&topic, p as i32, batch).unwrap();
    }
    wait_for("every record read", SETTLE, || {
        drain(&a, "a", &mut seen);
        drain(&b, "b", &mut seen);
        seen.len() == 600
    });
    let owned_by_a = assigned(&a);
    assert!(seen
        .iter()
        .all(|((p, _), who)| (*who == "a") == owned_by_a.contains(p)));
    // Commits under each member's epoch.
    a.commit_consumer_state(CommitMode::Sync)
        .expect("a commits");
    b.commit_consumer_state(CommitMode::Sync)
        .expect("b commits");

    let described = conn
        .request(
            1,
            &ConsumerGroupDescribeRequest::default()
                .with_group_ids(vec![GroupId(group.clone().into())]),
        )
        .unwrap();
    let g = &described.groups[0];
    assert_eq!(
        (g.error_code, g.group_state.as_str()),
        (0, "Stable"),
        "{g:?}"
    );
    assert_eq!(g.members.len(), 2);
    assert!(g.members.iter().all(|m| m.member_epoch == g.group_epoch
        && m.assignment.topic_partitions[0].partitions.len() == 3));
    // OffsetFetch v9 names the fetching member (KIP-848): a current member at its epoch, or
    // no member at all (an admin client), may fetch; a stale epoch or an unknown member not.
    let fetch_as = |conn: &mut KafkaConn, member: Option<&str>, epoch: i32| {
        use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
        use kafka_protocol::messages::OffsetFetchRequest;
        let r = conn
            .request(
                9,
                &OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default(
                )
                .with_group_id(GroupId(group.clone().into()))
                .with_member_id(member.map(|m| m.to_string().into()))
                .with_member_epoch(epoch)
                .with_topics(None)]),
            )
            .unwrap();
        let g = &r.groups[0];
        (g.error_code, g.topics.len())
    };
    let (member, epoch) = (g.members[0].member_id.as_str(), g.members[0].member_epoch);
    assert_eq!(fetch_as(&mut conn, Some(member), epoch), (0, 1));
    assert_eq!(fetch_as(&mut conn, None, -1), (0, 1));
    assert_eq!(
        fetch_as(&mut conn, Some(member), epoch - 1).0,
        113,
        "STALE_MEMBER_EPOCH"
    );
    assert_eq!(
        fetch_as(&mut conn, Some("nobody"), epoch).0,
        25,
        "UNKNOWN_MEMBER_ID"
    );
    let listed = conn
        .request(
            5,
            &ListGroupsRequest::default().with_types_filter(vec!["consumer".into()]),
        )
        .unwrap();
    assert!(listed
        .groups
        .iter()
        .any(|l| l.group_id.0.as_str() == group && l.group_type.as_str() == "consumer"));

    // b leaves: a takes all six.
    drop(b);
    wait_for("a to own all six again", SETTLE, || {
        drain(&a, "a", &mut seen);
        assigned(&a).len() == 6
    });
    drop(a);

    // A newcomer resumes from the commits: only what is produced now.
    for p in 0..6 {
        let batch = encode_batch(
            &[RawRecord::new(
                "late".to_string(),
                format!("late-{p}"),
                now_ms(),
            )],
            Compression::None,
            None,
        );
        conn.produce_ok(&topic, p, batch).unwrap();
    }
    let c = kip848_consumer(&broker, &group, &topic);
    let mut late = Vec::new();
    wait_for("the six late records", SETTLE, || {
        while let Some(m) = c.poll(Duration::from_millis(50)) {
            let m = m.expect("consume");
            late.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string());
        }
        late.len() >= 6
    });
    late.sort();
    assert_eq!(
        late,
        (0..6).map(|p| format!("late-{p}")).collect::<Vec<_>>()
    );
}

/// KIP-848 static membership with librdkafka: a static member's process that closes leaves
/// for a while (epoch -2); the next process with its `group.instance.id` takes its place and
/// partitions back at once, with no rebalance (the group epoch does not move) and the other
/// member untouched.
#[test]
fn a_static_consumer_protocol_member_restarting_gets_its_partitions_back_without_a_rebalance() {
    use kafka_protocol::messages::{ConsumerGroupDescribeRequest, GroupId};
    let broker =
        Broker::start(BrokerOpts::new().env("STRATA_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS", 300));
    let topic = unique_topic("kip848-static");
    broker.create_topic(&topic, 4, &[]).unwrap();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let group = unique_group("kip848-static");
    let poll = |c: &BaseConsumer| while c.poll(Duration::from_millis(20)).is_some() {};
    let a = kip848_consumer_as(&broker, &group, &topic, Some("app-a"));
    let b = kip848_consumer(&broker, &group, &topic);
    wait_for("two partitions each", SETTLE, || {
        poll(&a);
        poll(&b);
        let (pa, pb) = (assigned(&a), assigned(&b));
        pa.len() == 2 && pb.len() == 2 && pa.is_disjoint(&pb)
    });
    let describe = |conn: &mut KafkaConn| {
        let r = conn
            .request(
                1,
                &ConsumerGroupDescribeRequest::default()
                    .with_group_ids(vec![GroupId(group.clone().into())]),
            )
            .unwrap();
        let g = r.groups[0].clone();
        assert_eq!(g.error_code, 0, "{g:?}");
        g
    };
    wait_for("a stable group", SETTLE, || {
        poll(&a);
        poll(&b);
        describe(&mut conn).group_state.as_str() == "Stable"
    });
    let (epoch, a_owns, b_owns) = (describe(&mut conn).group_epoch, assigned(&a), assigned(&b));

    drop(a);
    let away = describe(&mut conn);
    assert_eq!(
        away.group_epoch, epoch,
        "a static member leaving does not rebalance"
    );
    assert_eq!(away.members.len(), 2, "its place waits: {away:?}");
    let a2 = kip848_consumer_as(&broker, &group, &topic, Some("app-a"));
    wait_for("the new process to own a's partitions", SETTLE, || {
        poll(&a2);
        poll(&b);
        assigned(&a2) == a_owns
    });
    let back = describe(&mut conn);
    assert_eq!(back.group_epoch, epoch, "no rebalance: {back:?}");
    assert_eq!(back.members.len(), 2);
    assert_eq!(assigned(&b), b_owns, "the other member was never disturbed");
}

/// KIP-848 state lives in `__consumer_offsets` in Kafka's record layout: after a kill -9 of
/// its coordinator, the restarted broker takes the group over at the same epochs; the
/// librdkafka members carry on heartbeating with no rebalance, keep their partitions and read
/// what is produced next.
#[test]
fn a_consumer_protocol_group_carries_on_after_its_coordinator_is_killed_without_a_rebalance() {
    use kafka_protocol::messages::consumer_group_describe_response::DescribedGroup;
    use kafka_protocol::messages::{ConsumerGroupDescribeRequest, GroupId};
    // A fixed listener: the members reconnect to the restarted broker where they left it.
    let mut opts = BrokerOpts::new().env("STRATA_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS", 300);
    opts.kafka_addr = Some(format!("127.0.0.1:{}", strata_tests::cluster::free_port()));
    let mut broker = Broker::start(opts);
    let topic = unique_topic("kip848-failover");
    broker.create_topic(&topic, 4, &[]).unwrap();
    // A topic nobody subscribes to: none of its partitions may be assigned.
    broker
        .create_topic(&unique_topic("kip848-unsubscribed"), 4, &[])
        .unwrap();
    let group = unique_group("kip848-failover");
    let describe = |broker: &Broker| -> Option<DescribedGroup> {
        let mut conn = KafkaConn::connect(&broker.kafka_addr).ok()?;
        let request = ConsumerGroupDescribeRequest::default()
            .with_group_ids(vec![GroupId(group.clone().into())]);
        let g = conn.request(1, &request).ok()?.groups.into_iter().next()?;
        (g.error_code == 0).then_some(g)
    };
    let members = |g: &DescribedGroup| -> BTreeMap<String, (i32, Vec<i32>)> {
        (g.members.iter())
            .map(|m| {
                let mut ps: Vec<i32> = (m.assignment.topic_partitions.iter())
                    .flat_map(|t| t.partitions.iter().copied())
                    .collect();
                ps.sort();
                (m.member_id.to_string(), (m.member_epoch, ps))
            })
            .collect()
    };
    // Errors are librdkafka's reports of the killed broker's connections: it reconnects.
    let poll = |c: &BaseConsumer, read: &mut usize| {
        while let Some(m) = c.poll(Duration::from_millis(20)) {
            *read += m.is_ok() as usize;
        }
    };
    let (mut read_a, mut read_b) = (0, 0);
    let a = kip848_consumer(&broker, &group, &topic);
    let b = kip848_consumer_as(&broker, &group, &topic, Some("app-b"));
    // A third member comes and goes first, so that the group epoch is past what a group
    // rebuilt from nothing would reach with two members.
    let c = kip848_consumer(&broker, &group, &topic);
    wait_for("three members placed", SETTLE, || {
        poll(&a, &mut read_a);
        poll(&b, &mut read_b);
        poll(&c, &mut 0);
        [&a, &b, &c].iter().all(|m| !assigned(m).is_empty())
    });
    drop(c);
    wait_for("two partitions each, stable", SETTLE, || {
        poll(&a, &mut read_a);
        poll(&b, &mut read_b);
        assigned(&a).len() == 2
            && assigned(&b).len() == 2
            && describe(&broker).is_some_and(|g| g.group_state.as_str() == "Stable")
    });
    let before = describe(&broker).unwrap();
    assert!(before.group_epoch >= 4, "{before:?}");
    let (a_owns, b_owns) = (assigned(&a), assigned(&b));

    broker.kill9();
    broker.restart();
    let after = wait_for_some("the group back at its coordinator", SETTLE, || {
        describe(&broker)
    });
    assert_eq!(
        (after.group_epoch, members(&after)),
        (before.group_epoch, members(&before)),
        "restored as it was: {after:?}"
    );
    // The members carry on: what is produced now is read by its partition's owner.
    broker.produce_to_each(&topic, 4, 25, "after");
    wait_for("the 100 new records read", SETTLE, || {
        poll(&a, &mut read_a);
        poll(&b, &mut read_b);
        read_a + read_b >= 100
    });
    assert_eq!(read_a + read_b, 100);
    assert_eq!((assigned(&a), assigned(&b)), (a_owns, b_owns));
    let now = describe(&broker).unwrap();
    assert_eq!(
        (now.group_epoch, members(&now)),
        (before.group_epoch, members(&before)),
        "no rebalance after the failover: {now:?}"
    );

    // A group deleted once its last member left stays deleted: its records are tombstoned.
    let other = unique_group("kip848-deleted");
    let d = kip848_consumer(&broker, &other, &topic);
    wait_for("d placed", SETTLE, || {
        poll(&d, &mut 0);
        !assigned(&d).is_empty()
    });
    drop(d);
    let delete = |broker: &Broker| {
        use kafka_protocol::messages::DeleteGroupsRequest;
        let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
        let request =
            DeleteGroupsRequest::default().with_groups_names(vec![GroupId(other.clone().into())]);
        conn.request(2, &request).unwrap().results[0].error_code
    };
    assert_eq!(delete(&broker), 0, "deleted");
    broker.kill9();
    broker.restart();
    let gone = wait_for_some("the deleted group described", SETTLE, || {
        let mut conn = KafkaConn::connect(&broker.kafka_addr).ok()?;
        let request = ConsumerGroupDescribeRequest::default()
            .with_group_ids(vec![GroupId(other.clone().into())]);
        let g = conn.request(1, &request).ok()?.groups.into_iter().next()?;
        // Until the coordinator has loaded: COORDINATOR_LOAD_IN_PROGRESS / NOT_AVAILABLE.
        (![14, 15].contains(&g.error_code)).then_some(g)
    });
    assert_eq!(gone.error_code, 69, "GROUP_ID_NOT_FOUND: {gone:?}");
}

/// ConsumerGroupHeartbeat's refusals, raw: Kafka's error codes, and a refused heartbeat
/// leaves no group behind; a join with a client-chosen member id (KIP-1082) is taken.
#[test]
fn consumer_group_heartbeats_out_of_turn_get_kafka_errors_and_create_nothing() {
    use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
    use kafka_protocol::messages::{
        ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest, GroupId, ListGroupsRequest,
        TopicName,
    };
    let broker = Broker::start_default();
    let topic = unique_topic("kip848-raw");
    broker.create_topic(&topic, 2, &[]).unwrap();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let group = unique_group("kip848-raw");
    let beat = |conn: &mut KafkaConn, member: &str, epoch: i32, join: bool, regex: Option<&str>| {
        let mut req = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(group.clone().into()))
            .with_member_id(member.to_string().into())
            .with_member_epoch(epoch)
            .with_subscribed_topic_regex(regex.map(|r| r.to_string().into()));
        if join {
            req = req
                .with_rebalance_timeout_ms(30_000)
                .with_subscribed_topic_names(Some(vec![TopicName(topic.clone().into())]))
                .with_topic_partitions(Some(Vec::<TopicPartitions>::new()));
        }
        let r = conn.request(1, &req).unwrap();
        (r.error_code, r.member_epoch)
    };
    let described = |conn: &mut KafkaConn| {
        let request = ConsumerGroupDescribeRequest::default()
            .with_group_ids(vec![GroupId(group.clone().into())]);
        conn.request(0, &request).unwrap().groups[0].error_code
    };
    let listed = |conn: &mut KafkaConn| {
        let r = conn.request(4, &ListGroupsRequest::default()).unwrap();
        r.groups.iter().any(|g| g.group_id.0.as_str() == group)
    };
    // A heartbeat at an epoch, to a group that does not exist: UNKNOWN_MEMBER_ID, no group.
    assert_eq!(beat(&mut conn, "ghost", 5, false, None).0, 25);
    assert_eq!(described(&mut conn), 69, "GROUP_ID_NOT_FOUND");
    assert!(!listed(&mut conn));
    // Joining without a subscription, or with a bad regex: INVALID_REQUEST, INVALID_REGULAR_EXPRESSION.
    assert_eq!(beat(&mut conn, "m", 0, false, None).0, 42);
    assert_eq!(beat(&mut conn, "m", 0, true, Some("(")).0, 128);
    assert_eq!(described(&mut conn), 69);
    // A member joins under its own id; a wrong epoch is fenced, a strange one invalid.
    let (code, epoch) = beat(&mut conn, "client-chosen-id", 0, true, None);
    assert_eq!((code, epoch), (0, 1));
    assert_eq!(
        beat(&mut conn, "client-chosen-id", epoch + 5, false, None).0,
        110
    );
    assert_eq!(beat(&mut conn, "client-chosen-id", -7, false, None).0, 42);
    assert_eq!(beat(&mut conn, "stranger", epoch, false, None).0, 25);
    assert_eq!(
        beat(&mut conn, "client-chosen-id", epoch, false, None),
        (0, epoch)
    );
    assert_eq!(described(&mut conn), 0);
    // It leaves: the group stays, empty.
    assert_eq!(beat(&mut conn, "client-chosen-id", -1, false, None).0, 0);
}

/// Kafka's zombie: a librdkafka consumer that stops polling past `max.poll.interval.ms` is
/// taken out of the group (it leaves by itself, and the coordinator removes it), its
/// partitions go to the other member, which commits; the zombie's commit afterwards — the
/// close-while-committing pattern: it commits what it processed, then closes — must fail and
/// must not move the offsets back.
#[test]
fn a_consumer_removed_from_its_group_cannot_move_the_offsets_back() {
    let broker = Broker::start_default();
    let topic = unique_topic("zombie");
    broker.create_topic(&topic, 2, &[]).unwrap();
    broker.produce_to_each(&topic, 2, 20, "zombie");
    let group = unique_group("zombie");
    let cfg = |name: &str, max_poll_ms: &str| {
        let mut cfg = named(broker.group_config(&group), name);
        cfg.set("enable.auto.commit", "false")
            .set("session.timeout.ms", "6000")
            .set("max.poll.interval.ms", max_poll_ms);
        cfg
    };
    let zombie: BaseConsumer = cfg("zombie", "7000").create().unwrap();
    zombie.subscribe(&[&topic]).unwrap();
    let assigned = |c: &BaseConsumer| c.assignment().map(|a| a.count()).unwrap_or(0);
    wait_for("the first member to get both partitions", SETTLE, || {
        let _ = zombie.poll(Duration::from_millis(100));
        assigned(&zombie) == 2
    });
    let survivor: BaseConsumer = cfg("survivor", "300000").create().unwrap();
    survivor.subscribe(&[&topic]).unwrap();
    wait_for("one partition each", SETTLE, || {
        let _ = zombie.poll(Duration::from_millis(50));
        let _ = survivor.poll(Duration::from_millis(50));
        assigned(&zombie) == 1 && assigned(&survivor) == 1
    });

    // The zombie stops polling; the survivor takes both partitions and commits them.
    wait_for("the survivor to take both partitions", SETTLE, || {
        let _ = survivor.poll(Duration::from_millis(100));
        assigned(&survivor) == 2
    });
    let mut done = TopicPartitionList::new();
    for p in 0..2 {
        done.add_partition_offset(&topic, p, Offset::Offset(20))
            .unwrap();
    }
    survivor.commit(&done, CommitMode::Sync).unwrap();

    // The zombie commits what it had processed, as a consumer closing would.
    let mut stale = TopicPartitionList::new();
    for p in 0..2 {
        stale
            .add_partition_offset(&topic, p, Offset::Offset(3))
            .unwrap();
    }
    let refused = zombie.commit(&stale, CommitMode::Sync);
    assert!(refused.is_err(), "the zombie's commit was accepted");
    eprintln!("the zombie's commit: {refused:?}");
    drop(zombie);
    assert_eq!(
        broker.committed(&group, &topic, &[0, 1]).unwrap(),
        [(0, Some(20)), (1, Some(20))].into(),
        "the survivor's offsets stand"
    );
}
