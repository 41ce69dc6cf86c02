//! The partitions this broker hosts, opened, configured and deleted to match the metadata
//! state machine, which is the only source of topics and partitions.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use serde::{Deserialize, Serialize};
use strata_metadata::{ClusterState, PartitionInfo};
use uuid::Uuid;

use super::dirs::{LogDir, LogDirs};
use super::relocate::{Relocation, RelocationMetrics};
use super::{
    Activity, LocalLog, Partition, Placement, RemoteLog, Replication, TierView, TopicPartition,
    Waiters,
};
use crate::clock::Clock;
use crate::config::BrokerConfig;
use crate::dynamic_config::DynamicConfig;
use crate::log::config::LogConfig;
use crate::log::{Log, LogError};
use crate::throttle::Pacer;
use crate::topic_config;

#[derive(Serialize, Deserialize, PartialEq)]
struct PartitionMeta {
    version: u8,
    topic: String,
    partition: i32,
    topic_id: Uuid,
}

/// All partitions hosted here, kept in step with the metadata state.
pub struct Partitions {
    dirs: LogDirs,
    node_id: u64,
    dynamic: Arc<DynamicConfig>,
    /// Replaced whole (copy on write) when the hosted set changes, so readers take it with
    /// one reference count and look partitions up without a lock or an allocation.
    hosted: RwLock<Arc<Hosted>>,
    /// Serialises `sync` so two callers never open the same log twice; holds the state the
    /// last successful sync applied, which the next one compares against.
    synced: Mutex<Option<Arc<ClusterState>>>,
    activity: Arc<Activity>,
    clock: Clock,
    /// Partitions of failed log directories: never reopened by this process.
    offline: Mutex<std::collections::HashSet<TopicPartition>>,
    /// Moves between log directories in progress.
    relocations: Arc<Mutex<HashMap<TopicPartition, Arc<Relocation>>>>,
    pub(super) relocation_metrics: Arc<RelocationMetrics>,
    /// Paces every move's copy together.
    relocation_pacer: Arc<Mutex<Pacer>>,
}

/// Why a move between log directories was not started.
#[derive(Debug, PartialEq, Eq)]
pub enum RelocateRefusal {
    /// The partition is not hosted here.
    NotHosted,
    /// The destination failed.
    Failed,
    /// It is moving to another directory already.
    Busy,
}

/// The hosted partitions at one instant.
#[derive(Default)]
pub struct Hosted {
    /// By topic name: partition `i` at index `i`, `None` where it is not hosted here.
    topics: HashMap<String, Vec<Option<Arc<Partition>>>>,
    /// Every hosted partition, by topic and partition.
    all: Vec<Arc<Partition>>,
}

impl Hosted {
    /// The hosted partitions of `topic`, indexed by partition number.
    pub fn topic(&self, topic: &str) -> Option<&[Option<Arc<Partition>>]> {
        self.topics.get(topic).map(Vec::as_slice)
    }

    pub fn get(&self, topic: &str, partition: i32) -> Option<&Arc<Partition>> {
        let i = usize::try_from(partition).ok()?;
        self.topics.get(topic)?.get(i)?.as_ref()
    }

    /// Every hosted partition, by topic and partition.
    pub fn all(&self) -> &[Arc<Partition>] {
        &self.all
    }

    fn from_map(map: HashMap<TopicPartition, Arc<Partition>>) -> Hosted {
        let mut all: Vec<Arc<Partition>> = map.into_values().collect();
        all.sort_by(|a, b| a.tp.cmp(&b.tp));
        let mut topics: HashMap<String, Vec<Option<Arc<Partition>>>> = HashMap::new();
        for p in &all {
            let slots = topics.entry(p.tp.topic.clone()).or_default();
            let i = p.tp.partition as usize;
            if slots.len() <= i {
                slots.resize(i + 1, None);
            }
            slots[i] = Some(p.clone());
        }
        Hosted { topics, all }
    }
}

/// What the state wants of a partition whose entry changed since the last sync.
struct Change<'a> {
    tp: TopicPartition,
    topic_id: Uuid,
    /// `None`: not hosted here (any more).
    wanted: Option<(LogConfig, &'a PartitionInfo)>,
}

