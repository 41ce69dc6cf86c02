//! The filesystems under the log directories: each one's size and what is left, read at
//! scrape time (`statvfs`), so an operator is paged before a full disk stops every partition
//! on it.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirLabels {
    dir: String,
}

pub(super) struct DiskMetrics {
    dirs: Vec<(PathBuf, DirLabels)>,
    capacity: Family<DirLabels, Gauge>,
    available: Family<DirLabels, Gauge>,
}

impl DiskMetrics {
    pub(super) fn new(dirs: &[PathBuf]) -> DiskMetrics {
        DiskMetrics {
            dirs: (dirs.iter())
                .map(|d| {
                    let labels = DirLabels {
                        dir: d.display().to_string(),
                    };
                    (d.clone(), labels)
                })
                .collect(),
            capacity: Family::default(),
            available: Family::default(),
        }
    }

    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "log_dir_capacity_bytes",
            "Size of the filesystem holding the log directory",
            self.capacity.clone(),
        );
        registry.register(
            "log_dir_available_bytes",
            "Bytes the broker can still write on the filesystem holding the log directory",
            self.available.clone(),
        );
    }

    pub(super) fn update(&self) {
        for (dir, labels) in &self.dirs {
            if let Some((capacity, available)) = filesystem_bytes(dir) {
                self.capacity.get_or_create(labels).set(capacity as i64);
                self.available.get_or_create(labels).set(available as i64);
            }
        }
    }
}

/// (total, available to an unprivileged writer) bytes of the filesystem holding `dir`.
pub fn filesystem_bytes(dir: &Path) -> Option<(u64, u64)> {
    let path = CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is NUL-terminated and `st` is written by statvfs before it is read (only
    // on success).
    if unsafe { libc::statvfs(path.as_ptr(), st.as_mut_ptr()) } != 0 {
        return None;
    }
    let st = unsafe { st.assume_init() };
    // fsblkcnt_t and c_ulong are u64 on the 64-bit Linux targets Strata builds for.
    let unit = st.f_frsize;
    Some((st.f_blocks * unit, st.f_bavail * unit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_directory_filesystem_has_a_size_and_free_space() {
        let dir = tempfile::tempdir().unwrap();
        let (total, available) = filesystem_bytes(dir.path()).unwrap();
        assert!(total > 0 && available <= total, "{total} {available}");
        assert!(filesystem_bytes(&dir.path().join("missing")).is_none());
    }
}
