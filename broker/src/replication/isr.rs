//! The leader's ISR changes, proposed through the quorum many partitions at a time.
//!
//! A leader decides a change per partition (a follower caught up, or fell behind for
//! `replica.lag.time.max.ms`); [`IsrProposals`] queues it, and one task proposes everything
//! queued as one [`Command::AlterPartitions`] entry, then everything queued meanwhile as the
//! next. One change waits at most one commit round trip behind others; a storm (a broker back
//! after a restart joins the ISR of every partition it follows) is a few entries instead of
//! one per partition, each of which also re-synced every hosted partition on every broker.
//!
//! Invariants:
//! - A partition has at most one change queued or in flight (its leader state proposes again
//!   only after [`crate::partition::Partition::isr_change_settled`]), so the queue is bounded
//!   by the partitions led here, and every change queued is settled exactly once, committed
//!   or not.
//! - An entry carries at most [`MAX_CHANGES_PER_ENTRY`] changes, so a raft entry (and a batch
//!   of them in one AppendEntries) stays far below the raft port's frame limit.

use std::sync::Arc;
use std::time::Duration;

use strata_metadata::{Command, CommandResult, IsrUpdate};
use tokio::sync::mpsc;

use crate::node::Node;
use crate::partition::leader::IsrChange;
use crate::partition::Partition;

/// Changes per raft entry: about 100 bytes of JSON each.
const MAX_CHANGES_PER_ENTRY: usize = 1000;

/// Where a leader's ISR changes go; cheap to share. The proposing task ends with the last
/// handle.
pub struct IsrProposals {
    node: Arc<Node>,
    queue: mpsc::UnboundedSender<(Arc<Partition>, IsrChange)>,
}

impl IsrProposals {
    /// Starts the proposing task (needs a tokio runtime).
    pub fn new(node: Arc<Node>) -> IsrProposals {
        let (queue, changes) = mpsc::unbounded_channel();
        tokio::spawn(propose_queued(node.clone(), changes));
        IsrProposals { node, queue }
    }

    /// A follower's fetch from `offset`: it holds everything below, which moves the high
    /// watermark and may bring it into the ISR.
    pub fn follower_fetched(&self, p: &Arc<Partition>, follower: u64, offset: i64) {
        if let Some(change) = p.follower_fetched(follower, offset) {
            self.propose(p, change);
        }
    }

    /// Shrinks the ISR of every partition led here whose followers lag more than
    /// `replica_lag_time_max_ms` (called by housekeeping).
    pub fn check(&self) {
        let max_lag = Duration::from_millis(self.node.config.replica_lag_time_max_ms);
        for p in self.node.partitions.hosted().all() {
            if let Some(change) = p.isr_shrink(max_lag) {
                tracing::warn!(topic = %p.tp.topic, partition = p.tp.partition, isr = ?change.isr,
                    "followers fell behind for replica_lag_time_max_ms: shrinking the ISR");
                self.propose(p, change);
            }
        }
    }

    fn propose(&self, p: &Arc<Partition>, change: IsrChange) {
        if let Err(mpsc::error::SendError((p, _))) = self.queue.send((p.clone(), change)) {
            // The task is gone only when the runtime is shutting down.
            p.replication().isr_change_settled();
        }
    }
}

/// Proposes whatever is queued, one entry at a time, until every [`IsrProposals`] is gone.
async fn propose_queued(
    node: Arc<Node>,
    mut changes: mpsc::UnboundedReceiver<(Arc<Partition>, IsrChange)>,
) {
    let mut batch = Vec::with_capacity(MAX_CHANGES_PER_ENTRY);
    while changes.recv_many(&mut batch, MAX_CHANGES_PER_ENTRY).await > 0 {
        propose_batch(&node, &batch).await;
        for (p, _) in batch.drain(..) {
            p.replication().isr_change_settled();
        }
    }
}

async fn propose_batch(node: &Arc<Node>, batch: &[(Arc<Partition>, IsrChange)]) {
    let me = node.config.node_id;
    let cmd = Command::AlterPartitions {
        changes: batch
            .iter()
            .map(|(p, change)| IsrUpdate {
                topic_id: p.topic_id,
                partition: p.tp.partition,
                leader: me,
                leader_epoch: change.leader_epoch,
                partition_epoch: change.partition_epoch,
                isr: change.isr.clone(),
            })
            .collect(),
    };
    let results = match node.apply(cmd).await {
        Ok(CommandResult::Each(results)) if results.len() == batch.len() => results,
        Ok(other) => {
            tracing::error!(result = ?other, changes = batch.len(), "the quorum answered an ISR change batch with something else");
            return;
        }
        Err(e) => {
            tracing::info!(changes = batch.len(), error = %e, "ISR changes not committed");
            return;
        }
    };
    let mut committed = 0;
    for ((p, change), result) in batch.iter().zip(&results) {
        if result.is_ok() {
            committed += 1;
            node.metrics.isr_changed(change.expand);
            tracing::debug!(topic = %p.tp.topic, partition = p.tp.partition, isr = ?change.isr, "ISR changed");
        } else {
            tracing::info!(topic = %p.tp.topic, partition = p.tp.partition, isr = ?change.isr, ?result, "ISR change refused");
        }
    }
    if committed > 0 {
        let (p, change) = &batch[0];
        tracing::info!(
            committed,
            refused = batch.len() - committed,
            first = %format_args!("{}-{} isr {:?}", p.tp.topic, p.tp.partition, change.isr),
            "ISR changed"
        );
        if let Err(e) = node.sync_partitions() {
            tracing::warn!(error = %e, "applying the ISR changes locally failed");
        }
    }
}
