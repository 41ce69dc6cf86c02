//! Incremental cooperative rebalancing (KIP-429) over the classic group protocol: librdkafka
//! members using the `cooperative-sticky` assignor, while a producer keeps writing to every
//! partition.
//!
//! A third member joins a group of two, later one member leaves cleanly. Each rebalance must
//! leave every partition with exactly one owner; members keep the partitions they are not
//! asked to give up, are never told to revoke them, and keep consuming them while the
//! rebalance is in progress; partitions move in two rounds (revoke, then assign); across the
//! whole run no record is lost; and a partition that moves resumes right after the last
//! record its previous owner consumed (whose commit on revoke the broker accepted).
//!
//! The first member takes [`SLOW_REVOKE`] to hand over a partition (as an application
//! flushing state would). The group cannot finish the second round without it, so the
//! rebalance lasts at least that long: under the eager protocol every member would sit with
//! nothing assigned for all that time, so a pause on a kept partition would be measurable.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::TopicPartitionList;
use strata_tests::groups::unique_group;
use strata_tests::{poll_until, unique_topic, wait_for, Broker, Steady, TrackingProducer};

const PARTITIONS: i32 = 6;
/// The producer writes one record to every partition this often.
const PRODUCE_EVERY: Duration = Duration::from_millis(20);
/// How long the first member's revoke handler takes.
const SLOW_REVOKE: Duration = Duration::from_millis(3_000);
/// The longest a member may go without a record from a partition it keeps while a rebalance
/// is in progress, time in its own rebalance callbacks excluded: half of what the eager
/// protocol would cost at least, since under it the slow revoke alone leaves every member
/// without partitions for [`SLOW_REVOKE`]. (librdkafka pauses a member's fetchers while its
/// rebalance callback is pending and may take up to about a second to fetch again after a
/// long callback; other pauses are about one produce interval.)
const MAX_PAUSE: Duration = Duration::from_millis(1_500);
/// Upper bound on every wait.
const SETTLE: Duration = Duration::from_secs(30);
/// How long assignments must stay unchanged to count as settled.
const STABLE_FOR: Duration = Duration::from_secs(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Assign,
    Revoke,
}

/// One incremental rebalance callback.
#[derive(Clone, Debug)]
struct Callback {
    kind: Kind,
    partitions: BTreeSet<i32>,
    /// Generation of the last JoinGroup response this member had received.
    generation: Option<i32>,
    lost: bool,
    started: Instant,
    ended: Option<Instant>,
}

/// A record as received by a member.
#[derive(Clone, Debug)]
struct Received {
    partition: i32,
    offset: i64,
    value: String,
    at: Instant,
}

/// The result of one offset commit (auto-commit or commit on revoke) of `partitions`.
#[derive(Clone, Debug)]
struct CommitResult {
    at: Instant,
    result: KafkaResult<()>,
    partitions: BTreeSet<i32>,
}

/// A partition moving from one member to another.
#[derive(Debug)]
struct Handover {
    partition: i32,
    from: String,
    to: String,
    /// Last offset the previous owner received before revoking it.
    last: Option<i64>,
    /// First offset the new owner received after it was assigned.
    first: Option<i64>,
    /// The previous owner's commits of the partition from its revocation on.
    final_commits: Vec<KafkaResult<()>>,
}

/// Everything a member saw, in order.
#[derive(Default)]
struct Journal {
    callbacks: Vec<Callback>,
    /// (when, generation) of every JoinGroup response.
    joins: Vec<(Instant, i32)>,
    received: Vec<Received>,
    commits: Vec<CommitResult>,
    assignment: BTreeSet<i32>,
    /// librdkafka warnings and errors, consumer errors.
    problems: Vec<String>,
}

/// The generation in librdkafka's `JoinGroup response: GenerationId N, ...` debug line.
fn join_generation(log: &str) -> Option<i32> {
    let rest = log.split("JoinGroup response: GenerationId ").nth(1)?;
    let digits: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    digits.parse().ok()
}

