//! The follower side: tasks fetch every partition this broker follows from each leader
//! broker, with the Kafka Fetch API (replica id set), as Kafka's replica fetcher threads do.
//! Each leader gets two: one for data topics and one for internal topics
//! (`__consumer_offsets`): before fetch sessions every round read and answered every partition
//! it named, and fifty idle offsets partitions in the data fetcher's rounds cost each
//! produce's replication about a third more CPU (measured in docs/benchmarks.md); on their own
//! they long-poll and wake only for commits. With sessions, a round asks the leader only about
//! the partitions whose position changed, and the leader reads only those and the ones that
//! woke (see [`WithLeader`] and `partition/changes.rs`).
//!
//! A follower of a tiered partition whose log ends below the remote log's end (a new replica,
//! or one back after a long absence) does not copy what the object store holds: it asks the
//! leader for the first offset not yet uploaded (ListOffsets EARLIEST_PENDING_UPLOAD,
//! KIP-1023), starts its log there and fetches only the tail; older offsets are served from
//! the remote tier by whichever replica leads. The leader-epoch history it needs begins with
//! the first batch it copies, which is what Kafka's OffsetForLeaderEpoch rule answers from
//! (an epoch older than any it knows ends where its first known epoch starts); the producer
//! state as of its start comes with the remote segment ending there
//! ([`RemoteProducers`]), so retries of batches it never copied are still duplicates.
//!
//! Invariants (docs/invariants.md 6):
//! - Before the first fetch at a leader epoch, the follower truncates: it asks the leader
//!   (OffsetForLeaderEpoch) where the follower's newest epoch ends and cuts its log there, so
//!   a suffix the new leader does not have is dropped before anything is appended after it.
//! - Batches are appended exactly as the leader holds them (offsets, epochs, bytes), each
//!   CRC-checked first; a follower's high watermark never passes its own log end.
//! - A fetch answered NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH stops fetching that
//!   partition until the metadata names its leader and epoch again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::{
    BrokerId, FetchRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::watch;

use super::leader_session::{Asked, LeaderSession};
use super::moves::{MoveBudget, MoveMetrics};
use crate::error::ErrorCode;
use crate::log::LogError;
use crate::node::Node;
use crate::partition::{Partition, RemoteProducers, TopicPartition};
use crate::protocol::client::{Client, ClientError};
use crate::security::inter_broker;
use crate::zones::{Direction, Kind};

/// Why a round with the leader ended early; the fetcher reconnects and starts again.
#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Log(#[from] LogError),
}

/// Fetch version used between brokers: topic names, current and last-fetched epochs.
const FETCH_VERSION: i16 = 12;
const OFFSET_FOR_EPOCH_VERSION: i16 = 4;
const LIST_OFFSETS_VERSION: i16 = 8;
/// How long the leader may hold a fetch with nothing new.
const FETCH_MAX_WAIT_MS: i32 = 500;
const FETCH_MAX_BYTES: i32 = 16 << 20;
const PARTITION_MAX_BYTES: i32 = 1 << 20;
/// Bound on one exchange with the leader.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause after a failure before trying the leader again.
const RETRY: Duration = Duration::from_millis(200);
/// Bytes the moving replicas of one fetch round may ask for together: a round also carries
/// the in-sync partitions of the same leader, whose acks=all writes wait for it.
const MOVE_ROUND_BYTES: i32 = 1 << 20;
/// Pause of a round that left moving replicas out for lack of budget, so the fetcher does not
/// spin while the budget refills.
const THROTTLE_PAUSE: Duration = Duration::from_millis(50);
/// Largest response accepted.
const MAX_RESPONSE: usize = 256 << 20;

/// A partition to follow, at the leader epoch the metadata gives.
#[derive(Clone)]
pub struct Assignment {
    pub partition: Arc<Partition>,
    pub leader_epoch: i32,
    /// This replica is being added by a reassignment and is not in sync yet: its fetches draw
    /// on the move budget.
    pub moving: bool,
}

