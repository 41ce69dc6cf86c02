//! `strata perf produce|consume|e2e|group|commit|txn`: load generators and measurements.
//!
//! Progress goes to stderr once a second; the final summary is one line on stdout of
//! space-separated `key=value` fields, stable for scripts:
//!
//! ```text
//! produce records=.. bytes=.. seconds=.. records_per_sec=.. mb_per_sec=.. p50_ms=.. p99_ms=.. p999_ms=.. max_ms=.. errors=..
//! consume records=.. bytes=.. seconds=.. records_per_sec=.. mb_per_sec=..
//! e2e records=.. p50_ms=.. p99_ms=.. p999_ms=.. max_ms=..
//! group members=.. partitions=.. strategy=.. ... join_ms=.. add_ms=.. kill_ms=.. ...
//! commit clients=.. partitions=.. mode=sync commits=.. seconds=.. commits_per_sec=.. p50_ms=.. ...
//! txn mode=transactional records=.. transactions=.. ... commit_p50_ms=.. [e2e_p50_ms=..] errors=..
//! get concurrency=.. range_bytes=.. gets=.. bytes=.. seconds=.. mb_per_sec=.. p50_ms=.. ...
//! connect connections=.. concurrency=.. seconds=.. connections_per_sec=.. p50_ms=.. ...
//! ```
//!
//! `mb_per_sec` is in MiB (2^20 bytes) per second, as Kafka's perf tools report it.
//!
//! - [`produce`], [`consume`], [`e2e`] — record throughput and latency;
//! - [`group`] — consumer-group membership: join, scale-out and member-death times, with the
//!   members run as child processes ([`member`], the hidden `perf group-member`);
//! - [`commit`] — OffsetCommit throughput and latency against one group coordinator;
//! - [`txn`] — a transactional producer's throughput and commit latency, against the same
//!   records without transactions, and read_committed end-to-end latency;
//! - [`get`] — the object store's ranged-GET throughput (the yardstick for remote reads);
//! - [`connect`] — new connections per second, with their TLS handshake and SASL exchange.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::{Subcommand, ValueEnum};
use rdkafka::admin::{NewTopic, TopicReplication};
use rdkafka::error::RDKafkaErrorCode;

use super::common::{
    admin_client, admin_options, block_on, current_thread_runtime, per_sec, topic_partitions,
    ConnectArgs,
};

mod broker_cpu;
mod commit;
mod connect;
mod consume;
mod e2e;
mod get;
mod group;
mod member;
mod produce;
mod txn;

pub use commit::PerfCommitArgs;
pub use connect::PerfConnectArgs;
pub use consume::PerfConsumeArgs;
pub use e2e::{decode_e2e_header, encode_e2e_header, PerfE2eArgs};
pub use get::PerfGetArgs;
pub use group::PerfGroupArgs;
pub use member::GroupMemberArgs;
pub use produce::{make_payload, PerfProduceArgs};
pub use txn::PerfTxnArgs;

#[derive(Subcommand, Debug)]
pub enum PerfCommand {
    /// Produce generated records as fast as possible (or at --rate); report throughput and
    /// send-to-acknowledgement latency.
    Produce(PerfProduceArgs),
    /// Consume records from the beginning of every partition; report throughput.
    Consume(PerfConsumeArgs),
    /// Produce at --rate while a consumer waits at the tail; report produce-to-consume latency.
    E2e(PerfE2eArgs),
    /// Start N consumer-group members (child processes); report the time to a stable
    /// assignment after they join, after one more joins, and after one is killed (SIGKILL).
    Group(PerfGroupArgs),
    /// Commit offsets from C clients of one group as fast as they can; report commits/s and
    /// commit latency.
    Commit(PerfCommitArgs),
    /// Transactions of R records over P partitions as fast as they commit (or at --rate);
    /// report throughput and commit latency, `--plain` the same without transactions,
    /// `--e2e` the read_committed produce-to-consume latency.
    Txn(PerfTxnArgs),
    /// Ranged GETs of segment objects straight from the object store, C in flight; report
    /// MB/s and GET latency.
    Get(PerfGetArgs),
    /// Open N connections, C at a time, each with its TLS handshake and SASL exchange (as
    /// the -X properties say) and one Metadata request; report connections/s and latency.
    Connect(PerfConnectArgs),
    /// One member of `perf group` (internal: reports its assignment on stdout).
    #[command(hide = true)]
    GroupMember(GroupMemberArgs),
}

impl PerfCommand {
    /// The Kafka connection settings, for the commands that talk to a broker.
    pub fn conn(&self) -> Option<&ConnectArgs> {
        match self {
            PerfCommand::Produce(a) => Some(&a.conn),
            PerfCommand::Consume(a) => Some(&a.conn),
            PerfCommand::E2e(a) => Some(&a.conn),
            PerfCommand::Group(a) => Some(&a.conn),
            PerfCommand::Commit(a) => Some(&a.conn),
            PerfCommand::Txn(a) => Some(&a.conn),
            PerfCommand::GroupMember(a) => Some(&a.conn),
            PerfCommand::Connect(a) => Some(&a.conn),
            PerfCommand::Get(_) => None,
        }
    }
}

pub fn run(cmd: PerfCommand) -> anyhow::Result<()> {
    match cmd {
        PerfCommand::Produce(args) => produce::run(args),
        PerfCommand::Consume(args) => consume::run(args),
        PerfCommand::E2e(args) => e2e::run(args),
        PerfCommand::Group(args) => group::run(args),
        PerfCommand::Commit(args) => commit::run(args),
        PerfCommand::Txn(args) => txn::run(args),
        PerfCommand::Get(args) => get::run(args),
        PerfCommand::Connect(args) => connect::run(args),
        PerfCommand::GroupMember(args) => member::run(args),
    }
}

