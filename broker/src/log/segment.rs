//! One segment: `<base_offset:020>.log` plus its sparse `.index` and `.timeindex`, and its
//! aborted transactions' `.txnindex` ([`super::txn_index`]).
//!
//! Invariants:
//! - the file holds whole v2 batches back to back, their offsets increasing from `base_offset`
//!   to `next_offset - 1` (dense, except where compaction removed records); `size` is the byte
//!   length of those batches;
//! - only the active (last) segment of a log is appended to; a closed segment is never modified
//!   (compaction writes a new file and swaps it in, see `cleaning`);
//! - bytes handed to readers are slices of a shared read-only mapping, so a reader never copies
//!   and a reader's slice stays valid even after the segment is deleted (the mapping pins it).
//!
//! The active segment is mapped once with room for `capacity` bytes beyond the current end:
//! Linux allows mapping past EOF, and pages become readable as the file grows. Readers only ever
//! touch bytes below `size`, which are in the file.
//!
//! A segment holds no file descriptor of its own: [`handles`](super::handles) lends one, and
//! reopens the file (in append mode) after evicting it. A mapping is released when the log's
//! sweep finds it unread since the sweep before ([`Segment::release_idle_map`]).

// Memory maps of segment files (see the invariants above); the broker's other unsafe code is in `sys.rs`.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use memmap2::{Mmap, MmapOptions};

use super::batch::{self, BatchHeader, HEADER_LEN, LOG_OVERHEAD};
use super::handles::{self, FileSpan};
use super::index::{Durability, OffsetEntry, OffsetIndex, TimeEntry, TimeIndex};
use super::txn_index::TxnIndex;
use super::LogError;

pub fn log_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{base_offset:020}.log"))
}

/// The files of a segment: log, offset index, time index, aborted-transaction index.
pub fn files(dir: &Path, base_offset: i64) -> [PathBuf; 4] {
    [
        log_path(dir, base_offset),
        dir.join(format!("{base_offset:020}.index")),
        dir.join(format!("{base_offset:020}.timeindex")),
        dir.join(format!("{base_offset:020}.txnindex")),
    ]
}

/// Owner of a mapped range for `Bytes::from_owner`: keeps the mapping alive while bytes are in use.
struct MappedSlice {
    map: Arc<Mmap>,
    start: usize,
    end: usize,
}

impl AsRef<[u8]> for MappedSlice {
    fn as_ref(&self) -> &[u8] {
        &self.map[self.start..self.end]
    }
}

pub struct Segment {
    base_offset: i64,
    dir: PathBuf,
    /// The segment's entry in [`handles`].
    handle: u64,
    size: u64,
    next_offset: i64,
    index: OffsetIndex,
    time_index: TimeIndex,
    /// Aborted transactions whose markers are here: loaded with the indexes, or rebuilt by
    /// the log's producer-state replay when the segment is rescanned.
    txn_index: TxnIndex,
    bytes_since_index: u64,
    index_interval: u64,
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
    /// Wall-clock time the segment was created (for `segment.ms`).
    created_ms: i64,
    map: Option<Arc<Mmap>>,
    /// Bytes the current mapping covers (may exceed `size` for the active segment).
    mapped: u64,
    /// Read since the last [`Segment::release_idle_map`].
    read_recently: bool,
    unflushed_messages: u64,
}

impl Drop for Segment {
    fn drop(&mut self) {
        handles::forget(self.handle);
    }
}

/// What a scan found while checking a segment's batches.
pub struct ScanResult {
    pub valid_bytes: u64,
    pub truncated_bytes: u64,
}

