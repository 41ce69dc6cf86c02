//! Retention: old closed segments are deleted by size and by time; what remains is intact and
//! the log start offset moves with it.

use std::time::Duration;

use rdkafka::Offset;
use strata_tests::{
    now_ms, unique_topic, wait_for_some, Broker, BrokerOpts, Rng, TrackingProducer,
};

fn value_of(i: usize) -> Vec<u8> {
    let mut v = format!("{i:08}:").into_bytes();
    v.extend(Rng::new(i as u64).text(1000));
    v
}

fn broker() -> Broker {
    Broker::start(BrokerOpts::new().env("STRATA_LOG_RETENTION_CHECK_INTERVAL_MS", 300))
}

fn produce(broker: &Broker, topic: &str, range: std::ops::Range<usize>, ts: impl Fn(usize) -> i64) {
    let mut cfg = broker.producer_config();
    cfg.set("linger.ms", "5").set("batch.size", "65536");
    let producer = TrackingProducer::new(&cfg);
    for i in range.clone() {
        producer.send(
            i - range.start,
            topic,
            Some(0),
            format!("k{i}").as_bytes(),
            &value_of(i),
            &[],
            Some(ts(i)),
        );
    }
    producer.flush(Duration::from_secs(120));
    let delivered = producer.all_delivered(range.len());
    for (n, (_, o)) in delivered.iter().enumerate() {
        assert_eq!(*o, (range.start + n) as i64);
    }
}

/// Reads from offset 0 with auto.offset.reset=earliest: the consumer lands on the log start.
fn check_tail_intact(broker: &Broker, topic: &str, low: i64, high: i64) {
    let got = broker.consume_until(
        topic,
        &[(0, Offset::Offset(low))],
        Duration::from_secs(60),
        |r| r.len() as i64 >= high - low,
    );
    for (n, r) in got.iter().enumerate() {
        let i = low as usize + n;
        assert_eq!(r.offset, i as i64);
        assert!(
            r.value.as_deref() == Some(&value_of(i)[..]),
            "value at offset {i} differs"
        );
    }
    let got = broker.consume_until(
        topic,
        &[(0, Offset::Beginning)],
        Duration::from_secs(30),
        |r| !r.is_empty(),
    );
    assert_eq!(got[0].offset, low, "first offset read from the beginning");
}

/// (base offset, size) of each segment file of partition 0, oldest first.
fn segments(broker: &Broker, topic: &str) -> Vec<(i64, u64)> {
    let dir = broker.data_dir().join(format!("{topic}-0"));
    let mut v: Vec<(i64, u64)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().to_string_lossy().into_owned();
            let base = name.strip_suffix(".log")?.parse().ok()?;
            Some((base, e.metadata().ok()?.len()))
        })
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn retention_bytes_deletes_the_oldest_segments_and_moves_the_log_start() {
    let broker = broker();
    let topic = unique_topic("retention-bytes");
    let retention: u64 = 2_097_152;
    broker
        .create_topic(
            &topic,
            1,
            &[("segment.bytes", "1048576"), ("retention.bytes", "2097152")],
        )
        .unwrap();
    let n = 6000; // ~6 MB: about six segments
    produce(&broker, &topic, 0..n, |_| now_ms());
    // Kafka deletes the oldest segment while the log without it still holds retention.bytes;
    // wait for that rule to be satisfied (after which nothing more may be deleted).
    let segs = wait_for_some(
        "retention.bytes to delete the oldest segments (and the log start to follow)",
        Duration::from_secs(30),
        || {
            let segs = segments(&broker, &topic);
            let total: u64 = segs.iter().map(|s| s.1).sum();
            let settled = segs.len() > 1 && segs[0].0 > 0 && total - segs[0].1 < retention;
            // ... and the log start offset to follow the oldest remaining segment.
            (settled && broker.watermarks(&topic, 0).0 == segs[0].0).then_some(segs)
        },
    );
    let (low, high) = broker.watermarks(&topic, 0);
    assert_eq!(high, n as i64, "high watermark after retention");
    assert_eq!(
        low, segs[0].0,
        "log start offset vs the oldest remaining segment {segs:?}"
    );
    let total: u64 = segs.iter().map(|s| s.1).sum();
    assert!(
        total >= retention,
        "retention deleted too much: {total} bytes remain for retention.bytes={retention} ({segs:?})"
    );
    check_tail_intact(&broker, &topic, low, high);
}

#[test]
fn retention_ms_deletes_segments_whose_records_are_all_older() {
    let broker = broker();
    let topic = unique_topic("retention-ms");
    broker
        .create_topic(
            &topic,
            1,
            &[("segment.bytes", "1048576"), ("retention.ms", "3600000")],
        )
        .unwrap();
    let old = now_ms() - 2 * 3_600_000;
    let n_old = 3000; // ~3 MB two hours old
    let n_new = 2000; // ~2 MB now
    produce(&broker, &topic, 0..n_old, |i| old + i as i64);
    produce(&broker, &topic, n_old..n_old + n_new, |_| now_ms());
    // Done when the oldest remaining segment holds a recent record, i.e. the next segment
    // starts past the last old record (or there is only one segment left).
    let segs = wait_for_some(
        "every segment holding only old records to be deleted (and the log start to follow)",
        Duration::from_secs(30),
        || {
            let segs = segments(&broker, &topic);
            let settled = segs.len() == 1 || segs[1].0 > n_old as i64;
            // ... and the log start offset to follow the oldest remaining segment.
            (settled && broker.watermarks(&topic, 0).0 == segs[0].0).then_some(segs)
        },
    );
    assert!(
        segs[0].0 <= n_old as i64,
        "the oldest remaining segment starts at {}, past the first recent record {n_old}: \
         recent records were deleted ({segs:?})",
        segs[0].0
    );
    assert!(segs[0].0 > 0, "no segment was deleted ({segs:?})");
    let (low, high) = broker.watermarks(&topic, 0);
    assert_eq!(
        low, segs[0].0,
        "log start offset vs the oldest remaining segment {segs:?}"
    );
    assert_eq!(high, (n_old + n_new) as i64);
    check_tail_intact(&broker, &topic, low, high);
}
