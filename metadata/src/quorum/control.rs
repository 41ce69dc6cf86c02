//! The controller loop: on the metadata leader, each tick fences brokers whose session
//! expired, elects leaders outside the ISR where a topic allows it, and now and then hands
//! leadership back to preferred replicas. The rules are [`crate::controller`]'s (pure); this
//! applies them through the log.

use std::sync::{PoisonError, Weak};

use openraft::ServerState;

use super::*;
use crate::command::{Command, CommandResult};

impl Inner {
    /// One controller round on the leader: fence brokers whose session expired, elect leaders
    /// outside the ISR where a topic allows it, and now and then hand leadership back to
    /// preferred replicas.
    pub(super) async fn control(&self) {
        self.fence_expired_and_elect_unclean().await;
        self.balance_leaders().await;
    }

    /// Every `leader_balance.interval`: preferred-leader elections where a broker's share of
    /// partitions led elsewhere passed the threshold. The first check waits a whole interval
    /// after this node became controller, so returning brokers catch up first.
    pub(super) async fn balance_leaders(&self) {
        let Some(balance) = self.leader_balance else {
            return;
        };
        {
            let mut at = self
                .balanced_at
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let now = std::time::Instant::now();
            match *at {
                Some(t) if now.duration_since(t) < balance.interval => return,
                None => {
                    *at = Some(now);
                    return;
                }
                Some(_) => *at = Some(now),
            }
        }
        let partitions = self
            .state
            .borrow()
            .preferred_leader_imbalance(balance.per_broker_percentage);
        if partitions.is_empty() {
            return;
        }
        let count = partitions.len();
        match self
            .local_propose(Command::ElectPreferredLeaders { partitions })
            .await
        {
            Ok(_) => tracing::info!(
                partitions = count,
                "leadership handed back to preferred replicas"
            ),
            Err(e) => tracing::warn!(error = ?e, "preferred leader election failed; will retry"),
        }
    }

    pub(super) async fn fence_expired_and_elect_unclean(&self) {
        let expired = {
            let state = self.state.borrow().clone();
            let mut liveness = self.liveness.lock().unwrap_or_else(PoisonError::into_inner);
            let now = std::time::Instant::now();
            liveness.observe_term(self.current_term(), now);
            liveness.expired(&state, now, self.session_timeout)
        };
        for (node_id, epoch, silent) in expired {
            tracing::warn!(
                broker = node_id,
                epoch,
                silent_ms = silent.as_millis() as u64,
                "broker missed its heartbeats for the session timeout: fencing it"
            );
            if let Err(e) = self
                .local_propose(Command::FenceBroker { node_id, epoch })
                .await
            {
                tracing::warn!(broker = node_id, error = ?e, "fencing failed; will retry");
            }
        }
        let candidates = self.state.borrow().unclean_candidates();
        for (topic_id, partition) in candidates {
            match self
                .local_propose(Command::ElectUncleanLeader {
                    topic_id,
                    partition,
                })
                .await
            {
                Ok((CommandResult::Ok, _)) => {
                    let state = self.state.borrow().clone();
                    let (topic, leader) = state
                        .topic_by_id(&topic_id)
                        .map(|t| {
                            let leader = usize::try_from(partition)
                                .ok()
                                .and_then(|i| t.partitions.get(i))
                                .and_then(|p| p.leader);
                            (t.name.clone(), leader)
                        })
                        .unwrap_or_default();
                    tracing::warn!(
                        %topic,
                        partition,
                        ?leader,
                        "UNCLEAN leader election: no in-sync replica was alive; records only the old ISR held are lost"
                    );
                }
                other => tracing::debug!(partition, answer = ?other, "unclean election not made"),
            }
        }
    }
}

/// The controller loop: on the leader, one [`Inner::control`] round per tick.
pub(super) async fn run_controller(inner: Weak<Inner>) {
    let mut tick = tokio::time::interval(CONTROLLER_TICK);
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let leads = {
            let m = inner.metrics.borrow();
            m.state == ServerState::Leader && m.current_leader == Some(inner.node_id)
        };
        if leads {
            inner.control().await;
        } else {
            *inner
                .balanced_at
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = None;
        }
    }
}
