//! Replication between brokers, Kafka's way: followers fetch from the leader with the Fetch
//! API ([`fetcher`]); the leader tracks how far each follower has got, moves the high
//! watermark to what its ISR holds ([`crate::partition::leader`]) and proposes ISR changes
//! through the quorum ([`propose_isr`]).
//!
//! An acknowledged `acks=all` write is one the high watermark passed: every ISR member holds
//! it, so it survives the loss of any ISR minority (docs/invariants.md 3) — a new leader
//! comes from the ISR ([`strata_metadata`]'s elections), and followers drop what it lacks
//! before fetching again.

pub mod fetcher;
mod leader_session;
pub mod moves;

use std::sync::Arc;
use std::time::Duration;

use strata_metadata::Command;

use crate::node::Node;
use crate::partition::leader::IsrChange;
use crate::partition::Partition;

/// Proposes `change` to `p`'s ISR through the quorum, in the background. Whatever happens,
/// the leader may propose again once the outcome is applied here.
fn propose_isr(node: &Arc<Node>, p: &Arc<Partition>, change: IsrChange) {
    let node = node.clone();
    let p = p.clone();
    tokio::spawn(async move {
        let cmd = Command::AlterPartition {
            topic_id: p.topic_id,
            partition: p.tp.partition,
            leader: node.config.node_id,
            leader_epoch: change.leader_epoch,
            partition_epoch: change.partition_epoch,
            isr: change.isr.clone(),
        };
        match node.apply(cmd).await {
            Ok(_) => {
                tracing::info!(topic = %p.tp.topic, partition = p.tp.partition, isr = ?change.isr, "ISR changed");
                node.metrics.isr_changed(change.expand);
                if let Err(e) = node.sync_partitions() {
                    tracing::warn!(error = %e, "applying the ISR change locally failed");
                }
            }
            Err(e) => {
                tracing::info!(topic = %p.tp.topic, partition = p.tp.partition, isr = ?change.isr, error = %e, "ISR change not committed");
            }
        }
        p.replication().isr_change_settled();
    });
}

/// A follower's fetch from `offset`: it holds everything below, which moves the high
/// watermark and may bring it into the ISR.
pub fn follower_fetched(node: &Arc<Node>, p: &Arc<Partition>, follower: u64, offset: i64) {
    if let Some(change) = p.follower_fetched(follower, offset) {
        propose_isr(node, p, change);
    }
}

/// Shrinks the ISR of every partition led here whose followers lag more than
/// `replica_lag_time_max_ms` (called by housekeeping).
pub fn check_isr(node: &Arc<Node>) {
    let max_lag = Duration::from_millis(node.config.replica_lag_time_max_ms);
    for p in node.partitions.hosted().all() {
        if let Some(change) = p.isr_shrink(max_lag) {
            tracing::warn!(topic = %p.tp.topic, partition = p.tp.partition, isr = ?change.isr,
                "followers fell behind for replica_lag_time_max_ms: shrinking the ISR");
            propose_isr(node, p, change);
        }
    }
}
