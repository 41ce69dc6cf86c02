//! [`Metadata`]: the handle the broker uses to run and talk to the metadata quorum.
//!
//! Invariants:
//! - [`Metadata::open_single_voter`] returns only once this node leads and has applied every
//!   entry in its log, so the first [`Metadata::state`] a caller sees is the fully rebuilt state,
//!   never a partial replay.
//! - A fresh store (no vote, no log) is initialized as a one-voter cluster of this node; an
//!   existing store is never re-initialized, and one whose membership does not make this node
//!   a voter is refused rather than waited on.
//! - Every wait has a deadline; none sleeps a fixed time.
//! - When `propose` returns `Ok`, the command is committed, applied and visible in `state()`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use openraft::metrics::WaitError;
use openraft::{Config, RaftMetrics, RaftNetworkFactory, ServerState, SnapshotPolicy};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::command::{Command, CommandResult, NodeId};
use crate::error::MetadataError;
use crate::log_store::LogStore;
use crate::network::UnreachableNetwork;
use crate::state::ClusterState;
use crate::state_machine::StateMachineStore;
use crate::types::{Node, Raft, TypeConfig};

/// How long `open_single_voter` waits for leadership and log replay.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `snapshot` waits for the snapshot to be built.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(10);
/// A snapshot trigger is ignored while another build runs; re-trigger this often until ours
/// is built.
const SNAPSHOT_RETRIGGER: Duration = Duration::from_millis(500);
/// Build a snapshot (and purge the log behind it) every this many entries.
const SNAPSHOT_EVERY_ENTRIES: u64 = 1000;
/// Entries kept in the log behind a snapshot, so a slightly lagging follower can catch up
/// from the log rather than from a snapshot.
const LOG_KEPT_BEHIND_SNAPSHOT: u64 = 100;

/// Where and as whom to run the metadata quorum.
#[derive(Clone, Debug)]
pub struct MetadataOptions {
    /// This node's id.
    pub node_id: NodeId,
    /// Directory for the raft log, vote and snapshots; created if missing.
    pub dir: PathBuf,
}

/// Handle to the running metadata quorum on this node. Cheap to clone.
#[derive(Clone)]
pub struct Metadata {
    inner: Arc<Inner>,
}

struct Inner {
    node_id: NodeId,
    raft: Raft,
    state: watch::Receiver<Arc<ClusterState>>,
    metrics: watch::Receiver<RaftMetrics<NodeId, Node>>,
}

/// The raft configuration of the metadata quorum.
fn raft_config() -> Result<Config, MetadataError> {
    Config {
        cluster_name: "strata-metadata".to_string(),
        heartbeat_interval: 100,
        election_timeout_min: 300,
        election_timeout_max: 600,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(SNAPSHOT_EVERY_ENTRIES),
        max_in_snapshot_log_to_keep: LOG_KEPT_BEHIND_SNAPSHOT,
        ..Config::default()
    }
    .validate()
    .map_err(|e| MetadataError::Raft(format!("invalid raft config: {e}")))
}

fn wait_error(err: WaitError) -> MetadataError {
    match err {
        WaitError::Timeout(after, what) => MetadataError::Timeout { what, after },
        WaitError::ShuttingDown => MetadataError::Shutdown,
    }
}

impl Metadata {
    /// Opens (or creates) the on-disk raft state and starts raft. If the store is fresh
    /// (no vote, no log), initializes a single-voter cluster with this node as the only voter.
    /// Returns once this node is the leader and has applied every committed entry (i.e. state
    /// is fully rebuilt), or an error after a deadline.
    pub async fn open_single_voter(opts: MetadataOptions) -> Result<Metadata, MetadataError> {
        Self::start(opts, UnreachableNetwork).await
    }

