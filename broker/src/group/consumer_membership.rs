//! Membership under KIP-848's consumer protocol: ConsumerGroupHeartbeat and
//! ConsumerGroupDescribe drive [`super::consumer`] (the pure state) with the cluster's topics
//! and the broker's session settings; [`Coordinator::tick`] expires silent members. Whatever a
//! heartbeat or an expiry changed is appended to the group's partition of
//! `__consumer_offsets` ([`super::consumer_store`]), and the member is answered once the ISR
//! holds it ([`Appended::committed`]), so the coordinator that takes the group over next (the
//! new leader of that partition, from the ISR) carries on from the same epochs.
//!
//! A group id is one protocol's at a time: a consumer heartbeat to a classic group with
//! members, or a JoinGroup to a consumer group with members, is INCONSISTENT_GROUP_PROTOCOL
//! (Kafka 4.0 can migrate a group online between the two; Strata cannot yet).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::consumer::{Answer, ConsumerGroup, Heartbeat, Topics};
use super::{consumer_store, persist, Coordinator};
use crate::error::{ApiError, ErrorCode};
use crate::partition::Partition;

/// How long a heartbeat's records may take to reach the ISR: as an offset commit's.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(5);

impl Coordinator {
    /// Every topic's id and partition count, as subscriptions resolve against them.
    pub(super) fn topics(&self) -> Topics {
        let state = self.node.metadata.state();
        state
            .topics
            .values()
            .map(|t| (t.name.clone(), (t.topic_id, t.partitions.len() as i32)))
            .collect()
    }

    pub(super) fn consumer_session(&self) -> Duration {
        Duration::from_millis(self.node.config.group_consumer_session_timeout_ms)
    }

    /// One ConsumerGroupHeartbeat; `may_describe` as [`ConsumerGroup::heartbeat`] takes it.
    /// The answer is to be sent once what it appended is committed.
    pub fn consumer_heartbeat(
        &self,
        group_id: &str,
        hb: Heartbeat,
        may_describe: Option<&dyn Fn(&str) -> bool>,
    ) -> Result<(Answer, Option<Appended>), ApiError> {
        let topics = self.topics();
        let session = self.consumer_session();
        let mut groups = self.lock();
        // Only a joining member (epoch 0) makes a group: a refused heartbeat leaves no
        // empty group behind for ListGroups and ConsumerGroupDescribe to show.
        if hb.member_epoch != 0 && groups.get(group_id).is_none_or(|e| e.consumer.is_none()) {
            return Err(ApiError::new(
                ErrorCode::UnknownMemberId,
                heartbeat_refusal(ErrorCode::UnknownMemberId),
            ));
        }
        let entry = groups.entry(group_id.to_string()).or_default();
        if entry.share.as_ref().is_some_and(|g| !g.is_empty()) {
            return Err(ApiError::new(
                ErrorCode::GroupIdNotFound,
                format!("Group {group_id} is not a consumer group."),
            ));
        }
        if entry.group.as_ref().is_some_and(|g| !g.is_empty()) {
            return Err(ApiError::new(
                ErrorCode::InconsistentGroupProtocol,
                format!("{group_id} is a classic group with members"),
            ));
        }
        let group = entry.consumer.get_or_insert_with(ConsumerGroup::default);
        let epoch = group.epoch;
        let answer = group
            .heartbeat(
                hb,
                &topics,
                self.node.clock.instant(),
                session,
                || uuid::Uuid::new_v4().to_string(),
                may_describe,
            )
            .map_err(|code| ApiError::new(code, heartbeat_refusal(code)));
        // Even a refused heartbeat may have expired others: their records go too.
        let appended = self.store_consumer(group_id, group)?;
        let answer = answer?;
        if group.epoch != epoch {
            tracing::info!(
                group = group_id,
                epoch = group.epoch,
                members = group.members.len(),
                "consumer group rebalanced (KIP-848): new target assignment"
            );
        }
        entry.last_active_ms = self.node.clock.now_ms();
        Ok((answer, appended))
    }

    /// Consumer groups' silent members leave (called from [`Coordinator::tick`]).
    pub(super) fn expire_consumer_members(&self, now: Instant) {
        // Only groups with members can expire any: no topic map is built for none.
        let mut topics = None;
        let session = self.consumer_session();
        for (id, entry) in self.lock().iter_mut() {
            if let Some(g) = entry.consumer.as_mut().filter(|g| !g.is_empty()) {
                let topics = topics.get_or_insert_with(|| self.topics());
                if g.expire(now, session, topics) {
                    tracing::info!(group = %id, epoch = g.epoch, "consumer group members expired");
                    // Logged inside: the members are told at their next heartbeat.
                    let _ = self.store_consumer(id, g);
                }
            }
        }
    }

    /// Appends what changed in the group to its partition of `__consumer_offsets`. When that
    /// fails the change stands in memory (this coordinator is likely losing the partition)
    /// and the next change writes the whole group again; the member is told Kafka's error.
    fn store_consumer(
        &self,
        group_id: &str,
        group: &mut ConsumerGroup,
    ) -> Result<Option<Appended>, ApiError> {
        let changed = group.drain();
        if changed.is_empty() {
            return Ok(None);
        }
        let records: Vec<(Bytes, Option<Bytes>)> = changed
            .iter()
            .map(|(k, v)| {
                (
                    consumer_store::key(group_id, k),
                    v.as_ref().map(consumer_store::value),
                )
            })
            .collect();
        match self.persist(group_id, &records) {
            Ok((partition, leader_epoch, last_offset)) => Ok(Some(Appended {
                partition,
                leader_epoch,
                last_offset,
            })),
            Err(e) => {
                tracing::error!(group = group_id, error = %e, "cannot persist consumer group records");
                group.forget_written();
                Err(ApiError::new(persist::store_error(e.code), e.message))
            }
        }
    }

    /// A consumer group's state for ConsumerGroupDescribe; None: not a consumer group here.
    pub fn describe_consumer_group<T>(
        &self,
        group_id: &str,
        view: impl FnOnce(&ConsumerGroup) -> T,
    ) -> Option<T> {
        self.lock()
            .get(group_id)
            .and_then(|e| e.consumer.as_ref())
            .map(view)
    }
}

/// A consumer group's records appended for a heartbeat.
pub struct Appended {
    partition: Arc<Partition>,
    leader_epoch: i32,
    last_offset: i64,
}

impl Appended {
    /// Waits until the ISR holds the records: only then may the member act on its answer.
    pub async fn committed(self) -> Result<(), ApiError> {
        self.partition
            .wait_committed(self.last_offset, self.leader_epoch, COMMIT_TIMEOUT)
            .await
            .map_err(|code| {
                ApiError::new(
                    persist::store_error(code),
                    "the group's records did not reach the in-sync replicas in time",
                )
            })
    }
}

fn heartbeat_refusal(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::UnknownMemberId => "unknown member: join again with epoch 0",
        ErrorCode::FencedMemberEpoch => "the member epoch is not the member's: join again",
        ErrorCode::UnreleasedInstanceId => {
            "a live member holds this group.instance.id: it must leave or expire first"
        }
        ErrorCode::FencedInstanceId => "the group.instance.id is another member's now",
        _ => "invalid member epoch",
    }
}
