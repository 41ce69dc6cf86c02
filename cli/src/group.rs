//! `strata group list|describe|delete|reset-offsets`: consumer groups through librdkafka.
//!
//! - `list` — every group with its state and protocol type (ListGroups + DescribeGroups);
//! - `describe` — members with their decoded assignments, and per partition the committed
//!   offset, log end, lag in records and in seconds (the age of the first unread record);
//!   `--watch` samples twice and reports whether each partition is draining or falling
//!   behind, warning when unread data is close to its topic's retention;
//! - `delete` — DeleteGroups;
//! - `reset-offsets` — commits new offsets in the group's name (without joining it), which
//!   only an empty group accepts.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context as _};
use clap::{ArgGroup, Args, Subcommand};
use kafka_protocol::messages::ConsumerProtocolAssignment;
use kafka_protocol::protocol::{Decodable, Message as _};
use rdkafka::admin::ResourceSpecifier;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::groups::GroupInfo;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::common::{
    admin_client, admin_options, block_on, check_partition, current_thread_runtime, emit,
    fetch_metadata, topic_partitions, ConnectArgs,
};

#[derive(Subcommand, Debug)]
pub enum GroupCommand {
    /// List consumer groups, one per line with state and protocol type.
    List(ListArgs),
    /// Show a group's members, assignments, committed offsets and lag.
    Describe(DescribeArgs),
    /// Delete groups (only groups without active members can be deleted).
    Delete(DeleteArgs),
    /// Set a group's committed offsets for a topic (the group must have no active members).
    ResetOffsets(ResetArgs),
}

#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args, Debug)]
pub struct DescribeArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// Group id.
    pub group: String,
    /// Sample lag twice, SECONDS apart, and report its trend per partition.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub watch: Option<u64>,
}

#[derive(Args, Debug)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// Group id(s).
    #[arg(required = true)]
    pub groups: Vec<String>,
}

#[derive(Args, Debug)]
#[command(group(
    ArgGroup::new("target")
        .required(true)
        .args(["to_earliest", "to_latest", "to_timestamp", "to_offset"])
))]
pub struct ResetArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// Group id.
    pub group: String,
    /// Topic whose offsets are reset.
    #[arg(short = 't', long)]
    pub topic: String,
    /// Reset only this partition (default: every partition of the topic).
    #[arg(short = 'P', long)]
    pub partition: Option<i32>,
    /// The earliest offset still in the log.
    #[arg(long)]
    pub to_earliest: bool,
    /// The log end: skip everything not yet consumed.
    #[arg(long)]
    pub to_latest: bool,
    /// The first record with a timestamp >= MS (unix milliseconds); log end if none.
    #[arg(long, value_name = "MS")]
    pub to_timestamp: Option<i64>,
    /// This offset, clamped to the partition's [earliest, log end].
    #[arg(long, value_name = "N")]
    pub to_offset: Option<i64>,
    /// Print the old and new offsets without committing.
    #[arg(long)]
    pub dry_run: bool,
}

impl GroupCommand {
    pub fn conn(&self) -> &ConnectArgs {
        match self {
            GroupCommand::List(a) => &a.conn,
            GroupCommand::Describe(a) => &a.conn,
            GroupCommand::Delete(a) => &a.conn,
            GroupCommand::ResetOffsets(a) => &a.conn,
        }
    }
}

pub fn run(cmd: GroupCommand) -> anyhow::Result<()> {
    match cmd {
        GroupCommand::List(args) => list(args),
        GroupCommand::Describe(args) => describe(args),
        GroupCommand::Delete(args) => delete(args),
        GroupCommand::ResetOffsets(args) => reset_offsets(args),
    }
}

// ---------------------------------------------------------------------------------------
// Clients

/// A consumer acting in `group`'s name that never subscribes, so it never joins the group:
/// it only reads (OffsetFetch, DescribeGroups) and, for `reset-offsets`, commits.
fn group_consumer(conn: &ConnectArgs, group: &str) -> anyhow::Result<BaseConsumer> {
    conn.client_config(&[
        ("group.id", group),
        ("enable.auto.commit", "false"),
        ("enable.auto.offset.store", "false"),
        ("allow.auto.create.topics", "false"),
    ])
    .create()
    .context("creating consumer")
}

/// A consumer in a throwaway group of its own, to read records at given offsets.
fn reader_consumer(conn: &ConnectArgs) -> anyhow::Result<BaseConsumer> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let throwaway = format!("strata-cli-lag-{}-{nanos}", std::process::id());
    conn.client_config(&[
        ("group.id", &throwaway),
        ("enable.auto.commit", "false"),
        ("enable.auto.offset.store", "false"),
        // A committed offset below the log start (deleted by retention): read the oldest
        // record still there.
        ("auto.offset.reset", "earliest"),
        ("fetch.queue.backoff.ms", "10"),
        ("allow.auto.create.topics", "false"),
    ])
    .create()
    .context("creating consumer")
}

