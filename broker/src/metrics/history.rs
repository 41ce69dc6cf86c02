//! The broker's own figures over the last hour, for the console's charts: every
//! [`INTERVAL`] a sample of the few series they draw — bytes in and records out per second,
//! produce and fetch requests per second and their p99 latency, the remote cache's hit ratio,
//! object-store requests and errors per second, bytes within and across zones — kept for
//! [`POINTS`] samples (an hour).
//!
//! The series are read from a registry of their own ([`History::register`]) holding clones of
//! the counters and histograms `/metrics` shows, encoded and read back: a sample costs the
//! encoding of a few dozen series whatever the number of partitions or topics, and nothing is
//! counted twice on the request path.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::registry::Registry;
use serde::Serialize;

/// Between two samples.
pub const INTERVAL: Duration = Duration::from_secs(10);
/// Samples kept: an hour.
pub const POINTS: usize = 360;

/// One interval's figures (rates per second over the interval ending at `t_ms`); `None` where
/// nothing happened to measure (no request, no cache lookup).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Point {
    pub t_ms: i64,
    pub bytes_in_per_s: f64,
    pub fetched_bytes_per_s: f64,
    pub produce_per_s: f64,
    pub fetch_per_s: f64,
    pub produce_p99_ms: Option<f64>,
    pub fetch_p99_ms: Option<f64>,
    pub cache_hit_ratio: Option<f64>,
    pub object_store_requests_per_s: f64,
    pub object_store_errors_per_s: f64,
    /// Bytes that stayed in this broker's zone, and that crossed to another (what a cloud
    /// bills), as `/v1/process` counts them (`zones.rs`).
    pub same_zone_bytes_per_s: f64,
    pub cross_zone_bytes_per_s: f64,
}

/// Totals of every series at one sample: `name{labels}` → value.
type Totals = HashMap<String, f64>;

#[derive(Default)]
pub struct History {
    registry: Mutex<Registry>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// When the last sample was taken, and its totals.
    last: Option<(i64, Totals)>,
    points: VecDeque<Point>,
    /// Bytes appended per second to each topic's partitions led here over the last interval
    /// (topics that had appends since the broker started; the console sorts by it).
    topic_rates: HashMap<String, f64>,
}

impl History {
    /// Adds series to what samples read (names as on `/metrics`, `strata_` prefix included).
    pub fn register(&self, add: impl FnOnce(&mut Registry)) {
        let mut registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        add(registry.sub_registry_with_prefix("strata"));
    }

    /// Takes a sample at `now_ms`: a point for the interval since the last one.
    pub fn sample(&self, now_ms: i64) {
        let mut text = String::new();
        {
            let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &registry) {
                tracing::warn!(error = %e, "metrics history: cannot encode its series");
                return;
            }
        }
        let totals = parse(&text);
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let State {
            last,
            points,
            topic_rates,
        } = &mut *state;
        if let Some((then, before)) = last.as_ref().filter(|(then, _)| now_ms > *then) {
            let seconds = (now_ms - then) as f64 / 1000.0;
            points.push_back(point(now_ms, seconds, before, &totals));
            *topic_rates = rates_by_topic(seconds, before, &totals);
            while points.len() > POINTS {
                points.pop_front();
            }
        }
        *last = Some((now_ms, totals));
    }

    /// Bytes appended per second to each topic here over the last interval.
    pub fn topic_rates(&self) -> HashMap<String, f64> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.topic_rates.clone()
    }

    /// The points of the last hour, oldest first.
    pub fn points(&self) -> Vec<Point> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.points.iter().cloned().collect()
    }
}

/// `name{labels} value` lines of the text exposition, summed by series.
fn parse(text: &str) -> Totals {
    let mut totals = Totals::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        if let Ok(v) = value.parse::<f64>() {
            totals.insert(series.to_string(), v);
        }
    }
    totals
}

/// The name of a series (`name{labels}` → `name`) and the value of its label `key`.
fn label<'a>(series: &'a str, key: &str) -> Option<&'a str> {
    let labels = series.split_once('{')?.1.strip_suffix('}')?;
    labels.split(',').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| v.trim_matches('"'))
    })
}

fn name(series: &str) -> &str {
    series.split_once('{').map_or(series, |(n, _)| n)
}

/// What the series `pick` accepts grew by between two samples.
fn grew(before: &Totals, now: &Totals, pick: impl Fn(&str) -> bool) -> f64 {
    (now.iter())
        .filter(|(s, _)| pick(s))
        .map(|(s, v)| (v - before.get(s).copied().unwrap_or(0.0)).max(0.0))
        .sum()
}

/// The 99th percentile (the upper bound of its bucket, in ms) of the requests of `api` in the
/// interval; `None` without one.
fn p99_ms(before: &Totals, now: &Totals, api: &str) -> Option<f64> {
    let mut buckets: Vec<(f64, f64)> = (now.iter())
        .filter(|(s, _)| {
            name(s) == "strata_request_duration_seconds_bucket" && label(s, "api") == Some(api)
        })
        .filter_map(|(s, v)| {
            let le = label(s, "le")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, v - before.get(s).copied().unwrap_or(0.0)))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let count = buckets.last()?.1;
    if count <= 0.0 {
        return None;
    }
    let (le, _) = buckets.iter().find(|(_, n)| *n >= 0.99 * count)?;
    // Past the last bound: say the last finite bound, the most the buckets can tell.
    let le = match le.is_finite() {
        true => *le,
        false => buckets.iter().rev().find(|(b, _)| b.is_finite())?.0,
    };
    Some(le * 1000.0)
}

