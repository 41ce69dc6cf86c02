//! Replicas being added by a reassignment: the byte budget their fetches share, and the
//! metrics of moves in progress on this broker.
//!
//! A moving replica (added by a reassignment and not in the ISR yet; once in sync, acks=all
//! writes wait for it, so it is never held back) is fetched in the same rounds as the in-sync
//! ones, but each round it may
//! ask for no more bytes than the budget grants (`replica_move_max_bytes_per_second`, a token
//! bucket holding at most one second of bytes), and a replica the budget cannot serve sits the
//! round out. The round itself never waits for the budget, so live ISR replication is never
//! slowed by a move. Kafka's `follower.replication.throttled.rate` has the same effect.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::clock::Clock;
use crate::node::Node;

/// The shared byte budget of moving replicas.
pub struct MoveBudget {
    /// Bytes per second; a dynamic setting, so it may change between rounds.
    rate: AtomicU64,
    state: Mutex<(f64, Instant)>,
    clock: Clock,
}

impl MoveBudget {
    /// A budget of `rate` bytes per second (0: unbounded).
    pub fn new(rate: u64, clock: Clock) -> MoveBudget {
        MoveBudget {
            rate: AtomicU64::new(rate),
            state: Mutex::new((rate as f64, clock.instant())),
            clock,
        }
    }

    /// Changes the rate from now on; what was saved up stays, up to one second of the new rate.
    pub fn set_rate(&self, rate: u64) {
        self.rate.store(rate, Ordering::Relaxed);
    }

    /// Takes up to `max` bytes for one partition's fetch; 0 when the budget is spent.
    pub fn grant(&self, max: u64) -> u64 {
        let rate = self.rate.load(Ordering::Relaxed);
        if rate == 0 {
            return max;
        }
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = self.clock.instant();
        let refill = now.duration_since(s.1).as_secs_f64() * rate as f64;
        s.0 = (s.0 + refill).min(rate as f64);
        s.1 = now;
        if s.0 < 1.0 {
            return 0;
        }
        let granted = (s.0 as u64).min(max);
        s.0 -= granted as f64;
        granted
    }

    /// Settles a grant with what the fetch returned: unused bytes go back, and a batch larger
    /// than the grant (the leader always returns at least one whole batch) is owed.
    pub fn settle(&self, granted: u64, received: u64) {
        if self.rate.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 += granted as f64 - received as f64;
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartitionLabels {
    topic: String,
    partition: String,
}

/// The metrics of moves onto this broker.
#[derive(Default)]
pub struct MoveMetrics {
    pub fetched_bytes: Counter,
    pub throttled: Counter,
    copied: Family<PartitionLabels, Gauge>,
    remaining: Family<PartitionLabels, Gauge>,
    lag: Family<PartitionLabels, Gauge>,
}

impl MoveMetrics {
    /// Registers the move metrics; the per-move gauges refresh at each scrape from the
    /// partitions this broker is being added to.
    pub fn register(node: &std::sync::Arc<Node>) -> std::sync::Arc<MoveMetrics> {
        let m = std::sync::Arc::new(MoveMetrics::default());
        node.metrics.register(|r| {
            r.register(
                "reassignment_fetched_bytes",
                "Bytes fetched by replicas being added to this broker by a reassignment",
                m.fetched_bytes.clone(),
            );
            r.register(
                "reassignment_throttled",
                "Fetch rounds a moving replica sat out because replica_move_max_bytes_per_second was spent",
                m.throttled.clone(),
            );
            r.register(
                "reassignment_copied_bytes",
                "Per replica being added here: bytes it holds so far",
                m.copied.clone(),
            );
            r.register(
                "reassignment_remaining_bytes",
                "Per replica being added here: bytes still to copy (its offset lag at its own bytes per offset; -1: not known yet)",
                m.remaining.clone(),
            );
            r.register(
                "reassignment_lag_offsets",
                "Per replica being added here: offsets behind the leader's high watermark (-1: not known yet)",
                m.lag.clone(),
            );
        });
        let (weak, node2) = (std::sync::Arc::downgrade(&m), node.clone());
        node.metrics.on_scrape(move || {
            if let Some(m) = weak.upgrade() {
                m.update(&node2);
            }
        });
        m
    }

    fn update(&self, node: &Node) {
        self.copied.clear();
        self.remaining.clear();
        self.lag.clear();
        let state = node.metadata.state();
        let me = node.config.node_id;
        for p in node.partitions.hosted().all() {
            let adding = state
                .partition(&p.tp.topic, p.tp.partition)
                .is_some_and(|i| i.adding.contains(&me));
            if !adding {
                continue;
            }
            let labels = PartitionLabels {
                topic: p.tp.topic.clone(),
                partition: p.tp.partition.to_string(),
            };
            let (offsets, bytes, _) = p.stats();
            let held = offsets.log_end - p.local_log_start();
            let lag = p.offset_lag();
            let remaining = if lag < 0 || held <= 0 {
                -1
            } else {
                (lag as f64 * bytes as f64 / held as f64) as i64
            };
            self.copied.get_or_create(&labels).set(bytes as i64);
            self.remaining.get_or_create(&labels).set(remaining);
            self.lag.get_or_create(&labels).set(lag);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_grants_what_it_holds_and_collects_what_is_owed() {
        let clock = Clock::manual(0);
        let unbounded = MoveBudget::new(0, clock.clone());
        assert_eq!(unbounded.grant(1 << 20), 1 << 20);
        let b = MoveBudget::new(1000, clock.clone());
        // Starts with one second's worth.
        let g = b.grant(600);
        assert_eq!(g, 600);
        let g2 = b.grant(600);
        assert_eq!(g2, 400);
        assert_eq!(b.grant(600), 0, "spent");
        // A whole batch of 5000 bytes came back for a grant of 400: 4600 owed, paid back at
        // 1000 bytes a second.
        b.settle(g2, 5000);
        assert_eq!(b.grant(600), 0, "in debt");
        clock.advance(std::time::Duration::from_millis(4_000));
        assert_eq!(b.grant(600), 0, "still 600 owed after four seconds");
        clock.advance(std::time::Duration::from_millis(1_000));
        assert_eq!(b.grant(600), 400, "a second later: 400 saved up");
        // Idle time saves up at most one second's worth.
        clock.advance(std::time::Duration::from_secs(60));
        assert_eq!(b.grant(5_000), 1_000);
        // Unused grant comes back.
        let fresh = MoveBudget::new(1000, clock.clone());
        let g = fresh.grant(1000);
        fresh.settle(g, 0);
        assert!(fresh.grant(1000) >= 999);
        // A dynamic change of the rate applies from the next grant: unbounded, then bounded.
        fresh.set_rate(0);
        assert_eq!(fresh.grant(1 << 20), 1 << 20);
        fresh.set_rate(10);
        assert!(
            fresh.grant(1 << 20) <= 10,
            "at most one second of the new rate"
        );
    }
}
