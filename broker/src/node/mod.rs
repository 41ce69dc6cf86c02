//! The node: the shared core beneath every subsystem. It holds this broker's settings, the
//! metadata quorum handle, the hosted partitions, the metrics registry and the clock, and the
//! operations on them that several subsystems need: bringing partitions in line with the
//! metadata state, finding the partition a request may be served from, proposing commands
//! ([`Node::apply`]), topic creation ([`topics`]), producer ids, and on the controller node
//! the growth of internal topics, the automatic balancer ([`balancer`]) and pinned leaders
//! ([`leader_pins`]); and this broker's zone ([`crate::zones::Zones`]).
//!
//! Every subsystem (groups, consumer lag, the tier, replication, the cleaner, the session with
//! the controller) takes an `Arc<Node>`; none of them imports the [`crate::broker::Broker`]
//! that holds them, and this module imports no subsystem.

mod balancer;
mod leader_pins;
mod log_dirs;
mod topics;
pub use topics::validate_topic_name;

pub use balancer::AutoBalance;

use std::collections::HashMap;
use std::sync::Arc;

use strata_metadata::{Command, CommandResult, Endpoint, Metadata};
use tokio::sync::Mutex;

use crate::clock::Clock;
use crate::config::BrokerConfig;
use crate::dynamic_config::DynamicConfig;
use crate::error::{ApiError, ErrorCode};
use crate::metrics::Metrics;
use crate::partition::{Partition, Partitions};
use crate::zones::{Selector, Zones};

pub struct Node {
    /// The settings the broker started with (file, environment, flags). Those that may
    /// change at run time are read through [`Node::settings`].
    pub config: BrokerConfig,
    dynamic: Arc<DynamicConfig>,
    /// What clients are told, per listener (each listener's advertised address).
    pub endpoints: Vec<Endpoint>,
    /// The listener other brokers reach this one on.
    pub inter_broker_listener: String,
    /// The admin HTTP port's address as the other brokers reach it (`host:port`).
    pub admin_endpoint: Option<String>,
    pub metadata: Metadata,
    pub partitions: Arc<Partitions>,
    pub metrics: Metrics,
    pub clock: Clock,
    /// This broker's zone, its replica selector, its traffic by zone crossed.
    pub zones: Zones,
    /// When each leader this broker follows last answered a replica fetch.
    leaders_heard: std::sync::Mutex<HashMap<u64, std::time::Instant>>,
    /// The block of producer ids reserved through the quorum: (next, end).
    producer_ids: Mutex<(i64, i64)>,
}

/// Producer ids reserved per quorum write.
const PRODUCER_ID_BLOCK: u64 = 1000;

impl Node {
    pub fn new(
        config: BrokerConfig,
        endpoints: Vec<Endpoint>,
        inter_broker_listener: String,
        admin_endpoint: Option<String>,
        metadata: Metadata,
        metrics: Metrics,
        clock: Clock,
    ) -> Node {
        let dynamic = Arc::new(DynamicConfig::new(config.clone()));
        let partitions = Arc::new(Partitions::new(&config, dynamic.clone(), clock.clone()));
        crate::partition::metrics::register(&metrics, &partitions);
        metrics.watch_cluster(metadata.clone());
        // `validate` refused an unknown selector before the node was made.
        let selector = Selector::from_config(config.replica_selector_class.as_deref())
            .unwrap_or(Selector::Leader);
        let zones = Zones::new(config.rack.clone(), selector, &metrics);
        Node {
            zones,
            leaders_heard: std::sync::Mutex::new(HashMap::new()),
            config,
            dynamic,
            endpoints,
            inter_broker_listener,
            admin_endpoint,
            metadata,
            partitions,
            metrics,
            clock,
            producer_ids: Mutex::new((0, 0)),
        }
    }

    /// The settings in force: [`Node::config`] with the dynamic broker configs stored in the
    /// quorum (see [`crate::dynamic_config`]). Cheap while they do not change.
    pub fn settings(&self) -> Arc<BrokerConfig> {
        self.dynamic.current(&self.metadata.state())
    }

