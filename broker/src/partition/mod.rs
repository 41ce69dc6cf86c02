//! The partitions this broker hosts: one [`Log`] each, opened, configured and deleted to match
//! the metadata state machine, which is the only source of topics and partitions.
//!
//! Invariants:
//! - a partition directory `<data>/<topic>-<n>` belongs to exactly one topic id (recorded in its
//!   `partition.json`); a directory whose topic id is not in the metadata state is deleted, so a
//!   topic deleted and re-created under the same name never sees the old records;
//! - appends to one partition are serialised by its log mutex; readers take the same mutex only
//!   to slice mapped bytes, never across an await;
//! - every append that adds records wakes the fetches waiting on that partition;
//! - a tiered partition's log is one log over two tiers: its start is the remote log's start
//!   (or the local one's, whichever is lower, never below the quorum's floor), and an offset
//!   below the local start is answered from the remote segment holding it ([`Read::Remote`]).

pub mod metrics;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use strata_metadata::{ClusterState, PartitionInfo, RemoteSegment};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::clock::Clock;
use crate::config::BrokerConfig;
use crate::log::cleaning::CleanStats;
use crate::log::{AppendInfo, ClosedSegment, Log, LogError, RemoteView};
use crate::replication::leader::{IsrChange, LeaderState};
use crate::topic_config;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

#[derive(Serialize, Deserialize)]
struct PartitionMeta {
    version: u8,
    topic: String,
    partition: i32,
    topic_id: Uuid,
}

/// A partition's local and remote ranges (`end`s are exclusive).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TierStats {
    pub topic: String,
    pub partition: i32,
    pub tiered: bool,
    pub offsets: Offsets,
    pub local_start: i64,
    pub local_segments: usize,
    pub local_bytes: u64,
    pub remote_start: Option<i64>,
    pub remote_end: Option<i64>,
    pub remote_segments: usize,
    pub remote_bytes: u64,
    pub upload_lag_segments: usize,
    pub upload_lag_bytes: u64,
}

/// Offsets of a partition at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offsets {
    pub log_start: i64,
    pub high_watermark: i64,
    pub log_end: i64,
}

/// The committed remote segments of a partition, as of the last metadata change.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RemoteLog {
    /// Committed segments in offset order.
    pub segments: Vec<RemoteSegment>,
    /// Records below this are deleted even where a segment still holds them.
    pub floor: i64,
    /// One past the last offset ever committed remotely (deleting segments included): where
    /// the next upload must start.
    pub end: i64,
}

impl RemoteLog {
    fn of(info: &PartitionInfo) -> RemoteLog {
        RemoteLog {
            segments: info.remote_segments().cloned().collect(),
            floor: info.log_start_floor,
            end: info.remote_log_end().unwrap_or(0),
        }
    }

    /// First readable remote offset.
    pub fn start(&self) -> Option<i64> {
        self.segments.first().map(|s| s.base_offset.max(self.floor))
    }

    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size_bytes).sum()
    }

    /// The segment holding `offset`, or the first one after it (offsets may have gaps).
    pub fn segment_for(&self, offset: i64) -> Option<&RemoteSegment> {
        let i = self.segments.partition_point(|s| s.last_offset < offset);
        self.segments.get(i)
    }

    fn view(&self) -> RemoteView {
        RemoteView {
            end: self.segments.last().map(|s| s.last_offset + 1).unwrap_or(0),
            bytes: self.bytes(),
        }
    }
}

/// Where a fetch's bytes come from.
#[derive(Debug)]
pub enum Read {
    /// Whole batches from the local log (possibly empty: nothing there yet).
    Local(Bytes),
    /// The offset lies in this remote segment; the tier reads it.
    Remote(RemoteSegment),
}

/// Where a timestamp lookup is answered.
#[derive(Debug)]
pub enum TimeLookup {
    /// `(offset, timestamp)`, or `None` when no record is that new.
    Local(Option<(i64, i64)>),
    /// The first record that new is in this remote segment.
    Remote(RemoteSegment),
}

