//! Incremental fetch sessions (KIP-227). A client names its partitions once, in a full fetch
//! that opens a session; later fetches of the session (incremental ones) carry only the
//! partitions whose fetch offset or size changed and those it forgets, and are answered with
//! only the partitions that have news: records, a new high watermark or log start, an error.
//! A consumer or follower of 10,000 mostly idle partitions then sends and receives a few bytes
//! per fetch instead of 10,000 entries each way.
//!
//! Request metadata, as Kafka reads it: epoch 0 (with any session id) is a full fetch that
//! closes that session and asks for a new one; epoch -1 is a full fetch that closes it and asks
//! for none; any other epoch is an incremental fetch of an existing session, which must carry
//! the session's current epoch (the one after the epoch it last accepted, wrapping to 1).
//!
//! Cache bounds and eviction, as Kafka's `FetchSessionCache`: at most
//! `max_incremental_fetch_session_cache_slots` sessions. A new session that finds the cache full
//! may evict, first, the least recently used session if it has been idle for
//! [`STALE_AFTER`]; else the least valuable evictable session if the new one is worth at least
//! as much, where followers' sessions outrank consumers' and more partitions outrank fewer. A
//! session younger than [`STALE_AFTER`] can be evicted only by a follower's, and a follower's
//! only once it is that old, so new sessions do not thrash each other out. A fetch that finds
//! no slot is still answered, as a full fetch without a session (session id 0).
//!
//! Invariants (invariant 12 of docs/invariants.md):
//! - A session's epoch moves on when an incremental fetch is accepted, before the fetch waits:
//!   a retried or concurrent request with the same epoch is refused
//!   (INVALID_FETCH_SESSION_EPOCH), never applied twice. It moves by exactly one, past
//!   `i32::MAX` to 1, and is never 0 or -1 (those mean full fetches); checked in debug builds.
//! - What the session last answered for a partition (high watermark, log start) is what the
//!   next incremental response compares with; an error is remembered as high watermark -1, so
//!   the partition is sent again once the error clears.
//! - Sessions are not tied to connections: a client may carry one to a new connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use indexmap::IndexMap;
use kafka_protocol::messages::{FetchRequest, TopicName};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

use crate::error::ErrorCode;
use crate::node::Node;
use crate::partition::{ChangeSet, Hosted};
use strata_metadata::ClusterState;

/// Epoch of a full fetch that asks for a new session.
pub const INITIAL_EPOCH: i32 = 0;
/// Epoch of a full fetch that closes its session and asks for none.
pub const FINAL_EPOCH: i32 = -1;
/// A session unused this long may be evicted by any new session (Kafka's
/// `min.incremental.fetch.session.eviction.ms`, 120 s).
pub const STALE_AFTER: Duration = Duration::from_secs(120);
/// First fetch version with session fields.
const FIRST_SESSION_VERSION: i16 = 7;
/// First fetch version naming topics by id.
const FIRST_TOPIC_ID_VERSION: i16 = 13;

/// How a session names a topic: by id from fetch v13, by name before.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TopicKey {
    Id(uuid::Uuid),
    Name(TopicName),
}

impl TopicKey {
    /// The key a fetch of `version` names a topic by.
    pub fn of(version: i16, name: &TopicName, id: uuid::Uuid) -> TopicKey {
        if version >= FIRST_TOPIC_ID_VERSION {
            TopicKey::Id(id)
        } else {
            TopicKey::Name(name.clone())
        }
    }
}

/// What a session keeps of one partition: what the client asked for last, and what it was
/// last told.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cached {
    pub fetch_offset: i64,
    pub max_bytes: i32,
    pub current_leader_epoch: i32,
    pub high_watermark: i64,
    pub last_stable: i64,
    pub log_start: i64,
}

impl Cached {
    /// A partition as a request names it, before anything was answered.
    pub fn asked(fetch_offset: i64, max_bytes: i32, current_leader_epoch: i32) -> Cached {
        Cached {
            fetch_offset,
            max_bytes,
            current_leader_epoch,
            high_watermark: -1,
            last_stable: -1,
            log_start: -1,
        }
    }
}

