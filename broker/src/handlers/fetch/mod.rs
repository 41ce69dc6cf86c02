//! Fetch: whole batches from the requested offsets, zero-copy slices of the segment mappings,
//! or, below the local log start, checked batches from the remote tier's cache — one read over
//! both tiers, [`crate::tier::Tier::read`]. With `min_bytes` unmet the request waits (up to
//! `max_wait_ms`) for an append to any of its partitions to wake it: appends notify, nothing
//! polls.
//!
//! A client with an incremental fetch session ([`crate::fetch_session`]) names only what
//! changed and hears only of partitions with news; librdkafka sends no sessions and names every
//! partition in every fetch. Either way each partition read costs only what a partition with
//! nothing new needs: topics are looked up once per request, partitions by index (no
//! allocation, no map lookup), and waiters are registered only by a fetch about to wait, at
//! most once per partition.
//!
//! - this module: one fetch, start to end: its session context, its passes, the long poll;
//! - [`plan`]: what a fetch reads, its partitions resolved and checked once per topic;
//! - [`session`]: the fetch session's part: which places an incremental fetch visits, which
//!   positions a follower reports, what the session keeps of the answer;
//! - [`pass`]: one pass over the partitions: each read once, the answer built;
//! - [`redirect`]: KIP-392 on the leader: which partitions a consumer in another zone should
//!   read from an in-sync replica in its own.
//!
//! A consumer fetch of v11+ may be served by a follower in the ISR (up to the follower's
//! high watermark; [`crate::node::Node::check_replica`]). Where the replica selector sends
//! consumers to followers, a follower's fetch ends its long poll as soon as the leader's high
//! watermark passes what the follower was last told, so consumers reading from followers see
//! records as soon as the leader's consumers do.

mod pass;
mod plan;
mod redirect;
mod session;

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::FetchRequest;
use tokio::sync::Notify;

use crate::broker::Broker;
use crate::fetch_session::Context;
use crate::partition::Isolation;
use crate::protocol::fetch_response::FetchResponse;
use crate::security::Access;
use crate::zones::{self, Selector};
use pass::Pass;
use plan::Resolver;
use redirect::Redirect;

/// Consumers need READ on each topic; a follower (a broker id in the request) needs
/// CLUSTER_ACTION on the cluster. A refused topic's partitions answer
/// TOPIC_AUTHORIZATION_FAILED and the others are read as usual.
pub async fn handle(
    broker: &Arc<Broker>,
    req: FetchRequest,
    version: i16,
    access: &Access,
    client_id: &str,
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
    // KIP-392's client metadata comes with v11: older consumers read from leaders only.
    let followers_serve = replica.is_none() && version >= 11;
    let resolver = Resolver::new(broker, access, replica.is_some(), followers_serve);
    let client_zone = match replica {
        Some(_) => None,
        None => zones::client_zone((version >= 11).then(|| req.rack_id.as_str()), client_id),
    };
    let redirect = match followers_serve {
        true => Redirect::new(&broker.node, &resolver.state, client_zone),
        false => None,
    };
    let report_all = session::report_all(broker, &context, replica);
    // An incremental fetch reads the partitions of its session that changed since the last
    // one (and those it names), and waits on one change set for all of them.
    let mut visit = match &context {
        Context::Incremental(s) => Some(session::visit(&resolver, &req, version, s, report_all)),
        _ => None,
    };
    let mut wanted = match (&context, &visit) {
        (Context::Incremental(s), Some(v)) => session::wanted(&resolver, s, v),
        _ => plan::full(&resolver, &req, version),
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
    // Only where consumers may read from followers: an early answer per high watermark move
    // costs a round per produce and follower (a quarter more broker CPU at 20,000 records/s).
    let hw_news_ends_wait = broker.node.zones.selector() == Selector::RackAware;
    let pass = Pass {
        max_bytes,
        replica,
        isolation: match (replica, req.isolation_level) {
            (Some(_), _) => Isolation::LogEnd,
            (None, 1) => Isolation::Committed,
            (None, _) => Isolation::HighWatermark,
        },
        incremental,
        sessionless: matches!(context, Context::Sessionless),
        redirect,
    };
    // Whether every partition holds `notify` in its waiter list since the last wake-up.
    let mut watching = false;
    let mut first = true;
    let reply = loop {
        let report = first.then_some(report_all);
        let reply = pass::read_all(broker, &wanted, &pass, report).await;
        first = false;
        if reply.bytes >= min_bytes
            || reply.errors
            || reply.redirected
            || (reply.newer_high_watermark && hw_news_ends_wait)
            || tokio::time::Instant::now() >= deadline
        {
            break reply;
        }
        if let (Some(v), Context::Incremental(s)) = (&mut visit, &context) {
            if tokio::time::timeout_at(deadline, v.visit.changes.changed())
                .await
                .is_err()
            {
                break pass::read_all(broker, &wanted, &pass, None).await;
            }
            let more = s
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .visit_more(&v.visit.changes, &mut v.visit.places);
            if !more {
                break pass::read_all(broker, &wanted, &pass, None).await;
            }
            wanted = session::wanted(&resolver, s, v);
            continue;
        }
        if !watching {
            // Only a fetch about to wait registers, and then reads once more, so an append
            // between the read above and the registration is not missed.
            for w in &wanted {
                for wp in &w.partitions {
                    if let Some(p) = &wp.partition {
                        p.waiters().watch(&notify);
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
            break pass::read_all(broker, &wanted, &pass, None).await;
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
    let zones = &broker.node.zones;
    let (kind, peer_zone) = match replica {
        Some(id) => (
            zones::Kind::Replication,
            resolver
                .state
                .brokers
                .get(&id)
                .and_then(|b| b.rack.as_deref()),
        ),
        None => (zones::Kind::Fetch, client_zone),
    };
    zones.count(zones::Direction::Out, kind, peer_zone, reply.bytes as u64);
    let session_id =
        session::remember(broker, context, version, replica.is_some(), &wanted, &reply);
    FetchResponse {
        session_id,
        ..reply.response
    }
}
