//! The fetch session's part in a fetch (see [`crate::fetch_session`] for the sessions
//! themselves): which places of its session an incremental fetch visits, which positions a
//! follower's fetch reports to the leader's bookkeeping, and what the session keeps of what
//! the fetch answered.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use indexmap::IndexMap;
use kafka_protocol::messages::FetchRequest;

use super::pass::Reply;
use super::plan::{Resolver, Wanted};
use crate::broker::Broker;
use crate::fetch_session::{Answer, Cached, Context, Session, TopicKey, View, Visit};

/// Whether a follower's fetch reports every partition's position, not only those it names.
///
/// A follower's incremental fetch reports to the leader's bookkeeping only the partitions it
/// names (their position moved); the others' positions are as reported before, and are
/// reported again once per quarter `replica_lag_time_max_ms`, so that a caught-up follower of
/// an idle partition still counts as caught up. At 10,000 partitions, reporting every
/// partition on every fetch was most of a replication round's time.
pub(super) fn report_all(broker: &Broker, context: &Context, replica: Option<u64>) -> bool {
    match (context, replica) {
        (Context::Incremental(s), Some(_)) => {
            let every = Duration::from_millis(broker.node.config.replica_lag_time_max_ms / 4);
            let mut s = s.lock().unwrap_or_else(|p| p.into_inner());
            s.report_all_due(broker.node.clock.instant(), every)
        }
        _ => true,
    }
}

/// An incremental fetch's visit of its session, with the places its request names.
pub(super) struct SessionVisit {
    pub(super) visit: Visit,
    /// Sorted.
    pub(super) named: Vec<usize>,
}

/// Which places of its session an incremental fetch reads (see [`Session::visit`]).
pub(super) fn visit(
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
pub(super) fn wanted(
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
                    p.waiters().subscribe(&v.visit.changes, place);
                }
            }
        }
    }
    wanted
}

/// Keeps what the reply told the client in its session (opening one for a full fetch that
/// asked); returns the session id for the response.
pub(super) fn remember(
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
