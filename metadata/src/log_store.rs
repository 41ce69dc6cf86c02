//! The raft log, vote and committed pointer, persisted in the metadata directory.
//!
//! Files (all in the directory given to [`LogStore::open`]):
//! - `raft.log`: an 8-byte magic header `STRLOG01`, then one record per log entry, in index
//!   order: `len: u32 LE | crc32c(payload): u32 LE | payload`, the payload being the entry as
//!   JSON.
//! - `vote.json`, `committed.json`: the last saved vote and committed log id.
//! - `purged.json`: the last purged log id; entries up to it are gone (covered by a snapshot).
//!
//! The small JSON files are replaced atomically (temp file, fsync, rename, directory fsync).
//!
//! Invariants:
//! - The log is contiguous: it holds exactly the entries `purged + 1 ..= last` (`first ..= last`
//!   when nothing was purged), in index order; no operation leaves a hole, and the file's
//!   records are in the same order (so truncating and purging are cuts of the file).
//! - An append is fsynced before raft is told it is flushed (the `LogFlushed` callback).
//! - Truncation cuts the file at the first removed record and fsyncs before returning.
//! - Purging writes `purged.json` first, then rewrites `raft.log` without the purged prefix; a
//!   crash in between leaves purged records in the file, which the next open skips and drops.
//! - A torn tail (an incomplete record or one whose CRC does not match — what a crash during
//!   an append leaves) is cut off at open. A record whose CRC matches but which does not decode
//!   is corruption, not a torn write: open fails with [`MetadataError::Corrupt`].
//! - Readers see entries in memory; the file is only read at open. All file I/O runs on
//!   tokio's blocking pool, one operation at a time.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader, StorageIOError};

use crate::error::MetadataError;
use crate::fs_util;
use crate::types::{Entry, LogId, StorageError, TypeConfig, Vote};

/// Name of the log file.
pub(crate) const LOG_FILE: &str = "raft.log";
const VOTE_FILE: &str = "vote.json";
const COMMITTED_FILE: &str = "committed.json";
const PURGED_FILE: &str = "purged.json";

/// Header of `raft.log`; the trailing digits are the format version.
const MAGIC: &[u8; 8] = b"STRLOG01";
/// `len: u32` + `crc: u32` before each payload.
const RECORD_HEADER_LEN: u64 = 8;
/// A length field above this is treated as damage, not as a real record.
const MAX_RECORD_LEN: u64 = 64 << 20;

/// The on-disk raft log storage of the metadata quorum.
pub struct LogStore {
    shared: Arc<Shared>,
}

/// A cheap, cloneable reader of the log (used by replication and by the state machine worker).
#[derive(Clone)]
pub struct LogReader {
    shared: Arc<Shared>,
}

struct Shared {
    /// What readers see. Updated only after the matching disk operation succeeded.
    mem: RwLock<Mem>,
    /// The files. Locked only on the blocking pool, for the whole of one operation.
    disk: Mutex<Disk>,
}

#[derive(Default)]
struct Mem {
    entries: BTreeMap<u64, Entry>,
    purged: Option<LogId>,
    vote: Option<Vote>,
    committed: Option<LogId>,
}

struct Disk {
    dir: PathBuf,
    file: File,
    /// Byte offset of each present entry's record in `file`.
    positions: BTreeMap<u64, u64>,
    /// Length of the valid part of `file`.
    end: u64,
}

/// What [`LogStore::open`] found and repaired; exposed for logging and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Entries loaded.
    pub entries: usize,
    /// Bytes of torn tail cut off the end of the file.
    pub truncated_bytes: u64,
    /// Already-purged records dropped from the head of the file (an interrupted purge).
    pub dropped_purged: usize,
}

impl LogStore {
    /// A reader of this log's positions and entries.
    pub fn reader(&self) -> LogReader {
        LogReader {
            shared: self.shared.clone(),
        }
    }

    /// Opens (creating if missing) the log in `dir`, repairing a torn tail. Blocking.
    pub fn open(dir: &Path) -> Result<(LogStore, RecoveryReport), MetadataError> {
        fs_util::create_dir(dir)?;
        fs_util::remove_tmp_files(dir)?;
        let vote: Option<Vote> = fs_util::read_json(&dir.join(VOTE_FILE))?;
        let committed: Option<LogId> =
            fs_util::read_json::<Option<LogId>>(&dir.join(COMMITTED_FILE))?.flatten();
        let purged: Option<LogId> = fs_util::read_json(&dir.join(PURGED_FILE))?;

        let path = dir.join(LOG_FILE);
        let existed = path.exists();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| MetadataError::io(format!("opening {}", path.display()), e))?;
        if !existed {
            fs_util::sync_dir(dir)
                .map_err(|e| MetadataError::io(format!("syncing {}", dir.display()), e))?;
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| MetadataError::io(format!("reading {}", path.display()), e))?;

