//! Following the leadership of `__transaction_state` (see the invariants in [`super`]): the
//! transactional ids of a partition are rebuilt from its whole log when its leadership
//! arrives here, the transactions it left prepared are completed, and the ids are dropped
//! when it leaves; [`TxnCoordinator::check`] is the one check before serving any id.

use std::collections::{BTreeMap, HashMap};

use super::state::TxnMetadata;
use super::{store, validate_id, TxnCoordinator};
use crate::coordination::{drop_keys, read_whole, Item, Loader};
use crate::error::{ApiError, ErrorCode};
use crate::partition::Partition;

impl TxnCoordinator {
    /// Creates `__transaction_state` if it does not exist yet, compacted. Its
    /// `transaction_state_log_min_isr` is checked at each write against the partition's
    /// replicas then (see `write`): the topic grows with the cluster.
    pub async fn ensure_topic(&self) -> Result<(), ApiError> {
        if self.node.metadata.state().topic(store::TOPIC).is_some() {
            return Ok(());
        }
        let mut configs = BTreeMap::new();
        configs.insert("cleanup.policy".to_string(), "compact".to_string());
        configs.insert("segment.bytes".to_string(), (100 * 1024 * 1024).to_string());
        match self
            .node
            .create_internal_topic(store::TOPIC, store::PARTITIONS, configs)
            .await
        {
            Ok(()) => {
                tracing::info!("created {}", store::TOPIC);
                self.follow_leadership().await;
                Ok(())
            }
            Err(e) if e.code == ErrorCode::TopicAlreadyExists => Ok(()),
            Err(e) => Err(ApiError::new(ErrorCode::CoordinatorNotAvailable, e.message)),
        }
    }

    /// Whether this broker coordinates `id` now, and its coordinator epoch (see
    /// [`crate::coordination`]).
    pub async fn check(&self, id: &str) -> Result<i32, ApiError> {
        validate_id(id)?;
        let p = store::partition_for(id);
        (self.coordination)
            .check(&self.node, p, "transactional id", id)
            .await
    }

    /// [`TxnCoordinator::check`] without waiting for a load.
    pub(super) fn check_loaded(&self, id: &str) -> Result<i32, ApiError> {
        validate_id(id)?;
        let p = store::partition_for(id);
        (self.coordination).check_loaded(&self.node, p, "transactional id", id)
    }

    /// Follows the leadership of `__transaction_state`: loads the ids of every partition this
    /// broker has come to lead (at a new leader epoch), completes the transactions they left
    /// prepared, and drops those of partitions it no longer leads.
    pub async fn follow_leadership(&self) {
        self.coordination.follow(&self.node, &Load(self)).await;
    }
}

/// The transaction coordinator as [`crate::coordination`] loads it.
struct Load<'a>(&'a TxnCoordinator);

impl Loader for Load<'_> {
    const WHAT: &'static str = "transactional ids";
    type Table = HashMap<String, TxnMetadata>;

    /// Rebuilds the transactional ids of one partition of `__transaction_state`, read whole:
    /// per id the latest record wins and a tombstone deletes.
    fn read(&self, part: &Partition) -> Result<(usize, Self::Table), ApiError> {
        let mut table = HashMap::new();
        let count = read_whole(part, |item| {
            let Item::Record { key, value, .. } = item else {
                // No transaction writes here: a marker is not this topic's.
                return true;
            };
            match store::decode(key, value) {
                Some((id, Some(m))) => {
                    table.insert(id, m);
                }
                Some((id, None)) => {
                    table.remove(&id);
                }
                None => return false,
            }
            true
        })?;
        Ok((count, table))
    }

    /// Takes the ids and completes the transactions they left prepared.
    fn adopt(&self, _partition: i32, leader_epoch: i32, table: Self::Table) -> String {
        let prepared: Vec<(String, TxnMetadata)> = (table.iter())
            .filter(|(_, m)| m.state.is_prepared())
            .map(|(id, m)| (id.clone(), m.clone()))
            .collect();
        let (ids, completing) = (table.len(), prepared.len());
        self.0.lock().extend(table);
        for (id, m) in prepared {
            self.0.spawn_completion(id, m, leader_epoch);
        }
        format!("{ids} ids, {completing} prepared transactions to complete")
    }

    fn drop_partition(&self, partition: i32) -> usize {
        drop_keys(&mut self.0.lock(), partition, store::partition_for)
    }
}
