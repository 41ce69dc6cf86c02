//! The partition log engine: a directory of segments of Kafka v2 record batches.
//!
//! Layout of a partition directory:
//! - `<base_offset:020>.log|.index|.timeindex|.txnindex` — segments ([`segment`]) and their
//!   aborted transactions ([`txn_index`]);
//! - `log-start-offset` — first readable offset (moved by retention and DeleteRecords);
//! - `recovery-point` — every segment below the one holding this offset was flushed and sealed;
//! - `producer-state.json` — producer state (sequences, ongoing transactions) and the offset it
//!   covers, written at each roll; `producer-state.previous.json` — the one before, for a
//!   recovery that must start below the latest;
//! - `leader-epoch-checkpoint` — the first offset of each leader epoch ([`leader_epoch`]);
//! - `cleaner-offset-checkpoint` — compacted logs: where the dirty section starts;
//! - `cleaning/` — compacted logs: a clean in progress ([`cleaning`]);
//! - `clean-shutdown` — present only between a clean close and the next open.
//!
//! Invariants (docs/invariants.md 1–2):
//! - offsets strictly increase and `log_start ≤ high_watermark ≤ log_end`; they are dense
//!   except in a compacted log, where the cleaner leaves gaps (it never renumbers);
//! - batches are stored exactly as received except for the broker-assigned base offset and
//!   leader epoch (and, for LogAppendTime topics, the timestamp), so fetch never re-encodes;
//! - readers never see bytes at or above the high watermark; read_committed readers never see
//!   bytes at or above the last stable offset (`LSO ≤ HW`: the first offset of the oldest
//!   ongoing transaction, else the high watermark);
//! - only [`Log::append_marker`] writes control batches; a client's are refused;
//! - after a crash, only segments at or above the recovery point are rescanned, and a torn tail
//!   is truncated at the last batch whose CRC checks;
//! - leader epochs only increase along the log.
//!
//! [`Log::debug_check`] asserts the offset invariants wherever offsets change, so debug-built
//! tests catch a breach; release builds do not pay for it.

pub mod batch;
pub mod cleaning;
pub mod compact;
pub mod compression;
pub mod config;
pub mod control;
mod error;
pub mod handles;
pub mod index;
pub mod leader_epoch;
pub mod producer_state;
pub mod records;
mod recovery;
pub(crate) use recovery::create_dir;
mod retention;
pub mod segment;
mod segments;
pub mod txn_index;

use std::path::PathBuf;

use bytes::Bytes;

use batch::{BatchError, BatchHeader};
use config::{LogConfig, TimestampType};
use control::Marker;
pub use error::LogError;
use index::{write_checkpoint, Durability};
use leader_epoch::LeaderEpochCache;
use producer_state::{MarkerCheck, ProducerState, SequenceCheck};
pub use recovery::RecoveryReport;
use segment::Segment;
pub use segments::Segments;
use txn_index::AbortedTxn;

/// Whole batches read from the local log: their bytes (a slice of the segment's mapping) and
/// where they lie in the segment's file, when its descriptor was at hand (a plaintext socket
/// is sent them from there, see `server/write.rs`). Empty when there was nothing to read.
#[derive(Clone, Debug, Default)]
pub struct Batches {
    pub bytes: Bytes,
    pub file: Option<crate::log::handles::FileSpan>,
}

/// Who writes a batch (see [`Log::append_from`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A producer: sequence numbers are checked, and control batches refused.
    Client,
    /// A coordinator of this broker writing for a producer, without sequence numbers.
    Coordinator,
}

/// Result of appending one produce request's batches to a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    pub base_offset: i64,
    pub last_offset: i64,
    /// -1 unless the topic uses LogAppendTime.
    pub log_append_time: i64,
    pub records: u64,
    pub bytes: u64,
    /// True when the batch was an idempotent retry already in the log.
    pub duplicate: bool,
    /// The log start offset after the append (Produce responses carry it).
    pub log_start: i64,
    /// Bytes of the batches recompressed to the topic's `compression.type`: as sent, as
    /// stored (0 and 0 when every batch was stored as sent).
    pub recompressed: (u64, u64),
}