/// DescribeGroups for one group; `None` when the broker does not know it (librdkafka
/// describes only the groups ListGroups returns, and brokers list every group with members
/// or committed offsets).
pub(crate) fn describe_group(
    conn: &ConnectArgs,
    consumer: &BaseConsumer,
    group: &str,
) -> anyhow::Result<Option<GroupSnapshot>> {
    let list = consumer
        .fetch_group_list(Some(group), conn.request_timeout())
        .map_err(|e| anyhow!("describing group `{group}`: {e}"))?;
    Ok(list
        .groups()
        .iter()
        .find(|g| g.name() == group)
        .map(GroupSnapshot::from_info))
}

/// What DescribeGroups says about a group, owned.
#[derive(Debug)]
pub(crate) struct GroupSnapshot {
    pub(crate) state: String,
    pub(crate) protocol_type: String,
    pub(crate) protocol: String,
    pub(crate) members: Vec<MemberSnapshot>,
}

#[derive(Debug)]
pub(crate) struct MemberSnapshot {
    pub(crate) id: String,
    pub(crate) client_id: String,
    pub(crate) host: String,
    pub(crate) assignment: Option<Vec<u8>>,
}

impl GroupSnapshot {
    fn from_info(info: &GroupInfo) -> GroupSnapshot {
        GroupSnapshot {
            state: info.state().to_string(),
            protocol_type: info.protocol_type().to_string(),
            protocol: info.protocol().to_string(),
            members: info
                .members()
                .iter()
                .map(|m| MemberSnapshot {
                    id: m.id().to_string(),
                    client_id: m.client_id().to_string(),
                    host: m.client_host().to_string(),
                    assignment: m.assignment().map(<[u8]>::to_vec),
                })
                .collect(),
        }
    }
}

fn active_members_error(group: &str) -> anyhow::Error {
    anyhow!("group {group} has active members: stop its consumers before resetting offsets")
}

// ---------------------------------------------------------------------------------------
// list

