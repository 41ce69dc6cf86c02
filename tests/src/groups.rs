//! Consumer groups: subscribed librdkafka members on their own threads, `strata consume
//! --group` members as child processes, a view of a group through ListGroups/DescribeGroups,
//! and the group APIs as raw `kafka-protocol` requests ([`GroupClient`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    consumer_protocol_assignment::TopicPartition as AssignedPartition,
    delete_groups_request::DeleteGroupsRequest,
    find_coordinator_request::FindCoordinatorRequest,
    join_group_request::JoinGroupRequestProtocol,
    leave_group_request::MemberIdentity,
    offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic},
    offset_delete_request::{OffsetDeleteRequestPartition, OffsetDeleteRequestTopic},
    offset_fetch_request::OffsetFetchRequestTopic,
    sync_group_request::SyncGroupRequestAssignment,
    ApiKey, ApiVersionsRequest, ConsumerProtocolAssignment, ConsumerProtocolSubscription, GroupId,
    HeartbeatRequest, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest, OffsetCommitRequest,
    OffsetDeleteRequest, OffsetFetchRequest, SyncGroupRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};

use crate::raw::topic_name;
use crate::util::{poll_until, unique_topic, Steady};
use crate::{strata_bin, Broker, ConsumedRecord, KafkaConn};

/// Kafka error codes of the group APIs.
pub mod group_error {
    pub const NONE: i16 = 0;
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    pub const ILLEGAL_GENERATION: i16 = 22;
    pub const INVALID_GROUP_ID: i16 = 24;
    pub const UNKNOWN_MEMBER_ID: i16 = 25;
    pub const REBALANCE_IN_PROGRESS: i16 = 27;
    pub const NON_EMPTY_GROUP: i16 = 68;
    pub const GROUP_ID_NOT_FOUND: i16 = 69;
    pub const MEMBER_ID_REQUIRED: i16 = 79;
    pub const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;
}

/// Session timeout of test members whose expiry a test waits for.
pub const SESSION_TIMEOUT_MS: u32 = 6_000;
/// Heartbeat interval of test members.
pub const HEARTBEAT_INTERVAL_MS: u32 = 500;

/// A group id unique within this test process.
pub fn unique_group(prefix: &str) -> String {
    unique_topic(prefix)
}

impl Broker {
    /// Produces `per_partition` records to each of partitions `0..partitions`
    /// (`value = "{tag}-p{p}-{i}"`); returns the value at each acknowledged (partition, offset).
    pub fn produce_to_each(
        &self,
        topic: &str,
        partitions: i32,
        per_partition: usize,
        tag: &str,
    ) -> BTreeMap<(i32, i64), String> {
        let producer = crate::TrackingProducer::new(&self.producer_config());
        let mut values = Vec::new();
        for i in 0..per_partition {
            for p in 0..partitions {
                let value = format!("{tag}-p{p}-{i}");
                producer.send(
                    values.len(),
                    topic,
                    Some(p),
                    format!("k{i}").as_bytes(),
                    value.as_bytes(),
                    &[],
                    None,
                );
                values.push(value);
            }
        }
        producer.flush(Duration::from_secs(60));
        let delivered = producer.all_delivered(values.len());
        delivered.into_iter().zip(values).collect()
    }

    /// A config for a subscribed member of `group`: manual commits, earliest reset, a 6 s
    /// session with 500 ms heartbeats.
    pub fn group_config(&self, group: &str) -> ClientConfig {
        let mut cfg = self.client_config();
        cfg.set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .set("fetch.wait.max.ms", "100")
            .set("session.timeout.ms", SESSION_TIMEOUT_MS.to_string())
            .set("heartbeat.interval.ms", HEARTBEAT_INTERVAL_MS.to_string());
        cfg
    }

