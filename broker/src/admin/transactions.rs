//! The transactions view (`/v1/transactions`) and the abort of a hanging one, as
//! `kafka-transactions.sh list`, `describe-producers`, `find-hanging` and `abort` show and do
//! them (KIP-664), for the whole cluster from any broker.
//!
//! Two sides are shown. The coordinators' transactions: each transactional id whose
//! transaction is open (Ongoing, PrepareCommit, PrepareAbort), from the broker coordinating
//! it. The partitions' open transactions: each producer with a transaction open in a
//! partition, from the partition's leader (its first offset holds the last stable offset, so
//! read_committed consumers wait behind it). A partition's open transaction is **hanging**
//! when it has been open longer than `transaction_max_timeout_ms` and no coordinator has it
//! in an open transaction of that producer: nothing will ever end it but an abort. When a
//! broker did not answer, hanging is unknown (`null`), never guessed.
//!
//! Invariants: the caller sees only what it may DESCRIBE (a transactional id) or READ (a
//! topic) while the authorizer is on, as the Kafka APIs show them; an abort is Kafka's
//! WriteTxnMarkers and needs CLUSTER_ACTION, is refused unless the named producer has that
//! transaction open in the partition, and is audited as the caller's.

use std::collections::BTreeSet;
use std::sync::Arc;

use hyper::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use strata_metadata::acl::{AclOperation, ResourceType};

use super::actions::Caller;
use super::peers::AdminPeers;
use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::security::Access;
use crate::txn::messages::MarkerSpec;
use crate::txn::state::TxnState;

/// Rows shown at most of each side (the counts say how many there are).
pub const MAX_ROWS: usize = 500;

/// A transactional id with an open transaction, as its coordinator holds it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Coordinated {
    pub transactional_id: String,
    pub coordinator: u64,
    pub state: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub start_ms: i64,
    pub timeout_ms: i32,
    pub partitions: Vec<(String, i32)>,
}

/// A producer's transaction open in a partition, as the partition's leader holds it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Open {
    pub topic: String,
    pub partition: i32,
    pub leader: u64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
    pub first_offset: i64,
    pub last_timestamp: i64,
    /// The partition's last stable offset and high watermark: what the transaction holds back.
    pub last_stable: i64,
    pub high_watermark: i64,
    /// Filled in by the broker that answers the view (see the module's docs).
    #[serde(default)]
    pub hanging: Option<bool>,
}

/// One broker's part: what it coordinates and what it leads.
#[derive(Serialize, Deserialize, Default)]
pub struct Part {
    pub coordinated: Vec<Coordinated>,
    pub open: Vec<Open>,
}

/// This broker's part, as much of it as `access` may see.
pub fn local(broker: &Broker, access: &Access) -> Part {
    let me = broker.node.config.node_id;
    let coordinated = (broker.txn.list().into_iter())
        .filter(|v| {
            matches!(
                v.metadata.state,
                TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort
            )
        })
        .filter(|v| {
            access.sees(
                AclOperation::Describe,
                ResourceType::TransactionalId,
                &v.transactional_id,
            )
        })
        .map(|v| Coordinated {
            coordinator: me,
            state: v.metadata.state.name().to_string(),
            producer_id: v.metadata.producer_id,
            producer_epoch: v.metadata.producer_epoch,
            start_ms: v.metadata.start_ms,
            timeout_ms: v.metadata.timeout_ms,
            partitions: v.metadata.partitions.iter().cloned().collect(),
            transactional_id: v.transactional_id,
        })
        .collect();
    let hosted = broker.node.partitions.hosted();
    let mut open = Vec::new();
    for p in hosted.all() {
        if !p.replication().is_leader() || !access.topic(AclOperation::Read, &p.tp.topic) {
            continue;
        }
        let producers = p.open_transactions();
        if producers.is_empty() {
            continue;
        }
        let offsets = p.offsets();
        for v in producers {
            let Some(first_offset) = v.txn_first_offset else {
                continue;
            };
            open.push(Open {
                topic: p.tp.topic.clone(),
                partition: p.tp.partition,
                leader: me,
                producer_id: v.producer_id,
                producer_epoch: v.epoch,
                coordinator_epoch: v.coordinator_epoch,
                first_offset,
                last_timestamp: v.last_timestamp,
                last_stable: offsets.last_stable,
                high_watermark: offsets.high_watermark,
                hanging: None,
            });
        }
    }
    Part { coordinated, open }
}

