//! Transaction markers: the coordinator's second phase (`deliver`) and the partition
//! leader's side of it ([`TxnCoordinator::write_markers_here`], which WriteTxnMarkers calls
//! too).
//!
//! A marker is appended by the partition's leader and acknowledged once the ISR holds it, like
//! an acks=all produce: only then does the last stable offset pass the transaction for
//! consumers, and only then may the coordinator write the completion. A marker in a
//! `__consumer_offsets` partition also makes the transaction's offset commits visible (commit)
//! or drops them (abort) in the group coordinator.
//!
//! Delivery retries each partition until its marker is written, re-resolving the leader each
//! round; a deleted partition needs none, and a partition that already holds a newer producer
//! epoch or coordinator epoch has been completed by someone else.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{ProducerId, TopicName, WriteTxnMarkersRequest};
use kafka_protocol::protocol::StrBytes;

use crate::error::{ApiError, ErrorCode};
use crate::group;
use crate::node::Node;
use crate::security::inter_broker;

use super::messages::MarkerSpec;
use super::TxnCoordinator;

/// How long a marker waits for the ISR, here or at a remote leader.
const MARKER_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest WriteTxnMarkers response accepted (a few bytes per partition).
const MAX_RESPONSE: usize = 16 << 20;

/// Whether a partition's outcome settles it: written, gone, or completed by a newer
/// producer or coordinator.
fn settled(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::None
            | ErrorCode::UnknownTopicOrPartition
            | ErrorCode::InvalidProducerEpoch
            | ErrorCode::TransactionCoordinatorFenced
    )
}

impl TxnCoordinator {
    /// Writes the markers into the given partitions led here and waits for their ISRs: each
    /// partition's outcome.
    pub async fn write_markers_here(
        &self,
        spec: &MarkerSpec,
        partitions: &[(String, i32)],
    ) -> Vec<ErrorCode> {
        let node = &self.node;
        let mut waiting = Vec::with_capacity(partitions.len());
        for (topic, p) in partitions {
            let appended = (|| {
                let part = node.leader_partition(topic, *p, -1)?;
                let leader_epoch = part.replication().leader_epoch();
                let offset = part
                    .append_marker(
                        spec.marker(),
                        spec.producer_id,
                        spec.producer_epoch,
                        spec.coordinator_epoch,
                    )
                    .map_err(ApiError::from)?;
                Ok::<_, ApiError>((part, leader_epoch, offset))
            })();
            waiting.push(appended);
        }
        let mut codes = Vec::with_capacity(partitions.len());
        for ((topic, p), appended) in partitions.iter().zip(waiting) {
            let code = match appended {
                Err(e) => e.code,
                Ok((part, leader_epoch, offset)) => {
                    match part
                        .wait_committed(offset, leader_epoch, MARKER_TIMEOUT)
                        .await
                    {
                        Ok(()) => {
                            if topic == group::store::TOPIC {
                                self.groups.complete_txn(*p, spec.producer_id, spec.commit);
                            }
                            ErrorCode::None
                        }
                        Err(code) => code,
                    }
                }
            };
            self.metrics.marker(spec.commit, code == ErrorCode::None);
            codes.push(code);
        }
        codes
    }

    /// An operator's abort of one partition's open transaction (Kafka's
    /// `Admin.abortTransaction`, for a hanging one): the abort marker written once by the
    /// partition's current leader, here or through WriteTxnMarkers.
    pub async fn abort_in(&self, spec: &MarkerSpec, topic: &str, partition: i32) -> ErrorCode {
        let leader = (self.node.metadata.state().partition(topic, partition)).map(|p| p.leader);
        let list = [(topic.to_string(), partition)];
        let codes = match leader {
            None => return ErrorCode::UnknownTopicOrPartition,
            Some(None) => return ErrorCode::LeaderNotAvailable,
            Some(Some(l)) if l == self.node.config.node_id => {
                self.write_markers_here(spec, &list).await
            }
            Some(Some(l)) => send(&self.node, l, spec, &list).await,
        };
        codes
            .first()
            .copied()
            .unwrap_or(ErrorCode::UnknownServerError)
    }

