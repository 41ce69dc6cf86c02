//! Replica placement for new partitions: which brokers hold each partition's replicas, the
//! first being the preferred leader.
//!
//! Invariants:
//! - A partition's replicas are distinct brokers.
//! - When every broker has a rack, a partition's replicas span as many racks as there are
//!   (up to its replication factor) before any rack holds two of them, so losing a rack loses
//!   at most `ceil(rf / racks)` replicas of any partition.
//! - Preferred leaders go round robin over the brokers (alternating racks), from a start the
//!   caller derives from the topic, so leaders spread over brokers and racks.
//! - Placement is a pure function of its arguments: the same cluster and topic give the same
//!   assignment.
//! - A topic whose leaders are pinned to racks ([`pin_leader`]) has its replicas ordered by
//!   the preference of their racks: the first is in the most preferred rack holding one.

use std::collections::{BTreeMap, BTreeSet};

/// A broker as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub id: u64,
    pub rack: Option<String>,
}

/// Why no placement exists.
#[derive(Debug, PartialEq, Eq)]
pub struct NotEnoughBrokers {
    pub wanted: usize,
    pub available: usize,
}

/// Places `count` partitions (numbered from `first_partition`) of `rf` replicas each over
/// `brokers`. Racks count only when every broker has one (as Kafka's rack-aware assignment,
/// which refuses a partly racked cluster; here such a cluster is placed without racks).
pub fn place(
    brokers: &[Candidate],
    start: usize,
    first_partition: usize,
    count: usize,
    rf: usize,
) -> Result<Vec<Vec<u64>>, NotEnoughBrokers> {
    if rf == 0 || rf > brokers.len() {
        return Err(NotEnoughBrokers {
            wanted: rf,
            available: brokers.len(),
        });
    }
    let racked = brokers.iter().all(|b| b.rack.is_some());
    let order = if racked {
        rack_alternated(brokers)
    } else {
        let mut order = brokers.to_vec();
        order.sort_by_key(|b| b.id);
        order
    };
    let n = order.len();
    let rack_count = order
        .iter()
        .map(|b| b.rack.as_deref())
        .collect::<BTreeSet<_>>()
        .len();
    Ok((first_partition..first_partition + count)
        .map(|p| {
            let first = (start + p) % n;
            let mut chosen = vec![first];
            let mut racks: BTreeSet<Option<&str>> = BTreeSet::new();
            racks.insert(order[first].rack.as_deref());
            while chosen.len() < rf {
                // Walk on from the leader: the first broker not chosen yet, preferring one
                // whose rack holds no replica while some rack is still unused.
                let want_new_rack = racked && racks.len() < rack_count;
                let next = (1..n)
                    .map(|k| (first + k) % n)
                    .filter(|i| !chosen.contains(i))
                    .find(|i| !want_new_rack || !racks.contains(&order[*i].rack.as_deref()))
                    .expect("fewer replicas than brokers");
                racks.insert(order[next].rack.as_deref());
                chosen.push(next);
            }
            chosen.into_iter().map(|i| order[i].id).collect()
        })
        .collect())
}

/// Replicas to add to a partition held by `current` so it has `rf`: the least loaded of
/// `brokers` (by `load`, replicas per broker) that it does not use, a rack it does not use
/// first when every broker has a rack. Fewer when there are not enough brokers.
pub fn grow(
    brokers: &[Candidate],
    load: &BTreeMap<u64, usize>,
    current: &[u64],
    rf: usize,
) -> Vec<u64> {
    let racked = brokers.iter().all(|b| b.rack.is_some());
    let mut racks: BTreeSet<Option<&str>> = current
        .iter()
        .filter_map(|r| brokers.iter().find(|b| b.id == *r))
        .map(|b| b.rack.as_deref())
        .collect();
    let mut chosen: Vec<u64> = Vec::new();
    while current.len() + chosen.len() < rf {
        let mut candidates: Vec<&Candidate> = brokers
            .iter()
            .filter(|b| !current.contains(&b.id) && !chosen.contains(&b.id))
            .collect();
        candidates.sort_by_key(|b| (load.get(&b.id).copied().unwrap_or(0), b.id));
        let pick = candidates
            .iter()
            .find(|b| !racked || !racks.contains(&b.rack.as_deref()))
            .or_else(|| candidates.first());
        let Some(b) = pick else {
            break;
        };
        racks.insert(b.rack.as_deref());
        chosen.push(b.id);
    }
    chosen
}

/// The brokers ordered so consecutive ones are in different racks: the first of every rack
/// (racks in name order, brokers in id order), then the second of every rack, and so on.
fn rack_alternated(brokers: &[Candidate]) -> Vec<Candidate> {
    let mut by_rack: BTreeMap<&str, Vec<&Candidate>> = BTreeMap::new();
    for b in brokers {
        by_rack
            .entry(b.rack.as_deref().unwrap_or_default())
            .or_default()
            .push(b);
    }
    for members in by_rack.values_mut() {
        members.sort_by_key(|b| b.id);
    }
    let deepest = by_rack.values().map(Vec::len).max().unwrap_or(0);
    (0..deepest)
        .flat_map(|i| by_rack.values().filter_map(move |m| m.get(i).copied()))
        .cloned()
        .collect()
}