        let mut report = RecoveryReport::default();
        let scan = scan_records(&bytes, &path)?;
        if scan.header_missing {
            // A new file, or one whose header write was torn: start it afresh.
            write_header(&mut file)
                .map_err(|e| MetadataError::io(format!("writing {}", path.display()), e))?;
        } else if scan.valid_len < bytes.len() as u64 {
            report.truncated_bytes = bytes.len() as u64 - scan.valid_len;
            tracing::warn!(
                path = %path.display(),
                valid_len = scan.valid_len,
                truncated_bytes = report.truncated_bytes,
                "cutting torn tail off the metadata raft log"
            );
            file.set_len(scan.valid_len)
                .and_then(|()| file.sync_all())
                .map_err(|e| MetadataError::io(format!("truncating {}", path.display()), e))?;
        }
        let end = scan.valid_len.max(MAGIC.len() as u64);

        let mut entries = BTreeMap::new();
        let mut positions = BTreeMap::new();
        let mut next_index = purged.map(|p| p.index + 1);
        for (entry, pos) in scan.records {
            let index = entry.log_id.index;
            if purged.is_some_and(|p| index <= p.index) {
                report.dropped_purged += 1;
                continue;
            }
            if next_index.is_some_and(|next| index != next) {
                return Err(MetadataError::Corrupt(format!(
                    "{}: expected log index {next_index:?} at byte {pos}, found {index}",
                    path.display()
                )));
            }
            next_index = Some(index + 1);
            positions.insert(index, pos);
            entries.insert(index, entry);
        }
        report.entries = entries.len();

        let mut disk = Disk {
            dir: dir.to_path_buf(),
            file,
            positions,
            end,
        };
        if report.dropped_purged > 0 {
            if let Some(purged) = purged {
                disk.drop_prefix(purged.index)
                    .map_err(|e| MetadataError::io(format!("compacting {}", path.display()), e))?;
            }
        }

        let store = LogStore {
            shared: Arc::new(Shared {
                mem: RwLock::new(Mem {
                    entries,
                    purged,
                    vote,
                    committed,
                }),
                disk: Mutex::new(disk),
            }),
        };
        Ok((store, report))
    }
}

/// Result of scanning the bytes of `raft.log`.
struct Scan {
    /// The file is shorter than the header (new, or its creation was torn).
    header_missing: bool,
    /// Length of the prefix made of the header and whole, checksummed records.
    valid_len: u64,
    /// Decoded entries with the byte offset of their record.
    records: Vec<(Entry, u64)>,
}

fn scan_records(bytes: &[u8], path: &Path) -> Result<Scan, MetadataError> {
    let header_len = MAGIC.len();
    if bytes.len() < header_len {
        if MAGIC.starts_with(bytes) {
            return Ok(Scan {
                header_missing: true,
                valid_len: 0,
                records: Vec::new(),
            });
        }
        return Err(MetadataError::Corrupt(format!(
            "{}: not a Strata raft log (bad header)",
            path.display()
        )));
    }
    if &bytes[..header_len] != MAGIC {
        return Err(MetadataError::Corrupt(format!(
            "{}: not a Strata raft log (bad header)",
            path.display()
        )));
    }

    let mut records = Vec::new();
    let mut pos = header_len;
    while let Some(rest) = bytes.get(pos..).filter(|r| !r.is_empty()) {
        let Some((len, crc)) = read_record_header(rest) else {
            break; // incomplete header: torn
        };
        let len = len as u64;
        if len > MAX_RECORD_LEN || len > (rest.len() as u64 - RECORD_HEADER_LEN) {
            break; // implausible length or incomplete payload: torn
        }
        let start = RECORD_HEADER_LEN as usize;
        let payload = &rest[start..start + len as usize];
        if crc32c::crc32c(payload) != crc {
            break; // torn or damaged: cut here
        }
        let entry: Entry = serde_json::from_slice(payload).map_err(|e| {
            MetadataError::Corrupt(format!(
                "{}: record at byte {pos} has a valid checksum but does not decode: {e}",
                path.display()
            ))
        })?;
        records.push((entry, pos as u64));
        pos += start + len as usize;
    }
    Ok(Scan {
        header_missing: false,
        valid_len: pos as u64,
        records,
    })
}