/// The move budget and metrics, shared by every fetcher task.
#[derive(Clone)]
struct Moves {
    budget: Arc<MoveBudget>,
    metrics: Arc<MoveMetrics>,
}

/// Which fetcher a partition goes to: its leader, and whether its topic is internal.
type FetcherKey = (u64, bool);

/// The fetcher tasks, two per leader broker (data topics, internal topics).
pub struct Fetchers {
    node: Arc<Node>,
    remote: Arc<dyn RemoteProducers>,
    moves: Moves,
    by_leader: std::sync::Mutex<HashMap<FetcherKey, watch::Sender<Vec<Assignment>>>>,
}

impl Fetchers {
    pub fn new(node: Arc<Node>, remote: Arc<dyn RemoteProducers>) -> Fetchers {
        let moves = Moves {
            budget: Arc::new(MoveBudget::new(
                node.config.replica_move_max_bytes_per_second,
                node.clock.clone(),
            )),
            metrics: MoveMetrics::register(&node),
        };
        Fetchers {
            node,
            remote,
            moves,
            by_leader: Default::default(),
        }
    }

    /// Points every fetcher at the partitions this broker now follows from its leader,
    /// starting fetchers for new leaders.
    pub fn sync(&self) {
        let mut wanted: HashMap<FetcherKey, Vec<Assignment>> = HashMap::new();
        let state = self.node.metadata.state();
        let me = self.node.config.node_id;
        for p in self.node.partitions.hosted().all() {
            if let Some((leader, leader_epoch)) = p.replication().following() {
                let internal = p.tp.topic.starts_with("__");
                // Throttled while catching up only: once in the ISR (a move adding two replicas
                // completes when both are), acks=all writes wait for it, as in Kafka.
                let moving = state
                    .partition(&p.tp.topic, p.tp.partition)
                    .is_some_and(|i| i.adding.contains(&me) && !i.isr.contains(&me));
                wanted
                    .entry((leader, internal))
                    .or_default()
                    .push(Assignment {
                        partition: p.clone(),
                        leader_epoch,
                        moving,
                    });
            }
        }
        let mut fetchers = self.by_leader.lock().unwrap_or_else(|p| p.into_inner());
        for (key, tx) in fetchers.iter() {
            if !wanted.contains_key(key) {
                tx.send_replace(Vec::new());
            }
        }
        for (key, parts) in wanted {
            match fetchers.get(&key) {
                Some(tx) => {
                    tx.send_replace(parts);
                }
                None => {
                    let (tx, rx) = watch::channel(parts);
                    tokio::spawn(run(
                        self.node.clone(),
                        self.remote.clone(),
                        self.moves.clone(),
                        key.0,
                        rx,
                    ));
                    fetchers.insert(key, tx);
                }
            }
        }
    }

