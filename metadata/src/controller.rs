//! The controller: broker liveness, kept by whichever node leads the metadata quorum.
//!
//! Brokers send a [`Heartbeat`] to the leader every `broker_heartbeat_interval_ms`; the
//! controller keeps the time it last heard from each in memory (heartbeats are not raft
//! entries: a cluster of idle brokers writes nothing). What changes the state goes through
//! raft as commands: a fenced broker that heartbeats is unfenced, a broker shutting down is
//! fenced, and an unfenced broker silent for the session timeout is fenced. The elections
//! those fences cause are in [`crate::leadership`].
//!
//! Invariants:
//! - Only the raft leader acts as controller, so there is at most one active controller per
//!   term, and a deposed one cannot commit anything.
//! - A new controller knows no heartbeat times: every broker gets a full session timeout
//!   from the moment the controller saw its new term, so a change of controller fences no
//!   live broker.
//! - A heartbeat from an earlier registration of a broker (another epoch) changes nothing; its
//!   sender is told to register again.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::command::NodeId;
use crate::state::ClusterState;

/// A broker's liveness report.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Heartbeat {
    pub node_id: NodeId,
    /// The broker's registration epoch.
    pub epoch: i64,
    /// A broker stopping cleanly asks to be fenced, so its partitions move now rather than
    /// after the session timeout.
    pub shutting_down: bool,
}

/// The controller's answer to a [`Heartbeat`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum HeartbeatReply {
    /// The registration is current; `fenced` as committed after this heartbeat.
    Alive { fenced: bool },
    /// The broker's registration is not `epoch` (`current`, or none): register again.
    StaleEpoch { current: Option<i64> },
}

/// What a heartbeat calls for, decided by [`Liveness::heartbeat`].
#[derive(Debug, PartialEq)]
pub(crate) enum Verdict {
    /// Nothing to commit; answer this.
    Reply(HeartbeatReply),
    /// Commit `FenceBroker` (true) or `UnfenceBroker` (false), then answer.
    SetFenced(bool),
}

/// Heartbeat times, valid for one controller term.
#[derive(Debug, Default)]
pub(crate) struct Liveness {
    term: Option<u64>,
    /// When this controller's term was first seen: the grace start for silent brokers.
    since: Option<Instant>,
    last_seen: HashMap<NodeId, Instant>,
}

impl Liveness {
    /// Forgets every heartbeat time when `term` is new to this node.
    pub(crate) fn observe_term(&mut self, term: u64, now: Instant) {
        if self.term != Some(term) {
            self.term = Some(term);
            self.since = Some(now);
            self.last_seen.clear();
        }
    }

    /// Records `hb` and decides what it calls for.
    pub(crate) fn heartbeat(
        &mut self,
        state: &ClusterState,
        hb: &Heartbeat,
        now: Instant,
    ) -> Verdict {
        let Some(broker) = state.brokers.get(&hb.node_id) else {
            return Verdict::Reply(HeartbeatReply::StaleEpoch { current: None });
        };
        if broker.epoch != hb.epoch {
            return Verdict::Reply(HeartbeatReply::StaleEpoch {
                current: Some(broker.epoch),
            });
        }
        self.last_seen.insert(hb.node_id, now);
        match (hb.shutting_down, broker.fenced) {
            (true, false) => Verdict::SetFenced(true),
            (false, true) => Verdict::SetFenced(false),
            (_, fenced) => Verdict::Reply(HeartbeatReply::Alive { fenced }),
        }
    }

    /// Unfenced brokers silent for longer than `timeout`: (node id, epoch, silent for).
    pub(crate) fn expired(
        &self,
        state: &ClusterState,
        now: Instant,
        timeout: Duration,
    ) -> Vec<(NodeId, i64, Duration)> {
        let Some(since) = self.since else {
            return Vec::new();
        };
        state
            .brokers
            .values()
            .filter(|b| !b.fenced)
            .filter_map(|b| {
                let last = self.last_seen.get(&b.node_id).copied().unwrap_or(since);
                let silent = now.saturating_duration_since(last);
                (silent > timeout).then_some((b.node_id, b.epoch, silent))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::command::{Command, CommandResult};

    use super::*;

    fn state_with(live: &[NodeId], fenced: &[NodeId]) -> ClusterState {
        let mut state = ClusterState::default();
        for id in live.iter().chain(fenced) {
            let CommandResult::BrokerRegistered { epoch } = state.apply(&Command::RegisterBroker {
                node_id: *id,
                host: "h".into(),
                port: 1,
                rack: None,
                listeners: vec![],
                admin: None,
            }) else {
                panic!("register");
            };
            if live.contains(id) {
                state.apply(&Command::UnfenceBroker {
                    node_id: *id,
                    epoch,
                });
            }
        }
        state
    }

    fn hb(state: &ClusterState, node_id: NodeId, shutting_down: bool) -> Heartbeat {
        Heartbeat {
            node_id,
            epoch: state.brokers[&node_id].epoch,
            shutting_down,
        }
    }

    #[test]
    fn a_heartbeat_unfences_a_fenced_broker_and_a_shutdown_fences_a_live_one() {
        let state = state_with(&[1], &[2]);
        let mut l = Liveness::default();
        let now = Instant::now();
        l.observe_term(1, now);
        assert_eq!(
            l.heartbeat(&state, &hb(&state, 2, false), now),
            Verdict::SetFenced(false)
        );
        assert_eq!(
            l.heartbeat(&state, &hb(&state, 1, true), now),
            Verdict::SetFenced(true)
        );
        assert_eq!(
            l.heartbeat(&state, &hb(&state, 1, false), now),
            Verdict::Reply(HeartbeatReply::Alive { fenced: false })
        );
        assert_eq!(
            l.heartbeat(&state, &hb(&state, 2, true), now),
            Verdict::Reply(HeartbeatReply::Alive { fenced: true })
        );
    }

    #[test]
    fn heartbeats_of_another_epoch_or_an_unknown_broker_are_stale() {
        let state = state_with(&[1], &[]);
        let mut l = Liveness::default();
        let now = Instant::now();
        let mut old = hb(&state, 1, false);
        old.epoch -= 1;
        assert_eq!(
            l.heartbeat(&state, &old, now),
            Verdict::Reply(HeartbeatReply::StaleEpoch {
                current: Some(old.epoch + 1)
            })
        );
        old.node_id = 7;
        assert_eq!(
            l.heartbeat(&state, &old, now),
            Verdict::Reply(HeartbeatReply::StaleEpoch { current: None })
        );
    }

    #[test]
    fn silent_live_brokers_expire_after_the_timeout_counted_from_the_term_start() {
        let state = state_with(&[1, 2], &[3]);
        let mut l = Liveness::default();
        let t0 = Instant::now();
        let timeout = Duration::from_secs(3);
        assert!(
            l.expired(&state, t0 + timeout * 10, timeout).is_empty(),
            "no term seen yet"
        );
        l.observe_term(5, t0);
        l.heartbeat(&state, &hb(&state, 1, false), t0 + Duration::from_secs(2));
        assert!(l.expired(&state, t0 + timeout, timeout).is_empty());
        let late = l.expired(&state, t0 + Duration::from_secs(4), timeout);
        assert_eq!(
            late.iter().map(|(id, ..)| *id).collect::<Vec<_>>(),
            vec![2],
            "broker 1 heartbeated, 3 is already fenced"
        );
        // A new term forgets everything and restarts the grace period.
        l.observe_term(6, t0 + Duration::from_secs(10));
        assert!(l
            .expired(&state, t0 + Duration::from_secs(12), timeout)
            .is_empty());
    }
}