fn list(args: ListArgs) -> anyhow::Result<()> {
    let conn = &args.conn;
    // No group.id: listing joins nothing and fetches no offsets.
    let consumer: BaseConsumer = conn
        .client_config(&[("allow.auto.create.topics", "false")])
        .create()
        .context("creating consumer")?;
    let list = consumer
        .fetch_group_list(None, conn.request_timeout())
        .map_err(|e| {
            anyhow!(
                "cannot list groups from {} within {} ms: {e}",
                conn.bootstrap_server,
                conn.request_timeout().as_millis()
            )
        })?;
    let mut groups: Vec<_> = list.groups().iter().collect();
    groups.sort_by(|a, b| a.name().cmp(b.name()));
    let rows: Vec<Vec<String>> = groups
        .iter()
        .map(|g| {
            let protocol_type = if g.protocol_type().is_empty() {
                "-"
            } else {
                g.protocol_type()
            };
            vec![
                g.name().to_string(),
                g.state().to_string(),
                protocol_type.to_string(),
                g.members().len().to_string(),
            ]
        })
        .collect();
    if rows.is_empty() {
        eprintln!("no groups");
        return Ok(());
    }
    for line in render_table(&["GROUP", "STATE", "PROTOCOL-TYPE", "MEMBERS"], &rows) {
        emit(format_args!("{line}"))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// describe

/// One partition's position at one instant.
#[derive(Debug, Clone)]
struct PartitionSample {
    committed: Option<i64>,
    low: i64,
    high: i64,
    /// Age in seconds of the first unread record; `None` when it could not be read.
    lag_secs: Option<f64>,
}

impl PartitionSample {
    fn lag(&self) -> i64 {
        partition_lag(self.committed, self.low, self.high)
    }
}

/// Records not yet consumed: log end − committed, or the whole partition without a commit.
fn partition_lag(committed: Option<i64>, low: i64, high: i64) -> i64 {
    match committed {
        Some(c) => (high - c).max(0),
        None => (high - low).max(0),
    }
}

type Tp = (String, i32);

fn describe(args: DescribeArgs) -> anyhow::Result<()> {
    let conn = &args.conn;
    let group = &args.group;
    let consumer = group_consumer(conn, group)?;
    let Some(snapshot) = describe_group(conn, &consumer, group)? else {
        bail!("group `{group}` does not exist");
    };

    // Partitions assigned to each member, decoded from the consumer protocol.
    let mut owners: BTreeMap<Tp, String> = BTreeMap::new();
    let mut member_rows = Vec::new();
    for m in &snapshot.members {
        let assignment = match m.assignment.as_deref() {
            None | Some([]) => "-".to_string(),
            Some(bytes) if snapshot.protocol_type == "consumer" => match decode_assignment(bytes) {
                Ok(a) => {
                    for (topic, partitions) in &a.partitions {
                        for p in partitions {
                            owners.insert((topic.clone(), *p), m.id.clone());
                        }
                    }
                    a.to_string()
                }
                Err(e) => format!("<undecodable: {e}>"),
            },
            Some(bytes) => format!("<{} bytes>", bytes.len()),
        };
        member_rows.push(vec![
            m.id.clone(),
            or_dash(&m.client_id).to_string(),
            or_dash(&m.host).to_string(),
            assignment,
        ]);
    }

    // Offsets committed for any partition of any topic, plus every assigned partition.
    let candidates = candidate_partitions(conn, &consumer, &owners)?;
    let first = sample(conn, &consumer, group, &candidates, args.watch.is_none())?;
    let partitions: Vec<Tp> = first
        .iter()
        .filter(|(tp, s)| s.committed.is_some() || owners.contains_key(*tp))
        .map(|(tp, _)| tp.clone())
        .collect();

    if snapshot.state == "Dead" && snapshot.members.is_empty() && partitions.is_empty() {
        bail!("group `{group}` does not exist");
    }

    let (samples, trends) = match args.watch {
        None => (first, None),
        Some(secs) => {
            eprintln!("sampling again in {secs} s...");
            let started = Instant::now();
            std::thread::sleep(Duration::from_secs(secs));
            let second = sample(conn, &consumer, group, &partitions, true)?;
            let elapsed = started.elapsed().as_secs_f64();
            let trends: BTreeMap<Tp, f64> = partitions
                .iter()
                .filter_map(|tp| {
                    let (a, b) = (first.get(tp)?, second.get(tp)?);
                    Some((tp.clone(), lag_trend(a.lag(), b.lag(), elapsed)))
                })
                .collect();
            (second, Some(trends))
        }
    };

    emit(format_args!(
        "group={group} state={} protocol_type={} protocol={} members={}",
        or_dash(&snapshot.state),
        or_dash(&snapshot.protocol_type),
        or_dash(&snapshot.protocol),
        snapshot.members.len()
    ))?;
    if !member_rows.is_empty() {
        emit(format_args!(""))?;
        for line in render_table(
            &["MEMBER-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"],
            &member_rows,
        ) {
            emit(format_args!("{line}"))?;
        }
    }
    if partitions.is_empty() {
        emit(format_args!(""))?;
        emit(format_args!(
            "no committed offsets and no assigned partitions"
        ))?;
        return Ok(());
    }

    let mut headers = vec![
        "TOPIC",
        "PARTITION",
        "COMMITTED",
        "LOG-END",
        "LAG",
        "LAG-SECONDS",
    ];
    if trends.is_some() {
        headers.extend(["TREND(rec/s)", "STATUS"]);
    }
    headers.push("OWNER");
    let mut rows = Vec::new();
    for tp in &partitions {
        let Some(s) = samples.get(tp) else { continue };
        let mut row = vec![
            tp.0.clone(),
            tp.1.to_string(),
            s.committed.map_or("-".to_string(), |c| c.to_string()),
            s.high.to_string(),
            s.lag().to_string(),
            s.lag_secs.map_or("?".to_string(), |l| format!("{l:.1}")),
        ];
        if let Some(trends) = &trends {
            match trends.get(tp) {
                Some(&t) => {
                    row.push(format!("{t:+.1}"));
                    row.push(lag_status(s.lag(), t).to_string());
                }
                None => row.extend(["?".to_string(), "?".to_string()]),
            }
        }
        row.push(owners.get(tp).cloned().unwrap_or_else(|| "-".to_string()));
        rows.push(row);
    }
    emit(format_args!(""))?;
    for line in render_table(&headers, &rows) {
        emit(format_args!("{line}"))?;
    }

    // Unread data close to deletion by retention.
    let topics: BTreeSet<&str> = partitions.iter().map(|(t, _)| t.as_str()).collect();
    let retention = match topic_retention(conn, &topics) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("warning: cannot read retention.ms of the topics: {e:#}");
            HashMap::new()
        }
    };
    for tp in &partitions {
        let (Some(s), Some(&retention_ms)) = (samples.get(tp), retention.get(&tp.0)) else {
            continue;
        };
        if let Some(lag_secs) = s.lag_secs {
            if near_retention(lag_secs, retention_ms) {
                emit(format_args!(
                    "WARNING {}-{}: unread for {lag_secs:.1} s, over half of retention.ms={retention_ms}: \
                     data about to be deleted unread",
                    tp.0, tp.1
                ))?;
            }
        }
    }
    Ok(())
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() {
        "-"
    } else {
        s
    }
}

/// Every partition of every non-internal topic, plus assigned partitions (whose topic may
/// be missing from metadata, e.g. deleted).
fn candidate_partitions(
    conn: &ConnectArgs,
    consumer: &BaseConsumer,
    owners: &BTreeMap<Tp, String>,
) -> anyhow::Result<Vec<Tp>> {
    let metadata = fetch_metadata(conn, consumer.client(), None)?;
    let mut all: BTreeSet<Tp> = owners.keys().cloned().collect();
    for t in metadata.topics() {
        if t.error().is_some() || t.name().starts_with("__") {
            continue;
        }
        for p in t.partitions() {
            all.insert((t.name().to_string(), p.id()));
        }
    }
    Ok(all.into_iter().collect())
}

