//! Client quotas (Kafka's KIP-13, KIP-55, KIP-124, KIP-219): how many bytes a client may
//! produce and fetch per second, and how much of the broker's request handling time it may
//! take, per broker, as the quorum's quota entities say ([`strata_metadata::quota`]).
//!
//! A client over its quota is not refused: its response says how long to back off
//! (`throttle_time_ms`, which Kafka clients honour) and the broker reads nothing more from
//! its connection for that long (`server.rs`), so even a client that ignores the hint is held
//! to its quota on average.
//!
//! Invariants:
//! - each request is charged against at most one quota of each kind: that of the most
//!   specific entity naming the kind for its user and client id, in Kafka's order (user and
//!   client id; user and default client id; user; default user and client id; default user
//!   and default client id; default user; client id; default client id);
//! - clients share a quota as its entity says: a user's quota is shared by all of the user's
//!   client ids, a default user quota gives each user one of its own (one sensor per user and
//!   client id the entity spans);
//! - brokers' own traffic is never charged: follower fetches, transaction markers and any
//!   request of the inter-broker user;
//! - with no quota in the cluster a request costs one look at the metadata state; a
//!   connection resolves its quotas on its first request and again only when the quotas or
//!   its client id change;
//! - sensors of clients gone for an hour are dropped with their metrics, so made-up client
//!   ids cannot grow memory without bound.

mod bucket;
mod metrics;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{ApiKey, RequestKind};
use rustc_hash::FxHashMap as HashMap;
use strata_metadata::quota::{EntityName, QuotaEntity, QuotaKey};
use strata_metadata::SecurityState;

use self::bucket::Bucket;
use self::metrics::{QuotaMetrics, SensorLabels};
use crate::node::Node;
use crate::protocol::Request;
use crate::security::{Principal, Security};

/// A sensor unused (no connection holds it, nothing recorded) for this long is dropped.
const SENSOR_EXPIRY_MS: u64 = 3_600_000;
/// How often the sensors are swept for expired ones (when a new one is made).
const SWEEP_EVERY_MS: u64 = 60_000;

/// The quotas of one broker.
pub struct Quotas {
    node: Arc<Node>,
    /// What a client may use at once beyond its rate: `quota_window_num − 1` windows' worth.
    burst: Duration,
    /// The longest one response's throttle: `quota_window_num` windows.
    max_throttle: Duration,
    epoch: Instant,
    sensors: Mutex<Sensors>,
    metrics: Arc<QuotaMetrics>,
}

#[derive(Default)]
struct Sensors {
    by_labels: HashMap<SensorLabels, Arc<Sensor>>,
    last_sweep_ms: u64,
}

/// What one quota measures for the clients sharing it.
struct Sensor {
    labels: SensorLabels,
    bucket: Mutex<Bucket>,
}

/// One connection's quotas, resolved on its first request (see the module's invariants).
#[derive(Default)]
pub struct ConnectionQuotas(Option<Resolved>);

struct Resolved {
    /// The security state the quotas were resolved from (compared by pointer).
    security: Arc<SecurityState>,
    principal: Principal,
    client_id: String,
    /// By [`QuotaKey`] index: the quota and its sensor, where one applies.
    bounds: [Option<Bound>; 3],
}

struct Bound {
    quota: f64,
    sensor: Arc<Sensor>,
}

/// The quotas one request is charged against.
pub struct Charges<'a> {
    quotas: &'a Quotas,
    bounds: &'a [Option<Bound>; 3],
}

impl Quotas {
    pub fn new(node: Arc<Node>) -> Quotas {
        let metrics = Arc::new(QuotaMetrics::default());
        let registered = metrics.clone();
        node.metrics.register(move |r| registered.register(r));
        let window = Duration::from_secs(node.config.quota_window_size_seconds.into());
        Quotas {
            burst: window * (node.config.quota_window_num - 1),
            max_throttle: window * node.config.quota_window_num,
            epoch: node.clock.instant(),
            sensors: Mutex::default(),
            metrics,
            node,
        }
    }

