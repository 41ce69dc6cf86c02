//! The JSON views of the cluster the console (`console/`) and scripts read on the admin port
//! (`docs/admin-api.json`): an overview, the topics, one topic, the consumer groups with their
//! lag, one group. Lists are filtered by the server and then paged (at most [`MAX_LIMIT`]
//! rows), so a cluster of 10,000 partitions answers with a page, never with itself.
//!
//! Whichever broker answers, the figures are the cluster's: topics, partitions, leaders and
//! remote bytes are the metadata quorum's; log offsets and local bytes are each partition's
//! leader's; a group's lag is what its coordinator's last lag sample saw (`group/lag.rs`). The
//! answering broker computes its own part and asks the other live brokers for theirs
//! ([`AdminPeers`], the `local_*` views here); a broker that did not answer is listed under
//! `unanswered` with why, and its part is missing, never guessed. A partition's records
//! ([`messages`]) are read as a read_committed consumer reads them, from either tier, where
//! the partition is hosted, at most [`MAX_MESSAGES`] records and [`MESSAGES_READ_BYTES`] of log
//! at a time.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Value};
use strata_metadata::PartitionInfo;

use super::peers::{AdminPeers, Unanswered};
use crate::broker::Broker;
use crate::group::lag::{GroupPoint, PartitionLag};
use crate::topic_config;

/// The other live brokers: those a cluster-wide view asks for their part.
pub(super) fn others(broker: &Broker) -> Vec<u64> {
    let me = broker.node.config.node_id;
    let state = broker.node.metadata.state();
    (state.brokers.values())
        .filter(|b| !b.fenced && b.node_id != me)
        .map(|b| b.node_id)
        .collect()
}

/// A name as one segment of a path.
fn segment(name: &str) -> String {
    percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC).to_string()
}

pub const DEFAULT_LIMIT: usize = 50;
/// A topic's partitions shown per page by default.
pub const DEFAULT_PARTITIONS: usize = 100;
pub const MAX_LIMIT: usize = 500;
/// The longest filter accepted, in bytes.
const MAX_FILTER: usize = 256;

/// The orders `/v1/topics` and `/v1/groups` sort by (`sort=`), by name when not asked;
/// figures sort largest first.
pub const TOPIC_SORTS: &[&str] = &["name", "size", "partitions", "throughput"];
pub const GROUP_SORTS: &[&str] = &["name", "lag", "lag_time"];

/// A page of a list: rows whose name contains `filter`, in `sort`'s order, from `offset`, at
/// most `limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageQuery {
    pub filter: String,
    pub offset: usize,
    pub limit: usize,
    /// One of the list's sorts; `None`: by name.
    pub sort: Option<&'static str>,
}

impl PageQuery {
    /// From a query string (`q`, `offset`, `limit`); a value out of bounds is refused in words.
    pub fn parse(query: &str) -> Result<PageQuery, String> {
        PageQuery::parse_sorted(query, &[])
    }

    /// [`PageQuery::parse`], with `sort` one of `sorts`.
    pub fn parse_sorted(query: &str, sorts: &[&'static str]) -> Result<PageQuery, String> {
        let mut page = PageQuery {
            filter: String::new(),
            offset: 0,
            limit: DEFAULT_LIMIT,
            sort: None,
        };
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            match k.as_ref() {
                "sort" if !sorts.is_empty() => match sorts.iter().find(|s| **s == v) {
                    Some(s) => page.sort = Some(*s),
                    None => return Err(format!("sort: '{v}' is not one of {}", sorts.join(", "))),
                },
                "q" if v.len() > MAX_FILTER => {
                    return Err(format!("q: at most {MAX_FILTER} bytes"));
                }
                "q" => page.filter = v.into_owned(),
                "offset" => {
                    page.offset = v
                        .parse()
                        .map_err(|_| format!("offset: '{v}' is not a row number"))?
                }
                "limit" => match v.parse::<usize>() {
                    Ok(n) if (1..=MAX_LIMIT).contains(&n) => page.limit = n,
                    _ => {
                        return Err(format!(
                            "limit: '{v}' is not a number from 1 to {MAX_LIMIT}"
                        ))
                    }
                },
                other if sorts.is_empty() => {
                    return Err(format!("unknown parameter '{other}' (q, offset, limit)"))
                }
                other => {
                    return Err(format!(
                        "unknown parameter '{other}' (q, offset, limit, sort)"
                    ))
                }
            }
        }
        Ok(page)
    }

