//! The filesystems under the log directories: each one's size and what is left, read at
//! scrape time (`statvfs`), so an operator is paged before a full disk stops every partition
//! on it.

use std::path::PathBuf;

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
            if let Some((capacity, available)) = crate::sys::filesystem_bytes(dir) {
                self.capacity.get_or_create(labels).set(capacity as i64);
                self.available.get_or_create(labels).set(available as i64);
            }
        }
    }
}
