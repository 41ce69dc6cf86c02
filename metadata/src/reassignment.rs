//! Moving a partition's replicas (KIP-455): the state-machine half of
//! AlterPartitionReassignments.
//!
//! A reassignment to `target` from the partition's original replicas `original`:
//! - starts by recording `adding = target − original` and `removing = original − target`, with
//!   `replicas = target ++ removing` (Kafka's order: the target's first replica is the
//!   preferred leader from now on): every broker in `replicas` hosts the partition, so the
//!   adding ones open it and follow the leader like any follower;
//! - completes, in the same command that puts the last adding replica in the ISR (the
//!   leader's [`crate::Command::AlterPartition`]), or at once when nothing is added: replicas
//!   become `target`, the ISR keeps only target members, and the preferred target replica
//!   leads if it is live and in sync (else the current leader stays if it is a target, else
//!   the first live in-sync target leads);
//! - is cancelled by a `None` target: back to `replicas − adding` (the original set), the adding
//!   replicas leave the ISR.
//!
//! A new target for a partition already moving replaces the move, computed from the original
//! replicas, as in Kafka.
//!
//! Invariants:
//! - `adding` and `removing` are both empty, or the partition is moving; they are disjoint,
//!   `adding ⊆ replicas`, `removing ⊆ replicas`, `replicas − adding` is the original set and
//!   `replicas − removing` the target, in the target's order.
//! - A removing replica leaves only when every adding replica is in the ISR and the ISR keeps
//!   at least one target replica, so the partition never has fewer in-sync copies than the
//!   target can hold: the old replica leaves only after the new one is in sync.
//! - Completing or cancelling never leaves a leader outside the replicas or the ISR; every
//!   change bumps the partition epoch, every leader change the leader epoch.

use std::collections::BTreeMap;

use crate::command::{CommandResult, NodeId};
use crate::state::{BrokerInfo, ClusterState, PartitionInfo};

impl ClusterState {
    /// Starts (or replaces, or with `None` cancels) the reassignment of one partition.
    pub(crate) fn reassign(
        &mut self,
        topic: &str,
        partition: i32,
        target: Option<&[NodeId]>,
    ) -> CommandResult {
        let Some(t) = self.topics.get(topic) else {
            return CommandResult::UnknownTopic;
        };
        let Some(p) = usize::try_from(partition)
            .ok()
            .and_then(|i| t.partitions.get(i))
        else {
            return CommandResult::UnknownPartition;
        };
        let moving = p.is_moving();
        if let Some(target) = target {
            if let Err(reason) = self.check_assignment(&[target.to_vec()], 0, None) {
                return CommandResult::InvalidReplicaAssignment(reason.replacen(
                    "partition 0",
                    &format!("the target of {topic}-{partition}"),
                    1,
                ));
            }
        } else if !moving {
            return CommandResult::NoReassignmentInProgress;
        }
        if target.is_some_and(|t| !moving && p.original_replicas() == t) {
            return CommandResult::Ok;
        }
        let brokers = self.brokers.clone();
        let Some(p) = self
            .topic_mut(topic)
            .and_then(|t| t.partitions.get_mut(partition as usize))
            .map(std::sync::Arc::make_mut)
        else {
            return CommandResult::UnknownPartition;
        };
        match target {
            None => p.cancel_reassignment(&brokers),
            Some(target) => {
                let original = p.original_replicas();
                let adding: Vec<NodeId> = target
                    .iter()
                    .copied()
                    .filter(|r| !original.contains(r))
                    .collect();
                let removing: Vec<NodeId> = original
                    .iter()
                    .copied()
                    .filter(|r| !target.contains(r))
                    .collect();
                // A replaced move's adding replicas that the new target drops leave at once:
                // they were never needed for the original set's safety.
                let dropped: Vec<NodeId> = p
                    .adding
                    .iter()
                    .copied()
                    .filter(|r| !target.contains(r))
                    .collect();
                p.isr.retain(|r| !dropped.contains(r));
                if p.leader.is_some_and(|l| dropped.contains(&l)) {
                    p.leader = elect(&original, &p.isr, &brokers);
                    p.leader_epoch += 1;
                }
                p.replicas = target.iter().chain(removing.iter()).copied().collect();
                p.adding = adding;
                p.removing = removing;
                p.partition_epoch += 1;
                p.try_complete_reassignment(&brokers);
                CommandResult::Ok
            }
        }
    }
}

