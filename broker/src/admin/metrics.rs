//! Every metric the broker exports, in one place. Request and byte counters are updated on the
//! hot path (atomic adds, once per request or batch, never per record); per-partition gauges
//! are read from the logs when `/metrics` is scraped.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::error::ErrorCode;
use crate::partition::Partitions;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApiLabels {
    api: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TopicLabels {
    topic: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: String,
}

fn count_reason(family: &Family<ReasonLabels, Counter>, reason: &str) {
    family
        .get_or_create(&ReasonLabels {
            reason: reason.to_string(),
        })
        .inc();
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartitionLabels {
    topic: String,
    partition: String,
}

type PartitionGauge = Family<PartitionLabels, Gauge<i64, std::sync::atomic::AtomicI64>>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LagLabels {
    group: String,
    topic: String,
    partition: String,
}

type LagGauge = Family<LagLabels, Gauge<f64, AtomicU64>>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IsrChangeLabels {
    /// `shrink` or `expand`.
    change: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BrokerStateLabels {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FollowerLabels {
    topic: String,
    partition: String,
    follower: String,
}

/// The cluster as this node sees it: controller, quorum, brokers, partition health. All
/// gauges but the heartbeat counter are read from the metadata state at scrape time.
struct ClusterMetrics {
    heartbeats: Family<ResultLabels, Counter>,
    active_controller: Gauge,
    raft_term: Gauge,
    raft_leader: Gauge,
    raft_applied_index: Gauge,
    brokers: Family<BrokerStateLabels, Gauge>,
    offline_partitions: Gauge,
    under_replicated_partitions: Gauge,
    leader_partitions: Gauge,
    isr_changes: Family<IsrChangeLabels, Counter>,
    unclean_elections: Gauge,
    replicated_bytes: Counter,
    follower_lag: Family<FollowerLabels, Gauge>,
}

impl ClusterMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "broker_heartbeats",
            "Heartbeats sent to the controller, by result (ok, error)",
            self.heartbeats.clone(),
        );
        registry.register(
            "active_controller",
            "1 on the node that leads the metadata quorum and so is the controller; the sum over the cluster is 1",
            self.active_controller.clone(),
        );
        registry.register(
            "metadata_raft_term",
            "Current raft term of the metadata quorum",
            self.raft_term.clone(),
        );
        registry.register(
            "metadata_raft_leader",
            "Node id of the metadata leader as this node knows it (-1: none)",
            self.raft_leader.clone(),
        );
        registry.register(
            "metadata_applied_index",
            "Last metadata log index applied on this node",
            self.raft_applied_index.clone(),
        );
        registry.register(
            "brokers",
            "Registered brokers by state (live, fenced)",
            self.brokers.clone(),
        );
        registry.register(
            "offline_partitions",
            "Partitions without a leader (reported by the active controller only, 0 elsewhere)",
            self.offline_partitions.clone(),
        );
        registry.register(
            "under_replicated_partitions",
            "Partitions led here whose ISR is smaller than their replica set",
            self.under_replicated_partitions.clone(),
        );
        registry.register(
            "leader_partitions",
            "Partitions led by this broker",
            self.leader_partitions.clone(),
        );
        registry.register(
            "isr_changes",
            "ISR shrinks and expands this broker committed as a leader, by change (rate: per second, Kafka's IsrShrinksPerSec and IsrExpandsPerSec)",
            self.isr_changes.clone(),
        );
        registry.register(
            "unclean_leader_elections",
            "Unclean leader elections in the cluster so far (each may have lost records), from the metadata",
            self.unclean_elections.clone(),
        );
        registry.register(
            "replication_fetched_bytes",
            "Record batch bytes this broker fetched from leaders as a follower",
            self.replicated_bytes.clone(),
        );
        registry.register(
            "follower_lag_records",
            "Per follower of a partition led here: the leader's log end minus the follower's (-1: not seen yet)",
            self.follower_lag.clone(),
        );
    }

    fn update(&self, metadata: &strata_metadata::Metadata) {
        let status = metadata.status();
        let me = status.node_id;
        let controller = status.role == "leader" && status.leader == Some(me);
        self.active_controller.set(i64::from(controller));
        self.raft_term.set(status.term as i64);
        self.raft_leader.set(status.leader.map_or(-1, |l| l as i64));
        self.raft_applied_index
            .set(status.last_applied_index.map_or(-1, |i| i as i64));
        let state = metadata.state();
        self.unclean_elections
            .set(state.unclean_leader_elections as i64);
        let fenced = state.brokers.values().filter(|b| b.fenced).count() as i64;
        self.brokers
            .get_or_create(&BrokerStateLabels {
                state: "live".into(),
            })
            .set(state.brokers.len() as i64 - fenced);
        self.brokers
            .get_or_create(&BrokerStateLabels {
                state: "fenced".into(),
            })
            .set(fenced);
        let (mut offline, mut under, mut led) = (0, 0, 0);
        for p in state.topics.values().flat_map(|t| &t.partitions) {
            if p.leader.is_none() {
                offline += 1;
            }
            if p.leader == Some(me) {
                led += 1;
                if p.isr.len() < p.replicas.len() {
                    under += 1;
                }
            }
        }
        self.offline_partitions
            .set(if controller { offline } else { 0 });
        self.under_replicated_partitions.set(under);
        self.leader_partitions.set(led);
    }
}

pub struct Metrics {
    registry: Registry,
    requests: Family<ApiLabels, Counter>,
    latency: Family<ApiLabels, Histogram, fn() -> Histogram>,
    bytes_in: Counter,
    bytes_out: Counter,
    connections: Gauge,
    rejected_connections: Family<ReasonLabels, Counter>,
    closed_connections: Family<ReasonLabels, Counter>,
    /// The Kafka listener's request budget, read for `request_queue_bytes` at each render.
    request_budget: Option<crate::protocol::frame::RequestBudget>,
    request_queue_bytes: Gauge,
    request_budget_waits: Counter,
    panics: Counter,
    bad_requests: Family<ErrorLabels, Counter>,
    produced_records: Family<TopicLabels, Counter<u64, AtomicU64>>,
    produced_bytes: Family<TopicLabels, Counter>,
    produce_errors: Family<ErrorLabels, Counter>,
    fetched_bytes: Counter,
    log_end_offset: PartitionGauge,
    high_watermark: PartitionGauge,
    log_start_offset: PartitionGauge,
    log_size: PartitionGauge,
    segments: PartitionGauge,
    lag_records: LagGauge,
    lag_seconds: LagGauge,
    lag_trend: LagGauge,
    lag_drain: LagGauge,
    lag_risk: LagGauge,
    cleaner_runs: Counter,
    cleaner_bytes_read: Counter,
    cleaner_bytes_written: Counter,
    cleaner_records_removed: Counter,
    cleaner_errors: Counter,
    cleaner_last_seconds: Gauge<f64, AtomicU64>,
    cleaner_max_dirty_ratio: Gauge<f64, AtomicU64>,
    cleaner_uncleanable: Gauge,
    cluster: ClusterMetrics,
}

fn latency_histogram() -> Histogram {
    // 50 µs .. ~26 s
    Histogram::new(exponential_buckets(0.00005, 2.0, 20))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("strata");
        let m = Metrics {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            bytes_in: Counter::default(),
            bytes_out: Counter::default(),
            connections: Gauge::default(),
            rejected_connections: Family::default(),
            closed_connections: Family::default(),
            request_budget: None,
            request_queue_bytes: Gauge::default(),
            request_budget_waits: Counter::default(),
            panics: Counter::default(),
            bad_requests: Family::default(),
            produced_records: Family::default(),
            produced_bytes: Family::default(),
            produce_errors: Family::default(),
            fetched_bytes: Counter::default(),
            log_end_offset: Family::default(),
            high_watermark: Family::default(),
            log_start_offset: Family::default(),
            log_size: Family::default(),
            segments: Family::default(),
            lag_records: Family::default(),
            lag_seconds: Family::default(),
            lag_trend: Family::default(),
            lag_drain: Family::default(),
            lag_risk: Family::default(),
            cleaner_runs: Counter::default(),
            cleaner_bytes_read: Counter::default(),
            cleaner_bytes_written: Counter::default(),
            cleaner_records_removed: Counter::default(),
            cleaner_errors: Counter::default(),
            cleaner_last_seconds: Gauge::default(),
            cleaner_max_dirty_ratio: Gauge::default(),
            cleaner_uncleanable: Gauge::default(),
            cluster: ClusterMetrics {
                heartbeats: Family::default(),
                active_controller: Gauge::default(),
                raft_term: Gauge::default(),
                raft_leader: Gauge::default(),
                raft_applied_index: Gauge::default(),
                brokers: Family::default(),
                offline_partitions: Gauge::default(),
                under_replicated_partitions: Gauge::default(),
                leader_partitions: Gauge::default(),
                isr_changes: Family::default(),
                unclean_elections: Gauge::default(),
                replicated_bytes: Counter::default(),
                follower_lag: Family::default(),
            },
            registry: Registry::default(),
        };
        m.cluster.register(&mut registry);
        registry.register(
            "requests",
            "Kafka requests handled, by API",
            m.requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Kafka request latency, by API",
            m.latency.clone(),
        );
        registry.register(
            "network_received_bytes",
            "Bytes of Kafka requests received",
            m.bytes_in.clone(),
        );
        registry.register(
            "network_sent_bytes",
            "Bytes of Kafka responses sent",
            m.bytes_out.clone(),
        );
        registry.register(
            "connections",
            "Open Kafka connections",
            m.connections.clone(),
        );
        registry.register(
            "rejected_connections",
            "Connections refused, by reason (max_connections, max_connections_per_ip)",
            m.rejected_connections.clone(),
        );
        registry.register(
            "closed_connections",
            "Connections the broker closed, by reason (idle, read_timeout, write_timeout, panic)",
            m.closed_connections.clone(),
        );
        registry.register(
            "request_queue_bytes",
            "Bytes of request frames held now, across all connections (at most queued_max_request_bytes)",
            m.request_queue_bytes.clone(),
        );
        registry.register(
            "request_budget_waits",
            "Requests whose reading paused because queued_max_request_bytes was reached",
            m.request_budget_waits.clone(),
        );
        registry.register(
            "panics",
            "Panics anywhere in the broker (each failed one request, one connection or one background task; never the process)",
            m.panics.clone(),
        );
        registry.register(
            "bad_requests",
            "Requests refused before handling (bad frame, unknown API, bad version, malformed)",
            m.bad_requests.clone(),
        );
        registry.register(
            "produced_records",
            "Records appended, by topic",
            m.produced_records.clone(),
        );
        registry.register(
            "produced_bytes",
            "Record batch bytes appended, by topic",
            m.produced_bytes.clone(),
        );
        registry.register(
            "produce_errors",
            "Partition produce failures, by error",
            m.produce_errors.clone(),
        );
        registry.register(
            "fetched_bytes",
            "Record batch bytes returned by Fetch",
            m.fetched_bytes.clone(),
        );
        registry.register(
            "partition_log_end_offset",
            "Log end offset",
            m.log_end_offset.clone(),
        );
        registry.register(
            "partition_high_watermark",
            "High watermark",
            m.high_watermark.clone(),
        );
        registry.register(
            "partition_log_start_offset",
            "Log start offset",
            m.log_start_offset.clone(),
        );
        registry.register(
            "partition_size_bytes",
            "Bytes in local segments",
            m.log_size.clone(),
        );
        registry.register(
            "partition_segments",
            "Local segment count",
            m.segments.clone(),
        );
        registry.register(
            "consumer_lag_records",
            "High watermark minus the group's committed offset",
            m.lag_records.clone(),
        );
        registry.register(
            "consumer_lag_seconds",
            "Age of the oldest record the group has not consumed",
            m.lag_seconds.clone(),
        );
        registry.register(
            "consumer_lag_trend_records_per_second",
            "Slope of lag over lag_window_ms: positive = falling behind, negative = draining",
            m.lag_trend.clone(),
        );
        registry.register(
            "consumer_lag_drain_seconds",
            "Estimated time to zero lag at the current trend (only while draining)",
            m.lag_drain.clone(),
        );
        registry.register(
            "consumer_lag_retention_risk",
            "1 when lag in seconds exceeds half of the topic's retention.ms: unread data is about to be deleted",
            m.lag_risk.clone(),
        );
        registry.register(
            "log_cleaner_runs",
            "Compaction passes that swapped in cleaned segments",
            m.cleaner_runs.clone(),
        );
        registry.register(
            "log_cleaner_read_bytes",
            "Bytes the log cleaner read",
            m.cleaner_bytes_read.clone(),
        );
        registry.register(
            "log_cleaner_written_bytes",
            "Bytes the log cleaner wrote",
            m.cleaner_bytes_written.clone(),
        );
        registry.register(
            "log_cleaner_removed_records",
            "Records compaction removed (superseded, keyless, or expired tombstones)",
            m.cleaner_records_removed.clone(),
        );
        registry.register(
            "log_cleaner_errors",
            "Compaction passes that failed",
            m.cleaner_errors.clone(),
        );
        registry.register(
            "log_cleaner_last_run_seconds",
            "Duration of the last compaction pass",
            m.cleaner_last_seconds.clone(),
        );
        registry.register(
            "log_cleaner_max_dirty_ratio",
            "Largest dirty ratio among compacted partitions at the last cleaner pass",
            m.cleaner_max_dirty_ratio.clone(),
        );
        registry.register(
            "log_cleaner_uncleanable_partitions",
            "Partitions the cleaner gave up on after an error (until restart)",
            m.cleaner_uncleanable.clone(),
        );
        Metrics { registry, ..m }
    }

    /// Adds the object store's request metrics (`strata_object_store_*`).
    pub fn register_object_store(&mut self, store: &strata_objstore::StoreMetrics) {
        store.register(&mut self.registry);
    }

    pub fn register_tier(
        &mut self,
        tier: &crate::tier::TierMetrics,
        cache: &strata_cache::CacheMetrics,
    ) {
        tier.register(&mut self.registry);
        cache.register(&mut self.registry);
    }

    pub fn request(&self, api: &str, seconds: f64) {
        let labels = ApiLabels {
            api: api.to_string(),
        };
        self.requests.get_or_create(&labels).inc();
        self.latency.get_or_create(&labels).observe(seconds);
    }

    pub fn bad_request(&self, kind: &str) {
        self.bad_requests
            .get_or_create(&ErrorLabels {
                error: kind.to_string(),
            })
            .inc();
    }

    pub fn received(&self, bytes: u64) {
        self.bytes_in.inc_by(bytes);
    }

    pub fn sent(&self, bytes: u64) {
        self.bytes_out.inc_by(bytes);
    }

    pub fn connection_opened(&self) {
        self.connections.inc();
    }

    pub fn connection_closed(&self) {
        self.connections.dec();
    }

    pub fn connection_rejected(&self, reason: &str) {
        count_reason(&self.rejected_connections, reason);
    }

    pub fn connection_closed_by_broker(&self, reason: &str) {
        count_reason(&self.closed_connections, reason);
    }

    /// Reports the Kafka listener's request budget (`strata_request_queue_bytes`).
    pub fn register_request_budget(&mut self, budget: crate::protocol::frame::RequestBudget) {
        self.request_budget = Some(budget);
    }

    pub fn request_waited_for_budget(&self) {
        self.request_budget_waits.inc();
    }

    /// The counter a panic hook increments (see `serve::count_panics`).
    pub fn panic_counter(&self) -> Counter {
        self.panics.clone()
    }

    pub fn produced(&self, topic: &str, records: u64, bytes: u64) {
        let labels = TopicLabels {
            topic: topic.to_string(),
        };
        self.produced_records.get_or_create(&labels).inc_by(records);
        self.produced_bytes.get_or_create(&labels).inc_by(bytes);
    }

    pub fn produce_error(&self, code: ErrorCode) {
        self.produce_errors
            .get_or_create(&ErrorLabels {
                error: format!("{code:?}"),
            })
            .inc();
    }

    pub fn fetched(&self, bytes: u64) {
        self.fetched_bytes.inc_by(bytes);
    }

    pub fn cleaned(&self, stats: &crate::log::cleaning::CleanStats, seconds: f64) {
        self.cleaner_runs.inc();
        self.cleaner_bytes_read.inc_by(stats.bytes_read);
        self.cleaner_bytes_written.inc_by(stats.bytes_written);
        self.cleaner_records_removed.inc_by(stats.records_removed);
        self.cleaner_last_seconds.set(seconds);
    }

    pub fn cleaner_failed(&self) {
        self.cleaner_errors.inc();
    }

    pub fn set_cleaner_state(&self, max_dirty_ratio: f64, uncleanable: usize) {
        self.cleaner_max_dirty_ratio.set(max_dirty_ratio);
        self.cleaner_uncleanable.set(uncleanable as i64);
    }

    /// Replaces the consumer lag gauges with a new sample.
    pub fn set_lag(&self, lags: &[crate::group::lag::Lag]) {
        for family in [
            &self.lag_records,
            &self.lag_seconds,
            &self.lag_trend,
            &self.lag_drain,
            &self.lag_risk,
        ] {
            family.clear();
        }
        for l in lags {
            let labels = LagLabels {
                group: l.group.clone(),
                topic: l.topic.clone(),
                partition: l.partition.to_string(),
            };
            self.lag_records
                .get_or_create(&labels)
                .set(l.records as f64);
            self.lag_seconds.get_or_create(&labels).set(l.seconds);
            self.lag_trend.get_or_create(&labels).set(l.trend);
            if let Some(d) = l.drain_seconds {
                self.lag_drain.get_or_create(&labels).set(d);
            }
            self.lag_risk
                .get_or_create(&labels)
                .set(if l.retention_risk { 1.0 } else { 0.0 });
        }
    }

    /// A heartbeat to the controller was answered (`ok`) or not.
    pub fn heartbeat(&self, ok: bool) {
        self.cluster
            .heartbeats
            .get_or_create(&ResultLabels {
                result: if ok { "ok" } else { "error" }.into(),
            })
            .inc();
    }

    /// A leader committed an ISR change: a shrink, or an expand.
    pub fn isr_changed(&self, expand: bool) {
        self.cluster
            .isr_changes
            .get_or_create(&IsrChangeLabels {
                change: if expand { "expand" } else { "shrink" }.into(),
            })
            .inc();
    }

    /// A follower appended `bytes` fetched from a leader.
    pub fn replicated(&self, bytes: u64) {
        self.cluster.replicated_bytes.inc_by(bytes);
    }

    /// Prometheus text exposition, with partition and cluster gauges read now.
    pub fn render(&self, partitions: &Partitions, metadata: &strata_metadata::Metadata) -> String {
        if let Some(budget) = &self.request_budget {
            self.request_queue_bytes.set(budget.in_use() as i64);
        }
        self.cluster.update(metadata);
        self.cluster.follower_lag.clear();
        for p in partitions.all() {
            let end = p.offsets().log_end;
            for (follower, log_end) in p.follower_log_ends() {
                let lag = if log_end < 0 { -1 } else { end - log_end };
                self.cluster
                    .follower_lag
                    .get_or_create(&FollowerLabels {
                        topic: p.tp.topic.clone(),
                        partition: p.tp.partition.to_string(),
                        follower: follower.to_string(),
                    })
                    .set(lag);
            }
        }
        for family in [
            &self.log_end_offset,
            &self.high_watermark,
            &self.log_start_offset,
            &self.log_size,
            &self.segments,
        ] {
            family.clear();
        }
        for p in partitions.all() {
            let (o, size, segments) = p.stats();
            let labels = PartitionLabels {
                topic: p.tp.topic.clone(),
                partition: p.tp.partition.to_string(),
            };
            self.log_end_offset.get_or_create(&labels).set(o.log_end);
            self.high_watermark
                .get_or_create(&labels)
                .set(o.high_watermark);
            self.log_start_offset
                .get_or_create(&labels)
                .set(o.log_start);
            self.log_size.get_or_create(&labels).set(size as i64);
            self.segments.get_or_create(&labels).set(segments as i64);
        }
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "failed to encode metrics");
        }
        out
    }
}
