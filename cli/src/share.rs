//! `strata share list|describe|reset-offsets|delete|dlq replay`: share groups (KIP-932) and
//! their dead-letter topics (KIP-1191), with Kafka's admin APIs spoken with the broker's own
//! client framing (librdkafka offers none of them) and librdkafka for reading and writing
//! records.
//!
//! - `list` — every share group of every coordinator (ListGroups, type `share`);
//! - `describe GROUP` — its members and assignments (ShareGroupDescribe), and per partition
//!   the share-partition start offset (DescribeShareGroupOffsets), the log end and the lag
//!   between them;
//! - `reset-offsets GROUP --topic T --to-earliest|--to-latest|--to-offset N|--to-datetime MS`
//!   — where the group reads from (AlterShareGroupOffsets; the group must have no members);
//!   shows the plan, applies it with `--execute`, as `kafka-share-groups.sh` does;
//! - `delete GROUP [--topic T]` — the group (DeleteGroups), or its state of a topic
//!   (DeleteShareGroupOffsets);
//! - `dlq replay --topic DLQ` — re-publishes dead-letter records to the partition they came
//!   from (their `__dlq.errors.topic` and `.partition` headers), with the source record's key,
//!   value and headers (those written with `errors.deadletterqueue.copy.record.enable`);
//!   records without a copy are counted and skipped. Shows what it would do unless `--execute`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use clap::{Args, Subcommand};
use kafka_protocol::messages::alter_share_group_offsets_request::{
    AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
};
use kafka_protocol::messages::delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic;
use kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, DeleteGroupsRequest, DeleteShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequest, GroupId, ListGroupsRequest, ShareGroupDescribeRequest,
    TopicName,
};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use strata_broker::protocol::client::Client;

use crate::cluster;
use crate::cluster::kafka::{self, str_bytes};
use crate::common::{emit, ConnectArgs};

#[derive(Subcommand, Debug)]
pub enum ShareCommand {
    /// List share groups with their state.
    List(ListArgs),
    /// Show a share group's members and, per partition, its start offset and lag.
    Describe(GroupArgs),
    /// Set where a share group reads a topic from (the group must have no members).
    ResetOffsets(ResetArgs),
    /// Delete a share group, or its state of one topic.
    Delete(DeleteArgs),
    /// Dead-letter topics.
    #[command(subcommand)]
    Dlq(DlqCommand),
}

#[derive(Subcommand, Debug)]
pub enum DlqCommand {
    /// Re-publish dead-letter records to the partitions they came from.
    Replay(ReplayArgs),
}

impl ShareCommand {
    pub fn conn(&self) -> &ConnectArgs {
        match self {
            ShareCommand::List(a) => &a.conn,
            ShareCommand::Describe(a) => &a.conn,
            ShareCommand::ResetOffsets(a) => &a.conn,
            ShareCommand::Delete(a) => &a.conn,
            ShareCommand::Dlq(DlqCommand::Replay(a)) => &a.conn,
        }
    }
}

#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args, Debug)]
pub struct GroupArgs {
    /// The share group.
    pub group: String,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args, Debug)]
#[group(id = "to", required = true, multiple = false)]
pub struct ResetTo {
    /// The first record each partition has.
    #[arg(long, group = "to")]
    pub to_earliest: bool,
    /// The log end: only records produced from now on.
    #[arg(long, group = "to")]
    pub to_latest: bool,
    /// This offset in every partition named.
    #[arg(long, group = "to", value_name = "OFFSET")]
    pub to_offset: Option<i64>,
    /// The first record at or after this time (ms since the epoch).
    #[arg(long, group = "to", value_name = "MS")]
    pub to_datetime: Option<i64>,
}

#[derive(Args, Debug)]
pub struct ResetArgs {
    /// The share group.
    pub group: String,
    /// The topic whose partitions are reset.
    #[arg(long)]
    pub topic: String,
    /// Only this partition (repeatable; default: every partition).
    #[arg(long = "partition")]
    pub partitions: Vec<i32>,
    #[command(flatten)]
    pub to: ResetTo,
    /// Apply the plan (without it, only show it).
    #[arg(long)]
    pub execute: bool,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args, Debug)]