/// Committed offsets and watermarks of `partitions`, and (if `with_lag_secs`) the age of
/// each partition's first unread record.
fn sample(
    conn: &ConnectArgs,
    consumer: &BaseConsumer,
    group: &str,
    partitions: &[Tp],
    with_lag_secs: bool,
) -> anyhow::Result<BTreeMap<Tp, PartitionSample>> {
    let mut out = BTreeMap::new();
    if partitions.is_empty() {
        return Ok(out);
    }
    let committed = committed_offsets(conn, consumer, group, partitions)?;
    let mut unread = Vec::new();
    for tp in partitions {
        let (low, high) = consumer
            .fetch_watermarks(&tp.0, tp.1, conn.request_timeout())
            .map_err(|e| anyhow!("watermarks of {}-{}: {e}", tp.0, tp.1))?;
        let committed = committed.get(tp).copied();
        let start = committed.unwrap_or(low);
        let lag_secs = if start >= high {
            Some(0.0)
        } else {
            unread.push((tp.clone(), start));
            None
        };
        out.insert(
            tp.clone(),
            PartitionSample {
                committed,
                low,
                high,
                lag_secs,
            },
        );
    }
    if with_lag_secs && !unread.is_empty() {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        for (tp, ts) in first_unread_timestamps(conn, &unread)? {
            if let Some(s) = out.get_mut(&tp) {
                s.lag_secs = Some(((now_ms - ts).max(0)) as f64 / 1000.0);
            }
        }
    }
    Ok(out)
}

/// The group's committed offset of each partition that has one.
fn committed_offsets(
    conn: &ConnectArgs,
    consumer: &BaseConsumer,
    group: &str,
    partitions: &[Tp],
) -> anyhow::Result<HashMap<Tp, i64>> {
    let mut tpl = TopicPartitionList::with_capacity(partitions.len());
    for (t, p) in partitions {
        tpl.add_partition(t, *p);
    }
    let answer = consumer
        .committed_offsets(tpl, conn.request_timeout())
        .map_err(|e| anyhow!("fetching committed offsets of group `{group}`: {e}"))?;
    let mut out = HashMap::new();
    for elem in answer.elements() {
        if let Err(e) = elem.error() {
            bail!(
                "committed offset of group `{group}` for {}-{}: {e}",
                elem.topic(),
                elem.partition()
            );
        }
        if let Offset::Offset(o) = elem.offset() {
            out.insert((elem.topic().to_string(), elem.partition()), o);
        }
    }
    Ok(out)
}

/// Timestamps (unix ms) of the record at each given offset, read by a group-less consumer;
/// partitions that yield nothing within the request timeout are left out.
fn first_unread_timestamps(
    conn: &ConnectArgs,
    positions: &[(Tp, i64)],
) -> anyhow::Result<HashMap<Tp, i64>> {
    let reader = reader_consumer(conn)?;
    let mut tpl = TopicPartitionList::with_capacity(positions.len());
    for ((t, p), offset) in positions {
        tpl.add_partition_offset(t, *p, Offset::Offset(*offset))
            .with_context(|| format!("{t}-{p}"))?;
    }
    reader.assign(&tpl).context("assigning partitions")?;
    let mut found = HashMap::new();
    let deadline = Instant::now() + conn.request_timeout();
    while found.len() < positions.len() && Instant::now() < deadline {
        match reader.poll(Duration::from_millis(100)) {
            Some(Ok(msg)) => {
                let tp = (msg.topic().to_string(), msg.partition());
                if found.contains_key(&tp) {
                    continue;
                }
                if let Some(ts) = msg.timestamp().to_millis() {
                    found.insert(tp.clone(), ts);
                    // One record is all we need from this partition.
                    let mut done = TopicPartitionList::new();
                    done.add_partition(&tp.0, tp.1);
                    let _ = reader.pause(&done);
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(e)) => eprintln!("warning: reading first unread record: {e}"),
        }
    }
    for (tp, _) in positions {
        if !found.contains_key(tp) {
            eprintln!(
                "warning: no record read from {}-{} within {} ms; lag seconds unknown",
                tp.0,
                tp.1,
                conn.request_timeout().as_millis()
            );
        }
    }
    Ok(found)
}

/// `retention.ms` of each topic that has a finite one.
fn topic_retention(
    conn: &ConnectArgs,
    topics: &BTreeSet<&str>,
) -> anyhow::Result<HashMap<String, i64>> {
    let admin = admin_client(conn)?;
    let specs: Vec<ResourceSpecifier<'_>> =
        topics.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
    let results = block_on(
        &current_thread_runtime()?,
        conn,
        "describe configs",
        admin.describe_configs(specs.iter(), &admin_options(conn)),
    )??;
    let mut out = HashMap::new();
    for (topic, result) in topics.iter().zip(results) {
        let resource = result.map_err(|code| anyhow!("topic `{topic}`: {code}"))?;
        let retention = resource
            .entries
            .iter()
            .find(|e| e.name == "retention.ms")
            .and_then(|e| e.value.as_deref())
            .and_then(|v| v.parse::<i64>().ok());
        if let Some(ms) = retention.filter(|ms| *ms >= 0) {
            out.insert(topic.to_string(), ms);
        }
    }
    Ok(out)
}

/// Whether data unread for `lag_secs` has outlived half of `retention_ms` (negative: none).
fn near_retention(lag_secs: f64, retention_ms: i64) -> bool {
    retention_ms >= 0 && lag_secs * 1000.0 > retention_ms as f64 / 2.0
}

/// Change of lag in records per second between two samples `secs` apart.
fn lag_trend(lag_before: i64, lag_after: i64, secs: f64) -> f64 {
    if secs <= 0.0 {
        0.0
    } else {
        (lag_after - lag_before) as f64 / secs
    }
}

/// Seconds until a lag shrinking at `trend` (records/s, negative) reaches zero.
fn drain_secs(lag: i64, trend: f64) -> Option<f64> {
    if trend < 0.0 && lag > 0 {
        Some(lag as f64 / -trend)
    } else {
        None
    }
}

/// Human reading of a lag and its trend.
fn lag_status(lag: i64, trend: f64) -> String {
    if trend > 0.0 {
        "falling behind".to_string()
    } else if let Some(secs) = drain_secs(lag, trend) {
        format!("draining, caught up in ~{}", format_duration(secs))
    } else if lag == 0 {
        "caught up".to_string()
    } else {
        "stalled".to_string()
    }
}

/// `45s`, `12m05s`, `3h02m`, `2d04h`.
fn format_duration(secs: f64) -> String {
    let s = secs.round().max(0.0) as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

// ---------------------------------------------------------------------------------------
// Consumer protocol assignment

/// A decoded ConsumerProtocolAssignment (versions 0-3 share this layout).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Assignment {
    version: i16,
    pub(crate) partitions: Vec<(String, Vec<i32>)>,
    user_data: Option<Vec<u8>>,
}

impl std::fmt::Display for Assignment {
    /// `t1:0,1 t2:3`, or `-` for none.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .partitions
            .iter()
            .map(|(t, ps)| {
                let ids: Vec<String> = ps.iter().map(i32::to_string).collect();
                format!("{t}:{}", ids.join(","))
            })
            .collect();
        if parts.is_empty() {
            f.write_str("-")
        } else {
            f.write_str(&parts.join(" "))
        }
    }
}

