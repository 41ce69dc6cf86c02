//! The transaction coordinator: transactional ids, their producers and the two-phase end of
//! each transaction.
//!
//! - [`state`] — one transactional id's state machine (pure);
//! - [`store`] — the `__transaction_state` record format;
//! - [`load`] — following the leadership of `__transaction_state`: loading a partition's
//!   transactional ids when it arrives (and finishing the transactions it left prepared),
//!   dropping them when it leaves, and the coordinator check;
//! - [`markers`] — writing commit and abort markers into the transaction's partitions, here
//!   or through their leaders (WriteTxnMarkers);
//! - `verify` — KIP-890's joins for partition leaders and group coordinators: part 1's check
//!   that a transactional write belongs to an ongoing transaction, and part 2's implicit add
//!   (Produce v12+, TxnOffsetCommit v5+: the client sends no AddPartitionsToTxn or
//!   AddOffsetsToTxn under transaction version 2).
//!
//! The coordinator of a transactional id is the leader of partition `partition_for(id)` of
//! `__transaction_state` (50 partitions, compacted, created on first use and replicated like
//! any topic); its leader epoch is the coordinator epoch markers carry, so a partition refuses
//! the markers of a deposed coordinator.
//!
//! A transaction ends in two phases, as in Kafka: EndTxn writes PrepareCommit (or
//! PrepareAbort) and the transaction is decided once the ISR holds that record; the markers
//! are then written to every partition of the transaction, retried until each is, and
//! CompleteCommit (CompleteAbort) is written. EndTxn is answered after the markers (bounded
//! by [`END_WAIT`]), so the producer's next transaction does not meet CONCURRENT_TRANSACTIONS.
//!
//! Invariants:
//! - This broker coordinates exactly the ids of the `__transaction_state` partitions it leads
//!   and has loaded at the current leader epoch; a request for any other id gets
//!   NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS or COORDINATOR_NOT_AVAILABLE.
//! - A transition takes effect (in memory, and in any answer) only once its record is
//!   acknowledged by the ISR; while it is written, other requests for the id get
//!   CONCURRENT_TRANSACTIONS ([`state`]).
//! - A prepared transaction is completed by whoever coordinates it: the coordinator that
//!   wrote the prepare, or after a failover or restart the one that loads it.
//! - An ongoing transaction older than its timeout is aborted under a bumped epoch, which
//!   fences its producer.

mod load;
pub mod markers;
pub mod messages;
mod metrics;
pub mod state;
pub mod store;
pub mod verify;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::coordination::Coordination;
use crate::error::{ApiError, ErrorCode};
use crate::group;
use crate::log::batch;
use crate::node::Node;
use state::{Transition, TxnMetadata, TxnState};

/// How long EndTxn waits for the markers before answering (the transaction is decided by
/// then; the markers go on being retried).
const END_WAIT: Duration = Duration::from_secs(10);
/// The longest pause of [`TxnCoordinator::join`]'s retries (5 ms doubling: about 0.6 s in all).
const JOIN_RETRY_LIMIT: Duration = Duration::from_millis(320);
/// How long a `__transaction_state` write waits for the ISR.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

pub struct TxnCoordinator {
    node: Arc<Node>,
    groups: Arc<group::Coordinator>,
    txns: Mutex<HashMap<String, TxnMetadata>>,
    /// The `__transaction_state` partitions led here and loaded; the leader epoch they were
    /// loaded at is the coordinator epoch.
    coordination: Coordination,
    /// Prepared transactions whose markers are being written, so each has one writer.
    completing: Mutex<HashSet<String>>,
    /// Bumped whenever a transaction completes (EndTxn waiters look again).
    completed: tokio::sync::watch::Sender<u64>,
    metrics: metrics::TxnMetrics,
    me: Weak<TxnCoordinator>,
}

/// A transactional id as DescribeTransactions and ListTransactions show it.
#[derive(Debug, Clone)]
pub struct TxnView {
    pub transactional_id: String,
    pub coordinator: i32,
    pub metadata: TxnMetadata,
}