impl Cached {
    /// This request after `answer` was sent.
    pub fn told(self, answer: &Answer) -> Cached {
        Cached {
            high_watermark: if answer.error {
                -1
            } else {
                answer.high_watermark
            },
            last_stable: answer.last_stable,
            log_start: answer.log_start,
            ..self
        }
    }
}

/// The news of one partition in a response, compared with what the session last sent.
#[derive(Debug, Clone, Copy)]
pub struct Answer {
    pub records: usize,
    pub high_watermark: i64,
    pub last_stable: i64,
    pub log_start: i64,
    pub error: bool,
    /// The client was sent to another replica (KIP-392's preferred read replica).
    pub redirected: bool,
}

impl Answer {
    /// Whether a client that was last told `sent` must hear of this partition.
    pub fn is_news(&self, sent: &Cached) -> bool {
        self.records > 0
            || self.error
            || self.redirected
            || self.high_watermark != sent.high_watermark
            || self.last_stable != sent.last_stable
            || self.log_start != sent.log_start
    }
}

/// One session: its partitions in fetch order.
#[derive(Debug)]
pub struct Session {
    id: i32,
    /// The epoch the next incremental fetch must carry.
    epoch: i32,
    topic_ids: bool,
    partitions: IndexMap<(TopicKey, i32), Cached>,
    /// Where the next fetch starts: after the last partition that returned records, so a
    /// response filled to `max_bytes` does not starve the partitions after it.
    start: usize,
    /// A follower's session: when a fetch last reported every partition's position to the
    /// leader's bookkeeping (see `handlers/fetch.rs`).
    reported_all_at: Option<Instant>,
    /// Partitions were added or forgotten since the last [`Session::visit`]: places moved.
    reshaped: bool,
    /// What the last fetch read against, and the set its partitions mark when they change.
    watch: Option<(View, Arc<ChangeSet>)>,
}

/// The metadata and hosted partitions a fetch resolved its partitions in. While both stay the
/// same, a partition of a session can only change by waking (see [`ChangeSet`]).
pub struct View {
    pub state: Arc<ClusterState>,
    pub hosted: Arc<Hosted>,
}

impl View {
    fn same(&self, other: &View) -> bool {
        Arc::ptr_eq(&self.state, &other.state) && Arc::ptr_eq(&self.hosted, &other.hosted)
    }
}

impl std::fmt::Debug for View {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("View")
    }
}

/// What one fetch of a session reads.
pub struct Visit {
    /// Places in the session, in fetch order.
    pub places: Vec<usize>,
    /// Whether that is every place; the fetch then subscribes each partition to `changes`
    /// ([`crate::partition::Partition::subscribe`]) under its place.
    pub all: bool,
    pub changes: Arc<ChangeSet>,
}

impl Session {
    pub fn id(&self) -> i32 {
        self.id
    }

    /// Whether a follower's fetch at `now` must report every partition's position (the first,
    /// and then one every `every`), not only those it names; marks it done when so.
    pub fn report_all_due(&mut self, now: Instant, every: Duration) -> bool {
        let due = self
            .reported_all_at
            .is_none_or(|at| now.saturating_duration_since(at) >= every);
        if due {
            self.reported_all_at = Some(now);
        }
        due
    }

    /// The places a fetch reads, in fetch order: every partition when `all` is asked, when the
    /// session's partitions were added or forgotten, or when `view` is not what the last fetch
    /// resolved in (a leadership moved, a partition was opened or deleted); else only those
    /// marked changed since the last fetch and those the request `named`.
    pub fn visit(&mut self, view: View, named: &[usize], all: bool) -> Visit {
        let n = self.partitions.len();
        let changes = match &self.watch {
            Some((_, set)) if !self.reshaped => set.clone(),
            _ => ChangeSet::new(n),
        };
        let all = all
            || self.reshaped
            || self
                .watch
                .as_ref()
                .is_none_or(|(seen, _)| !seen.same(&view));
        self.reshaped = false;
        self.watch = Some((view, changes.clone()));
        let places = if all {
            // Everything is read now: what was marked before is in this read.
            changes.take();
            let start = if n == 0 { 0 } else { self.start % n };
            (start..n).chain(0..start).collect()
        } else {
            let mut places = changes.take();
            places.extend(named.iter().copied().filter(|&p| p < n));
            self.in_fetch_order(places)
        };
        Visit {
            places,
            all,
            changes,
        }
    }

