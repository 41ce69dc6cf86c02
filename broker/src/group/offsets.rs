//! Committed offsets: OffsetCommit (acknowledged once the ISR holds the commit), OffsetFetch,
//! OffsetDelete, and expiry of empty groups' offsets (KIP-211).

use std::collections::BTreeMap;

use bytes::Bytes;

use super::state::GroupState;
use super::store::{self, CommittedOffset};
use super::{
    Commit, Coordinator, Entry, Offsets, PendingCommit, TopicOffsets, MAX_OFFSET_METADATA,
};
use crate::error::{ApiError, ErrorCode};

/// Whether an empty group's offsets have outlived `offsets.retention.minutes` (KIP-211): the
/// clock starts at the later of its newest commit and the moment it was last seen with members.
fn offsets_expired(offsets: &Offsets, last_active_ms: i64, now_ms: i64, retention_ms: i64) -> bool {
    let newest_commit = offsets
        .values()
        .map(|o| o.commit_timestamp)
        .max()
        .unwrap_or(0);
    retention_ms >= 0 && now_ms - newest_commit.max(last_active_ms) > retention_ms
}

/// Kafka's `offsets.commit.timeout.ms`: how long a commit waits for the ISR.
const COMMIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Kafka's mapping of a failed offset-commit append to the error the committer is told
/// (`GroupMetadataManager.storeOffsets`).
fn commit_error(code: ErrorCode) -> ErrorCode {
    match code {
        ErrorCode::UnknownTopicOrPartition
        | ErrorCode::NotEnoughReplicas
        | ErrorCode::NotEnoughReplicasAfterAppend => ErrorCode::CoordinatorNotAvailable,
        ErrorCode::NotLeaderOrFollower | ErrorCode::KafkaStorageError => ErrorCode::NotCoordinator,
        ErrorCode::MessageTooLarge | ErrorCode::RecordListTooLarge => {
            ErrorCode::InvalidCommitOffsetSize
        }
        c => c,
    }
}

/// Who commits offsets: what OffsetCommit and TxnOffsetCommit say of the committing member.
pub struct Committer<'a> {
    pub member_id: &'a str,
    pub instance_id: Option<&'a str>,
    /// The generation (classic protocol) or member epoch (KIP-848); negative for a commit
    /// from outside group management (an admin client, a consumer assigning by hand).
    pub generation: i32,
    /// TxnOffsetCommit: never REBALANCE_IN_PROGRESS, and a member without id or generation
    /// may commit into a group with members (older clients send neither).
    pub transactional: bool,
    /// The request's version: OffsetCommit v9+ learns that a group does not exist
    /// (GROUP_ID_NOT_FOUND); older versions get ILLEGAL_GENERATION, as Kafka answers.
    pub version: i16,
}

/// Kafka's checks of a committer, in Kafka's order (`OffsetMetadataManager` for a group that
/// does not exist, then `ClassicGroup`/`ConsumerGroup.validateOffsetCommit`). A zombie (a
/// member that left or was removed, an older generation, a static instance taken over) is
/// refused, so it cannot move a group's offsets back after a rebalance.
pub(super) fn validate_committer(
    entry: Option<&Entry>,
    c: &Committer<'_>,
) -> Result<(), ErrorCode> {
    let consumer = entry.and_then(|e| e.consumer.as_ref());
    let classic = entry.and_then(|e| e.group.as_ref());
    // A group "exists" once it has a membership state or offsets (a simple group, made by
    // commits from outside group management, is an Empty classic group in Kafka).
    let exists =
        entry.is_some_and(|e| consumer.is_some() || classic.is_some() || !e.offsets.is_empty());
    if !exists {
        return match c.generation {
            g if g < 0 => Ok(()),
            _ if !c.transactional && c.version >= 9 => Err(ErrorCode::GroupIdNotFound),
            _ => Err(ErrorCode::IllegalGeneration),
        };
    }
    if let Some(g) = consumer.filter(|g| !g.is_empty() || classic.is_none()) {
        if c.generation < 0 && g.is_empty() {
            return Ok(());
        }
        let epoch = g
            .member_epoch(c.member_id)
            .ok_or(ErrorCode::UnknownMemberId)?;
        if !c.transactional && c.version < 9 {
            return Err(ErrorCode::UnsupportedVersion);
        }
        return match epoch == c.generation {
            true => Ok(()),
            false if c.transactional => Err(ErrorCode::IllegalGeneration),
            false => Err(ErrorCode::StaleMemberEpoch),
        };
    }
    let (state, generation) = classic.map_or((GroupState::Empty, 0), |g| (g.state, g.generation));
    if state == GroupState::Dead {
        return Err(ErrorCode::CoordinatorNotAvailable);
    }
    if c.generation < 0 && state == GroupState::Empty {
        return Ok(());
    }
    if c.generation >= 0 || !c.member_id.is_empty() || c.instance_id.is_some() {
        if let Some(instance) = c.instance_id {
            match classic.and_then(|g| g.instance_member(instance)) {
                None => return Err(ErrorCode::UnknownMemberId),
                Some(current) if current != c.member_id => return Err(ErrorCode::FencedInstanceId),
                Some(_) => {}
            }
        }
        if !classic.is_some_and(|g| g.members.contains_key(c.member_id)) {
            return Err(ErrorCode::UnknownMemberId);
        }
        if c.generation != generation {
            return Err(ErrorCode::IllegalGeneration);
        }
    } else if !c.transactional && state != GroupState::Empty {
        return Err(ErrorCode::UnknownMemberId);
    }
    // Assignments are being handed out: the member has the new generation but not yet its
    // partitions. During PreparingRebalance the generation is still current, and cooperative
    // members commit what they are giving up right then, before they rejoin.
    if !c.transactional && state == GroupState::CompletingRebalance {
        return Err(ErrorCode::RebalanceInProgress);
    }
    Ok(())
}