    /// Starts raft over `network`, initializing a fresh store as a single-voter cluster, and
    /// waits for leadership and full replay. The transport is a parameter so that a TCP
    /// transport can be passed here when multi-voter quorums arrive.
    async fn start<N>(opts: MetadataOptions, network: N) -> Result<Metadata, MetadataError>
    where
        N: RaftNetworkFactory<TypeConfig>,
    {
        let MetadataOptions { node_id, dir } = opts;
        let (log_store, state_machine, state) = tokio::task::spawn_blocking(move || {
            let (log_store, report) = LogStore::open(&dir)?;
            tracing::info!(
                dir = %dir.display(),
                entries = report.entries,
                truncated_bytes = report.truncated_bytes,
                dropped_purged = report.dropped_purged,
                "opened metadata raft log"
            );
            let (state_machine, state) = StateMachineStore::open(&dir)?;
            Ok::<_, MetadataError>((log_store, state_machine, state))
        })
        .await
        .map_err(|e| MetadataError::Raft(format!("opening the metadata store panicked: {e}")))??;

        let config = Arc::new(raft_config()?);
        let raft = Raft::new(node_id, config, network, log_store, state_machine).await?;
        let metadata = Metadata {
            inner: Arc::new(Inner {
                node_id,
                metrics: raft.metrics(),
                raft,
                state,
            }),
        };
        match metadata.become_ready().await {
            Ok(()) => Ok(metadata),
            Err(e) => {
                // Do not leave raft's tasks running behind a failed open.
                if let Err(join) = metadata.inner.raft.shutdown().await {
                    tracing::warn!(error = %join, "shutting down raft after a failed open");
                }
                Err(e)
            }
        }
    }

    /// Initializes a fresh store, starts an election right away on a restarted one, and waits
    /// until this node leads and has applied its whole log.
    async fn become_ready(&self) -> Result<(), MetadataError> {
        let raft = &self.inner.raft;
        let node_id = self.inner.node_id;
        if raft.is_initialized().await? {
            let voters: Vec<NodeId> = {
                let metrics = self.inner.metrics.borrow();
                metrics.membership_config.voter_ids().collect()
            };
            if !voters.contains(&node_id) {
                return Err(MetadataError::Raft(format!(
                    "node {node_id} is not a voter of the stored metadata quorum (voters: {voters:?})"
                )));
            }
            if voters == [node_id] {
                // The only voter: no need to wait out an election timeout.
                raft.trigger().elect().await?;
            }
        } else {
            tracing::info!(node_id, "initializing a single-voter metadata quorum");
            raft.initialize(BTreeMap::from([(node_id, Node::default())]))
                .await?;
        }

        raft.wait(Some(STARTUP_TIMEOUT))
            .metrics(
                |m| {
                    m.state == ServerState::Leader
                        && m.current_leader == Some(node_id)
                        // A leader first commits a blank entry of its own term; once an entry
                        // of the current term is applied, everything before it is too.
                        && m.last_applied.map(|id| id.leader_id.term) == Some(m.current_term)
                        && m.last_applied.map(|id| id.index) == m.last_log_index
                },
                "this node to lead the metadata quorum and apply its whole log",
            )
            .await
            .map_err(wait_error)?;
        Ok(())
    }