    /// A page of a topic's partitions (`offset`, `limit`; no filter), by default the first
    /// [`DEFAULT_PARTITIONS`].
    pub fn parse_partitions(query: &str) -> Result<PageQuery, String> {
        let mut page = PageQuery::parse(query)?;
        if !page.filter.is_empty() {
            return Err("q: a topic's partitions are not filtered (offset, limit)".into());
        }
        if !form_urlencoded::parse(query.as_bytes()).any(|(k, _)| k == "limit") {
            page.limit = DEFAULT_PARTITIONS;
        }
        Ok(page)
    }

    /// The page's part of `0..total`.
    fn range(&self, total: usize) -> std::ops::Range<usize> {
        let start = self.offset.min(total);
        start..start.saturating_add(self.limit).min(total)
    }

    fn matches(&self, name: &str) -> bool {
        self.filter.is_empty() || name.contains(self.filter.as_str())
    }

    /// The page of `rows` (already filtered) as `{total, offset, items}`.
    fn page<T: Serialize>(&self, rows: Vec<T>) -> Value {
        let total = rows.len();
        let items: Vec<T> = rows
            .into_iter()
            .skip(self.offset)
            .take(self.limit)
            .collect();
        json!({ "total": total, "offset": self.offset, "items": items })
    }
}

/// This broker's last hour of figures for the console's charts (`metrics/history.rs`).
pub fn history(broker: &Broker) -> Value {
    json!({
        "broker": broker.node.config.node_id,
        "interval_s": crate::metrics::history::INTERVAL.as_secs(),
        "points": broker.node.metrics.history().points(),
    })
}

/// Moves shown at most on the overview (the count says how many there are).
const MAX_MOVES: usize = 100;
/// How long the overview waits for the quorum leader's view of the voters.
const QUORUM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// This broker's part of the overview's moves: each moving partition it leads, with its high
/// watermark and how far each follower has fetched (its log end, as this leader last saw it).
pub fn local_moves(broker: &Broker) -> Value {
    let me = broker.node.config.node_id;
    let state = broker.node.metadata.state();
    let hosted = broker.node.partitions.hosted();
    let mut out = Vec::new();
    for t in state.topics.values() {
        for (i, p) in t.partitions.iter().enumerate() {
            if !p.is_moving() || p.leader != Some(me) {
                continue;
            }
            let Some(here) = hosted.get(&t.name, i as i32) else {
                continue;
            };
            let ends: serde_json::Map<String, Value> = (here.follower_log_ends().into_iter())
                .map(|(id, end)| (id.to_string(), end.into()))
                .collect();
            let offsets = here.offsets();
            out.push(json!({
                "topic": t.name,
                "partition": i,
                "log_start": offsets.log_start,
                "high_watermark": offsets.high_watermark,
                "log_ends": ends,
            }));
        }
    }
    Value::Array(out)
}

/// The moves in progress (the first [`MAX_MOVES`] by topic and partition), each with how far
/// its new replicas have come, from the partitions' leaders.
async fn moves(broker: &Broker, peers: &AdminPeers) -> (Vec<Value>, Vec<Unanswered>) {
    let me = broker.node.config.node_id;
    let state = broker.node.metadata.state();
    let moving: Vec<(&str, usize, &PartitionInfo)> = (state.topics.values())
        .flat_map(|t| {
            (t.partitions.iter().enumerate()).map(move |(i, p)| (t.name.as_str(), i, &**p))
        })
        .filter(|(_, _, p)| p.is_moving())
        .take(MAX_MOVES)
        .collect();
    if moving.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let leaders: std::collections::BTreeSet<u64> = (moving.iter())
        .filter_map(|(_, _, p)| p.leader)
        .filter(|l| *l != me)
        .collect();
    let (answers, unanswered) = peers.ask(&broker.node, leaders, "/v1/local/moves").await;
    let mut progress: std::collections::HashMap<(String, u64), Value> = Default::default();
    for part in std::iter::once(local_moves(broker)).chain(answers.into_iter().map(|(_, v)| v)) {
        for m in part.as_array().into_iter().flatten() {
            let key = (
                m["topic"].as_str().unwrap_or("").to_string(),
                m["partition"].as_u64().unwrap_or(0),
            );
            progress.insert(key, m.clone());
        }
    }
    let rows = (moving.into_iter())
        .map(|(topic, i, p)| {
            let led = progress.get(&(topic.to_string(), i as u64));
            let figure = |k: &str| led.map(|m| m[k].clone()).unwrap_or(Value::Null);
            json!({
                "topic": topic,
                "partition": i,
                "leader": p.leader,
                "replicas": p.replicas,
                "adding": p.adding,
                "removing": p.removing,
                "log_start": figure("log_start"),
                "high_watermark": figure("high_watermark"),
                "log_ends": figure("log_ends"),
            })
        })
        .collect();
    (rows, unanswered)
}

