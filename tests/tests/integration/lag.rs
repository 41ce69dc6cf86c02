//! Consumer lag as the broker reports it (`strata_consumer_lag_*` on `/metrics`) and as
//! `strata group describe --watch` shows it: a group consuming slower than its topic is
//! produced to falls behind (lag in records and seconds grows, trend positive); sped up, it
//! drains (trend negative, with a drain estimate) until it has caught up.
//!
//! The broker runs with a short sampling period and trend window
//! (`lag_sample_interval_ms`, `lag_window_ms`) so the whole story fits in a few seconds.

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use strata_tests::groups::unique_group;
use strata_tests::{
    parse_prometheus, strata_bin, unique_topic, wait_for_some, Broker, BrokerOpts, TrackingProducer,
};

const SAMPLE_INTERVAL_MS: u64 = 250;
const WINDOW_MS: u64 = 2_000;
/// Records per second produced throughout.
const PRODUCE_RATE: u64 = 200;
/// Records per second the consumer processes while it falls behind...
const SLOW_RATE: u64 = 50;
/// ...and after it is sped up (net drain: 200 records/s).
const FAST_RATE: u64 = 400;
/// Lag (records) built up before the consumer is sped up, so draining spans many samples.
const BACKLOG: f64 = 800.0;
/// Upper bound on every wait below.
const WAIT: Duration = Duration::from_secs(30);

/// One partition's lag on `/metrics`.
#[derive(Clone, Debug)]
struct LagGauges {
    records: f64,
    seconds: f64,
    trend: f64,
    drain_seconds: Option<f64>,
}

/// The lag gauges of `group` on `topic`-0, if the broker exports them.
fn lag_gauges(broker: &Broker, group: &str, topic: &str) -> Option<LagGauges> {
    let samples = parse_prometheus(&broker.metrics());
    let gauge = |name: &str| {
        samples
            .iter()
            .find(|s| {
                s.name == name
                    && s.label("group") == Some(group)
                    && s.label("topic") == Some(topic)
                    && s.label("partition") == Some("0")
            })
            .map(|s| s.value)
    };
    Some(LagGauges {
        records: gauge("strata_consumer_lag_records")?,
        seconds: gauge("strata_consumer_lag_seconds")?,
        trend: gauge("strata_consumer_lag_trend_records_per_second")?,
        drain_seconds: gauge("strata_consumer_lag_drain_seconds"),
    })
}

/// Produces `PRODUCE_RATE` records per second to partition 0 until stopped.
struct PacedProducer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<usize>>,
}

impl PacedProducer {
    fn start(broker: &Broker, topic: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let cfg = broker.producer_config();
        let (topic, stop2) = (topic.to_string(), stop.clone());
        let thread = thread::spawn(move || {
            let producer = TrackingProducer::new(&cfg);
            let period = Duration::from_micros(1_000_000 / PRODUCE_RATE);
            let started = Instant::now();
            let mut sent = 0usize;
            while !stop2.load(Ordering::SeqCst) {
                let due = started + period * sent as u32;
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    thread::sleep(wait);
                }
                let value = format!("lag-{sent}");
                producer.send(sent, &topic, Some(0), b"k", value.as_bytes(), &[], None);
                sent += 1;
            }
            producer.flush(Duration::from_secs(30));
            producer.all_delivered(sent);
            sent
        });
        PacedProducer {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops producing; returns how many records were produced (all acknowledged).
    fn stop(mut self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        let t = self.thread.take().expect("producer running");
        t.join().expect("producer thread panicked")
    }
}

impl Drop for PacedProducer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// A group member that processes at most `rate` records per second (auto-committing what it
/// processed every 100 ms); the rate can be changed while it runs.
struct PacedConsumer {
    rate: Arc<AtomicU64>,
    consumed: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl PacedConsumer {
    fn start(broker: &Broker, group: &str, topic: &str, rate: u64) -> Self {
        let mut cfg = broker.group_config(group);
        cfg.set("enable.auto.commit", "true")
            .set("auto.commit.interval.ms", "100");
        let rate = Arc::new(AtomicU64::new(rate));
        let consumed = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (rate, consumed, stop) = (rate.clone(), consumed.clone(), stop.clone());
            let topic = topic.to_string();
            thread::spawn(move || {
                let consumer: BaseConsumer = cfg.create().expect("create consumer");
                consumer.subscribe(&[&topic]).expect("subscribe");
                let mut next = Instant::now();
                while !stop.load(Ordering::SeqCst) {
                    // Pacing: one record per 1/rate s, without banking idle time.
                    let now = Instant::now();
                    if next > now {
                        thread::sleep(next - now);
                    }
                    next = next.max(Instant::now());
                    match consumer.poll(Duration::from_millis(50)) {
                        Some(Ok(_)) => {
                            consumed.fetch_add(1, Ordering::SeqCst);
                            let per_record = 1_000_000 / rate.load(Ordering::SeqCst).max(1);
                            next += Duration::from_micros(per_record);
                        }
                        Some(Err(e)) => eprintln!("consumer error (retried by librdkafka): {e}"),
                        None => {}
                    }
                }
            })
        };
        PacedConsumer {
            rate,
            consumed,
            stop,
            thread: Some(thread),
        }
    }