/// Decodes a member's ConsumerProtocolAssignment with the codec's own type: the version, then
/// the body at that version (versions after 3 keep its layout in front, and what follows is
/// ignored). An encoder that leaves the trailing user data out entirely (older clients) is
/// read as null user data.
pub(crate) fn decode_assignment(bytes: &[u8]) -> Result<Assignment, String> {
    let (head, body) = bytes
        .split_first_chunk::<2>()
        .ok_or_else(|| format!("truncated version ({} bytes)", bytes.len()))?;
    let version = i16::from_be_bytes(*head);
    if version < 0 {
        return Err(format!("invalid version {version}"));
    }
    let at = version.min(ConsumerProtocolAssignment::VERSIONS.max);
    let decoded = match ConsumerProtocolAssignment::decode(&mut &body[..], at) {
        Ok(a) => a,
        Err(e) => {
            // Without the user data's length, the body decodes with a null one appended; a
            // body cut anywhere else does not decode, or reads the appended bytes as data.
            let mut padded = body.to_vec();
            padded.extend_from_slice(&(-1i32).to_be_bytes());
            match ConsumerProtocolAssignment::decode(&mut &padded[..], at) {
                Ok(a) if a.user_data.is_none() => a,
                _ => return Err(e.to_string()),
            }
        }
    };
    Ok(Assignment {
        version,
        partitions: decoded
            .assigned_partitions
            .into_iter()
            .map(|tp| (tp.topic.0.to_string(), tp.partitions))
            .collect(),
        user_data: decoded.user_data.map(|b| b.to_vec()),
    })
}

// ---------------------------------------------------------------------------------------
// Table

/// Rows aligned under `headers`, columns separated by two spaces (the last not padded).
fn render_table(headers: &[&str], rows: &[Vec<String>]) -> Vec<String> {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let cells: Vec<&str> = cells.collect();
        let last = cells.len().saturating_sub(1);
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            s.push_str(cell);
            if i < last {
                let width = widths.get(i).copied().unwrap_or(0);
                let pad = width.saturating_sub(cell.chars().count());
                s.push_str(&" ".repeat(pad + 2));
            }
        }
        s
    };
    let mut out = vec![line(&mut headers.iter().copied())];
    for row in rows {
        out.push(line(&mut row.iter().map(String::as_str)));
    }
    out
}

// ---------------------------------------------------------------------------------------
// delete

fn delete(args: DeleteArgs) -> anyhow::Result<()> {
    let conn = &args.conn;
    let admin = admin_client(conn)?;
    let names: Vec<&str> = args.groups.iter().map(String::as_str).collect();
    let results = block_on(
        &current_thread_runtime()?,
        conn,
        "delete groups",
        admin.delete_groups(&names, &admin_options(conn)),
    )?
    .context("deleting groups")?;
    let mut failed = 0;
    for result in &results {
        match result {
            Ok(name) => emit(format_args!("deleted group {name}"))?,
            Err((name, code)) => {
                failed += 1;
                eprintln!("cannot delete group `{name}`: {}", delete_error(*code));
            }
        }
    }
    if failed > 0 {
        bail!("{failed} of {} group(s) not deleted", results.len());
    }
    Ok(())
}