/// The quorum's nodes as its leader sees them: how far behind its log each is, and when it
/// last fetched; `None` when no leader answers within [`QUORUM_TIMEOUT`].
async fn quorum(broker: &Broker) -> Option<Value> {
    let leader = tokio::time::timeout(QUORUM_TIMEOUT, broker.node.metadata.leader_status())
        .await
        .ok()?
        .ok()?;
    let end = leader.last_log_index.map_or(0, |i| i as i64 + 1);
    let nodes: Vec<Value> = (leader.replicas(broker.node.clock.now_ms()).into_iter())
        .map(|r| {
            json!({
                "id": r.id,
                "voter": r.voter,
                "log_end": r.log_end,
                "behind": (r.log_end >= 0).then(|| end - r.log_end),
                "last_fetch_ms": r.last_fetch_ms,
            })
        })
        .collect();
    Some(json!({ "leader": leader.leader, "term": leader.term, "log_end": end, "nodes": nodes }))
}

/// The cluster at a glance.
pub async fn overview(broker: &Broker, peers: &AdminPeers) -> Value {
    let quorum_status = broker.node.metadata.status();
    let state = broker.node.metadata.state();
    let (mut partitions, mut offline, mut under, mut moving) = (0usize, 0usize, 0usize, 0usize);
    for t in state.topics.values() {
        for p in &t.partitions {
            partitions += 1;
            offline += usize::from(p.leader.is_none());
            under += usize::from(p.leader.is_some() && p.is_under_replicated());
            moving += usize::from(p.is_moving());
        }
    }
    let brokers: Vec<Value> = (state.brokers.values())
        .map(|b| {
            json!({
                "id": b.node_id,
                "host": b.host,
                "port": b.port,
                "rack": b.rack,
                "state": if b.fenced { "fenced" } else { "live" },
            })
        })
        .collect();
    let ((groups, mut unanswered), (moves, moves_unanswered), quorum) = tokio::join!(
        all_groups(broker, peers),
        moves(broker, peers),
        quorum(broker)
    );
    for u in moves_unanswered {
        if !unanswered.contains(&u) {
            unanswered.push(u);
        }
    }
    json!({
        "node_id": broker.node.config.node_id,
        "actions": broker.node.config.console_actions_enable,
        "controller": quorum_status.leader,
        "voters": quorum_status.voters.keys().collect::<Vec<_>>(),
        "quorum": quorum,
        "moves": moves,
        "brokers": brokers,
        "topics": state.topics.len(),
        "partitions": partitions,
        "offline": offline,
        "under_replicated": under,
        "moving": moving,
        "groups": groups.len(),
        "unanswered": unanswered,
    })
}

#[derive(Serialize)]
struct TopicRow {
    name: String,
    partitions: usize,
    replication_factor: usize,
    under_replicated: usize,
    offline: usize,
    remote_bytes: u64,
    /// On the leaders' disks; `None` while a leader of one of its partitions did not answer.
    local_bytes: Option<u64>,
    /// Bytes appended per second over the leaders' last 10 s sample (`metrics/history.rs`).
    bytes_in_per_s: f64,
}

/// The bytes of a partition's committed remote segments (the quorum's).
fn remote_bytes(p: &PartitionInfo) -> u64 {
    p.remote_segments().map(|s| s.size_bytes).sum()
}

/// This broker's part of [`topics`]: the local bytes of each topic's partitions led here.
pub fn local_topics(broker: &Broker) -> Value {
    let me = broker.node.config.node_id;
    let state = broker.node.metadata.state();
    let hosted = broker.node.partitions.hosted();
    let rates = broker.node.metrics.history().topic_rates();
    let mut sizes = serde_json::Map::new();
    for t in state.topics.values() {
        let led = (t.partitions.iter().enumerate())
            .filter(|(_, p)| p.leader == Some(me))
            // Every local segment, without the rest of `tier_stats` (pages are polled).
            .filter_map(|(i, _)| hosted.get(&t.name, i as i32))
            .map(|p| p.local_bytes_from(i64::MIN))
            .sum::<u64>();
        if t.partitions.iter().any(|p| p.leader == Some(me)) {
            let rate = rates.get(&t.name).copied().unwrap_or(0.0);
            sizes.insert(
                t.name.clone(),
                json!({ "local_bytes": led, "bytes_in_per_s": rate }),
            );
        }
    }
    Value::Object(sizes)
}

