//! `strata perf group-member` (hidden): one consumer-group member of `strata perf group`, run
//! as a child process of it so that it can be killed with SIGKILL like a crashed consumer.
//!
//! It subscribes to the topic and reports on stdout, one line each:
//!
//! ```text
//! ready pid=<pid>
//! state generation=<g> member=<member id> partitions=<p,p,...|->
//! ```
//!
//! `ready` once subscribed; `state` after each rebalance callback (assign or revoke) that
//! changed its generation, member id or assignment of the topic. It consumes nothing and
//! commits nothing. It leaves the group and exits when its stdin reaches end of file, so
//! members never outlive `perf group`.
//!
//! The state is read only after a rebalance callback, never periodically: each read is a
//! request to librdkafka's main thread, and waking that thread changes when the classic
//! protocol's heartbeats go out (they are sent from its loop, not from a timer of their own).

// Reads librdkafka's group metadata through its C API.
#![allow(unsafe_code)]

use std::ffi::CStr;
use std::io::Read as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use rdkafka::bindings as rd;
use rdkafka::client::{Client, ClientContext};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};

use crate::common::{emit, ConnectArgs, ErrorReporter};

#[derive(Args, Debug)]
pub struct GroupMemberArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// Group to join.
    #[arg(long)]
    pub group: String,
    /// Topic to subscribe to.
    #[arg(long)]
    pub topic: String,
    /// This member's number in `perf group` (its `client.id` is `strata-perf-member-<N>`).
    #[arg(long, default_value_t = 0)]
    pub index: u32,
    /// librdkafka `session.timeout.ms`.
    #[arg(long, default_value_t = 6000, value_name = "MS")]
    pub session_timeout_ms: u64,
    /// librdkafka `heartbeat.interval.ms`.
    #[arg(long, default_value_t = 3000, value_name = "MS")]
    pub heartbeat_interval_ms: u64,
    /// librdkafka `partition.assignment.strategy`.
    #[arg(long, value_enum, default_value = "range")]
    pub assignment_strategy: AssignmentStrategy,
}

/// What librdkafka says about the consumer's place in its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPosition {
    /// Generation of the last JoinGroup response (-1 before the first).
    pub generation: i32,
    /// Member id the coordinator gave (empty before the first JoinGroup response).
    pub member_id: String,
}

/// The consumer's generation and member id (`rd_kafka_consumer_group_metadata`), `None` for a
/// client without a group.
pub fn group_position<C: ClientContext>(client: &Client<C>) -> Option<GroupPosition> {
    // SAFETY: `rk` is a live consumer handle kept alive by `client` for the whole call. The
    // metadata object is owned here, read while alive (its member id string is copied) and
    // destroyed exactly once.
    unsafe {
        let md = rd::rd_kafka_consumer_group_metadata(client.native_ptr());
        if md.is_null() {
            return None;
        }
        let generation = rd::rd_kafka_consumer_group_metadata_generation_id(md);
        let member = rd::rd_kafka_consumer_group_metadata_member_id(md);
        let member_id = if member.is_null() {
            String::new()
        } else {
            CStr::from_ptr(member).to_string_lossy().into_owned()
        };
        rd::rd_kafka_consumer_group_metadata_destroy(md);
        Some(GroupPosition {
            generation,
            member_id,
        })
    }
}

/// One line of a member's report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    Ready { pid: u32 },
    State(MemberState),
}

/// A member's generation, id and assigned partitions (sorted) of the topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberState {
    pub generation: i32,
    pub member_id: String,
    pub partitions: Vec<i32>,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Report::Ready { pid } => write!(f, "ready pid={pid}"),
            Report::State(s) => {
                let partitions = if s.partitions.is_empty() {
                    "-".to_string()
                } else {
                    let ids: Vec<String> = s.partitions.iter().map(i32::to_string).collect();
                    ids.join(",")
                };
                write!(
                    f,
                    "state generation={} member={} partitions={partitions}",
                    s.generation,
                    if s.member_id.is_empty() {
                        "-"
                    } else {
                        &s.member_id
                    }
                )
            }
        }
    }
}