pub struct DeleteArgs {
    /// The share group.
    pub group: String,
    /// Only the group's state of this topic (repeatable).
    #[arg(long = "topic")]
    pub topics: Vec<String>,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The dead-letter topic to read.
    #[arg(long)]
    pub topic: String,
    /// Only dead letters of this share group.
    #[arg(long)]
    pub group: Option<String>,
    /// At most this many records.
    #[arg(long)]
    pub max: Option<u64>,
    /// Re-publish (without it, only count what would be).
    #[arg(long)]
    pub execute: bool,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

pub fn run(cmd: ShareCommand) -> anyhow::Result<()> {
    match cmd {
        ShareCommand::List(a) => cluster::block(list(a)),
        ShareCommand::Describe(a) => cluster::block(describe(a)),
        ShareCommand::ResetOffsets(a) => cluster::block(reset(a)),
        ShareCommand::Delete(a) => cluster::block(delete(a)),
        ShareCommand::Dlq(DlqCommand::Replay(a)) => replay(a),
    }
}

async fn list(a: ListArgs) -> anyhow::Result<()> {
    let mut c = kafka::connect(&a.conn).await?;
    let view = kafka::cluster(&mut c).await?;
    let mut pool = kafka::Pool::like(&c);
    let mut groups = BTreeMap::new();
    let req = ListGroupsRequest::default().with_types_filter(vec![str_bytes("share")]);
    for b in &view.brokers {
        let client = pool.get(&view, b.id).await?;
        let resp = client.call(5, &req).await.context("ListGroups")?;
        if resp.error_code != 0 {
            bail!("ListGroups at broker {}: error {}", b.id, resp.error_code);
        }
        for g in resp.groups {
            groups.insert(g.group_id.0.to_string(), g.group_state.to_string());
        }
    }
    for (group, state) in &groups {
        emit(format_args!("group={group} state={state}"))?;
    }
    eprintln!("share list: {} share groups", groups.len());
    Ok(())
}

/// A connection to share group `group`'s coordinator.
async fn coordinator(conn: &ConnectArgs, group: &str) -> anyhow::Result<Client> {
    Ok(kafka::coordinator(conn, group, 0).await?.1)
}

/// An error code with its message, or `Ok`.
fn check(what: &str, code: i16, message: Option<&str>) -> anyhow::Result<()> {
    match code {
        0 => Ok(()),
        _ => bail!(
            "{what}: error {code}{}",
            message.map(|m| format!(" ({m})")).unwrap_or_default()
        ),
    }
}

/// The group's start offset of every partition it has state for: (topic, partition) →
/// start (-1: none).
async fn start_offsets(
    c: &mut Client,
    group: &str,
) -> anyhow::Result<BTreeMap<(String, i32), i64>> {
    let req = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        DescribeShareGroupOffsetsRequestGroup::default()
            .with_group_id(GroupId(str_bytes(group)))
            .with_topics(None),
    ]);
    let resp = c.call(0, &req).await.context("DescribeShareGroupOffsets")?;
    let mut out = BTreeMap::new();
    for g in resp.groups {
        check(
            "DescribeShareGroupOffsets",
            g.error_code,
            g.error_message.as_deref(),
        )?;
        for t in g.topics {
            for p in t.partitions {
                check(
                    "DescribeShareGroupOffsets",
                    p.error_code,
                    p.error_message.as_deref(),
                )?;
                out.insert(
                    (t.topic_name.0.to_string(), p.partition_index),
                    p.start_offset,
                );
            }
        }
    }
    Ok(out)
}

async fn describe(a: GroupArgs) -> anyhow::Result<()> {
    let mut c = coordinator(&a.conn, &a.group).await?;
    let req =
        ShareGroupDescribeRequest::default().with_group_ids(vec![GroupId(str_bytes(&a.group))]);
    let resp = c.call(1, &req).await.context("ShareGroupDescribe")?;
    for g in &resp.groups {
        check(
            "ShareGroupDescribe",
            g.error_code,
            g.error_message.as_deref(),
        )?;
        emit(format_args!(
            "group={} state={} epoch={} members={}",
            g.group_id.0.as_str(),
            g.group_state.as_str(),
            g.group_epoch,
            g.members.len()
        ))?;
        for m in &g.members {
            let assigned: Vec<String> = (m.assignment.topic_partitions.iter())
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .map(move |p| format!("{}-{p}", t.topic_name.0.as_str()))
                })
                .collect();
            emit(format_args!(
                "member={} client_id={} host={} assigned={}",
                m.member_id.as_str(),
                m.client_id.as_str(),
                m.client_host.as_str(),
                if assigned.is_empty() {
                    "-".into()
                } else {
                    assigned.join(",")
                }
            ))?;
        }
    }
    let starts = start_offsets(&mut c, &a.group).await?;
    let consumer = plain_consumer(&a.conn)?;
    let timeout = a.conn.request_timeout();
    for ((topic, p), start) in &starts {
        let (low, high) = consumer
            .fetch_watermarks(topic, *p, timeout)
            .with_context(|| format!("watermarks of {topic}-{p}"))?;
        // Records the group has yet to finish: from its start (or the log start, without
        // state) to the log end.
        let from = if *start < 0 { high } else { (*start).max(low) };
        emit(format_args!(
            "topic={topic} partition={p} start_offset={} log_end={high} lag={}",
            if *start < 0 {
                "-".to_string()
            } else {
                start.to_string()
            },
            (high - from).max(0)
        ))?;
    }
    Ok(())
}

