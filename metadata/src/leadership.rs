//! Broker registration and fencing, and the partition leader elections they cause.
//!
//! These are the state-machine half of the controller ([`crate::controller`] decides *when*,
//! from heartbeats and the clock; this module decides *what*, deterministically, as part of
//! [`ClusterState::apply`]).
//!
//! Invariants:
//! - A partition's leader is always in its ISR and never a fenced broker; a partition with no
//!   eligible ISR member has no leader (offline) rather than a leader from outside the ISR,
//!   unless its topic allows an unclean election, which makes a live replica leader with an
//!   ISR of itself alone and is counted in `unclean_leader_elections`.
//! - Fencing never empties an ISR: the last member stays, so the replica that holds every
//!   acknowledged record is the one that leads when it comes back.
//! - Every leader change bumps the partition's leader epoch; every change of leader or ISR
//!   bumps its partition epoch. Neither ever decreases.
//! - Elections prefer replicas in assignment order: the first replica is the preferred leader.
//!   A preferred-leader election moves leadership only to a live ISR member, so it never
//!   loses a record; it is what brings leaders back to a broker that returned.

use std::collections::BTreeMap;

use crate::command::{CommandResult, Endpoint, NodeId};
use crate::state::{BrokerInfo, ClusterState, PartitionInfo};

impl ClusterState {
    /// Registers (or re-registers) a broker under a new epoch; it starts fenced.
    pub(crate) fn register_broker(
        &mut self,
        node_id: NodeId,
        host: &str,
        port: u16,
        rack: &Option<String>,
        listeners: &[Endpoint],
        admin: &Option<String>,
    ) -> CommandResult {
        if self.brokers.get(&node_id).is_some_and(|b| !b.fenced) {
            // The earlier incarnation is gone (or about to be): it leads nothing from now on.
            self.fence(node_id);
        }
        // A new incarnation opens its log directories afresh: what failed before is back,
        // or fails again and is reported again.
        self.change_partitions(
            |p| p.offline.contains(&node_id),
            |p| p.offline.retain(|r| *r != node_id),
        );
        self.broker_epochs_issued += 1;
        let epoch = self.broker_epochs_issued;
        self.brokers.insert(
            node_id,
            BrokerInfo {
                node_id,
                host: host.to_string(),
                port,
                rack: rack.clone(),
                listeners: listeners.to_vec(),
                epoch,
                fenced: true,
                offline_log_dirs: Vec::new(),
                admin: admin.clone(),
            },
        );
        CommandResult::BrokerRegistered { epoch }
    }