/// Whether each open transaction hangs: open past `max_timeout_ms` (by its last write) with
/// no coordinator holding it open; unknown while a broker did not answer.
fn mark_hanging(part: &mut Part, now_ms: i64, max_timeout_ms: i64, complete: bool) {
    let held: BTreeSet<(i64, &str, i32)> = (part.coordinated.iter())
        .flat_map(|c| (c.partitions.iter()).map(move |(t, p)| (c.producer_id, t.as_str(), *p)))
        .collect();
    let hanging: Vec<Option<bool>> = (part.open.iter())
        .map(|o| {
            let held = held.contains(&(o.producer_id, o.topic.as_str(), o.partition));
            if held || now_ms - o.last_timestamp <= max_timeout_ms {
                Some(false)
            } else {
                complete.then_some(true)
            }
        })
        .collect();
    for (o, h) in part.open.iter_mut().zip(hanging) {
        o.hanging = h;
    }
}

/// The cluster's open transactions, both sides, the longest open first.
pub async fn view(broker: &Broker, peers: &AdminPeers, access: &Access) -> Value {
    let (answers, unanswered) = peers
        .ask(
            &broker.node,
            super::views::others(broker),
            "/v1/local/transactions",
        )
        .await;
    let mut all = local(broker, access);
    for (_, part) in answers {
        let part = serde_json::from_value::<Part>(part).unwrap_or_default();
        // Relayed parts were read as the relaying broker: what this caller may see is
        // decided here.
        all.coordinated
            .extend(part.coordinated.into_iter().filter(|c| {
                access.sees(
                    AclOperation::Describe,
                    ResourceType::TransactionalId,
                    &c.transactional_id,
                )
            }));
        (all.open)
            .extend((part.open.into_iter()).filter(|o| access.topic(AclOperation::Read, &o.topic)));
    }
    let max_timeout = broker.node.config.transaction_max_timeout_ms as i64;
    let now = broker.node.clock.now_ms();
    mark_hanging(&mut all, now, max_timeout, unanswered.is_empty());
    all.coordinated
        .sort_by_key(|c| (c.start_ms, c.transactional_id.clone()));
    (all.open).sort_by(|a, b| {
        (b.hanging, a.last_timestamp, &a.topic, a.partition).cmp(&(
            a.hanging,
            b.last_timestamp,
            &b.topic,
            b.partition,
        ))
    });
    let hanging = all.open.iter().filter(|o| o.hanging == Some(true)).count();
    json!({
        "now_ms": now,
        "actions": broker.node.config.console_actions_enable,
        "transaction_max_timeout_ms": max_timeout,
        "coordinated_total": all.coordinated.len(),
        "open_total": all.open.len(),
        "hanging": hanging,
        "coordinated": all.coordinated.into_iter().take(MAX_ROWS).collect::<Vec<_>>(),
        "open": all.open.into_iter().take(MAX_ROWS).collect::<Vec<_>>(),
        "unanswered": unanswered,
    })
}

/// What an abort names: the producer whose transaction is open in the partition, as the
/// transactions view shows it.
#[derive(Deserialize, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
struct Abort {
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
}