/// A partition's log: what its offsets mean (start, high watermark, last stable offset), its
/// producers and leader epochs, its checkpoints, over the chain of segment files
/// ([`Segments`]) that holds the bytes.
pub struct Log {
    dir: PathBuf,
    config: LogConfig,
    segments: Segments,
    log_start_offset: i64,
    high_watermark: i64,
    /// Every segment below the one holding it was flushed and sealed (`recovery-point`).
    recovery_point: i64,
    producers: ProducerState,
    /// Compacted logs: offsets below this were cleaned (a segment base).
    clean_point: i64,
    /// First offset of each leader epoch.
    epochs: LeaderEpochCache,
    /// More than one replica: the partition moves the high watermark by its ISR. Otherwise
    /// an append commits at once.
    replicated: bool,
    /// Truncations and resets since open: a copy of the files taken across one is stale.
    truncations: u64,
}

const CLEAN_SHUTDOWN: &str = "clean-shutdown";
const LOG_START: &str = "log-start-offset";
const RECOVERY_POINT: &str = "recovery-point";
const PRODUCER_STATE: &str = "producer-state.json";
const PRODUCER_STATE_PREVIOUS: &str = "producer-state.previous.json";

/// What the tier knows of a log's remote copy (see `crate::tier`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteView {
    /// Offsets below this are in committed remote segments.
    pub end: i64,
    /// Bytes of the committed remote segments.
    pub bytes: u64,
}

/// A closed segment as the offloader sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClosedSegment {
    pub base_offset: i64,
    pub next_offset: i64,
    pub size: u64,
    pub max_timestamp: i64,
}

/// Fsyncs rolled segments (from [`Log::take_unflushed_rolls`]); returns the recovery point they
/// allow, `None` when there were none.
pub fn fsync_rolls(rolls: &[(i64, std::fs::File)]) -> std::io::Result<Option<i64>> {
    for (_, f) in rolls {
        f.sync_all()?;
    }
    Ok(rolls.last().map(|(end, _)| *end))
}