    /// The coordinator's second phase: the markers into every partition of the transaction,
    /// through each one's current leader, retried (with backoff) until all are settled. Returns
    /// false when `coordinating` turns false first (a new coordinator takes over).
    pub(super) async fn deliver(
        &self,
        spec: &MarkerSpec,
        mut partitions: Vec<(String, i32)>,
        coordinating: impl Fn() -> bool,
    ) -> bool {
        let node = &self.node;
        let me = node.config.node_id;
        let mut backoff = Duration::from_millis(20);
        loop {
            let state = node.metadata.state();
            let mut by_leader: BTreeMap<Option<u64>, Vec<(String, i32)>> = BTreeMap::new();
            for (t, p) in partitions.drain(..) {
                let leader = state.partition(&t, p).map(|info| info.leader);
                match leader {
                    // Deleted: nothing to mark.
                    None => {}
                    Some(l) => by_leader.entry(l).or_default().push((t, p)),
                }
            }
            for (leader, list) in by_leader {
                let codes = match leader {
                    Some(l) if l == me => self.write_markers_here(spec, &list).await,
                    Some(l) => send(node, l, spec, &list).await,
                    None => vec![ErrorCode::LeaderNotAvailable; list.len()],
                };
                for (tp, code) in list.into_iter().zip(codes) {
                    if !settled(code) {
                        tracing::debug!(topic = %tp.0, partition = tp.1, ?code, "transaction marker not written yet; retrying");
                        partitions.push(tp);
                    }
                }
            }
            if partitions.is_empty() {
                return true;
            }
            if !coordinating() {
                return false;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
            if !coordinating() {
                return false;
            }
        }
    }
}

/// WriteTxnMarkers to broker `leader` for `partitions`: each one's outcome (all the same
/// error when the call itself fails).
async fn send(
    node: &Node,
    leader: u64,
    spec: &MarkerSpec,
    partitions: &[(String, i32)],
) -> Vec<ErrorCode> {
    let failed = |why: String| {
        tracing::debug!(leader, error = %why, "WriteTxnMarkers failed");
        vec![ErrorCode::NotLeaderOrFollower; partitions.len()]
    };
    let Some(addr) =
        (node.metadata.state().brokers.get(&leader)).map(|b| format!("{}:{}", b.host, b.port))
    else {
        return failed(format!("broker {leader} is not registered"));
    };
    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in partitions {
        topics.entry(t).or_default().push(*p);
    }
    let req = WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
        .with_producer_id(ProducerId(spec.producer_id))
        .with_producer_epoch(spec.producer_epoch)
        .with_transaction_result(spec.commit)
        .with_coordinator_epoch(spec.coordinator_epoch)
        .with_topics(
            (topics.iter())
                .map(|(t, ps)| {
                    WritableTxnMarkerTopic::default()
                        .with_name(TopicName(StrBytes::from_string(t.to_string())))
                        .with_partition_indexes(ps.clone())
                })
                .collect(),
        )]);
    let client_id = format!("strata-txn-coordinator-{}", node.config.node_id);
    let mut client = match inter_broker::connect(
        &node.config,
        &addr,
        &client_id,
        MARKER_TIMEOUT * 2,
        MAX_RESPONSE,
    )
    .await
    {
        Ok(c) => c,
        Err(e) => return failed(e.to_string()),
    };
    let resp = match client.call(1, &req).await {
        Ok(r) => r,
        Err(e) => return failed(e.to_string()),
    };
    let mut outcome: BTreeMap<(String, i32), i16> = BTreeMap::new();
    for m in resp.markers {
        for t in m.topics {
            for p in t.partitions {
                outcome.insert((t.name.0.to_string(), p.partition_index), p.error_code);
            }
        }
    }
    partitions
        .iter()
        .map(|tp| match outcome.get(tp) {
            Some(&code) => ErrorCode::from_code(code),
            None => ErrorCode::NotLeaderOrFollower,
        })
        .collect()
}
