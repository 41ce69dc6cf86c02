//! The leader-epoch cache: for each leader epoch of a partition, the first offset written in
//! it. It answers OffsetForLeaderEpoch ("where does epoch E end?"), which is how a consumer
//! (and, with replication, a follower) finds out whether the log it read was truncated
//! after a leader change, and it gives ListOffsets the epoch of an offset.
//!
//! File `leader-epoch-checkpoint` in the partition directory, Kafka's text format:
//! a version line (`0`), an entry count, then `epoch start_offset` per line.
//!
//! Invariants:
//! - Entries are strictly increasing in both epoch and start offset.
//! - An entry is written (rename, without an fsync of its own) before the first batch of its
//!   epoch is appended; the file is fsynced before the recovery point moves past a batch
//!   (`Log::rolls_flushed`) and by a clean close, and an unclean open adds the epochs of the
//!   batches it rescans above the recovery point. So after a crash the cache never lacks an
//!   epoch the log holds, and an entry past the log end (the append never happened) is
//!   dropped when the log opens. Not fsyncing each entry is what lets ten thousand
//!   partitions take leadership (each starting an epoch) without ten thousand fsyncs, as
//!   Kafka does since KAFKA-15046.
//! - Truncating the log truncates the cache to match.
//! - Entries are never dropped from the start: the whole log, remote tier included, keeps
//!   answering (one entry per leader change; the list stays small).

use std::path::Path;

use super::index::Durability;
use super::LogError;

/// File name of the checkpoint in a partition directory.
pub const FILE: &str = "leader-epoch-checkpoint";
const VERSION: &str = "0";

/// Kafka's "no epoch" / "no offset" answers.
pub const UNDEFINED_EPOCH: i32 = -1;
pub const UNDEFINED_OFFSET: i64 = -1;

/// An epoch and the first offset written in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LeaderEpochCache {
    entries: Vec<EpochEntry>,
}

impl LeaderEpochCache {
    /// Reads the checkpoint; `Ok(None)` when there is none (a log from before epochs were
    /// kept, or a damaged file: the caller rebuilds from the batches).
    pub fn load(dir: &Path) -> Result<Option<LeaderEpochCache>, LogError> {
        let text = match std::fs::read_to_string(dir.join(FILE)) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        Ok(Self::parse(&text))
    }

    fn parse(text: &str) -> Option<LeaderEpochCache> {
        let mut lines = text.lines();
        if lines.next()?.trim() != VERSION {
            return None;
        }
        let count: usize = lines.next()?.trim().parse().ok()?;
        let mut cache = LeaderEpochCache::default();
        for line in lines.by_ref().take(count) {
            let (e, o) = line.trim().split_once(' ')?;
            let entry = EpochEntry {
                epoch: e.parse().ok()?,
                start_offset: o.parse().ok()?,
            };
            if !cache.assign(entry.epoch, entry.start_offset) {
                return None;
            }
        }
        (cache.entries.len() == count).then_some(cache)
    }

    /// Writes the checkpoint (fsync, then rename).
    pub fn save(&self, dir: &Path, durability: Durability) -> Result<(), LogError> {
        let mut text = format!("{VERSION}\n{}\n", self.entries.len());
        for e in &self.entries {
            text.push_str(&format!("{} {}\n", e.epoch, e.start_offset));
        }
        durability.write(&dir.join(FILE), text.as_bytes())?;
        Ok(())
    }

