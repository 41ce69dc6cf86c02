//! A partition this broker hosts: its log, its part in replication and its view across the
//! local and remote tiers.
//!
//! - this module — the partition's data types and its local log operations (append, offsets,
//!   timestamps, retention, compaction, flushing);
//! - [`replica`] — its role (leader, follower, offline), the high watermark, the ISR and the
//!   follower's log operations; [`leader`] — the leader's pure bookkeeping of its followers;
//! - [`tiers`] — one log over two tiers: where a read or a timestamp lookup is answered, what
//!   is left to offload, tier stats;
//! - [`registry`] — the hosted partitions ([`Partitions`]), opened, configured and deleted to
//!   match the metadata state machine, which is the only source of topics and partitions;
//! - [`metrics`] — per-partition gauges;
//! - [`activity`] — which partitions have housekeeping due (written since their last visit),
//!   and the sweep that visits each partition once per retention check interval;
//! - [`changes`] — which of a fetch session's partitions woke since its last fetch.
//!
//! Invariants:
//! - a partition directory `<data>/<topic>-<n>` belongs to exactly one topic id (recorded in its
//!   `partition.json`); a directory whose topic id is not in the metadata state is deleted, so a
//!   topic deleted and re-created under the same name never sees the old records;
//! - appends to one partition are serialised by its log mutex; readers take the same mutex only
//!   to slice mapped bytes, never across an await;
//! - every append that adds records (and every high watermark move) wakes the fetches waiting
//!   on that partition and marks the sessions subscribed to it, after the partition's
//!   published offsets show it (they are published on every release of the log
//!   lock, [`Partition::published_offsets`]);
//! - every append or roll queues the partition for its write-driven housekeeping
//!   ([`activity`]);
//! - a tiered partition's log is one log over two tiers: its start is the remote log's start
//!   (or the local one's, whichever is lower, never below the quorum's floor), and an offset
//!   below the local start is answered from the remote segment holding it ([`Read::Remote`]).

mod activity;
mod changes;
pub mod dirs;
pub mod leader;
pub mod metrics;
mod registry;
mod relocate;
mod replica;
mod tiers;

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use uuid::Uuid;

use crate::clock::Clock;
use crate::log::batch::BatchError;
use crate::log::cleaning::CleanStats;
use crate::log::config::LogConfig;
use crate::log::control::Marker;
use crate::log::{AppendInfo, Log, LogError};
pub use activity::{Activity, Sweep};
pub use changes::ChangeSet;
pub use registry::{Hosted, Partitions, RelocateRefusal};
pub use replica::{Committing, Role};
pub use tiers::{Isolation, Read, RemoteLog, RemoteProducers, TierStats, TimeLookup};

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    /// The name of the partition's directory in its log directory, `<topic>-<partition>`.
    pub fn dir_name(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }
}

/// Offsets of a partition at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offsets {
    pub log_start: i64,
    pub high_watermark: i64,
    /// Below it every transaction has ended: where read_committed readers stop (≤ HW).
    pub last_stable: i64,
    pub log_end: i64,
}

pub struct Partition {
    pub tp: TopicPartition,
    pub topic_id: Uuid,
    /// The log directory the partition's directory is in (changed by a move, see
    /// [`relocate`]).
    log_dir: RwLock<Arc<dirs::LogDir>>,
    log: Mutex<Log>,
    remote: RwLock<Arc<RemoteLog>>,
    waiters: Mutex<Waiters>,
    /// Set when the topic is deleted, so a clean in progress stops writing into the directory
    /// that is about to be removed.
    deleted: AtomicBool,
    /// Set while the partition is being moved to another log directory ([`relocate`]): a
    /// clean in progress stops, none installs its segments.
    moving: AtomicBool,
    /// Moves completed: a clean planned before one must not install into the moved log.
    moves: std::sync::atomic::AtomicU64,
    /// The partition's current leader epoch (from the metadata state), stamped on appends.
    leader_epoch: AtomicI32,
    /// This broker's role in the partition's replication. Lock order: `replica`, then `log`.
    replica: Mutex<Role>,
    /// The high watermark, for produce requests waiting on acks=all.
    hw: tokio::sync::watch::Sender<i64>,
    /// As a follower: the leader's high watermark in its last fetch response (-1 before one).
    leader_hw: AtomicI64,
    /// Record timestamps of appends and the clock retention and compaction measure against.
    clock: Clock,
    /// This partition, for queueing itself in `activity`.
    me: Weak<Partition>,
    /// Where the partition queues itself when a write leaves housekeeping due.
    activity: Arc<Activity>,
    /// Queued in `activity` (see there).
    queued: AtomicBool,
    /// The offsets as of the last release of the log lock.
    published: Published,
}