impl Coordinator {
    /// Validates the committer and appends the commits; one error per commit, and the
    /// appended commits, which [`Coordinator::complete_commit`] acknowledges once the ISR has
    /// them.
    pub fn commit(
        &self,
        group_id: &str,
        committer: &Committer<'_>,
        commits: Vec<Commit>,
    ) -> (Vec<ErrorCode>, Option<PendingCommit>) {
        // Held until the commit is appended: a member cannot leave (or a rebalance complete)
        // between its check and its append, as in Kafka's coordinator, where both are one step.
        let groups = self.lock();
        if let Err(code) = validate_committer(groups.get(group_id), committer) {
            return (commits.iter().map(|_| code).collect(), None);
        }
        let (errors, records, accepted) = self.accept_commits(group_id, commits);
        let records: Vec<(Bytes, Option<Bytes>)> =
            records.into_iter().map(|(k, v)| (k, Some(v))).collect();
        if records.is_empty() {
            return (errors, None);
        }
        match self.persist(group_id, &records) {
            Err(e) => {
                tracing::error!(group = group_id, error = %e, "cannot persist offset commit");
                let code = commit_error(e.code);
                (errors.iter().map(|_| code).collect(), None)
            }
            Ok((partition, leader_epoch, last_offset)) => (
                errors,
                Some(PendingCommit {
                    group: group_id.to_string(),
                    partition,
                    last_offset,
                    leader_epoch,
                    accepted,
                }),
            ),
        }
    }

    /// Checks each commit (its partition exists, its metadata fits): one error per commit,
    /// and the offset records of those accepted, with them.
    pub(super) fn accept_commits(
        &self,
        group_id: &str,
        commits: Vec<Commit>,
    ) -> (Vec<ErrorCode>, Vec<(Bytes, Bytes)>, Vec<Commit>) {
        let state = self.node.metadata.state();
        let mut errors = Vec::with_capacity(commits.len());
        let mut records = Vec::new();
        let mut accepted = Vec::new();
        for c in commits {
            let known = state
                .topic(&c.topic)
                .is_some_and(|t| c.partition >= 0 && (c.partition as usize) < t.partitions.len());
            errors.push(if !known {
                ErrorCode::UnknownTopicOrPartition
            } else if c.offset.metadata.len() > MAX_OFFSET_METADATA {
                ErrorCode::OffsetMetadataTooLarge
            } else {
                records.push((
                    store::offset_key(group_id, &c.topic, c.partition),
                    store::offset_value(&c.offset),
                ));
                accepted.push(c);
                ErrorCode::None
            });
        }
        (errors, records, accepted)
    }

