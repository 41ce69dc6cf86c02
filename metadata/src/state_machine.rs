//! The raft state machine: [`ClusterState`] plus raft's bookkeeping, and its snapshots.
//!
//! The state machine itself lives in memory; what makes it durable is the snapshot file plus
//! the raft log after it. At open, the latest snapshot is loaded and raft re-applies the
//! committed log entries that follow it.
//!
//! Files: `<dir>/snapshot/snapshot.json` holds the one current snapshot (its raft metadata and
//! the `ClusterState`), replaced atomically (temp file, fsync, rename, directory fsync).
//!
//! Invariants:
//! - `last_applied` is the log id of the last entry applied to `state`; the snapshot on disk
//!   never runs ahead of the log it came from, and a snapshot is never replaced by an older one.
//! - Entries are applied strictly in log order, each exactly once per process lifetime, through
//!   the pure [`ClusterState::apply`] — so replay after restart rebuilds the same state.
//! - Every state change is published to the watch channel before raft learns the entry was
//!   applied, so when `propose` returns, [`Metadata::state`](crate::Metadata::state) already
//!   shows the change.

use std::io::{self, Cursor};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageIOError};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::command::CommandResult;
use crate::error::MetadataError;
use crate::fs_util;
use crate::state::ClusterState;
use crate::types::{Entry, LogId, SnapshotMeta, StorageError, StoredMembership, TypeConfig};

/// Subdirectory of the metadata directory that holds snapshots.
pub(crate) const SNAPSHOT_DIR: &str = "snapshot";
const SNAPSHOT_FILE: &str = "snapshot.json";

/// The snapshot file's content.
#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta,
    state: ClusterState,
}

/// Where snapshots are kept; shared by the state machine and its snapshot builders.
struct SnapshotStore {
    dir: PathBuf,
    /// Last log id of the snapshot on disk; also serializes writers.
    persisted: Mutex<Option<LogId>>,
    /// Makes snapshot ids unique within this process.
    counter: AtomicU64,
}

impl SnapshotStore {
    fn path(&self) -> PathBuf {
        self.dir.join(SNAPSHOT_FILE)
    }

    fn load(&self) -> Result<Option<StoredSnapshot>, MetadataError> {
        fs_util::read_json(&self.path())
    }

    /// Persists `snapshot` unless the one on disk is newer. Blocking.
    fn save(&self, snapshot: &StoredSnapshot) -> Result<(), MetadataError> {
        let mut persisted = self
            .persisted
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if *persisted > snapshot.meta.last_log_id {
            tracing::debug!(
                on_disk = ?*persisted,
                built = ?snapshot.meta.last_log_id,
                "not replacing a newer metadata snapshot"
            );
            return Ok(());
        }
        fs_util::write_json_atomic(&self.path(), snapshot)?;
        *persisted = snapshot.meta.last_log_id;
        Ok(())
    }

    fn new_snapshot_id(&self, last: Option<LogId>) -> String {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        match last {
            Some(id) => format!("{}-{}-{nanos}-{n}", id.leader_id, id.index),
            None => format!("none-{nanos}-{n}"),
        }
    }
}

/// The raft state machine of the metadata quorum.
pub struct StateMachineStore {
    state: Arc<ClusterState>,
    last_applied: Option<LogId>,
    last_membership: StoredMembership,
    snapshots: Arc<SnapshotStore>,
    tx: watch::Sender<Arc<ClusterState>>,
}

/// Builds a snapshot of the state as it was when the builder was taken.
pub struct SnapshotBuilder {
    state: Arc<ClusterState>,
    last_applied: Option<LogId>,
    last_membership: StoredMembership,
    snapshots: Arc<SnapshotStore>,
}

