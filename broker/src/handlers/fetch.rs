//! Fetch: whole batches from the requested offsets, zero-copy slices of the segment mappings,
//! or, below the local log start, checked batches from the remote tier's cache.
//! With `min_bytes` unmet the request waits (up to `max_wait_ms`) for an append to any of its
//! partitions to wake it: appends notify, nothing polls.
//!
//! A client with an incremental fetch session ([`crate::fetch_session`]) names only what
//! changed and hears only of partitions with news; librdkafka sends no sessions and names every
//! partition in every fetch. Either way each partition read costs only what a partition with
//! nothing new needs: topics are looked up once per request, partitions by index (no
//! allocation, no map lookup), and waiters are registered only by a fetch about to wait, at
//! most once per partition.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use indexmap::IndexMap;
use kafka_protocol::messages::FetchRequest;
use kafka_protocol::protocol::StrBytes;
use strata_metadata::acl::AclOperation;
use strata_metadata::ClusterState;
use tokio::sync::Notify;

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::fetch_session::{Answer, Cached, Context, Session, TopicKey, View, Visit};
use crate::log::txn_index::AbortedTxn;
use crate::partition::{Hosted, Offsets, Partition, Read};
use crate::protocol::fetch_response::{self as wire, FetchResponse};
use crate::security::Access;

/// The partitions of one topic a fetch reads.
struct Wanted {
    key: TopicKey,
    topic: StrBytes,
    topic_id: uuid::Uuid,
    partitions: Vec<WantedPartition>,
}

/// One requested partition: what was asked (and, in a session, last answered), and the
/// partition or why there is none.
struct WantedPartition {
    index: i32,
    asked: Cached,
    /// Named by this request (every partition of a full fetch; in an incremental fetch, those
    /// whose position or size changed).
    named: bool,
    /// Its place in the fetch's session (incremental fetches).
    place: Option<usize>,
    partition: Option<Arc<Partition>>,
    error: Option<ApiError>,
}

/// Consumers need READ on each topic; a follower (a broker id in the request) needs
/// CLUSTER_ACTION on the cluster. A refused topic's partitions answer
/// TOPIC_AUTHORIZATION_FAILED and the others are read as usual.
pub async fn handle(
    broker: &Arc<Broker>,
    req: FetchRequest,
    version: i16,
    access: &Access,
) -> FetchResponse {
    // A follower sets its broker id (v15+: in the replica state); consumers send -1.
    let replica_id = if version >= 15 {
        req.replica_state.replica_id.0
    } else {
        req.replica_id.0
    };
    let replica = u64::try_from(replica_id).ok();
    let context = match broker
        .fetch_sessions
        .context(&req, version, broker.node.clock.instant())
    {
        Ok(c) => c,
        Err(code) => return FetchResponse::error(code.code()),
    };
    let resolver = Resolver::new(broker, access, replica.is_some());
    // A follower's incremental fetch reports to the leader's bookkeeping only the partitions
    // it names (their position moved); the others' positions are as reported before, and are
    // reported again once per quarter `replica_lag_time_max_ms`, so that a caught-up follower
    // of an idle partition still counts as caught up. At 10,000 partitions, reporting every
    // partition on every fetch was most of a replication round's time.
    let report_all = match (&context, replica) {
        (Context::Incremental(s), Some(_)) => {
            let every = Duration::from_millis(broker.node.config.replica_lag_time_max_ms / 4);
            let mut s = s.lock().unwrap_or_else(|p| p.into_inner());
            s.report_all_due(broker.node.clock.instant(), every)
        }
        _ => true,
    };
    // An incremental fetch reads the partitions of its session that changed since the last
    // one (and those it names), and waits on one change set for all of them.
    let mut visit = match &context {
        Context::Incremental(s) => Some(visit(&resolver, &req, version, s, report_all)),
        _ => None,
    };
    let mut wanted = match (&context, &visit) {
        (Context::Incremental(s), Some(v)) => session_wanted(&resolver, s, v),
        _ => full_wanted(&resolver, &req, version),
    };

    // A wait on tokio's clock (paused in tests), not a decision on the broker's.
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(req.max_wait_ms.max(0) as u64);
    let min_bytes = req.min_bytes.max(0) as usize;
    let max_bytes = if req.max_bytes <= 0 {
        usize::MAX
    } else {
        req.max_bytes as usize
    };
    let notify = Arc::new(Notify::new());
    let incremental = matches!(context, Context::Incremental(_));
    let pass = Pass {
        max_bytes,
        replica,
        committed: replica.is_none() && req.isolation_level == 1,
        incremental,
        sessionless: matches!(context, Context::Sessionless),
    };
    // Whether every partition holds `notify` in its waiter list since the last wake-up.
    let mut watching = false;
    let mut first = true;
    let reply = loop {
        let report = first.then_some(report_all);
        let reply = read_all(broker, &wanted, &pass, report).await;
        first = false;
        if reply.bytes >= min_bytes || reply.errors || tokio::time::Instant::now() >= deadline {
            break reply;
        }
        if let (Some(v), Context::Incremental(s)) = (&mut visit, &context) {
            if tokio::time::timeout_at(deadline, v.visit.changes.changed())
                .await
                .is_err()
            {
                break read_all(broker, &wanted, &pass, None).await;
            }
            let more = s
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .visit_more(&v.visit.changes, &mut v.visit.places);
            if !more {
                break read_all(broker, &wanted, &pass, None).await;
            }
            wanted = session_wanted(&resolver, s, v);
            continue;
        }
        if !watching {
            // Only a fetch about to wait registers, and then reads once more, so an append
            // between the read above and the registration is not missed.
            for w in &wanted {
                for wp in &w.partitions {
                    if let Some(p) = &wp.partition {
                        p.watch(&notify);
                    }
                }
            }
            watching = true;
            continue;
        }
        if tokio::time::timeout_at(deadline, notify.notified())
            .await
            .is_err()
        {
            break read_all(broker, &wanted, &pass, None).await;
        }
        // The partition that woke us dropped its registration; the others keep theirs.
        watching = false;
    };
    // A partition left out for the response's size still has news: the next fetch reads it.
    if let Some(v) = &visit {
        for &(w, i) in &reply.behind {
            if let Some(place) = wanted[w].partitions[i].place {
                v.visit.changes.mark(place);
            }
        }
    }
    broker.node.metrics.fetched(reply.bytes as u64);
    let session_id = remember(broker, context, version, replica.is_some(), &wanted, &reply);
    FetchResponse {
        session_id,
        ..reply.response
    }
}