/// Who waits for this partition to change.
#[derive(Default)]
struct Waiters {
    /// Fetches waiting once, each dropped at the wake-up it waited for.
    once: Vec<Weak<Notify>>,
    /// Sessions subscribed until they go: each set and this partition's place in it.
    subscribed: Vec<(Weak<ChangeSet>, usize)>,
}

/// A partition's offsets, published each time the log lock is released (and when the remote
/// log changes), so a fetch can answer a partition with nothing new without taking the lock:
/// a fetch naming 10,000 partitions reads atomics for the ones that are idle. Published
/// before an append wakes its waiters, so a waiter always sees the append that woke it.
struct Published {
    log_start: AtomicI64,
    high_watermark: AtomicI64,
    last_stable: AtomicI64,
    log_end: AtomicI64,
    /// The remote log's first readable offset (`i64::MAX`: none) and floor, which
    /// `offsets_of` combines with the local log.
    remote_start: AtomicI64,
    remote_floor: AtomicI64,
}

impl Published {
    fn new(remote: &RemoteLog) -> Published {
        let p = Published {
            log_start: AtomicI64::new(0),
            high_watermark: AtomicI64::new(0),
            last_stable: AtomicI64::new(0),
            log_end: AtomicI64::new(0),
            remote_start: AtomicI64::new(i64::MAX),
            remote_floor: AtomicI64::new(0),
        };
        p.remote(remote);
        p
    }

    fn remote(&self, remote: &RemoteLog) {
        self.remote_start
            .store(remote.start().unwrap_or(i64::MAX), Ordering::Release);
        self.remote_floor.store(remote.floor, Ordering::Release);
    }

    fn log(&self, log: &Log) {
        let local = log.log_start_offset();
        let start = self.remote_start.load(Ordering::Acquire).min(local);
        let end = log.log_end_offset();
        let start = start
            .max(self.remote_floor.load(Ordering::Acquire))
            .min(end);
        self.log_start.store(start, Ordering::Release);
        self.high_watermark
            .store(log.high_watermark(), Ordering::Release);
        self.last_stable
            .store(log.last_stable_offset().max(start), Ordering::Release);
        self.log_end.store(end, Ordering::Release);
    }

    fn offsets(&self) -> Offsets {
        Offsets {
            log_start: self.log_start.load(Ordering::Acquire),
            high_watermark: self.high_watermark.load(Ordering::Acquire),
            last_stable: self.last_stable.load(Ordering::Acquire),
            log_end: self.log_end.load(Ordering::Acquire),
        }
    }
}

/// The log lock, held: publishes the partition's offsets when released.
struct LogGuard<'a> {
    log: std::sync::MutexGuard<'a, Log>,
    published: &'a Published,
}

impl std::ops::Deref for LogGuard<'_> {
    type Target = Log;
    fn deref(&self) -> &Log {
        &self.log
    }
}

impl std::ops::DerefMut for LogGuard<'_> {
    fn deref_mut(&mut self) -> &mut Log {
        &mut self.log
    }
}

impl Drop for LogGuard<'_> {
    fn drop(&mut self) {
        self.published.log(&self.log);
    }
}

impl Partition {
    /// The log directory the partition's directory is in now.
    pub fn log_dir(&self) -> Arc<dirs::LogDir> {
        self.log_dir
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn log(&self) -> LogGuard<'_> {
        LogGuard {
            // A panic while holding the lock cannot leave the log half-written (appends are
            // whole batches or an error), so a poisoned lock is still usable.
            log: self.log.lock().unwrap_or_else(|p| p.into_inner()),
            published: &self.published,
        }
    }

    /// The offsets as of the last release of the log lock: no lock taken. Equal to
    /// [`Partition::offsets`] whenever no write is in progress.
    pub fn published_offsets(&self) -> Offsets {
        self.published.offsets()
    }

