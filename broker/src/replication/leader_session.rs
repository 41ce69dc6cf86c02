//! A follower's fetch session with one leader: the client half of KIP-227. The first fetch
//! names every partition and opens a session; each later fetch names only the partitions whose
//! fetch offset, size or leader epoch changed since the leader last heard of them, and forgets
//! those no longer fetched. A follower of 10,000 idle partitions then sends a few bytes per
//! round, and the leader answers only partitions with news.
//!
//! Invariants:
//! - `sent` is what the leader's session holds when `id` is set: it moves only when the
//!   leader accepts a fetch, by exactly what that fetch carried.
//! - A fetch whose outcome is unknown (connection lost, timeout) or refused makes the next
//!   one a full fetch (epoch 0, naming the old session so the leader closes it).

use std::collections::HashMap;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;

use crate::partition::TopicPartition;

/// Epoch of a full fetch asking for a session.
const INITIAL_EPOCH: i32 = 0;

/// What a fetch asks of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asked {
    pub offset: i64,
    pub max_bytes: i32,
    pub leader_epoch: i32,
}

/// The session fields and partitions of one fetch.
pub struct Request {
    pub session_id: i32,
    pub epoch: i32,
    pub topics: Vec<FetchTopic>,
    pub forgotten: Vec<ForgottenTopic>,
}

/// What a fetch in flight will change in the leader's session if accepted.
struct Pending {
    full: bool,
    changed: Vec<(TopicPartition, Asked)>,
    forgotten: Vec<TopicPartition>,
}

/// The session with one leader.
#[derive(Default)]
pub struct LeaderSession {
    /// The leader's session id (0: none).
    id: i32,
    /// The epoch of the next fetch; 0 makes it a full one.
    epoch: i32,
    sent: HashMap<TopicPartition, Asked>,
    pending: Option<Pending>,
}

impl LeaderSession {
    /// Whether the next fetch must be a full one (no session yet, or it was lost or refused):
    /// [`LeaderSession::request`] then, with every partition wanted.
    pub fn needs_full(&self) -> bool {
        self.id == 0 || self.epoch == INITIAL_EPOCH
    }

    /// The next fetch of `wanted` (every partition the follower fetches): in full, or only
    /// what differs from what the leader's session holds.
    pub fn request(&mut self, wanted: &[(&TopicPartition, Asked)]) -> Request {
        let full = self.needs_full();
        // Wanted partitions the session holds: when that is all it holds, none is forgotten
        // (spares a set of every partition per round).
        let mut known = 0;
        let changed: Vec<(TopicPartition, Asked)> = wanted
            .iter()
            .filter(|(tp, asked)| {
                let sent = self.sent.get(*tp);
                known += usize::from(sent.is_some());
                full || sent != Some(asked)
            })
            .map(|(tp, asked)| ((*tp).clone(), *asked))
            .collect();
        let forgotten: Vec<TopicPartition> = if full || known == self.sent.len() {
            Vec::new()
        } else {
            let keep: std::collections::HashSet<&TopicPartition> =
                wanted.iter().map(|(tp, _)| *tp).collect();
            self.sent
                .keys()
                .filter(|tp| !keep.contains(tp))
                .cloned()
                .collect()
        };
        self.send(full, changed, forgotten)
    }

    /// The next incremental fetch when only the partitions in `changes` may differ from what
    /// the leader's session holds (each with what is wanted of it now, `None`: not fetched):
    /// costs the changes, not the partitions followed. Must not be called when
    /// [`LeaderSession::needs_full`].
    pub fn request_changed(&mut self, changes: &[(&TopicPartition, Option<Asked>)]) -> Request {
        debug_assert!(!self.needs_full());
        let mut changed = Vec::new();
        let mut forgotten = Vec::new();
        for (tp, wanted) in changes {
            match (self.sent.get(*tp), wanted) {
                (sent, Some(asked)) if sent != Some(asked) => changed.push(((*tp).clone(), *asked)),
                (Some(_), None) => forgotten.push((*tp).clone()),
                _ => {}
            }
        }
        changed.sort_by(|a, b| a.0.cmp(&b.0));
        changed.dedup_by(|a, b| a.0 == b.0);
        forgotten.sort();
        forgotten.dedup();
        self.send(false, changed, forgotten)
    }

