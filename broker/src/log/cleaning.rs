//! Compacting a log (`cleanup.policy=compact`): plan under the log lock, rewrite closed
//! segments into a staging directory without it, then swap under it again.
//!
//! The dirty section is `[clean point, first uncleanable offset)`: closed segments not yet
//! cleaned, stopping at the active segment and at the first segment holding a record younger
//! than `min.compaction.lag.ms`. A clean builds the key → latest-offset map of the dirty section
//! and rewrites every closed segment below its end, keeping a record only if it is the latest of
//! its key, and dropping tombstones older than `delete.retention.ms` (by their timestamp).
//! Consecutive segments are merged while their original sizes fit in `segment.bytes`.
//!
//! Transactions: the dirty section also stops at the segment holding the first unstable
//! offset (an open transaction may still abort). Batches of aborted transactions are removed
//! and their keys never enter the map (an aborted write must not shadow a committed one);
//! markers are kept, and a merged segment's aborted-transaction index is the concatenation of
//! those it replaces.
//!
//! Invariants:
//! - only closed segments are rewritten, and a swap first checks that every segment it
//!   replaces is still in the log with the size it was read at (retention or DeleteRecords may
//!   have run meanwhile; then the clean is discarded and repeated later);
//! - the swap survives a crash at any point as either the old segments or the new ones: the new
//!   segments are complete and fsynced in `cleaning/` before `cleaning/swap.json` (the commit
//!   point) names the segments they replace; [`recover`] at open finishes a swap whose manifest
//!   exists and discards a staging directory without one;
//! - the clean point moves only after a completed swap, and only to a segment base, so a crash
//!   at worst repeats work.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::batch::{self, BatchHeader};
use super::compact::{self, Filtered, OffsetMap};
use super::index::{read_checkpoint, write_checkpoint};
use super::records;
use super::segment::{self, Segment};
use super::txn_index::{self, AbortedFilter, AbortedTxn, TxnIndex};
use super::{Log, LogError};

const STAGING: &str = "cleaning";
const MANIFEST: &str = "swap.json";
pub(super) const CLEAN_POINT: &str = "cleaner-offset-checkpoint";

/// The segments a swap replaces with one new segment at `base` (the first of them).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Group {
    base: i64,
    replaces: Vec<i64>,
    /// Sizes at the time of reading, to detect a segment that changed before the swap.
    #[serde(skip)]
    sizes: Vec<u64>,
}

#[derive(Serialize, Deserialize)]
struct Manifest {
    groups: Vec<Group>,
}

/// A closed segment as the cleaner reads it: the bytes of the whole file.
struct SegmentView {
    base: i64,
    size: u64,
    data: Bytes,
    txn_index: TxnIndex,
}

/// What a clean will work on, taken under the log lock.
pub struct CleanPlan {
    dir: PathBuf,
    clean_point: i64,
    dirty_end: i64,
    segments: Vec<SegmentView>,
    /// Aborted transactions overlapping the planned segments.
    aborted: Vec<AbortedTxn>,
    segment_bytes: u64,
    index_interval: u64,
    delete_retention_ms: i64,
    pub dirty_ratio: f64,
}

/// What one clean did.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct CleanStats {
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub records_removed: u64,
    pub tombstones_removed: u64,
    pub segments_before: usize,
    pub segments_after: usize,
}

/// Segments a swap replaced, to be dropped outside the log lock.
pub struct Retired {
    _segments: Vec<Segment>,
}