pub struct Partition {
    pub tp: TopicPartition,
    pub topic_id: Uuid,
    log: Mutex<Log>,
    remote: RwLock<Arc<RemoteLog>>,
    waiters: Mutex<Vec<Weak<Notify>>>,
    /// Set when the topic is deleted, so a clean in progress stops writing into the directory
    /// that is about to be removed.
    deleted: AtomicBool,
    /// The partition's current leader epoch (from the metadata state), stamped on appends.
    leader_epoch: AtomicI32,
    /// This broker's role in the partition's replication. Lock order: `replica`, then `log`.
    replica: Mutex<Role>,
    /// The high watermark, for produce requests waiting on acks=all.
    hw: tokio::sync::watch::Sender<i64>,
    /// Record timestamps of appends and the clock retention and compaction measure against.
    clock: Clock,
}

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

impl Partition {
    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        // A panic while holding the lock cannot leave the log half-written (appends are whole
        // batches or an error), so a poisoned lock is still usable.
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Validates a produce request's record batches against this topic's
    /// `max.message.bytes` (outside the log lock: the CRC pass touches every byte) and appends
    /// them.
    pub fn append(&self, records: &Bytes) -> Result<AppendInfo, LogError> {
        let (max_message_bytes, compact) = {
            let log = self.log();
            (log.config().max_message_bytes, log.config().compact)
        };
        let batches = crate::log::batch::split_and_validate(records, max_message_bytes)?;
        if compact {
            for (header, bytes) in &batches {
                crate::log::compact::check_keys(bytes, header)?;
            }
        }
        let epoch = self.leader_epoch.load(Ordering::Acquire);
        let info = self.log().append(&batches, epoch, self.clock.now_ms())?;
        if !info.duplicate {
            self.wake();
        }
        self.advance_hw();
        Ok(info)
    }