/// Kafka's limit on `transactional.id` (a string key of the log).
const MAX_ID: usize = i16::MAX as usize;

pub fn validate_id(id: &str) -> Result<(), ApiError> {
    if id.is_empty() || id.len() > MAX_ID {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("transactional id of {} bytes", id.len()),
        ));
    }
    Ok(())
}

impl TxnCoordinator {
    pub fn new(node: Arc<Node>, groups: Arc<group::Coordinator>) -> Arc<TxnCoordinator> {
        let c = Arc::new_cyclic(|me| TxnCoordinator {
            node: node.clone(),
            groups,
            txns: Mutex::default(),
            coordination: Coordination::new(store::TOPIC),
            completing: Mutex::default(),
            completed: tokio::sync::watch::channel(0).0,
            metrics: metrics::TxnMetrics::default(),
            me: me.clone(),
        });
        node.metrics.register(|r| c.metrics.register(r));
        let weak = Arc::downgrade(&c);
        node.metrics.on_scrape(move || {
            if let Some(c) = weak.upgrade() {
                c.update_gauges();
            }
        });
        c
    }

    /// Per-state counts and the oldest open transaction's age, at each scrape.
    fn update_gauges(&self) {
        let now = self.node.clock.now_ms();
        let mut counts: Vec<(&'static str, i64)> = [
            TxnState::Empty,
            TxnState::Ongoing,
            TxnState::PrepareCommit,
            TxnState::PrepareAbort,
            TxnState::CompleteCommit,
            TxnState::CompleteAbort,
        ]
        .iter()
        .map(|s| (s.name(), 0))
        .collect();
        let mut oldest = 0i64;
        for m in self.lock().values() {
            if let Some(c) = counts.iter_mut().find(|(n, _)| *n == m.state.name()) {
                c.1 += 1;
            }
            if m.state == TxnState::Ongoing && m.start_ms >= 0 {
                oldest = oldest.max((now - m.start_ms) / 1000);
            }
        }
        self.metrics.set_states(&counts, oldest);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, TxnMetadata>> {
        self.txns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// InitProducerId with a transactional id: the producer id and epoch to use. A new id
    /// gets a fresh producer id; an existing one the next epoch, which fences every older
    /// producer of the id. An ongoing transaction of the id is aborted first
    /// (CONCURRENT_TRANSACTIONS if that takes longer than [`END_WAIT`]: the client retries).
    pub async fn init_producer(
        &self,
        id: &str,
        timeout_ms: i32,
        expected: (i64, i16),
    ) -> Result<(i64, i16), ApiError> {
        let max = self.node.config.transaction_max_timeout_ms;
        if timeout_ms <= 0 || timeout_ms as u64 > max {
            return Err(ApiError::new(
                ErrorCode::InvalidTransactionTimeout,
                format!("transaction.timeout.ms {timeout_ms} is not in 1..={max}"),
            ));
        }
        self.ensure_topic().await?;
        let mut fenced_once = false;
        loop {
            let epoch = self.check(id).await?;
            let now = self.node.clock.now_ms();
            let mut done = self.completed.subscribe();
            let current = self.lock().get(id).cloned();
            // A new id, or an exhausted epoch, takes a fresh producer id.
            let fresh = self
                .fresh_id_if(current.as_ref().is_none_or(TxnMetadata::epoch_exhausted))
                .await?;
            let fresh_id =
                || fresh.ok_or_else(|| ApiError::new(ErrorCode::UnknownServerError, "no id"));
            let next = self
                .transition(id, epoch, |m| match m {
                    None => Ok(Transition::Write(TxnMetadata::new(
                        fresh_id()?,
                        timeout_ms,
                        now,
                    ))),
                    Some(m) => m.init_producer(expected, timeout_ms, now, fresh_id),
                })
                .await?;
            if next.state != TxnState::PrepareAbort {
                return Ok((next.producer_id, next.producer_epoch));
            }
            // The previous producer's transaction is being aborted under a bumped epoch: once
            // it is, this producer takes the epoch after (Kafka answers CONCURRENT_TRANSACTIONS
            // and lets the client retry; waiting here saves the client's retry backoff).
            self.spawn_completion(id.to_string(), next, epoch);
            if fenced_once || !self.wait_completed(id, &mut done).await {
                return Err(ApiError::new(
                    ErrorCode::ConcurrentTransactions,
                    "aborting the previous producer's open transaction",
                ));
            }
            fenced_once = true;
        }
    }

    /// A fresh producer id when `needed`, allocated before a transition is decided (the
    /// decision is made under the lock, which an allocation must not be awaited under).
    async fn fresh_id_if(&self, needed: bool) -> Result<Option<i64>, ApiError> {
        if needed {
            Ok(Some(self.node.next_producer_id().await?))
        } else {
            Ok(None)
        }
    }

    /// Waits (up to [`END_WAIT`]) until `id`'s transaction is no longer prepared; whether it
    /// completed.
    async fn wait_completed(&self, id: &str, done: &mut tokio::sync::watch::Receiver<u64>) -> bool {
        let deadline = tokio::time::Instant::now() + END_WAIT;
        loop {
            let state = self.lock().get(id).map(|m| m.state);
            if !state.is_some_and(TxnState::is_prepared) {
                return true;
            }
            if tokio::time::timeout_at(deadline, done.changed())
                .await
                .is_err()
            {
                return false;
            }
        }
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn: the partitions (which exist) join the ongoing
    /// transaction.
    pub async fn add_partitions(
        &self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
    ) -> Result<(), ApiError> {
        let epoch = self.check(id).await?;
        let now = self.node.clock.now_ms();
        self.transition(id, epoch, |m| match m {
            None => Err(ApiError::new(
                ErrorCode::InvalidProducerIdMapping,
                format!("transactional id {id} has no producer"),
            )),
            Some(m) => m.add_partitions(producer_id, producer_epoch, partitions, now),
        })
        .await
        .map(|_| ())
    }

    /// KIP-890's check before a partition leader takes a producer's first transactional
    /// batch: each partition's error (NONE when it is in the producer's ongoing transaction).
    pub async fn verify(
        &self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
    ) -> Result<Vec<ErrorCode>, ApiError> {
        self.check(id).await?;
        let txns = self.lock();
        let Some(m) = txns.get(id) else {
            return Err(ApiError::new(
                ErrorCode::InvalidProducerIdMapping,
                format!("transactional id {id} has no producer"),
            ));
        };
        Ok(partitions
            .iter()
            .map(|p| m.verify(producer_id, producer_epoch, p))
            .collect())
    }

    /// EndTxn: commits or aborts the ongoing transaction; `bump` for transaction version 2
    /// (EndTxn v5+, [`TxnMetadata::end_bumping`]). Answered once its markers are written (or
    /// after [`END_WAIT`]: it is decided, and they go on being retried) with the producer id
    /// and epoch the client goes on with.
    pub async fn end_txn(
        &self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        commit: bool,
        bump: bool,
    ) -> Result<(i64, i16), ApiError> {
        let epoch = self.check(id).await?;
        let now = self.node.clock.now_ms();
        let mut done = self.completed.subscribe();
        let exhausted = (self.lock().get(id)).is_some_and(TxnMetadata::epoch_exhausted);
        let fresh = self.fresh_id_if(bump && exhausted).await?;
        let fresh_id =
            || fresh.ok_or_else(|| ApiError::new(ErrorCode::ConcurrentTransactions, "no new id"));
        let next = self
            .transition(id, epoch, |m| match m {
                None => Err(ApiError::new(
                    ErrorCode::InvalidProducerIdMapping,
                    format!("transactional id {id} has no producer"),
                )),
                Some(m) if bump => {
                    m.end_bumping(producer_id, producer_epoch, commit, now, fresh_id)
                }
                Some(m) => m.end(producer_id, producer_epoch, commit, now),
            })
            .await?;
        if !next.state.is_prepared() {
            return Ok(next.client_identity());
        }
        let handed_out = next.client_identity();
        self.spawn_completion(id.to_string(), next, epoch);
        if !self.wait_completed(id, &mut done).await {
            tracing::warn!(
                transactional_id = id,
                "markers not written yet; answering EndTxn, they are retried"
            );
        }
        Ok(handed_out)
    }

    /// Partitions joining a transaction at a partition leader's or group coordinator's request
    /// ([`messages::Join`]): each partition's outcome. Retries briefly while another transition
    /// of the id is written, which a producer writing to several leaders at once causes.
    pub(crate) async fn join(
        &self,
        id: &str,
        producer_id: i64,
        producer_epoch: i16,
        partitions: &[(String, i32)],
        how: messages::Join,
    ) -> Result<Vec<ErrorCode>, ApiError> {
        match how {
            messages::Join::Verify => {
                self.verify(id, producer_id, producer_epoch, partitions)
                    .await
            }
            messages::Join::Add => {
                let mut backoff = Duration::from_millis(5);
                loop {
                    match (self.add_partitions(id, producer_id, producer_epoch, partitions)).await {
                        Ok(()) => return Ok(vec![ErrorCode::None; partitions.len()]),
                        Err(e)
                            if e.code == ErrorCode::ConcurrentTransactions
                                && backoff < JOIN_RETRY_LIMIT =>
                        {
                            tokio::time::sleep(backoff).await;
                            backoff *= 2;
                        }
                        Err(e) => return Ok(vec![e.code; partitions.len()]),
                    }
                }
            }
        }
    }

    /// Aborts every ongoing transaction coordinated here that is older than its timeout,
    /// under a bumped epoch (see [`TxnMetadata::fence`]).
    pub async fn abort_timed_out(&self) {
        let now = self.node.clock.now_ms();
        let expired: Vec<String> = self
            .lock()
            .iter()
            .filter(|(_, m)| m.timed_out(now))
            .map(|(id, _)| id.clone())
            .collect();
        for id in expired {
            let Ok(epoch) = self.check_loaded(&id) else {
                continue;
            };
            let fenced = self
                .transition(&id, epoch, |m| match m {
                    Some(m) if m.timed_out(now) => Ok(Transition::Write(m.fence(now))),
                    _ => Ok(Transition::Unchanged),
                })
                .await;
            match fenced {
                Ok(next) if next.state == TxnState::PrepareAbort => {
                    tracing::info!(transactional_id = %id, producer_id = next.producer_id,
                        epoch = next.producer_epoch, timeout_ms = next.timeout_ms,
                        "aborting a transaction past its timeout");
                    self.metrics.timed_out();
                    self.spawn_completion(id, next, epoch);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(transactional_id = %id, error = %e, "cannot abort a timed-out transaction; retrying")
                }
            }
        }
    }

    /// Every transactional id coordinated here (ListTransactions, metrics).
    pub fn list(&self) -> Vec<TxnView> {
        let me = self.node.config.node_id as i32;
        self.lock()
            .iter()
            .map(|(id, m)| TxnView {
                transactional_id: id.clone(),
                coordinator: me,
                metadata: TxnMetadata {
                    pending: None,
                    ..m.clone()
                },
            })
            .collect()
    }

    /// One transactional id (DescribeTransactions).
    pub async fn describe(&self, id: &str) -> Result<TxnView, ApiError> {
        self.check(id).await?;
        let m = self.lock().get(id).cloned().ok_or_else(|| {
            ApiError::new(
                ErrorCode::TransactionalIdNotFound,
                format!("no transactional id {id}"),
            )
        })?;
        Ok(TxnView {
            transactional_id: id.to_string(),
            coordinator: self.node.config.node_id as i32,
            metadata: TxnMetadata { pending: None, ..m },
        })
    }

    /// Decides a transition under the lock, writes it, and makes it current once the ISR
    /// holds it. Returns the metadata in effect after.
    async fn transition(
        &self,
        id: &str,
        coordinator_epoch: i32,
        decide: impl FnOnce(Option<&TxnMetadata>) -> Result<Transition, ApiError>,
    ) -> Result<TxnMetadata, ApiError> {
        let (next, was_new) = {
            let mut txns = self.lock();
            let current = txns.get(id);
            if current.is_some_and(|m| m.pending.is_some()) {
                return Err(ApiError::new(
                    ErrorCode::ConcurrentTransactions,
                    "a transition is being written",
                ));
            }
            let next = match decide(current)? {
                Transition::Unchanged => {
                    return current
                        .cloned()
                        .ok_or_else(|| ApiError::new(ErrorCode::UnknownServerError, "no metadata"))
                }
                Transition::Write(next) => next,
            };
            state::check_transition(current, &next);
            let was_new = current.is_none();
            let mut placeholder = current.cloned().unwrap_or_else(|| next.clone());
            placeholder.pending = Some(Box::new(next.clone()));
            txns.insert(id.to_string(), placeholder);
            (next, was_new)
        };
        let written = self.write(id, &next, coordinator_epoch).await;
        let mut txns = self.lock();
        let still_here = (self.coordination).is_loaded(store::partition_for(id), coordinator_epoch);
        match written {
            Ok(()) if still_here => {
                txns.insert(id.to_string(), next.clone());
                Ok(next)
            }
            result => {
                if was_new {
                    txns.remove(id);
                } else if let Some(m) = txns.get_mut(id) {
                    m.pending = None;
                }
                Err(result.err().unwrap_or_else(|| {
                    ApiError::new(ErrorCode::NotCoordinator, "the coordinator moved")
                }))
            }
        }
    }

    /// Appends `m` to the id's partition of `__transaction_state` as its leader at
    /// `coordinator_epoch` and waits for the ISR, which must hold
    /// `transaction_state_log_min_isr` replicas (or all of them, when the partition has
    /// fewer: the topic grows with the cluster).
    async fn write(
        &self,
        id: &str,
        m: &TxnMetadata,
        coordinator_epoch: i32,
    ) -> Result<(), ApiError> {
        let not_coordinator = |e: ApiError| ApiError::new(ErrorCode::NotCoordinator, e.message);
        let p = store::partition_for(id);
        let part = self
            .node
            .leader_partition(store::TOPIC, p, coordinator_epoch)
            .map_err(not_coordinator)?;
        let replicas = (self.node.metadata.state().partition(store::TOPIC, p))
            .map_or(1, |info| info.replicas.len());
        let min_isr = (self.node.config.transaction_state_log_min_isr as usize).min(replicas);
        let isr = part.replication().isr_len().unwrap_or(0);
        if isr < min_isr {
            return Err(ApiError::new(
                ErrorCode::CoordinatorNotAvailable,
                format!(
                    "{}-{p}: {isr} in-sync replicas, transaction_state_log_min_isr needs {min_isr}",
                    store::TOPIC
                ),
            ));
        }
        let (key, value) = (store::key(id), store::value(m));
        let records = batch::build(&[(Some(&key), Some(&value))], self.node.clock.now_ms());
        let (info, committing) = part.produce_append(&records, -1, |_| {})?;
        if committing.is_some() {
            part.wait_committed(info.last_offset, coordinator_epoch, WRITE_TIMEOUT)
                .await
                .map_err(|code| {
                    let code = match code {
                        ErrorCode::NotLeaderOrFollower => ErrorCode::NotCoordinator,
                        c => c,
                    };
                    ApiError::new(code, format!("writing the state of {id}"))
                })?;
        }
        Ok(())
    }

    /// Writes the markers of a prepared transaction (once per transaction, see
    /// `completing`), then its completion.
    fn spawn_completion(&self, id: String, prepared: TxnMetadata, coordinator_epoch: i32) {
        let Some(me) = self.me.upgrade() else { return };
        if !self
            .completing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone())
        {
            return;
        }
        tokio::spawn(async move {
            me.complete(&id, prepared, coordinator_epoch).await;
            me.completing
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
            me.completed.send_modify(|n| *n += 1);
        });
    }

    /// The markers of `prepared` into each of its partitions, retried until written, then
    /// CompleteCommit / CompleteAbort. Gives up only when this broker stops coordinating the
    /// id (the next coordinator finishes it).
    async fn complete(&self, id: &str, prepared: TxnMetadata, coordinator_epoch: i32) {
        let commit = prepared.state == TxnState::PrepareCommit;
        let spec = messages::MarkerSpec {
            producer_id: prepared.producer_id,
            producer_epoch: prepared.producer_epoch,
            coordinator_epoch,
            commit,
        };
        let partitions: Vec<(String, i32)> = prepared.partitions.iter().cloned().collect();
        let started = crate::clock::Stopwatch::start();
        let coordinating =
            || (self.coordination).is_loaded(store::partition_for(id), coordinator_epoch);
        if !self.deliver(&spec, partitions, coordinating).await {
            tracing::info!(
                transactional_id = id,
                "no longer coordinating; the new coordinator completes the transaction"
            );
            return;
        }
        let mut backoff = Duration::from_millis(50);
        loop {
            let now = self.node.clock.now_ms();
            let done = self
                .transition(id, coordinator_epoch, |m| {
                    match m.and_then(|m| m.complete(now)) {
                        Some(next) => Ok(Transition::Write(next)),
                        None => Ok(Transition::Unchanged),
                    }
                })
                .await;
            match done {
                Ok(_) => break,
                Err(e) if e.code == ErrorCode::NotCoordinator || !coordinating() => return,
                Err(e) => {
                    tracing::warn!(transactional_id = id, error = %e, "cannot write the transaction's completion; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
            }
        }
        self.metrics
            .completed(commit, started.elapsed().as_secs_f64());
        tracing::debug!(
            transactional_id = id,
            commit,
            ms = started.elapsed().as_millis() as u64,
            "transaction completed"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::Clock;
    use crate::config::BrokerConfig;

    /// A transaction left open past its timeout is aborted, to the millisecond of a manual
    /// clock: not a moment before, and its producer is fenced after.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_open_transaction_is_aborted_once_the_clock_passes_its_timeout() {
        let clock = Clock::manual(1_700_000_000_000);
        let t = crate::testing::single_node(clock.clone(), BrokerConfig::default()).await;
        let groups = Arc::new(group::Coordinator::new(t.node.clone()));
        let txn = TxnCoordinator::new(t.node.clone(), groups.clone());
        groups.ensure_offsets_topic().await.expect("offsets topic");
        txn.ensure_topic().await.expect("transaction state topic");
        t.node.sync_partitions().expect("open partitions");
        groups.follow_leadership().await;
        txn.follow_leadership().await;

        let (pid, epoch) = txn.init_producer("t", 10_000, (-1, -1)).await.unwrap();
        let offsets = vec![(group::store::TOPIC.to_string(), 0)];
        txn.add_partitions("t", pid, epoch, &offsets).await.unwrap();
        let state = |txn: &TxnCoordinator| txn.lock().get("t").map(|m| m.state);

        clock.advance(Duration::from_millis(10_000));
        txn.abort_timed_out().await;
        assert_eq!(
            state(&txn),
            Some(TxnState::Ongoing),
            "at its timeout, not past it"
        );
        clock.advance(Duration::from_millis(1));
        txn.abort_timed_out().await;
        let mut done = txn.completed.subscribe();
        assert!(
            txn.wait_completed("t", &mut done).await,
            "the abort completes"
        );
        assert_eq!(state(&txn), Some(TxnState::CompleteAbort));
        let refused = txn.add_partitions("t", pid, epoch, &offsets).await;
        assert_eq!(refused.unwrap_err().code, ErrorCode::ProducerFenced);
    }
}