/// `partition.assignment.strategy` values accepted by `--assignment-strategy`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssignmentStrategy {
    /// Eager: every member gives up all its partitions at each rebalance.
    Range,
    /// Eager, partitions dealt round-robin.
    Roundrobin,
    /// Incremental (KIP-429): only moved partitions are revoked, in a second rebalance.
    CooperativeSticky,
}

impl AssignmentStrategy {
    pub fn as_config(self) -> &'static str {
        match self {
            AssignmentStrategy::Range => "range",
            AssignmentStrategy::Roundrobin => "roundrobin",
            AssignmentStrategy::CooperativeSticky => "cooperative-sticky",
        }
    }
}

/// The topic's partition count, creating it with `partitions` (or `default`) when missing.
/// An existing topic with a different count than an explicit `partitions` is an error.
fn ensure_topic(
    conn: &ConnectArgs,
    topic: &str,
    partitions: Option<i32>,
    default: i32,
) -> anyhow::Result<i32> {
    ensure_topics(conn, &[topic.to_string()], partitions, default)
}

/// [`ensure_topic`] for several topics in one CreateTopics request; returns the partition
/// count of the first (they are created alike).
fn ensure_topics(
    conn: &ConnectArgs,
    topics: &[String],
    partitions: Option<i32>,
    default: i32,
) -> anyhow::Result<i32> {
    if partitions.is_some_and(|p| p < 1) {
        bail!("--partitions must be at least 1");
    }
    let admin = admin_client(conn)?;
    let runtime = current_thread_runtime()?;
    let wanted = partitions.unwrap_or(default);
    let new: Vec<NewTopic> = topics
        .iter()
        .map(|t| NewTopic::new(t, wanted, TopicReplication::Fixed(-1)))
        .collect();
    let started = Instant::now();
    let results = block_on(
        &runtime,
        conn,
        "create topics",
        admin.create_topics(&new, &admin_options(conn)),
    )?
    .context("creating topics")?;
    let mut created = 0;
    for result in results {
        match result {
            Ok(_) => created += 1,
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => bail!("cannot create topic `{name}`: {code}"),
        }
    }
    if created > 0 {
        eprintln!(
            "created {created} topic(s) with {wanted} partitions in {} ms",
            started.elapsed().as_millis()
        );
    }
    let mut first = None;
    for topic in topics {
        let have = topic_partitions(conn, admin.inner(), topic)?.len() as i32;
        if partitions.is_some_and(|p| p != have) {
            bail!("topic `{topic}` already exists with {have} partitions, not {wanted}");
        }
        first.get_or_insert(have);
    }
    first.ok_or_else(|| anyhow::anyhow!("no topic named"))
}

/// The topics a run over `count` topics named after `topic` uses: `topic` itself for one,
/// `topic-0` .. `topic-<count-1>` for more.
fn topic_names(topic: &str, count: u32) -> anyhow::Result<Vec<String>> {
    match count {
        0 => bail!("--topics must be at least 1"),
        1 => Ok(vec![topic.to_string()]),
        n => Ok((0..n).map(|i| format!("{topic}-{i}")).collect()),
    }
}

/// A group id no one else uses: `<prefix>-<pid>-<unix nanos>`.
fn unique_group(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// Milliseconds with one decimal, for `key=value` summaries.
fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn nanos_since(origin: Instant) -> u64 {
    u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Runs `body` while a thread prints `progress()` to stderr every second.
fn with_progress<R>(progress: impl FnMut() -> String + Send, body: impl FnOnce() -> R) -> R {
    let (stop, stopped) = mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let mut progress = progress;
        scope.spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(Duration::from_secs(1))
            {
                eprintln!("{}", progress());
            }
        });
        let result = body();
        drop(stop);
        result
    })
}

/// Counts per interval for progress lines: returns the rate since the previous call.
struct IntervalRate {
    last: Instant,
    last_count: u64,
}

impl IntervalRate {
    fn new() -> IntervalRate {
        IntervalRate {
            last: Instant::now(),
            last_count: 0,
        }
    }

    fn rate(&mut self, count: u64) -> f64 {
        let now = Instant::now();
        let rate = per_sec(
            count.saturating_sub(self.last_count),
            now.duration_since(self.last).as_secs_f64(),
        );
        self.last = now;
        self.last_count = count;
        rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_rate_counts_differences() {
        let mut r = IntervalRate::new();
        std::thread::sleep(Duration::from_millis(20));
        let rate = r.rate(100);
        assert!(rate > 0.0 && rate <= 100.0 / 0.02 + 1.0, "{rate}");
        assert_eq!(r.last_count, 100);
    }

    #[test]
    fn milliseconds_have_one_decimal() {
        assert_eq!(ms(Duration::from_micros(1_234_567)), "1234.6");
        assert_eq!(ms(Duration::ZERO), "0.0");
    }

    #[test]
    fn one_topic_keeps_its_name_and_several_are_numbered() {
        assert_eq!(topic_names("t", 1).unwrap(), vec!["t"]);
        assert_eq!(topic_names("t", 3).unwrap(), vec!["t-0", "t-1", "t-2"]);
        assert!(topic_names("t", 0).is_err());
    }
}