impl Partitions {
    pub fn new(config: &BrokerConfig, dynamic: Arc<DynamicConfig>, clock: Clock) -> Partitions {
        Partitions {
            dirs: LogDirs::new(config.log_dirs()),
            node_id: config.node_id,
            dynamic,
            hosted: RwLock::new(Arc::new(Hosted::default())),
            synced: Mutex::new(None),
            activity: Arc::default(),
            clock,
            offline: Mutex::default(),
            relocations: Arc::default(),
            relocation_metrics: Arc::default(),
            relocation_pacer: Arc::default(),
        }
    }

    /// The partitions whose writes left housekeeping due.
    pub fn activity(&self) -> &Activity {
        &self.activity
    }

    /// The hosted partitions now: one reference count, no lock held afterwards.
    pub fn hosted(&self) -> Arc<Hosted> {
        self.hosted
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn get(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        self.hosted().get(topic, partition).cloned()
    }

    /// The log directories partitions are spread over.
    pub fn log_dirs(&self) -> &LogDirs {
        &self.dirs
    }

    /// Syncs the file system of every healthy log directory.
    fn sync_log_dirs(&self) -> std::io::Result<()> {
        (self.dirs.all().iter())
            .filter(|d| d.failure().is_none())
            .try_for_each(|d| crate::log::index::sync_filesystem(&d.path))
    }

    /// Opens, reconfigures and deletes logs so that this broker hosts exactly the partitions the
    /// state assigns to it. Idempotent; called on every metadata change.
    ///
    /// Only what changed since the last sync is looked at: topics and partitions the new state
    /// shares with the last one applied (the same `Arc`, see `ClusterState`) are skipped, so a
    /// change to one partition costs one partition, not every partition hosted. The first sync
    /// after start also removes directories the state does not know.
    ///
    /// `state` is read under the sync lock: a caller that read an older state and then
    /// waited for the lock would otherwise apply it after a newer one, and delete the logs of
    /// a topic created in between.
    pub fn sync(&self, state: impl FnOnce() -> Arc<ClusterState>) -> Result<(), LogError> {
        let mut synced = self.synced.lock().unwrap_or_else(|p| p.into_inner());
        let state = state();
        let started = crate::clock::Stopwatch::start();
        let changes = self.changes(synced.as_deref(), &state);
        let changed = changes.len();
        let mut map: HashMap<TopicPartition, Arc<Partition>> = self
            .hosted()
            .all
            .iter()
            .map(|p| (p.tp.clone(), p.clone()))
            .collect();
        let mut membership_changed = false;
        let result = self.apply(
            &state,
            synced.is_none(),
            changes,
            &mut map,
            &mut membership_changed,
        );
        // What was opened or deleted is published even when a later step failed.
        if membership_changed {
            *self.hosted.write().unwrap_or_else(|p| p.into_inner()) =
                Arc::new(Hosted::from_map(map));
        }
        if result.is_ok() {
            *synced = Some(state);
        }
        let hosted = self.hosted().all().len();
        let ms = started.elapsed().as_millis() as u64;
        if membership_changed || ms >= 100 {
            tracing::info!(
                changed,
                hosted,
                ms,
                "applied a metadata change to the hosted partitions"
            );
        } else {
            tracing::debug!(
                changed,
                hosted,
                ms,
                "applied a metadata change to the hosted partitions"
            );
        }
        result
    }

    /// The partitions whose entry in `state` differs from `last` (all of them when there is
    /// no `last`), and the hosted partitions whose topic is gone or was re-created.
    fn changes<'a>(&self, last: Option<&ClusterState>, state: &'a ClusterState) -> Vec<Change<'a>> {
        let mut changes = Vec::new();
        // A dynamic broker config changed: any topic's defaults may have (a rare admin act,
        // so every partition gets a look).
        let defaults_changed =
            last.is_some_and(|l| !Arc::ptr_eq(&l.broker_configs, &state.broker_configs));
        let settings = self.dynamic.current(state);
        for topic in state.topics.values() {
            let before = last
                .and_then(|l| l.topics.get(&topic.name))
                .filter(|_| !defaults_changed);
            if before.is_some_and(|b| Arc::ptr_eq(b, topic)) {
                continue;
            }
            // Same topic, same configs: only partitions whose entry changed need a look.
            let same =
                before.filter(|b| b.topic_id == topic.topic_id && b.configs == topic.configs);
            let log_config = topic_config::log_config(&settings, &topic.configs);
            for (i, p) in topic.partitions.iter().enumerate() {
                if same
                    .and_then(|b| b.partitions.get(i))
                    .is_some_and(|b| Arc::ptr_eq(b, p))
                {
                    continue;
                }
                changes.push(Change {
                    tp: TopicPartition {
                        topic: topic.name.clone(),
                        partition: i as i32,
                    },
                    topic_id: topic.topic_id,
                    wanted: p
                        .replicas
                        .contains(&self.node_id)
                        .then(|| (log_config.clone(), &**p)),
                });
            }
        }
        // Hosted partitions of topics gone (or re-created under a new id) since the last sync:
        // found through the topics of the last state, not a pass over every partition.
        let hosted = self.hosted();
        let gone = |name: &str, id: Uuid| state.topic(name).is_none_or(|t| t.topic_id != id);
        let doomed: Vec<&Arc<Partition>> = match last {
            None => hosted
                .all()
                .iter()
                .filter(|p| gone(&p.tp.topic, p.topic_id))
                .collect(),
            Some(l) => l
                .topics
                .values()
                .filter(|t| gone(&t.name, t.topic_id))
                .flat_map(|t| hosted.topic(&t.name).unwrap_or_default().iter().flatten())
                .filter(|p| gone(&p.tp.topic, p.topic_id))
                .collect(),
        };
        changes.extend(doomed.into_iter().map(|p| Change {
            tp: p.tp.clone(),
            topic_id: p.topic_id,
            wanted: None,
        }));
        changes
    }

    fn apply(
        &self,
        state: &ClusterState,
        first: bool,
        changes: Vec<Change<'_>>,
        map: &mut HashMap<TopicPartition, Arc<Partition>>,
        membership_changed: &mut bool,
    ) -> Result<(), LogError> {
        // Drop partitions no longer wanted (moved away, topic deleted, or re-created with a
        // new id) before opening anything in their place.
        for c in &changes {
            let doomed = map
                .get(&c.tp)
                .is_some_and(|p| c.wanted.is_none() || p.topic_id != c.topic_id);
            if doomed {
                if let Some(p) = map.remove(&c.tp) {
                    *membership_changed = true;
                    self.delete(p)?;
                }
            }
        }
        if first {
            super::relocate::recover(&self.dirs)?;
            self.delete_stray_dirs(state)?;
        }
        let mut created = false;
        let result = self.open_or_update(changes, map, membership_changed, &mut created);
        if created {
            self.sync_log_dirs()?;
        }
        result
    }

    fn open_or_update(
        &self,
        changes: Vec<Change<'_>>,
        map: &mut HashMap<TopicPartition, Arc<Partition>>,
        membership_changed: &mut bool,
        created: &mut bool,
    ) -> Result<(), LogError> {
        // Partitions per log directory, for placing new ones.
        let mut load = vec![0; self.dirs.all().len()];
        for p in map.values() {
            if let Some(i) = self.dirs.index(&p.placement.dir()) {
                load[i] += 1;
            }
        }
        let offline = self
            .offline
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for c in changes {
            let Some((log_config, info)) = c.wanted else {
                continue;
            };
            if offline.contains(&c.tp) {
                continue;
            }
            if let Some(existing) = map.get(&c.tp) {
                existing.set_role(self.node_id, info);
                let remote = RemoteLog::of(info);
                if *existing.remote() != remote {
                    existing.set_remote(remote);
                }
                let mut log = existing.log();
                if *log.config() != log_config {
                    log.set_config(log_config);
                }
                continue;
            }
            let partition = self.open(&c.tp, c.topic_id, log_config, info, &mut load, created)?;
            map.insert(c.tp, partition);
            *membership_changed = true;
        }
        Ok(())
    }

    fn delete(&self, p: Arc<Partition>) -> Result<(), LogError> {
        tracing::info!(topic = %p.tp.topic, partition = p.tp.partition, "deleting partition");
        p.placement.delete();
        p.stop_hosting();
        // A clean checks the flag under the log lock before its swap; taking the lock here
        // waits out a swap in progress.
        drop(p.log());
        p.wake();
        let dir = p.placement.dir().join(&p.tp.dir_name());
        drop(p);
        remove_dir_if_exists(&dir)
    }

    /// Opens (creating if new, in the log directory with the fewest partitions by `load`) the
    /// log of a partition to host; sets `created` when a new directory needs the file-system
    /// sync that makes it durable.
    fn open(
        &self,
        tp: &TopicPartition,
        topic_id: Uuid,
        log_config: LogConfig,
        info: &PartitionInfo,
        load: &mut [usize],
        created: &mut bool,
    ) -> Result<Arc<Partition>, LogError> {
        let name = tp.dir_name();
        let log_dir = match self.dirs.find(&name) {
            Some(d) => d.clone(),
            None => {
                let i = self
                    .dirs
                    .place(load)
                    .ok_or_else(|| std::io::Error::other("every log directory has failed"))?;
                self.dirs.all()[i].clone()
            }
        };
        if let Some(why) = log_dir.failure() {
            return Err(std::io::Error::other(format!(
                "log directory {} failed: {why}",
                log_dir.path.display()
            ))
            .into());
        }
        if let Some(i) = self.dirs.index(&log_dir) {
            load[i] += 1;
        }
        let dir = log_dir.join(&name);
        crate::log::create_dir(&dir)?;
        let meta = PartitionMeta {
            version: 1,
            topic: tp.topic.clone(),
            partition: tp.partition,
            topic_id,
        };
        let meta_path = dir.join("partition.json");
        let on_disk = std::fs::read(&meta_path)
            .ok()
            .and_then(|d| serde_json::from_slice::<PartitionMeta>(&d).ok());
        if on_disk.as_ref() != Some(&meta) {
            // Written in place, without an fsync: only this open reads it, and the caller
            // syncs the file system once for every partition it created. A torn or lost file
            // makes the directory unknown (never deleted as a stray) until written again here.
            std::fs::write(
                &meta_path,
                serde_json::to_vec(&meta).map_err(std::io::Error::other)?,
            )?;
            *created = true;
        }
        let (log, report) = Log::open(&dir, log_config, self.clock.now_ms())?;
        if !report.clean && report.segments > 0 {
            tracing::warn!(topic = %tp.topic, partition = tp.partition, rescanned = report.rescanned_segments,
                truncated_bytes = report.truncated_bytes, "recovered partition after unclean shutdown");
        }
        let remote = RemoteLog::of(info);
        let partition = Arc::new_cyclic(|me| Partition {
            tp: tp.clone(),
            topic_id,
            local: LocalLog::new(log, (remote.start(), remote.floor)),
            tier: TierView::new(remote),
            replication: Replication::new(info.leader_epoch),
            waiters: Waiters::default(),
            placement: Placement::new(log_dir),
            clock: self.clock.clone(),
            me: me.clone(),
            activity: self.activity.clone(),
            queued: AtomicBool::new(false),
        });
        partition.set_role(self.node_id, info);
        Ok(partition)
    }

    /// Starts moving hosted partition `tp` to log directory `dest`, in the background (see
    /// `relocate.rs`), its copy paced to `rate()` bytes per second. Moving it where it is, or
    /// where it is moving already, is done at once.
    pub fn relocate(
        &self,
        tp: &TopicPartition,
        dest: &Arc<LogDir>,
        rate: Arc<dyn Fn() -> u64 + Send + Sync>,
    ) -> Result<(), RelocateRefusal> {
        let p = self
            .get(&tp.topic, tp.partition)
            .ok_or(RelocateRefusal::NotHosted)?;
        if dest.failure().is_some() {
            return Err(RelocateRefusal::Failed);
        }
        let mut moving = self.relocations.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = moving.get(tp) {
            return match Arc::ptr_eq(&m.dest, dest) {
                true => Ok(()),
                false => Err(RelocateRefusal::Busy),
            };
        }
        if Arc::ptr_eq(&p.placement.dir(), dest) {
            return Ok(());
        }
        let relocation = Arc::new(Relocation::new(dest.clone()));
        moving.insert(tp.clone(), relocation.clone());
        drop(moving);
        let relocations = self.relocations.clone();
        let metrics = self.relocation_metrics.clone();
        let pacer = self.relocation_pacer.clone();
        let moved = tp.clone();
        let tp = tp.clone();
        let spawned = std::thread::Builder::new()
            .name("strata-relocate".into())
            .spawn(move || {
                let started = crate::clock::Stopwatch::start();
                let from = p.placement.dir().path.display().to_string();
                let result = p.relocate(&relocation, &pacer, &*rate);
                let bytes = relocation.copied.load(Ordering::Relaxed);
                metrics.bytes.inc_by(bytes);
                let (topic, partition, to) = (&tp.topic, tp.partition, relocation.dest.path.display());
                let seconds = started.elapsed().as_secs_f64();
                match &result {
                    Ok(true) => {
                        let held_ms = relocation.held_us.load(Ordering::Relaxed) as f64 / 1000.0;
                        tracing::info!(%topic, partition, %from, %to, bytes, seconds, held_ms, "moved a replica between log directories")
                    }
                    Ok(false) => tracing::info!(%topic, partition, %from, %to, "a move between log directories stopped"),
                    Err(e) => tracing::error!(%topic, partition, %from, %to, error = %e, "a move between log directories failed"),
                }
                metrics.ended(match result {
                    Ok(true) => "moved",
                    Ok(false) => "stopped",
                    Err(_) => "failed",
                });
                relocations.lock().unwrap_or_else(|p| p.into_inner()).remove(&tp);
            });
        if spawned.is_err() {
            self.relocations
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&moved);
            return Err(RelocateRefusal::Failed);
        }
        Ok(())
    }

    /// The moves in progress: each partition with its move.
    pub fn relocations(&self) -> Vec<(TopicPartition, Arc<Relocation>)> {
        let moving = self.relocations.lock().unwrap_or_else(|p| p.into_inner());
        moving
            .iter()
            .map(|(tp, r)| (tp.clone(), r.clone()))
            .collect()
    }

    /// Takes the partitions of the failed log directory `dir` offline here: no longer hosted
    /// (their files are left as they are) and never reopened by this process. Records them in
    /// `dir` for the report to the controller.
    pub fn take_offline(&self, dir: &LogDir) {
        // Under the sync lock: a sync in progress must not reopen what is taken away.
        let _synced = self.synced.lock().unwrap_or_else(|p| p.into_inner());
        let hosted = self.hosted();
        let lost: Vec<Arc<Partition>> = (hosted.all().iter())
            .filter(|p| std::ptr::eq(&*p.placement.dir(), dir))
            .cloned()
            .collect();
        let mut offline = self.offline.lock().unwrap_or_else(|p| p.into_inner());
        offline.extend(lost.iter().map(|p| p.tp.clone()));
        drop(offline);
        let map = (hosted.all().iter())
            .filter(|p| !std::ptr::eq(&*p.placement.dir(), dir))
            .map(|p| (p.tp.clone(), p.clone()))
            .collect();
        *self.hosted.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(Hosted::from_map(map));
        for p in &lost {
            p.stop_hosting();
            p.wake();
        }
        dir.set_lost(lost.iter().map(|p| (p.topic_id, p.tp.partition)).collect());
    }

    /// Removes partition directories on disk that the state does not know (or knows under
    /// another topic id): leftovers of topics deleted while this broker was down.
    fn delete_stray_dirs(&self, state: &ClusterState) -> Result<(), LogError> {
        let entries = (self.dirs.all().iter())
            .filter_map(|d| std::fs::read_dir(&d.path).ok())
            .flatten();
        for entry in entries.flatten() {
            let meta_path = entry.path().join("partition.json");
            let Ok(data) = std::fs::read(&meta_path) else {
                continue;
            };
            let Ok(meta) = serde_json::from_slice::<PartitionMeta>(&data) else {
                continue;
            };
            let wanted = state
                .topic(&meta.topic)
                .filter(|t| t.topic_id == meta.topic_id)
                .and_then(|t| t.partitions.get(usize::try_from(meta.partition).ok()?))
                .is_some_and(|p| p.replicas.contains(&self.node_id));
            if !wanted {
                tracing::info!(dir = %entry.path().display(), "deleting partition directory of a deleted topic");
                remove_dir_if_exists(&entry.path())?;
            }
        }
        Ok(())
    }

    /// Clean shutdown of every log: each writes what its next open reads, one file-system
    /// sync makes all of it durable, then each leaves its clean marker and a second sync
    /// makes the markers durable. A log that failed the first half gets no marker, so its next
    /// open recovers it.
    pub fn close_all(&self) {
        let hosted = self.hosted();
        let closed: Vec<&Arc<Partition>> = hosted
            .all()
            .iter()
            .filter(|p| match p.log().close_unsynced() {
                Ok(()) => true,
                Err(e) => {
                    tracing::error!(topic = %p.tp.topic, partition = p.tp.partition, error = %e, "failed to close log cleanly");
                    false
                }
            })
            .collect();
        let synced = |what: &str| match self.sync_log_dirs() {
            Ok(()) => true,
            Err(e) => {
                tracing::error!(error = %e, "cannot sync the log directories' file systems {what}: the next start recovers every log");
                false
            }
        };
        if !synced("after closing the logs") {
            return;
        }
        for p in closed {
            if let Err(e) = p.log().mark_clean() {
                tracing::error!(topic = %p.tp.topic, partition = p.tp.partition, error = %e, "failed to mark the log clean");
            }
        }
        synced("after marking the logs clean");
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
