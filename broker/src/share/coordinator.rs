//! The share coordinator (KIP-932): the durable state of share partitions, kept in the
//! compacted internal topic `__share_group_state` ([`super::store`]) by the leaders of its
//! partitions. A share partition's state lives in the partition its key places it in
//! ([`StateKey::state_partition`]), whichever broker leads the data partition; that leader
//! reads it when it starts serving the share partition and writes it after every change worth
//! keeping (through [`super::persister`], here or by ReadShareGroupState/WriteShareGroupState
//! from another broker).
//!
//! Invariant (docs/invariants.md, invariant 15): a write is answered only once the ISR of its
//! state partition holds it, and a write from an older leader of the data partition (a lower
//! leader epoch than the last write's) is refused with FENCED_LEADER_EPOCH: after a failover
//! the old leader cannot overwrite what the new one wrote.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::partition::Snapshot;
use super::store::{self, StateKey, Stored};
use crate::coordination::{drop_keys, read_whole, Coordination, Item, Loader};
use crate::error::{ApiError, ErrorCode};
use crate::log::batch;
use crate::node::Node;
use crate::partition::Partition;

/// How long a write waits for the ISR of its state partition.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Keys by their name (`group:topic-id:partition`), which places them.
type Table = HashMap<String, (StateKey, Stored)>;

pub struct ShareCoordinator {
    node: Arc<Node>,
    coordination: Coordination,
    table: Mutex<Table>,
}

impl ShareCoordinator {
    pub fn new(node: Arc<Node>) -> ShareCoordinator {
        ShareCoordinator {
            node,
            coordination: Coordination::new(store::TOPIC),
            table: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates `__share_group_state` if it does not exist yet, compacted.
    pub async fn ensure_topic(&self) -> Result<(), ApiError> {
        if self.node.metadata.state().topic(store::TOPIC).is_some() {
            return Ok(());
        }
        let mut configs = BTreeMap::new();
        configs.insert("cleanup.policy".to_string(), "compact".to_string());
        configs.insert("segment.bytes".to_string(), (100 * 1024 * 1024).to_string());
        match (self.node)
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

    /// Follows the leadership of `__share_group_state` (see [`crate::coordination`]).
    pub async fn follow_leadership(&self) {
        self.coordination.follow(&self.node, &Load(self)).await;
    }

    async fn check(&self, key: &StateKey) -> Result<i32, ApiError> {
        (self.coordination)
            .check(
                &self.node,
                key.state_partition(),
                "share partition",
                &key.name(),
            )
            .await
    }

    /// What is kept of a share partition; `None` for one never written (or deleted).
    pub async fn read(&self, key: &StateKey) -> Result<Option<Stored>, ApiError> {
        self.check(key).await?;
        Ok(self.lock().get(&key.name()).map(|(_, s)| s.clone()))
    }

    /// Keeps `snapshot` as the share partition's state, written by the data partition's leader
    /// at `leader_epoch`; answers once the state partition's ISR holds it.
    pub async fn write(
        &self,
        key: &StateKey,
        leader_epoch: i32,
        state_epoch: i32,
        snapshot: Snapshot,
    ) -> Result<(), ApiError> {
        self.check(key).await?;
        let p = key.state_partition();
        let part = (self.node)
            .leader_partition(store::TOPIC, p, -1)
            .map_err(|e| ApiError::new(ErrorCode::NotCoordinator, e.message))?;
        let epoch = part.replication().leader_epoch();
        let last_offset = {
            // Checked and appended under the table's lock: writes of one key reach the log in
            // the order the table takes them.
            let mut table = self.lock();
            let name = key.name();
            let before = table.get(&name).map(|(_, s)| s);
            if let Some(b) = before.filter(|b| b.state_epoch > state_epoch) {
                // An operator reset it since the writer loaded it.
                return Err(ApiError::new(
                    ErrorCode::FencedStateEpoch,
                    format!(
                        "share partition {name} was written at state epoch {}, after {state_epoch}",
                        b.state_epoch
                    ),
                ));
            }
            if let Some(b) = before.filter(|b| b.leader_epoch > leader_epoch) {
                return Err(ApiError::new(
                    ErrorCode::FencedLeaderEpoch,
                    format!(
                        "share partition {name} was written at leader epoch {}, after {leader_epoch}",
                        b.leader_epoch
                    ),
                ));
            }
            let stored = Stored {
                snapshot_epoch: before.map_or(0, |b| b.snapshot_epoch.wrapping_add(1)),
                state_epoch,
                leader_epoch,
                write_ms: self.node.clock.now_ms(),
                snapshot,
            };
            let (k, v) = (store::key(key), store::value(&stored));
            let info = part.append(&batch::build(
                &[(Some(&k[..]), Some(&v[..]))],
                stored.write_ms,
            ))?;
            table.insert(name, (key.clone(), stored));
            info.last_offset
        };
        part.wait_committed(last_offset, epoch, WRITE_TIMEOUT)
            .await
            .map_err(|code| {
                let code = match code {
                    ErrorCode::NotLeaderOrFollower => ErrorCode::NotCoordinator,
                    c => c,
                };
                ApiError::new(
                    code,
                    format!("writing {} to {}-{p}", key.name(), store::TOPIC),
                )
            })
    }
}

/// The share coordinator as [`crate::coordination`] loads it.
struct Load<'a>(&'a ShareCoordinator);

impl Loader for Load<'_> {
    const WHAT: &'static str = "share partitions";
    type Table = Table;

    /// Per key the latest record wins and a tombstone deletes.
    fn read(&self, part: &Partition) -> Result<(usize, Table), ApiError> {
        let mut table = Table::new();
        let count = read_whole(part, |item| {
            let Item::Record { key, value, .. } = item else {
                return true;
            };
            match store::decode(key, value) {
                Some((k, Some(s))) => {
                    table.insert(k.name(), (k, s));
                }
                Some((k, None)) => {
                    table.remove(&k.name());
                }
                None => return false,
            }
            true
        })?;
        Ok((count, table))
    }

    fn adopt(&self, _partition: i32, _leader_epoch: i32, table: Table) -> String {
        let n = table.len();
        self.0.lock().extend(table);
        format!("{n} share partitions")
    }

    fn drop_partition(&self, partition: i32) -> usize {
        drop_keys(&mut self.0.lock(), partition, |name| {
            crate::group::store::partition_of(name, store::PARTITIONS)
        })
    }
}
