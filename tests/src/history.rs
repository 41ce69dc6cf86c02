//! A checker over a recorded history of sends and polls, in the style of Jepsen's Kafka
//! workload: what producers were told, what consumers saw while faults were injected, and
//! the final contents of each partition.
//!
//! It reports, per kind:
//! - **lost**: an acknowledged write missing from the final log (or at another offset);
//! - **duplicate**: a value present more than once in the final log (idempotence on);
//! - **reordered**: two acknowledged writes of one producer to one partition whose offsets
//!   are in the opposite order of their sends;
//! - **phantom**: a record a consumer saw that the final log does not hold at that offset
//!   (a read of data that was later lost);
//! - **skipped**: a consumer that read offsets `a` and `b > a + 1` of a partition in
//!   succession while the final log holds a record between them.

use std::collections::{BTreeMap, HashMap};

/// One send: its index in send order, partition and value, and the acknowledged offset
/// (`None`: failed or never acknowledged; negative: acknowledged without an offset, as
/// librdkafka's idempotent producer does when a later batch's success implies an earlier one
/// whose own answer was lost was persisted — found by its value in the final log).
#[derive(Clone, Debug)]
pub struct Send {
    pub index: usize,
    pub partition: i32,
    pub value: Vec<u8>,
    pub acked: Option<i64>,
}

/// One record a consumer returned, in the order it returned them.
#[derive(Clone, Debug)]
pub struct Poll {
    pub partition: i32,
    pub offset: i64,
    pub value: Vec<u8>,
}

/// What the checker found; empty when the history is valid.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Anomalies {
    pub lost: Vec<String>,
    pub duplicate: Vec<String>,
    pub reordered: Vec<String>,
    pub phantom: Vec<String>,
    pub skipped: Vec<String>,
}

impl Anomalies {
    pub fn is_empty(&self) -> bool {
        self.lost.is_empty()
            && self.duplicate.is_empty()
            && self.reordered.is_empty()
            && self.phantom.is_empty()
            && self.skipped.is_empty()
    }
}