impl PartitionInfo {
    /// The number of replicas the partition is meant to have: the target's while moving.
    pub fn replication_factor(&self) -> usize {
        self.replicas.len() - self.removing.len()
    }

    /// Fewer replicas in sync than the partition is meant to have (a replica being added is
    /// not missing yet; Kafka counts the same way).
    pub fn is_under_replicated(&self) -> bool {
        self.isr.len() < self.replication_factor()
    }

    /// Whether a reassignment is in progress.
    pub fn is_moving(&self) -> bool {
        !self.adding.is_empty() || !self.removing.is_empty()
    }

    /// The replicas before the reassignment in progress (all of them when none is).
    pub fn original_replicas(&self) -> Vec<NodeId> {
        self.replicas
            .iter()
            .copied()
            .filter(|r| !self.adding.contains(r))
            .collect()
    }

    /// The replicas the reassignment in progress moves to (the replicas when none is).
    pub fn target_replicas(&self) -> Vec<NodeId> {
        self.replicas
            .iter()
            .copied()
            .filter(|r| !self.removing.contains(r))
            .collect()
    }

    /// Completes the move when every adding replica is in sync and some target replica is:
    /// called after each change of the ISR or of the reassignment.
    pub(crate) fn try_complete_reassignment(&mut self, brokers: &BTreeMap<NodeId, BrokerInfo>) {
        if !self.is_moving() || self.adding.iter().any(|r| !self.isr.contains(r)) {
            return;
        }
        let target = self.target_replicas();
        let isr: Vec<NodeId> = target
            .iter()
            .copied()
            .filter(|r| self.isr.contains(r))
            .collect();
        if isr.is_empty() {
            return;
        }
        let live = |r: &NodeId| brokers.get(r).is_some_and(|b| !b.fenced);
        let leader = match target.first() {
            Some(first) if isr.contains(first) && live(first) => Some(*first),
            _ => match self.leader {
                Some(l) if isr.contains(&l) => Some(l),
                _ => elect(&target, &isr, brokers),
            },
        };
        if leader != self.leader {
            self.leader = leader;
            self.leader_epoch += 1;
        }
        self.replicas = target;
        self.isr = isr;
        self.adding.clear();
        self.removing.clear();
        self.partition_epoch += 1;
    }

    /// Back to the original replicas; the adding ones leave the ISR (and the lead, electing an
    /// original in-sync replica).
    fn cancel_reassignment(&mut self, brokers: &BTreeMap<NodeId, BrokerInfo>) -> CommandResult {
        let original = self.original_replicas();
        let isr: Vec<NodeId> = self
            .isr
            .iter()
            .copied()
            .filter(|r| original.contains(r))
            .collect();
        if isr.is_empty() {
            return CommandResult::InvalidReplicaAssignment(
                "cannot cancel: none of the original replicas is in sync; complete the move instead"
                    .to_string(),
            );
        }
        if self.leader.is_some_and(|l| !original.contains(&l)) {
            self.leader = elect(&original, &isr, brokers);
            self.leader_epoch += 1;
        }
        self.replicas = original;
        self.isr = isr;
        self.adding.clear();
        self.removing.clear();
        self.partition_epoch += 1;
        CommandResult::Ok
    }
}

