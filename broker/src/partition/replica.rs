//! This broker's part in a partition's replication: its role from the metadata state, the
//! high watermark and the ISR as leader (with [`super::leader::LeaderState`]) in
//! [`Replication`]; and the partition's operations that need both its role and its log:
//! acks=all waits, the follower's side of the log (replica reads, replicated appends,
//! truncation to the leader's epochs).
//!
//! Lock rule: the role's lock is taken before the log's (`local.rs`), never while holding it:
//! an operation that must see the role unchanged across a log change (a replicated append, a
//! truncation) holds the role first.

use std::sync::atomic::{AtomicI32, AtomicI64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;

use super::leader::{IsrChange, LeaderState};
use super::{offsets_of, Offsets, Partition};
use crate::error::{ApiError, ErrorCode};
use crate::log::producer_state::ProducerState;
use crate::log::{AppendInfo, Batches, LogError};

/// This broker's part in a partition, from the metadata state.
pub enum Role {
    Leader(LeaderState),
    Follower {
        leader: u64,
        leader_epoch: i32,
    },
    /// No leader, or not yet known.
    Offline,
}

/// The partition's role in replication and what goes with it.
pub struct Replication {
    role: Mutex<Role>,
    /// The partition's current leader epoch (from the metadata state), stamped on appends.
    leader_epoch: AtomicI32,
    /// The high watermark, for produce requests waiting on acks=all.
    hw: tokio::sync::watch::Sender<i64>,
    /// As a follower: the leader's high watermark in its last fetch response (-1 before one).
    leader_hw: AtomicI64,
}

impl Replication {
    pub(super) fn new(leader_epoch: i32) -> Replication {
        Replication {
            role: Mutex::new(Role::Offline),
            leader_epoch: AtomicI32::new(leader_epoch),
            hw: tokio::sync::watch::channel(-1).0,
            leader_hw: AtomicI64::new(-1),
        }
    }

    fn role(&self) -> MutexGuard<'_, Role> {
        self.role.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This partition's current leader epoch, as the metadata state gives it.
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch.load(Ordering::Acquire)
    }

    /// Whether this broker has taken the leader's role for the partition.
    pub fn is_leader(&self) -> bool {
        matches!(&*self.role(), Role::Leader(_))
    }

    /// The ISR size while this broker leads (None otherwise).
    pub fn isr_len(&self) -> Option<usize> {
        match &*self.role() {
            Role::Leader(s) => Some(s.isr.len()),
            _ => None,
        }
    }

    /// The leader this broker follows, and its epoch (None unless a follower).
    pub fn following(&self) -> Option<(u64, i32)> {
        match &*self.role() {
            Role::Follower {
                leader,
                leader_epoch,
            } => Some((*leader, *leader_epoch)),
            _ => None,
        }
    }

    /// Followers' log ends as this leader last saw them.
    pub fn follower_log_ends(&self) -> Vec<(u64, i64)> {
        match &*self.role() {
            Role::Leader(s) => s.follower_log_ends(),
            _ => Vec::new(),
        }
    }

    /// As leader, each follower in the ISR with its log end as last seen (-1 before its first
    /// fetch); nothing otherwise.
    pub fn for_each_in_sync_follower(&self, mut each: impl FnMut(u64, i64)) {
        if let Role::Leader(s) = &*self.role() {
            for &id in s.isr.iter().filter(|&&id| id != s.me) {
                each(id, s.follower_end(id).unwrap_or(-1));
            }
        }
    }

    /// A proposed ISR change is decided, committed (and applied) or not: another may follow.
    pub fn isr_change_settled(&self) {
        if let Role::Leader(s) = &mut *self.role() {
            s.change_settled();
        }
    }

    /// Wakes acks=all waiters, which look at the role and the high watermark again.
    fn notify(&self) {
        self.hw.send_modify(|_| {});
    }
}

/// An acks=all produce appended and not yet acknowledged: what [`Partition::committed`] waits
/// for.
pub struct Committing {
    info: AppendInfo,
    leader_epoch: i32,
    min_isr: usize,
}