    /// The quotas `req` of `principal` is charged against; `None` when none applies (no
    /// quota for its user and client id, or a broker's own request).
    pub fn charges<'a>(
        &'a self,
        conn: &'a mut ConnectionQuotas,
        req: &Request,
        principal: &Principal,
        security: &Security,
    ) -> Option<Charges<'a>> {
        let state = self.node.metadata.state();
        if state.security.quotas.is_empty() || exempt(req, principal, security) {
            return None;
        }
        let client_id = req.header.client_id.as_ref().map_or("", |c| c.as_str());
        let fresh = conn.0.as_ref().is_some_and(|r| {
            Arc::ptr_eq(&r.security, &state.security)
                && r.client_id == client_id
                && r.principal == *principal
        });
        if !fresh {
            conn.0 = Some(self.resolve(&state.security, principal, client_id));
        }
        let resolved = conn.0.as_ref()?;
        let any = resolved.bounds.iter().any(Option::is_some);
        any.then_some(Charges {
            quotas: self,
            bounds: &resolved.bounds,
        })
    }

    fn resolve(
        &self,
        security: &Arc<SecurityState>,
        principal: &Principal,
        client_id: &str,
    ) -> Resolved {
        let user = principal
            .as_str()
            .strip_prefix("User:")
            .unwrap_or(principal.as_str());
        let bounds = QuotaKey::ALL.map(|key| {
            let (quota, labels) = applicable(&security.quotas, key, user, client_id)?;
            self.metrics.limit(&labels, quota);
            Some(Bound {
                quota,
                sensor: self.sensor(labels),
            })
        });
        Resolved {
            security: security.clone(),
            principal: principal.clone(),
            client_id: client_id.to_string(),
            bounds,
        }
    }

    fn sensor(&self, labels: SensorLabels) -> Arc<Sensor> {
        let now = self.now_ms();
        let mut sensors = self.sensors.lock().unwrap_or_else(PoisonError::into_inner);
        if now.saturating_sub(sensors.last_sweep_ms) >= SWEEP_EVERY_MS {
            sensors.last_sweep_ms = now;
            sensors.by_labels.retain(|labels, s| {
                if Arc::strong_count(s) > 1 {
                    return true;
                }
                let last = (s.bucket.lock().unwrap_or_else(PoisonError::into_inner)).last_ms();
                // No connection applies it now, so no limit applies; the bucket is kept for
                // the hour, so that reconnecting does not buy a new burst.
                self.metrics.forget_limit(labels);
                let keep = now.saturating_sub(last) < SENSOR_EXPIRY_MS;
                if !keep {
                    self.metrics.forget(labels);
                }
                keep
            });
        }
        (sensors.by_labels.entry(labels.clone()))
            .or_insert_with(|| {
                Arc::new(Sensor {
                    labels,
                    bucket: Mutex::new(Bucket::new()),
                })
            })
            .clone()
    }

    fn now_ms(&self) -> u64 {
        self.node
            .clock
            .instant()
            .duration_since(self.epoch)
            .as_millis() as u64
    }
}

impl Charges<'_> {
    /// Cuts a consumer's fetch to one burst's worth of its quota (Kafka's bound), so one
    /// response cannot run up a debt of many throttles.
    pub fn bound_fetch(&self, req: &mut Request) {
        let (RequestKind::Fetch(fetch), Some(b)) = (
            &mut req.body,
            &self.bounds[QuotaKey::ConsumerByteRate as usize],
        ) else {
            return;
        };
        let bound = (b.quota * self.quotas.burst.as_secs_f64()).clamp(1.0, i32::MAX as f64) as i32;
        fetch.max_bytes = if fetch.max_bytes <= 0 {
            bound
        } else {
            fetch.max_bytes.min(bound)
        };
    }

    /// Whether request handling time is charged (and so worth measuring).
    pub fn times_requests(&self) -> bool {
        self.bounds[QuotaKey::RequestPercentage as usize].is_some()
    }

    /// Charges a handled request of `api`: a produce its `request_bytes`, a fetch the
    /// `fetched_bytes` of its response, any request the time its handler was `busy`; the
    /// longest throttle this earned.
    pub fn charge(
        &self,
        api: ApiKey,
        request_bytes: usize,
        fetched_bytes: usize,
        busy: Duration,
    ) -> Duration {
        let bytes = match api {
            ApiKey::Produce => self.record(QuotaKey::ProducerByteRate, request_bytes as f64),
            ApiKey::Fetch => self.record(QuotaKey::ConsumerByteRate, fetched_bytes as f64),
            _ => Duration::ZERO,
        };
        let time = self.record(QuotaKey::RequestPercentage, busy.as_secs_f64() * 100.0);
        bytes.max(time)
    }

    fn record(&self, key: QuotaKey, value: f64) -> Duration {
        let Some(b) = &self.bounds[key as usize] else {
            return Duration::ZERO;
        };
        let q = self.quotas;
        let now = q.now_ms();
        let throttle = (b.sensor.bucket.lock())
            .unwrap_or_else(PoisonError::into_inner)
            .record(value, now, b.quota, q.burst, q.max_throttle);
        (q.metrics).used(&b.sensor.labels, value, throttle.as_secs_f64());
        throttle
    }
}

/// Runs `f`; with `measure`, also sums the time spent polling it: the handling time a request
/// quota charges, without the time the request waits (a long-polling fetch, replication).
pub async fn timed<F: Future>(f: F, measure: bool) -> (F::Output, Duration) {
    let mut f = std::pin::pin!(f);
    let mut busy = Duration::ZERO;
    let out = std::future::poll_fn(|cx| {
        if !measure {
            return f.as_mut().poll(cx);
        }
        let start = crate::clock::Stopwatch::start();
        let polled = f.as_mut().poll(cx);
        busy += start.elapsed();
        polled
    })
    .await;
    (out, busy)
}

