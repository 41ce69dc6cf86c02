//! Group metadata survives broker restarts: the coordinator writes Kafka's GroupMetadata records
//! to `__consumer_offsets` and rebuilds its groups from them at start-up. A stable group of
//! librdkafka consumers carries on through a clean restart and a `kill -9` with the same member
//! ids, assignments and generation (no rebalance), and a member that never comes back is
//! removed after its session timeout, the survivor taking over its partitions.
//!
//! The broker listens on a new port after each restart, so clients reach it through a proxy
//! whose address (also the advertised one) never changes.

// Reads librdkafka's group metadata through its C API.
#![allow(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use strata_tests::groups::{
    assert_exactly_once, decode_assignment, unique_group, CliMember, GroupView,
};
use strata_tests::{
    poll_until, strata_bin, unique_topic, wait_for, wait_for_some, Broker, BrokerOpts,
    ConsumedRecord, FaultProxy, Steady,
};

/// How long a group may take to settle (joins, syncs, a rebalance after an expiry).
const SETTLE: Duration = Duration::from_secs(60);
/// How long assignments must stay unchanged to count as stable.
const STABLE_FOR: Duration = Duration::from_secs(2);
/// Session timeout of the members that ride through a restart: comfortably longer than a
/// restart of a debug build, so the consumers' own session clocks never run out.
const RIDE_THROUGH_SESSION_MS: u64 = 10_000;
/// Session timeout of the member that never comes back.
const SHORT_SESSION_MS: u64 = 6_000;
const PARTITIONS: i32 = 4;
const OFFSETS_TOPIC: &str = "__consumer_offsets";

// ---------------------------------------------------------------------------------------------
// A broker at an address that survives restarts.

enum Stop {
    Clean,
    Kill9,
}

struct ProxiedBroker {
    broker: Broker,
    proxy: FaultProxy,
}

impl ProxiedBroker {
    fn start() -> ProxiedBroker {
        let proxy = FaultProxy::start();
        let broker = Broker::start(BrokerOpts::new().advertised_kafka_addr(&proxy.addr));
        let mut b = ProxiedBroker { broker, proxy };
        b.route();
        b
    }

    /// Points the proxy at the running broker and every harness client at the proxy.
    fn route(&mut self) {
        self.proxy.set_target(&self.broker.kafka_addr);
        self.broker.kafka_addr = self.proxy.addr.clone();
    }

    fn stop(&mut self, how: Stop) {
        match how {
            Stop::Clean => self.broker.terminate(),
            Stop::Kill9 => self.broker.kill9(),
        }
    }

    /// Starts the stopped broker again on its data dir.
    fn start_again(&mut self) {
        self.broker.restart();
        self.route();
    }
}

// ---------------------------------------------------------------------------------------------
// A subscribed librdkafka consumer that counts its rebalance callbacks and reports its own view
// of its membership.

#[derive(Default)]
struct Observed {
    records: Vec<ConsumedRecord>,
    assignment: BTreeSet<i32>,
    /// Every distinct assignment, in order.
    history: Vec<BTreeSet<i32>>,
    /// (member id, generation) as librdkafka knows them.
    membership: Option<(String, i32)>,
    errors: Vec<String>,
}

#[derive(Default)]
struct Counters {
    rebalances: AtomicUsize,
    commits_ok: AtomicUsize,
    commit_errors: Mutex<Vec<String>>,
}

struct CountingContext(Arc<Counters>);

impl ClientContext for CountingContext {}

impl ConsumerContext for CountingContext {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, _: &Rebalance<'_>) {
        self.0.rebalances.fetch_add(1, Ordering::SeqCst);
    }

    fn commit_callback(&self, result: KafkaResult<()>, _: &TopicPartitionList) {
        match result {
            Ok(()) => {
                self.0.commits_ok.fetch_add(1, Ordering::SeqCst);
            }
            Err(e) => self
                .0
                .commit_errors
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(e.to_string()),
        }
    }
}