    /// Places marked in `changes` since the visit that returned it, added to `places` in fetch
    /// order; `false` when the session has another set since (the fetch answers with what it
    /// has).
    pub fn visit_more(&self, changes: &Arc<ChangeSet>, places: &mut Vec<usize>) -> bool {
        if !matches!(&self.watch, Some((_, set)) if Arc::ptr_eq(set, changes)) || self.reshaped {
            return false;
        }
        let n = self.partitions.len();
        let more = changes.take();
        let mut all = std::mem::take(places);
        all.extend(more.into_iter().filter(|&p| p < n));
        *places = self.in_fetch_order(all);
        true
    }

    /// `places`, without repeats, in the order this session reads its partitions: from
    /// `start` round to it.
    fn in_fetch_order(&self, places: impl IntoIterator<Item = usize>) -> Vec<usize> {
        let n = self.partitions.len().max(1);
        let start = self.start % n;
        let mut places: Vec<usize> = places.into_iter().collect();
        places.sort_unstable_by_key(|&p| (p + n - start) % n);
        places.dedup();
        places
    }

    /// The place of a partition in the session.
    pub fn place_of(&self, key: &(TopicKey, i32)) -> Option<usize> {
        self.partitions.get_index_of(key)
    }

    /// The partition at `place`, and what the session holds of it.
    pub fn at(&self, place: usize) -> Option<(&(TopicKey, i32), &Cached)> {
        self.partitions.get_index(place)
    }

    /// Records what the client was told of each partition in the response.
    pub fn answered<'a>(&mut self, answers: impl Iterator<Item = (&'a (TopicKey, i32), Answer)>) {
        let mut last_with_records = None;
        for (key, a) in answers {
            if let Some((i, _, c)) = self.partitions.get_full_mut(key) {
                *c = c.told(&a);
                if a.records > 0 {
                    last_with_records = Some(i);
                }
            }
        }
        if let Some(i) = last_with_records {
            self.start = i + 1;
        }
    }

    /// Applies an incremental request: partitions added or changed, partitions forgotten
    /// (one never in the session is ignored, as Kafka does).
    fn update(&mut self, req: &FetchRequest, version: i16) {
        for t in &req.forgotten_topics_data {
            let topic = TopicKey::of(version, &t.topic, t.topic_id);
            for p in &t.partitions {
                self.reshaped |= self.partitions.swap_remove(&(topic.clone(), *p)).is_some();
            }
        }
        for t in &req.topics {
            let topic = TopicKey::of(version, &t.topic, t.topic_id);
            for p in &t.partitions {
                let asked = Cached::asked(
                    p.fetch_offset,
                    p.partition_max_bytes,
                    p.current_leader_epoch,
                );
                match self.partitions.get_mut(&(topic.clone(), p.partition)) {
                    Some(c) => {
                        c.fetch_offset = asked.fetch_offset;
                        c.max_bytes = asked.max_bytes;
                        c.current_leader_epoch = asked.current_leader_epoch;
                    }
                    None => {
                        self.partitions.insert((topic.clone(), p.partition), asked);
                        self.reshaped = true;
                    }
                }
            }
        }
    }
}

/// What a fetch is, once its session metadata is read.
pub enum Context {
    /// A full fetch with no session wanted: every named partition is answered.
    Sessionless,
    /// A full fetch asking for a session: every named partition is answered, and the session
    /// is created from the answer ([`FetchSessions::create`]) if a slot can be had.
    New,
    /// An incremental fetch of an accepted session.
    Incremental(Arc<Mutex<Session>>),
}

/// A cached session with what eviction weighs.
struct Entry {
    session: Arc<Mutex<Session>>,
    privileged: bool,
    created: Instant,
    last_used: Instant,
    /// Partitions at the last use (Kafka's cached size).
    size: usize,
}

impl Entry {
    /// Eviction order: consumers before followers, then fewer partitions, then lower id.
    fn value(&self, id: i32) -> (bool, usize, i32) {
        (self.privileged, self.size, id)
    }
}

