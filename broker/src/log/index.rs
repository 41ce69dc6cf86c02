//! Sparse offset and time indexes of one segment.
//!
//! Invariants (checked by [`OffsetIndex::is_consistent`] when an index file is loaded):
//! - offset entries have strictly increasing relative offsets and file positions;
//! - time entries have non-decreasing timestamps and strictly increasing relative offsets;
//! - every entry points at the start of a batch inside the segment.
//!
//! Both live in memory while the segment is open and are written to `.index` (u32 relative
//! offset, u32 position, big-endian) and `.timeindex` (i64 timestamp, u32 relative offset) when
//! the segment rolls or the broker shuts down cleanly. A missing or inconsistent file is never
//! trusted: the segment is rescanned and the index rebuilt.

use std::io::Write;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetEntry {
    pub relative_offset: u32,
    pub position: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeEntry {
    pub timestamp: i64,
    pub relative_offset: u32,
}

#[derive(Debug, Default, Clone)]
pub struct OffsetIndex {
    entries: Vec<OffsetEntry>,
}

impl OffsetIndex {
    pub fn push(&mut self, e: OffsetEntry) {
        debug_assert!(self
            .entries
            .last()
            .is_none_or(|l| l.relative_offset < e.relative_offset && l.position < e.position));
        self.entries.push(e);
    }

    /// The last entry at or below `relative_offset`: where a scan for it starts.
    pub fn floor(&self, relative_offset: u32) -> Option<OffsetEntry> {
        let i = self
            .entries
            .partition_point(|e| e.relative_offset <= relative_offset);
        i.checked_sub(1).map(|i| self.entries[i])
    }

    pub fn last(&self) -> Option<OffsetEntry> {
        self.entries.last().copied()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn is_consistent(&self, segment_len: u64) -> bool {
        self.entries
            .windows(2)
            .all(|w| w[0].relative_offset < w[1].relative_offset && w[0].position < w[1].position)
            && self
                .entries
                .last()
                .is_none_or(|e| (e.position as u64) < segment_len)
    }

    pub fn write_to(&self, path: &Path, durability: Durability) -> std::io::Result<()> {
        let mut buf = Vec::with_capacity(self.entries.len() * 8);
        for e in &self.entries {
            buf.extend_from_slice(&e.relative_offset.to_be_bytes());
            buf.extend_from_slice(&e.position.to_be_bytes());
        }
        durability.write(path, &buf)
    }

    /// `None` when the file is missing or malformed: the caller rebuilds.
    pub fn read_from(path: &Path) -> Option<OffsetIndex> {
        let data = std::fs::read(path).ok()?;
        if data.len() % 8 != 0 {
            return None;
        }
        let entries = data
            .chunks_exact(8)
            .map(|c| OffsetEntry {
                relative_offset: u32::from_be_bytes([c[0], c[1], c[2], c[3]]),
                position: u32::from_be_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect();
        Some(OffsetIndex { entries })
    }
}

#[derive(Debug, Default, Clone)]
pub struct TimeIndex {
    entries: Vec<TimeEntry>,
}

impl TimeIndex {
    /// Adds an entry only when the timestamp moves forward, as Kafka's time index does.
    pub fn maybe_push(&mut self, e: TimeEntry) {
        match self.entries.last() {
            Some(l) if l.timestamp >= e.timestamp || l.relative_offset >= e.relative_offset => {}
            _ => self.entries.push(e),
        }
    }

    /// The last entry whose timestamp is below `timestamp`: every batch before its offset has
    /// only records older than `timestamp`, so a search for it may start there.
    pub fn floor_before(&self, timestamp: i64) -> Option<TimeEntry> {
        let i = self.entries.partition_point(|e| e.timestamp < timestamp);
        i.checked_sub(1).map(|i| self.entries[i])
    }

    pub fn last(&self) -> Option<TimeEntry> {
        self.entries.last().copied()
    }

    pub fn is_consistent(&self) -> bool {
        self.entries.windows(2).all(|w| {
            w[0].timestamp <= w[1].timestamp && w[0].relative_offset < w[1].relative_offset
        })
    }

    pub fn write_to(&self, path: &Path, durability: Durability) -> std::io::Result<()> {
        let mut buf = Vec::with_capacity(self.entries.len() * 12);
        for e in &self.entries {
            buf.extend_from_slice(&e.timestamp.to_be_bytes());
            buf.extend_from_slice(&e.relative_offset.to_be_bytes());
        }
        durability.write(path, &buf)
    }

    pub fn read_from(path: &Path) -> Option<TimeIndex> {
        let data = std::fs::read(path).ok()?;
        if data.len() % 12 != 0 {
            return None;
        }
        let entries = data
            .chunks_exact(12)
            .map(|c| TimeEntry {
                timestamp: i64::from_be_bytes(c[0..8].try_into().expect("chunk of 12")),
                relative_offset: u32::from_be_bytes(c[8..12].try_into().expect("chunk of 12")),
            })
            .collect();
        let idx = TimeIndex { entries };
        idx.is_consistent().then_some(idx)
    }
}

/// Writes `data` to a temporary file, fsyncs it and renames it over `path`, so a crash leaves
/// either the old file or the new one.
pub fn write_file_atomically(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let tmp = tmp_path(path);
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

/// Whether a file write is fsynced before it returns, or left for one [`sync_filesystem`]
/// after many (a clean shutdown of thousands of logs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    Synced,
    /// Written without an fsync, and not at all when the file already holds exactly these
    /// bytes: the caller's later sync covers it either way, and an idle partition's close
    /// then creates no file (each replaced file costs the file system an inode).
    Unsynced,
}

impl Durability {
    pub fn write(self, path: &Path, data: &[u8]) -> std::io::Result<()> {
        match self {
            Durability::Synced => write_file_atomically(path, data),
            Durability::Unsynced => {
                if std::fs::read(path).is_ok_and(|on_disk| on_disk == data) {
                    return Ok(());
                }
                write_file_unsynced(path, data)
            }
        }
    }
}

/// [`write_file_atomically`] without the fsync: the rename still replaces the file whole, but
/// a crash may leave it empty; for files the caller makes durable in bulk
/// ([`sync_filesystem`]) or can rebuild.
fn write_file_unsynced(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let tmp = tmp_path(path);
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path)
}

/// Where a file is written before its rename: `<name>.<ext>.tmp`, which opening a log removes.
fn tmp_path(path: &Path) -> std::path::PathBuf {
    path.with_extension(format!(
        "{}.tmp",
        path.extension().and_then(|e| e.to_str()).unwrap_or("")
    ))
}

/// Flushes every file of the file system holding `path` (syncfs(2)): one call instead of an
/// fsync per file when thousands were written together.
pub fn sync_filesystem(path: &Path) -> std::io::Result<()> {
    crate::sys::syncfs(&std::fs::File::open(path)?)
}

/// A checkpoint file: one decimal offset.
pub fn read_checkpoint(path: &Path) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

pub fn write_checkpoint(path: &Path, v: i64) -> std::io::Result<()> {
    write_file_atomically(path, v.to_string().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn index(entries: &[(u32, u32)]) -> OffsetIndex {
        let mut i = OffsetIndex::default();
        for &(r, p) in entries {
            i.push(OffsetEntry {
                relative_offset: r,
                position: p,
            });
        }
        i
    }

    #[test]
    fn floor_finds_the_entry_at_or_below_every_boundary() {
        let i = index(&[(0, 0), (10, 4096), (20, 8192)]);
        assert_eq!(i.floor(0).unwrap().position, 0);
        assert_eq!(i.floor(9).unwrap().position, 0);
        assert_eq!(i.floor(10).unwrap().position, 4096);
        assert_eq!(i.floor(19).unwrap().position, 4096);
        assert_eq!(i.floor(20).unwrap().position, 8192);
        assert_eq!(i.floor(u32::MAX).unwrap().position, 8192);
        assert!(OffsetIndex::default().floor(5).is_none());
    }

    #[test]
    fn index_files_round_trip_and_garbage_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("0.index");
        let i = index(&[(0, 0), (3, 100)]);
        i.write_to(&p, Durability::Synced).unwrap();
        let back = OffsetIndex::read_from(&p).unwrap();
        assert_eq!(back.entries, i.entries);
        std::fs::write(&p, [1, 2, 3]).unwrap();
        assert!(OffsetIndex::read_from(&p).is_none());
        assert!(OffsetIndex::read_from(&dir.path().join("missing")).is_none());
        let t = dir.path().join("0.timeindex");
        let mut ti = TimeIndex::default();
        ti.maybe_push(TimeEntry {
            timestamp: 5,
            relative_offset: 0,
        });
        ti.maybe_push(TimeEntry {
            timestamp: 5,
            relative_offset: 1,
        });
        ti.maybe_push(TimeEntry {
            timestamp: 9,
            relative_offset: 2,
        });
        ti.write_to(&t, Durability::Synced).unwrap();
        assert_eq!(TimeIndex::read_from(&t).unwrap().entries.len(), 2);
    }

    #[test]
    fn an_index_pointing_past_the_segment_is_inconsistent() {
        assert!(!index(&[(0, 0), (5, 9000)]).is_consistent(4096));
        assert!(index(&[(0, 0), (5, 4000)]).is_consistent(4096));
    }

    proptest! {
        #[test]
        fn floor_is_the_greatest_entry_not_above_the_target(
            steps in proptest::collection::vec((1u32..50, 1u32..5000), 1..100),
            target in 0u32..5000,
        ) {
            let mut i = OffsetIndex::default();
            let (mut r, mut p) = (0u32, 0u32);
            let mut all = vec![];
            for (dr, dp) in steps {
                i.push(OffsetEntry { relative_offset: r, position: p });
                all.push((r, p));
                r += dr;
                p += dp;
            }
            let expected = all.iter().rev().find(|(r, _)| *r <= target).map(|e| e.1);
            prop_assert_eq!(i.floor(target).map(|e| e.position), expected);
        }
    }
}