    /// Committed offsets of `group` for `partitions` of `topic` (OffsetFetch through
    /// librdkafka, from a client that does not join); `None` where nothing is committed.
    pub fn committed(
        &self,
        group: &str,
        topic: &str,
        partitions: &[i32],
    ) -> Result<BTreeMap<i32, Option<i64>>> {
        let consumer: BaseConsumer = self.group_config(group).create()?;
        let mut tpl = TopicPartitionList::new();
        for p in partitions {
            tpl.add_partition(topic, *p);
        }
        let got = consumer.committed_offsets(tpl, Duration::from_secs(10))?;
        let mut out = BTreeMap::new();
        for e in got.elements_for_topic(topic) {
            e.error()
                .with_context(|| format!("committed offset of {topic}-{}", e.partition()))?;
            let offset = match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            };
            out.insert(e.partition(), offset);
        }
        Ok(out)
    }

    /// The group as ListGroups/DescribeGroups show it (librdkafka's `fetch_group_list`);
    /// `None` if the broker does not list it.
    pub fn describe_group(&self, group: &str) -> Result<Option<GroupView>> {
        let client: BaseConsumer = self.client_config().create()?;
        let list = client.fetch_group_list(Some(group), Duration::from_secs(10))?;
        let Some(g) = list.groups().iter().find(|g| g.name() == group) else {
            return Ok(None);
        };
        let mut members = Vec::new();
        for m in g.members() {
            let assignment = match m.assignment() {
                Some(bytes) if !bytes.is_empty() => decode_assignment(bytes)
                    .with_context(|| format!("assignment of member {}", m.id()))?,
                _ => BTreeMap::new(),
            };
            members.push(MemberView {
                member_id: m.id().to_string(),
                client_id: m.client_id().to_string(),
                client_host: m.client_host().to_string(),
                assignment,
            });
        }
        Ok(Some(GroupView {
            name: g.name().to_string(),
            state: g.state().to_string(),
            protocol_type: g.protocol_type().to_string(),
            protocol: g.protocol().to_string(),
            members,
        }))
    }

    /// Every group the broker lists: (name, protocol type, state).
    pub fn list_groups(&self) -> Result<Vec<(String, String, String)>> {
        let client: BaseConsumer = self.client_config().create()?;
        let list = client.fetch_group_list(None, Duration::from_secs(10))?;
        Ok(list
            .groups()
            .iter()
            .map(|g| {
                (
                    g.name().to_string(),
                    g.protocol_type().to_string(),
                    g.state().to_string(),
                )
            })
            .collect())
    }
}

/// A group as DescribeGroups reports it.
#[derive(Clone, Debug)]
pub struct GroupView {
    pub name: String,
    pub state: String,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<MemberView>,
}

impl GroupView {
    /// The member with this `client.id`.
    pub fn member(&self, client_id: &str) -> Option<&MemberView> {
        self.members.iter().find(|m| m.client_id == client_id)
    }
}

/// One member in a [`GroupView`]; `assignment` is decoded from the consumer protocol.
#[derive(Clone, Debug)]
pub struct MemberView {
    pub member_id: String,
    pub client_id: String,
    pub client_host: String,
    pub assignment: BTreeMap<String, BTreeSet<i32>>,
}

impl MemberView {
    pub fn partitions(&self, topic: &str) -> BTreeSet<i32> {
        self.assignment.get(topic).cloned().unwrap_or_default()
    }
}

/// Decodes a consumer-protocol assignment (i16 version, then the body).
pub fn decode_assignment(bytes: &[u8]) -> Result<BTreeMap<String, BTreeSet<i32>>> {
    let mut buf = Bytes::copy_from_slice(bytes);
    ensure!(buf.remaining() >= 2, "assignment of {} bytes", bytes.len());
    let version = buf.get_i16();
    ensure!(version >= 0, "assignment version {version}");
    let a = ConsumerProtocolAssignment::decode(&mut buf, version.min(3))?;
    let mut out: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    for tp in a.assigned_partitions {
        out.entry(tp.topic.0.to_string())
            .or_default()
            .extend(tp.partitions);
    }
    Ok(out)
}

/// Encodes a consumer-protocol assignment at version 0.
pub fn encode_assignment(topic: &str, partitions: &[i32]) -> Bytes {
    let a = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![
        AssignedPartition::default()
            .with_topic(topic_name(topic))
            .with_partitions(partitions.to_vec()),
    ]);
    let mut buf = BytesMut::new();
    buf.put_i16(0);
    a.encode(&mut buf, 0).expect("encode assignment");
    buf.freeze()
}