    /// Proposes a command through raft and returns its result once committed and applied.
    pub async fn propose(&self, cmd: Command) -> Result<CommandResult, MetadataError> {
        match self.inner.raft.client_write(cmd).await {
            Ok(response) => Ok(response.data),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_))) => {
                Err(MetadataError::NotLeader)
            }
            Err(err) => Err(err.into()),
        }
    }

    /// Latest applied state (cheap: an `Arc` clone).
    pub fn state(&self) -> Arc<ClusterState> {
        self.inner.state.borrow().clone()
    }

    /// Subscribes to state changes: the receiver sees every newly applied state.
    pub fn subscribe(&self) -> watch::Receiver<Arc<ClusterState>> {
        self.inner.state.clone()
    }

    /// This node's id.
    pub fn node_id(&self) -> NodeId {
        self.inner.node_id
    }

    /// Whether this node currently leads the metadata quorum.
    pub fn is_leader(&self) -> bool {
        let metrics = self.inner.metrics.borrow();
        metrics.state == ServerState::Leader && metrics.current_leader == Some(self.inner.node_id)
    }

    /// The underlying raft node, for transports and operational tooling.
    pub fn raft(&self) -> &openraft::Raft<TypeConfig> {
        &self.inner.raft
    }

    /// Builds a snapshot of everything applied so far and waits until it is on disk.
    pub async fn snapshot(&self) -> Result<(), MetadataError> {
        let target = self.inner.metrics.borrow().last_applied;
        let deadline = Instant::now() + SNAPSHOT_TIMEOUT;
        loop {
            self.inner.raft.trigger().snapshot().await?;
            let now = Instant::now();
            if now >= deadline {
                return Err(MetadataError::Timeout {
                    what: "a metadata snapshot to be built".to_string(),
                    after: SNAPSHOT_TIMEOUT,
                });
            }
            let wait = SNAPSHOT_RETRIGGER.min(deadline - now);
            match self
                .inner
                .raft
                .wait(Some(wait))
                .metrics(|m| m.snapshot >= target, "a metadata snapshot to be built")
                .await
            {
                Ok(_) => return Ok(()),
                Err(WaitError::Timeout(..)) => continue,
                Err(WaitError::ShuttingDown) => return Err(MetadataError::Shutdown),
            }
        }
    }

    /// Shuts raft down cleanly. Every acknowledged entry is already fsynced, so nothing is lost;
    /// later calls on this handle (or its clones) fail with [`MetadataError::Shutdown`].
    pub async fn shutdown(&self) -> Result<(), MetadataError> {
        self.inner
            .raft
            .shutdown()
            .await
            .map_err(|e| MetadataError::Raft(format!("raft task failed during shutdown: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use super::*;

    fn opts(dir: &Path) -> MetadataOptions {
        MetadataOptions {
            node_id: 1,
            dir: dir.to_path_buf(),
        }
    }

    async fn open(dir: &Path) -> Metadata {
        Metadata::open_single_voter(opts(dir))
            .await
            .expect("open metadata")
    }

    async fn propose_ok(metadata: &Metadata, cmd: Command) {
        let result = metadata.propose(cmd.clone()).await.expect("propose");
        assert!(result.is_ok(), "{cmd:?} was rejected: {result:?}");
    }

    fn register(node_id: NodeId) -> Command {
        Command::RegisterBroker {
            node_id,
            host: "127.0.0.1".to_string(),
            port: 9092,
            rack: None,
        }
    }

    fn create_topic(name: &str, partitions: usize) -> Command {
        Command::CreateTopic {
            name: name.to_string(),
            topic_id: uuid::Uuid::new_v4(),
            replicas: vec![vec![1]; partitions],
            configs: BTreeMap::from([("retention.ms".to_string(), "60000".to_string())]),
        }
    }

    #[tokio::test]
    async fn a_fresh_directory_becomes_a_leader_that_applies_proposals() {
        let dir = tempfile::tempdir().expect("tempdir");
        let metadata = open(&dir.path().join("meta")).await;
        assert!(metadata.is_leader());
        assert_eq!(metadata.node_id(), 1);
        assert_eq!(*metadata.state(), ClusterState::default());

        let mut updates = metadata.subscribe();
        updates.borrow_and_update();
        propose_ok(&metadata, register(1)).await;
        assert!(updates.has_changed().expect("sender alive"));
        propose_ok(&metadata, create_topic("orders", 3)).await;
        assert_eq!(
            metadata
                .propose(create_topic("orders", 1))
                .await
                .expect("propose"),
            CommandResult::TopicAlreadyExists
        );
        assert_eq!(
            metadata
                .propose(Command::AllocateProducerIds { count: 10 })
                .await
                .expect("propose"),
            CommandResult::ProducerIds {
                first: 1000,
                count: 10
            }
        );

        let state = metadata.state();
        assert_eq!(state.topic("orders").map(|t| t.partitions.len()), Some(3));
        assert_eq!(state.next_producer_id, 1010);
        metadata.shutdown().await.expect("shutdown");
        assert!(!metadata.is_leader());
        assert!(matches!(
            metadata.propose(register(2)).await,
            Err(MetadataError::Shutdown)
        ));
        assert!(matches!(
            metadata.snapshot().await,
            Err(MetadataError::Shutdown)
        ));
        // The last state stays readable, and a second shutdown is harmless.
        assert_eq!(metadata.state(), state);
        metadata.shutdown().await.expect("second shutdown");
    }

    #[tokio::test]
    async fn state_survives_a_restart_and_proposals_continue_after_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let metadata = open(dir.path()).await;
        propose_ok(&metadata, register(1)).await;
        propose_ok(&metadata, create_topic("a", 2)).await;
        propose_ok(
            &metadata,
            Command::AlterTopicConfig {
                name: "a".to_string(),
                set: BTreeMap::from([("cleanup.policy".to_string(), "compact".to_string())]),
                delete: vec!["retention.ms".to_string()],
            },
        )
        .await;
        propose_ok(&metadata, Command::AllocateProducerIds { count: 5 }).await;
        let before = metadata.state();
        metadata.shutdown().await.expect("shutdown");

        let reopened = open(dir.path()).await;
        assert_eq!(reopened.state(), before);
        propose_ok(
            &reopened,
            Command::CreatePartitions {
                name: "a".to_string(),
                new_replicas: vec![vec![1]],
            },
        )
        .await;
        assert_eq!(
            reopened
                .propose(Command::AllocateProducerIds { count: 1 })
                .await
                .expect("propose"),
            CommandResult::ProducerIds {
                first: 1005,
                count: 1
            }
        );
        let after = reopened.state();
        assert_eq!(after.topic("a").map(|t| t.partitions.len()), Some(3));
        reopened.shutdown().await.expect("shutdown");

        let third = open(dir.path()).await;
        assert_eq!(third.state(), after);
        third.shutdown().await.expect("shutdown");
    }

    #[tokio::test]
    async fn state_is_rebuilt_from_a_snapshot_plus_the_log_after_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let metadata = open(dir.path()).await;
        propose_ok(&metadata, register(1)).await;
        propose_ok(&metadata, create_topic("before-snapshot", 1)).await;
        metadata.snapshot().await.expect("snapshot");
        assert!(dir.path().join("snapshot").join("snapshot.json").exists());
        // A second snapshot with nothing new applied also completes.
        metadata.snapshot().await.expect("second snapshot");

        propose_ok(&metadata, create_topic("after-snapshot", 2)).await;
        propose_ok(
            &metadata,
            Command::DeleteTopic {
                name: "before-snapshot".to_string(),
            },
        )
        .await;
        let before = metadata.state();
        metadata.shutdown().await.expect("shutdown");

        let reopened = open(dir.path()).await;
        assert_eq!(reopened.state(), before);
        assert!(reopened.state().topic("before-snapshot").is_none());
        assert!(reopened.state().topic("after-snapshot").is_some());
        propose_ok(&reopened, create_topic("after-reopen", 1)).await;
        let after = reopened.state();
        reopened.snapshot().await.expect("snapshot after reopen");
        reopened.shutdown().await.expect("shutdown");

        // Everything now comes from the snapshot alone.
        let third = open(dir.path()).await;
        assert_eq!(third.state(), after);
        third.shutdown().await.expect("shutdown");
    }

    #[tokio::test]
    async fn automatic_snapshots_purge_the_log_without_losing_state() {
        let dir = tempfile::tempdir().expect("tempdir");
        let metadata = open(dir.path()).await;
        propose_ok(&metadata, register(1)).await;
        let proposals = SNAPSHOT_EVERY_ENTRIES + 200;
        for _ in 0..proposals {
            propose_ok(&metadata, Command::AllocateProducerIds { count: 1 }).await;
        }
        metadata
            .raft()
            .wait(Some(Duration::from_secs(10)))
            .metrics(
                |m| m.purged.is_some(),
                "the log to be purged behind a snapshot",
            )
            .await
            .expect("purged");
        let before = metadata.state();
        assert_eq!(before.next_producer_id, 1000 + proposals as i64);
        metadata.shutdown().await.expect("shutdown");

        let reopened = open(dir.path()).await;
        assert_eq!(reopened.state(), before);
        reopened.shutdown().await.expect("shutdown");
    }

    #[tokio::test]
    async fn a_torn_log_tail_left_by_a_crash_does_not_stop_a_restart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let metadata = open(dir.path()).await;
        propose_ok(&metadata, register(1)).await;
        propose_ok(&metadata, create_topic("t", 1)).await;
        let before = metadata.state();
        metadata.shutdown().await.expect("shutdown");

        // What a crash in the middle of the next append leaves behind.
        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join(crate::log_store::LOG_FILE))
            .expect("open raft.log");
        std::io::Write::write_all(&mut log, &[200, 1, 0, 0, 1, 2, 3, 4, b'{']).expect("write");
        drop(log);

        let reopened = open(dir.path()).await;
        assert_eq!(reopened.state(), before);
        propose_ok(&reopened, create_topic("u", 1)).await;
        reopened.shutdown().await.expect("shutdown");
    }

    #[tokio::test]
    async fn a_store_of_another_node_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let metadata = open(dir.path()).await;
        metadata.shutdown().await.expect("shutdown");

        let err = Metadata::open_single_voter(MetadataOptions {
            node_id: 2,
            dir: dir.path().to_path_buf(),
        })
        .await
        .err()
        .expect("must refuse");
        assert!(matches!(err, MetadataError::Raft(_)), "{err}");
    }
}
