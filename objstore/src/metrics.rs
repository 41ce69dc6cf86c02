//! Object store requests, bytes, errors and latency by operation, for `/metrics`.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    op: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    op: String,
    kind: String,
}

fn latency_histogram() -> Histogram {
    // 1 ms .. ~65 s
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// Counters of one [`crate::Store`]; register them with [`StoreMetrics::register`].
pub struct StoreMetrics {
    requests: Family<OpLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    latency: Family<OpLabels, Histogram, fn() -> Histogram>,
    read_bytes: Counter<u64, AtomicU64>,
    written_bytes: Counter<u64, AtomicU64>,
    /// 1 while the last request reached the store (or no request has been made), 0 after one
    /// that found it unreachable.
    reachable: Gauge,
}

impl Default for StoreMetrics {
    fn default() -> Self {
        StoreMetrics {
            requests: Family::default(),
            errors: Family::default(),
            latency: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            read_bytes: Counter::default(),
            written_bytes: Counter::default(),
            reachable: {
                let g = Gauge::default();
                g.set(1);
                g
            },
        }
    }
}

impl StoreMetrics {
    /// Adds the metrics under `object_store_*` to `registry`.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("object_store");
        r.register(
            "requests",
            "Object store requests, by operation (put, put_multipart, put_part, complete_multipart, abort_multipart, get, head, list, delete)",
            self.requests.clone(),
        );
        r.register(
            "errors",
            "Failed object store requests (after retries), by operation and kind",
            self.errors.clone(),
        );
        r.register(
            "request_duration_seconds",
            "Object store request latency including retries, by operation",
            self.latency.clone(),
        );
        r.register(
            "read_bytes",
            "Bytes read from the object store",
            self.read_bytes.clone(),
        );
        r.register(
            "written_bytes",
            "Bytes written to the object store",
            self.written_bytes.clone(),
        );
        r.register(
            "reachable",
            "1 while the object store answers, 0 since a request found it unreachable (uploads then queue on local disk)",
            self.reachable.clone(),
        );
    }

    pub(crate) fn observe(&self, op: &str, seconds: f64, error: Option<&'static str>) {
        // Any answer from the store, even a refusal, shows it reachable; "unavailable" is the
        // kind for a store that could not be reached or failed with server errors.
        self.reachable.set(i64::from(error != Some("unavailable")));
        let labels = OpLabels { op: op.to_string() };
        self.requests.get_or_create(&labels).inc();
        self.latency.get_or_create(&labels).observe(seconds);
        if let Some(kind) = error {
            self.errors
                .get_or_create(&ErrorLabels {
                    op: op.to_string(),
                    kind: kind.to_string(),
                })
                .inc();
        }
    }

    pub(crate) fn read(&self, bytes: u64) {
        self.read_bytes.inc_by(bytes);
    }

    pub(crate) fn written(&self, bytes: u64) {
        self.written_bytes.inc_by(bytes);
    }

    /// Requests of `op` so far (for tests and progress output).
    pub fn requests(&self, op: &str) -> u64 {
        self.requests
            .get_or_create(&OpLabels { op: op.to_string() })
            .get()
    }

    pub fn read_bytes(&self) -> u64 {
        self.read_bytes.get()
    }

    pub fn written_bytes(&self) -> u64 {
        self.written_bytes.get()
    }

    /// Whether the last request reached the store.
    pub fn reachable(&self) -> bool {
        self.reachable.get() == 1
    }
}