    /// Waits until the ISR holds an appended commit, then makes it visible. `Err` is the
    /// error for every commit it carried.
    pub async fn complete_commit(&self, pending: PendingCommit) -> Result<(), ErrorCode> {
        let PendingCommit {
            group,
            partition,
            last_offset,
            leader_epoch,
            accepted,
        } = pending;
        partition
            .wait_committed(last_offset, leader_epoch, COMMIT_TIMEOUT)
            .await
            .map_err(commit_error)?;
        // Still ours: a group whose partition moved meanwhile is the new coordinator's, which
        // loads this commit from the log.
        let p = store::partition_for(&group);
        if !self.coordination.is_loaded(p, leader_epoch) {
            return Err(ErrorCode::NotCoordinator);
        }
        let mut groups = self.lock();
        let entry = groups.entry(group).or_default();
        for c in accepted {
            entry.offsets.insert((c.topic, c.partition), c.offset);
        }
        Ok(())
    }

    /// OffsetFetch v9's check of the member that fetches (KIP-848): in a consumer-protocol
    /// group a named member must be a current one (UNKNOWN_MEMBER_ID) at its current epoch
    /// (STALE_MEMBER_EPOCH), so a fenced member cannot resume from offsets it no longer owns.
    /// A fetch naming no member at epoch -1 (an admin client, a consumer without group
    /// management) and any fetch from a classic group are not checked, as in Kafka.
    pub fn check_fetching_member(
        &self,
        group_id: &str,
        member_id: Option<&str>,
        member_epoch: i32,
    ) -> Result<(), ApiError> {
        if member_id.is_none() && member_epoch < 0 {
            return Ok(());
        }
        let groups = self.lock();
        let Some(consumer) = (groups.get(group_id)).and_then(|e| e.consumer.as_ref()) else {
            return Ok(());
        };
        match consumer.member_epoch(member_id.unwrap_or_default()) {
            None => Err(ApiError::new(
                ErrorCode::UnknownMemberId,
                format!("no member {member_id:?} in consumer group {group_id}"),
            )),
            Some(epoch) if epoch != member_epoch => Err(ApiError::new(
                ErrorCode::StaleMemberEpoch,
                format!("member epoch {member_epoch} is not the current {epoch}"),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Committed offsets of a group: the listed partitions, or all when `None`.
    pub fn fetch(&self, group_id: &str, wanted: Option<Vec<(String, Vec<i32>)>>) -> TopicOffsets {
        let groups = self.lock();
        let offsets = groups.get(group_id).map(|e| &e.offsets);
        match wanted {
            Some(topics) => topics
                .into_iter()
                .map(|(t, parts)| {
                    let v = parts
                        .into_iter()
                        .map(|p| (p, offsets.and_then(|o| o.get(&(t.clone(), p)).cloned())))
                        .collect();
                    (t, v)
                })
                .collect(),
            None => {
                let mut by_topic: BTreeMap<String, Vec<(i32, Option<CommittedOffset>)>> =
                    BTreeMap::new();
                for ((t, p), v) in offsets.into_iter().flatten() {
                    by_topic
                        .entry(t.clone())
                        .or_default()
                        .push((*p, Some(v.clone())));
                }
                by_topic.into_iter().collect()
            }
        }
    }

    /// Every committed offset: (group, topic, partition, offset).
    pub fn committed(&self) -> Vec<(String, String, i32, i64)> {
        let groups = self.lock();
        let mut out: Vec<_> = groups
            .iter()
            .flat_map(|(g, e)| {
                e.offsets
                    .iter()
                    .map(move |((t, p), v)| (g.clone(), t.clone(), *p, v.offset))
            })
            .collect();
        out.sort();
        out
    }

    /// OffsetDelete: removes committed offsets, except of topics a live consumer group
    /// subscribes to (GROUP_SUBSCRIBED_TO_TOPIC), as Kafka does.
    pub fn delete_offsets(
        &self,
        group_id: &str,
        partitions: &[(String, i32)],
    ) -> Result<Vec<ErrorCode>, ErrorCode> {
        let mut groups = self.lock();
        let Some(entry) = groups.get_mut(group_id) else {
            return Err(ErrorCode::GroupIdNotFound);
        };
        let live = entry.group.as_ref().filter(|g| !g.is_empty());
        let subscribed = match live {
            None => Default::default(),
            Some(g) => match g.subscribed_topics() {
                Some(t) => t,
                // Subscriptions unknown (not a consumer group): refuse rather than delete an
                // offset a live member may depend on.
                None => return Err(ErrorCode::NonEmptyGroup),
            },
        };
        let codes: Vec<ErrorCode> = partitions
            .iter()
            .map(|(t, _)| {
                if subscribed.contains(t) {
                    ErrorCode::GroupSubscribedToTopic
                } else {
                    ErrorCode::None
                }
            })
            .collect();
        let doomed: Vec<&(String, i32)> = partitions
            .iter()
            .zip(&codes)
            .filter(|(_, c)| **c == ErrorCode::None)
            .map(|(p, _)| p)
            .collect();
        if !doomed.is_empty() {
            self.tombstone_offsets(group_id, doomed.iter().copied())
                .map_err(|e| e.code)?;
            for (t, p) in doomed {
                entry.offsets.remove(&(t.clone(), *p));
            }
        }
        Ok(codes)
    }

    /// Deletes groups that have been empty for longer than `retention_ms` (KIP-211's clock:
    /// from the later of the newest commit and the last time the group had members): their
    /// committed offsets and group records are tombstoned, and the group is gone, as when
    /// Kafka's offset expiry leaves an empty group without offsets. Returns how many groups
    /// expired.
    pub fn expire_offsets(&self, now_ms: i64, retention_ms: i64) -> usize {
        let mut groups = self.lock();
        let expired: Vec<String> = groups
            .iter()
            .filter(|(_, e)| {
                e.group.as_ref().is_none_or(|g| g.is_empty())
                    && e.consumer.as_ref().is_none_or(|g| g.is_empty())
            })
            .filter(|(_, e)| {
                (!e.offsets.is_empty() || e.group.is_some())
                    && offsets_expired(&e.offsets, e.last_active_ms, now_ms, retention_ms)
            })
            .map(|(id, _)| id.clone())
            .collect();
        let mut done = 0;
        for id in expired {
            let Some(entry) = groups.get(&id) else {
                continue;
            };
            match self.tombstone_group(&id, entry) {
                Ok(()) => {
                    tracing::info!(group = %id, partitions = entry.offsets.len(), "empty group and its committed offsets expired (offsets_retention_minutes)");
                    groups.remove(&id);
                    done += 1;
                }
                Err(e) => {
                    tracing::warn!(group = %id, error = %e, "cannot expire committed offsets")
                }
            }
        }
        done
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::group::state::Group;
    use crate::group::store::{GroupMetadata, MemberMetadata};

    fn offsets(commit_ts: &[i64]) -> Offsets {
        commit_ts
            .iter()
            .enumerate()
            .map(|(i, ts)| {
                (
                    ("t".to_string(), i as i32),
                    CommittedOffset {
                        offset: 1,
                        leader_epoch: -1,
                        metadata: String::new(),
                        commit_timestamp: *ts,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn offsets_expire_only_after_retention_from_the_newest_commit_or_last_activity() {
        let o = offsets(&[1_000, 5_000]);
        assert!(
            !offsets_expired(&o, 0, 10_000, 6_000),
            "newest commit is 5 s old"
        );
        assert!(offsets_expired(&o, 0, 11_001, 6_000));
        assert!(
            !offsets_expired(&o, 9_000, 11_001, 6_000),
            "members were active until 9 s"
        );
        assert!(
            !offsets_expired(&o, 0, i64::MAX, -1),
            "-1 keeps offsets forever"
        );
    }

    /// A stable classic group at generation 3 with members `a` and static `b` (instance `ib`).
    fn stable() -> Entry {
        let member = |id: &str, instance: Option<&str>| MemberMetadata {
            member_id: id.into(),
            group_instance_id: instance.map(Into::into),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            rebalance_timeout: 30_000,
            session_timeout: 10_000,
            subscription: Bytes::new(),
            assignment: Bytes::new(),
        };
        let record = GroupMetadata {
            protocol_type: "consumer".into(),
            generation: 3,
            protocol: Some("range".into()),
            leader: Some("a".into()),
            current_state_timestamp: 0,
            members: vec![member("a", None), member("b", Some("ib"))],
        };
        Entry {
            group: Some(Group::from_metadata(
                "g",
                record,
                crate::clock::Clock::manual(0).instant(),
            )),
            ..Entry::default()
        }
    }

    fn commit<'a>(
        member_id: &'a str,
        instance_id: Option<&'a str>,
        generation: i32,
    ) -> Committer<'a> {
        Committer {
            member_id,
            instance_id,
            generation,
            transactional: false,
            version: 9,
        }
    }

    #[test]
    fn a_current_member_at_its_generation_commits() {
        let e = stable();
        assert_eq!(validate_committer(Some(&e), &commit("a", None, 3)), Ok(()));
        assert_eq!(
            validate_committer(Some(&e), &commit("b", Some("ib"), 3)),
            Ok(())
        );
    }

    #[test]
    fn zombies_get_kafkas_codes() {
        let e = stable();
        let check = |c: Committer<'_>| validate_committer(Some(&e), &c);
        // A member that left (or was removed), whatever generation it names.
        assert_eq!(
            check(commit("gone", None, 3)),
            Err(ErrorCode::UnknownMemberId)
        );
        assert_eq!(
            check(commit("gone", None, -1)),
            Err(ErrorCode::UnknownMemberId)
        );
        // A member of an older generation.
        assert_eq!(
            check(commit("a", None, 2)),
            Err(ErrorCode::IllegalGeneration)
        );
        // A static instance taken over by another member id, or no longer in the group.
        assert_eq!(
            check(commit("old-b", Some("ib"), 3)),
            Err(ErrorCode::FencedInstanceId)
        );
        assert_eq!(
            check(commit("b", Some("nobody"), 3)),
            Err(ErrorCode::UnknownMemberId)
        );
        // Neither member nor generation: only an empty group takes such commits.
        assert_eq!(check(commit("", None, -1)), Err(ErrorCode::UnknownMemberId));
        // Absurd values are just unknown.
        let long = "m".repeat(10_000);
        assert_eq!(
            check(commit(&long, None, i32::MAX)),
            Err(ErrorCode::UnknownMemberId)
        );
        assert_eq!(
            check(commit("a", None, i32::MIN)),
            Err(ErrorCode::IllegalGeneration)
        );
    }

    #[test]
    fn a_transactional_commit_skips_the_state_checks_kafka_skips() {
        let mut e = stable();
        let txn = |member_id, generation| Committer {
            transactional: true,
            ..commit(member_id, None, generation)
        };
        // Older transactional clients name neither member nor generation.
        assert_eq!(validate_committer(Some(&e), &txn("", -1)), Ok(()));
        assert_eq!(
            validate_committer(Some(&e), &txn("a", 2)),
            Err(ErrorCode::IllegalGeneration)
        );
        // While assignments are handed out: a plain commit waits, a transactional one not.
        e.group.as_mut().unwrap().state = GroupState::CompletingRebalance;
        assert_eq!(validate_committer(Some(&e), &txn("a", 3)), Ok(()));
        assert_eq!(
            validate_committer(Some(&e), &commit("a", None, 3)),
            Err(ErrorCode::RebalanceInProgress)
        );
        // But a zombie is a zombie first.
        assert_eq!(
            validate_committer(Some(&e), &commit("gone", None, 3)),
            Err(ErrorCode::UnknownMemberId)
        );
    }

    #[test]
    fn an_empty_or_missing_group_takes_commits_from_outside_group_management_only() {
        let mut empty = Entry {
            group: Some(Group::new("g")),
            ..Entry::default()
        };
        assert_eq!(
            validate_committer(Some(&empty), &commit("", None, -1)),
            Ok(())
        );
        // Kafka lets a -1 commit through an empty group whoever names itself.
        assert_eq!(
            validate_committer(Some(&empty), &commit("x", None, -1)),
            Ok(())
        );
        assert_eq!(
            validate_committer(Some(&empty), &commit("a", None, 3)),
            Err(ErrorCode::UnknownMemberId),
            "the last member, after leaving"
        );
        // No such group: a simple commit creates it; a generation is refused, by version.
        assert_eq!(validate_committer(None, &commit("", None, -1)), Ok(()));
        assert_eq!(
            validate_committer(None, &commit("a", None, 3)),
            Err(ErrorCode::GroupIdNotFound)
        );
        let v8 = Committer {
            version: 8,
            ..commit("a", None, 3)
        };
        assert_eq!(
            validate_committer(None, &v8),
            Err(ErrorCode::IllegalGeneration)
        );
        // A dead group (being deleted) sends the client to find its coordinator again.
        empty.group.as_mut().unwrap().state = GroupState::Dead;
        assert_eq!(
            validate_committer(Some(&empty), &commit("", None, -1)),
            Err(ErrorCode::CoordinatorNotAvailable)
        );
    }
}
