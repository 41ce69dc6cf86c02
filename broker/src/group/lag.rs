//! Consumer lag, first-class: for every group and partition with a committed offset, the lag in
//! records (high watermark − committed), the lag in seconds (age of the oldest unconsumed
//! record), and its trend d(lag)/dt over a sliding window, whose sign is the diagnosis: growing
//! means the group is falling behind, shrinking means it is draining (with an estimated drain
//! time).
//!
//! Sampled every `lag_sample_interval_ms` (by `serve.rs` housekeeping) on each group's
//! coordinator, for every partition the group committed an offset for: read from the replica
//! where the partition is hosted here, asked of its leader otherwise (`lag_leaders.rs`). The
//! trend is the least-squares slope over the last `lag_window_ms`; each group's total is kept
//! for an hour (a point per 30 s) for the console's chart.
//! A group whose lag in seconds exceeds half of the topic's `retention.ms` is flagged (and
//! logged once), because retention is about to delete records it has not read.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::lag_leaders::{Answers, Leaders, Tp};
use crate::node::Node;
use crate::topic_config;

/// What the leaders of partitions not hosted here answered for one sample.
#[derive(Default)]
struct Remote {
    answers: Answers,
    /// `(partition, offset)` → the timestamp of the record there.
    at: HashMap<(Tp, i64), i64>,
}

type Key = (String, String, i32);

/// One partition's lag as last sampled.
#[derive(Clone, Copy, Debug)]
struct Lag {
    records: i64,
    seconds: f64,
    /// Records per second; positive = falling behind, negative = draining.
    trend: f64,
    /// Seconds until the lag reaches zero at the current trend; `None` unless draining.
    drain_seconds: Option<f64>,
    retention_risk: bool,
}

/// What the sampler remembers of one (group, topic, partition).
#[derive(Default)]
struct History {
    /// `(when, lag in records)` over the last `lag_window_ms`.
    points: VecDeque<(Instant, i64)>,
    /// `(offset, timestamp)` of the oldest unconsumed record when last looked up: a group that
    /// has not moved (a stopped consumer over thousands of partitions) costs no batch walk
    /// per sample.
    oldest: Option<(i64, i64)>,
    /// Flagged as at retention risk (and logged once) since the flag last cleared.
    at_risk: bool,
    /// The sample that last saw it (numbered): entries an older sample saw are gone.
    sampled: u64,
    /// The committed offset and lag of the last sample.
    last: Option<(i64, Lag)>,
    /// Its series on `/metrics`, looked up once: a sample sets them without hashing labels
    /// (at 30 groups over 10,000 partitions the lookups were most of an idle broker's CPU).
    series: Option<Series>,
}

/// One (group, topic, partition)'s gauges.
struct Series {
    labels: LagLabels,
    records: Gauge<f64, AtomicU64>,
    seconds: Gauge<f64, AtomicU64>,
    trend: Gauge<f64, AtomicU64>,
    risk: Gauge<f64, AtomicU64>,
    /// Only while draining.
    drain: Option<Gauge<f64, AtomicU64>>,
}

pub struct LagTracker {
    node: Arc<Node>,
    /// Asked for the figures of partitions not hosted here.
    leaders: Leaders,
    /// Samples taken, and what they remember.
    history: Mutex<(u64, HashMap<Key, History>)>,
    /// Each group's total lag over the last hour, a point per [`GROUP_POINT_EVERY_MS`].
    groups: Mutex<HashMap<String, VecDeque<GroupPoint>>>,
    gauges: LagGauges,
}

/// Between two points of a group's lag history, and how many are kept (an hour).
const GROUP_POINT_EVERY_MS: i64 = 30_000;
const GROUP_POINTS: usize = 120;

/// A group's lag at one sample: records over its partitions, and the oldest unread record's
/// age over them.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GroupPoint {
    pub t_ms: i64,
    pub lag_records: i64,
    pub lag_seconds: f64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LagLabels {
    group: String,
    topic: String,
    partition: String,
}

type LagGauge = Family<LagLabels, Gauge<f64, AtomicU64>>;

/// `strata_consumer_lag_*`: set at every sample, series of partitions no longer sampled
/// removed (not cleared and rebuilt, so a scrape never sees them empty).
#[derive(Default)]
struct LagGauges {
    records: LagGauge,
    seconds: LagGauge,
    trend: LagGauge,
    drain: LagGauge,
    risk: LagGauge,
}

impl LagGauges {
    fn families(&self) -> [&LagGauge; 5] {
        [
            &self.records,
            &self.seconds,
            &self.trend,
            &self.drain,
            &self.risk,
        ]
    }