impl StateMachineStore {
    /// Opens the state machine in `dir` (the metadata directory), loading the latest snapshot
    /// if there is one. Blocking. Returns a receiver of the published states.
    pub fn open(
        dir: &Path,
    ) -> Result<(StateMachineStore, watch::Receiver<Arc<ClusterState>>), MetadataError> {
        let snapshot_dir = dir.join(SNAPSHOT_DIR);
        fs_util::create_dir(&snapshot_dir)?;
        fs_util::remove_tmp_files(&snapshot_dir)?;
        let snapshots = Arc::new(SnapshotStore {
            dir: snapshot_dir,
            persisted: Mutex::new(None),
            counter: AtomicU64::new(0),
        });
        let (state, last_applied, last_membership) = match snapshots.load()? {
            Some(snapshot) => {
                tracing::info!(
                    last_log_id = ?snapshot.meta.last_log_id,
                    "loaded metadata snapshot"
                );
                *snapshots
                    .persisted
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = snapshot.meta.last_log_id;
                (
                    snapshot.state,
                    snapshot.meta.last_log_id,
                    snapshot.meta.last_membership,
                )
            }
            None => (ClusterState::default(), None, StoredMembership::default()),
        };
        let state = Arc::new(state);
        let (tx, rx) = watch::channel(state.clone());
        let sm = StateMachineStore {
            state,
            last_applied,
            last_membership,
            snapshots,
            tx,
        };
        Ok((sm, rx))
    }

    fn publish(&self) {
        self.tx.send_replace(self.state.clone());
    }
}

/// Runs a blocking snapshot-store operation on tokio's blocking pool.
async fn blocking<T, F>(snapshots: &Arc<SnapshotStore>, op: F) -> Result<T, MetadataError>
where
    T: Send + 'static,
    F: FnOnce(&SnapshotStore) -> Result<T, MetadataError> + Send + 'static,
{
    let snapshots = snapshots.clone();
    tokio::task::spawn_blocking(move || op(&snapshots))
        .await
        .map_err(|e| MetadataError::io("running a snapshot task", io::Error::other(e)))?
}