/// Rewritten segments waiting in `cleaning/` for [`Log::install_cleaned`].
pub struct Cleaned {
    groups: Vec<Group>,
    clean_point: i64,
    pub stats: CleanStats,
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Called from `Log::open` before segments are listed: finishes or discards a clean that a
/// crash interrupted. Returns true if a swap was finished.
pub(super) fn recover(dir: &Path) -> Result<bool, LogError> {
    let staging = dir.join(STAGING);
    if !staging.exists() {
        return Ok(false);
    }
    if staging.join(MANIFEST).exists() {
        complete_swap(dir)?;
        tracing::warn!(dir = %dir.display(), "finished a compaction swap interrupted by a crash");
        Ok(true)
    } else {
        std::fs::remove_dir_all(&staging)?;
        tracing::info!(dir = %dir.display(), "discarded an unfinished compaction");
        Ok(false)
    }
}

/// Moves the staged segments over the ones the manifest says they replace. Idempotent, so a
/// crash inside it is finished by the next open.
fn complete_swap(dir: &Path) -> Result<(), LogError> {
    let staging = dir.join(STAGING);
    let manifest: Manifest = serde_json::from_slice(&std::fs::read(staging.join(MANIFEST))?)
        .map_err(|e| LogError::Corrupt(format!("{}: {e}", staging.join(MANIFEST).display())))?;
    for g in &manifest.groups {
        for &b in g.replaces.iter().filter(|&&b| b != g.base) {
            for p in segment::files(dir, b) {
                remove_if_exists(&p)?;
            }
        }
        #[cfg(test)]
        crash_point::hit(crash_point::AFTER_REMOVING_REPLACED)?;
        // Renames overwrite the old files at `base`; the log file moves last.
        for (from, to) in segment::files(&staging, g.base)
            .into_iter()
            .zip(segment::files(dir, g.base))
            .rev()
        {
            if from.exists() {
                std::fs::rename(&from, &to)?;
                #[cfg(test)]
                crash_point::hit(crash_point::AFTER_FIRST_RENAME)?;
            }
        }
    }
    sync_dir(dir)?;
    std::fs::remove_dir_all(&staging)?;
    sync_dir(dir)?;
    Ok(())
}

fn remove_if_exists(p: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(p) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

impl Log {
    /// The dirty section `[clean point, first uncleanable)` and the dirty ratio, or `None` when
    /// the log is not compacted or nothing is dirty.
    fn dirty_section(&self, now_ms: i64) -> Option<(i64, i64, f64)> {
        if !self.config.compact {
            return None;
        }
        let active_base = *self.segments.map.keys().next_back()?;
        let lag = self.config.min_compaction_lag_ms;
        let first_unstable = self.producers.first_unstable_offset();
        let dirty_end = self
            .segments
            .map
            .values()
            .find(|s| {
                s.base_offset() == active_base
                    || (lag > 0 && s.max_timestamp() > now_ms.saturating_sub(lag))
                    || first_unstable.is_some_and(|u| s.next_offset() > u)
            })
            .map(|s| s.base_offset())
            .unwrap_or(active_base);
        let clean_point = self.clean_point.max(self.first_segment_base());
        let (mut clean, mut dirty) = (0u64, 0u64);
        for s in self.segments.map.range(..dirty_end).map(|(_, s)| s) {
            if s.base_offset() >= clean_point {
                dirty += s.size();
            } else {
                clean += s.size();
            }
        }
        if dirty == 0 {
            return None;
        }
        Some((
            clean_point,
            dirty_end,
            dirty as f64 / (clean + dirty) as f64,
        ))
    }

    /// The share of the cleanable bytes not yet cleaned (0 when nothing is dirty).
    pub fn dirty_ratio(&self, now_ms: i64) -> f64 {
        self.dirty_section(now_ms).map(|d| d.2).unwrap_or(0.0)
    }

    /// A plan when the dirty ratio has reached `min.cleanable.dirty.ratio`.
    pub fn clean_plan(&mut self, now_ms: i64) -> Result<Option<CleanPlan>, LogError> {
        let Some((clean_point, dirty_end, ratio)) = self.dirty_section(now_ms) else {
            return Ok(None);
        };
        if ratio < self.config.min_cleanable_dirty_ratio {
            return Ok(None);
        }
        let mut segments = Vec::new();
        for s in self.segments.map.range_mut(..dirty_end).map(|(_, s)| s) {
            segments.push(SegmentView {
                base: s.base_offset(),
                size: s.size(),
                data: s.whole()?,
                txn_index: s.txn_index().clone(),
            });
        }
        let first = self.first_segment_base();
        let aborted = txn_index::collect(
            self.segments.map.values().map(|s| s.txn_index()),
            first,
            dirty_end,
        );
        Ok(Some(CleanPlan {
            dir: self.dir.clone(),
            clean_point,
            dirty_end,
            segments,
            aborted,
            segment_bytes: self.config.segment_bytes,
            index_interval: self.config.index_interval_bytes,
            delete_retention_ms: self.config.delete_retention_ms,
            dirty_ratio: ratio,
        }))
    }

    /// Swaps cleaned segments in. Returns `None` (and discards them) if a segment they replace
    /// changed since the plan was taken; otherwise the replaced segments, which the caller
    /// drops after releasing the log lock: closing them frees their page cache, which takes
    /// long enough to stall producers if done under it.
    pub fn install_cleaned(&mut self, cleaned: Cleaned) -> Result<Option<Retired>, LogError> {
        let staging = self.dir.join(STAGING);
        let active_base = *self.segments.map.keys().next_back().expect("one segment");
        let unchanged = cleaned.groups.iter().all(|g| {
            g.replaces.iter().zip(&g.sizes).all(|(b, size)| {
                *b != active_base && self.segments.map.get(b).is_some_and(|s| s.size() == *size)
            })
        });
        if !unchanged {
            std::fs::remove_dir_all(&staging)?;
            return Ok(None);
        }
        let mut retired = Vec::new();
        if !cleaned.groups.is_empty() {
            let manifest = Manifest {
                groups: cleaned.groups.clone(),
            };
            super::index::write_file_atomically(
                &staging.join(MANIFEST),
                &serde_json::to_vec(&manifest).map_err(std::io::Error::other)?,
            )?;
            sync_dir(&staging)?;
            #[cfg(test)]
            crash_point::hit(crash_point::AFTER_MANIFEST)?;
            complete_swap(&self.dir)?;
            for g in &cleaned.groups {
                // Not `Segment::delete`: the files at `g.base` are the new segment's now. The
                // others are unlinked already; readers' slices keep their mappings alive.
                retired.extend(
                    g.replaces
                        .iter()
                        .filter_map(|b| self.segments.map.remove(b)),
                );
                let (seg, _) =
                    Segment::open(&self.dir, g.base, self.config.index_interval_bytes, true)?;
                self.segments.map.insert(g.base, seg);
            }
        } else if staging.exists() {
            std::fs::remove_dir_all(&staging)?;
        }
        self.clean_point = cleaned.clean_point;
        write_checkpoint(&self.dir.join(CLEAN_POINT), cleaned.clean_point)?;
        Ok(Some(Retired { _segments: retired }))
    }

    pub(super) fn load_clean_point(dir: &Path) -> i64 {
        read_checkpoint(&dir.join(CLEAN_POINT)).unwrap_or(0)
    }
}

impl CleanPlan {
    /// Seals one output segment, or drops it when it is an unchanged copy of a single segment
    /// (swapping it in would gain nothing).
    fn finish_output(
        &self,
        (mut out, group, removed): (Segment, Group, u64),
        groups: &mut Vec<Group>,
        stats: &mut CleanStats,
    ) -> Result<(), LogError> {
        stats.records_removed += removed;
        stats.segments_after += 1;
        if group.replaces.len() == 1 && removed == 0 {
            drop(out);
            for p in segment::files(&self.dir.join(STAGING), group.base) {
                remove_if_exists(&p)?;
            }
            return Ok(());
        }
        out.seal()?;
        groups.push(group);
        Ok(())
    }

    /// Rewrites the segments of the plan into `cleaning/`. `progress` is told the bytes read and
    /// written after every batch (it throttles) and returning false aborts the clean, which
    /// then leaves nothing behind. `None` means aborted.
    pub fn clean(
        self,
        map_memory: usize,
        now_ms: i64,
        progress: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Option<Cleaned>, LogError> {
        let mut stats = CleanStats::default();
        // 1. The latest offset of every key in the dirty section, as far as the map holds.
        let mut map = OffsetMap::with_memory(map_memory);
        let mut dirty_end = self.dirty_end;
        let mut mapped_any = false;
        let mut aborted = AbortedFilter::new(self.aborted.clone());
        for seg in self.segments.iter().filter(|s| s.base < self.clean_point) {
            // The filter walks the log in order; the clean section's batches only move it.
            for item in records::batches(&seg.data) {
                aborted.is_aborted(&item?.0);
            }
        }
        for seg in self.segments.iter().filter(|s| s.base >= self.clean_point) {
            let mut records = 0usize;
            for item in records::batches(&seg.data) {
                records += item?.0.record_count.max(0) as usize;
            }
            if mapped_any && records > map.room() {
                dirty_end = seg.base;
                break;
            }
            for item in records::batches(&seg.data) {
                let (h, b) = item?;
                if aborted.is_aborted(&h) || h.is_control() {
                    continue;
                }
                let section = records::section(&b, &h)?;
                records::for_each(&section, &h, |r| {
                    if let Some(k) = r.key {
                        map.put(k, r.offset);
                    }
                })?;
            }
            mapped_any = true;
            if !progress(seg.size) {
                return Ok(None);
            }
        }

        // 2. Rewrite every segment below the dirty end. Consecutive segments share an output
        //    while what is written so far plus the next segment's size fits in segment.bytes.
        let staging = self.dir.join(STAGING);
        if staging.exists() {
            std::fs::remove_dir_all(&staging)?;
        }
        // Not create_dir_all: if the partition was deleted meanwhile, stop here.
        std::fs::create_dir(&staging)?;
        let retention = self.delete_retention_ms;
        let mut aborted = AbortedFilter::new(self.aborted.clone());
        let mut out_groups = Vec::new();
        let mut current: Option<(Segment, Group, u64)> = None;
        for s in self.segments.iter().filter(|s| s.base < dirty_end) {
            stats.segments_before += 1;
            let fits = current.as_ref().is_some_and(|(out, g, _)| {
                out.size() + s.size <= self.segment_bytes && s.base - g.base < i32::MAX as i64
            });
            if !fits {
                if let Some(done) = current.take() {
                    self.finish_output(done, &mut out_groups, &mut stats)?;
                }
                let out = Segment::create(&staging, s.base, self.index_interval, now_ms)?;
                let group = Group {
                    base: s.base,
                    replaces: Vec::new(),
                    sizes: Vec::new(),
                };
                current = Some((out, group, 0));
            }
            let (out, group, removed_here) = current.as_mut().expect("set above");
            group.replaces.push(s.base);
            group.sizes.push(s.size);
            for e in s.txn_index.entries() {
                out.txn_index_mut().push(*e);
            }
            for item in records::batches(&s.data) {
                let (h, b) = item?;
                let mut tombstones = 0u64;
                let (outcome, removed) = if aborted.is_aborted(&h) {
                    (Filtered::Dropped, h.record_count.max(0) as u64)
                } else if h.is_control() {
                    (Filtered::Kept, 0)
                } else {
                    compact::filter_batch(&b, &h, |r| {
                        let Some(key) = r.key else { return false };
                        if map.latest(key).is_some_and(|latest| r.offset < latest) {
                            return false;
                        }
                        let expired = r.is_tombstone()
                            && retention >= 0
                            && r.timestamp.saturating_add(retention) < now_ms;
                        tombstones += expired as u64;
                        !expired
                    })?
                };
                *removed_here += removed;
                stats.tombstones_removed += tombstones;
                let written = match outcome {
                    Filtered::Kept => {
                        let prefix = batch::assigned_prefix(&b, h.base_offset, h.leader_epoch);
                        out.append(&h, &prefix, &b)?;
                        b.len()
                    }
                    Filtered::Rewritten(nb) => {
                        let nh = BatchHeader::parse(&nb)?;
                        let prefix = batch::assigned_prefix(&nb, nh.base_offset, nh.leader_epoch);
                        out.append(&nh, &prefix, &nb)?;
                        nb.len()
                    }
                    Filtered::Dropped => 0,
                };
                stats.bytes_written += written as u64;
                if !progress((b.len() + written) as u64) {
                    drop(current);
                    std::fs::remove_dir_all(&staging)?;
                    return Ok(None);
                }
            }
            stats.bytes_read += s.size;
        }
        if let Some(done) = current.take() {
            self.finish_output(done, &mut out_groups, &mut stats)?;
        }
        sync_dir(&staging)?;
        Ok(Some(Cleaned {
            groups: out_groups,
            clean_point: dirty_end,
            stats,
        }))
    }
}

#[cfg(test)]
pub mod crash_point {
    //! Test-only fault injection: a test arms a point and the swap stops there with an error,
    //! leaving the files exactly as a crash at that instant would.
    use std::cell::Cell;

    pub const AFTER_MANIFEST: u8 = 1;
    pub const AFTER_REMOVING_REPLACED: u8 = 2;
    pub const AFTER_FIRST_RENAME: u8 = 3;

    thread_local!(static ARMED: Cell<u8> = const { Cell::new(0) });

    pub fn arm(point: u8) {
        ARMED.with(|a| a.set(point));
    }

    pub fn hit(point: u8) -> Result<(), super::LogError> {
        if ARMED.with(|a| a.get()) == point {
            ARMED.with(|a| a.set(0));
            return Err(super::LogError::Io(std::io::Error::other("crash point")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::log::batch::{build, split_and_validate};
    use crate::log::committed as bytes_and_aborted;
    use crate::log::config::LogConfig;

    const NOW: i64 = 10_000_000;

    fn config() -> LogConfig {
        LogConfig {
            compact: true,
            delete: false,
            min_cleanable_dirty_ratio: 0.01,
            delete_retention_ms: 1_000,
            ..LogConfig::for_tests(2_000)
        }
    }

    fn open(dir: &Path) -> Log {
        Log::open(dir, config(), NOW).unwrap().0
    }

    /// Appends one single-record batch; `None` value is a tombstone.
    fn put(log: &mut Log, key: &str, value: Option<&str>, ts: i64) -> i64 {
        let b = build(&[(Some(key.as_bytes()), value.map(str::as_bytes))], ts);
        let batches = split_and_validate(&b, 1 << 20).unwrap();
        log.append(&batches, 0, NOW).unwrap().base_offset
    }

    /// Every record readable from the log start: offset → (key, value).
    fn contents(log: &mut Log) -> BTreeMap<i64, (String, Option<String>)> {
        let mut out = BTreeMap::new();
        let mut next = log.log_start_offset();
        loop {
            let mut bytes = log.read(next, 1 << 20, i64::MAX).unwrap().bytes;
            if bytes.is_empty() {
                return out;
            }
            while !bytes.is_empty() {
                let h = BatchHeader::parse(&bytes).unwrap();
                next = h.next_offset();
                let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut bytes).unwrap();
                for r in set.records.into_iter().filter(|r| !r.control) {
                    let s = |b: Option<Bytes>| b.map(|b| String::from_utf8(b.to_vec()).unwrap());
                    out.insert(r.offset, (s(r.key).unwrap(), s(r.value)));
                }
            }
        }
    }

    /// The latest record of every key (what a compacted log must keep).
    fn latest(
        all: &BTreeMap<i64, (String, Option<String>)>,
    ) -> BTreeMap<i64, (String, Option<String>)> {
        let mut by_key = BTreeMap::new();
        for (o, (k, v)) in all {
            by_key.insert(k.clone(), (*o, v.clone()));
        }
        by_key.into_iter().map(|(k, (o, v))| (o, (k, v))).collect()
    }

    fn clean(log: &mut Log, now: i64) -> Option<CleanStats> {
        let plan = log.clean_plan(now).unwrap()?;
        let cleaned = plan.clean(1 << 20, now, &mut |_| true).unwrap()?;
        let stats = cleaned.stats;
        log.install_cleaned(cleaned).unwrap().map(|_| stats)
    }

    /// One transactional single-record batch of producer `pid` (epoch 0, sequence `seq`).
    fn txn_put(log: &mut Log, pid: i64, seq: i32, key: &str, value: &str) -> i64 {
        let mut b = bytes::BytesMut::from(
            &build(&[(Some(key.as_bytes()), Some(value.as_bytes()))], NOW)[..],
        );
        b[21..23].copy_from_slice(&0x10i16.to_be_bytes()); // transactional
        b[batch::field::PRODUCER_ID..batch::field::PRODUCER_ID + 8]
            .copy_from_slice(&pid.to_be_bytes());
        b[batch::field::PRODUCER_EPOCH..batch::field::PRODUCER_EPOCH + 2]
            .copy_from_slice(&0i16.to_be_bytes());
        b[batch::field::BASE_SEQUENCE..batch::field::BASE_SEQUENCE + 4]
            .copy_from_slice(&seq.to_be_bytes());
        let crc = batch::compute_crc(&b);
        b[batch::field::CRC..batch::field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        let batches = split_and_validate(&b.freeze(), 1 << 20).unwrap();
        log.append(&batches, 0, NOW).unwrap().base_offset
    }

    /// Offsets of the control batches readable from the log start.
    fn markers(log: &mut Log) -> Vec<i64> {
        let mut out = Vec::new();
        let mut next = log.log_start_offset();
        loop {
            let bytes = log.read(next, 1 << 20, i64::MAX).unwrap().bytes;
            if bytes.is_empty() {
                return out;
            }
            for h in records::batches(&bytes).map(|b| b.unwrap().0) {
                next = h.next_offset();
                if h.is_control() {
                    out.push(h.base_offset);
                }
            }
        }
    }

    #[test]
    fn aborted_writes_are_removed_and_never_shadow_committed_ones_and_open_ones_wait() {
        use crate::log::control::Marker;
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path());
        let committed = txn_put(&mut log, 1, 0, "k", "committed");
        log.append_marker(Marker::Commit, 1, 0, 0, 0, NOW).unwrap();
        let aborted = txn_put(&mut log, 2, 0, "k", "aborted");
        log.append_marker(Marker::Abort, 2, 0, 0, 0, NOW).unwrap();
        let open_at = txn_put(&mut log, 3, 0, "j", "open");
        for i in 0..60 {
            put(&mut log, &format!("filler-{}", i % 3), Some("x"), NOW);
        }
        log.roll(NOW).unwrap();
        assert!(log.segments().count() > 2);
        // Producer 3's transaction may still abort: nothing from its segment on is cleaned.
        assert!(clean(&mut log, NOW).is_none());
        log.append_marker(Marker::Commit, 3, 0, 0, 0, NOW).unwrap();
        for i in 0..60 {
            put(&mut log, &format!("filler-{}", i % 3), Some("y"), NOW);
        }
        log.roll(NOW).unwrap();
        let stats = clean(&mut log, NOW).expect("a clean");
        assert!(stats.records_removed > 0);
        let all = contents(&mut log);
        assert_eq!(all[&committed].1.as_deref(), Some("committed"));
        assert!(!all.contains_key(&aborted), "the aborted write is removed");
        assert_eq!(all[&open_at].1.as_deref(), Some("open"));
        assert_eq!(markers(&mut log).len(), 3, "markers are kept");
        // The abort is still indexed for read_committed readers of what remains.
        let (bytes, listed) = bytes_and_aborted(log.read_committed(0, 1 << 30).unwrap());
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].producer_id, 2);
        log.close().unwrap();
        drop(log);
        let mut log = open(dir.path());
        assert_eq!(
            bytes_and_aborted(log.read_committed(0, 1 << 30).unwrap()),
            (bytes.clone(), listed)
        );
        // A crash rebuilds the index from what the log holds: the aborted batch is gone, so
        // its abort need not be listed any more; what is read stays the same.
        drop(log);
        let mut log = open(dir.path());
        assert_eq!(
            bytes_and_aborted(log.read_committed(0, 1 << 30).unwrap()).0,
            bytes
        );
    }

    /// 300 updates of 10 keys across many small segments.
    fn updates(log: &mut Log) -> BTreeMap<i64, (String, Option<String>)> {
        for i in 0..300 {
            put(log, &format!("key-{}", i % 10), Some(&format!("v{i}")), NOW);
        }
        log.roll(NOW).unwrap();
        contents(log)
    }

    #[test]
    fn the_latest_value_of_every_key_survives_at_its_original_offset() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path());
        let before = updates(&mut log);
        let segments = log.segments().count();
        let end = log.log_end_offset();
        let stats = clean(&mut log, NOW).expect("dirty enough to clean");
        assert_eq!(contents(&mut log), latest(&before));
        assert_eq!(log.log_end_offset(), end, "the log end never moves");
        assert_eq!(stats.records_removed, 290);
        assert!(
            log.segments().count() < segments,
            "small segments are merged"
        );
        // The result survives a restart, and appends continue after it.
        drop(log);
        let mut log = open(dir.path());
        assert_eq!(contents(&mut log), latest(&before));
        assert_eq!(put(&mut log, "key-0", Some("after"), NOW), end);
        assert_eq!(log.dirty_ratio(NOW), 0.0, "only the active segment is new");
    }

    #[test]
    fn a_second_clean_removes_what_newer_records_superseded() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path());
        updates(&mut log);
        clean(&mut log, NOW).unwrap();
        put(&mut log, "key-3", Some("newest"), NOW);
        log.roll(NOW).unwrap();
        let all = contents(&mut log);
        clean(&mut log, NOW).unwrap();
        let after = contents(&mut log);
        assert_eq!(after, latest(&all));
        assert_eq!(after.values().filter(|(k, _)| k == "key-3").count(), 1);
    }

