//! KIP-392 on the leader: which partitions of a consumer's fetch it should read from a replica
//! in its own zone instead ([`crate::zones`] holds the rule). Decided once per request — the
//! client's zone, the live brokers in it — so a fetch whose client is in this broker's zone, or
//! names none, or has no live broker in its zone, costs nothing per partition.

use strata_metadata::ClusterState;

use crate::node::Node;
use crate::partition::Partition;
use crate::zones::{self, Candidate, Selector};

/// A consumer in another zone than this leader's, and the registered, unfenced brokers of its
/// zone (never this one).
pub(super) struct Redirect {
    zone: String,
    brokers: Vec<u64>,
}

impl Redirect {
    /// For a consumer in `client_zone`, if this broker's selector sends anyone away and a live
    /// broker is in that zone.
    pub(super) fn new(
        node: &Node,
        state: &ClusterState,
        client_zone: Option<&str>,
    ) -> Option<Redirect> {
        let zone = client_zone?;
        if node.zones.selector() == Selector::Leader || node.zones.zone() == Some(zone) {
            return None;
        }
        let brokers: Vec<u64> = (state.brokers.values())
            .filter(|b| !b.fenced && b.node_id != node.config.node_id)
            .filter(|b| b.rack.as_deref() == Some(zone))
            .map(|b| b.node_id)
            .collect();
        (!brokers.is_empty()).then(|| Redirect {
            zone: zone.to_string(),
            brokers,
        })
    }

    /// The replica a consumer reading `p` from `offset` should read from instead of this
    /// leader; `None` to read here (no in-sync replica of its zone has the offset, or this
    /// broker does not lead `p`).
    pub(super) fn preferred(&self, p: &Partition, offset: i64) -> Option<u64> {
        // Allocates only for a follower in the client's zone.
        let mut candidates = Vec::new();
        p.replication()
            .for_each_in_sync_follower(|broker, log_end| {
                if self.brokers.contains(&broker) {
                    candidates.push(Candidate {
                        broker,
                        zone: Some(self.zone.as_str()),
                        available: true,
                        log_end,
                    });
                }
            });
        zones::select(
            Selector::RackAware,
            Some(&self.zone),
            None,
            offset,
            candidates,
        )
    }
}