    fn series(&self, (group, topic, partition): &Key) -> Series {
        let labels = LagLabels {
            group: group.clone(),
            topic: topic.clone(),
            partition: partition.to_string(),
        };
        Series {
            records: self.records.get_or_create(&labels).clone(),
            seconds: self.seconds.get_or_create(&labels).clone(),
            trend: self.trend.get_or_create(&labels).clone(),
            risk: self.risk.get_or_create(&labels).clone(),
            drain: None,
            labels,
        }
    }

    fn publish(&self, series: &mut Series, lag: &Lag) {
        series.records.set(lag.records as f64);
        series.seconds.set(lag.seconds);
        series.trend.set(lag.trend);
        series.risk.set(if lag.retention_risk { 1.0 } else { 0.0 });
        match (lag.drain_seconds, &series.drain) {
            (Some(d), Some(g)) => {
                g.set(d);
            }
            (Some(d), None) => {
                let g = self.drain.get_or_create(&series.labels).clone();
                g.set(d);
                series.drain = Some(g);
            }
            (None, Some(_)) => {
                self.drain.remove(&series.labels);
                series.drain = None;
            }
            (None, None) => {}
        }
    }

    fn remove(&self, series: &Series) {
        for family in self.families() {
            family.remove(&series.labels);
        }
    }
}

/// Least-squares slope of `(seconds, lag)` points; 0 with fewer than two.
pub fn slope(points: impl Iterator<Item = (f64, f64)> + Clone) -> f64 {
    let (count, sx, sy) = (points.clone()).fold((0usize, 0.0, 0.0), |(n, a, b), (x, y)| {
        (n + 1, a + x, b + y)
    });
    if count < 2 {
        return 0.0;
    }
    let n = count as f64;
    let (mx, my) = (sx / n, sy / n);
    let (num, den) = points.fold((0.0, 0.0), |(num, den), (x, y)| {
        (num + (x - mx) * (y - my), den + (x - mx) * (x - mx))
    });
    if den == 0.0 {
        0.0
    } else {
        num / den
    }
}

/// One (group, topic, partition)'s lag as last sampled here (`/v1/groups`, the console).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct PartitionLag {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    pub committed: i64,
    pub lag_records: i64,
    pub lag_seconds: f64,
    pub trend_records_per_second: f64,
    pub drain_seconds: Option<f64>,
    pub retention_risk: bool,
}

/// A group's totals over its partitions in the last sample.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupTotal {
    pub group: String,
    pub partitions: usize,
    pub lag_records: i64,
    /// The oldest unconsumed record's age, over its partitions.
    pub lag_seconds: f64,
    pub retention_risk: bool,
}

/// Totals by group of `(group, lag records, lag seconds, retention risk)` per partition, by
/// group name.
fn totals<'a>(partitions: impl Iterator<Item = (&'a str, i64, f64, bool)>) -> Vec<GroupTotal> {
    let mut totals: BTreeMap<&str, GroupTotal> = BTreeMap::new();
    for (group, records, seconds, risk) in partitions {
        let t = totals.entry(group).or_insert_with(|| GroupTotal {
            group: group.to_string(),
            partitions: 0,
            lag_records: 0,
            lag_seconds: 0.0,
            retention_risk: false,
        });
        t.partitions += 1;
        t.lag_records += records;
        t.lag_seconds = t.lag_seconds.max(seconds);
        t.retention_risk |= risk;
    }
    totals.into_values().collect()
}

impl LagTracker {
    /// The lag of each of `group`'s partitions the last sample saw (its coordinator's sample),
    /// sorted by topic and partition: only its partitions are copied out.
    pub fn group_sample(&self, group: &str) -> Vec<PartitionLag> {
        self.sample_of(|g| g == group)
    }

    /// Each group's totals in the last sample, by name: per group, not per partition, copied
    /// out (the console's lists of groups).
    pub fn group_totals(&self) -> Vec<GroupTotal> {
        let guard = self.history.lock().unwrap_or_else(|p| p.into_inner());
        totals((guard.1.iter()).filter_map(|((group, _, _), h)| {
            let (_, lag) = h.last?;
            Some((group.as_str(), lag.records, lag.seconds, lag.retention_risk))
        }))
    }

