//! Metrics of the remote tier: uploads, their backlog, the remote log, remote reads, expiry.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: String,
}

pub struct TierMetrics {
    uploaded_segments: Counter,
    uploaded_bytes: Counter,
    upload_seconds: Histogram,
    upload_errors: Family<KindLabels, Counter>,
    lag_segments: Gauge,
    lag_bytes: Gauge,
    remote_segments: Gauge,
    remote_bytes: Gauge,
    read_requests: Counter,
    read_bytes: Counter,
    read_errors: Family<KindLabels, Counter>,
    expired_segments: Counter,
    orphans_deleted: Counter,
}

impl Default for TierMetrics {
    fn default() -> Self {
        TierMetrics {
            uploaded_segments: Counter::default(),
            uploaded_bytes: Counter::default(),
            upload_seconds: Histogram::new(exponential_buckets(0.01, 2.0, 16)),
            upload_errors: Family::default(),
            lag_segments: Gauge::default(),
            lag_bytes: Gauge::default(),
            remote_segments: Gauge::default(),
            remote_bytes: Gauge::default(),
            read_requests: Counter::default(),
            read_bytes: Counter::default(),
            read_errors: Family::default(),
            expired_segments: Counter::default(),
            orphans_deleted: Counter::default(),
        }
    }
}

impl TierMetrics {
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("tier");
        r.register(
            "uploaded_segments",
            "Segments offloaded and committed",
            self.uploaded_segments.clone(),
        );
        r.register(
            "uploaded_bytes",
            "Log bytes offloaded and committed",
            self.uploaded_bytes.clone(),
        );
        r.register(
            "upload_seconds",
            "Time to upload, check and commit one segment",
            self.upload_seconds.clone(),
        );
        r.register(
            "upload_errors",
            "Uploads that failed, by kind (store error kinds, corrupt, commit)",
            self.upload_errors.clone(),
        );
        r.register(
            "upload_lag_segments",
            "Closed segments below the high watermark not yet offloaded",
            self.lag_segments.clone(),
        );
        r.register(
            "upload_lag_bytes",
            "Bytes of closed segments not yet offloaded",
            self.lag_bytes.clone(),
        );
        r.register(
            "remote_log_segments",
            "Committed remote segments of the partitions led here",
            self.remote_segments.clone(),
        );
        r.register(
            "remote_log_bytes",
            "Bytes of committed remote segments of the partitions led here",
            self.remote_bytes.clone(),
        );
        r.register(
            "remote_fetches",
            "Fetch reads served from the remote tier",
            self.read_requests.clone(),
        );
        r.register(
            "remote_fetch_bytes",
            "Bytes served from the remote tier (divide object store GETs by this for GETs per byte)",
            self.read_bytes.clone(),
        );
        r.register(
            "remote_fetch_errors",
            "Remote reads that failed, by kind (unavailable, corrupt, ...)",
            self.read_errors.clone(),
        );
        r.register(
            "expired_segments",
            "Remote segments deleted by retention",
            self.expired_segments.clone(),
        );
        r.register(
            "orphans_deleted",
            "Objects deleted because no remote-segment record names them",
            self.orphans_deleted.clone(),
        );
    }

    pub(crate) fn uploaded(&self, bytes: u64, seconds: f64) {
        self.uploaded_segments.inc();
        self.uploaded_bytes.inc_by(bytes);
        self.upload_seconds.observe(seconds);
    }

    pub(crate) fn upload_failed(&self, kind: &str) {
        self.upload_errors
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
            })
            .inc();
    }

    pub(crate) fn set_backlog(
        &self,
        segments: u64,
        bytes: u64,
        remote_segments: u64,
        remote_bytes: u64,
    ) {
        self.lag_segments.set(segments as i64);
        self.lag_bytes.set(bytes as i64);
        self.remote_segments.set(remote_segments as i64);
        self.remote_bytes.set(remote_bytes as i64);
    }

    pub(crate) fn read(&self, bytes: u64) {
        self.read_requests.inc();
        self.read_bytes.inc_by(bytes);
    }

    pub(crate) fn read_failed(&self, kind: &str) {
        self.read_errors
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
            })
            .inc();
    }

    pub(crate) fn expired(&self, segments: u64) {
        self.expired_segments.inc_by(segments);
    }

    pub(crate) fn orphan_deleted(&self) {
        self.orphans_deleted.inc();
    }

    pub fn uploaded_segments(&self) -> u64 {
        self.uploaded_segments.get()
    }
}