/// The topics whose name contains the filter, by name.
pub async fn topics(broker: &Broker, peers: &AdminPeers, page: &PageQuery) -> Value {
    let me = broker.node.config.node_id;
    let mut sizes: std::collections::HashMap<String, (u64, f64)> = Default::default();
    let (answers, unanswered) = peers
        .ask(&broker.node, others(broker), "/v1/local/topics")
        .await;
    for (_, part) in std::iter::once((me, local_topics(broker))).chain(answers) {
        for (topic, figures) in part.as_object().into_iter().flatten() {
            let size = sizes.entry(topic.clone()).or_default();
            // A broker of the release before answers its bytes alone.
            size.0 += (figures.as_u64())
                .or_else(|| figures["local_bytes"].as_u64())
                .unwrap_or(0);
            size.1 += figures["bytes_in_per_s"].as_f64().unwrap_or(0.0);
        }
    }
    let silent: std::collections::HashSet<u64> = unanswered.iter().map(|u| u.broker).collect();
    let state = broker.node.metadata.state();
    let mut rows: Vec<TopicRow> = (state.topics.values())
        .filter(|t| page.matches(&t.name))
        .map(|t| TopicRow {
            name: t.name.clone(),
            partitions: t.partitions.len(),
            replication_factor: t.partitions.first().map_or(0, |p| p.replicas.len()),
            under_replicated: (t.partitions.iter())
                .filter(|p| p.leader.is_some() && p.is_under_replicated())
                .count(),
            offline: t.partitions.iter().filter(|p| p.leader.is_none()).count(),
            remote_bytes: t.partitions.iter().map(|p| remote_bytes(p)).sum(),
            local_bytes: (!(t.partitions.iter())
                .any(|p| p.leader.is_some_and(|l| silent.contains(&l))))
            .then(|| sizes.get(&t.name).map_or(0, |s| s.0)),
            bytes_in_per_s: sizes.get(&t.name).map_or(0.0, |s| s.1),
        })
        .collect();
    // Stable sorts of rows already by name: ties stay in name order.
    match page.sort {
        Some("size") => {
            rows.sort_by_key(|t| std::cmp::Reverse(t.remote_bytes + t.local_bytes.unwrap_or(0)))
        }
        Some("partitions") => rows.sort_by_key(|t| std::cmp::Reverse(t.partitions)),
        Some("throughput") => rows.sort_by(|a, b| b.bytes_in_per_s.total_cmp(&a.bytes_in_per_s)),
        _ => {}
    }
    let mut v = page.page(rows);
    v["unanswered"] = json!(unanswered);
    v
}

/// This broker's part of [`topic`]: offsets and local bytes of the page's partitions led
/// here, by partition.
pub fn local_topic(broker: &Broker, name: &str, page: &PageQuery) -> Value {
    let me = broker.node.config.node_id;
    let state = broker.node.metadata.state();
    let hosted = broker.node.partitions.hosted();
    let mut out = serde_json::Map::new();
    let Some(t) = state.topic(name) else {
        return Value::Object(out);
    };
    for i in page.range(t.partitions.len()) {
        let p = &t.partitions[i];
        let Some(here) = (p.leader == Some(me))
            .then(|| hosted.get(name, i as i32))
            .flatten()
        else {
            continue;
        };
        let o = here.offsets();
        let figures = json!({
            "log_start": o.log_start,
            "high_watermark": o.high_watermark,
            "local_bytes": here.local_bytes_from(i64::MIN),
        });
        out.insert(i.to_string(), figures);
    }
    Value::Object(out)
}

/// One topic: a page of its partitions (offsets and local bytes from their leaders) and its
/// configs; `None` for an unknown topic.
pub async fn topic(
    broker: &Broker,
    peers: &AdminPeers,
    name: &str,
    page: &PageQuery,
) -> Option<Value> {
    let me = broker.node.config.node_id;
    let state = broker.node.metadata.state();
    let t = state.topic(name)?;
    let shown = page.range(t.partitions.len());
    let leaders: std::collections::BTreeSet<u64> = (t.partitions[shown.clone()].iter())
        .filter_map(|p| p.leader)
        .filter(|l| *l != me)
        .collect();
    let path = format!(
        "/v1/local/topics/{}?offset={}&limit={}",
        segment(name),
        page.offset,
        page.limit
    );
    let (answers, unanswered) = peers.ask(&broker.node, leaders, &path).await;
    let mut figures: std::collections::HashMap<u64, Value> = answers.into_iter().collect();
    figures.insert(me, local_topic(broker, name, page));
    let partitions: Vec<Value> = (t.partitions[shown].iter().enumerate())
        .map(|(i, p)| (i + page.offset.min(t.partitions.len()), p))
        .map(|(i, p)| {
            let led = p
                .leader
                .and_then(|l| figures.get(&l))
                .map(|f| &f[i.to_string()]);
            let figure = |k: &str| led.map(|f| f[k].clone()).unwrap_or(Value::Null);
            json!({
                "partition": i,
                "leader": p.leader,
                "replicas": p.replicas,
                "isr": p.isr,
                "adding": p.adding,
                "removing": p.removing,
                "log_start": figure("log_start"),
                "high_watermark": figure("high_watermark"),
                "local_bytes": figure("local_bytes"),
                "remote_bytes": remote_bytes(p),
            })
        })
        .collect();
    let configs: Vec<Value> = (topic_config::effective(&broker.node.settings(), &t.configs))
        .into_iter()
        .map(|(name, (value, default))| {
            json!({ "name": name, "value": value, "source": if default { "default" } else { "topic" } })
        })
        .collect();
    Some(json!({
        "name": t.name,
        "topic_id": t.topic_id,
        "partitions_total": t.partitions.len(),
        "partitions_offset": page.offset,
        "partitions": partitions,
        "configs": configs,
        "actions": broker.node.config.console_actions_enable,
        "unanswered": unanswered,
    }))
}

