//! Leader pinning (topic config `leaders.preference`, as Redpanda's): a topic may ask that its
//! partitions be led from brokers in given racks (zones) — where its producers are, so the
//! bytes they send do not cross a zone to reach the leader. New partitions are placed so
//! ([`crate::placement::pin_leader`]); on the controller, once a second:
//! - a pinned partition whose first replica (its preferred leader) is not in the most
//!   preferred rack holding one of its replicas is reordered — a reassignment that moves no
//!   data, and hands leadership to that replica if it is in sync;
//! - a pinned partition led elsewhere (its pinned leader failed) gets its leader back as soon as
//!   that replica is live and in sync again (a preferred-leader election), without waiting for
//!   the cluster-wide imbalance check.
//!
//! While no replica of a pinned rack can lead, the partition is led like any other: pinning
//! never takes a partition offline. Moving partitions are left alone.

use strata_metadata::Command;

use super::Node;
use crate::topic_config::pinned_racks;

/// Reorders one round may propose.
const PIN_MOVES: usize = 100;

impl Node {
    /// One round (a no-op unless this node leads the metadata quorum).
    pub async fn pin_leaders(&self) {
        if !self.metadata.is_leader() {
            return;
        }
        let state = self.metadata.state();
        let rack_of = |id| state.brokers.get(&id).and_then(|b| b.rack.as_deref());
        let mut reorder = Vec::new();
        let mut elect = Vec::new();
        for t in state.topics.values() {
            let racks = pinned_racks(&t.configs);
            if racks.is_empty() {
                continue;
            }
            for (i, p) in t.partitions.iter().enumerate() {
                if p.is_moving() {
                    continue;
                }
                let mut replicas = p.replicas.clone();
                if crate::placement::pin_leader(&mut replicas, rack_of, &racks) {
                    reorder.push((t.name.clone(), i as i32, replicas));
                } else if p.preferred_leader_electable(&state.brokers) {
                    elect.push((t.topic_id, i as i32));
                }
            }
        }
        for (topic, partition, target) in reorder.into_iter().take(PIN_MOVES) {
            tracing::info!(%topic, partition, replicas = ?target, "leaders.preference: reordering replicas so a pinned one leads");
            let cmd = Command::ReassignPartition {
                topic: topic.clone(),
                partition,
                target: Some(target),
            };
            if let Err(e) = self.apply(cmd).await {
                tracing::warn!(%topic, partition, error = %e, "leaders.preference: reorder refused");
                return;
            }
        }
        if !elect.is_empty() {
            let partitions = elect.len();
            match self
                .apply(Command::ElectPreferredLeaders { partitions: elect })
                .await
            {
                Ok(_) => tracing::info!(partitions, "leaders.preference: pinned leaders back"),
                Err(e) => tracing::warn!(error = %e, "leaders.preference: election refused"),
            }
        }
    }
}