    fn send(
        &mut self,
        full: bool,
        changed: Vec<(TopicPartition, Asked)>,
        forgotten: Vec<TopicPartition>,
    ) -> Request {
        let request = Request {
            session_id: self.id,
            epoch: if full { INITIAL_EPOCH } else { self.epoch },
            topics: by_topic(changed.iter().map(|(tp, a)| (tp, *a)), |tp, a| {
                FetchPartition::default()
                    .with_partition(tp.partition)
                    .with_current_leader_epoch(a.leader_epoch)
                    .with_fetch_offset(a.offset)
                    .with_last_fetched_epoch(-1)
                    .with_log_start_offset(-1)
                    .with_partition_max_bytes(a.max_bytes)
            })
            .into_iter()
            .map(|(topic, partitions)| {
                FetchTopic::default()
                    .with_topic(topic)
                    .with_partitions(partitions)
            })
            .collect(),
            forgotten: by_topic(forgotten.iter().map(|tp| (tp, ())), |tp, _| tp.partition)
                .into_iter()
                .map(|(topic, partitions)| {
                    ForgottenTopic::default()
                        .with_topic(topic)
                        .with_partitions(partitions)
                })
                .collect(),
        };
        self.pending = Some(Pending {
            full,
            changed,
            forgotten,
        });
        request
    }

    /// The leader answered the fetch in flight with `session_id` and top-level `error_code`.
    pub fn answered(&mut self, session_id: i32, error_code: i16) {
        let Some(p) = self.pending.take() else {
            return;
        };
        if error_code != 0 {
            // Unknown session, wrong epoch: start again with a full fetch.
            tracing::debug!(
                session = self.id,
                error_code,
                "fetch session refused; the next fetch is a full one"
            );
            self.restart();
            return;
        }
        if p.full {
            self.sent.clear();
            if session_id == 0 {
                // No slot for a session at the leader: full fetches until one is given.
                self.id = 0;
                self.epoch = INITIAL_EPOCH;
                return;
            }
            self.id = session_id;
            self.epoch = 1;
        } else {
            self.epoch = if self.epoch == i32::MAX {
                1
            } else {
                self.epoch + 1
            };
            for tp in &p.forgotten {
                self.sent.remove(tp);
            }
        }
        self.sent.extend(p.changed);
    }

    /// The fetch in flight got no answer: whether the leader applied it is unknown.
    pub fn lost(&mut self) {
        self.pending = None;
        self.restart();
    }

    fn restart(&mut self) {
        self.epoch = INITIAL_EPOCH;
        self.sent.clear();
    }
}

