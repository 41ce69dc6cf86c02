//! A partition this broker hosts: its log, its part in replication and its view across the
//! local and remote tiers.
//!
//! - this module — the partition's data types and its local log operations (append, offsets,
//!   timestamps, retention, compaction, flushing), composed of one type per concern:
//!   - [`local`] — the local log behind its lock, and the offsets published at each release;
//!   - [`replica`] — [`Replication`]: its role (leader, follower, offline), the high watermark
//!     watch, the ISR; and the partition's operations that need both role and log (the
//!     follower's appends and truncations, acks=all); [`leader`] — the leader's pure
//!     bookkeeping of its followers;
//!   - [`tiers`] — the tier view ([`TierView`]), one log over two tiers: where a read or a
//!     timestamp lookup is answered, what is left to offload, tier stats;
//!   - [`waiters`] — the fetches and sessions waiting for the partition to change;
//!   - [`placement`] — its log directory, and whether writes into it must stop;
//! - [`registry`] — the hosted partitions ([`Partitions`]), opened, configured and deleted to
//!   match the metadata state machine, which is the only source of topics and partitions;
//! - [`metrics`] — per-partition gauges;
//! - [`activity`] — which partitions have housekeeping due (written since their last visit),
//!   and the sweep that visits each partition once per retention check interval;
//! - [`changes`] — which of a fetch session's partitions woke since its last fetch.
//!
//! Lock order: `replica`'s role, then `local`'s log; the waiters', the tier view's and the
//! directory's locks are leaves, taken alone or under those two, never the other way round.
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
mod local;
pub mod metrics;
mod placement;
mod registry;
mod relocate;
mod replica;
mod tiers;
mod waiters;

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use uuid::Uuid;

use crate::clock::Clock;
use crate::log::batch::BatchError;
use crate::log::cleaning::CleanStats;
use crate::log::config::LogConfig;
use crate::log::control::Marker;
use crate::log::{AppendInfo, Log, LogError};
pub use activity::{Activity, Sweep};
pub use changes::ChangeSet;
pub use local::Offsets;
use local::{LocalLog, LogGuard};
pub use placement::Placement;
pub use registry::{Hosted, Partitions, RelocateRefusal};
pub use replica::{Committing, Replication, Role};
pub use tiers::{Isolation, Read, RemoteLog, RemoteProducers, TierStats, TierView, TimeLookup};
pub use waiters::Waiters;

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

/// One partition this broker hosts: one field per concern (see the module head), and the
/// operations that span them.
pub struct Partition {
    pub tp: TopicPartition,
    pub topic_id: Uuid,
    local: LocalLog,
    tier: TierView,
    replication: Replication,
    waiters: Waiters,
    placement: Placement,
    /// Record timestamps of appends and the clock retention and compaction measure against.
    clock: Clock,
    /// This partition, for queueing itself in `activity`.
    me: Weak<Partition>,
    /// Where the partition queues itself when a write leaves housekeeping due.
    activity: Arc<Activity>,
    /// Queued in `activity` (see there).
    queued: AtomicBool,
}

impl Partition {
    /// Its role in replication, the ISR and the leader epoch.
    pub fn replication(&self) -> &Replication {
        &self.replication
    }

    /// Who waits for it to change.
    pub fn waiters(&self) -> &Waiters {
        &self.waiters
    }

    /// Where its files are.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    fn log(&self) -> LogGuard<'_> {
        self.local.lock()
    }

    /// The offsets as of the last release of the log lock: no lock taken. Equal to
    /// [`Partition::offsets`] whenever no write is in progress.
    pub fn published_offsets(&self) -> Offsets {
        self.local.published()
    }

    /// A new remote log (from the metadata state), published with the offsets it moves.
    fn set_remote(&self, remote: RemoteLog) {
        self.local.remote_changed((remote.start(), remote.floor));
        self.tier.set(remote);
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
        let epoch = self.replication.leader_epoch();
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
        let epoch = self.replication.leader_epoch();
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

    /// The producers with a transaction open in this partition (the console's transactions).
    pub fn open_transactions(&self) -> Vec<crate::log::producer_state::ProducerView> {
        self.log().open_transactions()
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
        let epoch = self.replication.leader_epoch();
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

    fn wake(&self) {
        self.waiters.wake();
    }

    pub fn offsets(&self) -> Offsets {
        offsets_of(&self.log(), &self.tier.get())
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
        let bytes = self.log().read(offset, 1, i64::MAX).ok()?.bytes;
        crate::log::records::timestamp_at(&bytes, offset)
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
        let moves = self.placement.moves();
        let stopped = || self.placement.writes_stopped();
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
        if stopped() || self.placement.moves() != moves {
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
        let remote = self.tier.get();
        let log = self.log();
        (
            offsets_of(&log, &remote),
            log.segments().size(),
            log.segments().count(),
        )
    }

    /// Time-driven work, once per sweep (see [`activity`]): retention, the time-based roll of
    /// an idle active segment, a due time-based flush, the release of mappings unread since
    /// the last sweep.
    pub fn sweep(&self, now: i64) -> Result<(), LogError> {
        self.enforce_retention(now)?;
        let rolled = {
            let mut log = self.log();
            let segments = log.segments().count();
            log.roll_if_old(now)?;
            log.flush_if_due(now)?;
            log.segments_mut().release_idle_maps();
            log.segments().count() != segments
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
        let rolls = self.log().segments_mut().take_unflushed_rolls();
        // The lock is released while the disk works.
        match crate::log::fsync_rolls(&rolls) {
            Ok(Some(up_to)) => self.log().rolls_flushed(up_to),
            Ok(None) => Ok(()),
            Err(e) => {
                self.log().segments_mut().restore_unflushed_rolls(rolls);
                Err(e.into())
            }
        }
    }

    /// Deletes what retention allows now (see [`Log::enforce_retention`]); also run right
    /// after an offload, so local disk is freed without waiting for the next retention pass.
    pub fn enforce_retention(&self, now: i64) -> Result<(), LogError> {
        let remote = self.tier.get();
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

/// The offsets of the one log over two tiers: its start is the remote log's (or the local
/// one's, whichever is lower, never below the quorum's floor).
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
