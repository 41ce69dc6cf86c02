//! The automatic balancer (off by default: `auto_balance_enable`), run on the controller node
//! every `auto_balance_interval_ms`: what `strata cluster balance` and `strata broker drain`
//! do, without an operator.
//!
//! - A broker fenced (stopped or silent) for `auto_balance_broker_down_ms` counts as gone: its
//!   replicas move to live brokers, as a drain would, so its partitions get their replication
//!   factor back.
//! - Otherwise replicas and preferred leaders are spread within one per live broker (a broker
//!   that joined gets its share).
//!
//! It plans only while no partition is moving and starts at most [`AUTO_MOVES`] moves per
//! round, so its moves and an operator's never fight and a round is bounded. How long a broker
//! has been fenced is kept in memory on the controller: a new controller starts counting anew,
//! which only delays the response to a failure.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use strata_metadata::Command;

use super::Node;
use crate::balance::{self, Move};

/// Moves one round may start.
const AUTO_MOVES: usize = 10;

/// The balancer's memory between rounds: since when each fenced broker has been fenced.
#[derive(Default)]
pub struct AutoBalance {
    fenced_since: HashMap<u64, Instant>,
}

impl Node {
    /// One round of the automatic balancer (a no-op unless enabled and this node leads the
    /// metadata quorum).
    pub async fn auto_balance(&self, memory: &mut AutoBalance) {
        if !self.config.auto_balance_enable || !self.metadata.is_leader() {
            memory.fenced_since.clear();
            return;
        }
        let state = self.metadata.state();
        let now = self.clock.instant();
        memory
            .fenced_since
            .retain(|id, _| state.brokers.get(id).is_some_and(|b| b.fenced));
        for b in state.brokers.values().filter(|b| b.fenced) {
            memory.fenced_since.entry(b.node_id).or_insert(now);
        }
        if state
            .topics
            .values()
            .flat_map(|t| &t.partitions)
            .any(|p| p.is_moving())
        {
            return;
        }
        let live: Vec<balance::Broker> = state
            .brokers
            .values()
            .filter(|b| !b.fenced)
            .filter_map(|b| {
                Some(balance::Broker {
                    id: i32::try_from(b.node_id).ok()?,
                    rack: b.rack.clone(),
                })
            })
            .collect();
        let partitions: Vec<balance::Partition> = state
            .topics
            .values()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .enumerate()
                    .map(move |(i, p)| balance::Partition {
                        topic: t.name.clone(),
                        partition: i as i32,
                        replicas: p.replicas.iter().map(|r| *r as i32).collect(),
                        pinned: !crate::topic_config::pinned_racks(&t.configs).is_empty(),
                    })
            })
            .collect();
        let down = Duration::from_millis(self.config.auto_balance_broker_down_ms);
        let gone: Vec<i32> = memory
            .fenced_since
            .iter()
            .filter(|(_, since)| now.duration_since(**since) >= down)
            .filter_map(|(id, _)| i32::try_from(*id).ok())
            .collect();
        let mut moves: Vec<Move> = Vec::new();
        for g in &gone {
            match balance::drain(&live, &partitions, *g) {
                Ok(m) => moves.extend(m),
                Err(e) => {
                    tracing::warn!(broker = g, reason = %e, "auto balance cannot move a gone broker's replicas")
                }
            }
        }
        let why = if moves.is_empty() {
            moves = balance::balance(&live, &partitions);
            "spreading replicas and leaders"
        } else {
            "replacing the replicas of a broker down for auto_balance_broker_down_ms"
        };
        if moves.is_empty() {
            return;
        }
        tracing::info!(moves = moves.len(), gone = ?gone, "auto balance: {why}");
        for m in moves.into_iter().take(AUTO_MOVES) {
            let target: Vec<u64> = m.to.iter().map(|b| *b as u64).collect();
            if let Err(e) = self
                .apply(Command::ReassignPartition {
                    topic: m.topic.clone(),
                    partition: m.partition,
                    target: Some(target),
                })
                .await
            {
                tracing::warn!(topic = %m.topic, partition = m.partition, error = %e, "auto balance move refused");
                return;
            }
        }
    }
}