    fn role(&self) -> std::sync::MutexGuard<'_, Role> {
        self.replica.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes this broker's role from the metadata state's view of the partition.
    pub fn set_role(&self, me: u64, info: &strata_metadata::PartitionInfo) {
        {
            let mut role = self.role();
            self.log().set_replicated(info.replicas.len() > 1);
            match info.leader {
                Some(l) if l == me => match &mut *role {
                    Role::Leader(s) if s.leader_epoch == info.leader_epoch => s.update(
                        info.partition_epoch,
                        info.replicas.clone(),
                        info.isr.clone(),
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
                        tracing::info!(topic = %self.tp.topic, partition = self.tp.partition,
                            leader_epoch = info.leader_epoch, log_end, isr = ?info.isr, "leading partition");
                        *role = Role::Leader(LeaderState::new(
                            me,
                            info.leader_epoch,
                            info.partition_epoch,
                            info.replicas.clone(),
                            info.isr.clone(),
                            log_end,
                            std::time::Instant::now(),
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
        // Wakes acks=all waiters, which give up if this broker no longer leads.
        self.hw.send_modify(|_| {});
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
        self.hw.send_replace(hw);
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
            s.fetched(follower, offset, log_end, hw, std::time::Instant::now())
        };
        self.advance_hw();
        change
    }

    /// On the leader: an ISR shrink to propose, for followers lagging over `max_lag`.
    pub fn isr_shrink(&self, max_lag: std::time::Duration) -> Option<IsrChange> {
        match &mut *self.role() {
            Role::Leader(s) => s.shrink(std::time::Instant::now(), max_lag),
            _ => None,
        }
    }

    /// A proposed ISR change did not commit.
    pub fn isr_change_failed(&self) {
        if let Role::Leader(s) = &mut *self.role() {
            s.change_failed();
        }
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

    /// Waits until the high watermark passes `last_offset` (acks=all), while this broker
    /// leads at `leader_epoch`. `Err` carries the Kafka error to answer with.
    pub async fn wait_committed(
        &self,
        last_offset: i64,
        leader_epoch: i32,
        timeout: std::time::Duration,
    ) -> Result<(), crate::error::ErrorCode> {
        let mut rx = self.hw.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.current_leader_epoch() != leader_epoch || !self.is_leader() {
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

    /// This partition's current leader epoch, as the metadata state gives it.
    pub fn current_leader_epoch(&self) -> i32 {
        self.leader_epoch.load(Ordering::Acquire)
    }

    /// Whether this broker has taken the leader's role for the partition.
    pub fn is_leader(&self) -> bool {
        matches!(&*self.role(), Role::Leader(_))
    }

    /// Batches from `offset` up to the log end, for a follower (never from the remote tier:
    /// a follower starts at the leader's local log start).
    pub fn read_replica(
        &self,
        offset: i64,
        max_bytes: usize,
    ) -> Result<(Bytes, Offsets), LogError> {
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
    /// takes the leader's high watermark as far as it has the data.
    pub fn append_replicated(&self, records: &Bytes, leader_hw: i64) -> Result<u64, LogError> {
        // A fetch with nothing new carries no batch at all.
        let batches = if records.is_empty() {
            Vec::new()
        } else {
            crate::log::batch::split_and_validate(records, i32::MAX as usize)?
        };
        let mut log = self.log();
        let n = if batches.is_empty() {
            0
        } else {
            log.append_replicated(&batches, self.clock.now_ms())?
        };
        let hw = leader_hw.min(log.log_end_offset());
        if hw > log.high_watermark() {
            log.set_high_watermark(hw);
        }
        Ok(n)
    }

    /// The newest leader epoch in the local log, and the log end.
    pub fn latest_epoch_and_end(&self) -> (i32, i64) {
        let log = self.log();
        (log.latest_epoch(), log.log_end_offset())
    }

    /// A follower cuts its log before the first batch ending at or after `offset`.
    pub fn truncate_to(&self, offset: i64) -> Result<i64, LogError> {
        self.log().truncate_to(offset, self.clock.now_ms())
    }

    /// A follower empties its log to start at `offset` (the leader's local log start).
    pub fn reset_to(&self, offset: i64) -> Result<i64, LogError> {
        self.log().reset_to(offset, self.clock.now_ms())
    }

    /// OffsetForLeaderEpoch: the largest epoch ≤ `epoch` and the offset where it ends.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        self.log().end_offset_for_epoch(epoch)
    }

    /// The leader epoch of the batch holding `offset` (-1 when unknown).
    pub fn epoch_for_offset(&self, offset: i64) -> i32 {
        self.log().epoch_for_offset(offset)
    }

    fn wake(&self) {
        let waiters = std::mem::take(&mut *self.waiters.lock().unwrap_or_else(|p| p.into_inner()));
        for w in waiters {
            if let Some(n) = w.upgrade() {
                n.notify_one();
            }
        }
    }

    /// Registers a fetch that waits for the next append.
    pub fn watch(&self, notify: &Arc<Notify>) {
        let mut waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        waiters.retain(|w| w.strong_count() > 0);
        waiters.push(Arc::downgrade(notify));
    }

    pub fn remote(&self) -> Arc<RemoteLog> {
        self.remote
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Batches from `offset` for a consumer (up to the high watermark), or the remote segment
    /// to read them from.
    pub fn read(&self, offset: i64, max_bytes: usize) -> Result<(Read, Offsets), LogError> {
        let remote = self.remote();
        let mut log = self.log();
        let offsets = offsets_of(&log, &remote);
        if offset < offsets.log_start || offset > offsets.log_end {
            return Err(LogError::OffsetOutOfRange {
                offset,
                start: offsets.log_start,
                end: offsets.log_end,
            });
        }
        if offset < log.log_start_offset() {
            if let Some(seg) = remote.segment_for(offset) {
                if seg.base_offset < log.log_start_offset() {
                    return Ok((Read::Remote(seg.clone()), offsets));
                }
            }
            // A gap between the tiers (retention deleted segments that were never
            // offloaded): the log continues at the local start, as after a compaction gap.
            let start = log.log_start_offset();
            return Ok((Read::Local(log.read(start, max_bytes, i64::MAX)?), offsets));
        }
        let bytes = log.read(offset, max_bytes, i64::MAX)?;
        Ok((Read::Local(bytes), offsets))
    }

    pub fn offsets(&self) -> Offsets {
        offsets_of(&self.log(), &self.remote())
    }

    /// ListOffsets by timestamp over both tiers.
    pub fn offset_for_timestamp(&self, ts: i64) -> Result<TimeLookup, LogError> {
        let remote = self.remote();
        let mut log = self.log();
        let local_start = log.log_start_offset();
        if let Some(seg) = remote.segments.iter().find(|s| {
            s.base_offset < local_start && s.last_offset >= remote.floor && s.max_timestamp >= ts
        }) {
            return Ok(TimeLookup::Remote(seg.clone()));
        }
        Ok(TimeLookup::Local(log.offset_for_timestamp(ts)?))
    }

    /// Closed local segments the offloader may upload: those holding anything at or past
    /// `from` (the remote end). The first may begin below it: replicas roll at different
    /// offsets, and a new leader's segment can straddle what its predecessor uploaded.
    pub fn offload_candidates(&self, from: i64) -> Vec<ClosedSegment> {
        not_offloaded(self.log().closed_segments(), from)
    }

    pub fn closed_segment_bytes(&self, base: i64) -> Result<Option<Bytes>, LogError> {
        self.log().closed_segment_bytes(base)
    }

    pub fn is_tiered(&self) -> bool {
        self.log().config().remote_storage
    }

    pub fn log_config(&self) -> topic_config::LogConfig {
        self.log().config().clone()
    }

    /// The topic's `min.insync.replicas`.
    pub fn min_insync_replicas(&self) -> usize {
        self.log().config().min_insync_replicas
    }

    /// Bytes of the local segments holding offsets at or above `offset`.
    pub fn local_bytes_from(&self, offset: i64) -> u64 {
        self.log().bytes_from(offset)
    }

    /// Remote retention moved the log start to `offset`: local copies below it go too.
    pub fn delete_local_before(&self, offset: i64) -> Result<(), LogError> {
        let mut log = self.log();
        if offset > log.log_start_offset() {
            let to = offset.min(log.high_watermark());
            log.delete_records_before(to, self.clock.now_ms())?;
        }
        Ok(())
    }

    /// Timestamp of the record at `offset` (for lag in seconds), if it is readable.
    pub fn timestamp_at(&self, offset: i64) -> Option<i64> {
        let bytes = self.log().read(offset, 1, i64::MAX).ok()?;
        let header = crate::log::batch::BatchHeader::parse(&bytes).ok()?;
        if header.is_log_append_time() {
            return Some(header.max_timestamp);
        }
        crate::log::records::first(&bytes, &header, |r| r.offset >= offset)
            .ok()?
            .map(|(_, timestamp)| timestamp)
    }

    /// ListOffsets MAX_TIMESTAMP over both tiers: the local answer, or the remote segment
    /// whose newest record is newer than anything local.
    pub fn max_timestamp(&self) -> TimeLookup {
        let remote = self.remote();
        let log = self.log();
        let local = log.max_timestamp();
        let newest_remote = remote
            .segments
            .iter()
            .filter(|s| s.base_offset < log.log_start_offset() && s.last_offset >= remote.floor)
            .max_by_key(|s| s.max_timestamp);
        match (newest_remote, local) {
            (Some(seg), Some((_, ts))) if seg.max_timestamp > ts => TimeLookup::Remote(seg.clone()),
            (Some(seg), None) => TimeLookup::Remote(seg.clone()),
            _ => TimeLookup::Local(local),
        }
    }

    pub fn delete_records_before(&self, offset: i64) -> Result<i64, LogError> {
        self.log()
            .delete_records_before(offset, self.clock.now_ms())
    }

    /// One compaction pass if the log is dirty enough (see `log::cleaning`). The log lock is
    /// held only to plan and to swap, never while segments are read or written.
    pub fn clean(
        &self,
        map_memory: usize,
        progress: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Option<CleanStats>, LogError> {
        let now = self.clock.now_ms();
        let Some(plan) = self.log().clean_plan(now)? else {
            return Ok(None);
        };
        let mut progress = |bytes| !self.deleted.load(Ordering::Acquire) && progress(bytes);
        let Some(cleaned) = plan.clean(map_memory, now, &mut progress)? else {
            return Ok(None);
        };
        let stats = cleaned.stats;
        let mut log = self.log();
        if self.deleted.load(Ordering::Acquire) {
            return Ok(None);
        }
        let retired = log.install_cleaned(cleaned)?;
        drop(log);
        // The lock is released: now the replaced segments may be closed.
        Ok(retired.map(|r| {
            drop(r);
            stats
        }))
    }

    /// Share of the compactable log not yet cleaned (0 for logs that are not compacted).
    pub fn dirty_ratio(&self) -> f64 {
        self.log().dirty_ratio(self.clock.now_ms())
    }

    pub fn stats(&self) -> (Offsets, u64, usize) {
        let remote = self.remote();
        let log = self.log();
        (
            offsets_of(&log, &remote),
            log.size_bytes(),
            log.segment_count(),
        )
    }

    /// Both tiers of this partition, for the operator (`/v1/partitions`, `strata topic
    /// describe`).
    pub fn tier_stats(&self) -> TierStats {
        let remote = self.remote();
        let log = self.log();
        let tiered = log.config().remote_storage;
        let pending: Vec<ClosedSegment> = if tiered {
            not_offloaded(log.closed_segments(), remote.end)
        } else {
            Vec::new()
        };
        TierStats {
            topic: self.tp.topic.clone(),
            partition: self.tp.partition,
            tiered,
            offsets: offsets_of(&log, &remote),
            local_start: log.log_start_offset(),
            local_segments: log.segment_count(),
            local_bytes: log.size_bytes(),
            remote_start: remote.start(),
            remote_end: remote.segments.last().map(|s| s.last_offset + 1),
            remote_segments: remote.segments.len(),
            remote_bytes: remote.bytes(),
            upload_lag_segments: pending.len(),
            upload_lag_bytes: pending.iter().map(|s| s.size).sum(),
        }
    }

    /// First offset held on local disk.
    pub fn local_log_start(&self) -> i64 {
        self.log().log_start_offset()
    }

    /// Periodic work: retention, time-based roll, time-based flush.
    pub fn housekeeping(&self, now: i64, retention: bool) -> Result<(), LogError> {
        if retention {
            self.enforce_retention(now)?;
        }
        let mut log = self.log();
        log.roll_if_old(now)?;
        log.flush_if_due(now)
    }

    /// Fsyncs the segments rolled since the last call, outside the log lock, then moves the
    /// recovery point past them (see `Log::take_unflushed_rolls`).
    pub fn flush_rolled(&self) -> Result<(), LogError> {
        let rolls = self.log().take_unflushed_rolls();
        // The lock is released while the disk works.
        match crate::log::fsync_rolls(&rolls) {
            Ok(Some(up_to)) => self.log().rolls_flushed(up_to),
            Ok(None) => Ok(()),
            Err(e) => {
                self.log().restore_unflushed_rolls(rolls);
                Err(e.into())
            }
        }
    }

    /// Deletes what retention allows now (see [`Log::enforce_retention`]); also run right
    /// after an offload, so local disk is freed without waiting for the next retention pass.
    pub fn enforce_retention(&self, now: i64) -> Result<(), LogError> {
        let remote = self.remote();
        let mut log = self.log();
        let view = log.config().remote_storage.then(|| remote.view());
        let deleted = log.enforce_retention(now, view)?;
        if deleted > 0 {
            tracing::info!(topic = %self.tp.topic, partition = self.tp.partition, deleted, "retention deleted segments");
        }
        Ok(())
    }
}

/// The closed segments holding anything at or past `remote_end`.
fn not_offloaded(mut segments: Vec<ClosedSegment>, remote_end: i64) -> Vec<ClosedSegment> {
    segments.retain(|s| s.next_offset > remote_end);
    segments
}

fn offsets_of(log: &Log, remote: &RemoteLog) -> Offsets {
    let local = log.log_start_offset();
    let start = match remote.start() {
        Some(r) if r < local => r,
        _ => local,
    };
    Offsets {
        log_start: start.max(remote.floor).min(log.log_end_offset()),
        high_watermark: log.high_watermark(),
        log_end: log.log_end_offset(),
    }
}

/// All partitions hosted here, kept in step with the metadata state.
pub struct Partitions {
    data_dir: PathBuf,
    node_id: u64,
    config: BrokerConfig,
    map: RwLock<HashMap<TopicPartition, Arc<Partition>>>,
    /// Serialises `sync` so two callers never open the same log twice.
    sync_lock: Mutex<()>,
    clock: Clock,
}

impl Partitions {
    pub fn new(config: &BrokerConfig, clock: Clock) -> Partitions {
        Partitions {
            data_dir: config.data_dir.clone(),
            node_id: config.node_id,
            config: config.clone(),
            map: RwLock::new(HashMap::new()),
            sync_lock: Mutex::new(()),
            clock,
        }
    }

    pub fn get(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        let tp = TopicPartition {
            topic: topic.to_string(),
            partition,
        };
        self.map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&tp)
            .cloned()
    }

    pub fn all(&self) -> Vec<Arc<Partition>> {
        let mut v: Vec<_> = self
            .map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        v.sort_by(|a, b| a.tp.cmp(&b.tp));
        v
    }

    fn dir_of(&self, tp: &TopicPartition) -> PathBuf {
        self.data_dir.join(format!("{}-{}", tp.topic, tp.partition))
    }

    /// Opens, reconfigures and deletes logs so that this broker hosts exactly the partitions the
    /// state assigns to it. Idempotent; called on every metadata change.
    ///
    /// `state` is read under the sync lock: a caller that read an older state and then
    /// waited for the lock would otherwise apply it after a newer one, and delete the logs of
    /// a topic created in between.
    pub fn sync(&self, state: impl FnOnce() -> Arc<ClusterState>) -> Result<(), LogError> {
        let _guard = self.sync_lock.lock().unwrap_or_else(|p| p.into_inner());
        let state = state();
        let mut wanted: HashMap<TopicPartition, (Uuid, topic_config::LogConfig, RemoteLog, i32)> =
            HashMap::new();
        for topic in state.topics.values() {
            let log_config = topic_config::log_config(&self.config, &topic.configs);
            for (i, p) in topic.partitions.iter().enumerate() {
                if p.replicas.contains(&self.node_id) {
                    let tp = TopicPartition {
                        topic: topic.name.clone(),
                        partition: i as i32,
                    };
                    wanted.insert(
                        tp,
                        (
                            topic.topic_id,
                            log_config.clone(),
                            RemoteLog::of(p),
                            p.leader_epoch,
                        ),
                    );
                }
            }
        }
        // Drop partitions no longer wanted (topic deleted, or re-created with a new id).
        let doomed: Vec<Arc<Partition>> = {
            let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
            let gone: Vec<TopicPartition> = map
                .iter()
                .filter(|(tp, p)| wanted.get(*tp).is_none_or(|(id, ..)| *id != p.topic_id))
                .map(|(tp, _)| tp.clone())
                .collect();
            gone.iter().filter_map(|tp| map.remove(tp)).collect()
        };
        for p in doomed {
            tracing::info!(topic = %p.tp.topic, partition = p.tp.partition, "deleting partition");
            p.deleted.store(true, Ordering::Release);
            // A clean checks the flag under the log lock before its swap; taking the lock here
            // waits out a swap in progress.
            drop(p.log());
            p.wake();
            let dir = self.dir_of(&p.tp);
            drop(p);
            remove_dir_if_exists(&dir)?;
        }
        self.delete_stray_dirs(&wanted)?;
        for (tp, (topic_id, log_config, remote, leader_epoch)) in wanted {
            if let Some(existing) = self.get(&tp.topic, tp.partition) {
                existing.leader_epoch.store(leader_epoch, Ordering::Release);
                if let Some(info) = state.partition(&tp.topic, tp.partition) {
                    existing.set_role(self.node_id, info);
                }
                {
                    let mut current = existing.remote.write().unwrap_or_else(|p| p.into_inner());
                    if **current != remote {
                        *current = Arc::new(remote);
                    }
                }
                let mut log = existing.log();
                if *log.config() != log_config {
                    log.set_config(log_config);
                }
                continue;
            }
            let dir = self.dir_of(&tp);
            std::fs::create_dir_all(&dir)?;
            let meta = PartitionMeta {
                version: 1,
                topic: tp.topic.clone(),
                partition: tp.partition,
                topic_id,
            };
            crate::log::index::write_file_atomically(
                &dir.join("partition.json"),
                &serde_json::to_vec(&meta).map_err(std::io::Error::other)?,
            )?;
            let (log, report) = Log::open(&dir, log_config, self.clock.now_ms())?;
            if !report.clean && report.segments > 0 {
                tracing::warn!(topic = %tp.topic, partition = tp.partition, rescanned = report.rescanned_segments,
                    truncated_bytes = report.truncated_bytes, "recovered partition after unclean shutdown");
            }
            let partition = Arc::new(Partition {
                tp: tp.clone(),
                topic_id,
                log: Mutex::new(log),
                remote: RwLock::new(Arc::new(remote)),
                waiters: Mutex::new(Vec::new()),
                deleted: AtomicBool::new(false),
                leader_epoch: AtomicI32::new(leader_epoch),
                replica: Mutex::new(Role::Offline),
                hw: tokio::sync::watch::channel(-1).0,
                clock: self.clock.clone(),
            });
            if let Some(info) = state.partition(&tp.topic, tp.partition) {
                partition.set_role(self.node_id, info);
            }
            self.map
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(tp, partition);
        }
        Ok(())
    }

    /// Removes partition directories on disk that the state does not know (or knows under
    /// another topic id): leftovers of topics deleted while this broker was down.
    fn delete_stray_dirs(
        &self,
        wanted: &HashMap<TopicPartition, (Uuid, topic_config::LogConfig, RemoteLog, i32)>,
    ) -> Result<(), LogError> {
        let Ok(entries) = std::fs::read_dir(&self.data_dir) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            let meta_path = entry.path().join("partition.json");
            let Ok(data) = std::fs::read(&meta_path) else {
                continue;
            };
            let Ok(meta) = serde_json::from_slice::<PartitionMeta>(&data) else {
                continue;
            };
            let tp = TopicPartition {
                topic: meta.topic,
                partition: meta.partition,
            };
            if wanted.get(&tp).is_none_or(|(id, ..)| *id != meta.topic_id) {
                tracing::info!(dir = %entry.path().display(), "deleting partition directory of a deleted topic");
                remove_dir_if_exists(&entry.path())?;
            }
        }
        Ok(())
    }

    /// Clean shutdown of every log.
    pub fn close_all(&self) {
        for p in self.all() {
            if let Err(e) = p.log().close() {
                tracing::error!(topic = %p.tp.topic, partition = p.tp.partition, error = %e, "failed to close log cleanly");
            }
        }
    }
}

fn remove_dir_if_exists(dir: &Path) -> Result<(), LogError> {
    // The cleaner may still be writing one staged file when it sees the deletion; a retry
    // removes what it left.
    let mut retries = 5;
    loop {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty && retries > 0 => {
                retries -= 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => return Err(e.into()),
        }
    }
}