/// Aborts producer `body`'s open transaction in `topic`-`partition`: an abort marker written by
/// the partition's leader, as Kafka's `Admin.abortTransaction` does.
pub async fn abort(
    broker: &Arc<Broker>,
    peers: &AdminPeers,
    topic: &str,
    partition: i32,
    body: &[u8],
    caller: &Caller,
) -> (StatusCode, Value) {
    let refused = |status, error: &str, message: String| {
        (status, json!({ "error": error, "message": message }))
    };
    let abort: Abort = match serde_json::from_slice(body) {
        Ok(a) => a,
        Err(e) => {
            return refused(
                StatusCode::BAD_REQUEST,
                "INVALID_REQUEST",
                format!(
                "the body is not an abort (producer_id, producer_epoch, coordinator_epoch): {e}"
            ),
            )
        }
    };
    let access = (broker.security.authorizer()).access(&caller.principal, &caller.host);
    let fields = json!({
        "topic": topic,
        "partition": partition,
        "producer_id": abort.producer_id,
        "producer_epoch": abort.producer_epoch,
    });
    tracing::info!(principal = %caller.principal, client = %caller.host, topic, partition, producer_id = abort.producer_id, "admin port action: abort a transaction");
    if !access.cluster(AclOperation::ClusterAction) {
        access.audit("transaction_abort_refused", fields);
        return refused(
            StatusCode::FORBIDDEN,
            "ClusterAuthorizationFailed",
            "an abort is WriteTxnMarkers: CLUSTER_ACTION on the cluster is not authorized".into(),
        );
    }
    let leader = (broker.node.metadata.state().partition(topic, partition)).map(|p| p.leader);
    let leader = match leader {
        None => {
            return refused(
                StatusCode::NOT_FOUND,
                "UnknownTopicOrPartition",
                format!("no partition {topic}-{partition}"),
            )
        }
        Some(None) => {
            return refused(
                StatusCode::SERVICE_UNAVAILABLE,
                "LeaderNotAvailable",
                format!("{topic}-{partition} has no leader"),
            )
        }
        Some(Some(l)) => l,
    };
    // The leader's own account of what is open: an abort of nothing is refused, not written.
    let part = if leader == broker.node.config.node_id {
        Ok(local(broker, &Access::everything()))
    } else {
        let (answers, unanswered) = peers
            .ask(&broker.node, [leader], "/v1/local/transactions")
            .await;
        match answers.into_iter().next() {
            Some((_, v)) => serde_json::from_value::<Part>(v).map_err(|e| e.to_string()),
            None => {
                Err((unanswered.into_iter().next()).map_or_else(|| "no answer".into(), |u| u.error))
            }
        }
    };
    let part = match part {
        Ok(p) => p,
        Err(why) => {
            return refused(
                StatusCode::BAD_GATEWAY,
                "LeaderNotAvailable",
                format!(
                    "the leader of {topic}-{partition} (broker {leader}) did not answer: {why}"
                ),
            )
        }
    };
    let open = part.open.iter().any(|o| {
        o.topic == topic
            && o.partition == partition
            && o.producer_id == abort.producer_id
            && o.producer_epoch == abort.producer_epoch
    });
    if !open {
        return refused(
            StatusCode::CONFLICT,
            "InvalidTxnState",
            format!(
                "producer {} (epoch {}) has no transaction open in {topic}-{partition}",
                abort.producer_id, abort.producer_epoch
            ),
        );
    }
    let spec = MarkerSpec {
        producer_id: abort.producer_id,
        producer_epoch: abort.producer_epoch,
        coordinator_epoch: abort.coordinator_epoch,
        commit: false,
    };
    let code = broker.txn.abort_in(&spec, topic, partition).await;
    if code != ErrorCode::None {
        let status = match code {
            ErrorCode::InvalidProducerEpoch | ErrorCode::TransactionCoordinatorFenced => {
                StatusCode::CONFLICT
            }
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        return refused(
            status,
            &format!("{code:?}"),
            format!("the abort marker was not written: {code:?}"),
        );
    }
    access.audit("transaction_aborted", fields);
    (
        StatusCode::OK,
        json!({ "done": format!("the transaction of producer {} in {topic}-{partition} aborted", abort.producer_id) }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(producer_id: i64, topic: &str, last_timestamp: i64) -> Open {
        Open {
            topic: topic.into(),
            partition: 0,
            leader: 1,
            producer_id,
            producer_epoch: 0,
            coordinator_epoch: 0,
            first_offset: 5,
            last_timestamp,
            last_stable: 5,
            high_watermark: 9,
            hanging: None,
        }
    }

    #[test]
    fn an_open_transaction_hangs_when_old_and_no_coordinator_holds_it() {
        let held = Coordinated {
            transactional_id: "tx".into(),
            coordinator: 1,
            state: "Ongoing".into(),
            producer_id: 7,
            producer_epoch: 0,
            start_ms: 0,
            timeout_ms: 60_000,
            partitions: vec![("t".into(), 0)],
        };
        let mut part = Part {
            coordinated: vec![held],
            // Held by its coordinator; old and unheld; recent and unheld.
            open: vec![open(7, "t", 0), open(8, "t", 0), open(9, "t", 990_000)],
        };
        mark_hanging(&mut part, 1_000_000, 900_000, true);
        let hanging: Vec<_> = part.open.iter().map(|o| o.hanging).collect();
        assert_eq!(hanging, vec![Some(false), Some(true), Some(false)]);
        // A broker that did not answer may hold the old one: unknown.
        mark_hanging(&mut part, 1_000_000, 900_000, false);
        assert_eq!(part.open[1].hanging, None);
        assert_eq!(part.open[0].hanging, Some(false));
    }

    #[test]
    fn an_abort_names_the_producer_exactly() {
        let parse = |b: &str| serde_json::from_slice::<Abort>(b.as_bytes());
        assert_eq!(
            parse(r#"{"producer_id":4,"producer_epoch":1,"coordinator_epoch":0}"#).unwrap(),
            Abort {
                producer_id: 4,
                producer_epoch: 1,
                coordinator_epoch: 0
            }
        );
        for bad in [
            "",
            "{}",
            r#"{"producer_id":4}"#,
            r#"{"producer_id":4,"producer_epoch":1,"coordinator_epoch":0,"x":1}"#,
            r#"{"producer_id":"4","producer_epoch":1,"coordinator_epoch":0}"#,
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
