//! Moving a replica between this broker's log directories while it serves (Kafka's
//! AlterReplicaLogDirs): the partition's files are copied into `<dest>/<topic>-<n>.future`,
//! paced to `replica_alter_log_dirs_io_max_bytes_per_second`, while appends and reads go on;
//! then, with appends held, the log writes what its next open reads, what changed since the
//! copy is copied, the copy is made durable, and the directories are swapped.
//!
//! Invariants:
//! - The partition has exactly one live directory at every instant, on disk as in memory.
//!   The swap renames the source to `<topic>-<n>.retired`, then the copy to `<topic>-<n>`,
//!   each rename made durable before the next step; [`recover`] at start-up finishes or undoes
//!   a swap a crash interrupted (a `.future` left is an unfinished copy and is removed; a
//!   `.retired` is removed when the live directory exists, else renamed back).
//! - Nothing acknowledged is lost: the last copy is taken with the log lock held, after the
//!   log wrote everything its next open reads, and the copy is opened before the lock is
//!   released.
//! - Segment files only grow at their end, except through a truncation (a follower meeting a
//!   new leader), which restarts the copy, and a clean, which never installs into a moving
//!   partition (see `Partition::clean`). So bytes copied once stay valid, and each round
//!   copies only what was appended since.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::dirs::{LogDir, LogDirs};
use super::Partition;
use crate::log::index::sync_filesystem;
use crate::log::{Log, LogError};
use crate::throttle::Pacer;

const FUTURE: &str = ".future";
const RETIRED: &str = ".retired";

/// A round of copying (without the lock) that moved less than this is the last: the rest is
/// copied with appends held, which must stay short.
const LAST_ROUND_BYTES: u64 = 8 << 20;
/// Rounds before the swap however much the last one copied (a partition written faster than
/// the copy's rate would never catch up otherwise).
const MAX_ROUNDS: usize = 20;
const CHUNK: usize = 1 << 20;

/// Moves between log directories, on `/metrics`.
#[derive(Default)]
pub struct RelocationMetrics {
    pub moves: Family<ResultLabels, Counter>,
    pub bytes: Counter,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    result: String,
}

impl RelocationMetrics {
    pub fn ended(&self, result: &str) {
        (self.moves.get_or_create(&ResultLabels {
            result: result.into(),
        }))
        .inc();
    }
}

/// One move in progress.
pub struct Relocation {
    pub dest: Arc<LogDir>,
    /// Bytes copied so far.
    pub copied: AtomicU64,
    /// Every record below this offset is in the copy (-1 before the first segment is).
    pub copied_end: AtomicI64,
    /// Asks the move to stop (its copy is removed).
    pub cancel: AtomicBool,
    /// How long appends were held for the swap, in microseconds.
    pub held_us: AtomicU64,
}

impl Relocation {
    pub fn new(dest: Arc<LogDir>) -> Relocation {
        Relocation {
            dest,
            copied: AtomicU64::new(0),
            copied_end: AtomicI64::new(-1),
            cancel: AtomicBool::new(false),
            held_us: AtomicU64::new(0),
        }
    }
}

impl Partition {
    /// Moves the partition's directory into log directory `dest` (blocking; see the module
    /// doc). The copy is paced by `pacer`, shared by every move, at `rate()` bytes per second
    /// (0: no bound) read at each chunk. Ok(false): stopped (cancelled, the topic deleted, a
    /// directory failed) with nothing changed.
    pub fn relocate(
        &self,
        to: &Relocation,
        pacer: &Mutex<Pacer>,
        rate: &dyn Fn() -> u64,
    ) -> Result<bool, LogError> {
        let name = self.tp.dir_name();
        let from = self.placement.dir();
        if Arc::ptr_eq(&from, &to.dest) {
            return Ok(true);
        }
        let future = to.dest.join(&format!("{name}{FUTURE}"));
        self.placement.set_moving(true);
        let result = self.relocate_into(&from, &name, to, pacer, rate);
        self.placement.set_moving(false);
        if !matches!(result, Ok(true)) {
            let _ = fs::remove_dir_all(&future);
        }
        result
    }

    fn stopped(&self, from: &LogDir, to: &Relocation) -> bool {
        to.cancel.load(Ordering::Acquire)
            || self.placement.is_deleted()
            || from.failure().is_some()
            || to.dest.failure().is_some()
    }