    /// Forgets a fenced broker that no partition names any more.
    pub(crate) fn unregister_broker(&mut self, node_id: NodeId) -> CommandResult {
        let Some(b) = self.brokers.get(&node_id) else {
            return CommandResult::UnknownBroker;
        };
        if !b.fenced {
            return CommandResult::BrokerInUse(format!(
                "broker {node_id} is running: stop it first"
            ));
        }
        let held: Vec<String> = self
            .topics
            .values()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.replicas.contains(&node_id))
                    .map(move |(i, _)| format!("{}-{i}", t.name))
            })
            .collect();
        if !held.is_empty() {
            let shown: Vec<&str> = held.iter().take(5).map(String::as_str).collect();
            return CommandResult::BrokerInUse(format!(
                "broker {node_id} still holds {} replicas ({}{}): drain it first (strata broker drain {node_id})",
                held.len(),
                shown.join(", "),
                if held.len() > shown.len() { ", ..." } else { "" }
            ));
        }
        self.brokers.remove(&node_id);
        CommandResult::Ok
    }

    pub(crate) fn fence_broker(&mut self, node_id: NodeId, epoch: i64) -> CommandResult {
        match self.check_epoch(node_id, epoch) {
            Err(refused) => refused,
            Ok(true) => CommandResult::Ok,
            Ok(false) => {
                self.fence(node_id);
                CommandResult::Ok
            }
        }
    }

    pub(crate) fn unfence_broker(&mut self, node_id: NodeId, epoch: i64) -> CommandResult {
        match self.check_epoch(node_id, epoch) {
            Err(refused) => refused,
            Ok(false) => CommandResult::Ok,
            Ok(true) => {
                if let Some(b) = self.brokers.get_mut(&node_id) {
                    b.fenced = false;
                }
                self.change_partitions(
                    |p| {
                        p.leader.is_none()
                            && p.isr.contains(&node_id)
                            && !p.offline.contains(&node_id)
                    },
                    |p| {
                        p.leader = Some(node_id);
                        p.leader_epoch += 1;
                        p.partition_epoch += 1;
                    },
                );
                CommandResult::Ok
            }
        }
    }

    /// The leader's ISR change: only from the current leader at the current leader and
    /// partition epochs; the ISR must hold the leader, be a subset of the replicas, and add
    /// no fenced broker.
    pub(crate) fn alter_partition(
        &mut self,
        topic_id: &uuid::Uuid,
        partition: i32,
        leader: NodeId,
        (leader_epoch, partition_epoch): (i32, i32),
        isr: &[NodeId],
    ) -> CommandResult {
        let p = match self.partition_ref(topic_id, partition) {
            Ok(p) => p,
            Err(e) => return e,
        };
        if p.leader != Some(leader) || p.leader_epoch != leader_epoch {
            return CommandResult::FencedLeaderEpoch {
                current: p.leader_epoch,
            };
        }
        if p.partition_epoch != partition_epoch {
            return CommandResult::InvalidUpdateVersion {
                current: p.partition_epoch,
            };
        }
        let mut seen = std::collections::BTreeSet::new();
        for r in isr {
            if !p.replicas.contains(r) || !seen.insert(*r) {
                return CommandResult::InvalidIsr(format!(
                    "{isr:?} is not a set of the replicas {:?}",
                    p.replicas
                ));
            }
            if !p.isr.contains(r) && self.brokers.get(r).is_none_or(|b| b.fenced) {
                return CommandResult::InvalidIsr(format!("broker {r} is fenced"));
            }
        }
        if !isr.contains(&leader) {
            return CommandResult::InvalidIsr(format!("{isr:?} does not hold the leader {leader}"));
        }
        // Keep assignment order, so elections stay predictable.
        let isr: Vec<NodeId> = p
            .replicas
            .iter()
            .copied()
            .filter(|r| isr.contains(r))
            .collect();
        let mut next = p.clone();
        if next.isr != isr {
            next.isr = isr;
            next.partition_epoch += 1;
        }
        // The last adding replica in sync completes a reassignment.
        next.try_complete_reassignment(&self.brokers);
        if next != *p {
            if let Ok(p) = self.partition_mut(topic_id, partition) {
                *p = next;
            }
        }
        CommandResult::Ok
    }

    /// Unclean election: an offline partition is led by its first live replica, alone in the
    /// ISR. A partition with a leader, or without a live replica, is left as it is.
    pub(crate) fn elect_unclean(&mut self, topic_id: &uuid::Uuid, partition: i32) -> CommandResult {
        let p = match self.partition_ref(topic_id, partition) {
            Ok(p) => p,
            Err(e) => return e,
        };
        if p.leader.is_some() {
            return CommandResult::Ok;
        }
        let Some(new) = p
            .replicas
            .iter()
            .copied()
            .find(|r| self.brokers.get(r).is_some_and(|b| !b.fenced))
        else {
            return CommandResult::InvalidIsr("no live replica to elect".to_string());
        };
        let Ok(p) = self.partition_mut(topic_id, partition) else {
            return CommandResult::UnknownPartition;
        };
        p.leader = Some(new);
        p.isr = vec![new];
        p.leader_epoch += 1;
        p.partition_epoch += 1;
        self.unclean_leader_elections += 1;
        CommandResult::Ok
    }

    /// Makes each listed partition's preferred replica its leader where it is live, in the ISR
    /// and not leading already; the others are left as they are.
    pub(crate) fn elect_preferred(&mut self, partitions: &[(uuid::Uuid, i32)]) -> CommandResult {
        for (topic_id, partition) in partitions {
            let electable = self
                .partition_ref(topic_id, *partition)
                .is_ok_and(|p| p.preferred_leader_electable(&self.brokers));
            if !electable {
                continue;
            }
            if let Ok(p) = self.partition_mut(topic_id, *partition) {
                p.leader = p.replicas.first().copied();
                p.leader_epoch += 1;
                p.partition_epoch += 1;
            }
        }
        CommandResult::Ok
    }

    /// Partitions whose preferred replica could lead but does not, for brokers whose share of
    /// such partitions (among those they are preferred for) exceeds `percentage` (Kafka's
    /// `leader.imbalance.per.broker.percentage`): what the controller's automatic rebalance
    /// proposes [`crate::Command::ElectPreferredLeaders`] for.
    pub fn preferred_leader_imbalance(&self, percentage: u32) -> Vec<(uuid::Uuid, i32)> {
        // Per preferred broker: (partitions it is preferred for, electable ones).
        let mut per_broker: BTreeMap<NodeId, (usize, Vec<(uuid::Uuid, i32)>)> = BTreeMap::new();
        for t in self.topics.values() {
            for (i, p) in t.partitions.iter().enumerate() {
                let Some(preferred) = p.replicas.first() else {
                    continue;
                };
                let entry = per_broker.entry(*preferred).or_default();
                entry.0 += 1;
                if p.preferred_leader_electable(&self.brokers) {
                    entry.1.push((t.topic_id, i as i32));
                }
            }
        }
        per_broker
            .into_values()
            .filter(|(total, off)| off.len() * 100 > *total * percentage as usize)
            .flat_map(|(_, off)| off)
            .collect()
    }

    /// Offline partitions whose topic allows unclean elections (its own
    /// `unclean.leader.election.enable`, else the cluster-wide dynamic broker config, else
    /// false, as Kafka's controller decides) and that have a live replica: what the controller
    /// proposes [`crate::Command::ElectUncleanLeader`] for.
    pub fn unclean_candidates(&self) -> Vec<(uuid::Uuid, i32)> {
        const KEY: &str = "unclean.leader.election.enable";
        let yes = |v: &String| v.eq_ignore_ascii_case("true");
        let cluster_wide =
            (self.broker_configs.get("")).is_some_and(|c| c.get(KEY).is_some_and(yes));
        let mut out = Vec::new();
        for t in self.topics.values() {
            if !t.configs.get(KEY).map_or(cluster_wide, yes) {
                continue;
            }
            for (i, p) in t.partitions.iter().enumerate() {
                let live = p
                    .replicas
                    .iter()
                    .any(|r| self.brokers.get(r).is_some_and(|b| !b.fenced));
                if p.leader.is_none() && live {
                    out.push((t.topic_id, i as i32));
                }
            }
        }
        out
    }

    /// `Ok(fenced)` when `epoch` is the broker's current registration.
    fn check_epoch(&self, node_id: NodeId, epoch: i64) -> Result<bool, CommandResult> {
        match self.brokers.get(&node_id) {
            None => Err(CommandResult::UnknownBroker),
            Some(b) if b.epoch != epoch => {
                Err(CommandResult::StaleBrokerEpoch { current: b.epoch })
            }
            Some(b) => Ok(b.fenced),
        }
    }

    /// A broker lost the log directory `dir` holding `partitions` (KIP-858): its replicas
    /// there become offline — out of each ISR unless the last member, leaders no more (another
    /// in-sync replica takes over; with none, the partition has no leader) — until it
    /// registers again. Its other partitions are untouched.
    pub(crate) fn fail_log_dir(
        &mut self,
        node_id: NodeId,
        epoch: i64,
        dir: &str,
        partitions: &[(uuid::Uuid, i32)],
    ) -> CommandResult {
        if let Err(refused) = self.check_epoch(node_id, epoch) {
            return refused;
        }
        if let Some(b) = self.brokers.get_mut(&node_id) {
            if !b.offline_log_dirs.iter().any(|d| d == dir) {
                b.offline_log_dirs.push(dir.to_string());
            }
        }
        let brokers = self.brokers.clone();
        for (topic_id, partition) in partitions {
            let Ok(p) = self.partition_mut(topic_id, *partition) else {
                continue;
            };
            if !p.replicas.contains(&node_id) || p.offline.contains(&node_id) {
                continue;
            }
            p.offline.push(node_id);
            if p.isr.len() > 1 {
                p.isr.retain(|r| *r != node_id);
            }
            if p.leader == Some(node_id) {
                p.leader = elect_from_isr(p, &brokers);
                p.leader_epoch += 1;
            }
            p.partition_epoch += 1;
        }
        CommandResult::Ok
    }

    /// Marks the broker fenced, takes it out of ISRs it is not the last member of, and elects
    /// new leaders for the partitions it led.
    fn fence(&mut self, node_id: NodeId) {
        if let Some(b) = self.brokers.get_mut(&node_id) {
            b.fenced = true;
        }
        let brokers = self.brokers.clone();
        self.change_partitions(
            |p| (p.isr.len() > 1 && p.isr.contains(&node_id)) || p.leader == Some(node_id),
            |p| {
                if p.isr.len() > 1 && p.isr.contains(&node_id) {
                    p.isr.retain(|r| *r != node_id);
                }
                if p.leader == Some(node_id) {
                    p.leader = elect_from_isr(p, &brokers);
                    p.leader_epoch += 1;
                }
                p.partition_epoch += 1;
            },
        );
    }
}