fn read_record_header(bytes: &[u8]) -> Option<(u32, u32)> {
    let len = u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?);
    let crc = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
    Some((len, crc))
}

fn encode_record(payload: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|len| u64::from(*len) <= MAX_RECORD_LEN)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("log entry of {} bytes is too large", payload.len()),
            )
        })?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    out.extend_from_slice(payload);
    Ok(())
}

fn write_header(file: &mut File) -> io::Result<()> {
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    file.write_all(MAGIC)?;
    file.sync_all()
}

impl Disk {
    /// Appends encoded entries `(index, json)` and fsyncs them.
    fn append(&mut self, records: &[(u64, Vec<u8>)]) -> io::Result<()> {
        let mut buf = Vec::new();
        let mut new_positions = Vec::with_capacity(records.len());
        for (index, payload) in records {
            new_positions.push((*index, self.end + buf.len() as u64));
            encode_record(payload, &mut buf)?;
        }
        let written = self
            .file
            .seek(SeekFrom::Start(self.end))
            .and_then(|_| self.file.write_all(&buf))
            .and_then(|()| self.file.sync_data());
        if let Err(e) = written {
            // Best effort: drop whatever part was written so the next append starts clean.
            // If this fails too, the next open cuts the partial record as a torn tail.
            let _ = self.file.set_len(self.end);
            return Err(e);
        }
        self.end += buf.len() as u64;
        self.positions.extend(new_positions);
        Ok(())
    }

    /// Removes the entries with index `>= index` from the file, durably.
    fn truncate_from(&mut self, index: u64) -> io::Result<()> {
        let Some((_, &pos)) = self.positions.range(index..).next() else {
            return Ok(());
        };
        self.file.set_len(pos)?;
        self.file.sync_data()?;
        self.positions.split_off(&index);
        self.end = pos;
        Ok(())
    }

    /// Rewrites the file without the records of index `<= upto`, atomically.
    fn drop_prefix(&mut self, upto: u64) -> io::Result<()> {
        let keep_from = upto
            .checked_add(1)
            .and_then(|first_kept| self.positions.range(first_kept..).next())
            .map_or(self.end, |(_, &pos)| pos);
        let header_len = MAGIC.len() as u64;
        if keep_from <= header_len {
            return Ok(()); // nothing before the first kept record
        }
        let mut kept = vec![0; (self.end - keep_from) as usize];
        self.file.seek(SeekFrom::Start(keep_from))?;
        self.file.read_exact(&mut kept)?;
        let mut bytes = Vec::with_capacity(MAGIC.len() + kept.len());
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&kept);

        let path = self.dir.join(LOG_FILE);
        self.file = fs_util::replace_file(&path, &bytes)?;
        self.positions = self
            .positions
            .range(upto.saturating_add(1)..)
            .map(|(&index, &pos)| (index, pos - keep_from + header_len))
            .collect();
        self.end = bytes.len() as u64;
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// Appends `entries` (consecutive indexes). Raft appends right after the last entry; the
    /// general case is handled the way a raft log is defined: entries already covered by the
    /// purge point are skipped, an entry at an index already present replaces it and every
    /// entry after it, and an append that would leave a hole is refused.
    fn append(&self, entries: Vec<Entry>) -> Result<(), MetadataError> {
        let contiguous = entries
            .windows(2)
            .all(|w| w[1].log_id.index == w[0].log_id.index + 1);
        if !contiguous {
            return Err(MetadataError::Corrupt(
                "entries to append are not consecutive".to_string(),
            ));
        }
        let mut disk = lock(&self.disk);
        let (purged, last) = {
            let mem = read(&self.mem);
            (mem.purged, mem.entries.last_key_value().map(|(i, _)| *i))
        };
        let entries: Vec<Entry> = entries
            .into_iter()
            .filter(|e| purged.is_none_or(|p| e.log_id.index > p.index))
            .collect();
        let Some(first) = entries.first().map(|e| e.log_id.index) else {
            return Ok(());
        };
        let next = last.map(|l| l + 1).or(purged.map(|p| p.index + 1));
        if next.is_some_and(|next| first > next) {
            return Err(MetadataError::Corrupt(format!(
                "append would leave a hole: the log continues at index {next:?}, got {first}"
            )));
        }
        let mut records = Vec::with_capacity(entries.len());
        for entry in &entries {
            let json = serde_json::to_vec(entry)
                .map_err(|e| MetadataError::Corrupt(format!("cannot encode log entry: {e}")))?;
            records.push((entry.log_id.index, json));
        }
        let overwrites = last.is_some_and(|last| first <= last);
        if overwrites {
            disk.truncate_from(first)
                .map_err(|e| MetadataError::io("truncating the raft log", e))?;
            write(&self.mem).entries.split_off(&first);
        }
        disk.append(&records)
            .map_err(|e| MetadataError::io("appending to the raft log", e))?;
        let mut mem = write(&self.mem);
        for entry in entries {
            mem.entries.insert(entry.log_id.index, entry);
        }
        Ok(())
    }