    /// Stops every fetcher (shutdown).
    pub fn stop(&self) {
        self.by_leader
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

/// One leader's fetch loop.
async fn run(
    node: Arc<Node>,
    remote: Arc<dyn RemoteProducers>,
    moves: Moves,
    leader: u64,
    mut assigned: watch::Receiver<Vec<Assignment>>,
) {
    let me = node.config.node_id;
    let client = format!("strata-replica-{me}");
    let mut conn: Option<Client> = None;
    // Kept across reconnections: a session outlives the connection that opened it.
    let mut with = WithLeader::default();
    let mut parts: Vec<Assignment> = Vec::new();
    // Where each assigned partition is in `parts`, rebuilt with it: a round looks up the
    // partitions its answer names, not every partition it follows.
    let mut places: HashMap<(String, i32), usize> = HashMap::new();
    // Whether to read the assignment again though `has_changed` says no: a wait saw the
    // change.
    let mut refresh = true;
    loop {
        // `Fetchers::stop` dropped the sender: shut down, whatever is assigned.
        match assigned.has_changed() {
            Err(_) => return,
            Ok(changed) if changed || refresh => {
                refresh = false;
                let before = std::mem::take(&mut parts);
                parts = assigned.borrow_and_update().clone();
                places = (parts.iter().enumerate())
                    .map(|(i, a)| ((a.partition.tp.topic.clone(), a.partition.tp.partition), i))
                    .collect();
                with.reassigned(&before, &parts);
            }
            Ok(_) => {}
        }
        if parts.is_empty() {
            conn = None;
            if assigned.changed().await.is_err() {
                return;
            }
            refresh = true;
            continue;
        }
        if conn.is_none() {
            let addr = node
                .metadata
                .state()
                .brokers
                .get(&leader)
                .map(|b| format!("{}:{}", b.host, b.port));
            match addr {
                Some(addr) => {
                    match inter_broker::connect(
                        &node.config,
                        &addr,
                        &client,
                        CALL_TIMEOUT,
                        MAX_RESPONSE,
                    )
                    .await
                    {
                        Ok(c) => conn = Some(c),
                        Err(e) => {
                            tracing::debug!(leader, %addr, error = %e, "cannot reach the leader to fetch from");
                            refresh |= wait(&mut assigned, RETRY).await;
                            continue;
                        }
                    }
                }
                None => {
                    refresh |= wait(&mut assigned, RETRY).await;
                    continue;
                }
            }
        }
        let c = conn.as_mut().expect("connected above");
        let result = round(
            &node, &*remote, &moves, c, leader, &parts, &places, &mut with,
        )
        .await;
        match result {
            Ok(Some(pause)) => refresh |= wait(&mut assigned, pause).await,
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(leader, error = %e, "replica fetch failed; reconnecting");
                conn = None;
                refresh |= wait(&mut assigned, RETRY).await;
            }
        }
    }
}

/// What a fetcher knows of its exchange with the leader, by place in its assignment.
///
/// Invariant: every place whose fetch position (truncated or not, log end, epoch, move grant)
/// may differ from what the leader's session holds is in `dirty`, or `all_dirty` is set; so
/// a round asks about those only, and a follower of 10,000 partitions pays for the ones that
/// changed.
#[derive(Default)]
struct WithLeader {
    /// The leader epoch each place was truncated for.
    truncated: Vec<Option<i32>>,
    /// Places truncated for their current epoch.
    ready: usize,
    /// Places to truncate before fetching them.
    untruncated: Vec<usize>,
    /// Places of replicas being moved here: their fetches draw on the move budget, each round.
    moving: Vec<usize>,
    dirty: Vec<usize>,
    is_dirty: Vec<bool>,
    all_dirty: bool,
    session: LeaderSession,
}

impl WithLeader {
    /// The assignment went from `before` to `parts`: truncations carry over for partitions
    /// still followed at the epoch they were done at; every place is dirty.
    fn reassigned(&mut self, before: &[Assignment], parts: &[Assignment]) {
        let kept: HashMap<&TopicPartition, i32> = (before.iter().zip(&self.truncated))
            .filter_map(|(a, t)| Some((&a.partition.tp, (*t)?)))
            .collect();
        self.truncated = (parts.iter())
            .map(|a| {
                kept.get(&a.partition.tp)
                    .copied()
                    .filter(|e| *e == a.leader_epoch)
            })
            .collect();
        self.ready = self.truncated.iter().filter(|t| t.is_some()).count();
        self.untruncated = (0..parts.len())
            .filter(|&i| self.truncated[i].is_none())
            .collect();
        self.moving = (0..parts.len()).filter(|&i| parts[i].moving).collect();
        self.dirty.clear();
        self.is_dirty = vec![false; parts.len()];
        self.all_dirty = true;
    }

    fn is_truncated(&self, place: usize, a: &Assignment) -> bool {
        self.truncated.get(place).copied().flatten() == Some(a.leader_epoch)
    }