impl PartitionInfo {
    /// Whether a preferred-leader election would change this partition's leader: its first
    /// replica is live, in the ISR, and not the leader.
    pub fn preferred_leader_electable(&self, brokers: &BTreeMap<NodeId, BrokerInfo>) -> bool {
        self.replicas.first().is_some_and(|r| {
            self.leader != Some(*r)
                && self.isr.contains(r)
                && !self.offline.contains(r)
                && brokers.get(r).is_some_and(|b| !b.fenced)
        })
    }
}

/// The first replica, in assignment order, that is in the ISR, not fenced and not offline.
fn elect_from_isr(p: &PartitionInfo, brokers: &BTreeMap<NodeId, BrokerInfo>) -> Option<NodeId> {
    p.replicas.iter().copied().find(|r| {
        p.isr.contains(r) && !p.offline.contains(r) && brokers.get(r).is_some_and(|b| !b.fenced)
    })
}

#[cfg(test)]
mod tests {
    use crate::command::{Command, IsrUpdate};

    use super::*;

    fn register(state: &mut ClusterState, node_id: NodeId) -> i64 {
        match state.apply(&Command::RegisterBroker {
            node_id,
            host: "h".to_string(),
            port: 1,
            rack: None,
            listeners: vec![],
            admin: None,
        }) {
            CommandResult::BrokerRegistered { epoch } => epoch,
            other => panic!("{other:?}"),
        }
    }