/// Orders replicas by the preference of their rack among `racks` (earliest listed first),
/// those in no listed rack last, each group keeping its order: the first replica (the preferred
/// leader) is in the most preferred rack that holds one, and a failover goes to the next.
/// Returns whether the order changed; nothing changes when no replica is in those racks.
pub fn pin_leader<'a>(
    replicas: &mut [u64],
    rack_of: impl Fn(u64) -> Option<&'a str>,
    racks: &[&str],
) -> bool {
    let rank = |id: &u64| {
        rack_of(*id)
            .and_then(|r| racks.iter().position(|p| *p == r))
            .unwrap_or(racks.len())
    };
    if replicas.is_sorted_by_key(rank) {
        return false;
    }
    replicas.sort_by_key(rank);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brokers(spec: &[(u64, Option<&str>)]) -> Vec<Candidate> {
        spec.iter()
            .map(|(id, rack)| Candidate {
                id: *id,
                rack: rack.map(str::to_string),
            })
            .collect()
    }

    fn rack_of(bs: &[Candidate], id: u64) -> &str {
        bs.iter()
            .find(|b| b.id == id)
            .and_then(|b| b.rack.as_deref())
            .unwrap()
    }

    #[test]
    fn without_racks_replicas_are_consecutive_brokers_and_leaders_rotate() {
        let bs = brokers(&[(3, None), (1, None), (2, None)]);
        let a = place(&bs, 0, 0, 3, 2).unwrap();
        assert_eq!(a, vec![vec![1, 2], vec![2, 3], vec![3, 1]]);
        // Another start (another topic) starts elsewhere; more partitions continue the rotation.
        assert_eq!(place(&bs, 1, 3, 1, 3).unwrap(), vec![vec![2, 3, 1]]);
    }

    #[test]
    fn replicas_span_every_rack_before_doubling_up_even_with_uneven_racks() {
        // Rack a has three brokers, b one, c two.
        let bs = brokers(&[
            (1, Some("a")),
            (2, Some("a")),
            (3, Some("a")),
            (4, Some("b")),
            (5, Some("c")),
            (6, Some("c")),
        ]);
        for start in 0..6 {
            let a = place(&bs, start, 0, 12, 3).unwrap();
            for replicas in &a {
                let racks: BTreeSet<&str> = replicas.iter().map(|id| rack_of(&bs, *id)).collect();
                assert_eq!(racks.len(), 3, "{replicas:?} spans every rack");
                let distinct: BTreeSet<&u64> = replicas.iter().collect();
                assert_eq!(distinct.len(), 3);
            }
            // Leaders go round every broker.
            let leaders: BTreeSet<u64> = a.iter().map(|r| r[0]).collect();
            assert_eq!(leaders.len(), 6);
        }
        // With rf above the rack count, racks repeat only after each holds one.
        for replicas in place(&bs, 0, 0, 6, 5).unwrap() {
            let racks: BTreeSet<&str> = replicas.iter().map(|id| rack_of(&bs, *id)).collect();
            assert_eq!(racks.len(), 3);
        }
    }

    #[test]
    fn two_racks_hold_one_and_two_replicas_of_rf3() {
        let bs = brokers(&[
            (1, Some("east")),
            (2, Some("east")),
            (3, Some("west")),
            (4, Some("west")),
        ]);
        for replicas in place(&bs, 7, 0, 8, 3).unwrap() {
            let east = replicas
                .iter()
                .filter(|id| rack_of(&bs, **id) == "east")
                .count();
            assert!(east == 1 || east == 2, "{replicas:?}");
        }
    }

    #[test]
    fn a_partly_racked_cluster_is_placed_without_racks_and_too_few_brokers_is_an_error() {
        let bs = brokers(&[(1, Some("a")), (2, None), (3, Some("a"))]);
        assert_eq!(place(&bs, 0, 0, 1, 3).unwrap(), vec![vec![1, 2, 3]]);
        assert_eq!(
            place(&bs, 0, 0, 1, 4),
            Err(NotEnoughBrokers {
                wanted: 4,
                available: 3
            })
        );
        assert!(place(&bs, 0, 0, 1, 0).is_err());
    }

    #[test]
    fn growing_a_partition_adds_the_least_loaded_brokers_in_new_racks_first() {
        let brokers: Vec<Candidate> = [(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c")]
            .iter()
            .map(|(id, rack)| Candidate {
                id: *id,
                rack: Some(rack.to_string()),
            })
            .collect();
        let load = BTreeMap::from([(2, 0), (3, 5), (4, 1), (5, 9)]);
        // Held by 1 (rack a): the next go to racks b and c, least loaded first.
        assert_eq!(grow(&brokers, &load, &[1], 3), vec![4, 5]);
        assert_eq!(grow(&brokers, &load, &[1, 4], 2), Vec::<u64>::new());
        // More than the brokers can hold: as many as there are.
        assert_eq!(grow(&brokers, &load, &[1], 9).len(), 4);
    }

    #[test]
    fn pinned_replicas_are_ordered_by_the_preference_of_their_racks() {
        let rack = |id: u64| ["a", "b", "c", "b"].get(id as usize - 1).copied();
        let mut r = vec![1, 2, 3];
        assert!(pin_leader(&mut r, rack, &["c", "b"]));
        assert_eq!(r, [3, 2, 1]);
        assert!(!pin_leader(&mut r, rack, &["c", "b"]));
        // Equal ranks keep their order.
        let mut r = vec![4, 2, 1];
        assert!(!pin_leader(&mut r, rack, &["b"]));
        let mut r = vec![1, 4, 2];
        assert!(pin_leader(&mut r, rack, &["b"]));
        assert_eq!(r, [4, 2, 1]);
        // No replica in the racks: unchanged.
        let mut r = vec![1, 2];
        assert!(!pin_leader(&mut r, rack, &["z"]));
        assert_eq!(r, [1, 2]);
    }
}
