//! Reassignment plans, computed from what the cluster holds (pure: tested without brokers).
//! The `strata cluster balance` and `strata broker drain` commands and the controller's
//! automatic balancer (`auto_balance_enable`) plan with it. Broker ids are Kafka's (`i32`).
//!
//! - [`balance`]: replica counts per live broker within one of each other, then preferred
//!   leaders (first replicas) likewise, rack-aware, with as few moves as the greedy steps find;
//! - [`drain`]: every replica off one broker, each to the least loaded live broker the
//!   partition does not use, a rack it does not use first.
//!
//! Invariants: a plan never puts two replicas of a partition on one broker, never uses a broker
//! that is not live, keeps every partition's replication factor, and never puts a second replica
//! in a rack while a live broker in an unused rack could take it. Reordering replicas moves no
//! data (only which replica is preferred to lead).

use std::collections::BTreeMap;

/// A live broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    pub id: i32,
    pub rack: Option<String>,
}

/// A partition and its replicas (first: the preferred leader).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    pub topic: String,
    pub partition: i32,
    pub replicas: Vec<i32>,
    /// Its leaders are pinned to racks (topic config `leaders.preference`): its first replica
    /// stays where it is.
    pub pinned: bool,
}

/// One partition's move: from its replicas to `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub topic: String,
    pub partition: i32,
    pub from: Vec<i32>,
    pub to: Vec<i32>,
}

impl Move {
    /// Whether any replica changes broker (else only the order, i.e. the preferred leader).
    pub fn copies_data(&self) -> bool {
        self.to.iter().any(|b| !self.from.contains(b))
    }
}

struct Planner<'a> {
    brokers: &'a [Broker],
    targets: Vec<Vec<i32>>,
}

impl Planner<'_> {
    fn rack(&self, id: i32) -> Option<&str> {
        self.brokers
            .iter()
            .find(|b| b.id == id)
            .and_then(|b| b.rack.as_deref())
    }

    fn live(&self, id: i32) -> bool {
        self.brokers.iter().any(|b| b.id == id)
    }

    /// Replicas per live broker (every live broker listed, from 0).
    fn counts(&self, leaders_only: bool) -> BTreeMap<i32, usize> {
        let mut c: BTreeMap<i32, usize> = self.brokers.iter().map(|b| (b.id, 0)).collect();
        for t in &self.targets {
            let held = if leaders_only {
                &t[..t.len().min(1)]
            } else {
                &t[..]
            };
            for r in held {
                if let Some(n) = c.get_mut(r) {
                    *n += 1;
                }
            }
        }
        c
    }

    /// Whether `candidate` may replace `out` in partition `i` without a second replica in one
    /// rack (where the racks are known).
    fn rack_ok(&self, i: usize, out: i32, candidate: i32) -> bool {
        let Some(rack) = self.rack(candidate) else {
            return true;
        };
        !self.targets[i]
            .iter()
            .filter(|r| **r != out)
            .any(|r| self.rack(*r) == Some(rack))
    }

    /// The least loaded live broker that may replace `out` in partition `i`: not in it, a rack
    /// it does not use if there is one.
    fn replacement(&self, i: usize, out: i32, counts: &BTreeMap<i32, usize>) -> Option<i32> {
        let mut candidates: Vec<(usize, i32)> = counts
            .iter()
            .filter(|(b, _)| **b != out && !self.targets[i].contains(b))
            .map(|(b, n)| (*n, *b))
            .collect();
        candidates.sort();
        candidates
            .iter()
            .find(|(_, b)| self.rack_ok(i, out, *b))
            .or_else(|| candidates.first())
            .map(|(_, b)| *b)
    }

    fn moves(self, partitions: &[Partition]) -> Vec<Move> {
        partitions
            .iter()
            .zip(self.targets)
            .filter(|(p, t)| p.replicas != *t)
            .map(|(p, to)| Move {
                topic: p.topic.clone(),
                partition: p.partition,
                from: p.replicas.clone(),
                to,
            })
            .collect()
    }
}