    fn live_cluster(ids: &[NodeId]) -> (ClusterState, BTreeMap<NodeId, i64>) {
        let mut state = ClusterState::default();
        let mut epochs = BTreeMap::new();
        for id in ids {
            let epoch = register(&mut state, *id);
            assert_eq!(
                state.apply(&Command::UnfenceBroker {
                    node_id: *id,
                    epoch
                }),
                CommandResult::Ok
            );
            epochs.insert(*id, epoch);
        }
        (state, epochs)
    }

    fn topic(state: &mut ClusterState, replicas: Vec<Vec<NodeId>>) {
        let result = state.apply(&Command::CreateTopic {
            name: "t".to_string(),
            topic_id: uuid::Uuid::new_v4(),
            replicas,
            configs: BTreeMap::new(),
        });
        assert_eq!(result, CommandResult::Ok);
    }

    fn partition(state: &ClusterState, i: usize) -> &PartitionInfo {
        &state.topics["t"].partitions[i]
    }

    #[test]
    fn registration_hands_out_increasing_epochs_and_starts_fenced() {
        let mut state = ClusterState::default();
        assert_eq!(register(&mut state, 1), 1);
        assert_eq!(register(&mut state, 2), 2);
        assert_eq!(register(&mut state, 1), 3);
        assert!(state.brokers.values().all(|b| b.fenced));
        assert_eq!(state.brokers[&1].epoch, 3);
    }