/// Groups per-partition entries by topic, in first-seen order.
fn by_topic<'a, A: 'a, T>(
    entries: impl Iterator<Item = (&'a TopicPartition, A)>,
    make: impl Fn(&TopicPartition, &A) -> T,
) -> Vec<(TopicName, Vec<T>)> {
    let mut at: HashMap<&str, usize> = HashMap::new();
    let mut out: Vec<(TopicName, Vec<T>)> = Vec::new();
    for (tp, a) in entries {
        let i = *at.entry(tp.topic.as_str()).or_insert_with(|| {
            out.push((
                TopicName(StrBytes::from_string(tp.topic.clone())),
                Vec::new(),
            ));
            out.len() - 1
        });
        out[i].1.push(make(tp, &a));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(t: &str, p: i32) -> TopicPartition {
        TopicPartition {
            topic: t.into(),
            partition: p,
        }
    }

    fn asked(offset: i64) -> Asked {
        Asked {
            offset,
            max_bytes: 1024,
            leader_epoch: 0,
        }
    }

    fn named(r: &Request) -> Vec<(String, i32, i64)> {
        r.topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.topic.0.to_string(), p.partition, p.fetch_offset))
            })
            .collect()
    }

    #[test]
    fn changes_alone_name_what_moved_and_forget_what_stopped() {
        let (a, b, c) = (tp("t", 0), tp("t", 1), tp("u", 0));
        let mut s = LeaderSession::default();
        assert!(s.needs_full());
        s.request(&[(&a, asked(0)), (&b, asked(0))]);
        s.answered(5, 0);
        assert!(!s.needs_full());
        // a unchanged (named again with the same position), b moved, c new, a repeated.
        let r = s.request_changed(&[
            (&a, Some(asked(0))),
            (&b, Some(asked(4))),
            (&c, Some(asked(1))),
            (&b, Some(asked(4))),
        ]);
        assert_eq!((r.session_id, r.epoch), (5, 1));
        assert_eq!(
            named(&r),
            vec![("t".into(), 1, 4), ("u".into(), 0, 1)],
            "only what differs, once"
        );
        assert!(r.forgotten.is_empty());
        s.answered(5, 0);
        // b no longer fetched: forgotten; a never-sent partition not fetched: nothing.
        let r = s.request_changed(&[(&b, None), (&tp("v", 0), None)]);
        assert!(named(&r).is_empty());
        assert_eq!(r.forgotten.len(), 1);
        assert_eq!(r.forgotten[0].partitions, vec![1]);
        s.answered(5, 0);
        // The session now holds a and c: a full diff agrees.
        let r = s.request(&[(&a, asked(0)), (&c, asked(1))]);
        assert!(named(&r).is_empty() && r.forgotten.is_empty());
        // A refusal makes the next fetch a full one.
        s.answered(5, 42);
        assert!(s.needs_full());
    }

    #[test]
    fn full_then_only_changes() {
        let (a, b, c) = (tp("t", 0), tp("t", 1), tp("u", 0));
        let mut s = LeaderSession::default();
        let r = s.request(&[(&a, asked(0)), (&b, asked(0)), (&c, asked(0))]);
        assert_eq!((r.session_id, r.epoch), (0, 0));
        assert_eq!(r.topics.len(), 2, "grouped by topic");
        assert_eq!(named(&r).len(), 3);
        s.answered(77, 0);
        // Only b moved: only b is named; c is dropped: forgotten.
        let r = s.request(&[(&a, asked(0)), (&b, asked(9))]);
        assert_eq!((r.session_id, r.epoch), (77, 1));
        assert_eq!(named(&r), vec![("t".into(), 1, 9)]);
        assert_eq!(r.forgotten.len(), 1);
        assert_eq!(r.forgotten[0].topic.0.as_str(), "u");
        s.answered(77, 0);
        let r = s.request(&[(&a, asked(0)), (&b, asked(9))]);
        assert_eq!(r.epoch, 2);
        assert!(named(&r).is_empty() && r.forgotten.is_empty());
    }

    #[test]
    fn refused_or_lost_fetches_start_over_in_full() {
        let a = tp("t", 0);
        let mut s = LeaderSession::default();
        s.request(&[(&a, asked(0))]);
        s.answered(5, 0);
        s.request(&[(&a, asked(3))]);
        s.answered(0, 71); // INVALID_FETCH_SESSION_EPOCH
        let r = s.request(&[(&a, asked(3))]);
        assert_eq!(
            (r.session_id, r.epoch),
            (5, 0),
            "full, closing the old session"
        );
        assert_eq!(named(&r).len(), 1);
        s.answered(6, 0);
        s.request(&[(&a, asked(4))]);
        s.lost();
        let r = s.request(&[(&a, asked(4))]);
        assert_eq!((r.session_id, r.epoch), (6, 0));
        // A leader with no slot answers session 0: full fetches go on.
        s.answered(0, 0);
        let r = s.request(&[(&a, asked(4))]);
        assert_eq!((r.session_id, r.epoch), (0, 0));
        assert_eq!(named(&r).len(), 1);
    }
}
