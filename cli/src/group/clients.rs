//! The librdkafka clients the group commands use, and what DescribeGroups says of a group.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context as _};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::groups::GroupInfo;
use rdkafka::{Offset, TopicPartitionList};

use crate::common::ConnectArgs;

/// A consumer acting in `group`'s name that never subscribes, so it never joins the group:
/// it only reads (OffsetFetch, DescribeGroups) and, for `reset-offsets`, commits.
pub(super) fn group_consumer(conn: &ConnectArgs, group: &str) -> anyhow::Result<BaseConsumer> {
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
pub(super) fn reader_consumer(conn: &ConnectArgs) -> anyhow::Result<BaseConsumer> {
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

pub(super) fn active_members_error(group: &str) -> anyhow::Error {
    anyhow!("group {group} has active members: stop its consumers before resetting offsets")
}

/// A topic and partition.
pub(super) type Tp = (String, i32);

/// The group's committed offset of each partition that has one.
pub(super) fn committed_offsets(
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