/// librdkafka's own (member id, generation), from `rd_kafka_consumer_group_metadata`.
fn membership(consumer: &BaseConsumer<CountingContext>) -> Option<(String, i32)> {
    use rdkafka::bindings as rd;
    // SAFETY: the client handle is alive for the whole call; the metadata object returned is
    // owned here, read while alive (its member id string belongs to it) and destroyed once.
    unsafe {
        let md = rd::rd_kafka_consumer_group_metadata(consumer.client().native_ptr());
        if md.is_null() {
            return None;
        }
        let generation = rd::rd_kafka_consumer_group_metadata_generation_id(md);
        let id = rd::rd_kafka_consumer_group_metadata_member_id(md);
        let id = if id.is_null() {
            String::new()
        } else {
            CStr::from_ptr(id).to_string_lossy().into_owned()
        };
        rd::rd_kafka_consumer_group_metadata_destroy(md);
        Some((id, generation))
    }
}

struct Watched {
    name: String,
    observed: Arc<Mutex<Observed>>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watched {
    fn start(name: &str, cfg: ClientConfig, topic: &str) -> Watched {
        let observed = Arc::new(Mutex::new(Observed::default()));
        let counters = Arc::new(Counters::default());
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (observed, counters, stop) = (observed.clone(), counters.clone(), stop.clone());
            let topic = topic.to_string();
            thread::Builder::new()
                .name(format!("watched-{name}"))
                .spawn(move || {
                    let consumer: BaseConsumer<CountingContext> = cfg
                        .create_with_context(CountingContext(counters))
                        .expect("create consumer");
                    consumer.subscribe(&[&topic]).expect("subscribe");
                    let mut asked: Option<Instant> = None;
                    while !stop.load(Ordering::SeqCst) {
                        let polled = consumer.poll(Duration::from_millis(50));
                        let assignment: BTreeSet<i32> = consumer
                            .assignment()
                            .map(|tpl| {
                                tpl.elements_for_topic(&topic)
                                    .iter()
                                    .map(|e| e.partition())
                                    .collect()
                            })
                            .unwrap_or_default();
                        let due = asked.is_none_or(|t| t.elapsed() >= Duration::from_millis(200));
                        let member = if due {
                            asked = Some(Instant::now());
                            Some(membership(&consumer))
                        } else {
                            None
                        };
                        let mut o = observed.lock().unwrap_or_else(|e| e.into_inner());
                        match polled {
                            None => {}
                            Some(Ok(m)) => o.records.push(ConsumedRecord::from_message(&m)),
                            Some(Err(KafkaError::PartitionEOF(_))) => {}
                            Some(Err(e)) => o.errors.push(e.to_string()),
                        }
                        if o.history.last() != Some(&assignment) {
                            o.history.push(assignment.clone());
                        }
                        o.assignment = assignment;
                        if let Some(m) = member {
                            o.membership = m;
                        }
                    }
                })
                .expect("spawn consumer thread")
        };
        Watched {
            name: name.to_string(),
            observed,
            counters,
            stop,
            thread: Some(thread),
        }
    }

    fn observed(&self) -> std::sync::MutexGuard<'_, Observed> {
        self.observed.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn assignment(&self) -> BTreeSet<i32> {
        self.observed().assignment.clone()
    }

    fn membership(&self) -> Option<(String, i32)> {
        self.observed().membership.clone()
    }

    fn records(&self) -> Vec<ConsumedRecord> {
        self.observed().records.clone()
    }

    fn rebalances(&self) -> usize {
        self.counters.rebalances.load(Ordering::SeqCst)
    }

    fn commits_ok(&self) -> usize {
        self.counters.commits_ok.load(Ordering::SeqCst)
    }