/// Followers in another rack than their partition's preferred leader (both racks known): the
/// replica streams that carry every byte produced across zones once more, before (`moves`
/// empty) or after a plan.
pub fn cross_zone_followers(brokers: &[Broker], partitions: &[Partition], moves: &[Move]) -> usize {
    let rack = |id: i32| {
        (brokers.iter())
            .find(|b| b.id == id)
            .and_then(|b| b.rack.as_deref())
    };
    partitions
        .iter()
        .map(|p| {
            let replicas = (moves.iter())
                .find(|m| m.topic == p.topic && m.partition == p.partition)
                .map_or(&p.replicas, |m| &m.to);
            let Some(leader) = replicas.first().and_then(|l| rack(*l)) else {
                return 0;
            };
            (replicas[1..].iter())
                .filter(|r| rack(**r).is_some_and(|z| z != leader))
                .count()
        })
        .sum()
}

/// The broker with the most replicas (or leaders) in `counts`, the lowest id on a tie.
fn busiest(counts: &BTreeMap<i32, usize>) -> Option<(i32, usize)> {
    counts
        .iter()
        .max_by_key(|(b, n)| (**n, std::cmp::Reverse(**b)))
        .map(|(b, n)| (*b, *n))
}

/// Moves every replica off broker `drained` (not in `brokers`, the live brokers it may go
/// to). A partition whose other replicas already use every live broker cannot move: `Err`
/// names it, and nothing is planned.
pub fn drain(
    brokers: &[Broker],
    partitions: &[Partition],
    drained: i32,
) -> Result<Vec<Move>, String> {
    let live: Vec<Broker> = brokers
        .iter()
        .filter(|b| b.id != drained)
        .cloned()
        .collect();
    let mut planner = Planner {
        brokers: &live,
        targets: partitions.iter().map(|p| p.replicas.clone()).collect(),
    };
    for (i, p) in partitions.iter().enumerate() {
        let Some(pos) = planner.targets[i].iter().position(|r| *r == drained) else {
            continue;
        };
        let counts = planner.counts(false);
        let Some(to) = planner.replacement(i, drained, &counts) else {
            return Err(format!(
                "{}-{} has {} replicas and no other live broker can take the one on broker {drained}",
                p.topic,
                p.partition,
                p.replicas.len()
            ));
        };
        planner.targets[i][pos] = to;
        // Leadership leaves the drained broker: the new replica is not preferred; the first
        // remaining replica is.
        if pos == 0 && planner.targets[i].len() > 1 {
            planner.targets[i].swap(0, 1);
        }
    }
    Ok(planner.moves(partitions))
}