    fn set_truncated(&mut self, place: usize, a: &Assignment) {
        if !self.is_truncated(place, a) {
            self.truncated[place] = Some(a.leader_epoch);
            self.ready += 1;
        }
        self.mark(place);
    }

    /// The place must be truncated again before it is fetched (a refusal, a failed append).
    fn untruncate(&mut self, place: usize) {
        if self.truncated[place].take().is_some() {
            self.ready -= 1;
            self.untruncated.push(place);
        }
        self.mark(place);
    }

    fn mark(&mut self, place: usize) {
        if !std::mem::replace(&mut self.is_dirty[place], true) {
            self.dirty.push(place);
        }
    }

    fn take_dirty(&mut self) -> Vec<usize> {
        let dirty = std::mem::take(&mut self.dirty);
        for &p in &dirty {
            self.is_dirty[p] = false;
        }
        dirty
    }
}

/// Sleeps up to `pause`, or until the assignment changes; whether it did (the change is then
/// marked seen, so the caller must read it).
async fn wait(assigned: &mut watch::Receiver<Vec<Assignment>>, pause: Duration) -> bool {
    tokio::time::timeout(pause, assigned.changed())
        .await
        .is_ok()
}

/// One round: truncate what needs it, then one Fetch. `Ok(Some(pause))` asks for a pause
/// (partitions waiting for new metadata). `places` indexes `parts`.
///
/// At thousands of partitions what a round costs per partition followed is the replication
/// latency of every acks=all write: a round asks about the places whose position changed
/// (`WithLeader`'s invariant), and looks up only the partitions the leader's answer names.
#[allow(clippy::too_many_arguments)]
async fn round(
    node: &Arc<Node>,
    remote: &dyn RemoteProducers,
    moves: &Moves,
    conn: &mut Client,
    leader: u64,
    parts: &[Assignment],
    places: &HashMap<(String, i32), usize>,
    with: &mut WithLeader,
) -> Result<Option<Duration>, FetchError> {
    let me = node.config.node_id as i32;
    let mut stale = false;
    if !with.untruncated.is_empty() {
        let todo: Vec<(usize, &Assignment)> = std::mem::take(&mut with.untruncated)
            .into_iter()
            .filter(|&i| !with.is_truncated(i, &parts[i]))
            .map(|i| (i, &parts[i]))
            .collect();
        for (place, done) in truncate(conn, remote, me, leader, &todo).await? {
            if done {
                with.set_truncated(place, &parts[place]);
            } else {
                with.untruncated.push(place);
                stale = true;
            }
        }
    }
    if with.ready == 0 {
        return Ok(Some(RETRY));
    }
    moves
        .budget
        .set_rate(node.settings().replica_move_max_bytes_per_second);
    // What the move budget granted each moving replica this round.
    let mut grants: HashMap<(&str, i32), u64> = HashMap::new();
    // Moving replicas share at most MOVE_ROUND_BYTES of each round, so a round carrying a
    // move stays short for the in-sync partitions in it.
    let mut move_room = MOVE_ROUND_BYTES;
    let full = with.all_dirty || with.session.needs_full();
    let dirty = with.take_dirty();
    let truncated = &with.truncated;
    // What the next fetch wants of the partition at `place` (`None`: not fetched).
    let mut want = |place: usize| -> Option<Asked> {
        let a = &parts[place];
        if truncated[place] != Some(a.leader_epoch) {
            return None;
        }
        let mut max_bytes = PARTITION_MAX_BYTES;
        if a.moving {
            if move_room == 0 {
                return None;
            }
            let granted = moves
                .budget
                .grant(PARTITION_MAX_BYTES.min(move_room) as u64);
            if granted == 0 {
                moves.metrics.throttled.inc();
                return None;
            }
            move_room -= granted as i32;
            grants.insert((&a.partition.tp.topic, a.partition.tp.partition), granted);
            max_bytes = granted as i32;
        }
        // This fetcher is the log's only writer, and every release of its lock publishes.
        let log_end = a.partition.published_offsets().log_end;
        Some(Asked {
            offset: log_end,
            max_bytes,
            leader_epoch: a.leader_epoch,
        })
    };
    // A moving replica left out for lack of budget is forgotten by the session until its
    // next grant, so the leader does not fetch it on its own.
    let asked = if full {
        let wanted: Vec<(&TopicPartition, Asked)> = (0..parts.len())
            .filter_map(|i| Some((&parts[i].partition.tp, want(i)?)))
            .collect();
        if wanted.is_empty() {
            // Only moving replicas, and the budget is spent: wait for it to refill.
            with.all_dirty = true;
            return Ok(Some(THROTTLE_PAUSE));
        }
        with.all_dirty = false;
        with.session.request(&wanted)
    } else {
        let changes: Vec<(&TopicPartition, Option<Asked>)> = (dirty.iter().chain(&with.moving))
            .map(|&i| (&parts[i].partition.tp, want(i)))
            .collect();
        let moving_ready = (with.moving.iter())
            .filter(|&&i| with.truncated[i] == Some(parts[i].leader_epoch))
            .count();
        if with.ready == moving_ready && grants.is_empty() {
            // Only moving replicas, and the budget is spent: wait for it to refill.
            for &i in &dirty {
                with.mark(i);
            }
            return Ok(Some(THROTTLE_PAUSE));
        }
        with.session.request_changed(&changes)
    };
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(me))
        .with_max_wait_ms(FETCH_MAX_WAIT_MS)
        .with_min_bytes(1)
        .with_max_bytes(FETCH_MAX_BYTES)
        .with_isolation_level(0)
        .with_session_id(asked.session_id)
        .with_session_epoch(asked.epoch)
        .with_topics(asked.topics)
        .with_forgotten_topics_data(asked.forgotten);
    let resp = match conn.call(FETCH_VERSION, &req).await {
        Ok(resp) => resp,
        Err(e) => {
            with.session.lost();
            return Err(e.into());
        }
    };
    with.session.answered(resp.session_id, resp.error_code);
    node.heard_from_leader(leader);
    if resp.error_code != 0 {
        // The session was refused (unknown, wrong epoch): the next round fetches in full.
        return Ok(None);
    }
    let mut replicated = 0u64;
    for t in resp.responses {
        let topic = t.topic.0.as_str().to_string();
        for pd in t.partitions {
            let Some((place, a)) = places
                .get(&(topic.clone(), pd.partition_index))
                .map(|&i| (i, &parts[i]))
                .filter(|(i, a)| with.is_truncated(*i, a))
            else {
                continue;
            };
            let p = &a.partition;
            if let Some(granted) = grants.get(&(t.topic.0.as_str(), pd.partition_index)) {
                let received = pd.records.as_ref().map_or(0, |r| r.len() as u64);
                moves.budget.settle(*granted, received);
                moves.metrics.fetched_bytes.inc_by(received);
            }
            match pd.error_code {
                0 => {
                    let records = pd.records.unwrap_or_default();
                    match p.append_replicated(&records, pd.high_watermark, (leader, a.leader_epoch))
                    {
                        Err(e) => {
                            tracing::error!(topic = %p.tp.topic, partition = p.tp.partition, error = %e, "appending replicated batches failed");
                            with.untruncate(place);
                            stale = true;
                        }
                        Ok(None) => {
                            tracing::debug!(topic = %p.tp.topic, partition = p.tp.partition, "leadership changed during the fetch; its answer is dropped");
                            with.untruncate(place);
                        }
                        Ok(Some(_)) if !records.is_empty() => {
                            node.metrics.replicated(records.len() as u64);
                            replicated += records.len() as u64;
                            with.mark(place);
                        }
                        Ok(Some(_)) => {}
                    }
                }
                code if code == ErrorCode::OffsetOutOfRange.code() => {
                    // The leader no longer has (or never had locally) the next offset: start
                    // again at its local log start.
                    let start = list_offset(conn, me, a, EARLIEST_LOCAL).await?;
                    tracing::warn!(topic = %p.tp.topic, partition = p.tp.partition, start, "follower out of the leader's local range: restarting at its local log start");
                    let producers = remote.producers_before(p, start).await.unwrap_or_default();
                    p.reset_to(start, (leader, a.leader_epoch), producers)?;
                    with.mark(place);
                }
                code => {
                    tracing::debug!(topic = %p.tp.topic, partition = p.tp.partition, code, "replica fetch refused; waiting for new metadata");
                    with.untruncate(place);
                    stale = true;
                }
            }
        }
    }
    if replicated > 0 {
        let state = node.metadata.state();
        let leader_zone = state.brokers.get(&leader).and_then(|b| b.rack.as_deref());
        (node.zones).count(Direction::In, Kind::Replication, leader_zone, replicated);
    }
    // A round that fetched in-sync partitions goes on at once even if moving ones sat out:
    // pausing would delay the ISR (and every acks=all write) for the move budget's sake.
    Ok(stale.then_some(RETRY))
}

