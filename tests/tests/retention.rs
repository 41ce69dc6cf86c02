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

#[test]
fn retention_bytes_deletes_the_oldest_segments_and_moves_the_log_start() {
    let broker = broker();
    let topic = unique_topic("retention-bytes");
    broker
        .create_topic(
            &topic,
            1,
            &[("segment.bytes", "1048576"), ("retention.bytes", "2097152")],
        )
        .unwrap();
    let n = 6000; // ~6 MB: about six segments
    produce(&broker, &topic, 0..n, |_| now_ms());
    // Kafka keeps segments while the log minus the oldest segment is at least retention.bytes,
    // so what remains is under retention.bytes plus one segment (plus the active one).
    let (low, high) = wait_for_some(
        "retention.bytes to bring the log under 2 MiB + 2 segments",
        Duration::from_secs(30),
        || {
            let (low, high) = broker.watermarks(&topic, 0);
            (low > 0 && (high - low) * 1010 <= 2_097_152 + 2 * 1_048_576).then_some((low, high))
        },
    );
    assert_eq!(high, n as i64, "high watermark after retention");
    assert!(
        (high - low) * 1010 >= 2_097_152 - 1_048_576,
        "retention deleted too much: {} records remain for retention.bytes=2 MiB",
        high - low
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
    let low = wait_for_some(
        "retention.ms to delete the old segments",
        Duration::from_secs(30),
        || {
            let (low, _) = broker.watermarks(&topic, 0);
            (low > 0).then_some(low)
        },
    );
    assert!(
        low <= n_old as i64,
        "log start {low} is past the first recent record {n_old}: recent records were deleted"
    );
    // Segments that hold only old records go; give the cleaner a moment to reach all of them.
    let low = wait_for_some(
        "every all-old segment to be deleted",
        Duration::from_secs(30),
        || {
            let (low, _) = broker.watermarks(&topic, 0);
            (low as usize + 1100 > n_old).then_some(low)
        },
    );
    let (_, high) = broker.watermarks(&topic, 0);
    assert_eq!(high, (n_old + n_new) as i64);
    check_tail_intact(&broker, &topic, low, high);
}