#[derive(Serialize, serde::Deserialize)]
struct GroupRow {
    group: String,
    partitions: usize,
    lag_records: i64,
    /// The oldest unconsumed record's age, over its partitions.
    lag_seconds: f64,
    retention_risk: bool,
    /// "classic", "consumer" (KIP-848) or "share" (KIP-932), as the coordinator lists it.
    #[serde(default)]
    kind: Option<String>,
}

/// The groups of this broker's last lag sample (those it coordinates), by name, each with its
/// kind.
fn sampled_groups(broker: &Broker) -> Vec<GroupRow> {
    let kinds: std::collections::HashMap<String, &str> = (broker.groups.list().into_iter())
        .map(|g| (g.id, g.kind))
        .collect();
    (broker.lag.group_totals().into_iter())
        .map(|t| GroupRow {
            kind: kinds.get(&t.group).map(|k| k.to_string()),
            group: t.group,
            partitions: t.partitions,
            lag_records: t.lag_records,
            lag_seconds: t.lag_seconds,
            retention_risk: t.retention_risk,
        })
        .collect()
}

/// This broker's part of [`groups`]: the groups its last lag sample saw (those it
/// coordinates).
pub fn local_groups(broker: &Broker) -> Value {
    json!(sampled_groups(broker))
}

/// Every broker's groups, by name (a group two brokers sampled — its coordinator just moved —
/// is the first's), and the brokers that did not answer.
async fn all_groups(broker: &Broker, peers: &AdminPeers) -> (Vec<GroupRow>, Vec<Unanswered>) {
    let (answers, unanswered) = peers
        .ask(&broker.node, others(broker), "/v1/local/groups")
        .await;
    let mut rows = sampled_groups(broker);
    for (_, part) in answers {
        rows.extend(serde_json::from_value::<Vec<GroupRow>>(part).unwrap_or_default());
    }
    rows.sort_by(|a, b| a.group.cmp(&b.group));
    rows.dedup_by(|b, a| a.group == b.group);
    (rows, unanswered)
}

/// The consumer groups with committed offsets whose name contains the filter, with their
/// total lag, by name.
pub async fn groups(broker: &Broker, peers: &AdminPeers, page: &PageQuery) -> Value {
    let (mut rows, unanswered) = all_groups(broker, peers).await;
    rows.retain(|g| page.matches(&g.group));
    match page.sort {
        Some("lag") => rows.sort_by_key(|g| std::cmp::Reverse(g.lag_records)),
        Some("lag_time") => rows.sort_by(|a, b| b.lag_seconds.total_cmp(&a.lag_seconds)),
        _ => {}
    }
    let mut v = page.page(rows);
    v["unanswered"] = json!(unanswered);
    v
}

/// This broker's part of [`group`]: the group's partitions its last lag sample saw, the
/// group's total lag over the last hour as it sampled it, and its members when it
/// coordinates it (`members.rs`).
#[derive(Serialize, serde::Deserialize, Default)]
pub struct GroupPart {
    partitions: Vec<PartitionLag>,
    history: Vec<GroupPoint>,
    #[serde(default)]
    members: Option<Value>,
    /// A share group's partitions led here (`share/mod.rs`).
    #[serde(default)]
    share_partitions: Vec<crate::share::ShareView>,
}

pub async fn local_group(
    broker: &Arc<Broker>,
    name: &str,
    access: &crate::security::Access,
) -> GroupPart {
    GroupPart {
        partitions: broker.lag.group_sample(name),
        history: broker.lag.group_history(name),
        members: super::members::local(broker, name, access).await,
        share_partitions: broker.shares.views(name),
    }
}

