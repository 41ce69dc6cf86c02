//! Topic operations every handler and subsystem shares: validating names and counts, placing
//! replicas, creating topics and partitions through the quorum, and auto-creation.

use std::collections::BTreeMap;
use std::sync::Arc;

use strata_metadata::{Command, TopicInfo};
use uuid::Uuid;

use super::Node;
use crate::error::{ApiError, ErrorCode};
use crate::topic_config;

/// Internal-topic partitions growing to their replication factor at once.
const GROW_MOVES: usize = 10;

/// Kafka's legal topic names: 1–249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::InvalidTopicException,
            format!(
                "invalid topic name '{name}': 1-249 characters of [a-zA-Z0-9._-], not '.' or '..'"
            ),
        ))
    }
}

impl Node {
    /// Places `count` partitions of `rf` replicas over the live brokers ([`crate::placement`]),
    /// rack-aware, from a start derived from the topic name so topics spread their leaders.
    fn place(
        &self,
        name: &str,
        first_partition: usize,
        count: usize,
        rf: usize,
    ) -> Result<Vec<Vec<u64>>, ApiError> {
        // Fenced brokers (stopped, or silent) get no new replicas.
        let brokers: Vec<crate::placement::Candidate> = self
            .metadata
            .state()
            .brokers
            .values()
            .filter(|b| !b.fenced)
            .map(|b| crate::placement::Candidate {
                id: b.node_id,
                rack: b.rack.clone(),
            })
            .collect();
        let start = name
            .bytes()
            .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize));
        crate::placement::place(&brokers, start, first_partition, count, rf).map_err(|e| {
            ApiError::new(
                ErrorCode::InvalidReplicationFactor,
                format!(
                    "replication factor {} with {} available broker(s)",
                    e.wanted, e.available
                ),
            )
        })
    }

    /// Creates a topic through the quorum and opens its local partitions.
    /// `assignments`, when given, fixes the replicas of every partition.
    pub async fn create_topic(
        &self,
        name: &str,
        num_partitions: i32,
        replication_factor: i16,
        assignments: Option<Vec<Vec<u64>>>,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<TopicInfo, ApiError> {
        // Kafka's precedence: a bad name, then existence, then configs, then partitions and
        // replication factor (so a topic that exists is TOPIC_ALREADY_EXISTS even while too
        // few brokers are live to place it again).
        validate_topic_name(name)?;
        if self.metadata.state().topic(name).is_some() {
            return Err(ApiError::new(
                ErrorCode::TopicAlreadyExists,
                format!("topic '{name}' already exists"),
            ));
        }
        for (k, v) in &configs {
            topic_config::validate(k, v).map_err(|m| ApiError::new(ErrorCode::InvalidConfig, m))?;
        }
        topic_config::validate_combination(&self.settings(), &configs)
            .map_err(|m| ApiError::new(ErrorCode::InvalidConfig, m))?;
        let replicas = match assignments {
            Some(a) => {
                if num_partitions != -1 || replication_factor != -1 {
                    return Err(ApiError::new(
                        ErrorCode::InvalidRequest,
                        "give either replica assignments or partitions and replication factor",
                    ));
                }
                self.check_partition_count(i32::try_from(a.len()).unwrap_or(i32::MAX))?;
                a
            }
            None => {
                let partitions = if num_partitions == -1 {
                    self.config.num_partitions as i32
                } else {
                    num_partitions
                };
                self.check_partition_count(partitions)?;
                let rf = if replication_factor == -1 {
                    self.config.default_replication_factor as i16
                } else {
                    replication_factor
                };
                if rf <= 0 {
                    return Err(ApiError::new(
                        ErrorCode::InvalidReplicationFactor,
                        format!("replication factor {rf}"),
                    ));
                }
                let mut placed = self.place(name, 0, partitions as usize, rf as usize)?;
                // Pinned leaders lead from the start (see `leader_pins.rs`).
                let racks = topic_config::pinned_racks(&configs);
                if !racks.is_empty() {
                    let state = self.metadata.state();
                    let rack_of = |id| state.brokers.get(&id).and_then(|b| b.rack.as_deref());
                    for replicas in &mut placed {
                        crate::placement::pin_leader(replicas, rack_of, &racks);
                    }
                }
                placed
            }
        };
        if validate_only {
            return Ok(TopicInfo {
                name: name.to_string(),
                topic_id: Uuid::nil(),
                partitions: vec![],
                configs,
                iceberg: None,
                iceberg_dlq: None,
            });
        }
        let cmd = Command::CreateTopic {
            name: name.to_string(),
            topic_id: Uuid::new_v4(),
            replicas,
            configs,
        };
        self.apply(cmd).await?;
        self.sync_partitions()?;
        self.metadata.state().topic(name).cloned().ok_or_else(|| {
            ApiError::new(
                ErrorCode::UnknownServerError,
                "topic vanished after creation",
            )
        })
    }

    /// The replication factor of an internal topic (`offsets_topic_replication_factor`, or
    /// `transaction_state_log_replication_factor` for `__transaction_state`), or every
    /// broker of a smaller cluster. The cluster's size is the larger of the brokers registered
    /// and the metadata voters, so a topic created while voters are still starting waits for
    /// them (placement refuses until enough brokers are live) instead of getting fewer replicas
    /// for good.
    fn internal_replication_factor(&self, name: &str) -> usize {
        let brokers = self.metadata.state().brokers.len();
        let voters = self.metadata.status().voters.len();
        self.internal_wanted_replicas(name)
            .min(brokers.max(voters).max(1))
    }

    /// The replication factor an internal topic is configured for.
    fn internal_wanted_replicas(&self, name: &str) -> usize {
        if name == "__transaction_state" {
            self.config.transaction_state_log_replication_factor as usize
        } else {
            self.config.offsets_topic_replication_factor as usize
        }
    }

    /// On the controller: internal topics created when the cluster was smaller (a single
    /// broker, say) grow to `offsets_topic_replication_factor` as brokers join, by
    /// reassignment (new replicas copy the log and join the ISR like any move). At most
    /// [`GROW_MOVES`] partitions move at once.
    pub async fn grow_internal_topics(&self) {
        let state = self.metadata.state();
        let live: Vec<crate::placement::Candidate> = state
            .brokers
            .values()
            .filter(|b| !b.fenced)
            .map(|b| crate::placement::Candidate {
                id: b.node_id,
                rack: b.rack.clone(),
            })
            .collect();
        let internal = || state.topics.values().filter(|t| t.name.starts_with("__"));
        let moving = internal()
            .flat_map(|t| &t.partitions)
            .filter(|p| p.is_moving())
            .count();
        let mut room = GROW_MOVES.saturating_sub(moving);
        if room == 0 {
            return;
        }
        let mut load: BTreeMap<u64, usize> = BTreeMap::new();
        for p in state.topics.values().flat_map(|t| &t.partitions) {
            for r in &p.replicas {
                *load.entry(*r).or_default() += 1;
            }
        }
        for t in internal() {
            let wanted = self.internal_wanted_replicas(&t.name).min(live.len());
            for (i, p) in t.partitions.iter().enumerate() {
                if room == 0 {
                    return;
                }
                if p.is_moving() || p.replication_factor() >= wanted {
                    continue;
                }
                let added = crate::placement::grow(&live, &load, &p.replicas, wanted);
                if added.is_empty() {
                    continue;
                }
                for b in &added {
                    *load.entry(*b).or_default() += 1;
                }
                let target: Vec<u64> = p.replicas.iter().chain(added.iter()).copied().collect();
                match self
                    .apply(Command::ReassignPartition {
                        topic: t.name.clone(),
                        partition: i as i32,
                        target: Some(target.clone()),
                    })
                    .await
                {
                    Ok(_) => {
                        tracing::info!(topic = %t.name, partition = i, replicas = ?target,
                            "growing an internal topic to its replication factor");
                        room -= 1;
                    }
                    Err(e) => {
                        tracing::warn!(topic = %t.name, partition = i, error = %e, "cannot grow an internal topic");
                        return;
                    }
                }
            }
        }
    }

    /// Creates an internal topic (names starting with `__`) with broker-chosen configs, which
    /// bypass the client-facing validation.
    pub async fn create_internal_topic(
        &self,
        name: &str,
        partitions: usize,
        configs: BTreeMap<String, String>,
    ) -> Result<(), ApiError> {
        let replicas = self.place(name, 0, partitions, self.internal_replication_factor(name))?;
        self.apply(Command::CreateTopic {
            name: name.to_string(),
            topic_id: Uuid::new_v4(),
            replicas,
            configs,
        })
        .await?;
        self.sync_partitions()
    }

    /// A topic's partition count comes from a client: it must be positive and at most
    /// `max_partitions_per_topic` before anything (placement, the quorum) is sized by it.
    fn check_partition_count(&self, partitions: i32) -> Result<(), ApiError> {
        let max = self.config.max_partitions_per_topic;
        if partitions <= 0 || partitions as u64 > max as u64 {
            return Err(ApiError::new(
                ErrorCode::InvalidPartitions,
                format!(
                    "{partitions} partitions: a topic has 1 to {max} (max_partitions_per_topic)"
                ),
            ));
        }
        Ok(())
    }

    /// Adds partitions so the topic has `total`.
    pub async fn create_partitions(
        &self,
        name: &str,
        total: i32,
        assignments: Option<Vec<Vec<u64>>>,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        let state = self.metadata.state();
        let topic = state.topic(name).ok_or_else(|| {
            ApiError::new(
                ErrorCode::UnknownTopicOrPartition,
                format!("unknown topic '{name}'"),
            )
        })?;
        let current = topic.partitions.len();
        self.check_partition_count(total)?;
        if total as usize <= current {
            return Err(ApiError::new(
                ErrorCode::InvalidPartitions,
                format!("topic '{name}' has {current} partitions; the new count must be greater, got {total}"),
            ));
        }
        let new = total as usize - current;
        let rf = (topic.partitions.first()).map_or(1, |p| p.replication_factor());
        let new_replicas = match assignments {
            Some(a) if a.len() != new => {
                return Err(ApiError::new(
                    ErrorCode::InvalidReplicaAssignment,
                    format!("{} assignments for {new} new partitions", a.len()),
                ))
            }
            // Checked here too, so that validate_only answers what the change would.
            Some(a) => match state.check_assignment(&a, current, Some(rf)) {
                Ok(()) => a,
                Err(why) => return Err(ApiError::new(ErrorCode::InvalidReplicaAssignment, why)),
            },
            None => self.place(name, current, new, rf)?,
        };
        if validate_only {
            return Ok(());
        }
        self.apply(Command::CreatePartitions {
            name: name.to_string(),
            new_replicas,
        })
        .await?;
        self.sync_partitions()
    }

    /// The topic, auto-creating it when allowed. `Ok(None)` means unknown and not created.
    pub async fn topic_or_create(
        &self,
        name: &str,
        allow: impl FnOnce() -> bool,
    ) -> Result<Option<Arc<TopicInfo>>, ApiError> {
        // Shared, not copied: a topic of 10,000 partitions is one reference count.
        if let Some(t) = self.metadata.state().topics.get(name) {
            return Ok(Some(t.clone()));
        }
        if !(self.config.auto_create_topics_enable && allow()) {
            return Ok(None);
        }
        match self
            .create_topic(name, -1, -1, None, BTreeMap::new(), false)
            .await
        {
            Ok(t) => {
                tracing::info!(topic = name, "auto-created topic");
                Ok(Some(Arc::new(t)))
            }
            // Another request created it first.
            Err(e) if e.code == ErrorCode::TopicAlreadyExists => {
                Ok(self.metadata.state().topics.get(name).cloned())
            }
            Err(e) => Err(e),
        }
    }
}
