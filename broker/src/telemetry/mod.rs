//! Client telemetry (KIP-714): a client asks which of its metrics to push
//! (GetTelemetrySubscriptions) and pushes them every interval (PushTelemetry, OTLP protobuf,
//! [`otlp`]); the metrics an operator chose (`client_telemetry_metrics`, name prefixes) are
//! kept per client and shown on `/metrics` as
//! `strata_client_telemetry{client_id, client_instance_id, metric, attributes}`.
//!
//! Kafka chooses the metrics with CLIENT_METRICS config resources (`kafka-client-metrics.sh`);
//! Strata takes one subscription for every client from its settings. With none chosen (the
//! default) a client is told to push nothing.
//!
//! Invariants:
//! - bounded: at most [`MAX_CLIENTS`] clients and [`MAX_SERIES`] series per client are held;
//!   a client not heard from for three intervals is forgotten, and its series leave `/metrics`;
//! - a push is refused before anything is decompressed when its bytes exceed
//!   `telemetry_max_bytes`, and its decompressed form may not exceed that either;
//! - a push must name the current subscription (UNKNOWN_SUBSCRIPTION_ID otherwise, and the
//!   client asks again) and come no sooner than half an interval after the previous one
//!   (THROTTLING_QUOTA_EXCEEDED), unless the client is terminating.

pub mod otlp;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use uuid::Uuid;

use crate::clock::Clock;
use crate::config::BrokerConfig;
use crate::error::ErrorCode;
use crate::metrics::Metrics;

/// Clients whose metrics are held at once; more are refused (THROTTLING_QUOTA_EXCEEDED) until
/// one is forgotten.
pub const MAX_CLIENTS: usize = 100;
/// Series (metric and attributes) held per client; the rest of a push is dropped.
pub const MAX_SERIES: usize = 100;

/// Compression types a client may push with: none, gzip, snappy, lz4, zstd (Kafka's ids).
pub const ACCEPTED_COMPRESSION: [i8; 5] = [4, 3, 2, 1, 0];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SeriesLabels {
    client_id: String,
    client_instance_id: String,
    metric: String,
    attributes: String,
}

struct Client {
    client_id: String,
    /// The last GetTelemetrySubscriptions or PushTelemetry.
    last_seen: Instant,
    last_push: Option<Instant>,
    terminated: bool,
    series: BTreeMap<(String, String), f64>,
}

/// What GetTelemetrySubscriptions answers.
pub struct Subscription {
    pub client_instance_id: Uuid,
    pub subscription_id: i32,
    pub push_interval_ms: i32,
    pub telemetry_max_bytes: i32,
    pub requested_metrics: Vec<String>,
}

/// One PushTelemetry.
pub struct Push<'a> {
    pub client_instance_id: Uuid,
    pub subscription_id: i32,
    pub terminating: bool,
    pub compression_type: i8,
    pub metrics: &'a [u8],
}

pub struct ClientTelemetry {
    prefixes: Vec<String>,
    interval: Duration,
    max_bytes: usize,
    subscription_id: i32,
    clients: Mutex<HashMap<Uuid, Client>>,
    series: Family<SeriesLabels, Gauge<f64, AtomicU64>>,
}