    #[test]
    fn a_failed_log_dir_takes_only_its_replicas_offline_until_the_broker_registers_again() {
        let (mut state, epochs) = live_cluster(&[1, 2]);
        topic(&mut state, vec![vec![1, 2], vec![1, 2]]);
        let id = state.topics["t"].topic_id;
        let fail = |node_id, epoch, partitions: Vec<(uuid::Uuid, i32)>| Command::FailLogDir {
            node_id,
            epoch,
            dir: "/disk2".into(),
            partitions,
        };
        let stale = fail(1, epochs[&1] - 1, vec![(id, 0)]);
        assert!(matches!(
            state.apply(&stale),
            CommandResult::StaleBrokerEpoch { .. }
        ));
        assert_eq!(
            state.apply(&fail(1, epochs[&1], vec![(id, 0)])),
            CommandResult::Ok
        );
        assert_eq!(state.brokers[&1].offline_log_dirs, ["/disk2"]);
        let p0 = partition(&state, 0);
        assert_eq!(
            (p0.leader, p0.isr.clone(), p0.offline.clone()),
            (Some(2), vec![2], vec![1])
        );
        assert_eq!(p0.leader_epoch, 1);
        let p1 = partition(&state, 1);
        assert_eq!(
            (p1.leader, p1.isr.clone()),
            (Some(1), vec![1, 2]),
            "in the other dir"
        );
        // Its last in-sync replica offline too: no leader, and no election brings one back.
        assert_eq!(
            state.apply(&fail(2, epochs[&2], vec![(id, 0)])),
            CommandResult::Ok
        );
        let p0 = partition(&state, 0);
        assert_eq!((p0.leader, p0.isr.clone()), (None, vec![2]));
        assert!(!p0.preferred_leader_electable(&state.brokers));
        state.apply(&Command::ElectPreferredLeaders {
            partitions: vec![(id, 0)],
        });
        assert_eq!(partition(&state, 0).leader, None);
        // A new registration opens the directory afresh.
        let epoch = register(&mut state, 2);
        assert!(state.brokers[&2].offline_log_dirs.is_empty());
        assert_eq!(partition(&state, 0).offline, vec![1]);
        state.apply(&Command::UnfenceBroker { node_id: 2, epoch });
        assert_eq!(partition(&state, 0).leader, Some(2));
    }

    #[test]
    fn a_fenced_leader_is_replaced_by_the_next_isr_replica_and_leaves_the_isr() {
        let (mut state, epochs) = live_cluster(&[1, 2, 3]);
        topic(&mut state, vec![vec![1, 2, 3], vec![2, 3, 1]]);
        assert_eq!(
            state.apply(&Command::FenceBroker {
                node_id: 1,
                epoch: epochs[&1]
            }),
            CommandResult::Ok
        );
        let p0 = partition(&state, 0);
        assert_eq!(p0.leader, Some(2));
        assert_eq!(p0.isr, vec![2, 3]);
        assert_eq!((p0.leader_epoch, p0.partition_epoch), (1, 1));
        // Partition 1 keeps its leader; only its ISR shrinks.
        let p1 = partition(&state, 1);
        assert_eq!(p1.leader, Some(2));
        assert_eq!(p1.isr, vec![2, 3]);
        assert_eq!((p1.leader_epoch, p1.partition_epoch), (0, 1));
        // Fencing again is a no-op.
        let before = state.clone();
        state.apply(&Command::FenceBroker {
            node_id: 1,
            epoch: epochs[&1],
        });
        assert_eq!(state, before);
    }

    #[test]
    fn the_last_isr_member_stays_and_leads_again_when_unfenced() {
        let (mut state, epochs) = live_cluster(&[1, 2]);
        topic(&mut state, vec![vec![1]]);
        state.apply(&Command::FenceBroker {
            node_id: 1,
            epoch: epochs[&1],
        });
        let p = partition(&state, 0);
        assert_eq!(
            (p.leader, p.isr.clone(), p.leader_epoch),
            (None, vec![1], 1)
        );

        // A restart: new registration, still fenced, then the first heartbeat unfences.
        let epoch = register(&mut state, 1);
        assert_eq!(partition(&state, 0).leader, None);
        assert_eq!(
            state.apply(&Command::UnfenceBroker { node_id: 1, epoch }),
            CommandResult::Ok
        );
        let p = partition(&state, 0);
        assert_eq!(
            (p.leader, p.leader_epoch, p.partition_epoch),
            (Some(1), 2, 2)
        );
    }

