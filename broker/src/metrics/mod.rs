//! The node's metrics registry (`/metrics`, every name under `strata_`) and the metrics of the
//! request path and the cluster: requests, bytes, connections, produce and fetch, heartbeats,
//! ISR changes and the metadata quorum. Subsystems register their own metrics here
//! ([`Metrics::register`]: partitions, consumer lag, the cleaner, the tier, the object store)
//! and gauges read from live state refresh when `/metrics` is scraped ([`Metrics::on_scrape`]).
//! Counters are updated on the hot path with atomic adds, once per request or batch, never per
//! record.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::error::ErrorCode;

mod disk;
pub mod history;

mod process;

pub use process::{thread_cpu_seconds, usage_json};

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
    reassigning_partitions: Gauge,
    isr_changes: Family<IsrChangeLabels, Counter>,
    unclean_elections: Gauge,
    replicated_bytes: Counter,
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
            "reassigning_partitions",
            "Partitions being reassigned (reported by the active controller only, 0 elsewhere)",
            self.reassigning_partitions.clone(),
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
        let (mut offline, mut under, mut led, mut moving) = (0, 0, 0, 0);
        for p in state.topics.values().flat_map(|t| &t.partitions) {
            if p.leader.is_none() {
                offline += 1;
            }
            if p.is_moving() {
                moving += 1;
            }
            if p.leader == Some(me) {
                led += 1;
                if p.is_under_replicated() {
                    under += 1;
                }
            }
        }
        self.offline_partitions
            .set(if controller { offline } else { 0 });
        self.under_replicated_partitions.set(under);
        self.leader_partitions.set(led);
        self.reassigning_partitions
            .set(if controller { moving } else { 0 });
    }
}

/// Refreshes gauges read from live state, just before `/metrics` is encoded.
type ScrapeHook = Box<dyn Fn() + Send + Sync>;