/// A consumer that joins nothing.
fn plain_consumer(conn: &ConnectArgs) -> anyhow::Result<BaseConsumer> {
    conn.client_config(&[("allow.auto.create.topics", "false")])
        .create()
        .context("creating consumer")
}

/// The offsets a reset sets, per partition.
fn plan(a: &ResetArgs) -> anyhow::Result<Vec<(i32, i64)>> {
    let consumer = plain_consumer(&a.conn)?;
    let timeout = a.conn.request_timeout();
    let md = consumer
        .fetch_metadata(Some(&a.topic), timeout)
        .context("metadata")?;
    let t = (md.topics().first())
        .filter(|t| t.error().is_none())
        .ok_or_else(|| anyhow!("unknown topic {}", a.topic))?;
    let count = t.partitions().len() as i32;
    let partitions: Vec<i32> = match a.partitions.is_empty() {
        true => (0..count).collect(),
        false => a.partitions.clone(),
    };
    if let Some(p) = partitions.iter().find(|p| !(0..count).contains(*p)) {
        bail!("{} has no partition {p}", a.topic);
    }
    let mut out = Vec::new();
    for p in partitions {
        let (low, high) = consumer.fetch_watermarks(&a.topic, p, timeout)?;
        let offset = if a.to.to_earliest {
            low
        } else if a.to.to_latest {
            high
        } else if let Some(o) = a.to.to_offset {
            o.clamp(low, high)
        } else if let Some(ms) = a.to.to_datetime {
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(&a.topic, p, Offset::Offset(ms))?;
            let found = consumer.offsets_for_times(tpl, timeout)?;
            match found.find_partition(&a.topic, p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => o,
                _ => high,
            }
        } else {
            bail!("say where to: --to-earliest, --to-latest, --to-offset or --to-datetime");
        };
        out.push((p, offset));
    }
    Ok(out)
}

async fn reset(a: ResetArgs) -> anyhow::Result<()> {
    let plan = plan(&a)?;
    for (p, offset) in &plan {
        emit(format_args!(
            "group={} topic={} partition={p} new_start_offset={offset}",
            a.group, a.topic
        ))?;
    }
    if !a.execute {
        eprintln!("share reset-offsets: a plan only; --execute applies it");
        return Ok(());
    }
    let mut c = coordinator(&a.conn, &a.group).await?;
    let req = AlterShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(str_bytes(&a.group)))
        .with_topics(vec![AlterShareGroupOffsetsRequestTopic::default()
            .with_topic_name(TopicName(str_bytes(&a.topic)))
            .with_partitions(
                (plan.iter())
                    .map(|(p, o)| {
                        AlterShareGroupOffsetsRequestPartition::default()
                            .with_partition_index(*p)
                            .with_start_offset(*o)
                    })
                    .collect(),
            )]);
    let resp = c.call(0, &req).await.context("AlterShareGroupOffsets")?;
    check(
        "AlterShareGroupOffsets",
        resp.error_code,
        resp.error_message.as_deref(),
    )?;
    for t in &resp.responses {
        for p in &t.partitions {
            check(
                &format!("{}-{}", t.topic_name.0.as_str(), p.partition_index),
                p.error_code,
                p.error_message.as_deref(),
            )?;
        }
    }
    eprintln!("share reset-offsets: {} partitions reset", plan.len());
    Ok(())
}

async fn delete(a: DeleteArgs) -> anyhow::Result<()> {
    let mut c = coordinator(&a.conn, &a.group).await?;
    if a.topics.is_empty() {
        let req =
            DeleteGroupsRequest::default().with_groups_names(vec![GroupId(str_bytes(&a.group))]);
        let resp = c.call(2, &req).await.context("DeleteGroups")?;
        for r in &resp.results {
            check("DeleteGroups", r.error_code, None)?;
        }
        eprintln!("share delete: group {} deleted", a.group);
        return Ok(());
    }
    let req = DeleteShareGroupOffsetsRequest::default()
        .with_group_id(GroupId(str_bytes(&a.group)))
        .with_topics(
            (a.topics.iter())
                .map(|t| {
                    DeleteShareGroupOffsetsRequestTopic::default()
                        .with_topic_name(TopicName(str_bytes(t)))
                })
                .collect(),
        );
    let resp = c.call(0, &req).await.context("DeleteShareGroupOffsets")?;
    check(
        "DeleteShareGroupOffsets",
        resp.error_code,
        resp.error_message.as_deref(),
    )?;
    for t in &resp.responses {
        check(
            t.topic_name.0.as_str(),
            t.error_code,
            t.error_message.as_deref(),
        )?;
    }
    eprintln!(
        "share delete: the state of {} topic(s) deleted",
        a.topics.len()
    );
    Ok(())
}