/// The first of `order` that is in `isr` and live.
fn elect(
    order: &[NodeId],
    isr: &[NodeId],
    brokers: &BTreeMap<NodeId, BrokerInfo>,
) -> Option<NodeId> {
    order
        .iter()
        .copied()
        .find(|r| isr.contains(r) && brokers.get(r).is_some_and(|b| !b.fenced))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use crate::command::{Command, CommandResult, NodeId};
    use crate::state::{ClusterState, PartitionInfo};

    fn cluster(ids: &[NodeId]) -> ClusterState {
        let mut state = ClusterState::default();
        for id in ids {
            let CommandResult::BrokerRegistered { epoch } = state.apply(&Command::RegisterBroker {
                node_id: *id,
                host: "h".to_string(),
                port: 1,
                rack: None,
                listeners: vec![],
                admin: None,
            }) else {
                panic!("not registered");
            };
            state.apply(&Command::UnfenceBroker {
                node_id: *id,
                epoch,
            });
        }
        state
    }

    fn with_topic(ids: &[NodeId], replicas: Vec<NodeId>) -> ClusterState {
        let mut state = cluster(ids);
        assert_eq!(
            state.apply(&Command::CreateTopic {
                name: "t".to_string(),
                topic_id: uuid::Uuid::new_v4(),
                replicas: vec![replicas],
                configs: BTreeMap::new(),
            }),
            CommandResult::Ok
        );
        state
    }

    fn p(state: &ClusterState) -> &PartitionInfo {
        &state.topics["t"].partitions[0]
    }

    fn reassign(state: &mut ClusterState, target: Option<Vec<NodeId>>) -> CommandResult {
        state.apply(&Command::ReassignPartition {
            topic: "t".to_string(),
            partition: 0,
            target,
        })
    }

    /// The leader's ISR change, at the current epochs.
    fn alter_isr(state: &mut ClusterState, isr: Vec<NodeId>) -> CommandResult {
        let p = p(state).clone();
        state.apply(&Command::AlterPartition {
            topic_id: state.topics["t"].topic_id,
            partition: 0,
            leader: p.leader.expect("led"),
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            isr,
        })
    }

    #[test]
    fn a_move_adds_the_new_replica_and_removes_the_old_only_once_it_is_in_sync() {
        let mut state = with_topic(&[1, 2, 3, 4], vec![1, 2, 3]);
        assert_eq!(reassign(&mut state, Some(vec![4, 2, 3])), CommandResult::Ok);
        let moving = p(&state).clone();
        assert_eq!(moving.replicas, vec![4, 2, 3, 1], "target, then removing");
        assert_eq!(
            (moving.adding.clone(), moving.removing.clone()),
            (vec![4], vec![1])
        );
        assert_eq!(
            moving.isr,
            vec![1, 2, 3],
            "the new replica is not in sync yet"
        );
        assert_eq!(moving.leader, Some(1));
        assert_eq!(moving.partition_epoch, 1);
        assert!(moving.is_moving());
        assert_eq!(moving.target_replicas(), vec![4, 2, 3]);
        assert_eq!(moving.original_replicas(), vec![2, 3, 1]);

        // An ISR change without the new replica leaves the move going.
        assert_eq!(alter_isr(&mut state, vec![1, 2]), CommandResult::Ok);
        assert!(p(&state).is_moving());
        // The new replica caught up: the leader adds it and the move completes at once.
        assert_eq!(alter_isr(&mut state, vec![1, 2, 4]), CommandResult::Ok);
        let done = p(&state);
        assert!(!done.is_moving());
        assert_eq!(done.replicas, vec![4, 2, 3]);
        assert_eq!(done.isr, vec![4, 2], "target order, only target members");
        assert_eq!(
            done.leader,
            Some(4),
            "the preferred target replica is in sync: it leads"
        );
        assert_eq!(done.leader_epoch, 1);
    }

    #[test]
    fn a_move_that_adds_nothing_completes_at_once_and_keeps_a_target_leader() {
        let mut state = with_topic(&[1, 2, 3], vec![1, 2, 3]);
        // Down to two replicas, the leader staying.
        assert_eq!(reassign(&mut state, Some(vec![2, 1])), CommandResult::Ok);
        let p0 = p(&state);
        assert!(!p0.is_moving());
        assert_eq!(p0.replicas, vec![2, 1]);
        assert_eq!(p0.isr, vec![2, 1]);
        assert_eq!(p0.leader, Some(2), "the preferred replica is in sync");
        // Removing the leader elects another.
        assert_eq!(reassign(&mut state, Some(vec![1])), CommandResult::Ok);
        assert_eq!(p(&state).leader, Some(1));
        assert_eq!(p(&state).isr, vec![1]);
        // The same target again is a no-op.
        let before = state.clone();
        assert_eq!(reassign(&mut state, Some(vec![1])), CommandResult::Ok);
        assert_eq!(state, before);
    }

    #[test]
    fn a_cancel_goes_back_to_the_original_replicas() {
        let mut state = with_topic(&[1, 2, 3], vec![1, 2]);
        assert_eq!(reassign(&mut state, Some(vec![3, 2])), CommandResult::Ok);
        assert_eq!(reassign(&mut state, None), CommandResult::Ok);
        let p0 = p(&state);
        assert!(!p0.is_moving());
        assert_eq!(
            p0.replicas,
            vec![2, 1],
            "the original set (in Kafka's order)"
        );
        assert_eq!(p0.isr, vec![1, 2]);
        assert_eq!(p0.leader, Some(1));
        // Nothing to cancel now.
        let before = state.clone();
        assert_eq!(
            reassign(&mut state, None),
            CommandResult::NoReassignmentInProgress
        );
        assert_eq!(state, before);
    }

    #[test]
    fn a_new_target_replaces_the_move_in_progress_from_the_original_replicas() {
        let mut state = with_topic(&[1, 2, 3, 4, 5], vec![1, 2, 3]);
        assert_eq!(reassign(&mut state, Some(vec![4, 5, 3])), CommandResult::Ok);
        // 4 caught up, 5 did not; the operator now wants 4 only in place of 1.
        assert_eq!(alter_isr(&mut state, vec![1, 2, 3, 4]), CommandResult::Ok);
        assert!(p(&state).is_moving());
        assert_eq!(reassign(&mut state, Some(vec![4, 2, 3])), CommandResult::Ok);
        let done = p(&state);
        assert!(
            !done.is_moving(),
            "4 is in sync: the new move is already complete"
        );
        assert_eq!(done.replicas, vec![4, 2, 3]);
        assert_eq!(done.isr, vec![4, 2, 3]);
        assert_eq!(done.leader, Some(4));
    }

    #[test]
    fn bad_targets_are_refused_and_change_nothing() {
        let mut state = with_topic(&[1, 2, 3], vec![1, 2]);
        let before = state.clone();
        for target in [vec![], vec![1, 1], vec![1, 9]] {
            let result = reassign(&mut state, Some(target.clone()));
            assert!(
                matches!(result, CommandResult::InvalidReplicaAssignment(_)),
                "{target:?}: {result:?}"
            );
        }
        assert_eq!(
            state.apply(&Command::ReassignPartition {
                topic: "missing".to_string(),
                partition: 0,
                target: Some(vec![1]),
            }),
            CommandResult::UnknownTopic
        );
        assert_eq!(
            state.apply(&Command::ReassignPartition {
                topic: "t".to_string(),
                partition: 1,
                target: Some(vec![1]),
            }),
            CommandResult::UnknownPartition
        );
        assert_eq!(state, before);
    }

    #[test]
    fn a_cancel_that_would_leave_no_original_replica_in_sync_is_refused() {
        let mut state = with_topic(&[1, 2, 3], vec![1]);
        assert_eq!(reassign(&mut state, Some(vec![2, 3])), CommandResult::Ok);
        // 2 catches up, then the original leader dies: 2 (an adding replica) leads.
        assert_eq!(alter_isr(&mut state, vec![1, 2]), CommandResult::Ok);
        let epoch1 = state.brokers[&1].epoch;
        state.apply(&Command::FenceBroker {
            node_id: 1,
            epoch: epoch1,
        });
        assert_eq!(p(&state).leader, Some(2));
        assert!(p(&state).is_moving(), "3 is not in sync yet");
        let before = state.clone();
        let result = reassign(&mut state, None);
        assert!(
            matches!(result, CommandResult::InvalidReplicaAssignment(_)),
            "{result:?}"
        );
        assert_eq!(state, before);
        // 3 catches up under the new leader: the move completes without 1.
        assert_eq!(alter_isr(&mut state, vec![2, 3]), CommandResult::Ok);
        let done = p(&state);
        assert!(!done.is_moving());
        assert_eq!(done.replicas, vec![2, 3]);
        assert_eq!(done.isr, vec![2, 3]);
        assert_eq!(done.leader, Some(2));
    }

    #[test]
    fn a_partition_moved_to_another_replication_factor_keeps_create_partitions_working() {
        let mut state = with_topic(&[1, 2, 3], vec![1]);
        assert_eq!(reassign(&mut state, Some(vec![1, 2])), CommandResult::Ok);
        assert!(p(&state).is_moving());
        // Mid-move the topic's replication factor is the target's.
        assert_eq!(
            state.apply(&Command::CreatePartitions {
                name: "t".to_string(),
                new_replicas: vec![vec![2, 3]],
            }),
            CommandResult::Ok
        );
        // The moved state survives a snapshot round trip.
        let json = serde_json::to_string(&state).expect("serialize");
        let back: ClusterState = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back, state);
    }
}