    /// Records that `epoch` starts at `start_offset`, if it is newer than the latest epoch
    /// and starts after it. Returns whether the cache changed.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0 {
            return false;
        }
        match self.entries.last() {
            Some(last) if epoch <= last.epoch || start_offset < last.start_offset => false,
            Some(last) if start_offset == last.start_offset => {
                // The previous epoch wrote nothing: the newer one replaces it.
                self.entries.pop();
                self.entries.push(EpochEntry {
                    epoch,
                    start_offset,
                });
                true
            }
            _ => {
                self.entries.push(EpochEntry {
                    epoch,
                    start_offset,
                });
                true
            }
        }
    }

    /// The newest epoch, if any.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.epoch)
    }

    /// Kafka's `endOffsetFor`: the largest epoch ≤ `requested` and the offset where it ends
    /// (the start of the next epoch, or `log_end` for the latest). `(-1, -1)` when `requested`
    /// is undefined or newer than every epoch here.
    pub fn end_offset_for(&self, requested: i32, log_end: i64) -> (i32, i64) {
        if requested == UNDEFINED_EPOCH {
            return (UNDEFINED_EPOCH, UNDEFINED_OFFSET);
        }
        if self.latest_epoch() == Some(requested) {
            return (requested, log_end);
        }
        let Some(higher) = self.entries.iter().find(|e| e.epoch > requested) else {
            return (UNDEFINED_EPOCH, UNDEFINED_OFFSET);
        };
        match self.entries.iter().rev().find(|e| e.epoch <= requested) {
            Some(floor) => (floor.epoch, higher.start_offset),
            None => (requested, higher.start_offset),
        }
    }

    /// The epoch of the batch holding `offset`: the last entry starting at or below it.
    pub fn epoch_for(&self, offset: i64) -> Option<i32> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.start_offset <= offset)
            .map(|e| e.epoch)
    }

    /// Drops the entries of epochs that start at or after `end` (the log was cut there).
    /// Returns whether the cache changed.
    pub fn truncate_from_end(&mut self, end: i64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| e.start_offset < end);
        self.entries.len() != before
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(entries: &[(i32, i64)]) -> LeaderEpochCache {
        let mut c = LeaderEpochCache::default();
        for &(e, o) in entries {
            assert!(c.assign(e, o));
        }
        c
    }

    #[test]
    fn end_offsets_follow_kafka() {
        let c = cache(&[(1, 0), (3, 100), (6, 250)]);
        assert_eq!(
            c.end_offset_for(6, 300),
            (6, 300),
            "latest ends at the log end"
        );
        assert_eq!(c.end_offset_for(3, 300), (3, 250));
        assert_eq!(
            c.end_offset_for(4, 300),
            (3, 250),
            "a gap answers the epoch below it"
        );
        assert_eq!(c.end_offset_for(1, 300), (1, 100));
        assert_eq!(c.end_offset_for(0, 300), (0, 0), "older than every epoch");
        assert_eq!(c.end_offset_for(7, 300), (-1, -1), "newer than every epoch");
        assert_eq!(c.end_offset_for(-1, 300), (-1, -1));
        assert_eq!(c.epoch_for(99), Some(1));
        assert_eq!(c.epoch_for(100), Some(3));
        assert_eq!(c.epoch_for(1000), Some(6));
        assert_eq!(LeaderEpochCache::default().end_offset_for(2, 5), (-1, -1));
    }

    #[test]
    fn only_newer_epochs_are_assigned_and_an_empty_epoch_is_replaced() {
        let mut c = cache(&[(2, 10)]);
        assert!(!c.assign(2, 20), "same epoch");
        assert!(!c.assign(1, 30), "older epoch");
        assert!(!c.assign(3, 5), "starts before the latest");
        assert!(c.assign(4, 10), "epoch 2 wrote nothing");
        assert_eq!(
            c.entries(),
            &[EpochEntry {
                epoch: 4,
                start_offset: 10
            }]
        );
    }

    #[test]
    fn truncation_drops_epochs_that_start_past_the_new_end() {
        let mut c = cache(&[(1, 0), (2, 50), (3, 80)]);
        assert!(c.truncate_from_end(60));
        assert_eq!(c.latest_epoch(), Some(2));
        assert!(!c.truncate_from_end(60));
        assert_eq!(c.end_offset_for(2, 60), (2, 60));
    }

    #[test]
    fn the_checkpoint_round_trips_and_a_damaged_one_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(LeaderEpochCache::load(dir.path()).unwrap(), None);
        let c = cache(&[(0, 0), (5, 1234)]);
        c.save(dir.path(), Durability::Synced).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join(FILE)).unwrap(),
            "0\n2\n0 0\n5 1234\n"
        );
        assert_eq!(LeaderEpochCache::load(dir.path()).unwrap(), Some(c));
        for bad in ["1\n0\n", "0\n2\n0 0\n", "0\n2\n3 10\n2 20\n", "0\nx\n", ""] {
            assert_eq!(LeaderEpochCache::parse(bad), None, "{bad:?}");
        }
    }
}
