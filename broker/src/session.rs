//! The broker's session with the controller: registration, heartbeats, controlled shutdown.
//!
//! At start-up the broker registers (a new broker epoch; it starts fenced), then heartbeats
//! until the controller unfences it and this node has applied that, and only then opens its
//! partitions and listens. While it runs it heartbeats every `broker_heartbeat_interval_ms`;
//! the controller fences a broker silent for `broker_session_timeout_ms`, which moves the
//! leadership of its partitions. A clean stop asks to be fenced first (Kafka's controlled
//! shutdown), so leadership moves at once rather than after the session timeout.
//!
//! Invariants:
//! - The broker serves nothing before its registration is unfenced in its own copy of the
//!   state: leadership checks read that copy.
//! - A heartbeat answered `StaleEpoch` (another process registered this node id since, or
//!   the state was restored without this registration) registers again rather than carrying
//!   on with an epoch the controller does not know.

use std::sync::Arc;
use std::time::Duration;

use strata_metadata::{Command, CommandResult, Heartbeat, HeartbeatReply};
use tokio::sync::watch;

use crate::node::Node;

/// How long start-up waits for the controller to unfence this node.
const UNFENCE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a controlled shutdown waits for the fence to be applied here.
const SHUTDOWN_FENCE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why this broker could not join the cluster at start-up.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Quorum(#[from] strata_metadata::MetadataError),
    #[error("registration refused: {0}")]
    Refused(String),
    #[error("registration epoch {epoch} was replaced (now {current:?}) during start-up: is another process running as node {node_id}?")]
    Replaced {
        epoch: i64,
        current: Option<i64>,
        node_id: u64,
    },
    #[error("the controller did not unfence this broker within {0:?}")]
    NotUnfenced(Duration),
}

/// Registers this broker under a new epoch and returns it.
pub async fn register(node: &Node) -> Result<i64, SessionError> {
    let inter_broker = node
        .endpoints
        .iter()
        .find(|e| e.name == node.inter_broker_listener)
        .expect("the inter-broker listener is one of the listeners (checked with the config)");
    let cmd = Command::RegisterBroker {
        node_id: node.config.node_id,
        host: inter_broker.host.clone(),
        port: inter_broker.port,
        rack: node.config.rack.clone(),
        listeners: node.endpoints.clone(),
        admin: node.admin_endpoint.clone(),
    };
    match node.metadata.propose(cmd).await? {
        CommandResult::BrokerRegistered { epoch } => {
            tracing::info!(
                node_id = node.config.node_id,
                epoch,
                "registered with the controller"
            );
            Ok(epoch)
        }
        other => Err(SessionError::Refused(format!("{other:?}"))),
    }
}

fn heartbeat(node: &Node, epoch: i64, shutting_down: bool) -> Heartbeat {
    Heartbeat {
        node_id: node.config.node_id,
        epoch,
        shutting_down,
    }
}

/// Heartbeats until the controller unfences registration `epoch` and this node applied it.
pub async fn wait_unfenced(node: &Node, epoch: i64) -> Result<(), SessionError> {
    let node_id = node.config.node_id;
    let deadline = tokio::time::Instant::now() + UNFENCE_TIMEOUT;
    let interval = Duration::from_millis(node.config.broker_heartbeat_interval_ms);
    loop {
        match node.metadata.heartbeat(heartbeat(node, epoch, false)).await {
            Ok(HeartbeatReply::Alive { fenced: false }) => break,
            Ok(HeartbeatReply::Alive { fenced: true }) => {}
            Ok(HeartbeatReply::StaleEpoch { current }) => {
                return Err(SessionError::Replaced {
                    epoch,
                    current,
                    node_id,
                });
            }
            Err(e) => {
                tracing::info!(error = %e, "waiting for the controller to unfence this broker")
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(SessionError::NotUnfenced(UNFENCE_TIMEOUT));
        }
        tokio::time::sleep(interval).await;
    }
    node.metadata
        .wait_for_state(
            UNFENCE_TIMEOUT,
            "this broker's unfencing to apply here",
            |s| {
                s.brokers
                    .get(&node_id)
                    .is_some_and(|b| b.epoch == epoch && !b.fenced)
            },
        )
        .await?;
    tracing::info!(node_id, epoch, "unfenced by the controller");
    Ok(())
}

/// Heartbeats until shutdown, then asks to be fenced (controlled shutdown).
pub async fn run(node: Arc<Node>, mut epoch: i64, mut shutdown: watch::Receiver<bool>) {
    let interval = Duration::from_millis(node.config.broker_heartbeat_interval_ms);
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing_since: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => break,
        }
        // A heartbeat without a metadata leader waits up to its timeout (10 s): shutdown
        // must not wait behind it (a stopping cluster's last voters have no leader).
        let beat = tokio::select! {
            r = node.metadata.heartbeat(heartbeat(&node, epoch, false)) => r,
            _ = shutdown.changed() => break,
        };
        match beat {
            Ok(HeartbeatReply::Alive { fenced }) => {
                node.metrics.heartbeat(true);
                if let Some(since) = failing_since.take() {
                    tracing::info!(
                        failed_for_ms = since.elapsed().as_millis() as u64,
                        fenced,
                        "heartbeats reach the controller again"
                    );
                }
            }
            Ok(HeartbeatReply::StaleEpoch { current }) => {
                tracing::warn!(
                    epoch,
                    ?current,
                    "the controller does not know this registration: registering again"
                );
                match register(&node).await {
                    Ok(e) => epoch = e,
                    Err(e) => tracing::warn!(error = %e, "registering again failed; will retry"),
                }
            }
            Err(e) => {
                node.metrics.heartbeat(false);
                let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
                tracing::warn!(
                    error = %e,
                    failing_for_ms = since.elapsed().as_millis() as u64,
                    "heartbeat to the controller failed"
                );
            }
        }
    }
    controlled_shutdown(&node, epoch).await;
}

/// Asks the controller to fence this broker and waits until that applied here, for at most
/// [`SHUTDOWN_FENCE_TIMEOUT`] (the last voters of a stopping cluster have no quorum left).
async fn controlled_shutdown(node: &Node, epoch: i64) {
    if tokio::time::timeout(SHUTDOWN_FENCE_TIMEOUT, fence_self(node, epoch))
        .await
        .is_err()
    {
        tracing::warn!(
            "controlled shutdown: no answer within {SHUTDOWN_FENCE_TIMEOUT:?}; partitions move after the session timeout"
        );
    }
}

async fn fence_self(node: &Node, epoch: i64) {
    let node_id = node.config.node_id;
    match node.metadata.heartbeat(heartbeat(node, epoch, true)).await {
        Ok(HeartbeatReply::Alive { fenced: true }) => {
            let applied = node
                .metadata
                .wait_for_state(
                    SHUTDOWN_FENCE_TIMEOUT,
                    "this broker's fence to apply here",
                    |s| {
                        s.brokers
                            .get(&node_id)
                            .is_none_or(|b| b.fenced || b.epoch != epoch)
                    },
                )
                .await;
            match applied {
                Ok(_) => tracing::info!(node_id, "controlled shutdown: fenced, leadership moved"),
                Err(e) => tracing::warn!(error = %e, "controlled shutdown: fence not seen here"),
            }
        }
        other => tracing::warn!(
            answer = ?other,
            "controlled shutdown refused or unreachable; partitions move after the session timeout"
        ),
    }
}
