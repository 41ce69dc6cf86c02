//! Log directory health (KIP-858). Every log directory is probed each second (a small file
//! written, synced, removed); one that fails takes only its own partitions offline here — the
//! broker keeps serving the others — and is reported to the controller through the quorum,
//! which moves those partitions' leadership to other in-sync replicas. The report is repeated
//! until the metadata state shows it, so a quorum unreachable at the moment of failure only
//! delays it.

use std::sync::Arc;

use strata_metadata::Command;

use super::Node;
use crate::partition::dirs::LogDir;

impl Node {
    /// Probes the healthy log directories, fails those whose probe fails, and reports every
    /// failed one the controller does not know of yet.
    pub async fn check_log_dirs(&self) {
        let dirs: Vec<Arc<LogDir>> = self.partitions.log_dirs().all().to_vec();
        // Blocking file I/O, as slow as a failing disk: off the runtime's workers.
        let failed = tokio::task::spawn_blocking(move || {
            (dirs.into_iter())
                .filter(|d| d.failure().is_none())
                .filter_map(|d| d.probe().err().map(|e| (d, e.to_string())))
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        for (dir, why) in failed {
            self.fail_log_dir(&dir, why);
        }
        self.report_failed_log_dirs().await;
    }

    /// Marks `dir` failed and takes its partitions offline here (the first time only).
    pub fn fail_log_dir(&self, dir: &LogDir, why: String) {
        if dir.fail(why.clone()) {
            self.partitions.take_offline(dir);
            tracing::error!(
                dir = %dir.path.display(),
                %why,
                partitions = dir.lost().len(),
                "log directory failed: its partitions are offline on this broker"
            );
        }
    }

    async fn report_failed_log_dirs(&self) {
        let state = self.metadata.state();
        let Some(me) = state.brokers.get(&self.config.node_id) else {
            return;
        };
        for dir in self.partitions.log_dirs().all() {
            let name = dir.path.display().to_string();
            if dir.failure().is_none() || me.offline_log_dirs.contains(&name) {
                continue;
            }
            let partitions = dir.lost();
            let count = partitions.len();
            let report = Command::FailLogDir {
                node_id: self.config.node_id,
                epoch: me.epoch,
                dir: name.clone(),
                partitions,
            };
            match self.apply(report).await {
                Ok(_) => {
                    tracing::info!(dir = %name, partitions = count, "reported the failed log directory to the controller")
                }
                Err(e) => {
                    tracing::warn!(dir = %name, error = %e.message, "cannot report the failed log directory yet; will retry")
                }
            }
        }
    }
}
