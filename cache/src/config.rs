//! Budgets and sizes of the cache, and the disk-engine geometry derived from them.

use std::path::PathBuf;

use crate::block::MAX_BLOCK_SIZE;
use crate::{CacheError, Result};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Sizes and budgets of a [`crate::BlockCache`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    /// Bytes per block: the unit of a GET and of a cache entry.
    pub block_size: u64,
    /// RAM budget of the "recent" cache (reads near the tail, and whole small objects).
    pub memory_bytes: usize,
    /// Disk budget of the "recent" cache; 0 keeps it in RAM only. A disk tier also keeps two
    /// write buffers of up to 16 MiB each (more for blocks above 15 MiB) outside the RAM budget.
    pub disk_bytes: u64,
    /// RAM budget of the "replay" cache (catch-up reads of old history).
    pub replay_memory_bytes: usize,
    /// Disk budget of the "replay" cache; 0 keeps it in RAM only.
    pub replay_disk_bytes: u64,
    /// The disk tiers live in `dir/recent` and `dir/replay`.
    pub dir: PathBuf,
    /// Blocks fetched ahead by [`crate::BlockCache::prefetch`].
    pub readahead_blocks: usize,
    /// GETs in flight at once, over both caches, reads and prefetches together.
    pub max_concurrent_gets: usize,
}

impl CacheConfig {
    /// The defaults, with the disk tiers under `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> CacheConfig {
        CacheConfig {
            block_size: MIB,
            memory_bytes: 256 << 20,
            disk_bytes: 4 * GIB,
            replay_memory_bytes: 64 << 20,
            replay_disk_bytes: 4 * GIB,
            dir: dir.into(),
            readahead_blocks: 8,
            max_concurrent_gets: 16,
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        let bad = |why: String| Err(CacheError::Config(why));
        if self.block_size == 0 || self.block_size > MAX_BLOCK_SIZE {
            return bad(format!(
                "block size {} is out of range (1 byte to {MAX_BLOCK_SIZE})",
                self.block_size
            ));
        }
        if self.max_concurrent_gets == 0 {
            return bad("max_concurrent_gets must be at least 1".into());
        }
        if (self.disk_bytes > 0 || self.replay_disk_bytes > 0) && self.dir.as_os_str().is_empty() {
            return bad("a disk budget needs a directory".into());
        }
        for disk in [self.disk_bytes, self.replay_disk_bytes] {
            self.disk_geometry(disk)?;
        }
        Ok(())
    }

    /// The block size of foyer's disk engine (its unit of allocation and reclamation, not ours)
    /// for a disk budget of `disk_bytes`, or `None` for no disk tier.
    ///
    /// An engine block must hold one of our blocks with its header, key and foyer's per-block
    /// index (4 KiB); 64 KiB of slack covers those. Within that, 16 MiB (foyer's default) for
    /// large budgets, smaller for small ones so that the budget still spans enough engine blocks
    /// for foyer to reclaim one while others are written.
    pub(crate) fn disk_geometry(&self, disk_bytes: u64) -> Result<Option<DiskGeometry>> {
        if disk_bytes == 0 {
            return Ok(None);
        }
        const MIN_ENGINE_BLOCKS: u64 = 8;
        let page = 4 * KIB;
        let smallest = (self.block_size + 64 * KIB).next_multiple_of(page);
        let engine_block = (disk_bytes / 32 / page * page).clamp(smallest, smallest.max(16 * MIB));
        if disk_bytes / engine_block < MIN_ENGINE_BLOCKS {
            return Err(CacheError::Config(format!(
                "disk budget of {disk_bytes} bytes is too small for blocks of {} bytes: at least {} \
                 bytes, or 0 for RAM only",
                self.block_size,
                MIN_ENGINE_BLOCKS * engine_block
            )));
        }
        Ok(Some(DiskGeometry {
            capacity: usize::try_from(disk_bytes).map_err(|_| {
                CacheError::Config(format!("disk budget {disk_bytes} is too large"))
            })?,
            engine_block: engine_block as usize,
        }))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DiskGeometry {
    pub capacity: usize,
    /// Also the size of the flusher's write buffer: it must hold one whole entry too.
    pub engine_block: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_blocks_hold_a_block_and_leave_room_to_reclaim() {
        let cfg = CacheConfig::new("/tmp/c");
        cfg.validate().unwrap();
        let g = cfg.disk_geometry(4 * GIB).unwrap().unwrap();
        assert_eq!(g.engine_block as u64, 16 * MIB);
        let g = cfg.disk_geometry(64 * MIB).unwrap().unwrap();
        assert!(g.engine_block as u64 >= MIB + 4 * KIB);
        assert!(64 * MIB / g.engine_block as u64 >= 8);
        assert_eq!(cfg.disk_geometry(0).unwrap(), None);
        let err = cfg.disk_geometry(4 * MIB).unwrap_err().to_string();
        assert!(err.contains("too small"), "{err}");
        // A block bigger than foyer's default engine block still fits.
        let big = CacheConfig {
            block_size: 32 * MIB,
            ..cfg.clone()
        };
        let g = big.disk_geometry(4 * GIB).unwrap().unwrap();
        assert!(g.engine_block as u64 > 32 * MIB);
    }

    #[test]
    fn nonsense_is_refused() {
        for cfg in [
            CacheConfig {
                block_size: 0,
                ..CacheConfig::new("/tmp/c")
            },
            CacheConfig {
                max_concurrent_gets: 0,
                ..CacheConfig::new("/tmp/c")
            },
            CacheConfig::new(""),
        ] {
            assert!(
                matches!(cfg.validate(), Err(CacheError::Config(_))),
                "{cfg:?}"
            );
        }
        let ram_only = CacheConfig {
            disk_bytes: 0,
            replay_disk_bytes: 0,
            ..CacheConfig::new("")
        };
        ram_only.validate().unwrap();
    }
}

/// Which budget a read is charged to: catch-up/replay reads of old history must not evict what
/// readers near the tail use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReadClass {
    Recent,
    Replay,
}

impl ReadClass {
    pub(crate) fn label(self) -> &'static str {
        match self {
            ReadClass::Recent => "recent",
            ReadClass::Replay => "replay",
        }
    }
}