    #[test]
    fn preferred_leaders_return_once_back_in_the_isr_and_only_past_the_imbalance_threshold() {
        let (mut state, epochs) = live_cluster(&[1, 2, 3]);
        // Broker 1 is preferred for partitions 0 and 1, broker 2 for 2.
        topic(
            &mut state,
            vec![vec![1, 2, 3], vec![1, 3, 2], vec![2, 3, 1]],
        );
        assert!(state.preferred_leader_imbalance(10).is_empty());
        state.apply(&Command::FenceBroker {
            node_id: 1,
            epoch: epochs[&1],
        });
        let id = state.topics["t"].topic_id;
        assert_eq!(partition(&state, 0).leader, Some(2));
        // Fenced and out of the ISR: not electable.
        assert!(state.preferred_leader_imbalance(10).is_empty());
        state.apply(&Command::ElectPreferredLeaders {
            partitions: vec![(id, 0)],
        });
        assert_eq!(partition(&state, 0).leader, Some(2));

        // Back, heartbeating, and in the ISR again (its leader's AlterPartition).
        let epoch = register(&mut state, 1);
        state.apply(&Command::UnfenceBroker { node_id: 1, epoch });
        for (i, leader) in [(0, 2), (1, 3)] {
            let p = partition(&state, i).clone();
            let mut isr = p.isr.clone();
            isr.push(1);
            assert_eq!(
                state.apply(&Command::AlterPartition {
                    topic_id: id,
                    partition: i as i32,
                    leader,
                    leader_epoch: p.leader_epoch,
                    partition_epoch: p.partition_epoch,
                    isr,
                }),
                CommandResult::Ok
            );
        }
        // Broker 1 leads none of its two partitions: 100% > 10%.
        let wanted = state.preferred_leader_imbalance(10);
        assert_eq!(wanted, vec![(id, 0), (id, 1)]);
        let before = partition(&state, 0).clone();
        state.apply(&Command::ElectPreferredLeaders { partitions: wanted });
        let after = partition(&state, 0);
        assert_eq!(after.leader, Some(1));
        assert_eq!(after.leader_epoch, before.leader_epoch + 1);
        assert_eq!(after.partition_epoch, before.partition_epoch + 1);
        assert_eq!(partition(&state, 1).leader, Some(1));
        assert!(state.preferred_leader_imbalance(10).is_empty());
        // Electing a partition already led by its preferred replica changes nothing.
        let before = state.clone();
        state.apply(&Command::ElectPreferredLeaders {
            partitions: vec![(id, 0), (id, 2)],
        });
        assert_eq!(state, before);
    }

    #[test]
    fn one_partition_of_many_off_its_preferred_leader_is_below_the_threshold() {
        let (mut state, epochs) = live_cluster(&[1, 2]);
        let mut replicas = vec![vec![1, 2]];
        replicas.extend((0..19).map(|_| vec![2, 1]));
        topic(&mut state, replicas);
        // Partition 0 moves to 2; 1 comes back in its ISR. Broker 1 is preferred for one
        // partition only: 1 of 1 is off.
        state.apply(&Command::FenceBroker {
            node_id: 1,
            epoch: epochs[&1],
        });
        let epoch = register(&mut state, 1);
        state.apply(&Command::UnfenceBroker { node_id: 1, epoch });
        let id = state.topics["t"].topic_id;
        let p = partition(&state, 0).clone();
        state.apply(&Command::AlterPartition {
            topic_id: id,
            partition: 0,
            leader: 2,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            isr: vec![1, 2],
        });
        assert_eq!(state.preferred_leader_imbalance(10), vec![(id, 0)]);
        assert!(state.preferred_leader_imbalance(100).is_empty());
    }

    #[test]
    fn re_registering_a_live_broker_fences_its_old_incarnation() {
        let (mut state, _) = live_cluster(&[1, 2]);
        topic(&mut state, vec![vec![1, 2]]);
        register(&mut state, 1);
        let p = partition(&state, 0);
        assert_eq!((p.leader, p.isr.clone()), (Some(2), vec![2]));
    }

    #[test]
    fn stale_epochs_and_unknown_brokers_are_refused_without_change() {
        let (mut state, epochs) = live_cluster(&[1]);
        let before = state.clone();
        assert_eq!(
            state.apply(&Command::FenceBroker {
                node_id: 1,
                epoch: epochs[&1] - 1
            }),
            CommandResult::StaleBrokerEpoch {
                current: epochs[&1]
            }
        );
        assert_eq!(
            state.apply(&Command::UnfenceBroker {
                node_id: 9,
                epoch: 1
            }),
            CommandResult::UnknownBroker
        );
        assert_eq!(state, before);
    }

    #[test]
    fn new_partitions_are_led_by_their_first_live_replica() {
        let (mut state, epochs) = live_cluster(&[1, 2]);
        state.apply(&Command::FenceBroker {
            node_id: 1,
            epoch: epochs[&1],
        });
        topic(&mut state, vec![vec![1, 2]]);
        assert_eq!(partition(&state, 0).leader, Some(2));
        state.apply(&Command::DeleteTopic {
            name: "t".to_string(),
        });
        topic(&mut state, vec![vec![1]]);
        assert_eq!(partition(&state, 0).leader, None);
    }

