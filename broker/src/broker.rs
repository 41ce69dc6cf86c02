//! What a request handler reaches: the [`Node`] and the subsystems built on it. This is the one
//! place that holds them all; no subsystem imports it (they take the `Arc<Node>` they need),
//! so adding a subsystem is a field here and a start-up line in `serve`.

use std::sync::Arc;

use crate::fetch_session::FetchSessions;
use crate::group::lag::LagTracker;
use crate::group::Coordinator;
#[cfg(feature = "iceberg")]
use crate::iceberg::Iceberg;
use crate::loggers::Loggers;
use crate::node::Node;
use crate::quota::Quotas;
use crate::replication::fetcher::Fetchers;
use crate::replication::isr::IsrProposals;
use crate::security::Security;
use crate::share::Shares;
use crate::telemetry::ClientTelemetry;
use crate::tier::Tier;
use crate::txn::TxnCoordinator;

pub struct Broker {
    pub node: Arc<Node>,
    /// The group coordinator.
    pub groups: Arc<Coordinator>,
    /// The transaction coordinator.
    pub txn: Arc<TxnCoordinator>,
    /// Consumer lag, sampled by housekeeping.
    pub lag: LagTracker,
    /// Object storage and its read cache, for remote reads and the offload tasks.
    pub tier: Arc<Tier>,
    /// Topics' Iceberg tables: their catalog and the translator.
    #[cfg(feature = "iceberg")]
    pub iceberg: Arc<Iceberg>,
    /// The follower side of replication.
    pub fetchers: Fetchers,
    /// The leader side's ISR changes, on their way to the quorum.
    pub isr: IsrProposals,
    /// Incremental fetch sessions of consumers and followers.
    pub fetch_sessions: FetchSessions,
    /// TLS and authentication.
    pub security: Arc<Security>,
    /// Client quotas.
    pub quotas: Quotas,
    /// Log levels, changed at run time through BROKER_LOGGER configs.
    pub loggers: Loggers,
    /// Metrics clients push (KIP-714).
    pub telemetry: Arc<ClientTelemetry>,
    /// Share groups' records at the partitions led here (KIP-932).
    pub shares: Shares,
}

impl Broker {
    pub fn new(
        node: Arc<Node>,
        tier: Arc<Tier>,
        #[cfg(feature = "iceberg")] iceberg: Arc<Iceberg>,
        security: Arc<Security>,
        loggers: Loggers,
    ) -> Broker {
        let fetch_sessions =
            FetchSessions::new(node.config.max_incremental_fetch_session_cache_slots);
        fetch_sessions.register_metrics(&node);
        let groups = Arc::new(Coordinator::new(node.clone()));
        Broker {
            fetch_sessions,
            groups: groups.clone(),
            txn: TxnCoordinator::new(node.clone(), groups),
            lag: LagTracker::new(node.clone()),
            fetchers: Fetchers::new(node.clone(), tier.clone()),
            isr: IsrProposals::new(node.clone()),
            quotas: Quotas::new(node.clone()),
            telemetry: ClientTelemetry::new(&node.config, &node.metrics, node.clock.clone()),
            shares: Shares::new(node.clone(), tier.clone()),
            tier,
            #[cfg(feature = "iceberg")]
            iceberg,
            security,
            loggers,
            node,
        }
    }
}
