//! The chain of a log's segment files: the segments by base offset (the last one active), the
//! rolled segments awaiting their fsync, and the last flush's time. It knows files, positions
//! and batches; what offsets mean (the log start, the high watermark, the last stable offset,
//! producers, epochs) is the [`Log`](super::Log)'s, which gives the bounds of every read.
//!
//! Invariants: the chain always holds one segment at least, the last one is the only one
//! appended to, and segments never overlap (each ends at or before the next one's base).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::records;
use super::segment::Segment;
use super::txn_index::{self, AbortedTxn};
use super::{Batches, ClosedSegment, LogError};

pub struct Segments {
    dir: PathBuf,
    /// Segments by base offset; the last one is active. The log's own modules (recovery,
    /// retention, cleaning) edit it directly, keeping the invariants above.
    pub(super) map: BTreeMap<i64, Segment>,
    /// Rolled segments not yet fsynced, each with the recovery point its flush allows. A roll
    /// does not fsync under the partition lock (a full 1 GiB segment's fsync held appends up
    /// for 100–250 ms); the partition does it outside ([`Segments::take_unflushed_rolls`]),
    /// and only then does the recovery point move past them.
    unflushed_rolls: Vec<(i64, File)>,
    last_flush_ms: i64,
}

impl Segments {
    /// The chain of `map` (one segment at least) in `dir`, flushed as of `now_ms`.
    pub(super) fn new(dir: &Path, map: BTreeMap<i64, Segment>, now_ms: i64) -> Segments {
        assert!(!map.is_empty(), "a log always has a segment");
        Segments {
            dir: dir.to_path_buf(),
            map,
            unflushed_rolls: Vec::new(),
            last_flush_ms: now_ms,
        }
    }

    /// The offset after the last batch: the log end.
    pub fn end(&self) -> i64 {
        self.map.values().next_back().expect("one").next_offset()
    }

    pub(super) fn first_base(&self) -> i64 {
        *self.map.keys().next().expect("a log always has a segment")
    }

    pub(super) fn active(&mut self) -> &mut Segment {
        self.map
            .values_mut()
            .next_back()
            .expect("a log always has a segment")
    }

    /// Bytes of every segment.
    pub fn size(&self) -> u64 {
        self.map.values().map(|s| s.size()).sum()
    }

    /// Bytes of the segments that hold offsets at or above `offset`.
    pub fn bytes_from(&self, offset: i64) -> u64 {
        (self.map.values())
            .filter(|s| s.next_offset() > offset)
            .map(|s| s.size())
            .sum()
    }

    /// Segments in the chain (never 0).
    pub fn count(&self) -> usize {
        self.map.len()
    }

    /// Seals the active segment (its fsync left for later, see `unflushed_rolls`) and starts
    /// a new one at the log end, which it returns.
    pub(super) fn roll(&mut self, index_interval: u64, now_ms: i64) -> Result<i64, LogError> {
        let end = self.end();
        let file = self.active().seal_unflushed()?;
        let seg = Segment::create(&self.dir, end, index_interval, now_ms)?;
        self.map.insert(end, seg);
        self.unflushed_rolls.push((end, file));
        Ok(end)
    }

    /// Replaces the empty active segment by one starting at `base` (a follower's first batch
    /// after a gap compaction left).
    pub(super) fn restart_active_at(
        &mut self,
        base: i64,
        index_interval: u64,
        now_ms: i64,
    ) -> Result<(), LogError> {
        let last = *self.map.keys().next_back().expect("one segment");
        if let Some(seg) = self.map.remove(&last) {
            seg.delete()?;
        }
        let seg = Segment::create(&self.dir, base, index_interval, now_ms)?;
        self.map.insert(base, seg);
        Ok(())
    }

    /// Deletes every segment and starts one, empty, at `offset`.
    pub(super) fn reset(
        &mut self,
        offset: i64,
        index_interval: u64,
        now_ms: i64,
    ) -> Result<(), LogError> {
        for (_, seg) in std::mem::take(&mut self.map) {
            seg.delete()?;
        }
        let seg = Segment::create(&self.dir, offset, index_interval, now_ms)?;
        self.map.insert(offset, seg);
        Ok(())
    }

    /// Cuts the chain before the first batch ending at or after `offset` (above the first
    /// segment's base): whole segments above go, the one holding the cut is rewritten
    /// ([`Segment::truncated`]); rolls awaiting their fsync past the new end are forgotten.
    pub(super) fn truncate(&mut self, offset: i64) -> Result<(), LogError> {
        let first = self.first_base();
        let above: Vec<i64> = self.map.range(offset..).map(|(b, _)| *b).collect();
        for base in above.into_iter().take_while(|b| *b != first) {
            if let Some(seg) = self.map.remove(&base) {
                seg.delete()?;
            }
        }
        let last = *self.map.keys().next_back().expect("one segment");
        if let Some(seg) = self.map.remove(&last) {
            self.map.insert(last, seg.truncated(offset)?);
        }
        let end = self.end();
        self.unflushed_rolls.retain(|(e, _)| *e <= end);
        Ok(())
    }

    /// The rolled segments awaiting their fsync (see `unflushed_rolls`).
    pub fn take_unflushed_rolls(&mut self) -> Vec<(i64, File)> {
        std::mem::take(&mut self.unflushed_rolls)
    }

    /// Puts back rolls whose fsync failed, ahead of any newer ones, to be tried again.
    pub fn restore_unflushed_rolls(&mut self, mut rolls: Vec<(i64, File)>) {
        rolls.append(&mut self.unflushed_rolls);
        self.unflushed_rolls = rolls;
    }

