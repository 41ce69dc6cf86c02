//! The partitions this broker hosts, opened, configured and deleted to match the metadata
//! state machine, which is the only source of topics and partitions.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use serde::{Deserialize, Serialize};
use strata_metadata::ClusterState;
use uuid::Uuid;

use super::{Partition, RemoteLog, Role, TopicPartition};
use crate::clock::Clock;
use crate::config::BrokerConfig;
use crate::log::config::LogConfig;
use crate::log::{Log, LogError};
use crate::topic_config;

#[derive(Serialize, Deserialize)]
struct PartitionMeta {
    version: u8,
    topic: String,
    partition: i32,
    topic_id: Uuid,
}

/// All partitions hosted here, kept in step with the metadata state.
pub struct Partitions {
    data_dir: PathBuf,
    node_id: u64,
    config: BrokerConfig,
    map: RwLock<HashMap<TopicPartition, Arc<Partition>>>,
    /// Serialises `sync` so two callers never open the same log twice.
    sync_lock: Mutex<()>,
    clock: Clock,
}

impl Partitions {
    pub fn new(config: &BrokerConfig, clock: Clock) -> Partitions {
        Partitions {
            data_dir: config.data_dir.clone(),
            node_id: config.node_id,
            config: config.clone(),
            map: RwLock::new(HashMap::new()),
            sync_lock: Mutex::new(()),
            clock,
        }
    }