    fn relocate_into(
        &self,
        from: &Arc<LogDir>,
        name: &str,
        to: &Relocation,
        pacer: &Mutex<Pacer>,
        rate: &dyn Fn() -> u64,
    ) -> Result<bool, LogError> {
        let src = from.join(name);
        let future = to.dest.join(&format!("{name}{FUTURE}"));
        // Restarted from nothing after a truncation.
        loop {
            remove_if_exists(&future)?;
            fs::create_dir_all(&future)?;
            let truncations = self.log().truncations();
            let mut copied: HashMap<String, u64> = HashMap::new();
            for _ in 0..MAX_ROUNDS {
                let mut step = |bytes: u64| {
                    // Held while it sleeps: the moves share the rate.
                    (pacer.lock().unwrap_or_else(|p| p.into_inner())).pace(bytes, rate());
                    to.copied.fetch_add(bytes, Ordering::Relaxed);
                    !self.stopped(from, to)
                };
                let round = copy_round(&src, &future, &mut copied, false, &mut step)?;
                if self.stopped(from, to) {
                    return Ok(false);
                }
                self.note_copied_end(&src, &copied, to);
                if round < LAST_ROUND_BYTES {
                    break;
                }
            }
            // Made durable before appends are held: the sync under the lock then writes only
            // the last round (a 1 GiB copy synced there held appends for half a second).
            sync_filesystem(&to.dest.path)?;
            let mut log = self.log();
            let held = crate::clock::Stopwatch::start();
            if self.stopped(from, to) {
                return Ok(false);
            }
            if log.truncations() != truncations {
                tracing::info!(topic = %self.tp.topic, partition = self.tp.partition, "log truncated during its move; copying again");
                continue;
            }
            // Appends wait from here to the end of the swap.
            let (hw, replicated) = (log.high_watermark(), log.is_replicated());
            let config = log.config().clone();
            log.close_unsynced()?;
            let mut swapped = swap(&src, from, &future, &to.dest, name, &mut copied, to);
            let now = self.clock.now_ms();
            let mut opened = match &swapped {
                Ok(_) => Some(Log::open(&to.dest.join(name), config.clone(), now)),
                Err(_) if src.is_dir() => Some(Log::open(&src, config.clone(), now)),
                // A source that could not even be put back stays with the log as it is.
                Err(_) => None,
            };
            if let (Some(Err(e)), Ok(retired)) = (&opened, &swapped) {
                // The copy does not open: the swap is undone before appends resume, or they
                // would land in the retired files, which the next start removes.
                tracing::error!(topic = %self.tp.topic, partition = self.tp.partition, error = %e, "the moved copy does not open; back to the source");
                let why = std::io::Error::other(format!("the moved copy does not open: {e}"));
                fs::rename(to.dest.join(name), &future)?;
                fs::rename(retired, &src)?;
                sync_filesystem(&from.path)?;
                opened = Some(Log::open(&src, config, now));
                swapped = Err(why.into());
            }
            if let Some(opened) = opened {
                let (mut reopened, _) = opened?;
                reopened.set_replicated(replicated, false);
                reopened.set_high_watermark(hw);
                let live: &mut Log = &mut log;
                *live = reopened;
            }
            if swapped.is_ok() {
                self.placement.moved_to(to.dest.clone());
            }
            drop(log);
            let held = held.elapsed().as_micros();
            to.held_us
                .store(u64::try_from(held).unwrap_or(u64::MAX), Ordering::Relaxed);
            let retired = swapped?;
            remove_if_exists(&retired)?;
            return Ok(true);
        }
    }

    /// Records how far the copy holds every record: up to the first segment not copied whole.
    fn note_copied_end(&self, src: &Path, copied: &HashMap<String, u64>, to: &Relocation) {
        let mut bases: Vec<(i64, String)> = (fs::read_dir(src).into_iter().flatten().flatten())
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let base = name.strip_suffix(".log")?.parse().ok()?;
                Some((base, name))
            })
            .collect();
        bases.sort_unstable();
        let size = |n: &str| fs::metadata(src.join(n)).map_or(0, |m| m.len());
        let end = (bases.iter())
            .find(|(_, n)| copied.get(n).copied().unwrap_or(0) < size(n))
            .map_or_else(|| self.log().log_end_offset(), |(base, _)| *base);
        to.copied_end.store(end, Ordering::Relaxed);
    }
}

/// The last copy and the swap, with the source log closed: every file brought up to date
/// (segments by what they gained, the rest whole), the copy made durable and marked clean,
/// then the renames. Returns the retired source directory; on error the source is live.
fn swap(
    src: &Path,
    from: &LogDir,
    future: &Path,
    dest: &LogDir,
    name: &str,
    copied: &mut HashMap<String, u64>,
    to: &Relocation,
) -> Result<std::path::PathBuf, LogError> {
    let mut count = |bytes: u64| {
        to.copied.fetch_add(bytes, Ordering::Relaxed);
        true
    };
    copy_round(src, future, copied, true, &mut count)?;
    sync_filesystem(&dest.path)?;
    // The marker only once the files it vouches for are durable.
    Log::mark_clean_dir(future)?;
    sync_filesystem(&dest.path)?;
    let retired = from.join(&format!("{name}{RETIRED}"));
    fs::rename(src, &retired)?;
    sync_filesystem(&from.path)?;
    if let Err(e) = fs::rename(future, dest.join(name)).and_then(|()| sync_filesystem(&dest.path)) {
        // Undone: the source is live again.
        fs::rename(&retired, src)?;
        return Err(e.into());
    }
    Ok(retired)
}