fn delete_error(code: RDKafkaErrorCode) -> String {
    match code {
        RDKafkaErrorCode::NonEmptyGroup => "group has active members; stop them first".to_string(),
        RDKafkaErrorCode::GroupIdNotFound => "no such group".to_string(),
        other => other.to_string(),
    }
}

// ---------------------------------------------------------------------------------------
// reset-offsets

/// Where `reset-offsets` moves the committed offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ResetTarget {
    Earliest,
    Latest,
    Timestamp(i64),
    Offset(i64),
}

impl ResetTarget {
    fn from_args(args: &ResetArgs) -> anyhow::Result<ResetTarget> {
        Ok(
            match (
                args.to_earliest,
                args.to_latest,
                args.to_timestamp,
                args.to_offset,
            ) {
                (true, false, None, None) => ResetTarget::Earliest,
                (false, true, None, None) => ResetTarget::Latest,
                (false, false, Some(ts), None) => {
                    if ts < 0 {
                        bail!("--to-timestamp must be >= 0");
                    }
                    ResetTarget::Timestamp(ts)
                }
                (false, false, None, Some(o)) => {
                    if o < 0 {
                        bail!("--to-offset must be >= 0");
                    }
                    ResetTarget::Offset(o)
                }
                _ => bail!(
                    "give exactly one of --to-earliest, --to-latest, --to-timestamp, --to-offset"
                ),
            },
        )
    }
}

/// The new offset of a partition with watermarks `[low, high]`; `by_time` is the offset
/// a timestamp resolved to (`None`: no record at or after it).
fn reset_offset(target: ResetTarget, low: i64, high: i64, by_time: Option<i64>) -> i64 {
    match target {
        ResetTarget::Earliest => low,
        ResetTarget::Latest => high,
        ResetTarget::Timestamp(_) => by_time.map_or(high, |o| o.clamp(low, high)),
        ResetTarget::Offset(o) => o.clamp(low, high),
    }
}

fn is_membership_error(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::UnknownMemberId
            | RDKafkaErrorCode::IllegalGeneration
            | RDKafkaErrorCode::RebalanceInProgress
    )
}

