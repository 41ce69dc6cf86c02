//! Opening a log: recovery after an unclean shutdown (rescanning segments above the recovery
//! point, truncating a torn tail, rebuilding producer state and leader epochs) and the clean
//! close whose marker lets the next open skip it. See the invariants in [`super`].

use std::collections::BTreeMap;
use std::path::Path;

use super::index::{self, read_checkpoint, Durability};
use super::leader_epoch::LeaderEpochCache;
use super::producer_state::ProducerState;
use super::segment::Segment;
use super::track_control_batch;
use super::{cleaning, Log, LogConfig, LogError, Segments};
use super::{CLEAN_SHUTDOWN, LOG_START, PRODUCER_STATE, PRODUCER_STATE_PREVIOUS, RECOVERY_POINT};

/// What `Log::open` found, for logs and metrics.
#[derive(Debug, Default, Clone, Copy)]
pub struct RecoveryReport {
    pub clean: bool,
    pub segments: usize,
    pub rescanned_segments: usize,
    pub truncated_bytes: u64,
}

impl Log {
    /// Opens (creating if needed) the log in `dir`, recovering from an unclean shutdown.
    /// Only `dir` itself is created, never its parent: a log directory that vanished (a
    /// disk unmounted or removed) must stay gone so that its probe fails, not be recreated
    /// on the root disk by the next partition placed in it.
    pub fn open(
        dir: &Path,
        config: LogConfig,
        now_ms: i64,
    ) -> Result<(Log, RecoveryReport), LogError> {
        create_dir(dir)?;
        let clean_marker = dir.join(CLEAN_SHUTDOWN);
        let clean = clean_marker.exists();
        cleaning::recover(dir)?;
        let mut bases: Vec<i64> = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if let Some(stem) = name.strip_suffix(".log") {
                if let Ok(base) = stem.parse::<i64>() {
                    bases.push(base);
                }
            } else if name.ends_with(".tmp") {
                // A write that never reached its rename: the previous file is still in place.
                std::fs::remove_file(entry.path())?;
            }
        }
        bases.sort_unstable();
        let recovery_point = read_checkpoint(&dir.join(RECOVERY_POINT)).unwrap_or(0);
        let mut report = RecoveryReport {
            clean,
            segments: bases.len(),
            ..Default::default()
        };
        let mut segments = BTreeMap::new();
        let mut truncated_at: Option<i64> = None;
        let mut rescanned_from: Option<i64> = None;
        for (i, &base) in bases.iter().enumerate() {
            if truncated_at.is_some() {
                // Everything after a torn segment is unreachable: offsets would not be dense.
                Segment::open(dir, base, config.index_interval_bytes, false)?
                    .0
                    .delete()?;
                continue;
            }
            let next_base = bases.get(i + 1).copied();
            // Segments wholly below the recovery point were sealed and flushed.
            let sealed = next_base.is_some_and(|n| n <= recovery_point);
            let trust = clean || sealed;
            let (seg, scan) = Segment::open(dir, base, config.index_interval_bytes, trust)?;
            if !trust {
                report.rescanned_segments += 1;
                rescanned_from.get_or_insert(base);
            }
            report.truncated_bytes += scan.truncated_bytes;
            // A segment may end before the next one starts (compaction removed its last
            // records), but never overlap it.
            if scan.truncated_bytes > 0 || next_base.is_some_and(|n| n < seg.next_offset()) {
                if scan.truncated_bytes > 0 {
                    tracing::warn!(dir = %dir.display(), base, bytes = scan.truncated_bytes, "truncated torn tail of segment");
                }
                if next_base.is_some() {
                    truncated_at = Some(seg.next_offset());
                }
            }
            segments.insert(base, seg);
        }
        if clean {
            std::fs::remove_file(&clean_marker)?;
        }
        let mut log_start_offset = read_checkpoint(&dir.join(LOG_START)).unwrap_or(0);
        if segments.is_empty() {
            let start = log_start_offset.max(0);
            segments.insert(
                start,
                Segment::create(dir, start, config.index_interval_bytes, now_ms)?,
            );
        }
        let first_base = *segments.keys().next().expect("at least one segment");
        let log_end = segments.values().next_back().expect("one").next_offset();
        log_start_offset = log_start_offset.clamp(first_base, log_end);
        let mut log = Log {
            dir: dir.to_path_buf(),
            config,
            segments: Segments::new(dir, segments, now_ms),
            log_start_offset,
            high_watermark: log_end,
            recovery_point: recovery_point.min(log_end),
            producers: ProducerState::default(),
            clean_point: Log::load_clean_point(dir),
            epochs: LeaderEpochCache::default(),
            replicated: false,
            truncations: 0,
        };
        log.rebuild_producer_state(rescanned_from)?;
        log.load_epochs(rescanned_from)?;
        log.debug_check();
        Ok((log, report))
    }

    /// Loads the leader-epoch checkpoint, or rebuilds it from the batch headers when it is
    /// missing or damaged, and drops epochs the log does not reach (a crash between writing
    /// the checkpoint and the append).
    ///
    /// `rescanned_from` is the first segment an unclean open rescanned: the checkpoint may
    /// lack the epochs of batches from there on (see `leader_epoch`), so they are added.
    fn load_epochs(&mut self, rescanned_from: Option<i64>) -> Result<(), LogError> {
        let (mut epochs, mut changed) = match LeaderEpochCache::load(&self.dir)? {
            Some(mut c) => {
                let mut added = false;
                if let Some(from) = rescanned_from {
                    for seg in self.segments.map.range_mut(from..).map(|(_, s)| s) {
                        for (_, h) in seg.headers_from(0)? {
                            added |= c.assign(h.leader_epoch, h.base_offset);
                        }
                    }
                }
                (c, added)
            }
            None => {
                let mut c = LeaderEpochCache::default();
                for seg in self.segments.map.values_mut() {
                    for (_, h) in seg.headers_from(0)? {
                        c.assign(h.leader_epoch, h.base_offset);
                    }
                }
                (c, true)
            }
        };
        changed |= epochs.truncate_from_end(self.log_end_offset());
        // An empty history needs no file: a missing one rebuilds to the same (a new log opens
        // without writing, and so without an fsync, here).
        if changed && !epochs.entries().is_empty() {
            epochs.save(&self.dir, Durability::Synced)?;
        }
        self.epochs = epochs;
        Ok(())
    }

    /// Loads the producer snapshot and replays the batch headers after it.
    pub(super) fn rebuild_producer_state(
        &mut self,
        rescanned_from: Option<i64>,
    ) -> Result<(), LogError> {
        // The replay must cover every rescanned segment: their aborted-transaction indexes
        // are rebuilt from it. The latest snapshot is at the last roll; until that segment is
        // flushed, recovery rescans it, and the previous snapshot is where to start.
        let limit = rescanned_from
            .unwrap_or(i64::MAX)
            .min(self.log_end_offset());
        let first = self.first_segment_base();
        let usable = |name: &str| {
            ProducerState::load(&self.dir.join(name))
                .filter(|(_, off)| *off <= limit && *off >= first)
        };
        let (state, from) = usable(PRODUCER_STATE)
            .or_else(|| usable(PRODUCER_STATE_PREVIOUS))
            .unwrap_or_else(|| (ProducerState::default(), first));
        self.producers = state;
        for seg in self.segments.map.values_mut() {
            seg.txn_index_mut().truncate_from(from);
            if seg.next_offset() <= from {
                continue;
            }
            let start = seg
                .find_batch(from, 0)?
                .map(|(p, _)| p)
                .unwrap_or(seg.size());
            for (pos, h) in seg.headers_from(start)? {
                if h.base_offset < from {
                    continue;
                }
                if !h.is_control() {
                    if h.is_idempotent() {
                        self.producers.record(&h, h.max_timestamp);
                    }
                    continue;
                }
                let bytes = seg.batch_bytes(pos, &h)?;
                match track_control_batch(&mut self.producers, &h, &bytes) {
                    Ok(Some(aborted)) => seg.txn_index_mut().push(aborted),
                    Ok(None) => {}
                    Err(e) => {
                        // Only a leader writes markers, and this one passed its CRC: keep
                        // serving the log rather than refuse to open it.
                        tracing::warn!(dir = %self.dir.display(), offset = h.base_offset, error = %e, "unreadable transaction marker skipped");
                    }
                }
            }
        }
        Ok(())
    }

    /// Clean close: flush, write indexes and producer state, and leave the marker that lets
    /// the next open skip recovery.
    pub fn close(&mut self) -> Result<(), LogError> {
        self.close_unsynced()?;
        index::sync_filesystem(&self.dir)?;
        self.mark_clean()?;
        index::sync_filesystem(&self.dir)?;
        Ok(())
    }

    /// The first half of a clean close: what the next open reads (indexes, producer state,
    /// log start) written without an fsync each. The caller makes them durable with the log
    /// data in one file-system sync, then calls [`Log::mark_clean`] and syncs again — two
    /// syncs for every log of the broker rather than several fsyncs per log.
    pub fn close_unsynced(&mut self) -> Result<(), LogError> {
        self.flush_rolls()?;
        let end = self.log_end_offset();
        self.active().write_indexes(Durability::Unsynced)?;
        self.producers
            .save(&self.dir.join(PRODUCER_STATE), end, Durability::Unsynced)?;
        Durability::Unsynced.write(
            &self.dir.join(LOG_START),
            self.log_start_offset.to_string().as_bytes(),
        )?;
        Ok(())
    }

    /// The second half of a clean close: the marker that lets the next open trust every
    /// segment. Only once the close's files are durable (the marker must not outlive them).
    pub fn mark_clean(&self) -> Result<(), LogError> {
        // Empty: created in place, no rename needed.
        std::fs::File::create(self.dir.join(CLEAN_SHUTDOWN))?;
        Ok(())
    }

    /// [`Log::mark_clean`] for the log files in `dir`, written by a [`Log::close_unsynced`]
    /// elsewhere and copied here whole and durable (a replica moved between log directories).
    pub fn mark_clean_dir(dir: &Path) -> Result<(), LogError> {
        std::fs::File::create(dir.join(CLEAN_SHUTDOWN))?;
        Ok(())
    }
}

/// Creates `dir` unless it exists; its parent must.
pub(crate) fn create_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        other => other,
    }
}