/// Spreads replicas, then preferred leaders, evenly over `brokers` (the live ones). Replicas on
/// brokers that are not live are left where they are (a broker may be restarting; drain it to
/// move them).
pub fn balance(brokers: &[Broker], partitions: &[Partition]) -> Vec<Move> {
    let mut planner = Planner {
        brokers,
        targets: partitions.iter().map(|p| p.replicas.clone()).collect(),
    };
    // Replicas: move one at a time from the most to the least loaded broker that can take it.
    let limit = partitions.iter().map(|p| p.replicas.len()).sum::<usize>() + 1;
    for _ in 0..limit {
        let counts = planner.counts(false);
        let Some((hi, max)) = busiest(&counts) else {
            break;
        };
        let mut moved = false;
        let mut receivers: Vec<(usize, i32)> = counts
            .iter()
            .filter(|(_, n)| **n + 1 < max)
            .map(|(b, n)| (*n, *b))
            .collect();
        receivers.sort();
        'find: for (_, lo) in receivers {
            // Prefer a partition `hi` does not lead, so leadership moves less.
            for follower_first in [true, false] {
                for (i, p) in partitions.iter().enumerate() {
                    let t = &planner.targets[i];
                    let Some(pos) = t.iter().position(|r| *r == hi) else {
                        continue;
                    };
                    if (pos > 0) != follower_first
                        || (pos == 0 && p.pinned)
                        || t.contains(&lo)
                        || !planner.rack_ok(i, hi, lo)
                    {
                        continue;
                    }
                    planner.targets[i][pos] = lo;
                    moved = true;
                    break 'find;
                }
            }
        }
        if !moved {
            break;
        }
    }
    // Preferred leaders: swap the first replica with another of the same partition.
    for _ in 0..limit {
        let counts = planner.counts(true);
        let Some((hi, max)) = busiest(&counts) else {
            break;
        };
        let mut moved = false;
        for (i, p) in partitions.iter().enumerate() {
            if planner.targets[i].first() != Some(&hi) || p.pinned {
                continue;
            }
            let best = planner.targets[i]
                .iter()
                .enumerate()
                .skip(1)
                .filter(|(_, r)| planner.live(**r))
                .map(|(pos, r)| (counts.get(r).copied().unwrap_or(usize::MAX), pos))
                .min();
            if let Some((n, pos)) = best {
                if n + 1 < max {
                    planner.targets[i].swap(0, pos);
                    moved = true;
                    break;
                }
            }
        }
        if !moved {
            break;
        }
    }
    planner.moves(partitions)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brokers(ids: &[i32], racks: Option<&[&str]>) -> Vec<Broker> {
        ids.iter()
            .enumerate()
            .map(|(i, id)| Broker {
                id: *id,
                rack: racks.map(|r| r[i].to_string()),
            })
            .collect()
    }

    fn partitions(replicas: &[&[i32]]) -> Vec<Partition> {
        replicas
            .iter()
            .enumerate()
            .map(|(i, r)| Partition {
                topic: "t".to_string(),
                partition: i as i32,
                replicas: r.to_vec(),
                pinned: false,
            })
            .collect()
    }

    fn apply(parts: &[Partition], moves: &[Move]) -> Vec<Vec<i32>> {
        parts
            .iter()
            .map(|p| {
                moves
                    .iter()
                    .find(|m| m.partition == p.partition)
                    .map_or(p.replicas.clone(), |m| m.to.clone())
            })
            .collect()
    }

    fn spread(targets: &[Vec<i32>], ids: &[i32], leaders: bool) -> usize {
        let counts: Vec<usize> = ids
            .iter()
            .map(|b| {
                targets
                    .iter()
                    .filter(|t| {
                        if leaders {
                            t.first() == Some(b)
                        } else {
                            t.contains(b)
                        }
                    })
                    .count()
            })
            .collect();
        counts.iter().max().unwrap() - counts.iter().min().unwrap()
    }

    fn check_valid(targets: &[Vec<i32>], parts: &[Partition], ids: &[i32]) {
        for (t, p) in targets.iter().zip(parts) {
            assert_eq!(t.len(), p.replicas.len(), "replication factor kept");
            let mut d = t.clone();
            d.sort();
            d.dedup();
            assert_eq!(d.len(), t.len(), "no broker twice: {t:?}");
            assert!(
                t.iter().all(|b| ids.contains(b)),
                "live brokers only: {t:?}"
            );
        }
    }

    #[test]
    fn a_fourth_broker_gets_its_share_of_replicas_and_leaders() {
        // 12 partitions, RF 3, placed round robin on brokers 1..3; broker 4 just joined.
        let reps: Vec<Vec<i32>> = (0..12)
            .map(|i| (0..3).map(|k| ((i + k) % 3) + 1).collect())
            .collect();
        let refs: Vec<&[i32]> = reps.iter().map(Vec::as_slice).collect();
        let parts = partitions(&refs);
        let ids = [1, 2, 3, 4];
        let moves = balance(&brokers(&ids, None), &parts);
        let after = apply(&parts, &moves);
        check_valid(&after, &parts, &ids);
        assert!(spread(&after, &ids, false) <= 1, "{after:?}");
        assert!(spread(&after, &ids, true) <= 1, "{after:?}");
        // 36 replicas over 4 brokers: 9 each, so 9 replicas moved to broker 4 and no more.
        let copies: usize = moves
            .iter()
            .map(|m| m.to.iter().filter(|b| !m.from.contains(b)).count())
            .sum();
        assert_eq!(copies, 9);
    }

    #[test]
    fn a_balanced_cluster_needs_no_moves() {
        let parts = partitions(&[&[1, 2], &[2, 3], &[3, 1]]);
        assert!(balance(&brokers(&[1, 2, 3], None), &parts).is_empty());
    }

    #[test]
    fn balancing_keeps_replicas_of_a_partition_in_different_racks() {
        let parts = partitions(&[&[1, 2], &[1, 2], &[1, 2], &[1, 2]]);
        let ids = [1, 2, 3, 4];
        let racks = ["a", "b", "a", "b"];
        let moves = balance(&brokers(&ids, Some(&racks)), &parts);
        let after = apply(&parts, &moves);
        check_valid(&after, &parts, &ids);
        assert!(spread(&after, &ids, false) <= 1, "{after:?}");
        for t in &after {
            let r: Vec<&str> = t.iter().map(|b| racks[*b as usize - 1]).collect();
            assert_ne!(r[0], r[1], "{t:?}");
        }
    }

    #[test]
    fn a_drain_moves_every_replica_and_leadership_off_the_broker() {
        let parts = partitions(&[&[1, 2, 3], &[2, 3, 1], &[3, 1, 2], &[2, 3, 4]]);
        let ids = [1, 2, 3, 4];
        let moves = drain(&brokers(&ids, None), &parts, 1).unwrap();
        let after = apply(&parts, &moves);
        check_valid(&after, &parts, &[2, 3, 4]);
        assert!(after.iter().all(|t| !t.contains(&1)), "{after:?}");
        assert_eq!(after[0][0], 2, "the next replica leads, not the new one");
        assert_eq!(moves.len(), 3, "partition 3 does not use broker 1");
        // Nowhere to go: every other broker already holds a replica.
        let full = partitions(&[&[1, 2, 3, 4]]);
        assert!(drain(&brokers(&ids, None), &full, 1)
            .unwrap_err()
            .contains("t-0"));
    }

    #[test]
    fn a_drain_prefers_a_rack_the_partition_does_not_use() {
        let parts = partitions(&[&[1, 2]]);
        let ids = [1, 2, 3, 4];
        // Broker 1 (rack a) leaves; 3 is in rack b like 2, 4 in rack a.
        let racks = ["a", "b", "b", "a"];
        let moves = drain(&brokers(&ids, Some(&racks)), &parts, 1).unwrap();
        assert_eq!(moves[0].to, vec![2, 4]);
        assert!(moves[0].copies_data());
    }

    #[test]
    fn pinned_leaders_stay_and_cross_zone_followers_are_counted() {
        let b = brokers(&[1, 2, 3], Some(&["a", "b", "c"]));
        // Broker 1 is preferred for all three: the balancer would spread them.
        let mut parts = partitions(&[&[1, 2, 3], &[1, 3, 2], &[1, 2, 3]]);
        assert!(!balance(&b, &parts).is_empty());
        for p in &mut parts {
            p.pinned = true;
        }
        assert!(balance(&b, &parts).is_empty(), "pinned leaders stay");
        // Every follower is in another zone than its leader here.
        assert_eq!(cross_zone_followers(&b, &parts, &[]), 6);
        let one_zone = brokers(&[1, 2, 3], Some(&["a", "a", "c"]));
        assert_eq!(cross_zone_followers(&one_zone, &parts, &[]), 3);
        let moves = [Move {
            topic: "t".into(),
            partition: 0,
            from: vec![1, 2, 3],
            to: vec![3, 1, 2],
        }];
        assert_eq!(cross_zone_followers(&one_zone, &parts, &moves), 4);
    }
}
