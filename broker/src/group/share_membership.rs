//! Membership of share groups (KIP-932): ShareGroupHeartbeat and ShareGroupDescribe drive
//! [`super::share`] (the pure state) with the cluster's topics; [`Coordinator::tick`] expires
//! silent members.
//!
//! A group id is one kind of group at a time: a share heartbeat to a classic or consumer group
//! is GROUP_ID_NOT_FOUND ("is not a share group"), as Kafka answers it, and a classic or
//! consumer member joining a share group is refused the same way in reverse.
//!
//! Share group membership lives in memory only: a coordinator that takes a share group over
//! (failover, restart) answers its members' next heartbeat UNKNOWN_MEMBER_ID and they join
//! again with the ids they keep, which costs one heartbeat and no record: what a member holds
//! is the partitions' leaders', not the coordinator's.

use std::time::{Duration, Instant};

use super::share::{Answer, Heartbeat, ShareGroup};
use super::Coordinator;
use crate::error::{ApiError, ErrorCode};

impl Coordinator {
    fn share_session(&self) -> Duration {
        Duration::from_millis(self.node.config.group_share_session_timeout_ms)
    }

    /// One ShareGroupHeartbeat.
    pub fn share_heartbeat(&self, group_id: &str, hb: Heartbeat) -> Result<Answer, ApiError> {
        let topics = self.topics();
        let now = self.node.clock.instant();
        let mut groups = self.lock();
        if let Some(e) = groups.get(group_id) {
            let other = e.group.as_ref().is_some_and(|g| !g.is_empty())
                || e.consumer.as_ref().is_some_and(|g| !g.is_empty())
                || (e.share.is_none() && !e.offsets.is_empty());
            if other {
                return Err(ApiError::new(
                    ErrorCode::GroupIdNotFound,
                    format!("Group {group_id} is not a share group."),
                ));
            }
        }
        // Only a joining member makes a group.
        if hb.member_epoch != 0 && groups.get(group_id).is_none_or(|e| e.share.is_none()) {
            return Err(ApiError::new(
                ErrorCode::UnknownMemberId,
                "unknown member: join again with epoch 0",
            ));
        }
        let entry = groups.entry(group_id.to_string()).or_default();
        let group = entry.share.get_or_insert_with(ShareGroup::default);
        let epoch = group.epoch;
        let answer = group.heartbeat(hb, &topics, now).map_err(|code| {
            let why = match code {
                ErrorCode::UnknownMemberId => "unknown member: join again with epoch 0",
                ErrorCode::FencedMemberEpoch => "the member epoch is not the member's: join again",
                _ => "a joining member needs a member id and its subscribed topics",
            };
            ApiError::new(code, why)
        })?;
        if group.epoch != epoch {
            tracing::info!(
                group = group_id,
                epoch = group.epoch,
                members = group.members.len(),
                "share group assignment changed"
            );
        }
        entry.last_active_ms = self.node.clock.now_ms();
        Ok(answer)
    }

    /// Share groups' silent members leave (called from [`Coordinator::tick`]).
    pub(super) fn expire_share_members(&self, now: Instant) {
        let mut topics = None;
        let session = self.share_session();
        for (id, entry) in self.lock().iter_mut() {
            if let Some(g) = entry.share.as_mut().filter(|g| !g.is_empty()) {
                let topics = topics.get_or_insert_with(|| self.topics());
                if g.expire(now, session, topics) {
                    tracing::info!(group = %id, epoch = g.epoch, "share group members expired");
                }
            }
        }
    }

    /// A share group's state for ShareGroupDescribe: `Err` when `group_id` is another kind of
    /// group or none.
    pub fn describe_share_group<T>(
        &self,
        group_id: &str,
        view: impl FnOnce(&ShareGroup) -> T,
    ) -> Result<T, ApiError> {
        let groups = self.lock();
        match groups.get(group_id) {
            Some(e) if e.share.is_some() => Ok(view(e.share.as_ref().expect("checked"))),
            Some(_) => Err(ApiError::new(
                ErrorCode::GroupIdNotFound,
                format!("Group {group_id} is not a share group."),
            )),
            None => Err(ApiError::new(
                ErrorCode::GroupIdNotFound,
                format!("Group {group_id} not found."),
            )),
        }
    }

    /// Whether a share group's start offsets may be changed (AlterShareGroupOffsets,
    /// DeleteShareGroupOffsets): it has no members, or does not exist yet; `Err` for a group
    /// of another kind.
    pub fn check_share_group_empty(&self, group_id: &str) -> Result<(), ApiError> {
        match self.lock().get(group_id) {
            None => Ok(()),
            Some(e) => match &e.share {
                None => Err(ApiError::new(
                    ErrorCode::GroupIdNotFound,
                    format!("Group {group_id} is not a share group."),
                )),
                Some(g) if !g.members.is_empty() => Err(ApiError::new(
                    ErrorCode::NonEmptyGroup,
                    format!(
                        "share group {group_id} has {} member(s): its offsets change only when it has none",
                        g.members.len()
                    ),
                )),
                Some(_) => Ok(()),
            },
        }
    }
}