/// Encodes a consumer-protocol subscription at version 0.
pub fn encode_subscription(topics: &[&str]) -> Bytes {
    let s = ConsumerProtocolSubscription::default().with_topics(
        topics
            .iter()
            .map(|t| StrBytes::from_string(t.to_string()))
            .collect(),
    );
    let mut buf = BytesMut::new();
    buf.put_i16(0);
    s.encode(&mut buf, 0).expect("encode subscription");
    buf.freeze()
}

#[derive(Default)]
struct MemberState {
    assignment: BTreeSet<i32>,
    /// Every distinct assignment seen, in order, with when it was first seen.
    history: Vec<(Instant, BTreeSet<i32>)>,
    records: Vec<ConsumedRecord>,
    errors: Vec<String>,
}

/// A subscribed librdkafka consumer polled on its own thread; records what it is assigned and
/// what it consumes. Dropping or [`Member::close`] closes the consumer (LeaveGroup).
pub struct Member {
    pub name: String,
    state: Arc<Mutex<MemberState>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Member {
    /// Starts a member subscribed to `topic` with `cfg` (which sets `group.id`).
    pub fn start(name: &str, cfg: ClientConfig, topic: &str) -> Member {
        let state = Arc::new(Mutex::new(MemberState::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (state, stop, topic) = (state.clone(), stop.clone(), topic.to_string());
            let name = name.to_string();
            thread::Builder::new()
                .name(format!("member-{name}"))
                .spawn(move || {
                    let consumer: BaseConsumer = cfg.create().expect("create member consumer");
                    consumer.subscribe(&[&topic]).expect("subscribe");
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
                        let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
                        match polled {
                            None => {}
                            Some(Ok(m)) => s.records.push(ConsumedRecord::from_message(&m)),
                            Some(Err(KafkaError::PartitionEOF(_))) => {}
                            Some(Err(e)) => s.errors.push(e.to_string()),
                        }
                        if s.history.last().map(|(_, a)| a) != Some(&assignment) {
                            s.history.push((Instant::now(), assignment.clone()));
                        }
                        s.assignment = assignment;
                    }
                    // Dropping the consumer closes it: LeaveGroup.
                    drop(consumer);
                })
                .expect("spawn member thread")
        };
        Member {
            name: name.to_string(),
            state,
            stop,
            thread: Some(thread),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, MemberState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// False once the member's thread has ended (it panicked, or was closed).
    pub fn is_alive(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Partitions of the subscribed topic assigned right now.
    pub fn assignment(&self) -> BTreeSet<i32> {
        self.state().assignment.clone()
    }

    /// Every distinct assignment this member had, in order.
    pub fn assignment_history(&self) -> Vec<BTreeSet<i32>> {
        self.state()
            .history
            .iter()
            .map(|(_, a)| a.clone())
            .collect()
    }

    /// When the member first had its current assignment.
    pub fn assigned_since(&self) -> Option<Instant> {
        self.state().history.last().map(|(t, _)| *t)
    }

    pub fn records(&self) -> Vec<ConsumedRecord> {
        self.state().records.clone()
    }

    pub fn record_count(&self) -> usize {
        self.state().records.len()
    }

    /// Consumer errors seen so far (last few).
    pub fn errors(&self) -> Vec<String> {
        let s = self.state();
        s.errors[s.errors.len().saturating_sub(5)..].to_vec()
    }

    /// Closes the consumer (leaving the group) and returns what it consumed.
    pub fn close(mut self) -> Vec<ConsumedRecord> {
        self.shutdown();
        self.records()
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            if t.join().is_err() && !thread::panicking() {
                panic!("member {} thread panicked", self.name);
            }
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Waits until the members' assignments are pairwise disjoint, together cover `0..partitions`,
/// and have not changed for `stable_for`; returns them (in `members` order).
pub fn wait_for_stable_assignment(
    members: &[&Member],
    partitions: i32,
    stable_for: Duration,
    timeout: Duration,
) -> Vec<BTreeSet<i32>> {
    let all: BTreeSet<i32> = (0..partitions).collect();
    let mut steady = Steady::new(stable_for);
    poll_until(
        timeout,
        || {
            for m in members {
                assert!(m.is_alive(), "member {} stopped: {:?}", m.name, m.errors());
            }
            let now: Vec<BTreeSet<i32>> = members.iter().map(|m| m.assignment()).collect();
            let total: usize = now.iter().map(BTreeSet::len).sum();
            let union: BTreeSet<i32> = now.iter().flatten().copied().collect();
            steady.observe((total == all.len() && union == all).then_some(now))
        },
        || {
            let report: Vec<String> = members
                .iter()
                .map(|m| {
                    format!(
                        "{}: now {:?}, history {:?}, errors {:?}",
                        m.name,
                        m.assignment(),
                        m.assignment_history(),
                        m.errors()
                    )
                })
                .collect();
            format!(
                "timed out after {timeout:?} waiting for a stable assignment of {partitions} \
                 partitions, each to exactly one member:\n{}",
                report.join("\n")
            )
        },
    )
}

/// A record line printed by `strata consume --print-offset`: `partition:offset\tvalue`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CliRecord {
    pub partition: i32,
    pub offset: i64,
    pub value: String,
}

/// `strata consume TOPIC --group G` as a child process (killed on drop).
pub struct CliMember {
    child: Option<Child>,
    records: Arc<Mutex<Vec<CliRecord>>>,
    output: Arc<Mutex<String>>,
}

impl CliMember {
    /// Starts `strata consume --group --print-offset --from-beginning` with extra `-X` properties.
    pub fn start(broker: &Broker, topic: &str, group: &str, properties: &[(&str, &str)]) -> Self {
        let bin = strata_bin();
        let mut cmd = Command::new(&bin);
        cmd.args(["consume", topic, "-b", &broker.kafka_addr, "--group", group])
            .args(["--print-offset", "--from-beginning"]);
        for (k, v) in properties {
            cmd.arg("-X").arg(format!("{k}={v}"));
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {} consume: {e}", bin.display()));
        let records = Arc::new(Mutex::new(Vec::new()));
        let output = Arc::new(Mutex::new(String::new()));
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        {
            let (records, output) = (records.clone(), output.clone());
            thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if let Some(r) = parse_cli_record(&line) {
                        records.lock().unwrap_or_else(|e| e.into_inner()).push(r);
                    } else {
                        let mut o = output.lock().unwrap_or_else(|e| e.into_inner());
                        o.push_str(&format!("[out] {line}\n"));
                    }
                }
            });
        }
        {
            let output = output.clone();
            thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    let mut o = output.lock().unwrap_or_else(|e| e.into_inner());
                    o.push_str(&format!("[err] {line}\n"));
                }
            });
        }
        CliMember {
            child: Some(child),
            records,
            output,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("cli member running").id()
    }

    /// Records printed so far.
    pub fn records(&self) -> Vec<CliRecord> {
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Everything else the process printed (stderr, unparsed stdout).
    pub fn output(&self) -> String {
        self.output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// SIGKILL: no LeaveGroup, no final commit.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("cli member running");
        child.kill().expect("kill -9 strata consume");
        let _ = child.wait();
    }
}

impl Drop for CliMember {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if thread::panicking() {
            eprintln!(
                "--- strata consume output ---\n{}--- end ---",
                self.output()
            );
        }
    }
}

fn parse_cli_record(line: &str) -> Option<CliRecord> {
    let (po, value) = line.split_once('\t')?;
    let (p, o) = po.split_once(':')?;
    Some(CliRecord {
        partition: p.parse().ok()?,
        offset: o.parse().ok()?,
        value: value.to_string(),
    })
}

/// Highest request versions [`GroupClient`] builds requests for (OffsetCommit stays below 9,
/// where a missing group answers GROUP_ID_NOT_FOUND; OffsetFetch below 8, which batches groups).
const CAPS: &[(ApiKey, i16)] = &[
    (ApiKey::FindCoordinator, 4),
    (ApiKey::JoinGroup, 5),
    (ApiKey::SyncGroup, 3),
    (ApiKey::Heartbeat, 3),
    (ApiKey::LeaveGroup, 3),
    (ApiKey::OffsetCommit, 8),
    (ApiKey::OffsetFetch, 7),
    (ApiKey::DeleteGroups, 1),
    (ApiKey::OffsetDelete, 0),
];

/// The result of a JoinGroup that completed.
#[derive(Clone, Debug)]
pub struct Joined {
    pub member_id: String,
    pub generation: i32,
    pub leader: String,
    pub protocol: Option<String>,
    pub members: Vec<String>,
}

/// One key's answer to a batched FindCoordinator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Coordinator {
    pub key: String,
    pub error: i16,
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

/// One partition's answer to OffsetFetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchedOffset {
    pub partition: i32,
    pub offset: i64,
    pub error: i16,
}