    /// A new remote log (from the metadata state), published with the offsets it moves.
    fn set_remote(&self, remote: RemoteLog) {
        self.published.remote(&remote);
        *self.remote.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(remote);
        drop(self.log());
    }

    /// Validates a produce request's record batches against this topic's
    /// `max.message.bytes` (outside the log lock: the CRC pass touches every byte) and appends
    /// them.
    pub fn append(&self, records: &Bytes) -> Result<AppendInfo, LogError> {
        let (max_message_bytes, compact, compression) = {
            let log = self.log();
            let c = log.config();
            (c.max_message_bytes, c.compact, c.compression)
        };
        let mut batches = crate::log::batch::split_and_validate(records, max_message_bytes)?;
        if compact {
            crate::log::compact::check_keys(&batches)?;
        }
        let mut recompressed = (0, 0);
        if let Some(target) = compression {
            for (header, bytes) in &mut batches {
                let Some(rewritten) = crate::log::compression::recompress(bytes, header, target)?
                else {
                    continue;
                };
                if rewritten.len() > max_message_bytes {
                    return Err(LogError::Batch(BatchError::TooLarge {
                        size: rewritten.len(),
                        max: max_message_bytes,
                    }));
                }
                recompressed.0 += bytes.len() as u64;
                recompressed.1 += rewritten.len() as u64;
                *header = crate::log::batch::BatchHeader::parse(&rewritten)?;
                *bytes = rewritten;
            }
        }
        let epoch = self.leader_epoch.load(Ordering::Acquire);
        let mut info = self.log().append(&batches, epoch, self.clock.now_ms())?;
        info.recompressed = recompressed;
        if info.duplicate {
            self.advance_hw();
        } else {
            self.written();
        }
        Ok(info)
    }

    /// After a write to the log: housekeeping is due, waiting readers wake, and the high
    /// watermark moves if the write is committed.
    fn written(&self) {
        self.activity.mark(self);
        self.wake();
        self.advance_hw();
    }

    /// Appends batches a coordinator of this broker wrote for a producer's transaction (see
    /// [`crate::log::Origin::Coordinator`]).
    pub fn append_as_coordinator(&self, records: &Bytes) -> Result<AppendInfo, LogError> {
        let batches = crate::log::batch::split_and_validate(records, usize::MAX)?;
        let epoch = self.leader_epoch.load(Ordering::Acquire);
        let info = self.log().append_from(
            crate::log::Origin::Coordinator,
            &batches,
            epoch,
            self.clock.now_ms(),
        )?;
        self.written();
        Ok(info)
    }

    /// The producers this partition knows (DescribeProducers).
    pub fn producers(&self) -> Vec<crate::log::producer_state::ProducerView> {
        self.log().producer_views()
    }

    /// Whether `producer_id` has a transaction open in this partition at `epoch`.
    pub fn has_ongoing_txn(&self, producer_id: i64, epoch: i16) -> bool {
        self.log().has_ongoing_txn(producer_id, epoch)
    }

    /// Writes a transaction marker (WriteTxnMarkers, on the leader) and returns its offset.
    pub fn append_marker(
        &self,
        marker: Marker,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
    ) -> Result<i64, LogError> {
        let epoch = self.leader_epoch.load(Ordering::Acquire);
        let offset = self.log().append_marker(
            marker,
            producer_id,
            producer_epoch,
            coordinator_epoch,
            epoch,
            self.clock.now_ms(),
        )?;
        self.written();
        Ok(offset)
    }

    pub(super) fn wake(&self) {
        let (once, subscribed) = {
            let mut w = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
            let once = std::mem::take(&mut w.once);
            w.subscribed.retain(|(set, _)| set.strong_count() > 0);
            let subscribed: Vec<(Arc<ChangeSet>, usize)> = (w.subscribed.iter())
                .filter_map(|(set, place)| Some((set.upgrade()?, *place)))
                .collect();
            (once, subscribed)
        };
        for w in once {
            if let Some(n) = w.upgrade() {
                n.notify_one();
            }
        }
        for (set, place) in subscribed {
            set.mark(place);
        }
    }