    fn truncate(&self, log_id: LogId) -> Result<(), MetadataError> {
        lock(&self.disk)
            .truncate_from(log_id.index)
            .map_err(|e| MetadataError::io("truncating the raft log", e))?;
        write(&self.mem).entries.split_off(&log_id.index);
        Ok(())
    }

    fn purge(&self, log_id: LogId) -> Result<(), MetadataError> {
        if read(&self.mem).purged >= Some(log_id) {
            return Ok(());
        }
        let mut disk = lock(&self.disk);
        fs_util::write_json_atomic(&disk.dir.join(PURGED_FILE), &log_id)?;
        {
            let mut mem = write(&self.mem);
            mem.purged = Some(log_id);
            let kept = mem.entries.split_off(&(log_id.index.saturating_add(1)));
            mem.entries = kept;
        }
        disk.drop_prefix(log_id.index)
            .map_err(|e| MetadataError::io("rewriting the purged raft log", e))
    }

    fn save_vote(&self, vote: Vote) -> Result<(), MetadataError> {
        let disk = lock(&self.disk);
        fs_util::write_json_atomic(&disk.dir.join(VOTE_FILE), &vote)?;
        write(&self.mem).vote = Some(vote);
        Ok(())
    }

    fn save_committed(&self, committed: Option<LogId>) -> Result<(), MetadataError> {
        let disk = lock(&self.disk);
        fs_util::write_json_atomic(&disk.dir.join(COMMITTED_FILE), &committed)?;
        write(&self.mem).committed = committed;
        Ok(())
    }

    fn entries<RB: RangeBounds<u64>>(&self, range: RB) -> Vec<Entry> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => Bound::Included(e),
            Bound::Excluded(&e) => Bound::Excluded(e),
            Bound::Unbounded => Bound::Unbounded,
        };
        let empty = match end {
            Bound::Included(e) => start > e,
            Bound::Excluded(e) => start >= e,
            Bound::Unbounded => false,
        };
        if empty {
            return Vec::new();
        }
        read(&self.mem)
            .entries
            .range((Bound::Included(start), end))
            .map(|(_, entry)| entry.clone())
            .collect()
    }
}

/// Runs a blocking store operation on tokio's blocking pool.
async fn blocking<T, F>(shared: &Arc<Shared>, op: F) -> Result<T, MetadataError>
where
    T: Send + 'static,
    F: FnOnce(&Shared) -> Result<T, MetadataError> + Send + 'static,
{
    let shared = shared.clone();
    tokio::task::spawn_blocking(move || op(&shared))
        .await
        .map_err(|e| MetadataError::io("running a log store task", io::Error::other(e)))?
}

impl LogReader {
    /// The index of the last entry (or of the last purged one, in an empty log).
    pub fn last_index(&self) -> Option<u64> {
        let mem = read(&self.shared.mem);
        (mem.entries.last_key_value().map(|(i, _)| *i)).or(mem.purged.map(|l| l.index))
    }