pub struct Metrics {
    registry: Mutex<Registry>,
    on_scrape: Mutex<Vec<ScrapeHook>>,
    requests: Family<ApiLabels, Counter>,
    latency: Family<ApiLabels, Histogram, fn() -> Histogram>,
    bytes_in: Counter,
    bytes_out: Counter,
    bytes_out_from_page_cache: Counter,
    connections: Gauge,
    rejected_connections: Family<ReasonLabels, Counter>,
    closed_connections: Family<ReasonLabels, Counter>,
    request_queue_bytes: Gauge,
    request_budget_waits: Counter,
    produce_pipelined: Counter,
    panics: Counter,
    bad_requests: Family<ErrorLabels, Counter>,
    produced_records: Family<TopicLabels, Counter<u64, AtomicU64>>,
    produced_bytes: Family<TopicLabels, Counter>,
    /// Bytes of recompressed batches as sent and as stored (topic `compression.type`).
    recompressed_in: Counter,
    recompressed_out: Counter,
    produce_errors: Family<ErrorLabels, Counter>,
    fetched_bytes: Counter,
    cluster: Arc<ClusterMetrics>,
    /// The last hour of a few of these, for the console's charts.
    history: history::History,
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
            bytes_out_from_page_cache: Counter::default(),
            connections: Gauge::default(),
            rejected_connections: Family::default(),
            closed_connections: Family::default(),
            request_queue_bytes: Gauge::default(),
            request_budget_waits: Counter::default(),
            produce_pipelined: Counter::default(),
            panics: Counter::default(),
            bad_requests: Family::default(),
            produced_records: Family::default(),
            produced_bytes: Family::default(),
            recompressed_in: Counter::default(),
            recompressed_out: Counter::default(),
            produce_errors: Family::default(),
            fetched_bytes: Counter::default(),
            cluster: Arc::new(ClusterMetrics {
                heartbeats: Family::default(),
                active_controller: Gauge::default(),
                raft_term: Gauge::default(),
                raft_leader: Gauge::default(),
                raft_applied_index: Gauge::default(),
                brokers: Family::default(),
                offline_partitions: Gauge::default(),
                under_replicated_partitions: Gauge::default(),
                leader_partitions: Gauge::default(),
                reassigning_partitions: Gauge::default(),
                isr_changes: Family::default(),
                unclean_elections: Gauge::default(),
                replicated_bytes: Counter::default(),
            }),
            registry: Mutex::new(Registry::default()),
            on_scrape: Mutex::new(Vec::new()),
            history: history::History::default(),
        };
        m.history.register(|r| {
            r.register("requests", "", m.requests.clone());
            r.register("request_duration_seconds", "", m.latency.clone());
            r.register("network_received_bytes", "", m.bytes_in.clone());
            r.register("fetched_bytes", "", m.fetched_bytes.clone());
            r.register("produced_bytes", "", m.produced_bytes.clone());
        });
        m.cluster.register(&mut registry);
        // Both series exist from the start, so `increase()` sees a broker's first change.
        for change in ["shrink", "expand"] {
            let _ = m.cluster.isr_changes.get_or_create(&IsrChangeLabels {
                change: change.into(),
            });
        }
        let process = process::ProcessMetrics::default();
        process.register(&mut registry);
        m.on_scrape(move || process.update());
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
            "network_sent_from_page_cache_bytes",
            "Bytes of Kafka responses (records) sent from the page cache by sendfile, never copied by the broker",
            m.bytes_out_from_page_cache.clone(),
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
            "produce_pipelined",
            "Produce requests appended while an earlier acks=all produce of the same connection still waited for its ISR",
            m.produce_pipelined.clone(),
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
            "recompressed_input_bytes",
            "Bytes of produced batches recompressed to their topic's compression.type, as sent",
            m.recompressed_in.clone(),
        );
        registry.register(
            "recompressed_output_bytes",
            "Bytes of produced batches recompressed to their topic's compression.type, as stored",
            m.recompressed_out.clone(),
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
        Metrics {
            registry: Mutex::new(registry),
            ..m
        }
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a subsystem's metrics to the registry (names get the `strata_` prefix).
    pub fn register(&self, add: impl FnOnce(&mut Registry)) {
        add(&mut self.registry());
    }

    /// The last hour of the series the console charts ([`history`]).
    pub fn history(&self) -> &history::History {
        &self.history
    }

    /// Runs `hook` before every `/metrics` encoding, to refresh gauges read from live state.
    pub fn on_scrape(&self, hook: impl Fn() + Send + Sync + 'static) {
        self.on_scrape
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Box::new(hook));
    }

    /// Reads the cluster gauges (controller, quorum, brokers, partition health) from
    /// `metadata` at each scrape.
    pub fn watch_cluster(&self, metadata: strata_metadata::Metadata) {
        let cluster = self.cluster.clone();
        self.on_scrape(move || cluster.update(&metadata));
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

    pub fn sent_from_page_cache(&self, bytes: u64) {
        self.bytes_out_from_page_cache.inc_by(bytes);
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
    pub fn register_request_budget(&self, budget: crate::protocol::frame::RequestBudget) {
        let gauge = self.request_queue_bytes.clone();
        self.on_scrape(move || {
            gauge.set(budget.in_use() as i64);
        });
    }

    pub fn request_waited_for_budget(&self) {
        self.request_budget_waits.inc();
    }

    pub fn produce_pipelined(&self) {
        self.produce_pipelined.inc();
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

    /// Batches rewritten under their topic's codec: bytes as sent, as stored.
    pub fn recompressed(&self, (sent, stored): (u64, u64)) {
        self.recompressed_in.inc_by(sent);
        self.recompressed_out.inc_by(stored);
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

    /// A heartbeat to the controller was answered (`ok`) or not.
    pub fn heartbeat(&self, ok: bool) {
        self.cluster
            .heartbeats
            .get_or_create(&ResultLabels {
                result: if ok { "ok" } else { "error" }.into(),
            })
            .inc();
    }

    /// Publishes the size and free space of the filesystem holding `dir` (the data directory).
    pub fn register_log_dirs(&self, dirs: &[std::path::PathBuf]) {
        let disk = disk::DiskMetrics::new(dirs);
        self.register(|registry| disk.register(registry));
        self.on_scrape(move || disk.update());
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

    /// Prometheus text exposition, with gauges read from live state now.
    pub fn render(&self) -> String {
        for hook in self
            .on_scrape
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            hook();
        }
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry()) {
            tracing::error!(error = %e, "failed to encode metrics");
        }
        out
    }
}