    fn set_rate(&self, rate: u64) {
        self.rate.store(rate, Ordering::SeqCst);
    }

    fn consumed(&self) -> usize {
        self.consumed.load(Ordering::SeqCst)
    }
}

impl Drop for PacedConsumer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The partition row of `strata group describe` for `topic`-0, as column → cell.
fn describe_row(output: &str, topic: &str) -> Option<Vec<(String, String)>> {
    let lines: Vec<&str> = output.lines().collect();
    let header = lines.iter().position(|l| l.starts_with("TOPIC "))?;
    // Columns are left-aligned under their headers (cells may contain spaces: STATUS).
    let head: Vec<char> = lines[header].chars().collect();
    let mut starts = Vec::new();
    for (i, c) in head.iter().enumerate() {
        if *c != ' ' && (i == 0 || head[i - 1] == ' ') {
            starts.push(i);
        }
    }
    let cut = |line: &str| -> Vec<String> {
        let chars: Vec<char> = line.chars().collect();
        starts
            .iter()
            .enumerate()
            .map(|(k, &s)| {
                let e = starts.get(k + 1).copied().unwrap_or(chars.len());
                chars[s.min(chars.len())..e.min(chars.len())]
                    .iter()
                    .collect::<String>()
                    .trim()
                    .to_string()
            })
            .collect()
    };
    let names = cut(lines[header]);
    lines[header + 1..]
        .iter()
        .map(|l| cut(l))
        .find(|cells| cells.first().map(String::as_str) == Some(topic) && cells[1] == "0")
        .map(|cells| names.iter().cloned().zip(cells).collect())
}

fn cell<'a>(row: &'a [(String, String)], column: &str) -> &'a str {
    row.iter()
        .find(|(c, _)| c == column)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no column {column} in {row:?}"))
}

fn number(row: &[(String, String)], column: &str) -> f64 {
    let v = cell(row, column);
    v.parse()
        .unwrap_or_else(|_| panic!("column {column} is {v:?}, not a number: {row:?}"))
}