/// Truncates each follower log in `parts` to where the leader says its newest epoch ends,
/// with one OffsetForLeaderEpoch for all of them (a new leader of thousands of partitions is
/// one round trip, not thousands). Returns each partition and whether it is done; not done when
/// the leader refused (not the leader, or another epoch): wait for metadata.
async fn truncate<'a>(
    conn: &mut Client,
    remote: &dyn RemoteProducers,
    me: i32,
    leader: u64,
    parts: &[(usize, &'a Assignment)],
) -> Result<Vec<(usize, bool)>, FetchError> {
    let mut done = Vec::with_capacity(parts.len());
    // Each partition to ask about, with its newest epoch and log end.
    let mut ask: HashMap<(&str, i32), (usize, &'a Assignment, i32, i64)> = HashMap::new();
    for &(place, a) in parts {
        let p = &a.partition;
        let (epoch, log_end) = p.latest_epoch_and_end();
        if p.is_tiered() && log_end < p.remote().end {
            if let Some(joined) = join_tiered(conn, remote, me, leader, a, log_end).await? {
                done.push((place, joined));
                continue;
            }
        }
        if epoch < 0 {
            // Nothing written under any epoch: nothing to cut.
            done.push((place, true));
            continue;
        }
        ask.insert((&p.tp.topic, p.tp.partition), (place, a, epoch, log_end));
    }
    if ask.is_empty() {
        return Ok(done);
    }
    let mut topics: Vec<OffsetForLeaderTopic> = Vec::new();
    let mut at: HashMap<&str, usize> = HashMap::new();
    for ((topic, partition), (_, a, epoch, _)) in &ask {
        let i = *at.entry(topic).or_insert_with(|| {
            topics.push(OffsetForLeaderTopic::default().with_topic(topic_name(topic)));
            topics.len() - 1
        });
        topics[i].partitions.push(
            OffsetForLeaderPartition::default()
                .with_partition(*partition)
                .with_current_leader_epoch(a.leader_epoch)
                .with_leader_epoch(*epoch),
        );
    }
    let req = OffsetForLeaderEpochRequest::default()
        .with_replica_id(BrokerId(me))
        .with_topics(topics);
    let resp = conn.call(OFFSET_FOR_EPOCH_VERSION, &req).await?;
    let from_leader = |a: &Assignment| (leader, a.leader_epoch);
    for t in &resp.topics {
        for r in &t.partitions {
            let Some((place, a, epoch, log_end)) = ask.remove(&(t.topic.0.as_str(), r.partition))
            else {
                continue;
            };
            let p = &a.partition;
            if r.error_code != 0 {
                tracing::debug!(topic = %p.tp.topic, partition = p.tp.partition, code = r.error_code, "OffsetForLeaderEpoch refused");
                done.push((place, false));
                continue;
            }
            // Kafka's rule: when the leader's answer is for an older epoch than ours, our own
            // end of that epoch may be lower still.
            let mut cut = r.end_offset;
            if r.leader_epoch != epoch && r.leader_epoch >= 0 {
                cut = cut.min(p.end_offset_for_epoch(r.leader_epoch).1);
            }
            if r.end_offset < 0 {
                // The leader knows no epoch at or below ours: keep nothing of ours.
                cut = -1;
            }
            if cut < log_end {
                tracing::warn!(topic = %p.tp.topic, partition = p.tp.partition, epoch, log_end, cut = cut.max(0),
                    leader_epoch = a.leader_epoch, "truncating the divergent suffix the new leader does not have");
                // At or below the local log start this empties the log and starts it there.
                done.push((place, p.truncate_to(cut.max(0), from_leader(a))?));
            } else {
                done.push((place, true));
            }
        }
    }
    // Partitions the answer left out are asked again next round.
    done.extend(ask.into_values().map(|(place, ..)| (place, false)));
    Ok(done)
}

/// A follower of a tiered partition whose log ends below the remote log's end starts at the
/// leader's first offset not yet uploaded, when that is past its own end. `Some(done)` when
/// that settled the partition; `None` when the usual truncation applies.
async fn join_tiered(
    conn: &mut Client,
    remote: &dyn RemoteProducers,
    me: i32,
    leader: u64,
    a: &Assignment,
    log_end: i64,
) -> Result<Option<bool>, FetchError> {
    let p = &a.partition;
    let start = match list_offset(conn, me, a, EARLIEST_PENDING_UPLOAD).await {
        Ok(start) => start,
        Err(FetchError::Client(ClientError::Refused(m))) => {
            tracing::debug!(topic = %p.tp.topic, partition = p.tp.partition, refused = %m, "the leader did not say where uploads end");
            return Ok(Some(false));
        }
        Err(e) => return Err(e),
    };
    if start <= log_end {
        return Ok(None);
    }
    let producers = remote.producers_before(p, start).await;
    tracing::info!(topic = %p.tp.topic, partition = p.tp.partition, log_end, start,
        producers = producers.as_ref().map(|s| s.len()),
        "joining a tiered partition at the first offset not in the object store; older offsets are served from the remote tier");
    Ok(Some(p.reset_to(
        start,
        (leader, a.leader_epoch),
        producers.unwrap_or_default(),
    )?))
}

/// ListOffsets EARLIEST_LOCAL: the leader's local log start.
const EARLIEST_LOCAL: i64 = -4;
/// ListOffsets EARLIEST_PENDING_UPLOAD (KIP-1023): the leader's first offset not yet in the
/// object store.
const EARLIEST_PENDING_UPLOAD: i64 = -6;

/// One of the leader's special offsets (`timestamp` is EARLIEST_LOCAL or
/// EARLIEST_PENDING_UPLOAD).
async fn list_offset(
    conn: &mut Client,
    me: i32,
    a: &Assignment,
    timestamp: i64,
) -> Result<i64, FetchError> {
    let p = &a.partition;
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(me))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(topic_name(&p.tp.topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(p.tp.partition)
                .with_current_leader_epoch(a.leader_epoch)
                .with_timestamp(timestamp)])]);
    let resp = conn.call(LIST_OFFSETS_VERSION, &req).await?;
    let r = resp
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or_else(|| ClientError::Refused("empty ListOffsets response".into()))?;
    if r.error_code != 0 {
        return Err(ClientError::Refused(format!("ListOffsets refused: {}", r.error_code)).into());
    }
    Ok(r.offset)
}