/// An incremental fetch's visit of its session, with the places its request names.
struct SessionVisit {
    visit: Visit,
    /// Sorted.
    named: Vec<usize>,
}

/// Which places of its session an incremental fetch reads (see [`Session::visit`]).
fn visit(
    resolver: &Resolver<'_>,
    req: &FetchRequest,
    version: i16,
    session: &Mutex<Session>,
    all: bool,
) -> SessionVisit {
    let mut s = session.lock().unwrap_or_else(|p| p.into_inner());
    let mut named: Vec<usize> = (req.topics.iter())
        .flat_map(|t| {
            let key = TopicKey::of(version, &t.topic, t.topic_id);
            let s = &s;
            t.partitions
                .iter()
                .filter_map(move |p| s.place_of(&(key.clone(), p.partition)))
        })
        .collect();
    named.sort_unstable();
    let view = View {
        state: resolver.state.clone(),
        hosted: resolver.hosted.clone(),
    };
    let visit = s.visit(view, &named, all);
    SessionVisit { visit, named }
}

/// The partitions an incremental fetch reads: the places of its visit, from where the last
/// fetch left off. On a visit of every place, each partition found is subscribed to the
/// session's change set.
fn session_wanted(
    resolver: &Resolver<'_>,
    session: &Mutex<Session>,
    v: &SessionVisit,
) -> Vec<Wanted> {
    let s = session.lock().unwrap_or_else(|p| p.into_inner());
    let mut wanted: Vec<Wanted> = Vec::new();
    let mut run: Vec<(i32, Cached, bool, Option<usize>)> = Vec::new();
    let mut order = (v.visit.places.iter())
        .filter_map(|&place| Some((place, s.at(place)?)))
        .peekable();
    // Consecutive partitions of one topic are resolved together.
    while let Some((place, ((key, index), cached))) = order.next() {
        let named = v.named.binary_search(&place).is_ok();
        run.push((*index, *cached, named, Some(place)));
        if order.peek().is_none_or(|(_, ((next, _), _))| next != key) {
            wanted.push(resolver.topic(key.clone(), run.drain(..)));
        }
    }
    if v.visit.all {
        for w in &wanted {
            for wp in &w.partitions {
                if let (Some(p), Some(place)) = (&wp.partition, wp.place) {
                    p.subscribe(&v.visit.changes, place);
                }
            }
        }
    }
    wanted
}