#[test]
fn lag_grows_while_a_group_falls_behind_then_drains_to_zero_once_it_speeds_up() {
    let broker = Broker::start(
        BrokerOpts::new()
            .env("STRATA_LAG_SAMPLE_INTERVAL_MS", SAMPLE_INTERVAL_MS)
            .env("STRATA_LAG_WINDOW_MS", WINDOW_MS),
    );
    let topic = unique_topic("lag");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let group = unique_group("lag");
    let producer = PacedProducer::start(&broker, &topic);
    let consumer = PacedConsumer::start(&broker, &group, &topic, SLOW_RATE);

    // Falling behind: lag in records and seconds, with a positive trend, that keeps growing.
    let first = wait_for_some(
        "a positive lag with a positive trend on /metrics",
        WAIT,
        || lag_gauges(&broker, &group, &topic).filter(|l| l.records > 0.0 && l.trend > 0.0),
    );
    assert!(
        first.seconds > 0.0,
        "lag in seconds while behind: {first:?}"
    );
    assert!(
        first.drain_seconds.is_none(),
        "a drain estimate while falling behind: {first:?}"
    );
    let later = wait_for_some("the lag to grow", WAIT, || {
        lag_gauges(&broker, &group, &topic).filter(|l| l.records > first.records)
    });
    assert!(later.trend > 0.0, "trend while the lag grows: {later:?}");
    assert!(
        later.seconds > first.seconds,
        "lag in seconds while the lag grows: {first:?} then {later:?}"
    );

    // The CLI sees the same: lag, its age, and a positive trend between its two samples.
    let out = Command::new(strata_bin())
        .args(["group", "describe", &group, "-b", &broker.kafka_addr])
        .args(["--watch", "1"])
        .output()
        .expect("run strata group describe");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "strata group describe failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("strata group describe --watch 1:\n{stdout}");
    let row = describe_row(&stdout, &topic)
        .unwrap_or_else(|| panic!("no row for {topic}-0 in:\n{stdout}"));
    assert!(number(&row, "LAG") > 0.0, "LAG column: {row:?}\n{stdout}");
    assert!(
        number(&row, "LAG-SECONDS") > 0.0,
        "LAG-SECONDS column: {row:?}\n{stdout}"
    );
    assert!(
        number(&row, "TREND(rec/s)") > 0.0,
        "TREND column while falling behind: {row:?}\n{stdout}"
    );
    assert_eq!(cell(&row, "STATUS"), "falling behind", "{stdout}");

    let behind = wait_for_some("a backlog to drain", WAIT, || {
        lag_gauges(&broker, &group, &topic).filter(|l| l.records >= BACKLOG)
    });
    assert!(behind.trend > 0.0, "trend before speeding up: {behind:?}");

    // Draining: the consumer outpaces the producer.
    consumer.set_rate(FAST_RATE);
    let draining = wait_for_some(
        "a negative trend with a drain estimate on /metrics",
        WAIT,
        || {
            lag_gauges(&broker, &group, &topic)
                .filter(|l| l.trend < 0.0 && l.records > 0.0 && l.drain_seconds.is_some())
        },
    );
    let drain = draining.drain_seconds.unwrap_or_default();
    let expected = draining.records / -draining.trend;
    assert!(
        (drain - expected).abs() <= 1e-6 * expected.max(1.0),
        "drain estimate is lag / -trend: {draining:?}"
    );
    assert!(
        draining.records < behind.records,
        "lag fell once draining: {behind:?} then {draining:?}"
    );

    // Caught up while the producer still runs: less than one second of production behind.
    wait_for_some("the group to catch up", WAIT, || {
        lag_gauges(&broker, &group, &topic).filter(|l| l.records < PRODUCE_RATE as f64)
    });
    let produced = producer.stop();
    let zero = wait_for_some("the lag to reach zero once production stops", WAIT, || {
        lag_gauges(&broker, &group, &topic).filter(|l| l.records == 0.0)
    });
    assert_eq!(
        zero.seconds, 0.0,
        "lag in seconds with nothing unread: {zero:?}"
    );
    assert!(
        zero.drain_seconds.is_none(),
        "a drain estimate with nothing to drain: {zero:?}"
    );
    eprintln!("behind: {first:?}\ngrowing: {later:?}\nbacklog: {behind:?}\ndraining: {draining:?}\ncaught up: {zero:?}");
    assert!(
        consumer.consumed() >= produced,
        "consumed {} of {produced} records yet the lag is zero",
        consumer.consumed()
    );

    // A deleted group's series go with it (the sampler removes them; it does not rebuild
    // every series at each sample).
    drop(consumer);
    let out = Command::new(strata_bin())
        .args(["group", "delete", &group, "-b", &broker.kafka_addr])
        .output()
        .expect("run strata group delete");
    assert!(
        out.status.success(),
        "strata group delete failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for_some("the deleted group's lag series to go", WAIT, || {
        lag_gauges(&broker, &group, &topic).is_none().then_some(())
    });
}