/// Brings the files of `future` up to `src`: a segment (`.log`) gets the bytes it gained
/// since `copied` says it was copied; with `all`, every other file is copied whole and files
/// gone from `src` are removed from `future`. `step` is told each chunk's bytes and may stop
/// the round (false). Returns the bytes copied.
fn copy_round(
    src: &Path,
    future: &Path,
    copied: &mut HashMap<String, u64>,
    all: bool,
    step: &mut dyn FnMut(u64) -> bool,
) -> Result<u64, LogError> {
    let mut total = 0;
    let mut present = Vec::new();
    let mut entries: Vec<_> = fs::read_dir(src)?.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let file = entry.file_name().to_string_lossy().into_owned();
        if !entry.file_type()?.is_file() {
            continue;
        }
        present.push(file.clone());
        let segment = file.ends_with(".log");
        if !segment && !all {
            continue;
        }
        let from = if segment {
            copied.get(&file).copied().unwrap_or(0)
        } else {
            0
        };
        let n = match copy_from(&src.join(&file), &future.join(&file), from, step) {
            Ok(n) => n,
            // Retention removed it meanwhile.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e.into()),
        };
        copied.insert(file, from + n);
        total += n;
    }
    if all {
        for entry in fs::read_dir(future)?.flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            if !present.contains(&file) {
                fs::remove_file(entry.path())?;
                copied.remove(&file);
            }
        }
    }
    Ok(total)
}

/// Copies `src` from byte `offset` to its end into `dst` at the same offset (`dst` cut to
/// `offset` first, created if missing). Returns the bytes copied.
fn copy_from(
    src: &Path,
    dst: &Path,
    offset: u64,
    step: &mut dyn FnMut(u64) -> bool,
) -> std::io::Result<u64> {
    let mut input = File::open(src)?;
    let mut output = fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(false)
        .open(dst)?;
    output.set_len(offset)?;
    input.seek(SeekFrom::Start(offset))?;
    output.seek(SeekFrom::Start(offset))?;
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0;
    loop {
        let n = input.read(&mut buf)?;
        if n == 0 {
            return Ok(total);
        }
        output.write_all(&buf[..n])?;
        total += n as u64;
        if !step(n as u64) {
            return Ok(total);
        }
    }
}

fn remove_if_exists(dir: &Path) -> std::io::Result<()> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// At start-up, before any partition is opened: finishes or undoes the moves a crash
/// interrupted (see the module doc).
pub fn recover(dirs: &LogDirs) -> std::io::Result<()> {
    for dir in dirs.all() {
        let Ok(entries) = fs::read_dir(&dir.path) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(FUTURE) {
                tracing::info!(dir = %entry.path().display(), "removing the copy of an unfinished move");
                remove_if_exists(&entry.path())?;
            } else if let Some(live) = name.strip_suffix(RETIRED) {
                if dirs.find(live).is_some() {
                    remove_if_exists(&entry.path())?;
                } else {
                    tracing::info!(dir = %entry.path().display(), "a move stopped before its copy went live: keeping the source");
                    fs::rename(entry.path(), dir.join(live))?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_copy_what_segments_gained_and_the_last_brings_every_file() {
        let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        fs::write(src.path().join("0.log"), b"aaaa").unwrap();
        fs::write(src.path().join("0.index"), b"i1").unwrap();
        let mut copied = HashMap::new();
        let mut all_steps = |_| true;
        assert_eq!(
            copy_round(src.path(), dst.path(), &mut copied, false, &mut all_steps).unwrap(),
            4
        );
        assert!(
            !dst.path().join("0.index").exists(),
            "only segments before the last round"
        );
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(src.path().join("0.log"))
            .unwrap();
        f.write_all(b"bb").unwrap();
        fs::write(src.path().join("0.index"), b"i2").unwrap();
        fs::write(dst.path().join("gone.txt"), b"x").unwrap();
        assert_eq!(
            copy_round(src.path(), dst.path(), &mut copied, true, &mut all_steps).unwrap(),
            2 + 2
        );
        assert_eq!(fs::read(dst.path().join("0.log")).unwrap(), b"aaaabb");
        assert_eq!(fs::read(dst.path().join("0.index")).unwrap(), b"i2");
        assert!(!dst.path().join("gone.txt").exists());
    }

    #[test]
    fn an_interrupted_swap_is_finished_or_undone_at_start() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let dirs = LogDirs::new(vec![a.path().into(), b.path().into()]);
        // Crashed after the source was retired, before the copy went live: undone.
        fs::create_dir(a.path().join(format!("t-0{RETIRED}"))).unwrap();
        fs::create_dir(b.path().join(format!("t-0{FUTURE}"))).unwrap();
        // Crashed after the copy went live: finished.
        fs::create_dir(a.path().join(format!("t-1{RETIRED}"))).unwrap();
        fs::create_dir(b.path().join("t-1")).unwrap();
        recover(&dirs).unwrap();
        let names = |d: &Path| {
            let mut v: Vec<String> = (fs::read_dir(d).unwrap().flatten())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(a.path()), ["t-0"]);
        assert_eq!(names(b.path()), ["t-1"]);
    }
}