fn encode_state(state: &ClusterState) -> Result<Vec<u8>, MetadataError> {
    serde_json::to_vec(state)
        .map_err(|e| MetadataError::Corrupt(format!("cannot encode the cluster state: {e}")))
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let meta = SnapshotMeta {
            last_log_id: self.last_applied,
            last_membership: self.last_membership.clone(),
            snapshot_id: self.snapshots.new_snapshot_id(self.last_applied),
        };
        let data = encode_state(&self.state)
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        let stored = StoredSnapshot {
            meta: meta.clone(),
            state: ClusterState::clone(&self.state),
        };
        blocking(&self.snapshots, move |s| s.save(&stored))
            .await
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        tracing::info!(last_log_id = ?meta.last_log_id, "built metadata snapshot");
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok((self.last_applied, self.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<CommandResult>, StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries = entries.into_iter();
        let mut results = Vec::with_capacity(entries.size_hint().0);
        let mut changed = false;
        for entry in entries {
            self.last_applied = Some(entry.log_id);
            let result = match entry.payload {
                EntryPayload::Blank => CommandResult::Ok,
                EntryPayload::Normal(cmd) => {
                    changed = true;
                    Arc::make_mut(&mut self.state).apply(&cmd)
                }
                EntryPayload::Membership(membership) => {
                    self.last_membership = StoredMembership::new(Some(entry.log_id), membership);
                    CommandResult::Ok
                }
            };
            results.push(result);
        }
        if changed {
            self.publish();
        }
        Ok(results)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder {
            state: self.state.clone(),
            last_applied: self.last_applied,
            last_membership: self.last_membership.clone(),
            snapshots: self.snapshots.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let state: ClusterState = serde_json::from_slice(snapshot.get_ref())
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        let stored = StoredSnapshot {
            meta: meta.clone(),
            state: state.clone(),
        };
        blocking(&self.snapshots, move |s| s.save(&stored))
            .await
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), &e))?;
        self.state = Arc::new(state);
        self.last_applied = meta.last_log_id;
        self.last_membership = meta.last_membership.clone();
        self.publish();
        tracing::info!(last_log_id = ?meta.last_log_id, "installed metadata snapshot");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        let stored = blocking(&self.snapshots, |s| s.load())
            .await
            .map_err(|e| StorageIOError::read_snapshot(None, &e))?;
        let Some(stored) = stored else {
            return Ok(None);
        };
        let data = encode_state(&stored.state)
            .map_err(|e| StorageIOError::read_snapshot(Some(stored.meta.signature()), &e))?;
        Ok(Some(Snapshot {
            meta: stored.meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use openraft::{CommittedLeaderId, Membership};

    use super::*;
    use crate::command::Command;

    fn log_id(term: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    fn normal(index: u64, cmd: Command) -> Entry {
        Entry {
            log_id: log_id(1, index),
            payload: EntryPayload::Normal(cmd),
        }
    }

    fn membership(index: u64) -> Entry {
        Entry {
            log_id: log_id(1, index),
            payload: EntryPayload::Membership(Membership::new(vec![BTreeSet::from([1])], None)),
        }
    }

    fn register(node_id: u64) -> Command {
        Command::RegisterBroker {
            node_id,
            host: "localhost".to_string(),
            port: 9092,
            rack: None,
            listeners: vec![],
            admin: None,
        }
    }

    #[tokio::test]
    async fn apply_publishes_each_new_state_and_records_the_last_applied_entry() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut sm, mut rx) = StateMachineStore::open(dir.path()).expect("open");
        assert_eq!(*rx.borrow_and_update().as_ref(), ClusterState::default());

        let results = sm
            .apply([
                membership(0),
                normal(1, register(1)),
                normal(
                    2,
                    Command::DeleteTopic {
                        name: "missing".to_string(),
                    },
                ),
            ])
            .await
            .expect("apply");
        assert_eq!(
            results,
            vec![
                CommandResult::Ok,
                CommandResult::BrokerRegistered { epoch: 1 },
                CommandResult::UnknownTopic
            ]
        );
        assert!(rx.has_changed().expect("sender alive"));
        assert!(rx.borrow_and_update().brokers.contains_key(&1));
        let (last_applied, membership) = sm.applied_state().await.expect("applied");
        assert_eq!(last_applied, Some(log_id(1, 2)));
        assert_eq!(membership.log_id(), &Some(log_id(1, 0)));
    }

    #[tokio::test]
    async fn a_built_snapshot_is_loaded_at_reopen_and_installs_elsewhere() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut sm, _rx) = StateMachineStore::open(dir.path()).expect("open");
        assert!(sm.get_current_snapshot().await.expect("current").is_none());
        sm.apply([membership(0), normal(1, register(7))])
            .await
            .expect("apply");

        let mut builder = sm.get_snapshot_builder().await;
        let snapshot = builder.build_snapshot().await.expect("build");
        assert_eq!(snapshot.meta.last_log_id, Some(log_id(1, 1)));
        let current = sm
            .get_current_snapshot()
            .await
            .expect("current")
            .expect("some");
        assert_eq!(current.meta, snapshot.meta);
        assert_eq!(current.snapshot.get_ref(), snapshot.snapshot.get_ref());
        drop(sm);

        let (mut reopened, rx) = StateMachineStore::open(dir.path()).expect("reopen");
        assert!(rx.borrow().brokers.contains_key(&7));
        let (last_applied, membership) = reopened.applied_state().await.expect("applied");
        assert_eq!(last_applied, Some(log_id(1, 1)));
        assert_eq!(membership.log_id(), &Some(log_id(1, 0)));

        let other = tempfile::tempdir().expect("tempdir");
        let (mut follower, follower_rx) = StateMachineStore::open(other.path()).expect("open");
        follower
            .install_snapshot(&snapshot.meta, snapshot.snapshot)
            .await
            .expect("install");
        assert!(follower_rx.borrow().brokers.contains_key(&7));
        assert_eq!(
            follower.applied_state().await.expect("applied").0,
            Some(log_id(1, 1))
        );
        let installed = follower
            .get_current_snapshot()
            .await
            .expect("current")
            .expect("some");
        assert_eq!(installed.meta, current.meta);
    }

    #[tokio::test]
    async fn an_older_snapshot_never_replaces_a_newer_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut sm, _rx) = StateMachineStore::open(dir.path()).expect("open");
        sm.apply([membership(0)]).await.expect("apply");
        let mut old_builder = sm.get_snapshot_builder().await;
        sm.apply([normal(1, register(1))]).await.expect("apply");
        let mut new_builder = sm.get_snapshot_builder().await;
        new_builder.build_snapshot().await.expect("build new");
        old_builder.build_snapshot().await.expect("build old");
        let current = sm
            .get_current_snapshot()
            .await
            .expect("current")
            .expect("some");
        assert_eq!(current.meta.last_log_id, Some(log_id(1, 1)));
    }
}