    fn sample_of(&self, wanted: impl Fn(&str) -> bool) -> Vec<PartitionLag> {
        let guard = self.history.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<PartitionLag> = (guard.1.iter())
            .filter(|((group, _, _), _)| wanted(group))
            .filter_map(|((group, topic, partition), h)| {
                let (committed, lag) = h.last?;
                Some(PartitionLag {
                    group: group.clone(),
                    topic: topic.clone(),
                    partition: *partition,
                    committed,
                    lag_records: lag.records,
                    lag_seconds: lag.seconds,
                    trend_records_per_second: lag.trend,
                    drain_seconds: lag.drain_seconds,
                    retention_risk: lag.retention_risk,
                })
            })
            .collect();
        out.sort_by(|a, b| {
            (&a.group, &a.topic, a.partition).cmp(&(&b.group, &b.topic, b.partition))
        });
        out
    }

    pub fn new(node: Arc<Node>) -> LagTracker {
        let gauges = LagGauges::default();
        node.metrics.register(|registry| {
            registry.register(
                "consumer_lag_records",
                "High watermark minus the group's committed offset",
                gauges.records.clone(),
            );
            registry.register(
                "consumer_lag_seconds",
                "Age of the oldest record the group has not consumed",
                gauges.seconds.clone(),
            );
            registry.register(
                "consumer_lag_trend_records_per_second",
                "Slope of lag over lag_window_ms: positive = falling behind, negative = draining",
                gauges.trend.clone(),
            );
            registry.register(
                "consumer_lag_drain_seconds",
                "Estimated time to zero lag at the current trend (only while draining)",
                gauges.drain.clone(),
            );
            registry.register(
                "consumer_lag_retention_risk",
                "1 when lag in seconds exceeds half of the topic's retention.ms: unread data is about to be deleted",
                gauges.risk.clone(),
            );
        });
        LagTracker {
            leaders: Leaders::new(node.config.node_id),
            node,
            history: Mutex::default(),
            groups: Mutex::default(),
            gauges,
        }
    }