impl Segment {
    /// Creates a new empty segment.
    pub fn create(
        dir: &Path,
        base_offset: i64,
        index_interval: u64,
        now_ms: i64,
    ) -> Result<Segment, LogError> {
        let path = log_path(dir, base_offset);
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)?;
        let handle = handles::next_id();
        handles::insert(handle, file);
        Ok(Segment {
            base_offset,
            dir: dir.to_path_buf(),
            handle,
            size: 0,
            next_offset: base_offset,
            index: OffsetIndex::default(),
            time_index: TimeIndex::default(),
            txn_index: TxnIndex::default(),
            bytes_since_index: 0,
            index_interval,
            max_timestamp: -1,
            offset_of_max_timestamp: base_offset,
            created_ms: now_ms,
            map: None,
            mapped: 0,
            read_recently: false,
            unflushed_messages: 0,
        })
    }

    /// Opens an existing segment. With `trust_index`, loads the index files and scans only the
    /// tail after the last index entry; otherwise (or when they are missing or inconsistent)
    /// rescans the whole file, validating every CRC, and truncates a torn tail.
    pub fn open(
        dir: &Path,
        base_offset: i64,
        index_interval: u64,
        trust_index: bool,
    ) -> Result<(Segment, ScanResult), LogError> {
        let path = log_path(dir, base_offset);
        let handle = handles::next_id();
        let file = handles::insert(handle, open_for_append(&path)?);
        let meta = file.metadata()?;
        let created_ms = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let mut seg = Segment {
            base_offset,
            dir: dir.to_path_buf(),
            handle,
            size: meta.len(),
            next_offset: base_offset,
            index: OffsetIndex::default(),
            time_index: TimeIndex::default(),
            txn_index: TxnIndex::default(),
            bytes_since_index: 0,
            index_interval,
            max_timestamp: -1,
            offset_of_max_timestamp: base_offset,
            created_ms,
            map: None,
            mapped: 0,
            read_recently: false,
            unflushed_messages: 0,
        };
        let loaded = if trust_index {
            match (
                OffsetIndex::read_from(&seg.index_path()),
                TimeIndex::read_from(&seg.time_index_path()),
                TxnIndex::read_from(&seg.txn_index_path()),
            ) {
                (Some(i), Some(t), Some(x)) if i.is_consistent(seg.size) => Some((i, t, x)),
                _ => None,
            }
        } else {
            None
        };
        let scan = match loaded {
            Some((index, time_index, txn_index)) => {
                seg.txn_index = txn_index;
                // Scan forward from the last indexed batch, checking CRCs on the way.
                let start = index.last().map(|e| e.position as u64).unwrap_or(0);
                // The newest time entry carries the segment's max timestamp so far; the scan of
                // the tail after the last index entry can only raise it.
                if let Some(t) = time_index.last() {
                    seg.max_timestamp = t.timestamp;
                    seg.offset_of_max_timestamp = base_offset + t.relative_offset as i64;
                }
                seg.index = index;
                seg.time_index = time_index;
                seg.scan_from(start, false)?
            }
            None => seg.scan_from(0, true)?,
        };
        if scan.truncated_bytes > 0 {
            file.set_len(scan.valid_bytes)?;
            file.sync_all()?;
            seg.size = scan.valid_bytes;
        }
        Ok((seg, scan))
    }

    /// Walks batches from `position`, validating each; rebuilds index entries when `rebuild`.
    /// Stops at the first batch that is incomplete or fails its CRC: everything after is torn.
    fn scan_from(&mut self, position: u64, rebuild: bool) -> Result<ScanResult, LogError> {
        if rebuild {
            self.index = OffsetIndex::default();
            self.time_index = TimeIndex::default();
            self.bytes_since_index = 0;
            self.max_timestamp = -1;
        }
        let map = self.map_whole_file()?;
        let data: &[u8] = map.as_ref().map(|m| &m[..]).unwrap_or(&[]);
        let mut pos = position as usize;
        let mut expected_offset: Option<i64> = None;
        while pos + HEADER_LEN <= data.len() {
            let total =
                i32::from_be_bytes([data[pos + 8], data[pos + 9], data[pos + 10], data[pos + 11]]);
            if total < (HEADER_LEN - LOG_OVERHEAD) as i32 {
                break;
            }
            let end = pos + LOG_OVERHEAD + total as usize;
            if end > data.len() {
                break;
            }
            let header = match batch::validate(&data[pos..end]) {
                Ok(h) => h,
                Err(_) => break,
            };
            // Offsets increase strictly; gaps are left by compaction.
            if header.base_offset < self.base_offset
                || expected_offset.is_some_and(|e| header.base_offset < e)
            {
                break;
            }
            expected_offset = Some(header.next_offset());
            if rebuild {
                self.index_batch(&header, pos as u64);
            } else {
                self.note_timestamp(&header);
            }
            self.next_offset = header.next_offset();
            pos = end;
        }
        let valid = pos as u64;
        Ok(ScanResult {
            valid_bytes: valid,
            truncated_bytes: data.len() as u64 - valid,
        })
    }

    /// The segment's file, from the cache of open files (reopened if it was evicted).
    fn file(&self) -> Result<Arc<File>, LogError> {
        let path = log_path(&self.dir, self.base_offset);
        Ok(handles::get(self.handle, || open_for_append(&path))?)
    }

    fn map_whole_file(&mut self) -> Result<Option<Arc<Mmap>>, LogError> {
        let file = self.file()?;
        let len = file.metadata()?.len();
        if len == 0 {
            return Ok(None);
        }
        // SAFETY: segment files are only appended to by this process, never truncated below
        // a range a reader holds (see module invariants).
        let map = unsafe { MmapOptions::new().len(len as usize).map(&*file)? };
        Ok(Some(Arc::new(map)))
    }

    fn note_timestamp(&mut self, header: &BatchHeader) {
        if header.max_timestamp > self.max_timestamp {
            self.max_timestamp = header.max_timestamp;
            self.offset_of_max_timestamp = header.last_offset();
        }
    }

    /// Records index entries for a batch written at `position`.
    fn index_batch(&mut self, header: &BatchHeader, position: u64) {
        self.note_timestamp(header);
        if self.index.is_empty() || self.bytes_since_index >= self.index_interval {
            let rel = (header.base_offset - self.base_offset) as u32;
            self.index.push(OffsetEntry {
                relative_offset: rel,
                position: position as u32,
            });
            self.time_index.maybe_push(TimeEntry {
                timestamp: self.max_timestamp,
                relative_offset: (self.offset_of_max_timestamp - self.base_offset) as u32,
            });
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += header.total_len() as u64;
    }

    /// Appends one batch whose first 16 bytes are replaced by `prefix` (offset, length, epoch).
    pub fn append(
        &mut self,
        header: &BatchHeader,
        prefix: &[u8; 16],
        body: &[u8],
    ) -> Result<(), LogError> {
        let position = self.size;
        let bufs = [
            std::io::IoSlice::new(prefix),
            std::io::IoSlice::new(&body[16..]),
        ];
        let file = self.file()?;
        if let Err(e) = write_all_vectored(&file, &bufs) {
            // A write cut short (a full disk) leaves part of the batch past `size`, and the
            // next batch would land after those bytes. Take them back, and the write position
            // with them (a new segment's file is not opened for appending): the segment stays
            // exactly its batches, and once space returns the next append goes on from here.
            file.set_len(position)?;
            std::io::Seek::seek(&mut &*file, std::io::SeekFrom::Start(position))?;
            return Err(e.into());
        }
        drop(file);
        self.size += body.len() as u64;
        self.index_batch(header, position);
        self.next_offset = header.next_offset();
        self.unflushed_messages += header.record_count as u64;
        Ok(())
    }

    /// Makes the segment's mapping cover at least `size` bytes. The active segment maps
    /// `capacity` ahead so that appends rarely need a new mapping.
    fn ensure_mapped(&mut self, capacity: u64) -> Result<(), LogError> {
        self.read_recently = true;
        if self.map.is_some() && self.mapped >= self.size {
            return Ok(());
        }
        let len = capacity.max(self.size).max(1);
        // SAFETY: see `map_whole_file`; bytes past EOF are never accessed.
        let map = unsafe { MmapOptions::new().len(len as usize).map(&*self.file()?)? };
        self.map = Some(Arc::new(map));
        self.mapped = len;
        Ok(())
    }

    /// Position and header of the batch containing `offset` (or the first batch after it).
    /// `capacity` as for [`Segment::read_from`], which usually follows: mapping the active
    /// segment ahead here spares that read (and the next ones) a new mapping.
    pub fn find_batch(
        &mut self,
        offset: i64,
        capacity: u64,
    ) -> Result<Option<(u64, BatchHeader)>, LogError> {
        if offset >= self.next_offset || self.size == 0 {
            return Ok(None);
        }
        self.ensure_mapped(capacity)?;
        let rel = (offset.max(self.base_offset) - self.base_offset) as u32;
        let mut pos = self
            .index
            .floor(rel)
            .map(|e| e.position as u64)
            .unwrap_or(0);
        let map = self.map.as_ref().expect("mapped above");
        while pos < self.size {
            let header = BatchHeader::parse(&map[pos as usize..self.size as usize])
                .map_err(|e| LogError::Corrupt(format!("segment {}: {e}", self.base_offset)))?;
            if header.last_offset() >= offset {
                return Ok(Some((pos, header)));
            }
            pos += header.total_len() as u64;
        }
        Ok(None)
    }

    /// Whole batches starting at `position`, at most `max_bytes` (but always the first batch),
    /// none at or above `limit_offset`. Zero-copy: the result is a slice of the mapping.
    pub fn read_from(
        &mut self,
        position: u64,
        max_bytes: usize,
        limit_offset: i64,
        capacity: u64,
    ) -> Result<Bytes, LogError> {
        self.ensure_mapped(capacity)?;
        let map = self.map.as_ref().expect("mapped above").clone();
        let mut end = position;
        while end < self.size {
            let header = BatchHeader::parse(&map[end as usize..self.size as usize])
                .map_err(|e| LogError::Corrupt(format!("segment {}: {e}", self.base_offset)))?;
            if header.last_offset() >= limit_offset {
                break;
            }
            let next = end + header.total_len() as u64;
            if end > position && (next - position) as usize > max_bytes {
                break;
            }
            end = next;
        }
        Ok(Bytes::from_owner(MappedSlice {
            map,
            start: position as usize,
            end: end as usize,
        }))
    }

    /// Where `len` bytes from `position` lie in the segment's file, for a reader that sends
    /// them from the page cache; `None` when no descriptor is lent for them (see
    /// [`handles::span`]: the mapping still serves the bytes).
    pub fn span(&self, position: u64, len: usize) -> Option<FileSpan> {
        let path = log_path(&self.dir, self.base_offset);
        handles::span(self.handle, || open_for_append(&path), position, len)
    }

    /// Headers of every batch from `position` on (for producer-state rebuild and time lookups).
    pub fn headers_from(&mut self, position: u64) -> Result<Vec<(u64, BatchHeader)>, LogError> {
        self.ensure_mapped(0)?;
        let map = self.map.as_ref().expect("mapped above");
        let mut out = Vec::new();
        let mut pos = position;
        while pos < self.size {
            let header = BatchHeader::parse(&map[pos as usize..self.size as usize])
                .map_err(|e| LogError::Corrupt(format!("segment {}: {e}", self.base_offset)))?;
            out.push((pos, header));
            pos += header.total_len() as u64;
        }
        Ok(out)
    }

    /// The segment's whole contents (for the cleaner of a closed segment), zero-copy.
    pub fn whole(&mut self) -> Result<Bytes, LogError> {
        self.ensure_mapped(0)?;
        let map = self.map.as_ref().expect("mapped above").clone();
        Ok(Bytes::from_owner(MappedSlice {
            map,
            start: 0,
            end: self.size as usize,
        }))
    }

    /// Bytes of the batch at `position` (for decoding records in a timestamp lookup).
    pub fn batch_bytes(&mut self, position: u64, header: &BatchHeader) -> Result<Bytes, LogError> {
        self.read_from(position, header.total_len(), i64::MAX, 0)
    }

    /// Position from which to scan for the first record with timestamp ≥ `ts`.
    pub fn time_lookup_start(&mut self, ts: i64) -> Result<u64, LogError> {
        Ok(match self.time_index.floor_before(ts) {
            Some(e) => self
                .index
                .floor(e.relative_offset)
                .map(|e| e.position as u64)
                .unwrap_or(0),
            None => 0,
        })
    }

    pub fn flush(&mut self) -> Result<(), LogError> {
        if self.unflushed_messages > 0 {
            // An fsync through any descriptor of the file syncs the file.
            self.file()?.sync_data()?;
            self.unflushed_messages = 0;
        }
        Ok(())
    }

    /// Persists the indexes (at roll and at clean shutdown).
    pub fn write_indexes(&self, durability: Durability) -> Result<(), LogError> {
        self.index.write_to(&self.index_path(), durability)?;
        self.time_index
            .write_to(&self.time_index_path(), durability)?;
        self.txn_index
            .write_to(&self.txn_index_path(), durability)?;
        Ok(())
    }

    /// The aborted transactions whose markers are in this segment.
    pub fn txn_index(&self) -> &TxnIndex {
        &self.txn_index
    }

    pub fn txn_index_mut(&mut self) -> &mut TxnIndex {
        &mut self.txn_index
    }

    /// Closes a segment for appends: flush, write indexes, shrink the mapping to the file.
    pub fn seal(&mut self) -> Result<(), LogError> {
        self.seal_unflushed()?.sync_all()?;
        Ok(())
    }

    /// [`seal`](Self::seal) without the fsync: returns a handle for the caller to fsync later,
    /// outside whatever lock it holds (a full segment's fsync can take hundreds of ms).
    pub fn seal_unflushed(&mut self) -> Result<std::fs::File, LogError> {
        let handle = self.file()?.try_clone()?;
        self.unflushed_messages = 0;
        self.write_indexes(Durability::Synced)?;
        self.map = None;
        self.mapped = 0;
        Ok(handle)
    }

    /// Drops the mapping unless it was read since the last call: a segment nobody reads holds
    /// no address space (readers' slices keep theirs). The next read maps it again.
    pub fn release_idle_map(&mut self) {
        if !std::mem::take(&mut self.read_recently) {
            self.map = None;
            self.mapped = 0;
        }
    }

    pub fn is_mapped(&self) -> bool {
        self.map.is_some()
    }

    /// The segment cut before the first batch ending at or after `offset` (a follower
    /// truncating to its leader). The kept prefix is copied to a new file renamed over the old
    /// one rather than truncated in place: readers holding slices of the old mapping keep
    /// valid pages (shrinking a mapped file under them would fault). Rare, and bounded by the
    /// segment size.
    pub fn truncated(mut self, offset: i64) -> Result<Segment, LogError> {
        let cut = self
            .headers_from(0)?
            .into_iter()
            .find(|(_, h)| h.last_offset() >= offset)
            .map_or(self.size, |(pos, _)| pos);
        if cut == self.size {
            return Ok(self);
        }
        let path = log_path(&self.dir, self.base_offset);
        let tmp = path.with_extension("log.truncating.tmp");
        {
            use std::io::{Read as _, Seek as _};
            let mut src = File::open(&path)?;
            src.seek(std::io::SeekFrom::Start(0))?;
            let mut dst = File::create(&tmp)?;
            std::io::copy(&mut std::io::Read::by_ref(&mut src).take(cut), &mut dst)?;
            dst.sync_all()?;
        }
        let (dir, base, interval) = (self.dir.clone(), self.base_offset, self.index_interval);
        for p in &files(&dir, base)[1..] {
            match std::fs::remove_file(p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        std::fs::rename(&tmp, &path)?;
        drop(self);
        let (seg, _) = Segment::open(&dir, base, interval, false)?;
        Ok(seg)
    }

    /// Removes the segment's files. Readers holding slices keep their mapping.
    pub fn delete(self) -> Result<(), LogError> {
        for p in files(&self.dir, self.base_offset) {
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    fn index_path(&self) -> PathBuf {
        files(&self.dir, self.base_offset)[1].clone()
    }
    fn time_index_path(&self) -> PathBuf {
        files(&self.dir, self.base_offset)[2].clone()
    }
    fn txn_index_path(&self) -> PathBuf {
        files(&self.dir, self.base_offset)[3].clone()
    }
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }
    pub fn size(&self) -> u64 {
        self.size
    }
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }
    pub fn offset_of_max_timestamp(&self) -> i64 {
        self.offset_of_max_timestamp
    }
    pub fn created_ms(&self) -> i64 {
        self.created_ms
    }
    pub fn unflushed_messages(&self) -> u64 {
        self.unflushed_messages
    }
}

/// A segment file opened for reading and appending: every write lands at its end.
fn open_for_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().read(true).append(true).open(path)
}

fn write_all_vectored(mut file: &File, bufs: &[std::io::IoSlice<'_>]) -> std::io::Result<()> {
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let written = file.write_vectored(bufs)?;
    if written == total {
        return Ok(());
    }
    // Short write: finish the remainder byte-wise (rare: regular files usually take it all).
    let mut skip = written;
    for b in bufs {
        if skip >= b.len() {
            skip -= b.len();
            continue;
        }
        file.write_all(&b[skip..])?;
        skip = 0;
    }
    Ok(())
}
