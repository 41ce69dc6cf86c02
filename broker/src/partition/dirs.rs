//! The log directories partitions live in (Kafka's `log.dirs`; one per disk, JBOD): where a
//! partition's directory is, where a new one goes, and which directories have failed.
//!
//! Invariants:
//! - A partition's directory is `<log dir>/<topic>-<partition>` in exactly one log directory:
//!   an existing one is found where it is; a new one goes to the healthy log directory
//!   hosting the fewest partitions (Kafka's rule; ties to the first listed).
//! - The log directories are fixed for the life of the process, in the configured order.
//! - A failed log directory stays failed until the process ends (KIP-858): nothing is placed,
//!   opened or written in it again; its partitions are offline here.
//! - A full one has not failed: its partitions stay online and readable, writes to it fail
//!   (KAFKA_STORAGE_ERROR, nothing acknowledged) and succeed again once space returns.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use uuid::Uuid;

/// ENOSPC, or EDQUOT (a quota): space that may come back.
fn is_out_of_space(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

/// One log directory.
#[derive(Debug)]
pub struct LogDir {
    pub path: PathBuf,
    /// Why it failed, once it has.
    failure: OnceLock<String>,
    /// Out of space at the last probe (logged when it changes; `/metrics` shows the space
    /// left, `strata_log_dir_available_bytes`).
    full: AtomicBool,
    /// The partitions it held when it failed, (topic id, partition), for the report to the
    /// controller.
    lost: Mutex<Vec<(Uuid, i32)>>,
}

pub struct LogDirs {
    dirs: Vec<Arc<LogDir>>,
}

impl LogDirs {
    pub fn new(paths: Vec<PathBuf>) -> LogDirs {
        LogDirs {
            dirs: paths
                .into_iter()
                .map(|path| {
                    Arc::new(LogDir {
                        path,
                        failure: OnceLock::new(),
                        full: AtomicBool::new(false),
                        lost: Mutex::new(Vec::new()),
                    })
                })
                .collect(),
        }
    }

    pub fn all(&self) -> &[Arc<LogDir>] {
        &self.dirs
    }

    /// The log directory holding a partition directory called `name`, if one does.
    pub fn find(&self, name: &str) -> Option<&Arc<LogDir>> {
        self.dirs.iter().find(|d| d.path.join(name).is_dir())
    }

    /// Where a new partition goes, given how many each log directory hosts (`load`, in the
    /// order of [`LogDirs::all`]): the healthy one with the fewest; `None` if all failed.
    pub fn place(&self, load: &[usize]) -> Option<usize> {
        (0..self.dirs.len())
            .filter(|&i| self.dirs[i].failure().is_none())
            .min_by_key(|&i| load.get(i).copied().unwrap_or(0))
    }

    /// The position of `dir` in [`LogDirs::all`].
    pub fn index(&self, dir: &LogDir) -> Option<usize> {
        self.dirs.iter().position(|d| std::ptr::eq(&**d, dir))
    }
}

impl LogDir {
    /// The directory of partition `name` in this log directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Why the directory failed, if it has.
    pub fn failure(&self) -> Option<&str> {
        self.failure.get().map(String::as_str)
    }

    /// Marks the directory failed; true the first time.
    pub fn fail(&self, why: String) -> bool {
        self.failure.set(why).is_ok()
    }

    /// Writes, syncs and removes a small file: what fails here (a disk gone, removed or
    /// remounted read-only) would fail the next append too. Running out of space is not a
    /// failure: the directory is full until a probe succeeds.
    pub fn probe(&self) -> std::io::Result<()> {
        let path = self.path.join(".strata-probe");
        let written = (|| {
            let mut f = std::fs::File::create(&path)?;
            f.write_all(b"ok")?;
            f.sync_all()
        })();
        let _ = std::fs::remove_file(&path);
        match written {
            Err(e) if is_out_of_space(&e) => {
                if !self.full.swap(true, Ordering::AcqRel) {
                    tracing::error!(dir = %self.path.display(), "log directory full: produce to its partitions fails (KAFKA_STORAGE_ERROR) until space returns; reads go on");
                }
                Ok(())
            }
            Err(e) => Err(e),
            Ok(()) => {
                if self.full.swap(false, Ordering::AcqRel) {
                    tracing::info!(dir = %self.path.display(), "log directory has space again");
                }
                Ok(())
            }
        }
    }

    /// The partitions the directory held when it failed.
    pub fn lost(&self) -> Vec<(Uuid, i32)> {
        self.lost.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(super) fn set_lost(&self, partitions: Vec<(Uuid, i32)>) {
        *self.lost.lock().unwrap_or_else(|p| p.into_inner()) = partitions;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_partitions_go_where_fewest_are_and_old_ones_are_found() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let dirs = LogDirs::new(vec![a.path().into(), b.path().into()]);
        assert_eq!(dirs.place(&[0, 0]), Some(0), "ties to the first");
        assert_eq!(dirs.place(&[3, 2]), Some(1));
        std::fs::create_dir(b.path().join("t-0")).unwrap();
        let found = dirs.find("t-0").unwrap();
        assert_eq!(found.path, b.path());
        assert_eq!(dirs.index(found), Some(1));
        assert!(dirs.find("t-1").is_none());
        assert!(dirs.all()[0].probe().is_ok());
        assert!(dirs.all()[0].fail("gone".into()));
        assert!(!dirs.all()[0].fail("again".into()), "once");
        assert_eq!(dirs.place(&[0, 5]), Some(1), "never a failed one");
        assert!(dirs.all()[0].failure().is_some_and(|w| w == "gone"));
        drop(a);
        assert!(
            dirs.all()[0].probe().is_err(),
            "a removed directory fails the probe"
        );
    }
}