impl Partition {
    /// As leader, each follower's log end as last seen (-1 before its first fetch): how far a
    /// replica a move adds has come. Nothing when not leading.
    pub fn follower_log_ends(&self) -> Vec<(u64, i64)> {
        self.replication.follower_log_ends()
    }

    /// The first half of a produce to this partition as its leader, with Kafka's `acks`: for
    /// acks=all, refuses while the ISR is smaller than `min.insync.replicas`; appends (validating
    /// the batches, see [`Partition::append`]; `appended` sees what was written). Returns the
    /// append, and for acks=all what [`Partition::committed`] must wait for before answering.
    pub fn produce_append(
        &self,
        records: &Bytes,
        acks: i16,
        appended: impl FnOnce(&AppendInfo),
    ) -> Result<(AppendInfo, Option<Committing>), ApiError> {
        let tp = &self.tp;
        let leader_epoch = self.replication.leader_epoch();
        let min_isr = self.min_insync_replicas();
        if acks == -1 {
            let isr = self.replication.isr_len().unwrap_or(0);
            if isr < min_isr {
                return Err(ApiError::new(
                    ErrorCode::NotEnoughReplicas,
                    format!(
                        "{}-{}: {isr} in-sync replicas, min.insync.replicas is {min_isr}",
                        tp.topic, tp.partition
                    ),
                ));
            }
        }
        let info = self.append(records)?;
        appended(&info);
        let committing = (acks == -1).then_some(Committing {
            info,
            leader_epoch,
            min_isr,
        });
        Ok((info, committing))
    }

    /// The second half of an acks=all produce: waits up to `timeout` until the ISR holds the
    /// records, and checks the ISR still meets `min.insync.replicas`.
    pub async fn committed(
        &self,
        c: Committing,
        timeout: Duration,
    ) -> Result<AppendInfo, ApiError> {
        let tp = &self.tp;
        self.wait_committed(c.info.last_offset, c.leader_epoch, timeout)
            .await
            .map_err(|code| {
                ApiError::new(
                    code,
                    format!(
                        "{}-{}: offset {} not replicated to the ISR in time",
                        tp.topic, tp.partition, c.info.last_offset
                    ),
                )
            })?;
        let isr = self.replication.isr_len().unwrap_or(0);
        if isr < c.min_isr {
            return Err(ApiError::new(
                ErrorCode::NotEnoughReplicasAfterAppend,
                format!(
                    "{}-{}: the ISR shrank to {isr} below min.insync.replicas {}",
                    tp.topic, tp.partition, c.min_isr
                ),
            ));
        }
        Ok(c.info)
    }