    fn alter(
        state: &mut ClusterState,
        leader: NodeId,
        epochs: (i32, i32),
        isr: &[NodeId],
    ) -> CommandResult {
        let topic_id = state.topics["t"].topic_id;
        state.apply(&Command::AlterPartition {
            topic_id,
            partition: 0,
            leader,
            leader_epoch: epochs.0,
            partition_epoch: epochs.1,
            isr: isr.to_vec(),
        })
    }

    #[test]
    fn the_leader_shrinks_and_expands_its_isr_at_the_current_epochs() {
        let (mut state, epochs) = live_cluster(&[1, 2, 3]);
        topic(&mut state, vec![vec![1, 2, 3]]);
        assert_eq!(alter(&mut state, 1, (0, 0), &[1, 3]), CommandResult::Ok);
        assert_eq!(partition(&state, 0).isr, vec![1, 3]);
        assert_eq!(partition(&state, 0).partition_epoch, 1);
        // A stale partition epoch, another leader, an old leader epoch: refused unchanged.
        let before = state.clone();
        assert_eq!(
            alter(&mut state, 1, (0, 0), &[1]),
            CommandResult::InvalidUpdateVersion { current: 1 }
        );
        assert_eq!(
            alter(&mut state, 2, (0, 1), &[1]),
            CommandResult::FencedLeaderEpoch { current: 0 }
        );
        assert_eq!(
            alter(&mut state, 1, (-1, 1), &[1]),
            CommandResult::FencedLeaderEpoch { current: 0 }
        );
        assert!(
            matches!(
                alter(&mut state, 1, (0, 1), &[3]),
                CommandResult::InvalidIsr(_)
            ),
            "no leader"
        );
        assert!(matches!(
            alter(&mut state, 1, (0, 1), &[1, 9]),
            CommandResult::InvalidIsr(_)
        ));
        assert_eq!(state, before);
        // Expanding with a fenced broker is refused; once it is live again it may join.
        state.apply(&Command::FenceBroker {
            node_id: 2,
            epoch: epochs[&2],
        });
        assert!(matches!(
            alter(&mut state, 1, (0, 1), &[2, 1, 3]),
            CommandResult::InvalidIsr(_)
        ));
        state.apply(&Command::UnfenceBroker {
            node_id: 2,
            epoch: epochs[&2],
        });
        assert_eq!(alter(&mut state, 1, (0, 1), &[3, 2, 1]), CommandResult::Ok);
        assert_eq!(partition(&state, 0).isr, vec![1, 2, 3], "assignment order");
    }

    #[test]
    fn many_isr_changes_in_one_entry_are_each_judged_alone() {
        let (mut state, _) = live_cluster(&[1, 2, 3]);
        topic(
            &mut state,
            vec![vec![1, 2, 3], vec![2, 3, 1], vec![1, 2, 3]],
        );
        let topic_id = state.topics["t"].topic_id;
        let update = |partition, leader, partition_epoch, isr: &[NodeId]| IsrUpdate {
            topic_id,
            partition,
            leader,
            leader_epoch: 0,
            partition_epoch,
            isr: isr.to_vec(),
        };
        let result = state.apply(&Command::AlterPartitions {
            changes: vec![
                update(0, 1, 0, &[1, 3]),
                update(1, 2, 0, &[2]),
                // Not its leader, a stale epoch, no such partition: refused, the rest apply.
                update(2, 3, 0, &[3]),
                update(0, 1, 0, &[1]),
                update(7, 1, 0, &[1]),
            ],
        });
        assert_eq!(
            result,
            CommandResult::Each(vec![
                CommandResult::Ok,
                CommandResult::Ok,
                CommandResult::FencedLeaderEpoch { current: 0 },
                CommandResult::InvalidUpdateVersion { current: 1 },
                CommandResult::UnknownPartition,
            ])
        );
        assert!(result.is_ok());
        assert_eq!(partition(&state, 0).isr, vec![1, 3]);
        assert_eq!(partition(&state, 1).isr, vec![2]);
        assert_eq!(partition(&state, 2).isr, vec![1, 2, 3]);
        // The same changes one entry each leave the same state.
        let (mut one_by_one, _) = live_cluster(&[1, 2, 3]);
        topic(
            &mut one_by_one,
            vec![vec![1, 2, 3], vec![2, 3, 1], vec![1, 2, 3]],
        );
        let id = one_by_one.topics["t"].topic_id;
        for (partition, leader, isr) in [(0, 1, vec![1, 3]), (1, 2, vec![2])] {
            one_by_one.apply(&Command::AlterPartition {
                topic_id: id,
                partition,
                leader,
                leader_epoch: 0,
                partition_epoch: 0,
                isr,
            });
        }
        for p in 0..3 {
            assert_eq!(partition(&state, p).isr, partition(&one_by_one, p).isr);
        }
    }