#[derive(Default)]
struct Metrics {
    sessions: Gauge,
    partitions: Gauge,
    evictions: Counter,
    refused: Counter,
    incremental: Counter,
}

/// The broker's fetch sessions.
pub struct FetchSessions {
    slots: usize,
    sessions: Mutex<HashMap<i32, Entry>>,
    metrics: Metrics,
}

impl FetchSessions {
    /// A cache of `slots` sessions (0 turns sessions off: every fetch is answered in full).
    pub fn new(slots: usize) -> FetchSessions {
        FetchSessions {
            slots,
            sessions: Mutex::new(HashMap::new()),
            metrics: Metrics::default(),
        }
    }

    /// Registers the cache's metrics with the node's registry.
    pub fn register_metrics(&self, node: &Node) {
        let m = &self.metrics;
        node.metrics.register(|r| {
            r.register(
                "fetch_sessions",
                "Incremental fetch sessions cached (KIP-227)",
                m.sessions.clone(),
            );
            r.register(
                "fetch_session_partitions",
                "Partitions held by all cached fetch sessions",
                m.partitions.clone(),
            );
            r.register(
                "fetch_session_evictions",
                "Fetch sessions evicted to make room for new ones",
                m.evictions.clone(),
            );
            r.register(
                "fetch_incremental",
                "Incremental fetches served from a session",
                m.incremental.clone(),
            );
            r.register(
                "fetch_session_errors",
                "Incremental fetches refused: unknown session or wrong epoch",
                m.refused.clone(),
            );
        });
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<i32, Entry>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads a fetch's session metadata; an incremental fetch is applied to its session here.
    pub fn context(
        &self,
        req: &FetchRequest,
        version: i16,
        now: Instant,
    ) -> Result<Context, ErrorCode> {
        if version < FIRST_SESSION_VERSION {
            return Ok(Context::Sessionless);
        }
        let mut sessions = self.lock();
        if req.session_epoch == INITIAL_EPOCH || req.session_epoch == FINAL_EPOCH {
            if req.session_id != 0 {
                sessions.remove(&req.session_id);
                self.count(&sessions);
            }
            return Ok(if req.session_epoch == INITIAL_EPOCH && self.slots > 0 {
                Context::New
            } else {
                Context::Sessionless
            });
        }
        let refuse = |code| {
            self.metrics.refused.inc();
            Err(code)
        };
        let Some(entry) = sessions.get_mut(&req.session_id) else {
            return refuse(ErrorCode::FetchSessionIdNotFound);
        };
        let session = entry.session.clone();
        let mut s = session.lock().unwrap_or_else(|p| p.into_inner());
        if s.epoch != req.session_epoch {
            return refuse(ErrorCode::InvalidFetchSessionEpoch);
        }
        if s.topic_ids != (version >= FIRST_TOPIC_ID_VERSION) {
            return refuse(ErrorCode::FetchSessionTopicIdError);
        }
        s.update(req, version);
        if s.partitions.is_empty() {
            // Everything forgotten: the session ends, the (empty) fetch is answered without it.
            drop(s);
            sessions.remove(&req.session_id);
            self.count(&sessions);
            return Ok(Context::Sessionless);
        }
        let accepted = s.epoch;
        s.epoch = next_epoch(s.epoch);
        check_epoch(accepted, s.epoch);
        self.metrics.incremental.inc();
        entry.last_used = now;
        entry.size = s.partitions.len();
        drop(s);
        self.count(&sessions);
        Ok(Context::Incremental(session))
    }

    /// Opens a session of the partitions a full fetch answered (what each asked for and was
    /// told) if a slot is free or can be freed; returns its id, or 0 when there is none.
    pub fn create(
        &self,
        privileged: bool,
        version: i16,
        partitions: IndexMap<(TopicKey, i32), Cached>,
        now: Instant,
    ) -> i32 {
        if self.slots == 0 || partitions.is_empty() {
            return 0;
        }
        let mut sessions = self.lock();
        if sessions.len() >= self.slots
            && !self.evict_one(&mut sessions, privileged, partitions.len(), now)
        {
            return 0;
        }
        let id = loop {
            let id = random_id();
            if id > 0 && !sessions.contains_key(&id) {
                break id;
            }
        };
        let size = partitions.len();
        let session = Session {
            id,
            epoch: next_epoch(INITIAL_EPOCH),
            topic_ids: version >= FIRST_TOPIC_ID_VERSION,
            partitions,
            start: 0,
            reported_all_at: None,
            reshaped: false,
            watch: None,
        };
        sessions.insert(
            id,
            Entry {
                session: Arc::new(Mutex::new(session)),
                privileged,
                created: now,
                last_used: now,
                size,
            },
        );
        self.count(&sessions);
        id
    }

    /// Frees a slot for a new session of `size` partitions, by Kafka's rules (module doc).
    fn evict_one(
        &self,
        sessions: &mut HashMap<i32, Entry>,
        privileged: bool,
        size: usize,
        now: Instant,
    ) -> bool {
        let lru = sessions
            .iter()
            .min_by_key(|(id, e)| (e.last_used, **id))
            .map(|(id, e)| (*id, e.last_used));
        let victim = match lru {
            Some((id, used)) if now.saturating_duration_since(used) > STALE_AFTER => Some(id),
            _ => sessions
                .iter()
                .filter(|(_, e)| {
                    let old = now.saturating_duration_since(e.created) > STALE_AFTER;
                    old || (privileged && !e.privileged)
                })
                .min_by_key(|(id, e)| e.value(**id))
                .filter(|(_, e)| (privileged, size) >= (e.privileged, e.size))
                .map(|(id, _)| *id),
        };
        match victim {
            Some(id) => {
                sessions.remove(&id);
                self.metrics.evictions.inc();
                true
            }
            None => false,
        }
    }

    fn count(&self, sessions: &HashMap<i32, Entry>) {
        self.metrics.sessions.set(sessions.len() as i64);
        self.metrics
            .partitions
            .set(sessions.values().map(|e| e.size as i64).sum());
    }

    /// Sessions cached now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The epoch after `epoch`: wraps to 1, as 0 and -1 mean full fetches.
fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

/// Invariant 12 (docs/invariants.md): the epoch after an accepted `accepted` is the next one.
fn check_epoch(accepted: i32, next: i32) {
    debug_assert!(
        next >= 1 && (next == accepted.wrapping_add(1) || (accepted == i32::MAX && next == 1)),
        "invariant 12 (docs/invariants.md): fetch session epoch {accepted} moved to {next}"
    );
}

/// A session id unlikely to be reused across broker restarts, so a client's stale id is
/// refused rather than matched to someone else's session.
fn random_id() -> i32 {
    let b = uuid::Uuid::new_v4().into_bytes();
    i32::from_le_bytes([b[0], b[1], b[2], b[3]]) & i32::MAX
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
    use kafka_protocol::protocol::StrBytes;

    const V: i16 = 12;

    fn name(t: &str) -> TopicName {
        TopicName(StrBytes::from_string(t.to_string()))
    }

    fn key(t: &str, p: i32) -> (TopicKey, i32) {
        (TopicKey::Name(name(t)), p)
    }

    fn parts(n: i32) -> IndexMap<(TopicKey, i32), Cached> {
        (0..n)
            .map(|p| (key("t", p), Cached::asked(0, 1024, 0)))
            .collect()
    }

    fn fetch(id: i32, epoch: i32) -> FetchRequest {
        FetchRequest::default()
            .with_session_id(id)
            .with_session_epoch(epoch)
    }

    fn with_partition(req: FetchRequest, t: &str, p: i32, offset: i64) -> FetchRequest {
        req.with_topics(vec![FetchTopic::default()
            .with_topic(name(t))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(p)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1024)])])
    }

    fn forgetting(req: FetchRequest, t: &str, p: i32) -> FetchRequest {
        req.with_forgotten_topics_data(vec![ForgottenTopic::default()
            .with_topic(name(t))
            .with_partitions(vec![p])])
    }

    fn incremental(c: &FetchSessions, req: &FetchRequest) -> Arc<Mutex<Session>> {
        match c.context(req, V, crate::clock::Clock::manual(0).instant()) {
            Ok(Context::Incremental(s)) => s,
            Ok(_) => panic!("not incremental"),
            Err(e) => panic!("refused: {e:?}"),
        }
    }

    fn view(state: &Arc<ClusterState>, hosted: &Arc<Hosted>) -> View {
        View {
            state: state.clone(),
            hosted: hosted.clone(),
        }
    }

    #[test]
    fn a_visit_reads_what_changed_and_everything_when_places_or_metadata_moved() {
        let c = FetchSessions::new(10);
        let id = c.create(true, V, parts(6), crate::clock::Clock::manual(0).instant());
        let (state, hosted) = (
            Arc::new(ClusterState::default()),
            Arc::new(Hosted::default()),
        );
        let s = incremental(&c, &fetch(id, 1));
        let mut s = s.lock().unwrap();
        // The first incremental fetch reads everything and subscribes it.
        let v = s.visit(view(&state, &hosted), &[], false);
        assert!(v.all);
        assert_eq!(v.places, vec![0, 1, 2, 3, 4, 5]);
        // Then only what was marked and what the request names, in fetch order, once each.
        v.changes.mark(4);
        v.changes.mark(1);
        v.changes.mark(4);
        let v = s.visit(view(&state, &hosted), &[3, 1], false);
        assert!(!v.all);
        assert_eq!(v.places, vec![1, 3, 4]);
        let v2 = s.visit(view(&state, &hosted), &[], false);
        assert!(v2.places.is_empty(), "marks are taken once");
        assert!(Arc::ptr_eq(&v.changes, &v2.changes));
        // A mark while the fetch waits is added to what it reads.
        let mut places = v2.places;
        v2.changes.mark(5);
        assert!(s.visit_more(&v2.changes, &mut places));
        assert_eq!(places, vec![5]);
        // The rotation of the fetch order applies to a visit too.
        s.start = 3;
        v2.changes.mark(0);
        v2.changes.mark(4);
        assert_eq!(
            s.visit(view(&state, &hosted), &[], false).places,
            vec![4, 0]
        );
        s.start = 0;
        // New metadata: everything once, with the same set.
        let state2 = Arc::new(ClusterState::default());
        let v3 = s.visit(view(&state2, &hosted), &[], false);
        assert!(v3.all && v3.places.len() == 6);
        assert!(Arc::ptr_eq(&v3.changes, &v2.changes));
        assert!(!s.visit(view(&state2, &hosted), &[], false).all);
        // Asked for (a follower's periodic report): everything.
        assert!(s.visit(view(&state2, &hosted), &[], true).all);
        // A partition forgotten: places moved, so a new set and everything once; the old set
        // is no longer the session's, and a fetch waiting on it answers with what it has.
        s.update(&forgetting(fetch(id, 2), "t", 2), V);
        let v4 = s.visit(view(&state2, &hosted), &[], false);
        assert!(v4.all && v4.places.len() == 5);
        assert!(!Arc::ptr_eq(&v4.changes, &v3.changes));
        assert!(!s.visit_more(&v3.changes, &mut Vec::new()));
        // A place out of range (from a set made for more places) is never read.
        v4.changes.mark(5);
        assert!(s
            .visit(view(&state2, &hosted), &[7], false)
            .places
            .is_empty());
    }

    #[test]
    fn full_fetch_epochs_open_or_close() {
        let c = FetchSessions::new(10);
        let now = crate::clock::Clock::manual(0).instant();
        assert!(matches!(
            c.context(&fetch(0, INITIAL_EPOCH), V, now),
            Ok(Context::New)
        ));
        assert!(matches!(
            c.context(&fetch(0, FINAL_EPOCH), V, now),
            Ok(Context::Sessionless)
        ));
        // Before v7 there are no sessions.
        assert!(matches!(
            c.context(&fetch(0, INITIAL_EPOCH), 6, now),
            Ok(Context::Sessionless)
        ));
        let id = c.create(false, V, parts(3), now);
        assert!(id > 0);
        assert_eq!(c.len(), 1);
        // A full fetch naming the session closes it, whether or not it asks for another.
        assert!(matches!(
            c.context(&fetch(id, FINAL_EPOCH), V, now),
            Ok(Context::Sessionless)
        ));
        assert!(c.is_empty());
        let id = c.create(false, V, parts(3), now);
        assert!(matches!(
            c.context(&fetch(id, INITIAL_EPOCH), V, now),
            Ok(Context::New)
        ));
        assert!(c.is_empty());
        // Sessions off: full fetches only.
        let off = FetchSessions::new(0);
        assert!(matches!(
            off.context(&fetch(0, INITIAL_EPOCH), V, now),
            Ok(Context::Sessionless)
        ));
        assert_eq!(off.create(false, V, parts(3), now), 0);
    }

    #[test]
    fn incremental_fetches_update_add_and_forget() {
        let c = FetchSessions::new(10);
        let id = c.create(false, V, parts(3), crate::clock::Clock::manual(0).instant());
        let s = incremental(&c, &with_partition(fetch(id, 1), "t", 1, 50));
        {
            let s = s.lock().unwrap();
            assert_eq!(s.partitions[&key("t", 1)].fetch_offset, 50);
            assert_eq!(s.partitions[&key("t", 0)].fetch_offset, 0);
        }
        // A new partition joins; one is forgotten; one never in the session is ignored.
        let req = forgetting(with_partition(fetch(id, 2), "u", 0, 7), "t", 0);
        let s = incremental(&c, &req);
        {
            let s = s.lock().unwrap();
            assert_eq!(s.partitions.len(), 3);
            assert!(!s.partitions.contains_key(&key("t", 0)));
            assert_eq!(s.partitions[&key("u", 0)].fetch_offset, 7);
        }
        let s = incremental(&c, &forgetting(fetch(id, 3), "nope", 9));
        assert_eq!(s.lock().unwrap().partitions.len(), 3);
        // Forgetting everything ends the session.
        let mut req = fetch(id, 4);
        req.forgotten_topics_data = vec![
            ForgottenTopic::default()
                .with_topic(name("t"))
                .with_partitions(vec![1, 2]),
            ForgottenTopic::default()
                .with_topic(name("u"))
                .with_partitions(vec![0]),
        ];
        assert!(matches!(
            c.context(&req, V, crate::clock::Clock::manual(0).instant()),
            Ok(Context::Sessionless)
        ));
        assert!(c.is_empty());
    }

    #[test]
    fn epochs_out_of_order_and_unknown_ids_are_refused() {
        let c = FetchSessions::new(10);
        let now = crate::clock::Clock::manual(0).instant();
        let id = c.create(false, V, parts(2), now);
        let other = c.create(false, V, parts(2), now);
        assert!(matches!(
            c.context(&fetch(id, 2), V, now),
            Err(ErrorCode::InvalidFetchSessionEpoch)
        ));
        incremental(&c, &fetch(id, 1));
        // The same epoch again (a retry after a lost response) is refused.
        assert!(matches!(
            c.context(&fetch(id, 1), V, now),
            Err(ErrorCode::InvalidFetchSessionEpoch)
        ));
        assert!(matches!(
            c.context(&fetch(id.wrapping_add(1).max(1) ^ 0x55, 1), V, now),
            Err(ErrorCode::FetchSessionIdNotFound)
        ));
        // A session opened with topic names cannot go on with topic ids.
        assert!(matches!(
            c.context(&fetch(id, 2), 13, now),
            Err(ErrorCode::FetchSessionTopicIdError)
        ));
        // None of that disturbed either session.
        incremental(&c, &fetch(id, 2));
        incremental(&c, &fetch(other, 1));
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn epoch_wraps_past_max_to_one() {
        assert_eq!(next_epoch(i32::MAX), 1);
        assert_eq!(next_epoch(INITIAL_EPOCH), 1);
    }

    #[test]
    fn session_moves_between_connections() {
        // Nothing ties a session to the connection that opened it: any request with the id and
        // epoch goes on with it (a consumer that reconnected).
        let c = Arc::new(FetchSessions::new(10));
        let id = c.create(false, V, parts(2), crate::clock::Clock::manual(0).instant());
        let c2 = c.clone();
        std::thread::spawn(move || {
            incremental(&c2, &fetch(id, 1));
        })
        .join()
        .unwrap();
        incremental(&c, &fetch(id, 2));
    }

    #[test]
    fn answers_record_what_was_sent_and_rotate() {
        let c = FetchSessions::new(10);
        let id = c.create(false, V, parts(4), crate::clock::Clock::manual(0).instant());
        let s = incremental(&c, &fetch(id, 1));
        let mut s = s.lock().unwrap();
        let sent = s.partitions[&key("t", 1)];
        let quiet = Answer {
            records: 0,
            high_watermark: -1,
            last_stable: -1,
            log_start: -1,
            error: false,
            redirected: false,
        };
        assert!(!quiet.is_news(&sent));
        // A client sent to another replica hears it even with nothing else new.
        assert!(Answer {
            redirected: true,
            ..quiet
        }
        .is_news(&sent));
        assert!(Answer {
            records: 10,
            ..quiet
        }
        .is_news(&sent));
        assert!(Answer {
            high_watermark: 5,
            ..quiet
        }
        .is_news(&sent));
        assert!(Answer {
            error: true,
            ..quiet
        }
        .is_news(&sent));
        let k1 = key("t", 1);
        s.answered(
            [(
                &k1,
                Answer {
                    records: 10,
                    high_watermark: 5,
                    last_stable: 5,
                    log_start: 0,
                    error: false,
                    redirected: false,
                },
            )]
            .into_iter(),
        );
        assert_eq!(s.partitions[&k1].high_watermark, 5);
        // The next fetch starts after the partition that returned records.
        let order: Vec<i32> = (s.in_fetch_order(0..4).into_iter())
            .map(|p| s.at(p).unwrap().0 .1)
            .collect();
        assert_eq!(order, vec![2, 3, 0, 1]);
        // An error is remembered as high watermark -1: sent again once it clears.
        s.answered(
            [(
                &k1,
                Answer {
                    error: true,
                    ..quiet
                },
            )]
            .into_iter(),
        );
        assert_eq!(s.partitions[&k1].high_watermark, -1);
        assert!(Answer {
            high_watermark: 5,
            ..quiet
        }
        .is_news(&s.partitions[&k1]));
    }

    #[test]
    fn eviction_follows_kafka() {
        let t0 = crate::clock::Clock::manual(0).instant();
        let old = t0 + STALE_AFTER + Duration::from_secs(1);

        // Full of young consumer sessions: a consumer cannot take a slot, a follower can,
        // from the least valuable one.
        let c = FetchSessions::new(2);
        let small = c.create(false, V, parts(2), t0);
        let big = c.create(false, V, parts(5), t0);
        assert_eq!(c.create(false, V, parts(10), t0), 0);
        assert!(c.create(true, V, parts(1), t0) > 0);
        assert_eq!(c.metrics.evictions.get(), 1);
        assert!(!c.lock().contains_key(&small) && c.lock().contains_key(&big));

        // A young follower session is safe even from another follower.
        let c = FetchSessions::new(1);
        c.create(true, V, parts(1), t0);
        assert_eq!(c.create(true, V, parts(100), t0), 0);

        // Once older than STALE_AFTER (though in use), a session may be evicted by one worth
        // at least as much: more partitions.
        let c = FetchSessions::new(1);
        let id = c.create(false, V, parts(5), t0);
        assert!(matches!(
            c.context(&fetch(id, 1), V, old),
            Ok(Context::Incremental(_))
        ));
        assert_eq!(c.create(false, V, parts(1), old), 0);
        assert!(c.create(false, V, parts(6), old) > 0);
        assert!(!c.lock().contains_key(&id));

        // A session unused for STALE_AFTER goes first, whatever its value.
        let c = FetchSessions::new(1);
        let id = c.create(true, V, parts(100), t0);
        assert!(c.create(false, V, parts(1), old) > 0);
        assert!(!c.lock().contains_key(&id));
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "invariant 12")]
    fn a_session_epoch_that_skips_is_caught() {
        check_epoch(i32::MAX, 1);
        check_epoch(5, 6);
        check_epoch(5, 7);
    }
}