/// One group's lag by partition and its members, from whichever broker coordinates it;
/// `None` for a group no broker knows (and every broker answered). The members are shown to
/// a caller that may DESCRIBE the group (`access`; relayed parts were read as the relaying
/// broker).
pub async fn group(
    broker: &Arc<Broker>,
    peers: &AdminPeers,
    name: &str,
    access: &crate::security::Access,
) -> Option<Value> {
    use strata_metadata::acl::AclOperation;
    let path = format!("/v1/local/groups/{}", segment(name));
    let (answers, unanswered) = peers.ask(&broker.node, others(broker), &path).await;
    let GroupPart {
        mut partitions,
        mut history,
        mut members,
        mut share_partitions,
    } = local_group(broker, name, access).await;
    for (_, part) in answers {
        let part = serde_json::from_value::<GroupPart>(part).unwrap_or_default();
        partitions.extend(part.partitions);
        // The coordinator's, which has sampled the group longest.
        if part.history.len() > history.len() {
            history = part.history;
        }
        members = members.or(part.members);
        share_partitions.extend(part.share_partitions);
    }
    share_partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    let dead_letter_topic = broker.shares.dead_letter_topic(name);
    if !access.group(AclOperation::Describe, name) {
        members = members.map(
            |m| json!({ "kind": m["kind"], "refused": "DESCRIBE on the group is not authorized" }),
        );
    }
    partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    partitions.dedup_by(|b, a| (&a.topic, a.partition) == (&b.topic, b.partition));
    (!partitions.is_empty() || members.is_some() || !unanswered.is_empty()).then(|| {
        json!({
            "group": name,
            "members": members,
            "share_partitions": share_partitions,
            "dead_letter_topic": dead_letter_topic,
            "actions": broker.node.config.console_actions_enable,
            "partitions": partitions,
            "history": history,
            "unanswered": unanswered,
        })
    })
}

/// Records shown at most per request, and by default.
pub const MAX_MESSAGES: usize = 100;
pub const DEFAULT_MESSAGES: usize = 20;
/// Log bytes read per request at most (at least one batch).
pub const MESSAGES_READ_BYTES: usize = 1 << 20;
/// A key, value or header value is shown up to this many bytes.
const FIELD_BYTES: usize = 16 << 10;

/// Where in a partition to show records from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    Offset(i64),
    /// The first record with a timestamp at or after this (ms).
    Timestamp(i64),
    /// The last records before the high watermark.
    Latest,
}

/// `/v1/topics/NAME/messages?partition=&offset=|timestamp=&limit=`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessagesQuery {
    pub partition: i32,
    pub start: Start,
    pub limit: usize,
}

impl MessagesQuery {
    pub fn parse(query: &str) -> Result<MessagesQuery, String> {
        let mut q = MessagesQuery {
            partition: 0,
            start: Start::Latest,
            limit: DEFAULT_MESSAGES,
        };
        let number = |k: &str, v: &str| -> Result<i64, String> {
            v.parse().map_err(|_| format!("{k}: '{v}' is not a number"))
        };
        for (k, v) in form_urlencoded::parse(query.as_bytes()) {
            match k.as_ref() {
                "partition" => {
                    q.partition = i32::try_from(number("partition", &v)?)
                        .ok()
                        .filter(|p| *p >= 0)
                        .ok_or_else(|| format!("partition: '{v}' is no partition"))?
                }
                "offset" => match number("offset", &v)? {
                    o if o >= 0 => q.start = Start::Offset(o),
                    _ => return Err(format!("offset: '{v}' is negative")),
                },
                "timestamp" => q.start = Start::Timestamp(number("timestamp", &v)?),
                "limit" => match v.parse::<usize>() {
                    Ok(n) if (1..=MAX_MESSAGES).contains(&n) => q.limit = n,
                    _ => {
                        return Err(format!(
                            "limit: '{v}' is not a number from 1 to {MAX_MESSAGES}"
                        ))
                    }
                },
                other => {
                    return Err(format!(
                        "unknown parameter '{other}' (partition, offset, timestamp, limit)"
                    ))
                }
            }
        }
        Ok(q)
    }

    /// The query string [`MessagesQuery::parse`] reads back as `self`.
    fn to_query(&self) -> String {
        let start = match self.start {
            Start::Offset(o) => format!("&offset={o}"),
            Start::Timestamp(ts) => format!("&timestamp={ts}"),
            Start::Latest => String::new(),
        };
        format!("partition={}&limit={}{start}", self.partition, self.limit)
    }
}

