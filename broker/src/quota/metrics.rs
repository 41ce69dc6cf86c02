//! Metrics per quota sensor: one series per quota and entity a quota applies to (the user
//! and/or client id as the quota shares them), removed when the sensor expires, so clients
//! without a quota never add a series.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct SensorLabels {
    pub quota: &'static str,
    /// The user the quota is measured for, empty when it is per client id only.
    pub user: String,
    /// The client id the quota is measured for, empty when it is per user only.
    pub client_id: String,
}

#[derive(Default)]
pub(super) struct QuotaMetrics {
    usage: Family<SensorLabels, Counter<f64, AtomicU64>>,
    limit: Family<SensorLabels, Gauge<f64, AtomicU64>>,
    throttle: Family<SensorLabels, Counter<f64, AtomicU64>>,
    throttled: Family<SensorLabels, Counter>,
}

impl QuotaMetrics {
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "client_quota_usage",
            "What the user/client id used, in its quota's unit: bytes (producer_byte_rate, consumer_byte_rate) or percent-seconds of a thread (request_percentage), so that its rate compares with the limit",
            self.usage.clone(),
        );
        r.register(
            "client_quota_limit",
            "The quota that applies to the user/client id",
            self.limit.clone(),
        );
        r.register(
            "client_quota_throttle_seconds",
            "Time the user/client id's connections were muted for going over the quota",
            self.throttle.clone(),
        );
        r.register(
            "client_quota_throttled_requests",
            "Responses that told the client to back off (throttle_time_ms > 0)",
            self.throttled.clone(),
        );
    }

    pub(super) fn limit(&self, labels: &SensorLabels, quota: f64) {
        self.limit.get_or_create(labels).set(quota);
    }

    pub(super) fn used(&self, labels: &SensorLabels, used: f64, throttle_s: f64) {
        self.usage.get_or_create(labels).inc_by(used);
        if throttle_s > 0.0 {
            self.throttle.get_or_create(labels).inc_by(throttle_s);
            self.throttled.get_or_create(labels).inc();
        }
    }

    pub(super) fn forget_limit(&self, labels: &SensorLabels) {
        self.limit.remove(labels);
    }

    pub(super) fn forget(&self, labels: &SensorLabels) {
        self.usage.remove(labels);
        self.limit.remove(labels);
        self.throttle.remove(labels);
        self.throttled.remove(labels);
    }
}