    /// Registers a fetch that waits for the next append (once: a fetch registered already
    /// is not added again).
    pub fn watch(&self, notify: &Arc<Notify>) {
        let mut w = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        w.once.retain(|w| w.strong_count() > 0);
        let me = Arc::downgrade(notify);
        if !w.once.iter().any(|w| w.ptr_eq(&me)) {
            w.once.push(me);
        }
    }

    /// Subscribes `set` to every wake-up of this partition, marking `place` (again a no-op:
    /// a set holds one place per partition). Lasts as long as the set.
    pub fn subscribe(&self, set: &Arc<ChangeSet>, place: usize) {
        let mut w = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        let me = Arc::downgrade(set);
        if (w.subscribed.iter()).any(|(s, p)| s.ptr_eq(&me) && *p == place) {
            return;
        }
        w.subscribed
            .retain(|(s, _)| s.strong_count() > 0 && !s.ptr_eq(&me));
        w.subscribed.push((me, place));
    }

    pub fn offsets(&self) -> Offsets {
        offsets_of(&self.log(), &self.remote())
    }

    pub fn log_config(&self) -> LogConfig {
        self.log().config().clone()
    }

    /// The topic's `min.insync.replicas`.
    pub fn min_insync_replicas(&self) -> usize {
        self.log().config().min_insync_replicas
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

    pub fn delete_records_before(&self, offset: i64) -> Result<i64, LogError> {
        let start = self
            .log()
            .delete_records_before(offset, self.clock.now_ms())?;
        // The log start is news to the sessions reading this partition.
        self.wake();
        Ok(start)
    }

    /// One compaction pass if the log is dirty enough (see `log::cleaning`). The log lock is
    /// held only to plan and to swap, never while segments are read or written.
    pub fn clean(
        &self,
        map_memory: usize,
        progress: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Option<CleanStats>, LogError> {
        let now = self.clock.now_ms();
        let moves = self.moves.load(Ordering::Acquire);
        let stopped =
            || self.deleted.load(Ordering::Acquire) || self.moving.load(Ordering::Acquire);
        if stopped() {
            return Ok(None);
        }
        let Some(plan) = self.log().clean_plan(now)? else {
            return Ok(None);
        };
        let mut progress = |bytes| !stopped() && progress(bytes);
        let Some(cleaned) = plan.clean(map_memory, now, &mut progress)? else {
            return Ok(None);
        };
        let stats = cleaned.stats;
        let mut log = self.log();
        if stopped() || self.moves.load(Ordering::Acquire) != moves {
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

    /// Time-driven work, once per sweep (see [`activity`]): retention, the time-based roll of
    /// an idle active segment, a due time-based flush, the release of mappings unread since
    /// the last sweep.
    pub fn sweep(&self, now: i64) -> Result<(), LogError> {
        self.enforce_retention(now)?;
        let rolled = {
            let mut log = self.log();
            let segments = log.segment_count();
            log.roll_if_old(now)?;
            log.flush_if_due(now)?;
            log.release_idle_maps();
            log.segment_count() != segments
        };
        if rolled {
            self.activity.mark(self);
        }
        Ok(())
    }

    /// Write-driven work, for a partition that queued itself (see [`activity`]): a due
    /// time-based flush. Returns whether it must be visited again (records still unflushed
    /// under a finite `flush.ms`).
    pub fn flush_due(&self, now: i64) -> Result<bool, LogError> {
        let mut log = self.log();
        log.flush_if_due(now)?;
        Ok(log.has_unflushed_records())
    }

    /// Queues this partition for another write-driven visit.
    pub fn revisit(&self) {
        self.activity.mark(self);
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
        drop(log);
        if deleted > 0 {
            tracing::info!(topic = %self.tp.topic, partition = self.tp.partition, deleted, "retention deleted segments");
            self.wake();
        }
        Ok(())
    }
}

fn offsets_of(log: &Log, remote: &RemoteLog) -> Offsets {
    let local = log.log_start_offset();
    let start = match remote.start() {
        Some(r) if r < local => r,
        _ => local,
    };
    let log_start = start.max(remote.floor).min(log.log_end_offset());
    Offsets {
        log_start,
        high_watermark: log.high_watermark(),
        last_stable: log.last_stable_offset().max(log_start),
        log_end: log.log_end_offset(),
    }
}
