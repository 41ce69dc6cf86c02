//! One log over two tiers: a tiered partition's start is the remote log's start (or the local
//! one's, whichever is lower, never below the quorum's floor), and an offset below the local
//! start is answered from the remote segment holding it ([`Read::Remote`]); the tier reads it.

use std::sync::{Arc, RwLock};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use strata_metadata::{PartitionInfo, RemoteSegment};

use super::{offsets_of, Offsets, Partition};
use crate::log::txn_index::AbortedTxn;
use crate::log::{Batches, ClosedSegment, LogError, RemoteView};

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
    pub(super) fn of(info: &PartitionInfo) -> RemoteLog {
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

    pub(super) fn view(&self) -> RemoteView {
        RemoteView {
            end: self.segments.last().map(|s| s.last_offset + 1).unwrap_or(0),
            bytes: self.bytes(),
        }
    }
}

/// Where a follower joining a tiered partition at `offset` learns what the batches below it
/// told of their producers: the remote tier, from the index object of the segment ending
/// there. A trait here, beneath both, so replication asks without importing the tier.
pub trait RemoteProducers: Send + Sync {
    /// The producer state as of `offset`, if a remote segment ends exactly there and carries
    /// it; `None` otherwise (the replica then learns producers only from the batches it copies).
    fn producers_before<'a>(
        &'a self,
        p: &'a Partition,
        offset: i64,
    ) -> futures::future::BoxFuture<'a, Option<crate::log::producer_state::ProducerState>>;
}

/// How far a read may go, as Kafka's fetch isolation: a follower to the log end, a consumer to
/// the high watermark (read_uncommitted) or to the last stable offset (read_committed, with
/// the aborted transactions among what it reads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isolation {
    LogEnd,
    HighWatermark,
    Committed,
}

impl Isolation {
    /// The offset a reader at this isolation is caught up at.
    pub fn end(self, o: &Offsets) -> i64 {
        match self {
            Isolation::LogEnd => o.log_end,
            Isolation::HighWatermark => o.high_watermark,
            Isolation::Committed => o.last_stable,
        }
    }
}

/// Where a fetch's bytes come from.
#[derive(Debug)]
pub enum Read {
    /// Whole batches from the local log (possibly empty: nothing there yet), and for a
    /// read_committed read the aborted transactions that overlap them.
    Local(Batches, Vec<AbortedTxn>),
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

/// The partition's view of its remote tier: the remote log as the metadata state last gave it.
///
/// Lock rule: a leaf, held only to clone or replace the `Arc`.
pub struct TierView {
    remote: RwLock<Arc<RemoteLog>>,
}

impl TierView {
    pub(super) fn new(remote: RemoteLog) -> TierView {
        TierView {
            remote: RwLock::new(Arc::new(remote)),
        }
    }

    pub(super) fn get(&self) -> Arc<RemoteLog> {
        self.remote
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(super) fn set(&self, remote: RemoteLog) {
        *self.remote.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(remote);
    }
}

impl Partition {
    pub fn remote(&self) -> Arc<RemoteLog> {
        self.tier.get()
    }

    /// Batches from `offset` for a consumer (up to the high watermark, or for read_committed
    /// up to the last stable offset with the aborted transactions among them), or the remote
    /// segment to read them from.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        committed: bool,
    ) -> Result<(Read, Offsets), LogError> {
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
        let mut from = offset;
        if offset < log.log_start_offset() {
            if let Some(seg) = remote.segment_for(offset) {
                if seg.base_offset < log.log_start_offset() {
                    return Ok((Read::Remote(seg.clone()), offsets));
                }
            }
            // A gap between the tiers (retention deleted segments that were never
            // offloaded): the log continues at the local start, as after a compaction gap.
            from = log.log_start_offset();
        }
        let read = if committed {
            let (bytes, aborted) = log.read_committed(from, max_bytes)?;
            Read::Local(bytes, aborted)
        } else {
            Read::Local(log.read(from, max_bytes, i64::MAX)?, Vec::new())
        };
        Ok((read, offsets))
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

    /// The newest record timestamp in either tier (ListOffsets MAX_TIMESTAMP then finds the
    /// first record holding it with [`Partition::offset_for_timestamp`], so the answer is that
    /// record and not the last of its batch: KAFKA-16310).
    pub fn max_timestamp(&self) -> Option<i64> {
        let remote = self.remote();
        let log = self.log();
        let local = log.max_timestamp().map(|(_, ts)| ts);
        let remote = (remote.segments.iter())
            .filter(|s| s.base_offset < log.log_start_offset() && s.last_offset >= remote.floor)
            .map(|s| s.max_timestamp)
            .max();
        local.max(remote)
    }

    /// The last offset ever uploaded to the object store (ListOffsets LATEST_TIERED,
    /// KIP-1005), `None` when the topic is not tiered or nothing was uploaded yet.
    pub fn last_tiered(&self) -> Option<i64> {
        let end = self.remote().end;
        (self.is_tiered() && end > 0).then_some(end - 1)
    }

    /// Closed local segments the offloader may upload: those holding anything at or past
    /// `from` (the remote end). The first may begin below it: replicas roll at different
    /// offsets, and a new leader's segment can straddle what its predecessor uploaded.
    pub fn offload_candidates(&self, from: i64) -> Vec<ClosedSegment> {
        not_offloaded(self.log().closed_segments(), from)
    }

    /// A closed segment's bytes and aborted transactions (see
    /// [`crate::log::Log::closed_segment`]).
    pub fn closed_segment(&self, base: i64) -> Result<Option<(Bytes, Vec<AbortedTxn>)>, LogError> {
        self.log().closed_segment(base)
    }

    pub fn is_tiered(&self) -> bool {
        self.log().config().remote_storage
    }

    /// Bytes of the local segments holding offsets at or above `offset`.
    pub fn local_bytes_from(&self, offset: i64) -> u64 {
        self.log().segments().bytes_from(offset)
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
            local_segments: log.segments().count(),
            local_bytes: log.segments().size(),
            remote_start: remote.start(),
            remote_end: remote.segments.last().map(|s| s.last_offset + 1),
            remote_segments: remote.segments.len(),
            remote_bytes: remote.bytes(),
            upload_lag_segments: pending.len(),
            upload_lag_bytes: pending.iter().map(|s| s.size).sum(),
        }
    }

    /// The first offset the object store does not hold yet (KIP-1023's earliest pending
    /// upload), at most the high watermark: where a new replica of a tiered partition starts,
    /// since every older offset is read from the remote tier. The local log start for a
    /// partition that is not tiered.
    pub fn first_pending_upload(&self) -> i64 {
        let remote = self.remote();
        let log = self.log();
        let local = log.log_start_offset();
        if !log.config().remote_storage {
            return local;
        }
        local.max(remote.end.min(log.high_watermark()))
    }

    /// First offset held on local disk.
    pub fn local_log_start(&self) -> i64 {
        self.log().log_start_offset()
    }
}

/// The closed segments holding anything at or past `remote_end`.
fn not_offloaded(mut segments: Vec<ClosedSegment>, remote_end: i64) -> Vec<ClosedSegment> {
    segments.retain(|s| s.next_offset > remote_end);
    segments
}