    fn role(&self) -> MutexGuard<'_, Role> {
        self.replication.role()
    }

    /// Takes this broker's role and leader epoch from the metadata state's view of the
    /// partition.
    pub fn set_role(&self, me: u64, info: &strata_metadata::PartitionInfo) {
        (self.replication.leader_epoch).store(info.leader_epoch, Ordering::Release);
        {
            let mut role = self.role();
            {
                let mut log = self.log();
                let sole_leader = matches!(*role, Role::Leader(_)) && !log.is_replicated();
                log.set_replicated(info.replicas.len() > 1, sole_leader);
            }
            match info.leader {
                Some(l) if l == me => match &mut *role {
                    Role::Leader(s) if s.leader_epoch == info.leader_epoch => s.update(
                        info.partition_epoch,
                        info.replicas.clone(),
                        info.isr.clone(),
                        self.clock.instant(),
                    ),
                    _ => {
                        // As Kafka's makeLeader: the new epoch starts at the log end now, so
                        // a follower asking where an older epoch ends gets this offset even
                        // before anything is written in the new one.
                        let log_end = {
                            let mut log = self.log();
                            if let Err(e) = log.assign_epoch(info.leader_epoch) {
                                tracing::error!(topic = %self.tp.topic, partition = self.tp.partition, error = %e, "cannot record the new leader epoch");
                            }
                            log.log_end_offset()
                        };
                        // Debug: a broker taking over thousands of partitions would log each.
                        // `Partitions::sync` reports the count.
                        tracing::debug!(topic = %self.tp.topic, partition = self.tp.partition,
                            leader_epoch = info.leader_epoch, log_end, isr = ?info.isr, "leading partition");
                        *role = Role::Leader(LeaderState::new(
                            me,
                            info.leader_epoch,
                            info.partition_epoch,
                            info.replicas.clone(),
                            info.isr.clone(),
                            log_end,
                            self.clock.instant(),
                        ));
                    }
                },
                Some(l) => {
                    *role = Role::Follower {
                        leader: l,
                        leader_epoch: info.leader_epoch,
                    }
                }
                None => *role = Role::Offline,
            }
        }
        // Wakes acks=all waiters, which give up if this broker no longer leads, and the
        // sessions reading the partition, whose answer for it may change.
        self.replication.notify();
        self.wake();
        self.advance_hw();
    }

    /// On the leader: moves the high watermark to what the ISR holds, and wakes whoever waits
    /// on it (fetches, acks=all produces).
    pub fn advance_hw(&self) {
        let hw = {
            let role = self.role();
            let Role::Leader(s) = &*role else {
                return;
            };
            let mut log = self.log();
            let current = log.high_watermark();
            let hw = s.high_watermark(log.log_end_offset(), current);
            if hw == current {
                return;
            }
            log.set_high_watermark(hw);
            log.high_watermark()
        };
        self.replication.hw.send_replace(hw);
        self.wake();
    }

    /// The leader records a follower's fetch from `offset`; returns an ISR expansion to propose.
    pub fn follower_fetched(&self, follower: u64, offset: i64) -> Option<IsrChange> {
        let change = {
            let mut role = self.role();
            let Role::Leader(s) = &mut *role else {
                return None;
            };
            let (log_end, hw) = {
                let log = self.log();
                (log.log_end_offset(), log.high_watermark())
            };
            let before = s.follower_end(follower);
            let change = s.fetched(follower, offset, log_end, hw, self.clock.instant());
            // The high watermark can move only if this follower's end did, or it is joining.
            if before == Some(offset) && change.is_none() {
                return None;
            }
            change
        };
        self.advance_hw();
        change
    }

    /// On the leader: an ISR shrink to propose, for followers lagging over `max_lag`.
    pub fn isr_shrink(&self, max_lag: std::time::Duration) -> Option<IsrChange> {
        match &mut *self.role() {
            Role::Leader(s) => s.shrink(self.clock.instant(), max_lag),
            _ => None,
        }
    }

    /// Waits until the high watermark passes `last_offset` (acks=all), while this broker
    /// leads at `leader_epoch`. `Err` carries the Kafka error to answer with.
    pub async fn wait_committed(
        &self,
        last_offset: i64,
        leader_epoch: i32,
        timeout: std::time::Duration,
    ) -> Result<(), crate::error::ErrorCode> {
        let mut rx = self.replication.hw.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.replication.leader_epoch() != leader_epoch || !self.replication.is_leader() {
                return Err(crate::error::ErrorCode::NotLeaderOrFollower);
            }
            if self.log().high_watermark() > last_offset {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => {
                    return Err(crate::error::ErrorCode::RequestTimedOut);
                }
            }
        }
    }

    /// Batches from `offset` up to the log end, for a follower (never from the remote tier:
    /// a follower starts at the leader's local log start).
    pub fn read_replica(
        &self,
        offset: i64,
        max_bytes: usize,
    ) -> Result<(Batches, Offsets), LogError> {
        let remote = self.remote();
        let mut log = self.log();
        if offset < log.log_start_offset() {
            return Err(LogError::OffsetOutOfRange {
                offset,
                start: log.log_start_offset(),
                end: log.log_end_offset(),
            });
        }
        let bytes = log.read_replica(offset, max_bytes)?;
        Ok((bytes, offsets_of(&log, &remote)))
    }

    /// A follower appends batches copied from its leader (validated here: CRC, sizes) and
    /// takes the leader's high watermark as far as it has the data. `from` is the leader and
    /// leader epoch the batches were fetched under: if this broker no longer follows that
    /// leader at that epoch (the answer crossed a leadership change), nothing is appended and
    /// `Ok(None)` says so.
    pub fn append_replicated(
        &self,
        records: &Bytes,
        leader_hw: i64,
        from: (u64, i32),
    ) -> Result<Option<u64>, LogError> {
        // A fetch with nothing new carries no batch at all.
        let batches = if records.is_empty() {
            Vec::new()
        } else {
            crate::log::batch::split_and_validate(records, i32::MAX as usize)?
        };
        // Held across the append: the role cannot change under it (lock order: role, log).
        let role = self.role();
        if !follows(&role, from) {
            return Ok(None);
        }
        let mut log = self.log();
        let n = if batches.is_empty() {
            0
        } else {
            log.append_replicated(&batches, self.clock.now_ms())?
        };
        if n > 0 {
            self.activity.mark(self);
        }
        (self.replication.leader_hw).store(leader_hw, Ordering::Release);
        let hw = leader_hw.min(log.log_end_offset());
        let moved = hw > log.high_watermark();
        if moved {
            log.set_high_watermark(hw);
        }
        drop(log);
        drop(role);
        if moved {
            // Consumers reading from this follower (KIP-392) wait for its high watermark.
            self.wake();
        }
        Ok(Some(n))
    }

    /// The partition is no longer hosted here (deleted, or moved away): it leads nothing, and
    /// produces waiting for acks=all are answered now rather than at their timeout.
    pub(super) fn stop_hosting(&self) {
        *self.role() = Role::Offline;
        self.replication.notify();
    }

    /// How many committed offsets this replica lacks (DescribeLogDirs' offset lag): 0 as
    /// leader; as a follower the leader's last reported high watermark minus this log's end,
    /// or -1 before the first fetch answered.
    pub fn offset_lag(&self) -> i64 {
        if self.replication.is_leader() {
            return 0;
        }
        let leader_hw = self.replication.leader_hw.load(Ordering::Acquire);
        if leader_hw < 0 {
            return -1;
        }
        (leader_hw - self.log().log_end_offset()).max(0)
    }

    /// The newest leader epoch in the local log, and the log end.
    pub fn latest_epoch_and_end(&self) -> (i32, i64) {
        let log = self.log();
        (log.latest_epoch(), log.log_end_offset())
    }

    /// A follower of `from` (leader, leader epoch) cuts its log before the first batch ending
    /// at or after `offset`. `Ok(false)`, and nothing cut, if it no longer follows `from`.
    pub fn truncate_to(&self, offset: i64, from: (u64, i32)) -> Result<bool, LogError> {
        let role = self.role();
        if !follows(&role, from) {
            return Ok(false);
        }
        self.log().truncate_to(offset, self.clock.now_ms())?;
        Ok(true)
    }

    /// A follower of `from` empties its log to start at `offset` (where the leader says it
    /// should start), knowing of the batches below it what `producers` says. `Ok(false)`, and
    /// nothing changed, if it no longer follows `from`.
    pub fn reset_to(
        &self,
        offset: i64,
        from: (u64, i32),
        producers: ProducerState,
    ) -> Result<bool, LogError> {
        let role = self.role();
        if !follows(&role, from) {
            return Ok(false);
        }
        self.log()
            .reset_to(offset, self.clock.now_ms(), producers)?;
        Ok(true)
    }

    /// The producer state as of `offset` (see [`ProducerState::before`]): what the
    /// offloader stores beside a segment ending there.
    pub fn producers_before(&self, offset: i64) -> ProducerState {
        self.log().producers_before(offset)
    }

    /// OffsetForLeaderEpoch: the largest epoch ≤ `epoch` and the offset where it ends.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        self.log().end_offset_for_epoch(epoch)
    }

    /// The leader epoch of the batch holding `offset` (-1 when unknown).
    pub fn epoch_for_offset(&self, offset: i64) -> i32 {
        self.log().epoch_for_offset(offset)
    }
}

/// Whether `role` follows `from` (leader, leader epoch).
fn follows(role: &Role, from: (u64, i32)) -> bool {
    matches!(role, Role::Follower { leader, leader_epoch } if (*leader, *leader_epoch) == from)
}