    fn commit_errors(&self) -> Vec<String> {
        self.counters
            .commit_errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn report(&self) -> String {
        let o = self.observed();
        format!(
            "{}: assignment {:?}, history {:?}, membership {:?}, {} records, {} rebalance \
             callbacks, {} commits, commit errors {:?}, errors {:?}",
            self.name,
            o.assignment,
            o.history,
            o.membership,
            o.records.len(),
            self.rebalances(),
            self.commits_ok(),
            self.commit_errors(),
            &o.errors[o.errors.len().saturating_sub(5)..]
        )
    }

    fn assert_alive(&self) {
        assert!(
            self.thread.as_ref().is_some_and(|t| !t.is_finished()),
            "consumer thread ended: {}",
            self.report()
        );
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Waits until the members' assignments are disjoint, cover every partition, and have not
/// changed for [`STABLE_FOR`], with every member knowing its member id and generation.
fn wait_for_stable(members: &[&Watched]) -> Vec<BTreeSet<i32>> {
    let all: BTreeSet<i32> = (0..PARTITIONS).collect();
    let mut steady = Steady::new(STABLE_FOR);
    poll_until(
        SETTLE,
        || {
            members.iter().for_each(|m| m.assert_alive());
            let now: Vec<BTreeSet<i32>> = members.iter().map(|m| m.assignment()).collect();
            let total: usize = now.iter().map(BTreeSet::len).sum();
            let union: BTreeSet<i32> = now.iter().flatten().copied().collect();
            let joined = members.iter().all(|m| {
                m.membership()
                    .is_some_and(|(id, g)| !id.is_empty() && g > 0)
            });
            steady.observe((joined && total == all.len() && union == all).then_some(now))
        },
        || {
            let report: Vec<String> = members.iter().map(|m| m.report()).collect();
            format!(
                "no stable assignment within {SETTLE:?}:\n{}",
                report.join("\n")
            )
        },
    )
}

// ---------------------------------------------------------------------------------------------
// Records and the group's view.

/// Waits until the union of what `consumed()` returns holds every expected record.
fn wait_consumed(
    what: &str,
    expected: &BTreeMap<(i32, i64), String>,
    consumed: impl Fn() -> Vec<ConsumedRecord>,
    report: impl Fn() -> String,
) {
    let missing = || -> Vec<(i32, i64)> {
        let seen: BTreeSet<(i32, i64)> =
            consumed().iter().map(|r| (r.partition, r.offset)).collect();
        expected
            .keys()
            .filter(|k| !seen.contains(k))
            .copied()
            .collect()
    };
    poll_until(
        SETTLE,
        || missing().is_empty().then_some(()),
        || {
            let missing = missing();
            format!(
                "{what}: {} of {} records never consumed, first {:?}\n{}",
                missing.len(),
                expected.len(),
                &missing[..missing.len().min(5)],
                report()
            )
        },
    )
}

fn describe(b: &Broker, group: &str) -> GroupView {
    wait_for_some("DescribeGroups", SETTLE, || {
        b.describe_group(group).ok().flatten()
    })
}

/// client id → (member id, assigned partitions of the topic).
type Described = BTreeMap<String, (String, BTreeSet<i32>)>;

/// (member id, assigned partitions of `topic`) per client id, as DescribeGroups shows them.
fn described_members(view: &GroupView, topic: &str) -> Described {
    view.members
        .iter()
        .map(|m| {
            (
                m.client_id.clone(),
                (m.member_id.clone(), m.partitions(topic)),
            )
        })
        .collect()
}

/// `strata group describe` output.
fn cli_describe(b: &Broker, group: &str) -> String {
    let out = std::process::Command::new(strata_bin())
        .args(["group", "describe", group, "-b", &b.kafka_addr])
        .output()
        .expect("run strata group describe");
    assert!(
        out.status.success(),
        "strata group describe: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

// ---------------------------------------------------------------------------------------------
// The group's records in `__consumer_offsets`, read back with a plain consumer and decoded here
// from Kafka's layout (GroupMetadataKey v2, GroupMetadataValue v3), independently of the broker.

/// Kafka's `abs(groupId.hashCode) % 50`.
fn offsets_partition(group: &str) -> i32 {
    let h = group
        .encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32));
    (if h == i32::MIN { 0 } else { h.abs() }) % 50
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct RecordedMember {
    member_id: String,
    client_id: String,
    session_timeout: i32,
    partitions: BTreeSet<i32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct RecordedGroup {
    protocol_type: String,
    generation: i32,
    protocol: Option<String>,
    leader: Option<String>,
    members: Vec<RecordedMember>,
}

struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> &[u8] {
        assert!(self.0.len() >= n, "record ends early");
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head
    }
    fn i16(&mut self) -> i16 {
        i16::from_be_bytes(self.take(2).try_into().unwrap())
    }
    fn i32(&mut self) -> i32 {
        i32::from_be_bytes(self.take(4).try_into().unwrap())
    }
    fn i64(&mut self) -> i64 {
        i64::from_be_bytes(self.take(8).try_into().unwrap())
    }
    fn nullable_string(&mut self) -> Option<String> {
        let n = self.i16();
        (n >= 0).then(|| String::from_utf8(self.take(n as usize).to_vec()).unwrap())
    }
    fn string(&mut self) -> String {
        self.nullable_string().expect("non-null string")
    }
    fn bytes(&mut self) -> Vec<u8> {
        let n = self.i32();
        assert!(n >= 0, "null bytes");
        self.take(n as usize).to_vec()
    }
}

fn decode_group_value(value: &[u8], topic: &str) -> RecordedGroup {
    let mut c = Cursor(value);
    assert_eq!(c.i16(), 3, "GroupMetadataValue version written");
    let protocol_type = c.string();
    let generation = c.i32();
    let protocol = c.nullable_string();
    let leader = c.nullable_string();
    let _state_timestamp = c.i64();
    let count = c.i32();
    let mut members = Vec::new();
    for _ in 0..count {
        let member_id = c.string();
        let _instance = c.nullable_string();
        let client_id = c.string();
        let _host = c.string();
        let _rebalance_timeout = c.i32();
        let session_timeout = c.i32();
        let _subscription = c.bytes();
        let assignment = c.bytes();
        let partitions = if assignment.is_empty() {
            BTreeSet::new()
        } else {
            decode_assignment(&assignment)
                .expect("assignment in the record")
                .remove(topic)
                .unwrap_or_default()
        };
        members.push(RecordedMember {
            member_id,
            client_id,
            session_timeout,
            partitions,
        });
    }
    assert!(c.0.is_empty(), "{} bytes after the value", c.0.len());
    RecordedGroup {
        protocol_type,
        generation,
        protocol,
        leader,
        members,
    }
}

/// Every GroupMetadata record of `group`, in log order (`None`: a tombstone).
fn group_records(b: &Broker, group: &str, topic: &str) -> Vec<Option<RecordedGroup>> {
    let p = offsets_partition(group);
    let (low, high) = b.watermarks(OFFSETS_TOPIC, p);
    if high <= low {
        return vec![];
    }
    let records = b.consume_until(OFFSETS_TOPIC, &[(p, Offset::Offset(low))], SETTLE, |r| {
        r.last().is_some_and(|r| r.offset >= high - 1)
    });
    let mut key = vec![0u8, 2];
    key.extend_from_slice(&(group.len() as i16).to_be_bytes());
    key.extend_from_slice(group.as_bytes());
    records
        .iter()
        .filter(|r| r.key.as_deref() == Some(&key[..]))
        .map(|r| r.value.as_deref().map(|v| decode_group_value(v, topic)))
        .collect()
}

fn latest_group_record(b: &Broker, group: &str, topic: &str) -> RecordedGroup {
    group_records(b, group, topic)
        .pop()
        .flatten()
        .unwrap_or_else(|| panic!("no GroupMetadata record of {group}"))
}

// ---------------------------------------------------------------------------------------------
// (a) A stable group rides through a restart.

/// What one member and the broker say about the group at one moment.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    /// client id → (member id, partitions), from DescribeGroups.
    described: Described,
    /// client id → (member id, generation), from librdkafka.
    consumers: BTreeMap<String, (String, i32)>,
    /// client id → partitions, from librdkafka.
    assignments: BTreeMap<String, BTreeSet<i32>>,
    /// client id → rebalance callbacks so far.
    rebalances: BTreeMap<String, usize>,
    /// The latest GroupMetadata record.
    record: RecordedGroup,
}

fn snapshot(b: &Broker, group: &str, topic: &str, members: &[&Watched]) -> Snapshot {
    let view = describe(b, group);
    assert_eq!(view.state, "Stable", "{view:?}");
    Snapshot {
        described: described_members(&view, topic),
        consumers: members
            .iter()
            .map(|m| (m.name.clone(), m.membership().expect("membership")))
            .collect(),
        assignments: members
            .iter()
            .map(|m| (m.name.clone(), m.assignment()))
            .collect(),
        rebalances: members
            .iter()
            .map(|m| (m.name.clone(), m.rebalances()))
            .collect(),
        record: latest_group_record(b, group, topic),
    }
}

fn ride_through_config(b: &Broker, group: &str, name: &str) -> ClientConfig {
    let mut cfg = b.group_config(group);
    cfg.set("client.id", name)
        .set("session.timeout.ms", RIDE_THROUGH_SESSION_MS.to_string())
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "500");
    cfg
}

fn a_stable_group_keeps_its_members_and_generation_across(stop: Stop) {
    let mut b = ProxiedBroker::start();
    let topic = unique_topic("ride-through");
    b.broker.create_topic(&topic, PARTITIONS, &[]).unwrap();
    let group = unique_group("ride-through");
    let mut expected = b.broker.produce_to_each(&topic, PARTITIONS, 25, "before");

    let members = [
        Watched::start(
            "member-a",
            ride_through_config(&b.broker, &group, "member-a"),
            &topic,
        ),
        Watched::start(
            "member-b",
            ride_through_config(&b.broker, &group, "member-b"),
            &topic,
        ),
    ];
    let all = || members.iter().flat_map(|m| m.records()).collect::<Vec<_>>();
    let report = || {
        members
            .iter()
            .map(|m| m.report())
            .collect::<Vec<_>>()
            .join("\n")
    };
    wait_for_stable(&[&members[0], &members[1]]);
    wait_consumed("before the restart", &expected, all, report);

    let before = snapshot(&b.broker, &group, &topic, &[&members[0], &members[1]]);
    // The broker, librdkafka and the record agree on who is in the group.
    for (name, (id, generation)) in &before.consumers {
        let (described_id, partitions) = &before.described[name];
        assert_eq!(
            id, described_id,
            "{name}'s member id, librdkafka vs DescribeGroups"
        );
        assert_eq!(partitions, &before.assignments[name], "{name}'s partitions");
        assert_eq!(
            *generation, before.record.generation,
            "{name}'s generation vs the record"
        );
    }
    let recorded: Described = before
        .record
        .members
        .iter()
        .map(|m| {
            (
                m.client_id.clone(),
                (m.member_id.clone(), m.partitions.clone()),
            )
        })
        .collect();
    assert_eq!(
        recorded, before.described,
        "members in the GroupMetadata record"
    );
    assert_eq!(before.record.protocol_type, "consumer");
    assert!(before.record.protocol.is_some());
    assert!(
        before
            .consumers
            .values()
            .any(|(id, _)| Some(id) == before.record.leader.as_ref()),
        "the leader is a member: {:?}",
        before.record
    );
    assert!(before
        .record
        .members
        .iter()
        .all(|m| m.session_timeout == RIDE_THROUGH_SESSION_MS as i32));
    let commits_before: Vec<usize> = members.iter().map(|m| m.commits_ok()).collect();
    // Records read so far (the initial rebalance may have had some read twice), once the
    // members have nothing left to read.
    let mut last = (Instant::now(), all().len());
    wait_for("the members to go quiet", SETTLE, || {
        let n = all().len();
        if n != last.1 {
            last = (Instant::now(), n);
        }
        last.0.elapsed() >= Duration::from_secs(1)
    });
    let read_before: Vec<usize> = members.iter().map(|m| m.records().len()).collect();
    // (Commits during the initial rebalance may have failed; only later ones count.)
    let commit_errors_before: Vec<usize> =
        members.iter().map(|m| m.commit_errors().len()).collect();
    let history_before: Vec<Vec<BTreeSet<i32>>> = members
        .iter()
        .map(|m| m.observed().history.clone())
        .collect();

    b.stop(stop);
    b.start_again();

    // Before any member could have rejoined, the broker already describes the loaded group.
    let view = describe(&b.broker, &group);
    assert_eq!(view.state, "Stable", "right after the restart: {view:?}");
    assert_eq!(
        described_members(&view, &topic),
        before.described,
        "members right after the restart"
    );
    let cli = cli_describe(&b.broker, &group);
    assert!(cli.contains("state=Stable"), "{cli}");
    for (id, _) in before.described.values() {
        assert!(cli.contains(id.as_str()), "member {id} in:\n{cli}");
    }

    let after_restart = b.broker.produce_to_each(&topic, PARTITIONS, 25, "after");
    assert!(
        after_restart.keys().all(|(_, o)| *o >= 25),
        "offsets continue"
    );
    expected.extend(after_restart.clone());
    wait_consumed("after the restart", &expected, all, report);
    // Auto-commits (which carry the generation) go through again.
    wait_for("a commit by every member after the restart", SETTLE, || {
        members
            .iter()
            .zip(&commits_before)
            .all(|(m, n)| m.commits_ok() > *n)
    });

    let after = snapshot(&b.broker, &group, &topic, &[&members[0], &members[1]]);
    assert_eq!(after, before, "the group after the restart\n{}", report());
    for ((m, history), errors_before) in members
        .iter()
        .zip(&history_before)
        .zip(&commit_errors_before)
    {
        assert_eq!(
            &m.observed().history,
            history,
            "{}'s assignments never changed",
            m.name
        );
        let membership_errors: Vec<String> = m.commit_errors()[*errors_before..]
            .iter()
            .filter(|e| {
                e.contains("IllegalGeneration")
                    || e.contains("UnknownMemberId")
                    || e.contains("RebalanceInProgress")
            })
            .cloned()
            .collect();
        assert!(
            membership_errors.is_empty(),
            "commits after the restart refused: {membership_errors:?}\n{}",
            m.report()
        );
    }
    // Each member carried on from its position: after the restart it read exactly the new
    // records of its partitions, once each, none skipped and none read again.
    let read_after: Vec<ConsumedRecord> = members
        .iter()
        .zip(&read_before)
        .flat_map(|(m, n)| m.records().split_off(*n))
        .collect();
    assert_exactly_once(&read_after, &after_restart);
    // No GroupMetadata record was written after the restart: no generation completed.
    let records = group_records(&b.broker, &group, &topic);
    assert_eq!(
        records.last().cloned().flatten(),
        Some(before.record.clone())
    );
}

#[test]
fn a_stable_group_survives_a_clean_restart_without_a_rebalance() {
    a_stable_group_keeps_its_members_and_generation_across(Stop::Clean);
}

#[test]
fn a_stable_group_survives_kill_9_without_a_rebalance() {
    a_stable_group_keeps_its_members_and_generation_across(Stop::Kill9);
}

// ---------------------------------------------------------------------------------------------
// (b) A member that never comes back.

#[test]
fn after_a_restart_a_member_that_never_returns_expires_and_the_survivor_takes_its_partitions() {
    let mut b = ProxiedBroker::start();
    let topic = unique_topic("never-returns");
    b.broker.create_topic(&topic, PARTITIONS, &[]).unwrap();
    let group = unique_group("never-returns");
    let mut expected = b.broker.produce_to_each(&topic, PARTITIONS, 25, "before");

    let mut cfg = b.broker.group_config(&group);
    cfg.set("client.id", "survivor")
        .set("session.timeout.ms", SHORT_SESSION_MS.to_string())
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "500");
    let survivor = Watched::start("survivor", cfg, &topic);
    let session = SHORT_SESSION_MS.to_string();
    let mut gone = CliMember::start(
        &b.broker,
        &topic,
        &group,
        &[
            ("client.id", "gone"),
            ("session.timeout.ms", session.as_str()),
            ("heartbeat.interval.ms", "500"),
        ],
    );
    // Both members hold partitions and the group has settled.
    let mut steady = Steady::new(STABLE_FOR);
    // Both closures look at `gone`; only the first needs it mutably.
    let gone_cell = std::cell::RefCell::new(&mut gone);
    let before = poll_until(
        SETTLE,
        || {
            survivor.assert_alive();
            assert!(
                gone_cell.borrow_mut().is_running(),
                "strata consume exited:\n{}",
                gone_cell.borrow().output()
            );
            let members = b
                .broker
                .describe_group(&group)
                .ok()
                .flatten()
                .filter(|v| v.state == "Stable")
                .map(|v| described_members(&v, &topic))
                .unwrap_or_default();
            let covered: BTreeSet<i32> = members.values().flat_map(|(_, p)| p.clone()).collect();
            let settled = members.len() == 2
                && members.values().all(|(_, p)| !p.is_empty())
                && covered.len() == PARTITIONS as usize
                && members.get("survivor").map(|(_, p)| p) == Some(&survivor.assignment());
            steady.observe(settled.then_some(members))
        },
        || {
            format!(
                "the group did not settle with both members: {:?}\n{}\n{}",
                b.broker.describe_group(&group).ok().flatten(),
                survivor.report(),
                gone_cell.borrow().output()
            )
        },
    );
    let (survivor_id, generation) = survivor.membership().expect("survivor membership");
    assert_eq!(before["survivor"].0, survivor_id);
    let gone_id = before["gone"].0.clone();
    assert_eq!(
        latest_group_record(&b.broker, &group, &topic).generation,
        generation
    );
    let rebalances_before = survivor.rebalances();

    // The broker stops; meanwhile the other member dies without a word (no LeaveGroup).
    b.stop(Stop::Clean);
    gone.kill9();
    b.start_again();
    let restarted = Instant::now();

    // Loaded as it was: both members, until the dead one's session runs out.
    let view = describe(&b.broker, &group);
    assert_eq!(view.state, "Stable", "right after the restart: {view:?}");
    assert_eq!(described_members(&view, &topic), before);

    let after_restart = b.broker.produce_to_each(&topic, PARTITIONS, 25, "after");
    expected.extend(after_restart);

    let all: BTreeSet<i32> = (0..PARTITIONS).collect();
    wait_for("the survivor to hold every partition", SETTLE, || {
        survivor.assert_alive();
        survivor.assignment() == all
    });
    let took_over_after = restarted.elapsed();
    // Its session started when the group was loaded (before READY): it was not dropped at
    // load, only once its session timeout had passed.
    assert!(
        took_over_after >= Duration::from_millis(SHORT_SESSION_MS - 1_000),
        "the dead member was removed {took_over_after:?} after the restart; its session is \
         {SHORT_SESSION_MS} ms"
    );

    let view = describe(&b.broker, &group);
    assert_eq!(view.state, "Stable", "{view:?}");
    let members = described_members(&view, &topic);
    assert_eq!(
        members,
        BTreeMap::from([("survivor".to_string(), (survivor_id.clone(), all.clone()))]),
        "after the expiry"
    );
    assert!(!view.members.iter().any(|m| m.member_id == gone_id));
    // Exactly one rebalance: the survivor kept its member id, the generation moved by one.
    wait_for("the survivor to learn the new generation", SETTLE, || {
        survivor.membership() == Some((survivor_id.clone(), generation + 1))
    });
    assert!(
        survivor.rebalances() > rebalances_before,
        "{}",
        survivor.report()
    );
    let record = latest_group_record(&b.broker, &group, &topic);
    assert_eq!(record.generation, generation + 1);
    assert_eq!(
        record
            .members
            .iter()
            .map(|m| (m.member_id.clone(), m.partitions.clone()))
            .collect::<Vec<_>>(),
        vec![(survivor_id, all)]
    );

    // Nothing skipped: every record was read by one member or the other (the survivor resumes
    // the dead member's partitions from its commits, so some may be read twice).
    let consumed = || {
        let mut r = survivor.records();
        r.extend(gone.records().into_iter().map(|c| ConsumedRecord {
            partition: c.partition,
            offset: c.offset,
            timestamp: None,
            key: None,
            value: Some(c.value.into_bytes()),
            headers: vec![],
        }));
        r
    };
    wait_consumed(
        "by the survivor after the expiry",
        &expected,
        consumed,
        || survivor.report(),
    );
}