    #[test]
    fn tombstones_delete_their_key_and_go_after_delete_retention() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path());
        put(&mut log, "a", Some("1"), NOW);
        put(&mut log, "b", Some("2"), NOW);
        let old = put(&mut log, "a", None, NOW - 5_000);
        let fresh = put(&mut log, "b", None, NOW);
        log.roll(NOW).unwrap();
        clean(&mut log, NOW).unwrap();
        // The old tombstone is past delete.retention.ms (1 s) and goes with its key; the fresh
        // one stays so that consumers can still see the delete.
        let after = contents(&mut log);
        assert!(!after.contains_key(&old));
        assert_eq!(after.get(&fresh), Some(&("b".to_string(), None)));
        assert_eq!(after.len(), 1);
        // Later, the fresh one expires too (a new dirty segment triggers the pass).
        put(&mut log, "c", Some("3"), NOW);
        log.roll(NOW).unwrap();
        let stats = clean(&mut log, NOW + 2_000).unwrap();
        assert_eq!(stats.tombstones_removed, 1);
        assert_eq!(contents(&mut log).len(), 1);
    }

    #[test]
    fn nothing_is_cleaned_below_the_dirty_ratio_or_inside_the_compaction_lag() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path());
        updates(&mut log);
        let mut cfg = config();
        cfg.min_cleanable_dirty_ratio = 1.0;
        cfg.min_compaction_lag_ms = 60_000;
        log.set_config(cfg.clone());
        // All records are younger than the lag: nothing is cleanable at all.
        assert_eq!(log.dirty_ratio(NOW), 0.0);
        assert!(log.clean_plan(NOW).unwrap().is_none());
        // An hour later the lag has passed; the whole log is dirty (ratio 1.0 ≥ 1.0).
        assert!(log.clean_plan(NOW + 3_600_000).unwrap().is_some());
        clean(&mut log, NOW + 3_600_000).unwrap();
        // After a clean, a little new dirt is below a ratio of 0.9.
        put(&mut log, "key-1", Some("x"), NOW);
        log.roll(NOW).unwrap();
        cfg.min_cleanable_dirty_ratio = 0.9;
        log.set_config(cfg);
        assert!(log.dirty_ratio(NOW + 3_600_000) > 0.0);
        assert!(log.clean_plan(NOW + 3_600_000).unwrap().is_none());
    }

    #[test]
    fn a_log_that_is_not_compacted_is_never_cleaned() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path());
        updates(&mut log);
        log.set_config(LogConfig::for_tests(2_000));
        assert!(log.clean_plan(NOW).unwrap().is_none());
    }

    #[test]
    fn a_clean_is_discarded_if_retention_removed_a_segment_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path());
        let before = updates(&mut log);
        let plan = log.clean_plan(NOW).unwrap().unwrap();
        let cleaned = plan.clean(1 << 20, NOW, &mut |_| true).unwrap().unwrap();
        let first_end = log.segments.map.values().next().unwrap().next_offset();
        // compact,delete allows DeleteRecords; it drops the first segment under the clean.
        log.set_config(LogConfig {
            delete: true,
            ..config()
        });
        log.delete_records_before(first_end, NOW).unwrap();
        assert!(log.install_cleaned(cleaned).unwrap().is_none());
        assert!(!dir.path().join(STAGING).exists());
        let after = contents(&mut log);
        assert_eq!(
            after,
            before
                .range(first_end..)
                .map(|(o, v)| (*o, v.clone()))
                .collect()
        );
    }

    #[test]
    fn an_aborted_clean_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path());
        let before = updates(&mut log);
        let plan = log.clean_plan(NOW).unwrap().unwrap();
        let mut budget = 3;
        assert!(plan
            .clean(1 << 20, NOW, &mut |_| {
                budget -= 1;
                budget > 0
            })
            .unwrap()
            .is_none());
        assert!(!dir.path().join(STAGING).exists());
        assert_eq!(contents(&mut log), before);
    }

    #[test]
    fn a_small_offset_map_cleans_the_dirty_section_over_several_passes() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open(dir.path());
        for i in 0..200 {
            put(&mut log, &format!("k{i}"), Some("first"), NOW);
        }
        for i in 0..200 {
            put(&mut log, &format!("k{i}"), Some("second"), NOW);
        }
        log.roll(NOW).unwrap();
        let all = contents(&mut log);
        let mut passes = 0;
        while let Some(plan) = log.clean_plan(NOW).unwrap() {
            // Room for about 60 keys per pass.
            let cleaned = plan
                .clean(60 * compact::MAP_ENTRY_BYTES, NOW, &mut |_| true)
                .unwrap()
                .unwrap();
            assert!(log.install_cleaned(cleaned).unwrap().is_some());
            passes += 1;
            assert!(passes < 50, "the clean point must advance");
        }
        assert!(passes > 1);
        assert_eq!(contents(&mut log), latest(&all));
    }

    /// A crash at each point of the swap leaves a log that opens with either the old records
    /// or the cleaned ones, never a mix, and accepts appends.
    #[test]
    fn a_crash_anywhere_in_a_clean_leaves_the_old_or_the_new_log() {
        let points = [
            (None, false),
            (Some(crash_point::AFTER_MANIFEST), true),
            (Some(crash_point::AFTER_REMOVING_REPLACED), true),
            (Some(crash_point::AFTER_FIRST_RENAME), true),
        ];
        for (point, committed) in points {
            let dir = tempfile::tempdir().unwrap();
            let mut log = open(dir.path());
            let before = updates(&mut log);
            let end = log.log_end_offset();
            let plan = log.clean_plan(NOW).unwrap().unwrap();
            let cleaned = plan.clean(1 << 20, NOW, &mut |_| true).unwrap().unwrap();
            match point {
                // Crash before the manifest: staging written, never installed.
                None => drop(cleaned),
                Some(p) => {
                    crash_point::arm(p);
                    assert!(log.install_cleaned(cleaned).is_err(), "point {p}");
                }
            }
            drop(log);
            let mut log = open(dir.path());
            assert!(!dir.path().join(STAGING).exists());
            let expected = if committed {
                latest(&before)
            } else {
                before.clone()
            };
            assert_eq!(contents(&mut log), expected, "crash point {point:?}");
            assert_eq!(log.log_end_offset(), end);
            assert_eq!(put(&mut log, "key-0", Some("later"), NOW), end);
        }
    }
}