/// A raw connection speaking the group APIs at versions the broker advertises.
pub struct GroupClient {
    pub conn: KafkaConn,
    versions: HashMap<i16, (i16, i16)>,
}

fn group_id(g: &str) -> GroupId {
    GroupId(StrBytes::from_string(g.to_string()))
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

impl GroupClient {
    /// Connects and reads the broker's ApiVersions.
    pub fn connect(addr: &str) -> Result<GroupClient> {
        let mut conn = KafkaConn::connect(addr)?;
        let resp = conn.request(0, &ApiVersionsRequest::default())?;
        ensure!(
            resp.error_code == 0,
            "ApiVersions error {}",
            resp.error_code
        );
        let versions = resp
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
        Ok(GroupClient { conn, versions })
    }

    /// The broker's advertised (min, max) versions of `api`.
    pub fn advertised(&self, api: ApiKey) -> Option<(i16, i16)> {
        self.versions.get(&(api as i16)).copied()
    }

    /// The version used for `api`: the highest both the broker and this client support.
    pub fn version(&self, api: ApiKey) -> Result<i16> {
        let cap = CAPS
            .iter()
            .find(|(k, _)| *k == api)
            .map(|(_, v)| *v)
            .context("no cap for api")?;
        let Some((min, max)) = self.advertised(api) else {
            bail!("the broker does not advertise {api:?} in ApiVersions");
        };
        let v = max.min(cap);
        ensure!(
            v >= min,
            "broker supports {api:?} v{min}-{max}, this client at most v{cap}"
        );
        Ok(v)
    }

    /// FindCoordinator for one group (key type 0): (error, node id, host, port).
    pub fn find_coordinator(&mut self, group: &str) -> Result<(i16, i32, String, i32)> {
        let v = self.version(ApiKey::FindCoordinator)?.min(3);
        let mut req = FindCoordinatorRequest::default().with_key(s(group));
        if v >= 1 {
            req = req.with_key_type(0);
        }
        let resp = self.conn.request(v, &req)?;
        Ok((
            resp.error_code,
            resp.node_id.0,
            resp.host.to_string(),
            resp.port,
        ))
    }

    /// FindCoordinator v4+ with several keys: one answer per key.
    pub fn find_coordinators(&mut self, groups: &[&str]) -> Result<Vec<Coordinator>> {
        let v = self.version(ApiKey::FindCoordinator)?;
        ensure!(
            v >= 4,
            "batched FindCoordinator needs v4; broker advertises {:?}",
            self.advertised(ApiKey::FindCoordinator)
        );
        let req = FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(groups.iter().map(|g| s(g)).collect());
        let resp = self.conn.request(v, &req)?;
        Ok(resp
            .coordinators
            .into_iter()
            .map(|c| Coordinator {
                key: c.key.to_string(),
                error: c.error_code,
                node_id: c.node_id.0,
                host: c.host.to_string(),
                port: c.port,
            })
            .collect())
    }

    /// One JoinGroup request (protocol type "consumer", protocol "range" subscribing `topic`).
    pub fn join_request(
        &mut self,
        group: &str,
        member_id: &str,
        session_timeout_ms: i32,
        topic: &str,
    ) -> Result<JoinGroupResponse> {
        let v = self.version(ApiKey::JoinGroup)?;
        let mut req = JoinGroupRequest::default()
            .with_group_id(group_id(group))
            .with_session_timeout_ms(session_timeout_ms)
            .with_member_id(s(member_id))
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![JoinGroupRequestProtocol::default()
                .with_name(s("range"))
                .with_metadata(encode_subscription(&[topic]))]);
        if v >= 1 {
            req = req.with_rebalance_timeout_ms(session_timeout_ms);
        }
        self.conn.request(v, &req)
    }

    /// Joins as a new member (answering MEMBER_ID_REQUIRED with the id the broker gave) and
    /// returns the completed join, or the error code of the first join that failed otherwise.
    pub fn join(
        &mut self,
        group: &str,
        session_timeout_ms: i32,
        topic: &str,
    ) -> Result<std::result::Result<Joined, i16>> {
        let mut resp = self.join_request(group, "", session_timeout_ms, topic)?;
        if resp.error_code == group_error::MEMBER_ID_REQUIRED {
            ensure!(
                !resp.member_id.is_empty(),
                "MEMBER_ID_REQUIRED without a member id"
            );
            let id = resp.member_id.to_string();
            resp = self.join_request(group, &id, session_timeout_ms, topic)?;
        }
        if resp.error_code != group_error::NONE {
            return Ok(Err(resp.error_code));
        }
        Ok(Ok(Joined {
            member_id: resp.member_id.to_string(),
            generation: resp.generation_id,
            leader: resp.leader.to_string(),
            protocol: resp.protocol_name.map(|p| p.to_string()),
            members: resp
                .members
                .iter()
                .map(|m| m.member_id.to_string())
                .collect(),
        }))
    }

    /// SyncGroup; the leader passes `assignments` (member id, partitions of `topic`).
    /// Returns (error, the caller's partitions of `topic`).
    pub fn sync(
        &mut self,
        group: &str,
        generation: i32,
        member_id: &str,
        topic: &str,
        assignments: &[(&str, Vec<i32>)],
    ) -> Result<(i16, BTreeSet<i32>)> {
        let v = self.version(ApiKey::SyncGroup)?;
        let req = SyncGroupRequest::default()
            .with_group_id(group_id(group))
            .with_generation_id(generation)
            .with_member_id(s(member_id))
            .with_assignments(
                assignments
                    .iter()
                    .map(|(m, parts)| {
                        SyncGroupRequestAssignment::default()
                            .with_member_id(s(m))
                            .with_assignment(encode_assignment(topic, parts))
                    })
                    .collect(),
            );
        let resp = self.conn.request(v, &req)?;
        let mine = if resp.assignment.is_empty() {
            BTreeSet::new()
        } else {
            decode_assignment(&resp.assignment)?
                .remove(topic)
                .unwrap_or_default()
        };
        Ok((resp.error_code, mine))
    }

    pub fn heartbeat(&mut self, group: &str, generation: i32, member_id: &str) -> Result<i16> {
        let v = self.version(ApiKey::Heartbeat)?;
        let req = HeartbeatRequest::default()
            .with_group_id(group_id(group))
            .with_generation_id(generation)
            .with_member_id(s(member_id));
        Ok(self.conn.request(v, &req)?.error_code)
    }

    /// LeaveGroup for one member; returns the top-level error (or the member's, v3+).
    pub fn leave(&mut self, group: &str, member_id: &str) -> Result<i16> {
        let v = self.version(ApiKey::LeaveGroup)?;
        let mut req = LeaveGroupRequest::default().with_group_id(group_id(group));
        if v >= 3 {
            req = req.with_members(vec![MemberIdentity::default().with_member_id(s(member_id))]);
        } else {
            req = req.with_member_id(s(member_id));
        }
        let resp = self.conn.request(v, &req)?;
        if resp.error_code != 0 {
            return Ok(resp.error_code);
        }
        Ok(resp.members.first().map_or(0, |m| m.error_code))
    }

    /// OffsetCommit of `offsets` (partition, offset) of `topic`; returns (partition, error).
    pub fn commit(
        &mut self,
        group: &str,
        generation: i32,
        member_id: &str,
        topic: &str,
        offsets: &[(i32, i64)],
    ) -> Result<Vec<(i32, i16)>> {
        let v = self.version(ApiKey::OffsetCommit)?;
        let req = OffsetCommitRequest::default()
            .with_group_id(group_id(group))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(s(member_id))
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(
                    offsets
                        .iter()
                        .map(|(p, o)| {
                            OffsetCommitRequestPartition::default()
                                .with_partition_index(*p)
                                .with_committed_offset(*o)
                        })
                        .collect(),
                )]);
        let resp = self.conn.request(v, &req)?;
        let mut out = Vec::new();
        for t in resp.topics {
            ensure!(
                t.name.0.as_str() == topic,
                "OffsetCommit answered for topic {:?}",
                t.name.0
            );
            for p in t.partitions {
                out.push((p.partition_index, p.error_code));
            }
        }
        Ok(out)
    }

    /// A commit outside group management (generation -1, no member id) that must succeed.
    pub fn simple_commit_ok(&mut self, group: &str, topic: &str, offsets: &[(i32, i64)]) {
        let got = self
            .commit(group, -1, "", topic, offsets)
            .unwrap_or_else(|e| panic!("simple OffsetCommit for {group}: {e:#}"));
        let want: Vec<(i32, i16)> = offsets.iter().map(|(p, _)| (*p, 0)).collect();
        assert_eq!(
            got, want,
            "simple OffsetCommit for {group}: (partition, error)"
        );
    }

    /// OffsetFetch: (group-level error, per-partition answers by partition).
    pub fn fetch_offsets(
        &mut self,
        group: &str,
        topic: &str,
        partitions: &[i32],
    ) -> Result<(i16, Vec<FetchedOffset>)> {
        let v = self.version(ApiKey::OffsetFetch)?;
        let req = OffsetFetchRequest::default()
            .with_group_id(group_id(group))
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(topic_name(topic))
                .with_partition_indexes(partitions.to_vec())]));
        let resp = self.conn.request(v, &req)?;
        let mut out = Vec::new();
        for t in resp.topics {
            for p in t.partitions {
                out.push(FetchedOffset {
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    error: p.error_code,
                });
            }
        }
        out.sort_by_key(|f| f.partition);
        Ok((resp.error_code, out))
    }

    /// Committed offsets by partition; panics on any error.
    pub fn fetched_offsets(
        &mut self,
        group: &str,
        topic: &str,
        partitions: &[i32],
    ) -> BTreeMap<i32, i64> {
        let (err, parts) = self
            .fetch_offsets(group, topic, partitions)
            .unwrap_or_else(|e| panic!("OffsetFetch for {group}: {e:#}"));
        assert_eq!(err, 0, "OffsetFetch for {group}: group-level error");
        parts
            .into_iter()
            .map(|f| {
                assert_eq!(
                    f.error, 0,
                    "OffsetFetch for {group}: error of partition {}",
                    f.partition
                );
                (f.partition, f.offset)
            })
            .collect()
    }

    /// DeleteGroups: (group, error) per group.
    pub fn delete_groups(&mut self, groups: &[&str]) -> Result<Vec<(String, i16)>> {
        let v = self.version(ApiKey::DeleteGroups)?;
        let req = DeleteGroupsRequest::default()
            .with_groups_names(groups.iter().map(|g| group_id(g)).collect());
        let resp = self.conn.request(v, &req)?;
        Ok(resp
            .results
            .into_iter()
            .map(|r| (r.group_id.0.to_string(), r.error_code))
            .collect())
    }

    /// OffsetDelete: (group-level error, [(partition, error)]).
    pub fn offset_delete(
        &mut self,
        group: &str,
        topic: &str,
        partitions: &[i32],
    ) -> Result<(i16, Vec<(i32, i16)>)> {
        let v = self.version(ApiKey::OffsetDelete)?;
        let req = OffsetDeleteRequest::default()
            .with_group_id(group_id(group))
            .with_topics(vec![OffsetDeleteRequestTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|p| OffsetDeleteRequestPartition::default().with_partition_index(*p))
                        .collect(),
                )]);
        let resp = self.conn.request(v, &req)?;
        let mut out = Vec::new();
        for t in resp.topics {
            for p in t.partitions {
                out.push((p.partition_index, p.error_code));
            }
        }
        out.sort();
        Ok((resp.error_code, out))
    }
}

/// Asserts every expected record was consumed exactly once, with its value, and nothing else.
pub fn assert_exactly_once(records: &[ConsumedRecord], expected: &BTreeMap<(i32, i64), String>) {
    let mut seen: HashMap<(i32, i64), usize> = HashMap::new();
    for r in records {
        let key = (r.partition, r.offset);
        *seen.entry(key).or_default() += 1;
        let want = expected
            .get(&key)
            .unwrap_or_else(|| panic!("consumed unexpected record {}/{}", r.partition, r.offset));
        assert_eq!(
            r.value.as_deref(),
            Some(want.as_bytes()),
            "value at {}/{}",
            r.partition,
            r.offset
        );
    }
    let dups: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(dups.is_empty(), "records consumed more than once: {dups:?}");
    let missing: Vec<_> = expected.keys().filter(|k| !seen.contains_key(k)).collect();
    assert!(missing.is_empty(), "records never consumed: {missing:?}");
}