/// Where a dead-letter record came from, and the headers to carry back (the source's, not
/// the `__dlq.errors.*` ones).
struct Origin {
    topic: String,
    partition: i32,
    group: Option<String>,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

fn origin<M: Message>(m: &M) -> Option<Origin> {
    let mut topic = None;
    let mut partition = None;
    let mut group = None;
    let mut headers = Vec::new();
    if let Some(hs) = m.headers() {
        for h in hs.iter() {
            let text = || h.value.map(|v| String::from_utf8_lossy(v).to_string());
            match h.key {
                "__dlq.errors.topic" => topic = text(),
                "__dlq.errors.partition" => partition = text().and_then(|p| p.parse().ok()),
                "__dlq.errors.group" => group = text(),
                k if k.starts_with("__dlq.errors.") => {}
                k => headers.push((k.to_string(), h.value.map(<[u8]>::to_vec))),
            }
        }
    }
    Some(Origin {
        topic: topic?,
        partition: partition?,
        group,
        headers,
    })
}

fn replay(a: ReplayArgs) -> anyhow::Result<()> {
    let timeout = a.conn.request_timeout();
    // librdkafka's assign() needs a group.id; nothing joins or commits to it.
    let consumer: BaseConsumer = (a.conn)
        .client_config(&[
            ("group.id", crate::consume::GROUPLESS_ID),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("allow.auto.create.topics", "false"),
        ])
        .create()
        .context("creating consumer")?;
    let md = consumer
        .fetch_metadata(Some(&a.topic), timeout)
        .context("metadata")?;
    let t = (md.topics().first())
        .filter(|t| t.error().is_none())
        .ok_or_else(|| anyhow!("unknown dead-letter topic {}", a.topic))?;
    // What is there now: the replay ends at each partition's current end.
    let mut ends = BTreeMap::new();
    let mut tpl = TopicPartitionList::new();
    for p in t.partitions() {
        let (low, high) = consumer.fetch_watermarks(&a.topic, p.id(), timeout)?;
        if high > low {
            ends.insert(p.id(), high);
            tpl.add_partition_offset(&a.topic, p.id(), Offset::Offset(low))?;
        }
    }
    consumer.assign(&tpl)?;
    let producer: Option<ThreadedProducer<DefaultProducerContext>> = match a.execute {
        true => Some(
            a.conn
                .client_config(&[("enable.idempotence", "true"), ("acks", "all")])
                .create()
                .context("creating producer")?,
        ),
        false => None,
    };
    let (mut replayed, mut skipped, mut uncopied) = (0u64, 0u64, 0u64);
    let mut progress = Instant::now();
    let started = Instant::now();
    while !ends.is_empty() && a.max.is_none_or(|max| replayed < max) {
        let Some(m) = consumer.poll(Duration::from_millis(500)) else {
            if started.elapsed() > timeout * 4 {
                bail!("no record from {} for too long", a.topic);
            }
            continue;
        };
        let m = m.context("reading the dead-letter topic")?;
        if ends
            .get(&m.partition())
            .is_some_and(|end| m.offset() + 1 >= *end)
        {
            ends.remove(&m.partition());
        }
        let Some(o) = origin(&m) else {
            skipped += 1;
            continue;
        };
        if a.group
            .as_ref()
            .is_some_and(|g| o.group.as_ref() != Some(g))
        {
            skipped += 1;
            continue;
        }
        if m.payload().is_none() && m.key().is_none() {
            // Written without `errors.deadletterqueue.copy.record.enable`: nothing to re-send.
            uncopied += 1;
            continue;
        }
        if let Some(p) = &producer {
            let mut headers = OwnedHeaders::new();
            for (k, v) in &o.headers {
                headers = headers.insert(Header {
                    key: k,
                    value: v.as_deref(),
                });
            }
            let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&o.topic)
                .partition(o.partition)
                .headers(headers);
            if let Some(k) = m.key() {
                record = record.key(k);
            }
            if let Some(v) = m.payload() {
                record = record.payload(v);
            }
            p.send(record)
                .map_err(|(e, _)| anyhow!("producing to {}: {e}", o.topic))?;
        }
        replayed += 1;
        if progress.elapsed() >= Duration::from_secs(2) {
            eprintln!("share dlq replay: {replayed} records so far");
            progress = Instant::now();
        }
    }
    if let Some(p) = &producer {
        p.flush(timeout)
            .context("waiting for the replayed records to be acknowledged")?;
    }
    emit(format_args!(
        "dlq={} replayed={replayed} skipped={skipped} not_copied={uncopied} executed={}",
        a.topic, a.execute
    ))?;
    Ok(())
}