    #[test]
    fn an_unclean_election_takes_a_live_replica_outside_the_isr_only_when_allowed() {
        let (mut state, epochs) = live_cluster(&[1, 2]);
        topic(&mut state, vec![vec![1, 2]]);
        // 2 leaves the ISR, then 1 (the last ISR member) dies: offline.
        state.apply(&Command::FenceBroker {
            node_id: 2,
            epoch: epochs[&2],
        });
        state.apply(&Command::FenceBroker {
            node_id: 1,
            epoch: epochs[&1],
        });
        assert_eq!(partition(&state, 0).leader, None);
        assert_eq!(partition(&state, 0).isr, vec![1]);
        state.apply(&Command::UnfenceBroker {
            node_id: 2,
            epoch: epochs[&2],
        });
        assert_eq!(partition(&state, 0).leader, None, "2 is not in the ISR");
        assert!(
            state.unclean_candidates().is_empty(),
            "not allowed by the topic"
        );

        let topic_id = state.topics["t"].topic_id;
        let unclean = |v: &str| {
            BTreeMap::from([("unclean.leader.election.enable".to_string(), v.to_string())])
        };
        // The cluster-wide default allows it unless the topic says otherwise.
        state.apply(&Command::AlterBrokerConfig {
            resource: String::new(),
            set: unclean("true"),
            delete: vec![],
        });
        assert_eq!(
            state.unclean_candidates(),
            vec![(topic_id, 0)],
            "cluster-wide default"
        );
        state.apply(&Command::AlterTopicConfig {
            name: "t".to_string(),
            set: unclean("false"),
            delete: vec![],
        });
        assert!(
            state.unclean_candidates().is_empty(),
            "the topic's own wins"
        );
        state.apply(&Command::AlterBrokerConfig {
            resource: String::new(),
            set: BTreeMap::new(),
            delete: vec!["unclean.leader.election.enable".to_string()],
        });
        state.apply(&Command::AlterTopicConfig {
            name: "t".to_string(),
            set: unclean("true"),
            delete: vec![],
        });
        assert_eq!(state.unclean_candidates(), vec![(topic_id, 0)]);
        let epoch = partition(&state, 0).leader_epoch;
        assert_eq!(
            state.apply(&Command::ElectUncleanLeader {
                topic_id,
                partition: 0
            }),
            CommandResult::Ok
        );
        let p = partition(&state, 0);
        assert_eq!(
            (p.leader, p.isr.clone(), p.leader_epoch),
            (Some(2), vec![2], epoch + 1)
        );
        assert_eq!(state.unclean_leader_elections, 1);
        // Led now: another election changes nothing.
        let before = state.clone();
        state.apply(&Command::ElectUncleanLeader {
            topic_id,
            partition: 0,
        });
        assert_eq!(state, before);
        assert!(state.unclean_candidates().is_empty());
    }

    #[test]
    fn only_a_stopped_broker_holding_nothing_is_unregistered() {
        let (mut state, epochs) = live_cluster(&[1, 2, 3]);
        topic(&mut state, vec![vec![1, 2]]);
        let before = state.clone();
        assert!(matches!(
            state.apply(&Command::UnregisterBroker { node_id: 3 }),
            CommandResult::BrokerInUse(m) if m.contains("running")
        ));
        state.apply(&Command::FenceBroker {
            node_id: 2,
            epoch: epochs[&2],
        });
        assert!(matches!(
            state.apply(&Command::UnregisterBroker { node_id: 2 }),
            CommandResult::BrokerInUse(m) if m.contains("t-0") && m.contains("drain")
        ));
        assert_eq!(
            state.apply(&Command::UnregisterBroker { node_id: 9 }),
            CommandResult::UnknownBroker
        );
        state.apply(&Command::FenceBroker {
            node_id: 3,
            epoch: epochs[&3],
        });
        assert_eq!(
            state.apply(&Command::UnregisterBroker { node_id: 3 }),
            CommandResult::Ok
        );
        assert!(!state.brokers.contains_key(&3));
        assert_eq!(before.brokers.len(), 3);
    }
}