/// `strata_produced_bytes_total{topic}`'s growth per second, by topic.
fn rates_by_topic(seconds: f64, before: &Totals, now: &Totals) -> HashMap<String, f64> {
    (now.iter())
        .filter(|(s, _)| name(s) == "strata_produced_bytes_total")
        .filter_map(|(s, v)| {
            let grew = (v - before.get(s).copied().unwrap_or(0.0)).max(0.0);
            Some((label(s, "topic")?.to_string(), grew / seconds))
        })
        .collect()
}

fn point(t_ms: i64, seconds: f64, before: &Totals, now: &Totals) -> Point {
    let rate = |pick: &dyn Fn(&str) -> bool| grew(before, now, pick) / seconds;
    let requests = |api: &str| {
        let api = api.to_string();
        rate(&move |s| name(s) == "strata_requests_total" && label(s, "api") == Some(&api))
    };
    let lookups = |tier: Option<&str>| {
        grew(before, now, |s| {
            name(s) == "strata_cache_block_lookups_total"
                && tier.is_none_or(|t| label(s, "tier") == Some(t))
        })
    };
    let all = lookups(None);
    let zone = |zone: &str| {
        let zone = zone.to_string();
        rate(&move |s| {
            name(s).starts_with("strata_zone_billed_") && label(s, "zone") == Some(&zone)
        })
    };
    Point {
        t_ms,
        bytes_in_per_s: rate(&|s| name(s) == "strata_network_received_bytes_total"),
        fetched_bytes_per_s: rate(&|s| name(s) == "strata_fetched_bytes_total"),
        produce_per_s: requests("Produce"),
        fetch_per_s: requests("Fetch"),
        produce_p99_ms: p99_ms(before, now, "Produce"),
        fetch_p99_ms: p99_ms(before, now, "Fetch"),
        cache_hit_ratio: (all > 0.0).then(|| 1.0 - lookups(Some("miss")) / all),
        object_store_requests_per_s: rate(&|s| name(s) == "strata_object_store_requests_total"),
        object_store_errors_per_s: rate(&|s| name(s) == "strata_object_store_errors_total"),
        same_zone_bytes_per_s: zone("same"),
        cross_zone_bytes_per_s: zone("cross"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

    type Api = Vec<(String, String)>;

    /// Rates over the interval, p99 from the interval's buckets only, and an hour kept.
    #[test]
    fn points_are_rates_and_percentiles_of_each_interval() {
        let history = History::default();
        let received = Counter::<u64>::default();
        let requests = Family::<Api, Counter>::default();
        let latency = Family::<Api, Histogram, _>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.00005, 2.0, 20))
        });
        history.register(|r| {
            r.register("network_received_bytes", "", received.clone());
            r.register("requests", "", requests.clone());
            r.register("request_duration_seconds", "", latency.clone());
        });
        let produce = vec![("api".to_string(), "Produce".to_string())];
        // Before the first interval: slow requests that must not count in it.
        for _ in 0..100 {
            latency.get_or_create(&produce).observe(1.0);
        }
        history.sample(0);
        assert!(history.points().is_empty(), "one sample is no interval");
        received.inc_by(10_000);
        for i in 0..1000 {
            requests.get_or_create(&produce).inc();
            // 99% at about 1 ms, 1% at about 10 ms.
            let seconds = if i % 100 == 0 { 0.01 } else { 0.001 };
            latency.get_or_create(&produce).observe(seconds);
        }
        history.sample(10_000);
        let p = &history.points()[0];
        assert_eq!(p.t_ms, 10_000);
        assert_eq!((p.bytes_in_per_s, p.produce_per_s), (1000.0, 100.0));
        let p99 = p.produce_p99_ms.unwrap();
        assert!((1.0..=1.7).contains(&p99), "{p99}");
        assert_eq!(
            (p.fetch_per_s, p.fetch_p99_ms, p.cache_hit_ratio),
            (0.0, None, None)
        );
        for i in 2..=(POINTS as i64 + 5) {
            history.sample(i * 10_000);
        }
        let points = history.points();
        assert_eq!(points.len(), POINTS);
        assert_eq!(points[0].t_ms, 60_000);
        assert_eq!(points[1].produce_p99_ms, None, "no request, no percentile");
    }

    #[test]
    fn series_are_read_back_from_the_text_exposition() {
        let t = parse("# HELP x\nstrata_a_total{api=\"Fetch\",le=\"0.5\"} 3\nstrata_b 1.5\n");
        let s = "strata_a_total{api=\"Fetch\",le=\"0.5\"}";
        assert_eq!(t.get(s), Some(&3.0));
        assert_eq!(
            (label(s, "api"), label(s, "le"), name(s)),
            (Some("Fetch"), Some("0.5"), "strata_a_total")
        );
        assert_eq!(t.get("strata_b"), Some(&1.5));
    }
}