    /// The last index known committed (raft's high watermark).
    pub fn committed_index(&self) -> Option<u64> {
        read(&self.shared.mem).committed.map(|l| l.index)
    }
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        Ok(self.shared.entries(range))
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        Ok(self.shared.entries(range))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let mem = read(&self.shared.mem);
        let last = mem.entries.last_key_value().map(|(_, e)| e.log_id);
        Ok(LogState {
            last_purged_log_id: mem.purged,
            last_log_id: last.or(mem.purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        LogReader {
            shared: self.shared.clone(),
        }
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let vote = *vote;
        blocking(&self.shared, move |s| s.save_vote(vote))
            .await
            .map_err(|e| StorageIOError::write_vote(&e).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(read(&self.shared.mem).vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        blocking(&self.shared, move |s| s.save_committed(committed))
            .await
            .map_err(|e| StorageIOError::write(&e).into())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(read(&self.shared.mem).committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        match blocking(&self.shared, move |s| s.append(entries)).await {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(io::Error::other(e.to_string())));
                Err(StorageIOError::write_logs(&e).into())
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        tracing::debug!(%log_id, "truncating metadata raft log");
        blocking(&self.shared, move |s| s.truncate(log_id))
            .await
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        tracing::debug!(%log_id, "purging metadata raft log");
        blocking(&self.shared, move |s| s.purge(log_id))
            .await
            .map_err(|e| StorageIOError::write_logs(&e).into())
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use openraft::storage::RaftLogStorageExt;
    use openraft::testing::{StoreBuilder, Suite};
    use openraft::{CommittedLeaderId, EntryPayload};

    use super::*;
    use crate::command::Command;
    use crate::state_machine::StateMachineStore;

    fn log_id(term: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    fn entry(term: u64, index: u64) -> Entry {
        Entry {
            log_id: log_id(term, index),
            payload: EntryPayload::Normal(Command::DeleteTopic {
                name: format!("topic-{index}"),
            }),
        }
    }

    fn entries(term: u64, indexes: std::ops::Range<u64>) -> Vec<Entry> {
        indexes.map(|i| entry(term, i)).collect()
    }

    fn open(dir: &Path) -> (LogStore, RecoveryReport) {
        LogStore::open(dir).expect("open log store")
    }

    fn file_len(dir: &Path) -> u64 {
        fs::metadata(dir.join(LOG_FILE)).map_or(0, |m| m.len())
    }

    async fn all(store: &mut LogStore) -> Vec<Entry> {
        store.try_get_log_entries(..).await.expect("read")
    }

    #[tokio::test]
    async fn appended_entries_read_back_by_range_and_survive_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut store, report) = open(dir.path());
        assert_eq!(report, RecoveryReport::default());
        store
            .blocking_append(entries(1, 0..10))
            .await
            .expect("append");

        assert_eq!(
            store.try_get_log_entries(3..6).await.expect("read"),
            entries(1, 3..6)
        );
        assert_eq!(
            store.try_get_log_entries(8..=20).await.expect("read"),
            entries(1, 8..10)
        );
        assert!(store
            .try_get_log_entries(6..6)
            .await
            .expect("read")
            .is_empty());
        let mut reader = store.get_log_reader().await;
        assert_eq!(
            reader.try_get_log_entries(..2).await.expect("read"),
            entries(1, 0..2)
        );
        let state = store.get_log_state().await.expect("state");
        assert_eq!(state.last_log_id, Some(log_id(1, 9)));
        assert_eq!(state.last_purged_log_id, None);
        drop(store);

        let (mut store, report) = open(dir.path());
        assert_eq!(report.entries, 10);
        assert_eq!(report.truncated_bytes, 0);
        assert_eq!(all(&mut store).await, entries(1, 0..10));
    }

    #[tokio::test]
    async fn vote_and_committed_survive_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut store, _) = open(dir.path());
        assert_eq!(store.read_vote().await.expect("vote"), None);
        assert_eq!(store.read_committed().await.expect("committed"), None);
        let vote = Vote::new(3, 1);
        store.save_vote(&vote).await.expect("save vote");
        store
            .save_committed(Some(log_id(3, 7)))
            .await
            .expect("save committed");
        drop(store);

        let (mut store, _) = open(dir.path());
        assert_eq!(store.read_vote().await.expect("vote"), Some(vote));
        assert_eq!(
            store.read_committed().await.expect("committed"),
            Some(log_id(3, 7))
        );
    }

    #[tokio::test]
    async fn truncate_removes_the_tail_persistently_and_appends_continue_after_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut store, _) = open(dir.path());
        store
            .blocking_append(entries(1, 0..10))
            .await
            .expect("append");
        store.truncate(log_id(1, 6)).await.expect("truncate");
        assert_eq!(all(&mut store).await, entries(1, 0..6));
        store
            .blocking_append(entries(2, 6..8))
            .await
            .expect("append");
        drop(store);

        let (mut store, report) = open(dir.path());
        assert_eq!(report.truncated_bytes, 0);
        let mut expected = entries(1, 0..6);
        expected.extend(entries(2, 6..8));
        assert_eq!(all(&mut store).await, expected);
        assert_eq!(
            store.get_log_state().await.expect("state").last_log_id,
            Some(log_id(2, 7))
        );
    }

    #[tokio::test]
    async fn purge_drops_the_head_persistently_and_shrinks_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut store, _) = open(dir.path());
        store
            .blocking_append(entries(1, 0..10))
            .await
            .expect("append");
        let before = file_len(dir.path());
        store.purge(log_id(1, 5)).await.expect("purge");
        assert!(file_len(dir.path()) < before);
        assert_eq!(all(&mut store).await, entries(1, 6..10));
        let state = store.get_log_state().await.expect("state");
        assert_eq!(state.last_purged_log_id, Some(log_id(1, 5)));
        assert_eq!(state.last_log_id, Some(log_id(1, 9)));
        // Truncation after a purge uses the rewritten file's offsets.
        store.truncate(log_id(1, 8)).await.expect("truncate");
        store
            .blocking_append(entries(2, 8..9))
            .await
            .expect("append");
        drop(store);

