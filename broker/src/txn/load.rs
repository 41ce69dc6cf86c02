//! Following the leadership of `__transaction_state` (see the invariants in [`super`]): the
//! transactional ids of a partition are rebuilt from its whole log when its leadership
//! arrives here, the transactions it left prepared are completed, and the ids are dropped
//! when it leaves; [`TxnCoordinator::check`] is the one check before serving any id.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::state::TxnMetadata;
use super::{store, validate_id, TxnCoordinator};
use crate::error::{ApiError, ErrorCode};
use crate::log::records;
use crate::partition::Partition;

/// How long a request waits for its `__transaction_state` partition to load here.
const LOAD_WAIT: Duration = Duration::from_secs(5);

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

    /// Whether this broker coordinates `id` now, and its coordinator epoch. A partition led
    /// here but not loaded yet is waited for, up to [`LOAD_WAIT`].
    pub async fn check(&self, id: &str) -> Result<i32, ApiError> {
        let deadline = tokio::time::Instant::now() + LOAD_WAIT;
        loop {
            let followed = self.followed.notified();
            match self.check_loaded(id) {
                Err(e) if e.code == ErrorCode::CoordinatorLoadInProgress => {
                    if tokio::time::timeout_at(deadline, followed).await.is_err() {
                        return Err(e);
                    }
                }
                answer => return answer,
            }
        }
    }

    pub(super) fn check_loaded(&self, id: &str) -> Result<i32, ApiError> {
        validate_id(id)?;
        let p = store::partition_for(id);
        let state = self.node.metadata.state();
        let Some(info) = state.partition(store::TOPIC, p) else {
            return Err(ApiError::new(
                ErrorCode::CoordinatorNotAvailable,
                format!("{} does not exist yet", store::TOPIC),
            ));
        };
        match info.leader {
            Some(l) if l == self.node.config.node_id => {}
            Some(l) => {
                return Err(ApiError::new(
                    ErrorCode::NotCoordinator,
                    format!("transactional id {id} is coordinated by broker {l}"),
                ))
            }
            None => {
                return Err(ApiError::new(
                    ErrorCode::CoordinatorNotAvailable,
                    format!("{}-{p} has no leader", store::TOPIC),
                ))
            }
        }
        if self.loaded_lock().get(&p) != Some(&info.leader_epoch) {
            return Err(ApiError::new(
                ErrorCode::CoordinatorLoadInProgress,
                format!("loading the transactional ids of {}-{p}", store::TOPIC),
            ));
        }
        Ok(info.leader_epoch)
    }

    /// Follows the leadership of `__transaction_state`: loads the ids of every partition this
    /// broker has come to lead (at a new leader epoch), completes the transactions they left
    /// prepared, and drops those of partitions it no longer leads.
    pub async fn follow_leadership(&self) {
        let _one = self.syncing.lock().await;
        let me = self.node.config.node_id;
        let led: HashMap<i32, i32> = self
            .node
            .metadata
            .state()
            .topic(store::TOPIC)
            .map(|t| {
                (t.partitions.iter().enumerate())
                    .filter(|(_, p)| p.leader == Some(me))
                    .map(|(i, p)| (i as i32, p.leader_epoch))
                    .collect()
            })
            .unwrap_or_default();
        let stale: Vec<i32> = (self.loaded_lock().iter())
            .filter(|(p, epoch)| led.get(p) != Some(epoch))
            .map(|(p, _)| *p)
            .collect();
        for p in stale {
            self.loaded_lock().remove(&p);
            let mut txns = self.lock();
            let before = txns.len();
            txns.retain(|id, _| store::partition_for(id) != p);
            tracing::info!(
                partition = p,
                ids = before - txns.len(),
                "no longer coordinating the transactional ids of {}-{p}",
                store::TOPIC
            );
        }
        for (p, epoch) in led {
            if self.loaded_lock().get(&p) == Some(&epoch) {
                continue;
            }
            let Some(part) = (self.node.partitions.get(store::TOPIC, p))
                .filter(|part| part.current_leader_epoch() == epoch && part.is_leader())
            else {
                continue;
            };
            let started = crate::clock::Stopwatch::start();
            match read_partition(&part) {
                Ok((records, table)) => {
                    let prepared: Vec<(String, TxnMetadata)> = (table.iter())
                        .filter(|(_, m)| m.state.is_prepared())
                        .map(|(id, m)| (id.clone(), m.clone()))
                        .collect();
                    let ids = table.len();
                    self.lock().extend(table);
                    self.loaded_lock().insert(p, epoch);
                    tracing::info!(
                        partition = p,
                        leader_epoch = epoch,
                        records,
                        ids,
                        prepared = prepared.len(),
                        ms = started.elapsed().as_millis() as u64,
                        "coordinating the transactional ids of {}-{p}",
                        store::TOPIC
                    );
                    for (id, m) in prepared {
                        self.spawn_completion(id, m, epoch);
                    }
                }
                Err(e) => {
                    tracing::error!(partition = p, error = %e, "cannot load the transactional ids of {}-{p}; retrying", store::TOPIC)
                }
            }
        }
        self.followed.notify_waiters();
    }
}

/// Rebuilds the transactional ids of one partition of `__transaction_state`, read from its
/// start to its end (a leader keeps every record it has, and they all become committed): per
/// id the latest record wins and a tombstone deletes.
fn read_partition(part: &Partition) -> Result<(usize, HashMap<String, TxnMetadata>), ApiError> {
    let mut table = HashMap::new();
    let mut count = 0usize;
    let p = part.tp.partition;
    let mut offset = part.offsets().log_start;
    let storage_error = |e: String| {
        ApiError::new(
            ErrorCode::KafkaStorageError,
            format!("{}-{p}: {e}", store::TOPIC),
        )
    };
    loop {
        let (bytes, o) = part.read_replica(offset, 1 << 20).map_err(ApiError::from)?;
        if bytes.is_empty() || offset >= o.log_end {
            break;
        }
        for item in records::batches(&bytes) {
            let (h, b) = item.map_err(|e| storage_error(e.to_string()))?;
            offset = offset.max(h.next_offset());
            let section = records::section(&b, &h).map_err(|e| storage_error(e.to_string()))?;
            records::for_each(&section, &h, |r| {
                count += 1;
                let (key, value) = (
                    r.key.map(|k| section.slice_ref(k)),
                    r.value.map(|v| section.slice_ref(v)),
                );
                match store::decode(key, value) {
                    Some((id, Some(m))) => {
                        table.insert(id, m);
                    }
                    Some((id, None)) => {
                        table.remove(&id);
                    }
                    None => tracing::warn!(
                        partition = p,
                        offset = r.offset,
                        "skipping malformed record in {}",
                        store::TOPIC
                    ),
                }
            })
            .map_err(|e| storage_error(e.to_string()))?;
        }
    }
    Ok((count, table))
}