/// Requests never charged: brokers' own (follower fetches, transaction markers, the
/// inter-broker user's) and those of a connection still authenticating.
fn exempt(req: &Request, principal: &Principal, security: &Security) -> bool {
    match &req.body {
        RequestKind::Fetch(f) => f.replica_id.0 >= 0 || f.replica_state.replica_id.0 >= 0,
        _ => {
            matches!(
                req.api_key,
                ApiKey::WriteTxnMarkers
                    | ApiKey::ApiVersions
                    | ApiKey::SaslHandshake
                    | ApiKey::SaslAuthenticate
            ) || security.is_inter_broker(principal)
        }
    }
}

/// The quota of `key` that applies to `user`'s client `client_id`, and the labels of the
/// sensor that measures it (who shares it): the first entity in Kafka's order that sets it.
fn applicable(
    quotas: &BTreeMap<QuotaEntity, BTreeMap<QuotaKey, f64>>,
    key: QuotaKey,
    user: &str,
    client_id: &str,
) -> Option<(f64, SensorLabels)> {
    use EntityName::Default;
    let named = |s: &str| Some(EntityName::Named(s.to_string()));
    // (entity's user, entity's client id, measured per user, measured per client id)
    let order = [
        (named(user), named(client_id), true, true),
        (named(user), Some(Default), true, true),
        (named(user), None, true, false),
        (Some(Default), named(client_id), true, true),
        (Some(Default), Some(Default), true, true),
        (Some(Default), None, true, false),
        (None, named(client_id), false, true),
        (None, Some(Default), false, true),
    ];
    order.into_iter().find_map(|(u, c, per_user, per_client)| {
        let entity = QuotaEntity {
            user: u,
            client_id: c,
        };
        let quota = *quotas.get(&entity)?.get(&key)?;
        let labels = SensorLabels {
            quota: key.name(),
            user: if per_user { user } else { "" }.to_string(),
            client_id: if per_client { client_id } else { "" }.to_string(),
        };
        Some((quota, labels))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(user: Option<&str>, client: Option<&str>) -> QuotaEntity {
        let name = |s: &str| match s {
            "<default>" => EntityName::Default,
            s => EntityName::Named(s.into()),
        };
        QuotaEntity {
            user: user.map(name),
            client_id: client.map(name),
        }
    }

    #[test]
    fn the_most_specific_entity_setting_the_quota_applies_in_kafkas_order() {
        let key = QuotaKey::ProducerByteRate;
        let levels = [
            (Some("alice"), Some("app"), 1.0),
            (Some("alice"), Some("<default>"), 2.0),
            (Some("alice"), None, 3.0),
            (Some("<default>"), Some("app"), 4.0),
            (Some("<default>"), Some("<default>"), 5.0),
            (Some("<default>"), None, 6.0),
            (None, Some("app"), 7.0),
            (None, Some("<default>"), 8.0),
        ];
        let mut quotas: BTreeMap<QuotaEntity, BTreeMap<QuotaKey, f64>> = levels
            .iter()
            .map(|(u, c, q)| (entity(*u, *c), BTreeMap::from([(key, *q)])))
            .collect();
        // Peel the levels off one by one: each time the next one applies.
        for (u, c, q) in levels {
            let (quota, _) = applicable(&quotas, key, "alice", "app").unwrap();
            assert_eq!(quota, q, "{u:?} {c:?}");
            quotas.remove(&entity(u, c));
        }
        assert!(applicable(&quotas, key, "alice", "app").is_none());
    }

    #[test]
    fn a_quota_is_shared_as_its_entity_says_and_per_kind() {
        let quotas = BTreeMap::from([
            (
                entity(Some("alice"), None),
                BTreeMap::from([(QuotaKey::ProducerByteRate, 100.0)]),
            ),
            (
                entity(None, Some("<default>")),
                BTreeMap::from([(QuotaKey::ConsumerByteRate, 50.0)]),
            ),
        ]);
        // alice's clients share her producer quota; her consumer quota is per client id.
        let (_, p) = applicable(&quotas, QuotaKey::ProducerByteRate, "alice", "app").unwrap();
        assert_eq!((p.user.as_str(), p.client_id.as_str()), ("alice", ""));
        let (_, c) = applicable(&quotas, QuotaKey::ConsumerByteRate, "alice", "app").unwrap();
        assert_eq!((c.user.as_str(), c.client_id.as_str()), ("", "app"));
        // bob has no producer quota at all.
        assert!(applicable(&quotas, QuotaKey::ProducerByteRate, "bob", "app").is_none());
        assert!(applicable(&quotas, QuotaKey::RequestPercentage, "alice", "app").is_none());
    }
}