impl Log {
    /// OffsetForLeaderEpoch: the largest epoch ≤ `epoch` and the offset where it ends.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        self.epochs.end_offset_for(epoch, self.log_end_offset())
    }

    /// The leader epoch of the batch holding `offset` (-1 when unknown).
    pub fn epoch_for_offset(&self, offset: i64) -> i32 {
        self.epochs
            .epoch_for(offset)
            .unwrap_or(leader_epoch::UNDEFINED_EPOCH)
    }

    /// Invariant 1 (docs/invariants.md): `log_start ≤ high_watermark ≤ log_end`, and the first
    /// segment holds the log start; checked in debug builds after every change of any of
    /// them. (The last stable offset is derived between the two, never stored.)
    fn debug_check(&self) {
        debug_assert!(
            self.log_start_offset <= self.high_watermark
                && self.high_watermark <= self.log_end_offset(),
            "invariant 1 (docs/invariants.md): {}: log start {} <= high watermark {} <= log end {} broken",
            self.dir.display(),
            self.log_start_offset,
            self.high_watermark,
            self.log_end_offset()
        );
        debug_assert!(
            self.first_segment_base() <= self.log_start_offset,
            "{}: first segment at {} starts after the log start {}",
            self.dir.display(),
            self.first_segment_base(),
            self.log_start_offset
        );
    }

    fn first_segment_base(&self) -> i64 {
        self.segments.first_base()
    }

    fn active(&mut self) -> &mut Segment {
        self.segments.active()
    }

    /// The chain of segment files (sizes, counts, the rolls awaiting their fsync).
    pub fn segments(&self) -> &Segments {
        &self.segments
    }

    /// The chain, to release idle mappings or take the rolls to fsync ([`Segments`]'s public
    /// operations never change what the log holds).
    pub fn segments_mut(&mut self) -> &mut Segments {
        &mut self.segments
    }

    pub fn log_end_offset(&self) -> i64 {
        self.segments.end()
    }
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }
    pub fn config(&self) -> &LogConfig {
        &self.config
    }
    pub fn set_config(&mut self, config: LogConfig) {
        self.config = config;
    }

    /// Appends validated batches. Idempotent batches are checked against producer state first;
    /// a retry of a batch already in the log returns its original offset and appends nothing.
    pub fn append(
        &mut self,
        batches: &[(BatchHeader, Bytes)],
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        self.append_from(Origin::Client, batches, leader_epoch, now_ms)
    }

    /// [`Log::append`] by `origin`: a coordinator's batches (a transaction's offset commits,
    /// written for its producer) carry no sequence numbers, so only their epoch is checked.
    pub fn append_from(
        &mut self,
        origin: Origin,
        batches: &[(BatchHeader, Bytes)],
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        let mut info = AppendInfo {
            base_offset: -1,
            last_offset: -1,
            log_append_time: -1,
            records: 0,
            bytes: 0,
            duplicate: false,
            log_start: self.log_start_offset,
            recompressed: (0, 0),
        };
        for (header, bytes) in batches {
            if header.is_control() {
                return Err(BatchError::Invalid(
                    "clients may not write control batches".to_string(),
                )
                .into());
            }
            if header.is_transactional() && !header.is_idempotent() {
                return Err(BatchError::Invalid(
                    "a transactional batch needs a producer id".to_string(),
                )
                .into());
            }
            if header.is_idempotent() {
                match self.producers.check(header) {
                    SequenceCheck::Accept => {}
                    SequenceCheck::Duplicate { .. } | SequenceCheck::OutOfOrder { .. }
                        if origin == Origin::Coordinator => {}
                    SequenceCheck::Duplicate {
                        base_offset,
                        timestamp,
                    } => {
                        info.duplicate = true;
                        info.base_offset = base_offset;
                        info.last_offset = base_offset + header.last_offset_delta as i64;
                        if self.config.timestamp_type == TimestampType::LogAppendTime {
                            info.log_append_time = timestamp;
                        }
                        continue;
                    }
                    SequenceCheck::OutOfOrder { expected, got } => {
                        return Err(LogError::OutOfOrderSequence {
                            producer_id: header.producer_id,
                            expected,
                            got,
                        })
                    }
                    SequenceCheck::Fenced { current, got } => {
                        return Err(LogError::ProducerFenced {
                            producer_id: header.producer_id,
                            current,
                            got,
                        })
                    }
                    SequenceCheck::TxnOpen => {
                        return Err(LogError::InvalidTxnState {
                            producer_id: header.producer_id,
                            why: "a plain batch while its transaction is open",
                        })
                    }
                }
            }
            let h = self.append_batch(header, bytes, leader_epoch, now_ms)?;
            self.producers.record(&h, h.max_timestamp);
            if info.base_offset < 0 || info.duplicate {
                info.base_offset = h.base_offset;
            }
            info.duplicate = false;
            info.last_offset = h.last_offset();
            if self.config.timestamp_type == TimestampType::LogAppendTime {
                info.log_append_time = h.max_timestamp;
            }
            info.records += h.record_count as u64;
            info.bytes += bytes.len() as u64;
        }
        if !self.replicated {
            // A single replica: a write is committed once it is in the log.
            self.high_watermark = self.log_end_offset();
        }
        if self.segments.unflushed_messages() as i64 >= self.config.flush_messages {
            self.segments.flush(now_ms)?;
        }
        self.debug_check();
        Ok(info)
    }

    /// Writes one batch at the log end under `leader_epoch` (rolling first if due) and returns
    /// its header as stored.
    fn append_batch(
        &mut self,
        header: &BatchHeader,
        bytes: &Bytes,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<BatchHeader, LogError> {
        self.maybe_roll(bytes.len() as u64, now_ms)?;
        let base_offset = self.log_end_offset();
        debug_assert!(
            leader_epoch >= self.latest_epoch(),
            "{}: append under leader epoch {leader_epoch}, older than the log's {}",
            self.dir.display(),
            self.latest_epoch()
        );
        if self.epochs.assign(leader_epoch, base_offset) {
            // Written before the batch; durable with it (see `leader_epoch`).
            self.epochs.save(&self.dir, Durability::Unsynced)?;
        }
        let stored;
        let body: &Bytes = if self.config.timestamp_type == TimestampType::LogAppendTime {
            stored = batch::with_log_append_time(bytes, now_ms);
            &stored
        } else {
            bytes
        };
        let mut h = *header;
        h.base_offset = base_offset;
        h.leader_epoch = leader_epoch;
        if self.config.timestamp_type == TimestampType::LogAppendTime {
            h.max_timestamp = now_ms;
        }
        let prefix = batch::assigned_prefix(body, base_offset, leader_epoch);
        self.active().append(&h, &prefix, body)?;
        // Dense: the batch took the offsets from the old end, and the end follows it.
        debug_assert_eq!(
            self.log_end_offset(),
            h.last_offset() + 1,
            "{}: offsets not dense after the batch at {base_offset}",
            self.dir.display()
        );
        Ok(h)
    }

    /// Writes a transaction marker for `producer_id` (WriteTxnMarkers): it ends the producer's
    /// ongoing transaction here, and an abort enters the active segment's aborted-transaction
    /// index. Returns the marker's offset. A marker of an older producer or coordinator epoch
    /// is refused and changes nothing.
    pub fn append_marker(
        &mut self,
        marker: Marker,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<i64, LogError> {
        match self
            .producers
            .check_marker(producer_id, producer_epoch, coordinator_epoch)
        {
            MarkerCheck::Accept => {}
            MarkerCheck::ProducerFenced { current, got } => {
                return Err(LogError::ProducerFenced {
                    producer_id,
                    current,
                    got,
                })
            }
            MarkerCheck::CoordinatorFenced { current, got } => {
                return Err(LogError::CoordinatorFenced {
                    producer_id,
                    current,
                    got,
                })
            }
        }
        let bytes = control::marker_batch(
            marker,
            producer_id,
            producer_epoch,
            coordinator_epoch,
            now_ms,
        );
        let header = batch::validate(&bytes)?;
        let h = self.append_batch(&header, &bytes, leader_epoch, now_ms)?;
        if let Some(aborted) = track_marker(&mut self.producers, &h, marker, coordinator_epoch) {
            self.active().txn_index_mut().push(aborted);
        }
        if !self.replicated {
            self.high_watermark = self.log_end_offset();
        }
        self.debug_check();
        Ok(h.base_offset)
    }

    /// The last stable offset: below it, every transaction has ended (committed or aborted);
    /// read_committed readers stop there.
    pub fn last_stable_offset(&self) -> i64 {
        let hw = self.high_watermark;
        self.producers
            .first_unstable_offset()
            .map_or(hw, |first| first.min(hw))
            .max(self.log_start_offset)
    }

    /// The producers this log knows (DescribeProducers).
    pub fn producer_views(&self) -> Vec<producer_state::ProducerView> {
        self.producers.views()
    }

    /// The producers with a transaction open here; nothing built when none is (the common
    /// case, checked in O(1)).
    pub fn open_transactions(&self) -> Vec<producer_state::ProducerView> {
        if self.producers.first_unstable_offset().is_none() {
            return Vec::new();
        }
        let mut views = self.producers.views();
        views.retain(|v| v.txn_first_offset.is_some());
        views
    }

    /// Whether `producer_id` has a transaction open here at `epoch` (one open at an older
    /// epoch is a transaction whose markers have not arrived yet).
    pub fn has_ongoing_txn(&self, producer_id: i64, epoch: i16) -> bool {
        self.producers.ongoing_txn_epoch(producer_id) == Some(epoch)
    }

    /// Truncations and resets since the log was opened.
    pub fn truncations(&self) -> u64 {
        self.truncations
    }

    pub fn is_replicated(&self) -> bool {
        self.replicated
    }

    /// Switches to a high watermark moved by the partition's ISR ([`Log::set_high_watermark`]).
    /// The first switch after opening starts it at the log start: this broker does not know
    /// what its ISR had committed, and must not show consumers a suffix that a new leader may
    /// not have; the ISR moves it up within a fetch round. `sole_leader`: this log has been
    /// serving as the partition's only replica, so everything to its end is committed and the
    /// high watermark stays (a leader whose partition gains replicas never shows less).
    pub fn set_replicated(&mut self, replicated: bool, sole_leader: bool) {
        if replicated && !self.replicated && !sole_leader {
            self.high_watermark = self.log_start_offset;
        }
        self.replicated = replicated;
        self.debug_check();
    }

    /// Moves the high watermark. The partition computes it: the log end on a single replica,
    /// the smallest log end of the ISR on a leader, the leader's high watermark on a follower,
    /// which may be ahead of this log: a follower's high watermark is its log end then (Kafka's
    /// rule), and never below its log start, whose records are committed or gone.
    ///
    /// Invariant 1 (docs/invariants.md): through this call the high watermark never moves back
    /// (only a truncation or a reset lowers it); checked in debug builds.
    pub fn set_high_watermark(&mut self, hw: i64) {
        let hw = hw.clamp(self.log_start_offset, self.log_end_offset());
        debug_assert!(
            hw >= self.high_watermark,
            "invariant 1 (docs/invariants.md): {}: the high watermark would move back from {} to {hw}",
            self.dir.display(),
            self.high_watermark
        );
        self.high_watermark = hw;
        self.debug_check();
    }

    /// A follower's append of batches copied from its leader: offsets, epochs and bytes are
    /// kept exactly; each batch was validated (CRC) by the caller and must start at or after
    /// the log end (gaps are allowed: compaction leaves them).
    pub fn append_replicated(
        &mut self,
        batches: &[(BatchHeader, Bytes)],
        now_ms: i64,
    ) -> Result<u64, LogError> {
        let mut records = 0u64;
        for (header, bytes) in batches {
            if header.base_offset < self.log_end_offset() {
                return Err(LogError::Corrupt(format!(
                    "replicated batch at {} overlaps the log end {}",
                    header.base_offset,
                    self.log_end_offset()
                )));
            }
            self.maybe_roll(bytes.len() as u64, now_ms)?;
            if self.log_end_offset() < header.base_offset && self.active().is_empty() {
                // An empty active segment must start where its first batch does.
                let interval = self.config.index_interval_bytes;
                (self.segments).restart_active_at(header.base_offset, interval, now_ms)?;
            }
            debug_assert!(
                header.leader_epoch >= self.latest_epoch(),
                "{}: replicated batch of leader epoch {}, older than the log's {}",
                self.dir.display(),
                header.leader_epoch,
                self.latest_epoch()
            );
            if self.epochs.assign(header.leader_epoch, header.base_offset) {
                self.epochs.save(&self.dir, Durability::Unsynced)?;
            }
            let mut prefix = [0u8; 16];
            prefix.copy_from_slice(&bytes[..16]);
            self.active().append(header, &prefix, bytes)?;
            debug_assert_eq!(
                self.log_end_offset(),
                header.last_offset() + 1,
                "{}: the log end does not follow the replicated batch at {}",
                self.dir.display(),
                header.base_offset
            );
            if header.is_control() {
                if let Some(aborted) = track_control_batch(&mut self.producers, header, bytes)? {
                    self.active().txn_index_mut().push(aborted);
                }
            } else if header.is_idempotent() {
                self.producers.record(header, header.max_timestamp);
            }
            records += header.record_count as u64;
        }
        if self.segments.unflushed_messages() as i64 >= self.config.flush_messages {
            self.segments.flush(now_ms)?;
        }
        Ok(records)
    }

    /// Cuts the log before the first batch ending at or after `offset` (a follower dropping
    /// the suffix its new leader does not have). Whole segments above go; the one holding the
    /// cut is rewritten ([`Segment::truncated`]). Returns the new log end.
    pub fn truncate_to(&mut self, offset: i64, now_ms: i64) -> Result<i64, LogError> {
        if offset >= self.log_end_offset() {
            return Ok(self.log_end_offset());
        }
        if offset <= self.log_start_offset {
            let start = offset.max(self.log_start_offset);
            let producers = self.producers.before(start);
            return self.reset_to(start, now_ms, producers);
        }
        self.segments.truncate(offset)?;
        self.after_truncation()?;
        tracing::info!(dir = %self.dir.display(), offset, end = self.log_end_offset(), "truncated log");
        Ok(self.log_end_offset())
    }

    /// Empties the log and starts it again at `offset` (a follower whose leader no longer has
    /// the offsets it holds, or which must start at the leader's local log start).
    pub fn reset_to(
        &mut self,
        offset: i64,
        now_ms: i64,
        producers: ProducerState,
    ) -> Result<i64, LogError> {
        (self.segments).reset(offset, self.config.index_interval_bytes, now_ms)?;
        self.log_start_offset = offset;
        // Everything below the new start is gone: committed as far as this log can tell.
        self.high_watermark = offset;
        write_checkpoint(&self.dir.join(LOG_START), offset)?;
        self.epochs = LeaderEpochCache::default();
        self.epochs.save(&self.dir, Durability::Synced)?;
        self.after_truncation()?;
        // What the batches below the new start told of their producers (see
        // `ProducerState::before`): the snapshot covers the empty log up to `offset`.
        self.producers = producers;
        self.producers
            .save(&self.dir.join(PRODUCER_STATE), offset, Durability::Synced)?;
        tracing::info!(dir = %self.dir.display(), offset, producers = self.producers.len(), "reset log");
        Ok(offset)
    }

    /// The producer state as of `offset` for the producers whose batches below it are still
    /// cached (see [`ProducerState::before`]).
    pub fn producers_before(&self, offset: i64) -> ProducerState {
        self.producers.before(offset)
    }

    fn after_truncation(&mut self) -> Result<(), LogError> {
        self.truncations += 1;
        let end = self.log_end_offset();
        self.high_watermark = self.high_watermark.min(end);
        self.recovery_point = self.recovery_point.min(end);
        write_checkpoint(&self.dir.join(RECOVERY_POINT), self.recovery_point)?;
        if self.epochs.truncate_from_end(end) {
            self.epochs.save(&self.dir, Durability::Synced)?;
        }
        // The producer snapshots may describe batches that are gone.
        let _ = std::fs::remove_file(self.dir.join(PRODUCER_STATE));
        let _ = std::fs::remove_file(self.dir.join(PRODUCER_STATE_PREVIOUS));
        self.rebuild_producer_state(None)?;
        self.debug_check();
        Ok(())
    }

    /// Records that `epoch` starts at the log end (a new leader taking over).
    pub fn assign_epoch(&mut self, epoch: i32) -> Result<(), LogError> {
        if self.epochs.assign(epoch, self.log_end_offset()) {
            self.epochs.save(&self.dir, Durability::Unsynced)?;
        }
        Ok(())
    }

    /// The newest leader epoch in the log (-1 for none).
    pub fn latest_epoch(&self) -> i32 {
        self.epochs
            .latest_epoch()
            .unwrap_or(leader_epoch::UNDEFINED_EPOCH)
    }

    fn maybe_roll(&mut self, incoming: u64, now_ms: i64) -> Result<(), LogError> {
        let segment_bytes = self.config.segment_bytes;
        let segment_ms = self.config.segment_ms;
        let active = self.active();
        let full = active.size() + incoming > segment_bytes;
        let old = now_ms.saturating_sub(active.created_ms()) >= segment_ms;
        // Positions in the index are u32: never let a segment approach 4 GiB.
        let position_limit = active.size() + incoming > u32::MAX as u64 / 2;
        if !active.is_empty() && (full || old || position_limit) {
            self.roll(now_ms)?;
        }
        Ok(())
    }

    /// Seals the active segment and starts a new one at the log end.
    pub fn roll(&mut self, now_ms: i64) -> Result<(), LogError> {
        let end = (self.segments).roll(self.config.index_interval_bytes, now_ms)?;
        // The latest snapshot becomes the previous one: until the rolled segment is flushed,
        // a recovery rescans it and must replay from below it (see `rebuild_producer_state`).
        let latest = self.dir.join(PRODUCER_STATE);
        if latest.exists() {
            std::fs::rename(&latest, self.dir.join(PRODUCER_STATE_PREVIOUS))?;
        }
        self.producers.save(&latest, end, Durability::Synced)?;
        tracing::debug!(dir = %self.dir.display(), base = end, "rolled segment");
        Ok(())
    }

    /// Every segment below `up_to` is on disk: recovery after a crash may skip them.
    pub fn rolls_flushed(&mut self, up_to: i64) -> Result<(), LogError> {
        if up_to > self.recovery_point && self.segments.rolls_flushed_to(up_to) {
            // The epochs of the batches below the new recovery point are durable first: an
            // unclean open rescans (and re-learns epochs from) only what lies above it.
            self.epochs.save(&self.dir, Durability::Synced)?;
            self.recovery_point = up_to;
            write_checkpoint(&self.dir.join(RECOVERY_POINT), up_to)?;
        }
        Ok(())
    }

    /// Fsyncs the rolled segments now (clean close).
    pub fn flush_rolls(&mut self) -> Result<(), LogError> {
        let rolls = self.segments.take_unflushed_rolls();
        match fsync_rolls(&rolls) {
            Ok(Some(up_to)) => self.rolls_flushed(up_to),
            Ok(None) => Ok(()),
            Err(e) => {
                self.segments.restore_unflushed_rolls(rolls);
                Err(e.into())
            }
        }
    }

    /// Reads whole batches starting with the one containing `offset`, up to `max_bytes`
    /// (always at least one batch) and never at or above `limit` (the high watermark for
    /// consumers). An empty result means there is nothing at `offset` yet.
    pub fn read(&mut self, offset: i64, max_bytes: usize, limit: i64) -> Result<Batches, LogError> {
        let limit = limit.min(self.high_watermark);
        self.read_upto(offset, max_bytes, limit)
    }

    /// Like [`Log::read`] but up to the log end, past the high watermark: what a follower
    /// replicates.
    pub fn read_replica(&mut self, offset: i64, max_bytes: usize) -> Result<Batches, LogError> {
        let end = self.log_end_offset();
        self.read_upto(offset, max_bytes, end)
    }

    /// Like [`Log::read`] for a read_committed consumer: up to the last stable offset, with
    /// the aborted transactions that overlap what is returned.
    pub fn read_committed(
        &mut self,
        offset: i64,
        max_bytes: usize,
    ) -> Result<(Batches, Vec<AbortedTxn>), LogError> {
        let lso = self.last_stable_offset();
        let read = self.read_upto(offset, max_bytes, lso)?;
        let Some(upper) = records::end_offset(&read.bytes) else {
            return Ok((read, Vec::new()));
        };
        Ok((read, self.segments.aborted(offset, upper)))
    }

    fn read_upto(
        &mut self,
        offset: i64,
        max_bytes: usize,
        limit: i64,
    ) -> Result<Batches, LogError> {
        let end = self.log_end_offset();
        if offset < self.log_start_offset || offset > end {
            return Err(LogError::OffsetOutOfRange {
                offset,
                start: self.log_start_offset,
                end,
            });
        }
        let capacity = self.config.segment_bytes + self.config.max_message_bytes as u64;
        self.segments.read(offset, max_bytes, limit, capacity)
    }

    /// Kafka's ListOffsets by timestamp: the first record with timestamp ≥ `ts`, and its timestamp.
    pub fn offset_for_timestamp(&mut self, ts: i64) -> Result<Option<(i64, i64)>, LogError> {
        let (start, hw) = (self.log_start_offset, self.high_watermark);
        self.segments.offset_for_timestamp(ts, start, hw)
    }

    /// ListOffsets MAX_TIMESTAMP: the offset of the record with the largest timestamp.
    pub fn max_timestamp(&self) -> Option<(i64, i64)> {
        self.segments.max_timestamp(self.log_start_offset)
    }

    /// Closed segments wholly below the last stable offset: what may be offloaded. Every
    /// transaction with records in one has ended, so the aborted ones that overlap it are
    /// known when it is uploaded ([`Log::closed_segment`]).
    pub fn closed_segments(&self) -> Vec<ClosedSegment> {
        self.segments.closed(self.last_stable_offset())
    }

    /// The bytes of the closed segment starting at `base` (zero-copy; they stay readable
    /// after the segment is deleted) and the aborted transactions that overlap it (wherever
    /// their markers are: the segment is below the last stable offset, so all have ended), or
    /// `None` if it is gone or still active.
    pub fn closed_segment(
        &mut self,
        base: i64,
    ) -> Result<Option<(Bytes, Vec<AbortedTxn>)>, LogError> {
        self.segments.closed_bytes(base)
    }

    /// Rolls the active segment when `segment.ms` has passed even without new appends.
    pub fn roll_if_old(&mut self, now_ms: i64) -> Result<(), LogError> {
        let segment_ms = self.config.segment_ms;
        let active = self.active();
        if !active.is_empty() && now_ms.saturating_sub(active.created_ms()) >= segment_ms {
            self.roll(now_ms)?;
        }
        Ok(())
    }

    /// Flushes when `flush.ms` has passed since the last flush.
    pub fn flush_if_due(&mut self, now_ms: i64) -> Result<(), LogError> {
        self.segments.flush_if_due(now_ms, self.config.flush_ms)
    }

    /// Records appended and not yet flushed while `flush.ms` is finite: a time-based flush is
    /// still to come.
    pub fn has_unflushed_records(&mut self) -> bool {
        self.config.flush_ms < i64::MAX && self.segments.unflushed_messages() > 0
    }
}

/// [`track_marker`] for a control batch `h` (its bytes `batch`) now in the log: nothing for a
/// control batch that is not a transaction marker.
fn track_control_batch(
    producers: &mut ProducerState,
    h: &BatchHeader,
    batch: &Bytes,
) -> Result<Option<AbortedTxn>, LogError> {
    Ok(
        control::read_marker(batch, h)?.and_then(|(marker, coordinator_epoch)| {
            track_marker(producers, h, marker, coordinator_epoch)
        }),
    )
}

/// Ends `h.producer_id`'s transaction with the marker `h` now in the log; an abort's entry
/// for the aborted-transaction index of the segment holding the marker.
fn track_marker(
    producers: &mut ProducerState,
    h: &BatchHeader,
    marker: Marker,
    coordinator_epoch: i32,
) -> Option<AbortedTxn> {
    let done = producers.complete(h, marker == Marker::Abort, coordinator_epoch)?;
    done.aborted.then(|| AbortedTxn {
        producer_id: done.producer_id,
        first_offset: done.first_offset,
        last_offset: done.last_offset,
        last_stable_offset: producers
            .first_unstable_offset()
            .unwrap_or(done.last_offset + 1),
    })
}

/// A read_committed read's bytes and aborted transactions, as tests compare them.
#[cfg(test)]
pub(crate) fn committed((read, aborted): (Batches, Vec<AbortedTxn>)) -> (Bytes, Vec<AbortedTxn>) {
    (read.bytes, aborted)
}

#[cfg(test)]
mod tests;