impl Report {
    /// Parses a line written by [`Report`]'s `Display`; `None` for anything else.
    pub fn parse(line: &str) -> Option<Report> {
        let mut words = line.split_whitespace();
        let kind = words.next()?;
        let fields: Vec<(&str, &str)> = words.map(|w| w.split_once('=')).collect::<Option<_>>()?;
        let get = |key: &str| fields.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
        match kind {
            "ready" => Some(Report::Ready {
                pid: get("pid")?.parse().ok()?,
            }),
            "state" => {
                let member = get("member")?;
                let partitions = match get("partitions")? {
                    "-" => vec![],
                    list => list
                        .split(',')
                        .map(|p| p.parse().ok())
                        .collect::<Option<Vec<i32>>>()?,
                };
                Some(Report::State(MemberState {
                    generation: get("generation")?.parse().ok()?,
                    member_id: if member == "-" {
                        String::new()
                    } else {
                        member.to_string()
                    },
                    partitions,
                }))
            }
            _ => None,
        }
    }
}

/// Notes that a rebalance callback ran, so the member reports its new state at once.
#[derive(Default)]
struct MemberContext {
    rebalanced: AtomicBool,
}

impl ClientContext for MemberContext {}

impl ConsumerContext for MemberContext {
    fn post_rebalance(&self, _: &BaseConsumer<Self>, _: &Rebalance<'_>) {
        self.rebalanced.store(true, Ordering::Release);
    }
}

fn current_state(
    consumer: &BaseConsumer<MemberContext>,
    topic: &str,
) -> anyhow::Result<MemberState> {
    let position = group_position(consumer.client()).unwrap_or(GroupPosition {
        generation: -1,
        member_id: String::new(),
    });
    let assignment = consumer.assignment().context("reading the assignment")?;
    let mut partitions: Vec<i32> = assignment
        .elements()
        .iter()
        .filter(|e| e.topic() == topic)
        .map(|e| e.partition())
        .collect();
    partitions.sort_unstable();
    Ok(MemberState {
        generation: position.generation,
        member_id: position.member_id,
        partitions,
    })
}

pub(super) fn run(args: GroupMemberArgs) -> anyhow::Result<()> {
    let session = args.session_timeout_ms.to_string();
    let heartbeat = args.heartbeat_interval_ms.to_string();
    let client_id = format!("strata-perf-member-{}", args.index);
    let consumer: BaseConsumer<MemberContext> = args
        .conn
        .client_config(&[
            ("group.id", args.group.as_str()),
            ("client.id", client_id.as_str()),
            ("session.timeout.ms", session.as_str()),
            ("heartbeat.interval.ms", heartbeat.as_str()),
            (
                "partition.assignment.strategy",
                args.assignment_strategy.as_config(),
            ),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("auto.offset.reset", "latest"),
            ("allow.auto.create.topics", "false"),
        ])
        .create_with_context(MemberContext::default())
        .context("creating consumer")?;
    consumer
        .subscribe(&[&args.topic])
        .with_context(|| format!("subscribing to `{}`", args.topic))?;

    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
            stop.store(true, Ordering::Release);
        });
    }
    emit(format_args!(
        "{}",
        Report::Ready {
            pid: std::process::id()
        }
    ))?;

    let mut errors = ErrorReporter::default();
    let mut reported: Option<MemberState> = None;
    while !stop.load(Ordering::Acquire) {
        if let Some(Err(e)) = consumer.poll(Duration::from_millis(100)) {
            errors.report(&format!("perf group-member {}: {e}", args.index));
        }
        if consumer.context().rebalanced.swap(false, Ordering::AcqRel) {
            let state = current_state(&consumer, &args.topic)?;
            if reported.as_ref() != Some(&state) {
                emit(format_args!("{}", Report::State(state.clone())))?;
                reported = Some(state);
            }
        }
    }
    // Dropping the consumer closes it: revoke, LeaveGroup.
    drop(consumer);
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_round_trip() {
        let reports = [
            Report::Ready { pid: 42 },
            Report::State(MemberState {
                generation: 3,
                member_id: "strata-perf-member-1-6f1c".into(),
                partitions: vec![0, 4, 7],
            }),
            Report::State(MemberState {
                generation: -1,
                member_id: String::new(),
                partitions: vec![],
            }),
        ];
        for r in reports {
            let line = r.to_string();
            assert_eq!(Report::parse(&line), Some(r), "{line}");
        }
        assert_eq!(
            Report::State(MemberState {
                generation: 2,
                member_id: "m".into(),
                partitions: vec![1, 2],
            })
            .to_string(),
            "state generation=2 member=m partitions=1,2"
        );
    }

    #[test]
    fn other_lines_are_not_reports() {
        for line in [
            "",
            "hello",
            "ready",
            "ready pid=x",
            "state generation=1 member=m",
            "state generation=1 member=m partitions=1,x",
            "state generation=1 member=m partitions=1 junk",
        ] {
            assert_eq!(Report::parse(line), None, "{line}");
        }
    }
}
