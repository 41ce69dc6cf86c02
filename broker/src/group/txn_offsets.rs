//! Offsets committed inside a transaction (TxnOffsetCommit, KIP-98; generation checks of
//! KIP-447): written to the group's `__consumer_offsets` partition in a transactional batch of
//! the producer, held aside per producer, and made the group's committed offsets when the
//! transaction's commit marker is written there (dropped by an abort marker).
//!
//! Invariants:
//! - a transactional offset is visible (OffsetFetch, lag) only after its commit marker is in
//!   the ISR; until then an OffsetFetch that requires stable offsets (KIP-447) gets
//!   UNSTABLE_OFFSET_COMMIT for its partition, so a consumer taking over never starts from an
//!   offset that may still be rolled back, nor from one about to be replaced;
//! - the pending offsets are a function of the log: rebuilt on load from the transactional
//!   batches whose markers have not been read yet.

use super::offsets::{validate_committer, Committer};
use super::store;
use super::{Commit, Coordinator};
use crate::error::ErrorCode;
use crate::log::batch;
use crate::log::LogError;
use crate::partition::Partition;
use std::sync::Arc;

/// How long a transactional commit waits for the ISR.
const COMMIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// A transactional commit appended and waiting for the ISR.
pub struct PendingTxnCommit {
    group: String,
    partition: Arc<Partition>,
    last_offset: i64,
    leader_epoch: i32,
}

impl Coordinator {
    /// TxnOffsetCommit: validates the committer (when it names its member or generation) and
    /// appends the commits for `producer_id`; one error per commit, and what
    /// [`Coordinator::complete_txn_commit`] waits for.
    pub fn txn_commit(
        &self,
        group_id: &str,
        producer_id: i64,
        producer_epoch: i16,
        committer: &Committer<'_>,
        commits: Vec<Commit>,
    ) -> (Vec<ErrorCode>, Option<PendingTxnCommit>) {
        let group_error = validate_committer(self.lock().get(group_id), committer).err();
        if let Some(code) = group_error {
            return (commits.iter().map(|_| code).collect(), None);
        }
        let (errors, records, accepted) = self.accept_commits(group_id, commits);
        if records.is_empty() {
            return (errors, None);
        }
        let p = store::partition_for(group_id);
        // The offsets are held aside in the same critical section as their append: a marker
        // is appended after them and applied (`complete_txn`, under this lock) only once the
        // ISR has it, so it always finds them. Holding them only after this commit's own ISR
        // wait would let an abort that overtook the wait leave them pending for good (every
        // OffsetFetch requiring stable offsets refused).
        let mut groups = self.lock();
        let appended = (|| {
            let part = self
                .node
                .leader_partition(store::TOPIC, p, -1)
                .map_err(|_| ErrorCode::NotCoordinator)?;
            let leader_epoch = part.replication().leader_epoch();
            let refs: Vec<batch::KeyValue<'_>> = records
                .iter()
                .map(|(k, v)| (Some(&k[..]), Some(&v[..])))
                .collect();
            let b = batch::build_transactional(
                &refs,
                self.node.clock.now_ms(),
                (producer_id, producer_epoch),
            );
            let info = part.append_as_coordinator(&b).map_err(|e| match e {
                LogError::ProducerFenced { .. } => ErrorCode::ProducerFenced,
                e => super::persist::store_error(crate::error::ApiError::from(e).code),
            })?;
            Ok((part, leader_epoch, info.last_offset))
        })();
        if appended.is_ok() {
            let pending = groups
                .entry(group_id.to_string())
                .or_default()
                .pending_txn
                .entry(producer_id)
                .or_default();
            for c in &accepted {
                pending.insert((c.topic.clone(), c.partition), c.offset.clone());
            }
        }
        drop(groups);
        match appended {
            Err(code) => (errors.iter().map(|_| code).collect(), None),
            Ok((partition, leader_epoch, last_offset)) => (
                errors,
                Some(PendingTxnCommit {
                    group: group_id.to_string(),
                    partition,
                    last_offset,
                    leader_epoch,
                }),
            ),
        }
    }

    /// Waits until the ISR holds a transactional commit. Its offsets wait for the
    /// transaction's marker even when this wait fails: the batch may still be committed, and
    /// dropping them would lose the commit its marker makes.
    pub async fn complete_txn_commit(&self, pending: PendingTxnCommit) -> Result<(), ErrorCode> {
        let PendingTxnCommit {
            group,
            partition,
            last_offset,
            leader_epoch,
        } = pending;
        partition
            .wait_committed(last_offset, leader_epoch, COMMIT_TIMEOUT)
            .await
            .map_err(|c| match c {
                ErrorCode::NotLeaderOrFollower => ErrorCode::NotCoordinator,
                c => c,
            })?;
        let p = store::partition_for(&group);
        if !self.coordination.is_loaded(p, leader_epoch) {
            return Err(ErrorCode::NotCoordinator);
        }
        Ok(())
    }

    /// A transaction's marker is in `__consumer_offsets` partition `partition`: the offsets
    /// `producer_id` committed in it become committed (or are dropped).
    pub fn complete_txn(&self, partition: i32, producer_id: i64, commit: bool) {
        let mut groups = self.lock();
        for (id, entry) in groups.iter_mut() {
            if store::partition_for(id) != partition {
                continue;
            }
            if let Some(offsets) = entry.pending_txn.remove(&producer_id) {
                if commit {
                    entry.offsets.extend(offsets);
                }
            }
        }
    }

    /// Whether an offset of the group's partition is waiting for a transaction's marker.
    pub fn unstable(&self, group_id: &str, topic: &str, partition: i32) -> bool {
        let key = (topic.to_string(), partition);
        self.lock()
            .get(group_id)
            .is_some_and(|e| e.pending_txn.values().any(|o| o.contains_key(&key)))
    }
}