    /// `group`'s total lag over the last hour, oldest first (empty for a group not sampled
    /// here).
    pub fn group_history(&self, group: &str) -> Vec<GroupPoint> {
        let groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        groups
            .get(group)
            .map(|h| h.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Adds this sample's totals to each group's history (at most a point per
    /// [`GROUP_POINT_EVERY_MS`]); groups no longer sampled are forgotten.
    fn record_groups(&self, history: &HashMap<Key, History>, now_ms: i64) {
        let mut totals: HashMap<&str, (i64, f64)> = HashMap::new();
        for ((group, _, _), h) in history {
            if let Some((_, lag)) = &h.last {
                let t = totals.entry(group.as_str()).or_default();
                t.0 += lag.records;
                t.1 = t.1.max(lag.seconds);
            }
        }
        let mut groups = self.groups.lock().unwrap_or_else(|p| p.into_inner());
        groups.retain(|g, _| totals.contains_key(g.as_str()));
        for (group, (lag_records, lag_seconds)) in totals {
            let points = match groups.get_mut(group) {
                Some(points) => points,
                None => groups.entry(group.to_string()).or_default(),
            };
            if points
                .back()
                .is_some_and(|p| now_ms - p.t_ms < GROUP_POINT_EVERY_MS)
            {
                continue;
            }
            points.push_back(GroupPoint {
                t_ms: now_ms,
                lag_records,
                lag_seconds,
            });
            while points.len() > GROUP_POINTS {
                points.pop_front();
            }
        }
    }

    /// Samples the lag of every committed offset, (group, topic, partition, offset), now and
    /// publishes it on `/metrics`: from the replica where the partition is hosted here, from
    /// its leader otherwise (`lag_leaders`).
    pub async fn sample(&self, committed: Vec<(String, String, i32, i64)>) {
        let node = &self.node;
        let remote: BTreeSet<Tp> = (committed.iter())
            .filter(|(_, t, p, _)| node.partitions.get(t, *p).is_none())
            .map(|(_, t, p, _)| (t.clone(), *p))
            .collect();
        if remote.is_empty() {
            self.measure(committed, &Remote::default());
            return;
        }
        let answers = self.leaders.offsets(node, &remote).await;
        // The timestamps the history does not hold already.
        let mut wanted: BTreeSet<(Tp, i64)> = BTreeSet::new();
        {
            let guard = self.history.lock().unwrap_or_else(|p| p.into_inner());
            for (group, topic, partition, committed) in &committed {
                let tp = (topic.clone(), *partition);
                let Some(o) = answers.offsets.get(&tp) else {
                    continue;
                };
                let unread = (*committed).max(o.log_start);
                let key = (group.clone(), topic.clone(), *partition);
                let known = (guard.1.get(&key))
                    .and_then(|h| h.oldest)
                    .is_some_and(|(offset, _)| offset == unread);
                if o.high_watermark > unread && !known {
                    wanted.insert((tp, unread));
                }
            }
        }
        let remote = Remote {
            at: self.leaders.timestamps(node, &wanted).await,
            answers,
        };
        self.measure(committed, &remote);
    }

    /// The lag of every committed offset, published; series of the keys sampled last time
    /// but not now removed.
    fn measure(&self, committed: Vec<(String, String, i32, i64)>, remote: &Remote) -> Vec<Lag> {
        let node = &self.node;
        let now = node.clock.instant();
        let wall = node.clock.now_ms();
        let window = Duration::from_millis(node.config.lag_window_ms);
        let state = node.metadata.state();
        let mut out = Vec::new();
        let mut guard = self.history.lock().unwrap_or_else(|p| p.into_inner());
        let (round, history) = &mut *guard;
        *round += 1;
        let round = *round;
        let mut retention: std::collections::HashMap<String, i64> = Default::default();
        let settings = node.settings();
        for (group, topic, partition, committed) in committed {
            let part = node.partitions.get(&topic, partition);
            // Only a partition hosted elsewhere is looked up by name among the answers.
            let tp = part.is_none().then(|| (topic.clone(), partition));
            let answer = tp.as_ref().and_then(|tp| remote.answers.offsets.get(tp));
            let key = (group, topic, partition);
            let (log_start, high_watermark) = match (&part, answer) {
                (Some(part), _) => {
                    let o = part.offsets();
                    (o.log_start, o.high_watermark)
                }
                (None, Some(o)) => (o.log_start, o.high_watermark),
                (None, None) => {
                    // A leader that did not answer: its partitions keep their last figures.
                    let unanswered = tp.is_some_and(|tp| remote.answers.unanswered.contains(&tp));
                    if let (true, Some(h)) = (unanswered, history.get_mut(&key)) {
                        h.sampled = round;
                    }
                    continue;
                }
            };
            let unread = committed.max(log_start);
            let records = (high_watermark - unread).max(0);
            let h = match history.get_mut(&key) {
                Some(h) => h,
                None => history.entry(key.clone()).or_default(),
            };
            let (group, topic, _) = &key;
            h.sampled = round;
            let seconds = if records == 0 {
                0.0
            } else {
                let ts = match (h.oldest, &part) {
                    (Some((offset, ts)), _) if offset == unread => Some(ts),
                    (_, Some(part)) => part.timestamp_at(unread),
                    (_, None) => tp.and_then(|tp| remote.at.get(&(tp, unread)).copied()),
                };
                h.oldest = ts.map(|ts| (unread, ts));
                match ts {
                    Some(ts) if ts >= 0 => ((wall - ts).max(0) as f64) / 1000.0,
                    _ => 0.0,
                }
            };
            let points = &mut h.points;
            points.push_back((now, records));
            while points
                .front()
                .is_some_and(|(t, _)| now.duration_since(*t) > window)
            {
                points.pop_front();
            }
            let first = points[0].0;
            let trend = slope(
                (points.iter()).map(|(t, l)| (t.duration_since(first).as_secs_f64(), *l as f64)),
            );
            let drain_seconds = (trend < 0.0 && records > 0).then(|| records as f64 / -trend);
            // Once per topic, not per partition: a group over 10,000 partitions of one topic
            // resolves its configs once per sample.
            let retention_ms = *retention.entry(topic.clone()).or_insert_with(|| {
                state
                    .topic(topic)
                    .map(|t| topic_config::log_config(&settings, &t.configs).retention_ms)
                    .unwrap_or(-1)
            });
            let retention_risk = retention_ms > 0 && seconds * 1000.0 > retention_ms as f64 / 2.0;
            if retention_risk && !h.at_risk {
                tracing::warn!(group, topic, partition, lag_seconds = seconds, retention_ms,
                    "consumer lag exceeds half of retention.ms: records may be deleted before this group reads them");
            }
            h.at_risk = retention_risk;
            let lag = Lag {
                records,
                seconds,
                trend,
                drain_seconds,
                retention_risk,
            };
            let series = h.series.get_or_insert_with(|| self.gauges.series(&key));
            self.gauges.publish(series, &lag);
            h.last = Some((committed, lag));
            out.push(lag);
        }
        history.retain(|_, h| {
            let kept = h.sampled == round;
            if let (false, Some(series)) = (kept, &h.series) {
                self.gauges.remove(series);
            }
            kept
        });
        self.record_groups(history, wall);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_has_the_sign_of_the_trend() {
        let slope = |p: &[(f64, f64)]| slope(p.iter().copied());
        assert_eq!(slope(&[]), 0.0);
        assert_eq!(slope(&[(0.0, 5.0)]), 0.0);
        assert!((slope(&[(0.0, 0.0), (1.0, 10.0), (2.0, 20.0)]) - 10.0).abs() < 1e-9);
        assert!(slope(&[(0.0, 100.0), (5.0, 60.0), (10.0, 10.0)]) < 0.0);
        assert_eq!(slope(&[(1.0, 3.0), (1.0, 7.0)]), 0.0);
    }

    /// Lag in seconds is the age of the oldest unread record on the broker's clock, and the
    /// trend its slope between samples: both checked on a manual clock, without sleeping.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lag_in_seconds_and_its_trend_are_measured_on_the_clock() {
        use crate::clock::Clock;
        use crate::config::BrokerConfig;
        use crate::log::batch::testing::batch;
        let clock = Clock::manual(1_700_000_000_000);
        let t = crate::testing::single_node(clock.clone(), BrokerConfig::default()).await;
        (t.node)
            .create_internal_topic("orders", 1, Default::default())
            .await
            .unwrap();
        t.node.sync_partitions().unwrap();
        let p = t.node.partitions.get("orders", 0).unwrap();
        // Records 0..10 stamped t0 + 0..9 ms; the group has read 0..3.
        p.append(&batch(10, clock.now_ms())).unwrap();
        let lag = LagTracker::new(t.node.clone());
        let committed = || vec![("g".to_string(), "orders".to_string(), 0, 4)];
        clock.advance(Duration::from_secs(30));
        let first = lag.measure(committed(), &Remote::default());
        assert_eq!((first[0].records, first[0].seconds), (6, 29.996));
        assert_eq!(first[0].trend, 0.0, "one point has no slope");
        // Ten more records in ten seconds while the group stands still: 1 record/s behind.
        clock.advance(Duration::from_secs(10));
        p.append(&batch(10, clock.now_ms())).unwrap();
        let second = lag.measure(committed(), &Remote::default());
        assert_eq!((second[0].records, second[0].seconds), (16, 39.996));
        assert!((second[0].trend - 1.0).abs() < 1e-9, "{}", second[0].trend);
        assert_eq!(second[0].drain_seconds, None, "not draining");

        // The group catches up to one record behind: draining, so a drain time is published; then its
        // offset is gone (the group deleted) and so are its series.
        clock.advance(Duration::from_secs(10));
        let third = lag.measure(
            vec![("g".to_string(), "orders".to_string(), 0, 19)],
            &Remote::default(),
        );
        assert!(third[0].drain_seconds.is_some());
        let text = t.node.metrics.render();
        let series =
            |name: &str| (text.lines()).any(|l| l.starts_with(name) && l.contains("group=\"g\""));
        assert!(series("strata_consumer_lag_records{"), "{text}");
        assert!(series("strata_consumer_lag_drain_seconds{"), "{text}");
        // A point per 30 s of the group's total: the first sample made one; the second and
        // third, 10 and 20 s after it, none.
        let points = lag.group_history("g");
        assert_eq!(points.len(), 1, "{points:?}");
        assert_eq!((points[0].lag_records, points[0].lag_seconds), (6, 29.996));
        clock.advance(Duration::from_secs(30));
        lag.measure(
            vec![("g".to_string(), "orders".to_string(), 0, 19)],
            &Remote::default(),
        );
        let points = lag.group_history("g");
        assert_eq!(points.len(), 2, "{points:?}");
        assert_eq!(points[1].lag_records, 1);
        lag.measure(Vec::new(), &Remote::default());
        let text = t.node.metrics.render();
        assert!(!text.contains("group=\"g\""), "{text}");
        assert!(
            lag.group_history("g").is_empty(),
            "a group gone is forgotten"
        );
    }

    #[test]
    fn group_totals_sum_records_and_take_the_oldest_age() {
        let rows = totals(
            [
                ("b", 0, 0.0, false),
                ("a", 5, 1.0, false),
                ("a", 7, 3.5, true),
            ]
            .into_iter(),
        );
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].group, "a");
        assert_eq!((rows[0].partitions, rows[0].lag_records), (2, 12));
        assert_eq!(rows[0].lag_seconds, 3.5);
        assert!(rows[0].retention_risk && !rows[1].retention_risk);
    }
}