fn partitions_of(tpl: &TopicPartitionList) -> BTreeSet<i32> {
    tpl.elements().iter().map(|e| e.partition()).collect()
}

/// Records rebalance callbacks, JoinGroup generations (from librdkafka's `cgrp` debug log)
/// and commit results.
struct Recorder {
    journal: Arc<Mutex<Journal>>,
    slow_revoke: Option<Duration>,
    closing: Arc<AtomicBool>,
}

impl Recorder {
    fn journal(&self) -> MutexGuard<'_, Journal> {
        self.journal.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl ClientContext for Recorder {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        if let Some(g) = join_generation(log_message) {
            self.journal().joins.push((Instant::now(), g));
        } else if (level as i32) <= RDKafkaLogLevel::Warning as i32 {
            self.journal()
                .problems
                .push(format!("librdkafka {fac}: {log_message}"));
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.journal()
            .problems
            .push(format!("librdkafka error {error}: {reason}"));
    }
}

impl ConsumerContext for Recorder {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let (kind, tpl) = match rebalance {
            Rebalance::Assign(tpl) => (Kind::Assign, tpl),
            Rebalance::Revoke(tpl) => (Kind::Revoke, tpl),
            Rebalance::Error(e) => {
                self.journal()
                    .problems
                    .push(format!("rebalance error: {e}"));
                return;
            }
        };
        let partitions = partitions_of(tpl);
        {
            let mut j = self.journal();
            let generation = j.joins.last().map(|(_, g)| *g);
            j.callbacks.push(Callback {
                kind,
                partitions: partitions.clone(),
                generation,
                lost: consumer.assignment_lost(),
                started: Instant::now(),
                ended: None,
            });
        }
        if kind == Kind::Revoke && !partitions.is_empty() && !self.closing.load(Ordering::SeqCst) {
            if let Some(d) = self.slow_revoke {
                thread::sleep(d);
            }
        }
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if matches!(rebalance, Rebalance::Error(_)) {
            return;
        }
        if let Some(last) = self.journal().callbacks.last_mut() {
            last.ended.get_or_insert_with(Instant::now);
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        let partitions = partitions_of(offsets);
        self.journal().commits.push(CommitResult {
            at: Instant::now(),
            result,
            partitions,
        });
    }
}

/// A `cooperative-sticky` member on its own thread: stores the offset of every record it
/// receives, auto-commits (librdkafka's default: every 5 s while not rebalancing, and the
/// final offsets of partitions it revokes), and closes cleanly (revoking its partitions,
/// committing, LeaveGroup) when stopped.
struct CoopMember {
    name: String,
    journal: Arc<Mutex<Journal>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl CoopMember {
    fn start(
        name: &str,
        broker: &Broker,
        group: &str,
        topic: &str,
        slow_revoke: Option<Duration>,
    ) -> Self {
        let mut cfg = broker.group_config(group);
        cfg.set("client.id", name)
            .set("partition.assignment.strategy", "cooperative-sticky")
            .set("enable.auto.commit", "true")
            .set("enable.auto.offset.store", "false")
            .set("debug", "cgrp")
            .set_log_level(RDKafkaLogLevel::Debug);
        let journal = Arc::new(Mutex::new(Journal::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let closing = Arc::new(AtomicBool::new(false));
        let context = Recorder {
            journal: journal.clone(),
            slow_revoke,
            closing: closing.clone(),
        };
        let (journal2, stop2, topic) = (journal.clone(), stop.clone(), topic.to_string());
        let thread = thread::Builder::new()
            .name(format!("member-{name}"))
            .spawn(move || {
                let consumer: BaseConsumer<Recorder> =
                    cfg.create_with_context(context).expect("create member");
                consumer.subscribe(&[&topic]).expect("subscribe");
                while !stop2.load(Ordering::SeqCst) {
                    let polled = consumer.poll(Duration::from_millis(50));
                    let at = Instant::now();
                    let assignment = consumer
                        .assignment()
                        .map(|tpl| partitions_of(&tpl))
                        .unwrap_or_default();
                    let mut j = journal2.lock().unwrap_or_else(|e| e.into_inner());
                    match polled {
                        None => {}
                        Some(Ok(m)) => {
                            j.received.push(Received {
                                partition: m.partition(),
                                offset: m.offset(),
                                value: String::from_utf8_lossy(m.payload().unwrap_or_default())
                                    .into_owned(),
                                at,
                            });
                            if let Err(e) = consumer.store_offset_from_message(&m) {
                                j.problems.push(format!("store offset: {e}"));
                            }
                        }
                        Some(Err(e)) => j.problems.push(format!("consumer error: {e}")),
                    }
                    j.assignment = assignment;
                }
                // Dropping the consumer closes it: revoke, final commit, LeaveGroup.
                closing.store(true, Ordering::SeqCst);
                drop(consumer);
            })
            .expect("spawn member thread");
        CoopMember {
            name: name.to_string(),
            journal,
            stop,
            thread: Some(thread),
        }
    }

    fn journal(&self) -> MutexGuard<'_, Journal> {
        self.journal.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_alive(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    fn assignment(&self) -> BTreeSet<i32> {
        self.journal().assignment.clone()
    }

    fn callbacks_between(&self, from: Instant, to: Instant) -> Vec<Callback> {
        self.journal()
            .callbacks
            .iter()
            .filter(|c| c.started >= from && c.started <= to)
            .cloned()
            .collect()
    }

    /// Times at which records of `partition` arrived.
    fn receipts(&self, partition: i32) -> Vec<Instant> {
        self.journal()
            .received
            .iter()
            .filter(|r| r.partition == partition)
            .map(|r| r.at)
            .collect()
    }

    /// Closes the consumer cleanly and waits for it.
    fn close(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            if t.join().is_err() && !thread::panicking() {
                panic!("member {} panicked", self.name);
            }
        }
    }

    fn report(&self) -> String {
        let j = self.journal();
        format!(
            "{}: assignment {:?}, joins {:?}, callbacks {:?}, problems (last 5) {:?}",
            self.name,
            j.assignment,
            j.joins.iter().map(|(_, g)| g).collect::<Vec<_>>(),
            j.callbacks
                .iter()
                .map(|c| (c.kind, c.partitions.clone(), c.generation, c.lost))
                .collect::<Vec<_>>(),
            &j.problems[j.problems.len().saturating_sub(5)..]
        )
    }
}

impl Drop for CoopMember {
    fn drop(&mut self) {
        self.close();
    }
}

/// Waits until the members' assignments are disjoint, cover every partition, are the
/// expected sizes and have stayed so for [`STABLE_FOR`]; returns them.
fn wait_for_settled(members: &[&CoopMember], sizes: &[usize]) -> Vec<BTreeSet<i32>> {
    let all: BTreeSet<i32> = (0..PARTITIONS).collect();
    let mut steady = Steady::new(STABLE_FOR);
    poll_until(
        SETTLE,
        || {
            for m in members {
                assert!(m.is_alive(), "member {} stopped: {}", m.name, m.report());
            }
            let now: Vec<BTreeSet<i32>> = members.iter().map(|m| m.assignment()).collect();
            let total: usize = now.iter().map(BTreeSet::len).sum();
            let union: BTreeSet<i32> = now.iter().flatten().copied().collect();
            let mut got_sizes: Vec<usize> = now.iter().map(BTreeSet::len).collect();
            got_sizes.sort_unstable();
            steady
                .observe((total == all.len() && union == all && got_sizes == sizes).then_some(now))
        },
        || {
            let report: Vec<String> = members.iter().map(|m| m.report()).collect();
            format!(
                "timed out after {SETTLE:?} waiting for {PARTITIONS} partitions, each owned by \
                 exactly one member ({sizes:?} each):\n{}",
                report.join("\n")
            )
        },
    )
}

/// The broker's view (DescribeGroups) must match what the members hold.
fn assert_broker_agrees(
    broker: &Broker,
    group: &str,
    topic: &str,
    members: &[&CoopMember],
    held: &[BTreeSet<i32>],
) {
    let view = broker
        .describe_group(group)
        .expect("DescribeGroups")
        .expect("group listed");
    assert_eq!(view.state, "Stable", "{view:?}");
    assert_eq!(view.protocol, "cooperative-sticky", "{view:?}");
    assert_eq!(view.members.len(), members.len(), "{view:?}");
    for (m, held) in members.iter().zip(held) {
        let mv = view
            .member(&m.name)
            .unwrap_or_else(|| panic!("{} not in DescribeGroups: {view:?}", m.name));
        assert_eq!(
            &mv.partitions(topic),
            held,
            "{}'s assignment in DescribeGroups",
            m.name
        );
    }
}

/// Waits until every member has received records from each partition it holds after `since`.
fn wait_consuming_all(members: &[&CoopMember], since: Instant) {
    wait_for(
        "every member to receive records from each of its partitions",
        SETTLE,
        || {
            members.iter().all(|m| {
                m.assignment()
                    .iter()
                    .all(|p| m.receipts(*p).iter().any(|t| *t > since))
            })
        },
    );
}

/// Longest pause in receiving `partition` that overlaps `window`, not counting time the member
/// spent in its own rebalance callbacks. Panics unless records arrived both before and after
/// the window.
fn longest_pause(member: &CoopMember, partition: i32, window: (Instant, Instant)) -> Duration {
    let receipts = member.receipts(partition);
    assert!(
        receipts.first().is_some_and(|t| *t <= window.0)
            && receipts.last().is_some_and(|t| *t >= window.1),
        "{} did not receive partition {partition} both before and after the rebalance",
        member.name
    );
    let callbacks: Vec<(Instant, Instant)> = member
        .journal()
        .callbacks
        .iter()
        .map(|c| (c.started, c.ended.unwrap_or_else(Instant::now)))
        .collect();
    let overlap = |a: Instant, b: Instant, (c, d): (Instant, Instant)| {
        let (s, e) = (a.max(c), b.min(d));
        e.saturating_duration_since(s)
    };
    receipts
        .windows(2)
        .filter(|w| w[1] >= window.0 && w[0] <= window.1)
        .map(|w| {
            let own: Duration = callbacks.iter().map(|c| overlap(w[0], w[1], *c)).sum();
            (w[1] - w[0]).saturating_sub(own)
        })
        .max()
        .unwrap_or_default()
}

/// Produces one record to every partition every [`PRODUCE_EVERY`] until stopped.
struct Producer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<BTreeMap<(i32, i64), String>>>,
}

impl Producer {
    fn start(broker: &Broker, topic: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (cfg, topic, stop2) = (broker.producer_config(), topic.to_string(), stop.clone());
        let thread = thread::spawn(move || {
            let producer = TrackingProducer::new(&cfg);
            let mut values = Vec::new();
            let started = Instant::now();
            let mut round = 0u32;
            while !stop2.load(Ordering::SeqCst) {
                for p in 0..PARTITIONS {
                    let value = format!("p{p}-{round}");
                    producer.send(
                        values.len(),
                        &topic,
                        Some(p),
                        b"k",
                        value.as_bytes(),
                        &[],
                        None,
                    );
                    values.push(value);
                }
                round += 1;
                let due = started + PRODUCE_EVERY * round;
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    thread::sleep(wait);
                }
            }
            producer.flush(Duration::from_secs(30));
            let delivered = producer.all_delivered(values.len());
            delivered.into_iter().zip(values).collect()
        });
        Producer {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops; returns the value of every acknowledged (partition, offset).
    fn stop(mut self) -> BTreeMap<(i32, i64), String> {
        self.stop.store(true, Ordering::SeqCst);
        let t = self.thread.take().expect("producer running");
        t.join().expect("producer thread panicked")
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// What the members that stayed must show across one rebalance.
fn assert_kept_partitions_were_never_revoked_and_kept_flowing(
    stayers: &[(&CoopMember, &BTreeSet<i32>, &BTreeSet<i32>)],
    window: (Instant, Instant),
) {
    for (m, before, after) in stayers {
        let kept: BTreeSet<i32> = before.intersection(after).copied().collect();
        let moved: BTreeSet<i32> = before.difference(after).copied().collect();
        let callbacks = m.callbacks_between(window.0, window.1);
        let revoked: BTreeSet<i32> = callbacks
            .iter()
            .filter(|c| c.kind == Kind::Revoke)
            .flat_map(|c| c.partitions.iter().copied())
            .collect();
        assert!(
            revoked.is_disjoint(&kept),
            "{} was told to revoke partitions it keeps ({kept:?}): revoked {revoked:?}; {}",
            m.name,
            m.report()
        );
        assert_eq!(
            revoked,
            moved,
            "{} revoked exactly the partitions it gave up; {}",
            m.name,
            m.report()
        );
        assert!(
            callbacks.iter().all(|c| !c.lost),
            "{} lost its assignment: {}",
            m.name,
            m.report()
        );
        for p in &kept {
            let pause = longest_pause(m, *p, window);
            eprintln!("{} kept partition {p}: longest pause {pause:?}", m.name);
            assert!(
                pause < MAX_PAUSE,
                "{} stopped receiving partition {p}, which it kept, for {pause:?} during the \
                 rebalance (limit {MAX_PAUSE:?})",
                m.name
            );
        }
    }
}

/// Every record produced was received by some member, with the value produced.
fn assert_none_lost(members: &[&CoopMember], produced: &BTreeMap<(i32, i64), String>) -> usize {
    let mut seen: BTreeMap<(i32, i64), usize> = BTreeMap::new();
    for m in members {
        for r in &m.journal().received {
            let want = produced.get(&(r.partition, r.offset)).unwrap_or_else(|| {
                panic!(
                    "{} received {}/{} that was never produced",
                    m.name, r.partition, r.offset
                )
            });
            assert_eq!(&r.value, want, "value at {}/{}", r.partition, r.offset);
            *seen.entry((r.partition, r.offset)).or_default() += 1;
        }
    }
    let missing: Vec<&(i32, i64)> = produced.keys().filter(|k| !seen.contains_key(k)).collect();
    assert!(
        missing.is_empty(),
        "{} of {} records were never consumed by the group, first: {:?}",
        missing.len(),
        produced.len(),
        &missing[..missing.len().min(10)]
    );
    seen.values().map(|n| n - 1).sum()
}

#[test]
fn cooperative_sticky_members_keep_their_partitions_through_a_join_and_a_leave() {
    let broker = Broker::start_default();
    let topic = unique_topic("coop");
    broker.create_topic(&topic, PARTITIONS, &[]).unwrap();
    let group = unique_group("coop");
    let producer = Producer::start(&broker, &topic);

    // Two members share six partitions.
    let mut a = CoopMember::start("coop-a", &broker, &group, &topic, Some(SLOW_REVOKE));
    let mut b = CoopMember::start("coop-b", &broker, &group, &topic, None);
    let two = wait_for_settled(&[&a, &b], &[3, 3]);
    assert_broker_agrees(&broker, &group, &topic, &[&a, &b], &two);
    wait_consuming_all(&[&a, &b], Instant::now());

    // A third member joins: each of the others gives up one partition, in two rounds.
    let joined_at = Instant::now();
    let mut c = CoopMember::start("coop-c", &broker, &group, &topic, None);
    let three = wait_for_settled(&[&a, &b, &c], &[2, 2, 2]);
    assert_broker_agrees(&broker, &group, &topic, &[&a, &b, &c], &three);
    // The new member's partitions may come in one round or, when one owner revokes later
    // than the other, in two incremental assignments: what matters is the union, and that
    // the last came after every revocation.
    let c_assigns: Vec<Callback> = c
        .callbacks_between(joined_at, Instant::now())
        .into_iter()
        .filter(|cb| cb.kind == Kind::Assign && !cb.partitions.is_empty())
        .collect();
    let assigned: BTreeSet<i32> = (c_assigns.iter())
        .flat_map(|cb| cb.partitions.iter().copied())
        .collect();
    assert_eq!(assigned, three[2], "{}", c.report());
    let c_assign = (c_assigns.last().cloned())
        .unwrap_or_else(|| panic!("no assignment callback for the new member: {}", c.report()));
    let join_window = (joined_at, c_assign.ended.expect("callback finished"));
    wait_consuming_all(&[&a, &b, &c], join_window.1);

    let a_revoke = a
        .callbacks_between(join_window.0, join_window.1)
        .into_iter()
        .find(|cb| cb.kind == Kind::Revoke)
        .unwrap_or_else(|| panic!("{} revoked nothing: {}", a.name, a.report()));
    let b_revoke = b
        .callbacks_between(join_window.0, join_window.1)
        .into_iter()
        .find(|cb| cb.kind == Kind::Revoke)
        .unwrap_or_else(|| panic!("{} revoked nothing: {}", b.name, b.report()));
    // Round one revokes (no partition has two owners), round two assigns.
    for revoke in [&a_revoke, &b_revoke] {
        assert!(
            revoke.ended.is_some_and(|e| e <= c_assign.started),
            "a partition was assigned to the new member before its owner had revoked it"
        );
    }
    let revoke_generation = a_revoke.generation.max(b_revoke.generation);
    assert!(
        revoke_generation.is_some() && c_assign.generation > revoke_generation,
        "the revocations (generations {:?}, {:?}) and the new member's assignment (generation \
         {:?}) came from the same JoinGroup round",
        a_revoke.generation,
        b_revoke.generation,
        c_assign.generation
    );
    let generations: BTreeSet<i32> = [&a, &b, &c]
        .iter()
        .flat_map(|m| {
            m.journal()
                .joins
                .iter()
                .filter(|(t, _)| *t >= join_window.0 && *t <= join_window.1)
                .map(|(_, g)| *g)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        generations.len() >= 2,
        "JoinGroup generations while the third member joined: {generations:?}"
    );
    assert!(
        join_window.1 - join_window.0 >= SLOW_REVOKE,
        "the rebalance ended before the slow member could rejoin"
    );
    assert_kept_partitions_were_never_revoked_and_kept_flowing(
        &[(&a, &two[0], &three[0]), (&b, &two[1], &three[1])],
        join_window,
    );

    // The second member leaves cleanly: one round, nothing revoked from the others.
    let left_at = Instant::now();
    b.close();
    let after_leave = wait_for_settled(&[&a, &c], &[3, 3]);
    assert_broker_agrees(&broker, &group, &topic, &[&a, &c], &after_leave);
    // (member, callback) of every assignment after the leave.
    let leave_assigns: Vec<(String, Callback)> = [&a, &c]
        .iter()
        .flat_map(|m| {
            m.callbacks_between(left_at, Instant::now())
                .into_iter()
                .map(|cb| (m.name.clone(), cb))
        })
        .filter(|(_, cb)| cb.kind == Kind::Assign && !cb.partitions.is_empty())
        .collect();
    let b_close = b
        .callbacks_between(left_at, Instant::now())
        .into_iter()
        .find(|cb| cb.kind == Kind::Revoke)
        .unwrap_or_else(|| panic!("{} revoked nothing on close: {}", b.name, b.report()));
    assert_eq!(b_close.partitions, three[1], "{} revoked on close", b.name);
    let handed: BTreeSet<i32> = leave_assigns
        .iter()
        .flat_map(|(_, cb)| cb.partitions.iter().copied())
        .collect();
    assert_eq!(handed, three[1], "partitions handed over after the leave");
    for (_, cb) in &leave_assigns {
        assert!(
            b_close.ended.is_some_and(|e| e <= cb.started),
            "a partition was assigned before the leaving member had revoked it"
        );
    }
    let leave_end = leave_assigns
        .iter()
        .filter_map(|(_, cb)| cb.ended)
        .max()
        .expect("assignment callbacks finished");
    wait_consuming_all(&[&a, &c], leave_end);
    assert_kept_partitions_were_never_revoked_and_kept_flowing(
        &[
            (&a, &three[0], &after_leave[0]),
            (&c, &three[2], &after_leave[1]),
        ],
        (left_at, leave_end),
    );

    // Nothing lost: the group's committed offsets reach the log end, and every record below
    // it was consumed by some member.
    let produced = producer.stop();
    let mut ends: BTreeMap<i32, i64> = BTreeMap::new();
    for (p, o) in produced.keys() {
        let e = ends.entry(*p).or_default();
        *e = (*e).max(o + 1);
    }
    let partitions: Vec<i32> = (0..PARTITIONS).collect();
    let want: BTreeMap<i32, Option<i64>> = ends.iter().map(|(p, e)| (*p, Some(*e))).collect();
    let mut committed = BTreeMap::new();
    let caught_up = strata_tests::wait_until(SETTLE, || {
        committed = broker.committed(&group, &topic, &partitions).unwrap();
        committed == want
    });
    assert!(
        caught_up,
        "committed offsets {committed:?} never reached the log ends {want:?}"
    );
    a.close();
    c.close();
    let duplicates = assert_none_lost(&[&a, &b, &c], &produced);
    eprintln!(
        "{} records produced, {duplicates} consumed twice; rebalance on join took {:?}",
        produced.len(),
        join_window.1 - join_window.0
    );

    // Each moved partition resumes exactly after the last record its previous owner
    // received: the owner's commit on revoke (sent before it rejoins, so before the new owner
    // reads the committed offset) is accepted. Kafka accepts a commit with the current
    // generation while the group is Stable or PreparingRebalance; here the slow member's
    // commit always lands in PreparingRebalance, since the other member rejoined meanwhile.
    let members = [&a, &b, &c];
    let member = |name: &str| {
        *members
            .iter()
            .find(|m| m.name == name)
            .expect("member by name")
    };
    let mut handovers = handover(&a, &a_revoke, &c, &c_assign);
    handovers.extend(handover(&b, &b_revoke, &c, &c_assign));
    for (to, assign) in &leave_assigns {
        handovers.extend(handover(&b, &b_close, member(to), assign));
    }
    let broken: Vec<String> = handovers
        .iter()
        .filter(|h| {
            let refused = h.final_commits.iter().any(|r| {
                r.as_ref()
                    .is_err_and(|e| *e != KafkaError::ConsumerCommit(RDKafkaErrorCode::NoOffset))
            });
            refused || h.first.is_none() || h.first != h.last.map(|l| l + 1)
        })
        .map(|h| {
            format!(
                "partition {}: {} received up to offset {:?}, {} resumed at {:?}; {}'s commits \
                 of it from its revocation on: {:?}",
                h.partition, h.from, h.last, h.to, h.first, h.from, h.final_commits
            )
        })
        .collect();
    assert!(
        broken.is_empty(),
        "a moved partition did not resume right after its previous owner's last record, or \
         that owner's final commit was refused ({duplicates} records consumed twice in all):\n{}",
        broken.join("\n")
    );
}

/// The handovers of `assign.partitions` from `from` (revoked by `revoke`) to `to`.
fn handover(
    from: &CoopMember,
    revoke: &Callback,
    to: &CoopMember,
    assign: &Callback,
) -> Vec<Handover> {
    let (fj, tj) = (from.journal(), to.journal());
    revoke
        .partitions
        .intersection(&assign.partitions)
        .map(|&p| Handover {
            partition: p,
            from: from.name.clone(),
            to: to.name.clone(),
            last: fj
                .received
                .iter()
                .filter(|r| r.partition == p && r.at <= revoke.started)
                .map(|r| r.offset)
                .max(),
            first: tj
                .received
                .iter()
                .filter(|r| r.partition == p && r.at >= assign.started)
                .map(|r| r.offset)
                .min(),
            final_commits: fj
                .commits
                .iter()
                .filter(|c| c.at >= revoke.started && c.partitions.contains(&p))
                .map(|c| c.result.clone())
                .collect(),
        })
        .collect()
}

/// The callbacks `m` has seen since `from`, without librdkafka's empty incremental assigns
/// (it calls the assign callback with nothing new after each round).
fn calls(m: &CoopMember, from: Instant) -> Vec<(Kind, BTreeSet<i32>)> {
    (m.callbacks_between(from, Instant::now()).into_iter())
        .filter(|c| c.kind == Kind::Revoke || !c.partitions.is_empty())
        .map(|c| (c.kind, c.partitions))
        .collect()
}

/// A plain join makes the fewest rebalance calls: the first member gets one assign call,
/// with every partition; a second member's arrival costs the first one revoke of what moves
/// (and nothing new assigned), and the newcomer one assign.
#[test]
fn a_plain_join_makes_the_fewest_assign_and_revoke_calls() {
    let broker = Broker::start_default();
    let topic = unique_topic("coop-calls");
    broker.create_topic(&topic, PARTITIONS, &[]).unwrap();
    let group = unique_group("coop-calls");
    let started = Instant::now();
    let a = CoopMember::start("calls-a", &broker, &group, &topic, None);
    wait_for_settled(&[&a], &[6]);
    // Long enough for any further round the first one would have caused.
    thread::sleep(Duration::from_secs(3));
    let all: BTreeSet<i32> = (0..PARTITIONS).collect();
    assert_eq!(
        calls(&a, started),
        vec![(Kind::Assign, all)],
        "{}",
        a.report()
    );
    let joined = Instant::now();
    let b = CoopMember::start("calls-b", &broker, &group, &topic, None);
    let two = wait_for_settled(&[&a, &b], &[3, 3]);
    thread::sleep(Duration::from_secs(3));
    let moved = two[1].clone();
    assert_eq!(
        calls(&a, joined),
        vec![(Kind::Revoke, moved.clone())],
        "{}",
        a.report()
    );
    assert_eq!(
        calls(&b, joined),
        vec![(Kind::Assign, moved)],
        "{}",
        b.report()
    );
}

/// Members starting together within `group.initial.rebalance.delay.ms` (Kafka's default,
/// 3 s) form one generation: one assign call each, with its share, and no revoke.
#[test]
fn cooperative_members_starting_together_are_assigned_once() {
    let broker = Broker::start(
        strata_tests::BrokerOpts::new().env("STRATA_GROUP_INITIAL_REBALANCE_DELAY_MS", 3000),
    );
    let topic = unique_topic("coop-together");
    broker.create_topic(&topic, PARTITIONS, &[]).unwrap();
    let group = unique_group("coop-together");
    let started = Instant::now();
    let a = CoopMember::start("together-a", &broker, &group, &topic, None);
    let b = CoopMember::start("together-b", &broker, &group, &topic, None);
    let two = wait_for_settled(&[&a, &b], &[3, 3]);
    thread::sleep(Duration::from_secs(3));
    for (m, mine) in [(&a, &two[0]), (&b, &two[1])] {
        assert_eq!(
            calls(m, started),
            vec![(Kind::Assign, mine.clone())],
            "{}",
            m.report()
        );
    }
}