/// The partitions a full fetch reads: those it names.
fn full_wanted(resolver: &Resolver<'_>, req: &FetchRequest, version: i16) -> Vec<Wanted> {
    req.topics
        .iter()
        .map(|t| {
            let asked = t.partitions.iter().map(|p| {
                let c = Cached::asked(
                    p.fetch_offset,
                    p.partition_max_bytes,
                    p.current_leader_epoch,
                );
                (p.partition, c, true, None)
            });
            resolver.topic(TopicKey::of(version, &t.topic, t.topic_id), asked)
        })
        .collect()
}

/// Keeps what the reply told the client in its session (opening one for a full fetch that
/// asked); returns the session id for the response.
fn remember(
    broker: &Arc<Broker>,
    context: Context,
    version: i16,
    follower: bool,
    wanted: &[Wanted],
    reply: &Reply,
) -> i32 {
    let key = |w: usize, i: usize| (wanted[w].key.clone(), wanted[w].partitions[i].index);
    match context {
        Context::Sessionless => 0,
        Context::New => {
            let partitions: IndexMap<(TopicKey, i32), Cached> = (reply.answers.iter())
                .map(|(w, i, a)| (key(*w, *i), wanted[*w].partitions[*i].asked.told(a)))
                .collect();
            // A session holds no more partitions than the cluster has: what a client can make
            // the broker keep is bounded by the cluster, not by the size of its request.
            let cluster: usize = (broker.node.metadata.state().topics.values())
                .map(|t| t.partitions.len())
                .sum();
            if partitions.len() > cluster {
                return 0;
            }
            (broker.fetch_sessions).create(
                follower,
                version,
                partitions,
                broker.node.clock.instant(),
            )
        }
        Context::Incremental(session) => {
            let told: Vec<((TopicKey, i32), Answer)> = (reply.answers.iter())
                .map(|(w, i, a)| (key(*w, *i), *a))
                .collect();
            let mut s = session.lock().unwrap_or_else(|p| p.into_inner());
            s.answered(told.iter().map(|(k, a)| (k, *a)));
            s.id()
        }
    }
}

/// Looks partitions up in one metadata state and one set of hosted partitions.
struct Resolver<'a> {
    broker: &'a Arc<Broker>,
    state: Arc<ClusterState>,
    hosted: Arc<Hosted>,
    access: &'a Access,
    /// A follower's fetch: `Some(allowed)`, decided once for the request.
    replica_allowed: Option<bool>,
}

impl<'a> Resolver<'a> {
    fn new(broker: &'a Arc<Broker>, access: &'a Access, replica: bool) -> Resolver<'a> {
        Resolver {
            broker,
            state: broker.node.metadata.state(),
            hosted: broker.node.partitions.hosted(),
            access,
            replica_allowed: replica.then(|| access.cluster(AclOperation::ClusterAction)),
        }
    }

    /// Whether the fetch may read topic `name` (an unknown topic too: whether it exists is
    /// told only to whoever may read it).
    fn may_read(&self, name: &str) -> bool {
        match self.replica_allowed {
            Some(allowed) => allowed,
            None => self.access.topic(AclOperation::Read, name),
        }
    }

    /// One topic's partitions, each checked: this broker leads it at the epoch asked.
    fn topic(
        &self,
        key: TopicKey,
        asked: impl Iterator<Item = (i32, Cached, bool, Option<usize>)>,
    ) -> Wanted {
        let (info, missing) = match &key {
            TopicKey::Id(id) => (self.state.topic_by_id(id), ErrorCode::UnknownTopicId),
            TopicKey::Name(n) => (
                self.state.topic(n.0.as_str()),
                ErrorCode::UnknownTopicOrPartition,
            ),
        };
        let name = match (&key, info) {
            (_, Some(i)) => i.name.as_str(),
            (TopicKey::Name(n), None) => n.0.as_str(),
            (TopicKey::Id(_), None) => "",
        };
        // Looked up once per topic; each partition is then an index.
        let slots = info
            .and_then(|i| self.hosted.topic(&i.name))
            .unwrap_or_default();
        let authorized = matches!((&key, info), (TopicKey::Id(_), None)) || self.may_read(name);
        let partitions = asked
            .map(|(index, asked, named, place)| {
                let result = match info {
                    _ if !authorized => Err(ApiError::new(
                        ErrorCode::TopicAuthorizationFailed,
                        format!("reading {name} is not authorized"),
                    )),
                    None => Err(ApiError::new(missing, format!("unknown {name}-{index}"))),
                    Some(i) => {
                        let at = usize::try_from(index).ok();
                        self.broker.node.check_leader(
                            name,
                            index,
                            at.and_then(|x| i.partitions.get(x)).map(|x| &**x),
                            at.and_then(|x| slots.get(x)).and_then(Option::as_ref),
                            asked.current_leader_epoch,
                        )
                    }
                };
                let (partition, error) = match result {
                    Ok(part) => (Some(part), None),
                    Err(e) => (None, Some(e)),
                };
                WantedPartition {
                    index,
                    asked,
                    named,
                    place,
                    partition,
                    error,
                }
            })
            .collect();
        let topic_id = match (&key, info) {
            (TopicKey::Id(id), _) => *id,
            (_, Some(i)) => i.topic_id,
            _ => uuid::Uuid::nil(),
        };
        let topic = str_bytes(name.to_string());
        Wanted {
            key,
            topic,
            topic_id,
            partitions,
        }
    }
}