    /// Brings local logs in line with the metadata state.
    ///
    /// Opening or deleting logs is blocking file I/O (creating `__consumer_offsets` opens 50
    /// logs and fsyncs each): it runs with `block_in_place`, so the Kafka tasks queued on this
    /// worker move to another one instead of waiting behind it.
    pub fn sync_partitions(&self) -> Result<(), ApiError> {
        let sync = || {
            self.partitions
                .sync(|| self.metadata.state())
                .map_err(|e| ApiError::new(ErrorCode::KafkaStorageError, e.to_string()))
        };
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(sync),
            _ => sync(),
        }
    }

    /// The partition, if this broker leads it: the one check before serving a produce, a
    /// fetch or an offset lookup. `current_leader_epoch` (-1: not given) is the epoch the
    /// client believes current, as Kafka's Fetch and ListOffsets carry it.
    pub fn leader_partition(
        &self,
        topic: &str,
        partition: i32,
        current_leader_epoch: i32,
    ) -> Result<Arc<Partition>, ApiError> {
        let state = self.metadata.state();
        let hosted = self.partitions.hosted();
        self.check_leader(
            topic,
            partition,
            state.partition(topic, partition),
            hosted.get(topic, partition),
            current_leader_epoch,
        )
    }

    /// [`Node::leader_partition`] for a caller that looked the partition up already (in the
    /// metadata state and among the hosted partitions): a fetch naming thousands of
    /// partitions resolves each topic once. Allocates only to describe an error.
    pub fn check_leader(
        &self,
        topic: &str,
        partition: i32,
        info: Option<&strata_metadata::PartitionInfo>,
        hosted: Option<&Arc<Partition>>,
        current_leader_epoch: i32,
    ) -> Result<Arc<Partition>, ApiError> {
        let info = info.ok_or_else(|| {
            ApiError::new(
                ErrorCode::UnknownTopicOrPartition,
                format!("unknown partition {topic}-{partition}"),
            )
        })?;
        check_epoch(topic, partition, info, current_leader_epoch)?;
        let not_leader = || {
            ApiError::new(
                ErrorCode::NotLeaderOrFollower,
                match info.leader {
                    Some(l) => format!("{topic}-{partition} is led by broker {l}"),
                    None => format!("{topic}-{partition} has no leader (offline)"),
                },
            )
        };
        if info.leader != Some(self.config.node_id) {
            return Err(not_leader());
        }
        // Led here but not opened yet: the metadata change is being applied.
        hosted.cloned().ok_or_else(not_leader)
    }

    /// Leader `leader` answered a replica fetch (the fetcher calls this once per round).
    pub fn heard_from_leader(&self, leader: u64) {
        let now = self.clock.instant();
        (self.leaders_heard.lock().unwrap_or_else(|p| p.into_inner())).insert(leader, now);
    }

    /// Whether `leader` answered a replica fetch within `replica_lag_time_max_ms`: if not, it
    /// has dropped this replica from the ISR, or will, whether or not this broker's copy of the
    /// state shows it yet (a follower cut off from the others hears of nothing).
    fn hears_from(&self, leader: u64) -> bool {
        let heard = (self.leaders_heard.lock().unwrap_or_else(|p| p.into_inner()))
            .get(&leader)
            .copied();
        let max_lag = std::time::Duration::from_millis(self.config.replica_lag_time_max_ms);
        heard.is_some_and(|at| self.clock.instant().saturating_duration_since(at) <= max_lag)
    }

    /// The partition, if a consumer may read it here: led here (as [`Node::check_leader`]),
    /// or followed here by a replica in the ISR that follows the leader and epoch the
    /// metadata names (KIP-392; docs/invariants.md 16). A follower out of the ISR answers
    /// OFFSET_NOT_AVAILABLE and one that is no replica NOT_LEADER_OR_FOLLOWER: either sends
    /// the client back to the leader.
    pub fn check_replica(
        &self,
        topic: &str,
        partition: i32,
        info: Option<&strata_metadata::PartitionInfo>,
        hosted: Option<&Arc<Partition>>,
        current_leader_epoch: i32,
    ) -> Result<Arc<Partition>, ApiError> {
        let me = self.config.node_id;
        let led_here = info.is_some_and(|i| i.leader == Some(me));
        let follower = info.filter(|i| !led_here && i.leader.is_some() && i.replicas.contains(&me));
        let (Some(info), Some(p)) = (follower, hosted) else {
            return self.check_leader(topic, partition, info, hosted, current_leader_epoch);
        };
        // The epoch checks are the leader's: a client a step behind or ahead hears it here too.
        check_epoch(topic, partition, info, current_leader_epoch)?;
        if p.replication().following() != info.leader.map(|l| (l, info.leader_epoch)) {
            // The metadata change is being applied.
            return Err(ApiError::new(
                ErrorCode::NotLeaderOrFollower,
                format!("{topic}-{partition}: this replica is changing its role"),
            ));
        }
        let in_touch = info.leader.is_some_and(|l| self.hears_from(l));
        if !info.isr.contains(&me) || !in_touch {
            return Err(ApiError::new(
                ErrorCode::OffsetNotAvailable,
                format!("{topic}-{partition}: this replica is out of sync; read from the leader"),
            ));
        }
        Ok(p.clone())
    }

    /// Proposes a command and turns a rejection into the Kafka error for it.
    pub async fn apply(&self, cmd: Command) -> Result<CommandResult, ApiError> {
        let result = self
            .metadata
            .propose(cmd)
            .await
            .map_err(|e| ApiError::new(ErrorCode::NotController, e.to_string()))?;
        match result {
            CommandResult::Ok
            | CommandResult::ProducerIds { .. }
            | CommandResult::BrokerRegistered { .. }
            | CommandResult::Each(_) => Ok(result),
            CommandResult::TopicAlreadyExists => Err(ApiError::new(
                ErrorCode::TopicAlreadyExists,
                "topic already exists",
            )),
            CommandResult::UnknownTopic => Err(ApiError::new(
                ErrorCode::UnknownTopicOrPartition,
                "unknown topic",
            )),
            CommandResult::InvalidPartitions(m) => {
                Err(ApiError::new(ErrorCode::InvalidPartitions, m))
            }
            CommandResult::InvalidReplicaAssignment(m) => {
                Err(ApiError::new(ErrorCode::InvalidReplicaAssignment, m))
            }
            CommandResult::UnknownPartition => Err(ApiError::new(
                ErrorCode::UnknownTopicOrPartition,
                "unknown partition",
            )),
            CommandResult::FencedLeaderEpoch { current } => Err(ApiError::new(
                ErrorCode::FencedLeaderEpoch,
                format!("leader epoch is now {current}"),
            )),
            CommandResult::InvalidRemoteSegment(m) => {
                Err(ApiError::new(ErrorCode::KafkaStorageError, m))
            }
            CommandResult::InvalidUpdateVersion { current } => Err(ApiError::new(
                ErrorCode::InvalidUpdateVersion,
                format!("partition epoch is now {current}"),
            )),
            CommandResult::InvalidIsr(m) => Err(ApiError::new(ErrorCode::InvalidRequest, m)),
            CommandResult::BrokerInUse(m) => Err(ApiError::new(ErrorCode::InvalidRequest, m)),
            CommandResult::NoReassignmentInProgress => Err(ApiError::new(
                ErrorCode::NoReassignmentInProgress,
                "no reassignment is in progress for this partition",
            )),
            CommandResult::InvalidRequest(m) => Err(ApiError::new(ErrorCode::InvalidRequest, m)),
            CommandResult::NotFound => Err(ApiError::new(
                ErrorCode::ResourceNotFound,
                "no such resource",
            )),
            CommandResult::UnknownBroker | CommandResult::StaleBrokerEpoch { .. } => Err(
                ApiError::new(ErrorCode::StaleBrokerEpoch, format!("{result:?}")),
            ),
            CommandResult::IcebergConflict { .. } | CommandResult::IcebergOffsetsMoved { .. } => {
                Err(ApiError::new(
                    ErrorCode::ConcurrentTransactions,
                    "the Iceberg table changed meanwhile",
                ))
            }
        }
    }

    /// A fresh producer id from the reserved block, reserving a new block when it runs out.
    pub async fn next_producer_id(&self) -> Result<i64, ApiError> {
        let mut ids = self.producer_ids.lock().await;
        if ids.0 >= ids.1 {
            match self
                .apply(Command::AllocateProducerIds {
                    count: PRODUCER_ID_BLOCK,
                })
                .await?
            {
                CommandResult::ProducerIds { first, count } => *ids = (first, first + count as i64),
                other => {
                    return Err(ApiError::new(
                        ErrorCode::UnknownServerError,
                        format!("unexpected {other:?}"),
                    ));
                }
            }
        }
        let id = ids.0;
        ids.0 += 1;
        Ok(id)
    }
}

/// A client's `current_leader_epoch` against the metadata's (-1: not checked): older is
/// FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH (this broker has not caught up yet).
fn check_epoch(
    topic: &str,
    partition: i32,
    info: &strata_metadata::PartitionInfo,
    current_leader_epoch: i32,
) -> Result<(), ApiError> {
    if current_leader_epoch >= 0 && current_leader_epoch < info.leader_epoch {
        return Err(ApiError::new(
            ErrorCode::FencedLeaderEpoch,
            format!(
                "{topic}-{partition}: leader epoch {current_leader_epoch} is older than the current {}",
                info.leader_epoch
            ),
        ));
    }
    if current_leader_epoch > info.leader_epoch {
        return Err(ApiError::new(
            ErrorCode::UnknownLeaderEpoch,
            format!(
                "{topic}-{partition}: leader epoch {current_leader_epoch} is newer than this broker knows ({})",
                info.leader_epoch
            ),
        ));
    }
    Ok(())
}