/// Checks `sends` and `polls` (each consumer's polls in its order) against `final_log`: per
/// partition, offset → value of every record read back at the end.
pub fn check(
    sends: &[Send],
    polls: &[Vec<Poll>],
    final_log: &BTreeMap<i32, BTreeMap<i64, Vec<u8>>>,
) -> Anomalies {
    let mut a = Anomalies::default();
    // Where each acknowledged send is: its offset, or for an acknowledgement without one, where
    // its value is in the final log (a lost one has none, and is reported below).
    let mut acked: Vec<(&Send, i64)> = Vec::new();
    for s in sends {
        let Some(off) = s.acked else { continue };
        if off < 0 {
            let found = final_log
                .get(&s.partition)
                .and_then(|log| log.iter().find(|(_, v)| **v == s.value));
            match found {
                Some((at, _)) => acked.push((s, *at)),
                None => a.lost.push(format!(
                    "send {} ({}) acked without an offset, not in the final log of {}",
                    s.index,
                    String::from_utf8_lossy(&s.value),
                    s.partition
                )),
            }
            continue;
        }
        acked.push((s, off));
        match final_log.get(&s.partition).and_then(|p| p.get(&off)) {
            Some(v) if *v == s.value => {}
            Some(v) => a.lost.push(format!(
                "send {} ({}) acked at {}/{off}, which holds {}",
                s.index,
                String::from_utf8_lossy(&s.value),
                s.partition,
                String::from_utf8_lossy(v)
            )),
            None => a.lost.push(format!(
                "send {} ({}) acked at {}/{off}, which is gone",
                s.index,
                String::from_utf8_lossy(&s.value),
                s.partition
            )),
        }
    }
    let mut seen: HashMap<&[u8], (i32, i64)> = HashMap::new();
    for (p, log) in final_log {
        for (off, v) in log {
            if let Some((q, o)) = seen.insert(v.as_slice(), (*p, *off)) {
                a.duplicate.push(format!(
                    "{} at {q}/{o} and {p}/{off}",
                    String::from_utf8_lossy(v)
                ));
            }
        }
    }
    let mut last: HashMap<i32, (usize, i64)> = HashMap::new();
    acked.sort_by_key(|(s, _)| s.index);
    for (s, off) in acked {
        if let Some((i, o)) = last.insert(s.partition, (s.index, off)) {
            if o >= off {
                a.reordered.push(format!(
                    "send {i} at {}/{o} but later send {} at {off}",
                    s.partition, s.index
                ));
            }
        }
    }
    for consumer in polls {
        let mut prev: HashMap<i32, i64> = HashMap::new();
        for r in consumer {
            match final_log.get(&r.partition).and_then(|p| p.get(&r.offset)) {
                Some(v) if *v == r.value => {}
                _ => a.phantom.push(format!(
                    "read {} at {}/{}, not in the final log",
                    String::from_utf8_lossy(&r.value),
                    r.partition,
                    r.offset
                )),
            }
            if let Some(p) = prev.insert(r.partition, r.offset) {
                if r.offset > p + 1 {
                    let between = final_log
                        .get(&r.partition)
                        .is_some_and(|log| log.range(p + 1..r.offset).next().is_some());
                    if between {
                        a.skipped.push(format!(
                            "read {}/{p} then {}/{}, skipping records between",
                            r.partition, r.partition, r.offset
                        ));
                    }
                }
            }
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(entries: &[(i32, i64, &str)]) -> BTreeMap<i32, BTreeMap<i64, Vec<u8>>> {
        let mut m: BTreeMap<i32, BTreeMap<i64, Vec<u8>>> = BTreeMap::new();
        for (p, o, v) in entries {
            m.entry(*p).or_default().insert(*o, v.as_bytes().to_vec());
        }
        m
    }

    fn send(index: usize, partition: i32, value: &str, acked: Option<i64>) -> Send {
        Send {
            index,
            partition,
            value: value.as_bytes().to_vec(),
            acked,
        }
    }

    fn poll(partition: i32, offset: i64, value: &str) -> Poll {
        Poll {
            partition,
            offset,
            value: value.as_bytes().to_vec(),
        }
    }

    #[test]
    fn a_clean_history_has_no_anomalies() {
        let sends = [
            send(0, 0, "a", Some(0)),
            send(1, 0, "b", Some(1)),
            send(2, 0, "c", None),
        ];
        let polls = [vec![poll(0, 0, "a"), poll(0, 1, "b"), poll(0, 0, "a")]];
        assert!(check(&sends, &polls, &log(&[(0, 0, "a"), (0, 1, "b")])).is_empty());
    }

    #[test]
    fn each_kind_of_anomaly_is_found() {
        let sends = [
            send(0, 0, "a", Some(0)),
            send(1, 0, "b", Some(2)),
            send(2, 0, "c", Some(1)),
            send(3, 0, "d", Some(5)),
        ];
        let polls = [vec![poll(0, 0, "a"), poll(0, 2, "b"), poll(0, 4, "x")]];
        let final_log = log(&[(0, 0, "a"), (0, 1, "c"), (0, 2, "b"), (0, 3, "a")]);
        let a = check(&sends, &polls, &final_log);
        // d acked at 5, which is gone.
        assert_eq!(a.lost.len(), 1, "{a:?}");
        // a at 0 and at 3.
        assert_eq!(a.duplicate.len(), 1, "{a:?}");
        // b sent before c but at a higher offset.
        assert_eq!(a.reordered.len(), 1, "{a:?}");
        // x read at 4, which the final log does not hold.
        assert_eq!(a.phantom.len(), 1, "{a:?}");
        // 0 then 2 (1 between), and 2 then 4 (3 between).
        assert_eq!(a.skipped.len(), 2, "{a:?}");
    }

    #[test]
    fn an_acknowledgement_without_an_offset_is_found_by_its_value() {
        let final_log = log(&[(0, 0, "a"), (0, 1, "b"), (0, 2, "c")]);
        let sends = [
            send(0, 0, "a", Some(0)),
            send(1, 0, "b", Some(-1001)),
            send(2, 0, "c", Some(2)),
        ];
        assert!(check(&sends, &[], &final_log).is_empty());
        // Not in the log: lost. In it, but before an earlier send: reordered.
        let sends = [
            send(0, 0, "b", Some(1)),
            send(1, 0, "a", Some(-1001)),
            send(2, 0, "d", Some(-1001)),
        ];
        let a = check(&sends, &[], &final_log);
        assert_eq!(a.lost.len(), 1, "{a:?}");
        assert_eq!(a.reordered.len(), 1, "{a:?}");
    }
}