        let (mut store, report) = open(dir.path());
        assert_eq!(report.dropped_purged, 0);
        let mut expected = entries(1, 6..8);
        expected.extend(entries(2, 8..9));
        assert_eq!(all(&mut store).await, expected);
        assert_eq!(
            store
                .get_log_state()
                .await
                .expect("state")
                .last_purged_log_id,
            Some(log_id(1, 5))
        );
    }

    #[tokio::test]
    async fn purging_past_the_last_entry_leaves_an_empty_log_that_continues_after_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut store, _) = open(dir.path());
        store
            .blocking_append(entries(1, 0..3))
            .await
            .expect("append");
        store.purge(log_id(2, 20)).await.expect("purge");
        let state = store.get_log_state().await.expect("state");
        assert_eq!(state.last_purged_log_id, Some(log_id(2, 20)));
        assert_eq!(state.last_log_id, Some(log_id(2, 20)));
        assert!(all(&mut store).await.is_empty());
        store
            .blocking_append(entries(2, 21..23))
            .await
            .expect("append");
        drop(store);

        let (mut store, _) = open(dir.path());
        assert_eq!(all(&mut store).await, entries(2, 21..23));
    }

    #[tokio::test]
    async fn an_append_over_existing_indexes_replaces_them_and_everything_after() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut store, _) = open(dir.path());
        store
            .blocking_append(entries(1, 0..5))
            .await
            .expect("append");
        store
            .blocking_append(entries(2, 2..4))
            .await
            .expect("overwrite");
        let mut expected = entries(1, 0..2);
        expected.extend(entries(2, 2..4));
        assert_eq!(all(&mut store).await, expected);
        drop(store);
        let (mut store, _) = open(dir.path());
        assert_eq!(all(&mut store).await, expected);
    }

    #[tokio::test]
    async fn an_append_that_would_leave_a_hole_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut store, _) = open(dir.path());
        store
            .blocking_append(entries(1, 0..3))
            .await
            .expect("append");
        assert!(store.blocking_append(entries(1, 4..5)).await.is_err());
        assert_eq!(all(&mut store).await, entries(1, 0..3));
    }

    #[tokio::test]
    async fn an_interrupted_purge_is_completed_at_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut store, _) = open(dir.path());
        store
            .blocking_append(entries(1, 0..6))
            .await
            .expect("append");
        drop(store);
        // Simulate a crash after purged.json was written but before the file was rewritten.
        fs_util::write_json_atomic(&dir.path().join(PURGED_FILE), &log_id(1, 2)).expect("write");

        let (mut store, report) = open(dir.path());
        assert_eq!(report.dropped_purged, 3);
        assert_eq!(report.entries, 3);
        assert_eq!(all(&mut store).await, entries(1, 3..6));
        drop(store);
        let (_, report) = open(dir.path());
        assert_eq!(report.dropped_purged, 0);
    }

    #[tokio::test]
    async fn garbage_after_the_last_record_is_cut_off_at_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut store, _) = open(dir.path());
        store
            .blocking_append(entries(1, 0..4))
            .await
            .expect("append");
        drop(store);
        let good_len = file_len(dir.path());
        let mut file = OpenOptions::new()
            .append(true)
            .open(dir.path().join(LOG_FILE))
            .expect("open");
        file.write_all(&[0x17, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef, b'{', b'"'])
            .expect("write garbage");
        drop(file);

        let (mut store, report) = open(dir.path());
        assert_eq!(report.truncated_bytes, 10);
        assert_eq!(file_len(dir.path()), good_len);
        assert_eq!(all(&mut store).await, entries(1, 0..4));
        // The repaired log accepts new entries and they persist.
        store
            .blocking_append(entries(1, 4..5))
            .await
            .expect("append");
        drop(store);
        let (mut store, report) = open(dir.path());
        assert_eq!(report.truncated_bytes, 0);
        assert_eq!(all(&mut store).await, entries(1, 0..5));
    }

    #[tokio::test]
    async fn a_record_cut_mid_way_is_dropped_at_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut store, _) = open(dir.path());
        store
            .blocking_append(entries(1, 0..3))
            .await
            .expect("append");
        let two_len = file_len(dir.path());
        store
            .blocking_append(entries(1, 3..4))
            .await
            .expect("append");
        drop(store);
        let full_len = file_len(dir.path());
        let file = OpenOptions::new()
            .write(true)
            .open(dir.path().join(LOG_FILE))
            .expect("open");
        file.set_len(full_len - 5).expect("cut");
        drop(file);

        let (mut store, report) = open(dir.path());
        assert_eq!(report.truncated_bytes, full_len - 5 - two_len);
        assert_eq!(file_len(dir.path()), two_len);
        assert_eq!(all(&mut store).await, entries(1, 0..3));
    }

    #[tokio::test]
    async fn a_record_with_a_bad_checksum_ends_the_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut store, _) = open(dir.path());
        store
            .blocking_append(entries(1, 0..2))
            .await
            .expect("append");
        let one_len = file_len(dir.path());
        store
            .blocking_append(entries(1, 2..3))
            .await
            .expect("append");
        drop(store);
        let path = dir.path().join(LOG_FILE);
        let mut bytes = fs::read(&path).expect("read");
        let last = bytes.len() - 2;
        bytes[last] ^= 0xff; // flip a payload byte of the last record
        fs::write(&path, &bytes).expect("write");

        let (mut store, report) = open(dir.path());
        assert_eq!(report.truncated_bytes, bytes.len() as u64 - one_len);
        assert_eq!(all(&mut store).await, entries(1, 0..2));
    }

    #[tokio::test]
    async fn a_file_that_is_not_a_raft_log_is_reported_as_corrupt() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join(LOG_FILE), b"definitely not a log").expect("write");
        let err = LogStore::open(dir.path()).err().expect("must fail");
        assert!(matches!(err, MetadataError::Corrupt(_)), "{err}");
    }

    #[tokio::test]
    async fn a_torn_header_is_rewritten() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join(LOG_FILE), &MAGIC[..3]).expect("write");
        let (mut store, _) = open(dir.path());
        store
            .blocking_append(entries(1, 0..1))
            .await
            .expect("append");
        drop(store);
        let (mut store, _) = open(dir.path());
        assert_eq!(all(&mut store).await, entries(1, 0..1));
    }

    struct TempStoreBuilder;

    impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, tempfile::TempDir> for TempStoreBuilder {
        async fn build(
            &self,
        ) -> Result<(tempfile::TempDir, LogStore, StateMachineStore), StorageError> {
            let to_storage_error =
                |e: MetadataError| -> StorageError { StorageIOError::write(&e).into() };
            let dir = tempfile::tempdir()
                .map_err(|e| to_storage_error(MetadataError::io("creating a tempdir", e)))?;
            let (log_store, _) = LogStore::open(dir.path()).map_err(to_storage_error)?;
            let (state_machine, _) =
                StateMachineStore::open(dir.path()).map_err(to_storage_error)?;
            Ok((dir, log_store, state_machine))
        }
    }

    #[test]
    fn the_log_store_and_state_machine_pass_the_openraft_storage_suite() {
        Suite::test_all(TempStoreBuilder).expect("openraft storage suite");
    }

    #[test]
    fn record_encoding_round_trips() {
        let mut buf = Vec::new();
        encode_record(b"hello", &mut buf).expect("encode");
        let (len, crc) = read_record_header(&buf).expect("header");
        assert_eq!(len, 5);
        assert_eq!(crc, crc32c::crc32c(b"hello"));
        assert_eq!(&buf[8..], b"hello");
    }
}