fn reset_offsets(args: ResetArgs) -> anyhow::Result<()> {
    let conn = &args.conn;
    let group = &args.group;
    let target = ResetTarget::from_args(&args)?;
    let consumer = group_consumer(conn, group)?;

    match describe_group(conn, &consumer, group)? {
        Some(snapshot) if !snapshot.members.is_empty() => {
            return Err(active_members_error(group));
        }
        Some(_) => {}
        None => eprintln!("note: group {group} does not exist yet; committing creates it"),
    }

    let all = topic_partitions(conn, consumer.client(), &args.topic)?;
    let chosen = match args.partition {
        Some(p) => {
            check_partition(&args.topic, &all, p)?;
            vec![p]
        }
        None => all,
    };
    let tps: Vec<Tp> = chosen.iter().map(|p| (args.topic.clone(), *p)).collect();
    let old = committed_offsets(conn, &consumer, group, &tps)?;

    let by_time: HashMap<i32, i64> = match target {
        ResetTarget::Timestamp(ts) => {
            let mut tpl = TopicPartitionList::with_capacity(chosen.len());
            for p in &chosen {
                tpl.add_partition_offset(&args.topic, *p, Offset::Offset(ts))
                    .with_context(|| format!("partition {p}"))?;
            }
            let resolved = consumer
                .offsets_for_times(tpl, conn.request_timeout())
                .map_err(|e| anyhow!("resolving --to-timestamp to offsets: {e}"))?;
            let mut out = HashMap::new();
            for elem in resolved.elements() {
                if let Err(e) = elem.error() {
                    bail!(
                        "resolving --to-timestamp for partition {}: {e}",
                        elem.partition()
                    );
                }
                if let Offset::Offset(o) = elem.offset() {
                    out.insert(elem.partition(), o);
                }
            }
            out
        }
        _ => HashMap::new(),
    };

    let mut tpl = TopicPartitionList::with_capacity(chosen.len());
    let mut rows = Vec::new();
    for (t, p) in &tps {
        let (low, high) = consumer
            .fetch_watermarks(t, *p, conn.request_timeout())
            .map_err(|e| anyhow!("watermarks of {t}-{p}: {e}"))?;
        let new = reset_offset(target, low, high, by_time.get(p).copied());
        if let ResetTarget::Offset(o) = target {
            if o != new {
                eprintln!("note: {t}-{p}: offset {o} outside [{low}, {high}], using {new}");
            }
        }
        tpl.add_partition_offset(t, *p, Offset::Offset(new))
            .with_context(|| format!("{t}-{p}"))?;
        rows.push(vec![
            t.clone(),
            p.to_string(),
            old.get(&(t.clone(), *p))
                .map_or("-".to_string(), |o| o.to_string()),
            new.to_string(),
        ]);
    }
    for line in render_table(&["TOPIC", "PARTITION", "OLD", "NEW"], &rows) {
        emit(format_args!("{line}"))?;
    }
    if args.dry_run {
        emit(format_args!("dry run: nothing committed"))?;
        return Ok(());
    }

    if let Err(e) = consumer.commit(&tpl, CommitMode::Sync) {
        if e.rdkafka_error_code().is_some_and(is_membership_error) {
            return Err(active_members_error(group));
        }
        bail!("committing offsets for group `{group}`: {e}");
    }
    // Confirm: a partition-level refusal does not always surface as the commit's error.
    let now = committed_offsets(conn, &consumer, group, &tps)?;
    for elem in tpl.elements() {
        let tp = (elem.topic().to_string(), elem.partition());
        let want = elem.offset().to_raw();
        if now.get(&tp).copied() != want {
            bail!(
                "offset of {}-{} for group `{group}` is {:?} after commit, expected {:?}",
                tp.0,
                tp.1,
                now.get(&tp),
                want
            );
        }
    }
    emit(format_args!(
        "committed {} offset(s) for group {group}",
        tpl.count()
    ))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(version: i16, topics: &[(&str, &[i32])], user_data: Option<&[u8]>) -> Vec<u8> {
        let mut b = version.to_be_bytes().to_vec();
        b.extend((topics.len() as i32).to_be_bytes());
        for (t, ps) in topics {
            b.extend((t.len() as i16).to_be_bytes());
            b.extend(t.as_bytes());
            b.extend((ps.len() as i32).to_be_bytes());
            for p in *ps {
                b.extend(p.to_be_bytes());
            }
        }
        match user_data {
            Some(u) => {
                b.extend((u.len() as i32).to_be_bytes());
                b.extend(u);
            }
            None => b.extend((-1i32).to_be_bytes()),
        }
        b
    }

    #[test]
    fn decodes_valid_assignments() {
        for version in 0..=3 {
            let bytes = encode(version, &[("orders", &[0, 2]), ("t", &[1])], Some(b"ud"));
            let a = decode_assignment(&bytes).unwrap();
            assert_eq!(a.version, version);
            assert_eq!(
                a.partitions,
                vec![
                    ("orders".to_string(), vec![0, 2]),
                    ("t".to_string(), vec![1])
                ]
            );
            assert_eq!(a.user_data.as_deref(), Some(&b"ud"[..]));
            assert_eq!(a.to_string(), "orders:0,2 t:1");
        }
        // Null user data, and user data left out entirely.
        let bytes = encode(1, &[("x", &[])], None);
        assert_eq!(decode_assignment(&bytes).unwrap().user_data, None);
        let without = &bytes[..bytes.len() - 4];
        let a = decode_assignment(without).unwrap();
        assert_eq!(a.partitions, vec![("x".to_string(), vec![])]);
        assert_eq!(a.user_data, None);
        // Empty assignment.
        let a = decode_assignment(&encode(0, &[], None)).unwrap();
        assert!(a.partitions.is_empty());
        assert_eq!(a.to_string(), "-");
    }

    #[test]
    fn rejects_every_truncation() {
        let bytes = encode(0, &[("orders", &[0, 2])], Some(b"userdata"));
        // Cutting anywhere except exactly before the user data must fail.
        let user_data_at = bytes.len() - 4 - 8;
        for cut in 0..bytes.len() {
            let r = decode_assignment(&bytes[..cut]);
            if cut == user_data_at {
                assert!(r.is_ok(), "cut at {cut}");
            } else {
                assert!(r.is_err(), "cut at {cut} decoded as {r:?}");
            }
        }
    }

    #[test]
    fn rejects_garbage_without_panicking_or_huge_allocations() {
        // Enormous counts.
        assert!(decode_assignment(&[0, 0, 0x7f, 0xff, 0xff, 0xff]).is_err());
        let mut b = encode(0, &[("t", &[])], None);
        b.truncate(2 + 4 + 2 + 1);
        b.extend(i32::MAX.to_be_bytes());
        assert!(decode_assignment(&b).is_err());
        // Negative counts and lengths, negative version, bad UTF-8.
        assert!(decode_assignment(&[0, 0, 0xff, 0xff, 0xff, 0xfe]).is_err());
        assert!(decode_assignment(&[0, 0, 0, 0, 0, 1, 0xff, 0xff]).is_err());
        assert!(decode_assignment(&[0xff, 0xff, 0, 0, 0, 0]).is_err());
        assert!(decode_assignment(&[0, 0, 0, 0, 0, 1, 0, 1, 0xc3, 0, 0, 0, 0]).is_err());
        assert!(decode_assignment(&[]).is_err());
        // Deterministic pseudo-random bytes: never a panic.
        let mut x: u32 = 0x1234_5678;
        for len in 0..200 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            let _ = decode_assignment(&bytes);
        }
    }

    #[test]
    fn lag_math() {
        assert_eq!(partition_lag(Some(40), 0, 100), 60);
        assert_eq!(partition_lag(None, 10, 100), 90);
        assert_eq!(partition_lag(Some(120), 0, 100), 0);
        assert_eq!(lag_trend(100, 160, 2.0), 30.0);
        assert_eq!(lag_trend(100, 40, 3.0), -20.0);
        assert_eq!(lag_trend(100, 40, 0.0), 0.0);
        assert_eq!(drain_secs(40, -20.0), Some(2.0));
        assert_eq!(drain_secs(40, 0.0), None);
        assert_eq!(drain_secs(40, 5.0), None);
        assert_eq!(drain_secs(0, -5.0), None);
        assert_eq!(lag_status(10, 1.5), "falling behind");
        assert_eq!(lag_status(600, -2.0), "draining, caught up in ~5m00s");
        assert_eq!(lag_status(0, 0.0), "caught up");
        assert_eq!(lag_status(5, 0.0), "stalled");
    }

    #[test]
    fn durations_and_retention() {
        assert_eq!(format_duration(0.4), "0s");
        assert_eq!(format_duration(59.4), "59s");
        assert_eq!(format_duration(725.0), "12m05s");
        assert_eq!(format_duration(3.0 * 3600.0 + 120.0), "3h02m");
        assert_eq!(format_duration(2.0 * 86_400.0 + 4.0 * 3600.0), "2d04h");
        assert!(near_retention(31.0, 60_000));
        assert!(!near_retention(30.0, 60_000));
        assert!(!near_retention(1e9, -1));
    }

    #[test]
    fn reset_offset_targets() {
        assert_eq!(reset_offset(ResetTarget::Earliest, 5, 50, None), 5);
        assert_eq!(reset_offset(ResetTarget::Latest, 5, 50, None), 50);
        assert_eq!(reset_offset(ResetTarget::Offset(20), 5, 50, None), 20);
        assert_eq!(reset_offset(ResetTarget::Offset(2), 5, 50, None), 5);
        assert_eq!(reset_offset(ResetTarget::Offset(99), 5, 50, None), 50);
        assert_eq!(reset_offset(ResetTarget::Timestamp(1), 5, 50, Some(7)), 7);
        assert_eq!(reset_offset(ResetTarget::Timestamp(1), 5, 50, None), 50);
    }

    #[test]
    fn tables_align() {
        let rows = vec![
            vec!["orders".to_string(), "0".to_string(), "x".to_string()],
            vec!["t".to_string(), "12".to_string(), "yy".to_string()],
        ];
        assert_eq!(
            render_table(&["TOPIC", "P", "Z"], &rows),
            vec!["TOPIC   P   Z", "orders  0   x", "t       12  yy"]
        );
    }

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        command: GroupCommand,
    }

    fn parse(args: &[&str]) -> Result<GroupCommand, clap::Error> {
        use clap::Parser as _;
        Cli::try_parse_from(std::iter::once("group").chain(args.iter().copied())).map(|c| c.command)
    }

    fn reset(args: &[&str]) -> Result<ResetArgs, clap::Error> {
        let mut all = vec!["reset-offsets", "g", "--topic", "t"];
        all.extend(args);
        match parse(&all)? {
            GroupCommand::ResetOffsets(a) => Ok(a),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn reset_needs_exactly_one_target() {
        assert!(reset(&[]).is_err());
        assert!(reset(&["--to-earliest", "--to-latest"]).is_err());
        assert!(reset(&["--to-offset", "3", "--to-timestamp", "5"]).is_err());
        let a = reset(&["--to-offset", "3", "--partition", "1", "--dry-run"]).unwrap();
        assert_eq!(ResetTarget::from_args(&a).unwrap(), ResetTarget::Offset(3));
        assert_eq!(a.partition, Some(1));
        assert!(a.dry_run);
        let a = reset(&["--to-earliest"]).unwrap();
        assert_eq!(ResetTarget::from_args(&a).unwrap(), ResetTarget::Earliest);
        let a = reset(&["--to-timestamp", "1700000000000"]).unwrap();
        assert_eq!(
            ResetTarget::from_args(&a).unwrap(),
            ResetTarget::Timestamp(1_700_000_000_000)
        );
        let a = reset(&["--to-offset=-1"]).unwrap();
        assert!(ResetTarget::from_args(&a).is_err());
        assert!(
            parse(&["reset-offsets", "g", "--to-latest"]).is_err(),
            "topic required"
        );
    }

    #[test]
    fn describe_and_delete_arguments() {
        assert!(parse(&["describe", "g", "--watch", "0"]).is_err());
        let GroupCommand::Describe(a) = parse(&["describe", "g", "--watch", "5"]).unwrap() else {
            panic!()
        };
        assert_eq!(a.watch, Some(5));
        assert!(parse(&["describe"]).is_err());
        assert!(parse(&["delete"]).is_err());
        let GroupCommand::Delete(a) = parse(&["delete", "a", "b"]).unwrap() else {
            panic!()
        };
        assert_eq!(a.groups, vec!["a", "b"]);
    }

    #[test]
    fn membership_errors_are_recognised() {
        assert!(is_membership_error(RDKafkaErrorCode::UnknownMemberId));
        assert!(is_membership_error(RDKafkaErrorCode::IllegalGeneration));
        assert!(is_membership_error(RDKafkaErrorCode::RebalanceInProgress));
        assert!(!is_membership_error(RDKafkaErrorCode::NotCoordinator));
        assert_eq!(
            delete_error(RDKafkaErrorCode::NonEmptyGroup),
            "group has active members; stop them first"
        );
    }
}