/// One partition's batches from `offset`, from whichever tier holds them, and for a
/// read_committed consumer the aborted transactions among them. A remote read runs on the
/// tier's low-priority threads ([`crate::tier::Tier::spawn`]).
async fn read(
    broker: &Arc<Broker>,
    p: Arc<Partition>,
    offset: i64,
    max_bytes: usize,
    pass: &Pass,
    report: bool,
) -> Result<(bytes::Bytes, Offsets, Vec<AbortedTxn>), ApiError> {
    if let Some(follower) = pass.replica {
        if report {
            crate::replication::follower_fetched(&broker.node, &p, follower, offset);
        }
        let (bytes, offsets) = p.read_replica(offset, max_bytes)?;
        return Ok((bytes, offsets, Vec::new()));
    }
    match p.read(offset, max_bytes, pass.committed)? {
        (Read::Local(bytes, aborted), offsets) => Ok((bytes, offsets, aborted)),
        (Read::Remote(segment), offsets) if pass.committed => {
            let (bytes, aborted) = broker
                .tier
                .read_partition_committed(p, segment, offset, max_bytes, offsets.last_stable)
                .await?;
            Ok((bytes, offsets, aborted))
        }
        (Read::Remote(segment), offsets) => Ok((
            broker
                .tier
                .read_partition(p, segment, offset, max_bytes)
                .await?,
            offsets,
            Vec::new(),
        )),
    }
}

/// Whether a fetch from `offset` has nothing to read: a consumer at the high watermark (at
/// the last stable offset if it reads committed), a follower at the log end (read from the
/// published offsets; a write racing this check is seen by the read after the fetch
/// registers to wait, or wakes it).
fn caught_up(p: &Partition, offset: i64, pass: &Pass) -> bool {
    let o = p.published_offsets();
    let end = match pass.replica {
        None if pass.committed => o.last_stable,
        None => o.high_watermark,
        Some(_) => o.log_end,
    };
    offset == end && offset >= o.log_start
}

/// One pass's answer.
struct Reply {
    response: FetchResponse,
    /// Record bytes in it.
    bytes: usize,
    /// Whether a partition had an error (which answers the fetch at once).
    errors: bool,
    /// What each partition in the response said, by its place in the wanted list (for the
    /// session).
    answers: Vec<(usize, usize, Answer)>,
    /// Partitions with records to read that the response left out for its size.
    behind: Vec<(usize, usize)>,
}

/// How a fetch reads: the same for each of its passes.
struct Pass {
    max_bytes: usize,
    replica: Option<u64>,
    /// A read_committed consumer (isolation level 1).
    committed: bool,
    /// Answers only the partitions with news.
    incremental: bool,
    /// Keeps no record of what each partition was told (there is no session to tell).
    sessionless: bool,
}