    /// Whether every roll up to `up_to` has been flushed (none older awaits its fsync).
    pub(super) fn rolls_flushed_to(&self, up_to: i64) -> bool {
        self.unflushed_rolls.first().is_none_or(|(e, _)| *e > up_to)
    }

    /// The base of the segment holding `offset`, or (at a segment's end) of the next one:
    /// where a walk of the segments from `offset` starts.
    fn base_for(&self, offset: i64) -> i64 {
        self.map
            .range(..=offset)
            .next_back()
            .map_or(offset, |(b, _)| *b)
    }

    /// Whole batches starting with the one containing `offset`, up to `max_bytes` (always at
    /// least one batch) and none reaching `limit`; empty when there is none yet. `capacity`
    /// bounds a mapping (see `segment.rs`).
    pub(super) fn read(
        &mut self,
        offset: i64,
        max_bytes: usize,
        limit: i64,
        capacity: u64,
    ) -> Result<Batches, LogError> {
        let first = self.base_for(offset);
        for seg in self.map.range_mut(first..).map(|(_, s)| s) {
            if let Some((pos, header)) = seg.find_batch(offset, capacity)? {
                if header.last_offset() >= limit {
                    return Ok(Batches::default());
                }
                let bytes = seg.read_from(pos, max_bytes, limit, capacity)?;
                let file = seg.span(pos, bytes.len());
                return Ok(Batches { bytes, file });
            }
        }
        Ok(Batches::default())
    }

    /// The aborted transactions overlapping `from..upper`.
    pub(super) fn aborted(&self, from: i64, upper: i64) -> Vec<AbortedTxn> {
        let first = self.base_for(from);
        txn_index::collect(
            self.map.range(first..).map(|(_, s)| s.txn_index()),
            from,
            upper,
        )
    }

    /// The first record at or above `start` and below `hw` with timestamp ≥ `ts`, and its
    /// timestamp.
    pub(super) fn offset_for_timestamp(
        &mut self,
        ts: i64,
        start: i64,
        hw: i64,
    ) -> Result<Option<(i64, i64)>, LogError> {
        for seg in self.map.values_mut() {
            if seg.next_offset() <= start || seg.max_timestamp() < ts {
                continue;
            }
            let from = seg.time_lookup_start(ts)?;
            for (pos, h) in seg.headers_from(from)? {
                if h.base_offset >= hw {
                    return Ok(None);
                }
                if h.max_timestamp < ts || h.last_offset() < start {
                    continue;
                }
                if h.is_log_append_time() {
                    return Ok(Some((h.base_offset.max(start), h.max_timestamp)));
                }
                let bytes = seg.batch_bytes(pos, &h)?;
                let found = records::first(&bytes, &h, |r| r.timestamp >= ts && r.offset >= start)?;
                if found.is_some() {
                    return Ok(found);
                }
            }
        }
        Ok(None)
    }

    /// The offset and timestamp of the record with the largest timestamp at or above
    /// `start`'s segment.
    pub(super) fn max_timestamp(&self, start: i64) -> Option<(i64, i64)> {
        self.map
            .values()
            .filter(|s| !s.is_empty() && s.next_offset() > start)
            .max_by_key(|s| s.max_timestamp())
            .map(|s| (s.offset_of_max_timestamp(), s.max_timestamp()))
    }

    /// Closed segments wholly below `stable`.
    pub(super) fn closed(&self, stable: i64) -> Vec<ClosedSegment> {
        self.map
            .values()
            .take(self.map.len() - 1)
            .filter(|s| !s.is_empty() && s.next_offset() <= stable)
            .map(|s| ClosedSegment {
                base_offset: s.base_offset(),
                next_offset: s.next_offset(),
                size: s.size(),
                max_timestamp: s.max_timestamp(),
            })
            .collect()
    }

    /// The bytes of the closed segment at `base` and the aborted transactions that overlap
    /// it, or `None` if it is gone or active.
    pub(super) fn closed_bytes(
        &mut self,
        base: i64,
    ) -> Result<Option<(Bytes, Vec<AbortedTxn>)>, LogError> {
        if self.map.keys().next_back() == Some(&base) {
            return Ok(None);
        }
        let Some(seg) = self.map.get_mut(&base) else {
            return Ok(None);
        };
        let (bytes, end) = (seg.whole()?, seg.next_offset());
        let aborted = txn_index::collect(
            self.map.range(base..).map(|(_, s)| s.txn_index()),
            base,
            end,
        );
        Ok(Some((bytes, aborted)))
    }

    /// Releases the mappings of segments not read since the last call (see
    /// [`Segment::release_idle_map`]).
    pub fn release_idle_maps(&mut self) {
        for seg in self.map.values_mut() {
            seg.release_idle_map();
        }
    }

    /// Records appended to the active segment and not yet flushed.
    pub(super) fn unflushed_messages(&mut self) -> u64 {
        self.active().unflushed_messages()
    }

    /// Flushes when `flush_ms` has passed since the last flush.
    pub(super) fn flush_if_due(&mut self, now_ms: i64, flush_ms: i64) -> Result<(), LogError> {
        if self.unflushed_messages() > 0 && now_ms - self.last_flush_ms >= flush_ms {
            self.flush(now_ms)?;
        }
        Ok(())
    }

    pub(super) fn flush(&mut self, now_ms: i64) -> Result<(), LogError> {
        self.active().flush()?;
        self.last_flush_ms = now_ms;
        Ok(())
    }
}
