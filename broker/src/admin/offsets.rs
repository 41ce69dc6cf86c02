//! Resetting a group's committed offsets from the admin port (`POST /v1/groups/<name>/offsets`),
//! as `kafka-consumer-groups.sh --reset-offsets` (and `kafka-share-groups.sh --reset-offsets`
//! for a share group's start offsets) do: to the earliest or latest offset, to the first record
//! at or after a time, or to an offset, for one topic's partitions (all, or those named). The
//! targets are asked of the partitions' leaders (ListOffsets); the change is what an admin
//! client sends to the group's coordinator — OffsetCommit (generation -1, no member), or
//! AlterShareGroupOffsets when the coordinator describes it as a share group — which takes it
//! only while the group has no members, so a running consumer is never moved under its feet.
//!
//! Invariants: the caller needs READ on the group and on the topic (OffsetCommit's ACLs),
//! checked here, where the caller is known; a reset is audited as the caller's; an offset
//! outside the log is brought to its nearest end (as the Kafka tool does), never committed as
//! asked; with `dry_run` nothing is committed and the plan is answered.

use std::collections::{BTreeMap, BTreeSet};

use hyper::StatusCode;
use kafka_protocol::messages::alter_share_group_offsets_request::{
    AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, GroupId, OffsetCommitRequest, ShareGroupDescribeRequest,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use serde::Deserialize;
use serde_json::{json, Value};
use strata_metadata::acl::AclOperation;

use super::actions::Caller;
use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::group::lag_leaders::{Leaders, Tp, EARLIEST, LATEST};

/// The versions sent: OffsetCommit with topic names, flexible; KIP-932's.
const OFFSET_COMMIT_VERSION: i16 = 8;
const SHARE_GROUP_DESCRIBE_VERSION: i16 = 1;
const ALTER_SHARE_OFFSETS_VERSION: i16 = 0;

/// Where to move the offsets.
#[derive(Deserialize, Debug, PartialEq, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum To {
    Earliest,
    Latest,
    /// The first record stamped at or after `value` (ms); the log end when none is.
    Timestamp,
    /// `value` itself, brought into the log.
    Offset,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct Reset {
    topic: String,
    /// Every partition of the topic when not given.
    #[serde(default)]
    partitions: Option<Vec<i32>>,
    to: To,
    #[serde(default)]
    value: Option<i64>,
    #[serde(default)]
    dry_run: bool,
}

fn parse(body: &[u8]) -> Result<Reset, String> {
    let r: Reset = serde_json::from_slice(body).map_err(|e| {
        format!("the body is not a reset (topic, partitions, to: earliest|latest|timestamp|offset, value, dry_run): {e}")
    })?;
    match (r.to, r.value) {
        (To::Timestamp | To::Offset, None) => {
            Err(format!("to {:?} needs a value", r.to).to_lowercase())
        }
        (To::Timestamp | To::Offset, Some(v)) if v < 0 => Err(format!("value {v} is negative")),
        (To::Earliest | To::Latest, Some(_)) => {
            Err(format!("to {:?} takes no value", r.to).to_lowercase())
        }
        _ => Ok(r),
    }
}

/// Runs a reset of `group`'s offsets as `caller`.
pub async fn reset(
    broker: &Broker,
    leaders: &Leaders,
    group: &str,
    body: &[u8],
    caller: &Caller,
) -> (StatusCode, Value) {
    let refused = |status, error: &str, message: String| {
        (status, json!({ "error": error, "message": message }))
    };
    let r = match parse(body) {
        Ok(r) => r,
        Err(why) => return refused(StatusCode::BAD_REQUEST, "INVALID_REQUEST", why),
    };
    let access = (broker.security.authorizer()).access(&caller.principal, &caller.host);
    tracing::info!(principal = %caller.principal, client = %caller.host, group, topic = %r.topic, to = ?r.to, "admin port action: reset offsets");
    let fields = json!({ "group": group, "topic": r.topic, "to": format!("{:?}", r.to).to_lowercase(), "value": r.value });
    if !access.group(AclOperation::Read, group) {
        access.audit("offsets_reset_refused", fields);
        return refused(
            StatusCode::FORBIDDEN,
            "GroupAuthorizationFailed",
            format!("READ on group {group} is not authorized"),
        );
    }
    if !access.topic(AclOperation::Read, &r.topic) {
        access.audit("offsets_reset_refused", fields);
        return refused(
            StatusCode::FORBIDDEN,
            "TopicAuthorizationFailed",
            format!("READ on topic {} is not authorized", r.topic),
        );
    }
    let state = broker.node.metadata.state();
    let Some(info) = state.topic(&r.topic) else {
        return refused(
            StatusCode::NOT_FOUND,
            "UnknownTopicOrPartition",
            format!("no topic {}", r.topic),
        );
    };
    let count = info.partitions.len() as i32;
    let partitions: BTreeSet<i32> = match &r.partitions {
        None => (0..count).collect(),
        Some(ps) => ps.iter().copied().collect(),
    };
    if let Some(p) = partitions.iter().find(|p| !(0..count).contains(*p)) {
        return refused(
            StatusCode::NOT_FOUND,
            "UnknownTopicOrPartition",
            format!("topic {} has no partition {p}", r.topic),
        );
    }
    if partitions.is_empty() {
        return refused(
            StatusCode::BAD_REQUEST,
            "INVALID_REQUEST",
            "no partition named".into(),
        );
    }
    let mut by_leader: BTreeMap<u64, Vec<Tp>> = BTreeMap::new();
    for &p in &partitions {
        match info.partitions[p as usize].leader {
            Some(l) => by_leader.entry(l).or_default().push((r.topic.clone(), p)),
            None => {
                return refused(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "LeaderNotAvailable",
                    format!("{}-{p} has no leader", r.topic),
                )
            }
        }
    }
    let node = &broker.node;
    let mut targets: BTreeMap<i32, i64> = BTreeMap::new();
    for (leader, tps) in by_leader {
        let ask = |ts| leaders.list_offsets(node, leader, &tps, ts);
        let (earliest, latest) = match tokio::join!(ask(EARLIEST), ask(LATEST)) {
            (Ok(e), Ok(l)) => (e, l),
            (Err(why), _) | (_, Err(why)) => {
                return refused(StatusCode::BAD_GATEWAY, "LeaderNotAvailable", why)
            }
        };
        let at = match (r.to, r.value) {
            (To::Timestamp, Some(ts)) => match ask(ts).await {
                Ok(at) => at,
                Err(why) => return refused(StatusCode::BAD_GATEWAY, "LeaderNotAvailable", why),
            },
            _ => Default::default(),
        };
        for tp in &tps {
            let (Some(&lo), Some(&hi)) = (earliest.get(tp), latest.get(tp)) else {
                return refused(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "NotLeaderOrFollower",
                    format!("the leader of {}-{} did not give its offsets", tp.0, tp.1),
                );
            };
            let target = match (r.to, r.value) {
                (To::Earliest, _) => lo,
                (To::Latest, _) => hi,
                (To::Timestamp, _) => at.get(tp).copied().filter(|o| *o >= 0).unwrap_or(hi),
                (To::Offset, v) => v.unwrap_or(lo).clamp(lo, hi),
            };
            targets.insert(tp.1, target);
        }
    }
    let plan: Vec<Value> = (targets.iter())
        .map(|(p, o)| json!({ "partition": p, "offset": o }))
        .collect();
    if r.dry_run {
        return (
            StatusCode::OK,
            json!({ "done": "nothing committed (dry run)", "offsets": plan }),
        );
    }
    let code = match commit(broker, leaders, group, &r.topic, &targets).await {
        Ok(code) => code,
        Err(why) => return refused(StatusCode::BAD_GATEWAY, "CoordinatorNotAvailable", why),
    };
    if code != ErrorCode::None {
        let (status, why) = match code {
            ErrorCode::UnknownMemberId
            | ErrorCode::IllegalGeneration
            | ErrorCode::RebalanceInProgress
            | ErrorCode::NonEmptyGroup => (
                StatusCode::CONFLICT,
                format!("group {group} has active members: stop its consumers first (offsets are reset only while a group is empty)"),
            ),
            _ => (StatusCode::SERVICE_UNAVAILABLE, format!("the coordinator answered {code:?}")),
        };
        return refused(status, &format!("{code:?}"), why);
    }
    let mut fields = fields;
    fields["offsets"] = json!(plan);
    access.audit("offsets_reset", fields);
    (
        StatusCode::OK,
        json!({ "done": format!("offsets of {group} on {} reset", r.topic), "offsets": plan }),
    )
}

/// `targets` to `group`'s coordinator as an admin client sends them — AlterShareGroupOffsets
/// for a share group, else OffsetCommit: the first error (the partitions share the group's
/// state), or why the coordinator was not reached.
async fn commit(
    broker: &Broker,
    leaders: &Leaders,
    group: &str,
    topic: &str,
    targets: &BTreeMap<i32, i64>,
) -> Result<ErrorCode, String> {
    use crate::group::store;
    let coordinator = (broker.node.metadata.state())
        .partition(store::TOPIC, store::partition_for(group))
        .and_then(|p| p.leader)
        .ok_or_else(|| format!("group {group}'s coordinator has no leader"))?;
    let id = || GroupId(StrBytes::from_string(group.to_string()));
    let name = || TopicName(StrBytes::from_string(topic.to_string()));
    let describe = ShareGroupDescribeRequest::default().with_group_ids(vec![id()]);
    let described = leaders
        .call(
            &broker.node,
            coordinator,
            SHARE_GROUP_DESCRIBE_VERSION,
            &describe,
        )
        .await?;
    if described.groups.first().is_some_and(|g| g.error_code == 0) {
        let partitions = (targets.iter())
            .map(|(p, o)| {
                AlterShareGroupOffsetsRequestPartition::default()
                    .with_partition_index(*p)
                    .with_start_offset(*o)
            })
            .collect();
        let req = AlterShareGroupOffsetsRequest::default()
            .with_group_id(id())
            .with_topics(vec![AlterShareGroupOffsetsRequestTopic::default()
                .with_topic_name(name())
                .with_partitions(partitions)]);
        let resp = leaders
            .call(&broker.node, coordinator, ALTER_SHARE_OFFSETS_VERSION, &req)
            .await?;
        let code = std::iter::once(resp.error_code)
            .chain((resp.responses.iter()).flat_map(|t| t.partitions.iter().map(|p| p.error_code)))
            .find(|c| *c != 0)
            .unwrap_or(0);
        return Ok(ErrorCode::from_code(code));
    }
    let partitions = (targets.iter())
        .map(|(p, o)| {
            OffsetCommitRequestPartition::default()
                .with_partition_index(*p)
                .with_committed_offset(*o)
                .with_committed_leader_epoch(-1)
        })
        .collect();
    let req = OffsetCommitRequest::default()
        .with_group_id(id())
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(StrBytes::from_static_str(""))
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(name())
            .with_partitions(partitions)]);
    let resp = leaders
        .call(&broker.node, coordinator, OFFSET_COMMIT_VERSION, &req)
        .await?;
    let code = (resp.topics.iter())
        .flat_map(|t| &t.partitions)
        .map(|p| p.error_code)
        .find(|c| *c != 0)
        .unwrap_or(0);
    Ok(ErrorCode::from_code(code))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_says_where_to() {
        let r = parse(br#"{"topic":"t","to":"timestamp","value":1000}"#).unwrap();
        assert_eq!(
            (r.to, r.value, r.partitions, r.dry_run),
            (To::Timestamp, Some(1000), None, false)
        );
        let r =
            parse(br#"{"topic":"t","partitions":[0,2],"to":"earliest","dry_run":true}"#).unwrap();
        assert_eq!(
            (r.to, r.partitions, r.dry_run),
            (To::Earliest, Some(vec![0, 2]), true)
        );
        for bad in [
            "",
            "{}",
            r#"{"topic":"t"}"#,
            r#"{"topic":"t","to":"soon"}"#,
            r#"{"topic":"t","to":"offset"}"#,
            r#"{"topic":"t","to":"offset","value":-5}"#,
            r#"{"topic":"t","to":"latest","value":5}"#,
            r#"{"topic":"t","to":"latest","extra":1}"#,
        ] {
            assert!(parse(bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