    pub fn get(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        let tp = TopicPartition {
            topic: topic.to_string(),
            partition,
        };
        self.map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&tp)
            .cloned()
    }

    pub fn all(&self) -> Vec<Arc<Partition>> {
        let mut v: Vec<_> = self
            .map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        v.sort_by(|a, b| a.tp.cmp(&b.tp));
        v
    }

    fn dir_of(&self, tp: &TopicPartition) -> PathBuf {
        self.data_dir.join(format!("{}-{}", tp.topic, tp.partition))
    }

    /// Opens, reconfigures and deletes logs so that this broker hosts exactly the partitions the
    /// state assigns to it. Idempotent; called on every metadata change.
    ///
    /// `state` is read under the sync lock: a caller that read an older state and then
    /// waited for the lock would otherwise apply it after a newer one, and delete the logs of
    /// a topic created in between.
    pub fn sync(&self, state: impl FnOnce() -> Arc<ClusterState>) -> Result<(), LogError> {
        let _guard = self.sync_lock.lock().unwrap_or_else(|p| p.into_inner());
        let state = state();
        let mut wanted: HashMap<TopicPartition, (Uuid, LogConfig, RemoteLog, i32)> = HashMap::new();
        for topic in state.topics.values() {
            let log_config = topic_config::log_config(&self.config, &topic.configs);
            for (i, p) in topic.partitions.iter().enumerate() {
                if p.replicas.contains(&self.node_id) {
                    let tp = TopicPartition {
                        topic: topic.name.clone(),
                        partition: i as i32,
                    };
                    wanted.insert(
                        tp,
                        (
                            topic.topic_id,
                            log_config.clone(),
                            RemoteLog::of(p),
                            p.leader_epoch,
                        ),
                    );
                }
            }
        }
        // Drop partitions no longer wanted (topic deleted, or re-created with a new id).
        let doomed: Vec<Arc<Partition>> = {
            let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
            let gone: Vec<TopicPartition> = map
                .iter()
                .filter(|(tp, p)| wanted.get(*tp).is_none_or(|(id, ..)| *id != p.topic_id))
                .map(|(tp, _)| tp.clone())
                .collect();
            gone.iter().filter_map(|tp| map.remove(tp)).collect()
        };
        for p in doomed {
            tracing::info!(topic = %p.tp.topic, partition = p.tp.partition, "deleting partition");
            p.deleted.store(true, Ordering::Release);
            p.stop_hosting();
            // A clean checks the flag under the log lock before its swap; taking the lock here
            // waits out a swap in progress.
            drop(p.log());
            p.wake();
            let dir = self.dir_of(&p.tp);
            drop(p);
            remove_dir_if_exists(&dir)?;
        }
        self.delete_stray_dirs(&wanted)?;
        for (tp, (topic_id, log_config, remote, leader_epoch)) in wanted {
            if let Some(existing) = self.get(&tp.topic, tp.partition) {
                existing.leader_epoch.store(leader_epoch, Ordering::Release);
                if let Some(info) = state.partition(&tp.topic, tp.partition) {
                    existing.set_role(self.node_id, info);
                }
                {
                    let mut current = existing.remote.write().unwrap_or_else(|p| p.into_inner());
                    if **current != remote {
                        *current = Arc::new(remote);
                    }
                }
                let mut log = existing.log();
                if *log.config() != log_config {
                    log.set_config(log_config);
                }
                continue;
            }
            let dir = self.dir_of(&tp);
            std::fs::create_dir_all(&dir)?;
            let meta = PartitionMeta {
                version: 1,
                topic: tp.topic.clone(),
                partition: tp.partition,
                topic_id,
            };
            crate::log::index::write_file_atomically(
                &dir.join("partition.json"),
                &serde_json::to_vec(&meta).map_err(std::io::Error::other)?,
            )?;
            let (log, report) = Log::open(&dir, log_config, self.clock.now_ms())?;
            if !report.clean && report.segments > 0 {
                tracing::warn!(topic = %tp.topic, partition = tp.partition, rescanned = report.rescanned_segments,
                    truncated_bytes = report.truncated_bytes, "recovered partition after unclean shutdown");
            }
            let partition = Arc::new(Partition {
                tp: tp.clone(),
                topic_id,
                log: Mutex::new(log),
                remote: RwLock::new(Arc::new(remote)),
                waiters: Mutex::new(Vec::new()),
                deleted: AtomicBool::new(false),
                leader_epoch: AtomicI32::new(leader_epoch),
                replica: Mutex::new(Role::Offline),
                hw: tokio::sync::watch::channel(-1).0,
                leader_hw: AtomicI64::new(-1),
                clock: self.clock.clone(),
            });
            if let Some(info) = state.partition(&tp.topic, tp.partition) {
                partition.set_role(self.node_id, info);
            }
            self.map
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .insert(tp, partition);
        }
        Ok(())
    }

    /// Removes partition directories on disk that the state does not know (or knows under
    /// another topic id): leftovers of topics deleted while this broker was down.
    fn delete_stray_dirs(
        &self,
        wanted: &HashMap<TopicPartition, (Uuid, LogConfig, RemoteLog, i32)>,
    ) -> Result<(), LogError> {
        let Ok(entries) = std::fs::read_dir(&self.data_dir) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            let meta_path = entry.path().join("partition.json");
            let Ok(data) = std::fs::read(&meta_path) else {
                continue;
            };
            let Ok(meta) = serde_json::from_slice::<PartitionMeta>(&data) else {
                continue;
            };
            let tp = TopicPartition {
                topic: meta.topic,
                partition: meta.partition,
            };
            if wanted.get(&tp).is_none_or(|(id, ..)| *id != meta.topic_id) {
                tracing::info!(dir = %entry.path().display(), "deleting partition directory of a deleted topic");
                remove_dir_if_exists(&entry.path())?;
            }
        }
        Ok(())
    }

    /// Clean shutdown of every log.
    pub fn close_all(&self) {
        for p in self.all() {
            if let Err(e) = p.log().close() {
                tracing::error!(topic = %p.tp.topic, partition = p.tp.partition, error = %e, "failed to close log cleanly");
            }
        }
    }
}

fn remove_dir_if_exists(dir: &Path) -> Result<(), LogError> {
    // The cleaner may still be writing one staged file when it sees the deletion; a retry
    // removes what it left.
    let mut retries = 5;
    loop {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty && retries > 0 => {
                retries -= 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => return Err(e.into()),
        }
    }
}