impl ClientTelemetry {
    pub fn new(cfg: &BrokerConfig, metrics: &Metrics, clock: Clock) -> Arc<ClientTelemetry> {
        let prefixes: Vec<String> = crate::topic_config::list_values(&cfg.client_telemetry_metrics)
            .into_iter()
            .map(|p| {
                if p == "*" {
                    String::new()
                } else {
                    p.to_string()
                }
            })
            .collect();
        // The same settings give the same id, on every broker and across restarts.
        let spec = format!(
            "{}|{}",
            prefixes.join(","),
            cfg.client_telemetry_interval_ms
        );
        let telemetry = Arc::new(ClientTelemetry {
            subscription_id: crc32c::crc32c(spec.as_bytes()) as i32,
            prefixes,
            interval: Duration::from_millis(cfg.client_telemetry_interval_ms.max(100)),
            max_bytes: cfg.telemetry_max_bytes as usize,
            clients: Mutex::new(HashMap::new()),
            series: Family::default(),
        });
        let family = telemetry.series.clone();
        metrics.register(|r| {
            r.register(
                "client_telemetry",
                "Metrics clients pushed (KIP-714), the latest value of each chosen one, per client",
                family,
            )
        });
        let weak = Arc::downgrade(&telemetry);
        metrics.on_scrape(move || {
            if let Some(t) = weak.upgrade() {
                t.refresh(clock.instant());
            }
        });
        telemetry
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Client>> {
        self.clients.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets clients silent for three intervals.
    fn expire(&self, clients: &mut HashMap<Uuid, Client>, now: Instant) {
        clients.retain(|_, c| now.duration_since(c.last_seen) < self.interval * 3);
    }

    /// GetTelemetrySubscriptions: the subscription, and the client's instance id (a new one
    /// for a client that has none yet).
    pub fn subscribe(
        &self,
        client_instance_id: Uuid,
        client_id: &str,
        now: Instant,
    ) -> Subscription {
        let id = if client_instance_id.is_nil() {
            Uuid::new_v4()
        } else {
            client_instance_id
        };
        let mut clients = self.lock();
        self.expire(&mut clients, now);
        if !self.prefixes.is_empty() && (clients.len() < MAX_CLIENTS || clients.contains_key(&id)) {
            let c = clients.entry(id).or_insert_with(|| Client {
                client_id: client_id.to_string(),
                last_seen: now,
                last_push: None,
                terminated: false,
                series: BTreeMap::new(),
            });
            c.last_seen = now;
            // The first push may come half an interval after this answer (KIP-714's jitter).
            c.last_push = Some(now);
        }
        Subscription {
            client_instance_id: id,
            subscription_id: self.subscription_id,
            push_interval_ms: i32::try_from(self.interval.as_millis()).unwrap_or(i32::MAX),
            telemetry_max_bytes: i32::try_from(self.max_bytes).unwrap_or(i32::MAX),
            requested_metrics: self.prefixes.clone(),
        }
    }

    /// PushTelemetry: checks the push and keeps its chosen metrics.
    pub fn push(&self, push: &Push<'_>, now: Instant) -> Result<(), ErrorCode> {
        if push.metrics.len() > self.max_bytes {
            return Err(ErrorCode::TelemetryTooLarge);
        }
        if !ACCEPTED_COMPRESSION.contains(&push.compression_type) {
            return Err(ErrorCode::UnsupportedCompressionType);
        }
        {
            let mut clients = self.lock();
            self.expire(&mut clients, now);
            let Some(c) = clients.get_mut(&push.client_instance_id) else {
                return Err(ErrorCode::UnknownSubscriptionId);
            };
            if push.subscription_id != self.subscription_id {
                return Err(ErrorCode::UnknownSubscriptionId);
            }
            if c.terminated {
                return Err(ErrorCode::InvalidRequest);
            }
            let early = c
                .last_push
                .is_some_and(|t| now.duration_since(t) < self.interval / 2);
            if early && !push.terminating {
                return Err(ErrorCode::ThrottlingQuotaExceeded);
            }
            c.last_seen = now;
            c.last_push = Some(now);
            c.terminated = push.terminating;
        }
        // Decoded outside the lock: other clients' pushes and scrapes need not wait for it.
        let raw = crate::log::records::inflate(
            i16::from(push.compression_type),
            push.metrics,
            self.max_bytes,
        )
        .map_err(|_| ErrorCode::InvalidRecord)?;
        let samples = otlp::samples(&raw, &self.prefixes).map_err(|_| ErrorCode::InvalidRecord)?;
        let mut clients = self.lock();
        if let Some(c) = clients.get_mut(&push.client_instance_id) {
            for s in samples {
                let key = (s.name, s.attributes);
                if c.series.len() < MAX_SERIES || c.series.contains_key(&key) {
                    c.series.insert(key, s.value);
                }
            }
        }
        Ok(())
    }

    /// Rewrites the `/metrics` series from the clients held now.
    fn refresh(&self, now: Instant) {
        let mut clients = self.lock();
        self.expire(&mut clients, now);
        self.series.clear();
        for (id, c) in clients.iter() {
            for ((metric, attributes), value) in &c.series {
                self.series
                    .get_or_create(&SeriesLabels {
                        client_id: c.client_id.clone(),
                        client_instance_id: id.to_string(),
                        metric: metric.clone(),
                        attributes: attributes.clone(),
                    })
                    .set(*value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::otlp::*;
    use super::*;

    fn telemetry(metrics: &str) -> Arc<ClientTelemetry> {
        let cfg = BrokerConfig {
            client_telemetry_metrics: metrics.into(),
            client_telemetry_interval_ms: 1000,
            telemetry_max_bytes: 4096,
            ..BrokerConfig::default()
        };
        ClientTelemetry::new(&cfg, &Metrics::new(), Clock::manual(0))
    }

    fn payload(name: &str, value: f64) -> Vec<u8> {
        MetricsData {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![Metric {
                        name: name.into(),
                        gauge: Some(Points {
                            data_points: vec![NumberDataPoint {
                                attributes: vec![],
                                time_unix_nano: 1,
                                as_double: Some(value),
                                as_int: None,
                            }],
                        }),
                        sum: None,
                    }],
                }],
            }],
        }
        .encode_to_vec()
    }

    #[test]
    fn a_client_subscribes_pushes_and_is_held_to_the_interval() {
        let t = telemetry("org.apache.kafka.producer.");
        let t0 = crate::clock::Clock::manual(0).instant();
        let s = t.subscribe(Uuid::nil(), "app", t0);
        assert!(!s.client_instance_id.is_nil());
        assert_eq!(s.requested_metrics, vec!["org.apache.kafka.producer."]);
        let bytes = payload("org.apache.kafka.producer.record.queue.time.avg", 2.5);
        let push = |sub: i32, at: Duration, terminating: bool| {
            t.push(
                &Push {
                    client_instance_id: s.client_instance_id,
                    subscription_id: sub,
                    terminating,
                    compression_type: 0,
                    metrics: &bytes,
                },
                t0 + at,
            )
        };
        let ms = Duration::from_millis;
        assert_eq!(
            push(s.subscription_id, ms(200), false),
            Err(ErrorCode::ThrottlingQuotaExceeded)
        );
        assert_eq!(
            push(s.subscription_id + 1, ms(600), false),
            Err(ErrorCode::UnknownSubscriptionId)
        );
        assert_eq!(push(s.subscription_id, ms(600), false), Ok(()));
        t.refresh(t0 + ms(600));
        assert_eq!(
            t.series
                .get_or_create(&SeriesLabels {
                    client_id: "app".into(),
                    client_instance_id: s.client_instance_id.to_string(),
                    metric: "org.apache.kafka.producer.record.queue.time.avg".into(),
                    attributes: String::new(),
                })
                .get(),
            2.5
        );
        // A terminating push may come at once; nothing after it.
        assert_eq!(push(s.subscription_id, ms(700), true), Ok(()));
        assert_eq!(
            push(s.subscription_id, ms(2000), false),
            Err(ErrorCode::InvalidRequest)
        );
        // Three intervals of silence and the client is forgotten.
        t.refresh(t0 + ms(5000));
        assert_eq!(
            push(s.subscription_id, ms(5000), false),
            Err(ErrorCode::UnknownSubscriptionId)
        );
    }

    #[test]
    fn bad_pushes_get_kafkas_codes_and_nothing_is_requested_by_default() {
        let t = telemetry("*");
        let t0 = crate::clock::Clock::manual(0).instant();
        let s = t.subscribe(Uuid::nil(), "app", t0);
        assert_eq!(s.requested_metrics, vec![String::new()], "every metric");
        let later = t0 + Duration::from_secs(1);
        let push = |compression_type: i8, metrics: &[u8]| {
            t.push(
                &Push {
                    client_instance_id: s.client_instance_id,
                    subscription_id: s.subscription_id,
                    terminating: false,
                    compression_type,
                    metrics,
                },
                later,
            )
        };
        assert_eq!(push(0, &[0u8; 5000]), Err(ErrorCode::TelemetryTooLarge));
        assert_eq!(push(9, b""), Err(ErrorCode::UnsupportedCompressionType));
        assert_eq!(
            push(0, b"\x0a\xff\xff\xff\xff\x0f"),
            Err(ErrorCode::InvalidRecord)
        );
        let unknown = t.push(
            &Push {
                client_instance_id: Uuid::new_v4(),
                subscription_id: s.subscription_id,
                terminating: false,
                compression_type: 0,
                metrics: b"",
            },
            later,
        );
        assert_eq!(unknown, Err(ErrorCode::UnknownSubscriptionId));

        let none = telemetry("");
        let s = none.subscribe(Uuid::nil(), "app", t0);
        assert!(
            s.requested_metrics.is_empty(),
            "nothing chosen: push nothing"
        );
    }
}