/// Bytes as a person reads them: text when they are UTF-8 (`json` when they parse as JSON),
/// else hex; at most [`FIELD_BYTES`] of them.
fn field(bytes: Option<&[u8]>) -> Value {
    let Some(b) = bytes else {
        return Value::Null;
    };
    let shown = &b[..b.len().min(FIELD_BYTES)];
    let truncated = shown.len() < b.len();
    let text = match std::str::from_utf8(shown) {
        Ok(text) => Some(text),
        // Cut inside a character: the text up to it.
        Err(e) if truncated && e.error_len().is_none() => {
            std::str::from_utf8(&shown[..e.valid_up_to()]).ok()
        }
        Err(_) => None,
    };
    match text {
        Some(text) => json!({
            "text": text,
            "json": !truncated && serde_json::from_slice::<serde::de::IgnoredAny>(b).is_ok(),
            "bytes": b.len(),
            "truncated": truncated,
        }),
        None => {
            let hex: String = shown.iter().map(|x| format!("{x:02x}")).collect();
            json!({ "hex": hex, "bytes": b.len(), "truncated": truncated })
        }
    }
}

/// Why a partition's records cannot be shown here, with the HTTP status to say it with.
pub type Refusal = (u16, String);

/// Records of one partition as a read_committed consumer reads them (no control record, no
/// aborted transaction), from `query`'s start: read here when the partition is hosted here,
/// else relayed from its leader (unless `local`, the leader's side of a relay). While the
/// authorizer is on, only for a caller whose principal may READ the topic (`access`; `None`:
/// a client certificate no rule maps), a refusal audited as the Kafka port's are.
pub async fn messages(
    broker: &Broker,
    peers: &AdminPeers,
    topic: &str,
    query: &MessagesQuery,
    local: bool,
    access: Option<&crate::security::Access>,
) -> Result<Value, Refusal> {
    use crate::log::{records, txn_index::AbortedFilter};
    use strata_metadata::acl::AclOperation;
    if broker.node.config.authorizer_enable {
        match access {
            None => {
                return Err((
                    403,
                    "the authorizer is on and the client certificate maps to no principal".into(),
                ))
            }
            Some(a) if !a.topic(AclOperation::Read, topic) => {
                return Err((
                    403,
                    format!("the authorizer is on: this principal may not read topic {topic}"),
                ))
            }
            Some(_) => {}
        }
    }
    let state = broker.node.metadata.state();
    let info = state
        .topic(topic)
        .ok_or((404, format!("no topic {topic}")))?;
    let leader = (info.partitions.get(query.partition as usize))
        .ok_or((
            404,
            format!("topic {topic} has no partition {}", query.partition),
        ))?
        .leader;
    let Some(p) = broker.node.partitions.get(topic, query.partition) else {
        let not_here = format!(
            "partition {} of {topic} is not on this broker",
            query.partition
        );
        let leader = match (leader, local) {
            (Some(leader), false) => leader,
            (None, _) => return Err((503, format!("{not_here} and has no leader now"))),
            (Some(leader), true) => {
                return Err((409, format!("{not_here}; its leader is {leader}")))
            }
        };
        let path = format!(
            "/v1/local/topics/{}/messages?{}",
            segment(topic),
            query.to_query()
        );
        return match peers.relay(&broker.node, leader, &path).await {
            Ok((200, body)) => serde_json::from_str(&body)
                .map_err(|e| (502, format!("broker {leader} answered no JSON: {e}"))),
            Ok((status, body)) => Err((status, body.trim_end().to_string())),
            Err(why) => Err((
                502,
                format!("broker {leader}, its leader, did not answer: {why}"),
            )),
        };
    };
    let offsets = p.published_offsets();
    let from = match query.start {
        Start::Offset(o) => o.max(offsets.log_start),
        Start::Latest => (offsets.last_stable - query.limit as i64).max(offsets.log_start),
        Start::Timestamp(ts) => match broker.tier.offset_for_timestamp(p.clone(), ts).await {
            Ok(Some((o, _))) => o,
            Ok(None) => offsets.last_stable,
            Err(e) => return Err((503, format!("looking up the timestamp: {e}"))),
        },
    };
    let mut out = Vec::new();
    let mut next = from;
    if from < offsets.last_stable {
        let read = (broker.tier.read(
            p.clone(),
            from,
            MESSAGES_READ_BYTES,
            crate::partition::Isolation::Committed,
        ))
        .await
        .map_err(|e| (503, format!("reading the log: {e}")))?;
        let data = read.batches.bytes;
        let mut aborted = AbortedFilter::new(read.aborted);
        'batches: for item in records::batches(&data) {
            let (h, batch) = item.map_err(|e| (500, format!("reading the log: {e}")))?;
            let skip = aborted.is_aborted(&h) || h.is_control();
            if skip || h.next_offset() <= from {
                next = next.max(h.next_offset());
                continue;
            }
            let section =
                records::section(&batch, &h).map_err(|e| (500, format!("reading a batch: {e}")))?;
            let mut rows = Vec::new();
            records::for_each(&section, &h, |r| {
                if r.offset >= from && out.len() + rows.len() < query.limit {
                    let headers: Vec<Value> = (records::headers(r.headers).unwrap_or_default())
                        .into_iter()
                        .map(|(k, v)| json!({ "key": String::from_utf8_lossy(k), "value": field(v) }))
                        .collect();
                    rows.push((r.offset, json!({
                        "offset": r.offset,
                        "timestamp": r.timestamp,
                        "key": field(r.key),
                        "value": field(r.value),
                        "headers": headers,
                    })));
                }
            })
            .map_err(|e| (500, format!("reading a batch: {e}")))?;
            for (offset, row) in rows {
                out.push(row);
                next = offset + 1;
            }
            if out.len() >= query.limit {
                break 'batches;
            }
            next = next.max(h.next_offset());
        }
    }
    Ok(json!({
        "topic": topic,
        "partition": query.partition,
        "log_start": offsets.log_start,
        "last_stable_offset": offsets.last_stable,
        "from": from,
        "next": next.min(offsets.last_stable.max(from)),
        "records": out,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_bounded_and_bad_parameters_refused_in_words() {
        let page = PageQuery::parse("q=ord%20ers&offset=100&limit=500").unwrap();
        assert_eq!(
            page,
            PageQuery {
                filter: "ord ers".into(),
                offset: 100,
                limit: 500,
                sort: None,
            }
        );
        assert_eq!(PageQuery::parse("").unwrap().limit, DEFAULT_LIMIT);
        for bad in [
            "limit=0",
            "limit=501",
            "limit=-1",
            "offset=x",
            "offset=99999999999999999999999",
            "sort=size",
        ] {
            assert!(PageQuery::parse(bad).is_err(), "{bad}");
        }
        // A list's own sorts, and no other.
        let sorted = PageQuery::parse_sorted("sort=size", TOPIC_SORTS).unwrap();
        assert_eq!(sorted.sort, Some("size"));
        assert!(PageQuery::parse_sorted("sort=lag", TOPIC_SORTS).is_err());
        assert!(PageQuery::parse_sorted("sort=lag", GROUP_SORTS).is_ok());
        let long = format!("q={}", "a".repeat(MAX_FILTER + 1));
        assert!(PageQuery::parse(&long).unwrap_err().contains("at most"));
        // An offset past the end is an empty page, not an error.
        let page = PageQuery::parse("offset=18446744073709551615").unwrap();
        let v = page.page(vec![1, 2, 3]);
        assert_eq!(v["total"], 3);
        assert_eq!(v["items"], json!([]));
    }

    #[test]
    fn a_topics_partitions_are_paged_and_never_filtered() {
        let page = PageQuery::parse_partitions("").unwrap();
        assert_eq!((page.offset, page.limit), (0, DEFAULT_PARTITIONS));
        assert_eq!(page.range(10_000), 0..100);
        assert_eq!(page.range(3), 0..3);
        let page = PageQuery::parse_partitions("offset=9950&limit=500").unwrap();
        assert_eq!(page.range(10_000), 9950..10_000);
        assert_eq!(page.range(10), 10..10);
        let far = PageQuery::parse_partitions(&format!("offset={}", usize::MAX)).unwrap();
        assert_eq!(far.range(5), 5..5);
        assert!(PageQuery::parse_partitions("q=x").is_err());
        assert!(PageQuery::parse_partitions("limit=501").is_err());
    }

    #[test]
    fn message_queries_are_bounded_and_fields_shown_as_text_json_or_hex() {
        let q = MessagesQuery::parse("partition=2&timestamp=1700000000000&limit=100").unwrap();
        assert_eq!(
            (q.partition, q.start, q.limit),
            (2, Start::Timestamp(1_700_000_000_000), 100)
        );
        assert_eq!(MessagesQuery::parse("").unwrap().start, Start::Latest);
        for bad in [
            "partition=-1",
            "partition=99999999999",
            "offset=-5",
            "limit=101",
            "limit=0",
            "x=1",
            "offset=a",
        ] {
            assert!(MessagesQuery::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(field(None), Value::Null);
        assert_eq!(field(Some(br#"{"a":1}"#))["json"], true);
        assert_eq!(field(Some(b"plain"))["json"], false);
        assert_eq!(field(Some(&[0xff, 0x00]))["hex"], "ff00");
        let big = vec![b'a'; FIELD_BYTES + 5];
        let f = field(Some(&big));
        assert_eq!(
            (f["truncated"].as_bool(), f["bytes"].as_u64()),
            (Some(true), Some(FIELD_BYTES as u64 + 5))
        );
        assert_eq!(f["text"].as_str().unwrap().len(), FIELD_BYTES);
    }
}