/// One pass over the requested partitions. An incremental fetch answers only the partitions
/// with news for its client. A follower's position is reported to the leader's bookkeeping on
/// the first pass only (`report` is `Some`): the passes after a wait read from the same
/// offsets, and at 10,000 partitions reporting each pass was most of an idle leader's CPU. On
/// that pass, `Some(false)` reports only the partitions the request names.
async fn read_all(
    broker: &Arc<Broker>,
    wanted: &[Wanted],
    pass: &Pass,
    report: Option<bool>,
) -> Reply {
    let Pass {
        max_bytes,
        replica,
        incremental,
        sessionless,
        ..
    } = *pass;
    let mut total = 0usize;
    let mut errors = false;
    let mut answers = Vec::new();
    let mut behind = Vec::new();
    let mut topics = Vec::with_capacity(if incremental { 0 } else { wanted.len() });
    for (w_at, w) in wanted.iter().enumerate() {
        let mut partitions = Vec::with_capacity(if incremental { 0 } else { w.partitions.len() });
        for (
            p_at,
            WantedPartition {
                index,
                asked,
                named,
                partition: part,
                error: err,
                ..
            },
        ) in w.partitions.iter().enumerate()
        {
            let report = report.is_some_and(|all| all || *named);
            let offset = asked.fetch_offset;
            let partition_max = asked.max_bytes.max(0) as usize;
            let result = match (part, err) {
                (_, Some(e)) => Err(e.code),
                (Some(p), None) if caught_up(p, offset, pass) => {
                    // Nothing new: answered from the published offsets, without the log lock.
                    if let (Some(follower), true) = (replica, report) {
                        crate::replication::follower_fetched(&broker.node, p, follower, offset);
                    }
                    Ok((bytes::Bytes::new(), p.published_offsets(), Vec::new()))
                }
                (Some(p), None) => {
                    // After the first non-empty partition, stay within the request's max_bytes.
                    let budget = if total == 0 {
                        partition_max
                    } else {
                        partition_max.min(max_bytes.saturating_sub(total))
                    };
                    if budget == 0 && total > 0 {
                        // The response is full: this partition is answered from its published
                        // offsets (a consumer reading 10,000 partitions from the beginning
                        // names thousands of these per fetch; each took the log lock).
                        behind.push((w_at, p_at));
                        Ok((bytes::Bytes::new(), p.published_offsets(), Vec::new()))
                    } else {
                        let read = read(broker, p.clone(), offset, budget.max(1), pass, report);
                        read.await.map_err(|e| e.code)
                    }
                }
                (None, None) => Err(ErrorCode::UnknownTopicOrPartition),
            };
            let answer = match &result {
                Ok((records, offsets, _)) => Answer {
                    records: records.len(),
                    high_watermark: offsets.high_watermark,
                    last_stable: offsets.last_stable,
                    log_start: offsets.log_start,
                    error: false,
                },
                Err(_) => Answer {
                    records: 0,
                    high_watermark: -1,
                    last_stable: -1,
                    log_start: -1,
                    error: true,
                },
            };
            if incremental && !answer.is_news(asked) {
                continue;
            }
            if !sessionless {
                answers.push((w_at, p_at, answer));
            }
            partitions.push(match result {
                Ok((records, offsets, aborted)) => {
                    total += records.len();
                    wire::Partition {
                        index: *index,
                        error_code: 0,
                        high_watermark: offsets.high_watermark,
                        last_stable_offset: offsets.last_stable,
                        log_start_offset: offsets.log_start,
                        aborted: pass.committed.then(|| {
                            aborted
                                .iter()
                                .map(|a| (a.producer_id, a.first_offset))
                                .collect()
                        }),
                        records,
                    }
                }
                Err(code) => {
                    errors = true;
                    wire::Partition {
                        index: *index,
                        error_code: code.code(),
                        high_watermark: -1,
                        last_stable_offset: -1,
                        log_start_offset: -1,
                        aborted: None,
                        records: bytes::Bytes::new(),
                    }
                }
            });
        }
        if partitions.is_empty() && incremental {
            continue;
        }
        topics.push(wire::Topic {
            name: w.topic.clone(),
            topic_id: w.topic_id,
            partitions,
        });
    }
    Reply {
        response: FetchResponse {
            throttle_time_ms: 0,
            error_code: 0,
            session_id: 0,
            topics,
        },
        bytes: total,
        errors,
        answers,
        behind,
    }
}
