//! ListOffsets by timestamp (rdkafka's offsets_for_times) finds the first offset whose
//! timestamp is at or after the target, including inside multi-record batches.

use std::time::Duration;

use kafka_protocol::records::Compression;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use strata_tests::{encode_batch, now_ms, unique_topic, Broker, KafkaConn, RawRecord};

/// Record timestamps: base + 1000*i for offsets 0..=10, in batches [0..5), [5..10), [10].
fn produce_timestamped(broker: &Broker, topic: &str, base: i64) {
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let rec = |i: i64| RawRecord::new(format!("k{i}"), format!("v{i}"), base + 1000 * i);
    let batches: [Vec<RawRecord>; 3] = [
        (0..5).map(rec).collect(),
        (5..10).map(rec).collect(),
        vec![rec(10)],
    ];
    let mut next = 0;
    for b in &batches {
        let off = conn
            .produce_ok(topic, 0, encode_batch(b, Compression::None, None))
            .unwrap();
        assert_eq!(off, next, "base offset of batch starting at record {next}");
        next += b.len() as i64;
    }
}

/// (target timestamp, expected offset or None for "no such record").
fn cases(base: i64) -> Vec<(i64, Option<i64>)> {
    vec![
        (base - 3_600_000, Some(0)), // before everything
        (base, Some(0)),
        (base + 1, Some(1)),
        (base + 2500, Some(3)), // middle of the first batch
        (base + 3000, Some(3)),
        (base + 4000, Some(4)), // last of the first batch
        (base + 4001, Some(5)), // first of the second batch
        (base + 7000, Some(7)), // middle of the second batch
        (base + 9999, Some(10)),
        (base + 10_000, Some(10)),
        (base + 10_001, None), // after everything
    ]
}

#[test]
fn offsets_for_times_finds_the_first_record_at_or_after_each_timestamp() {
    let broker = Broker::start_default();
    let topic = unique_topic("timestamps");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let base = now_ms() - 3_600_000;
    produce_timestamped(&broker, &topic, base);

    let consumer: BaseConsumer = broker.consumer_config().create().unwrap();
    let mut failures = Vec::new();
    for (ts, want) in cases(base) {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 0, Offset::Offset(ts))
            .unwrap();
        let got = consumer
            .offsets_for_times(tpl, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("offsets_for_times({ts}): {e}"));
        let elem = got.find_partition(&topic, 0).expect("partition in result");
        assert!(
            elem.error().is_ok(),
            "offsets_for_times(base+{}): {:?}",
            ts - base,
            elem.error()
        );
        let expected = match want {
            Some(o) => Offset::Offset(o),
            None => Offset::End,
        };
        if elem.offset() != expected {
            failures.push(format!(
                "timestamp base{:+}: expected {expected:?}, got {:?}",
                ts - base,
                elem.offset()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "wrong offsets:\n{}",
        failures.join("\n")
    );
}

#[test]
fn list_offsets_by_timestamp_returns_the_found_records_timestamp() {
    let broker = Broker::start_default();
    let topic = unique_topic("timestamps-raw");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let base = now_ms() - 3_600_000;
    produce_timestamped(&broker, &topic, base);

    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let mut failures = Vec::new();
    for (ts, want) in cases(base) {
        let (err, offset, timestamp) = conn.list_offset(&topic, 0, ts).unwrap();
        assert_eq!(err, 0, "ListOffsets error for base{:+}", ts - base);
        let expected = match want {
            Some(o) => (o, base + 1000 * o),
            None => (-1, -1),
        };
        if (offset, timestamp) != expected {
            failures.push(format!(
                "timestamp base{:+}: expected (offset, timestamp) {expected:?}, got ({offset}, {timestamp})",
                ts - base
            ));
        }
    }
    // -1 (latest) and -2 (earliest) still mean what they always meant.
    assert_eq!(
        conn.list_offset(&topic, 0, -1).unwrap().1,
        11,
        "latest offset"
    );
    assert_eq!(
        conn.list_offset(&topic, 0, -2).unwrap().1,
        0,
        "earliest offset"
    );
    assert!(
        failures.is_empty(),
        "wrong ListOffsets answers:\n{}",
        failures.join("\n")
    );
}

/// ListOffsets MAX_TIMESTAMP (-3) answers the first record holding the newest timestamp, not
/// the last record of its batch (KAFKA-16310), whatever the batch's codec, and the leader
/// epoch of that record; with LogAppendTime every record of a batch holds the batch's time,
/// so the answer is the newest batch's first record.
#[test]
fn max_timestamp_answers_the_exact_record_holding_it() {
    const MAX_TIMESTAMP: i64 = -3;
    let broker = Broker::start_default();
    let base = now_ms() - 3_600_000;
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    for codec in [Compression::None, Compression::Gzip, Compression::Zstd] {
        let topic = unique_topic("max-ts");
        broker.create_topic(&topic, 1, &[]).unwrap();
        let rec = |i: i64, ts: i64| RawRecord::new(format!("k{i}"), "v", base + ts);
        // The newest timestamp is the middle record of the first batch; a later batch holds
        // only older ones, and a record with the same newest timestamp comes after it.
        let first = vec![rec(0, 100), rec(1, 400), rec(2, 200)];
        let second = vec![rec(3, 50), rec(4, 400), rec(5, 300)];
        for b in [&first, &second] {
            conn.produce_ok(&topic, 0, encode_batch(b, codec, None))
                .unwrap();
        }
        assert_eq!(
            conn.list_offset(&topic, 0, MAX_TIMESTAMP).unwrap(),
            (0, 1, base + 400),
            "MAX_TIMESTAMP with {codec:?} batches"
        );
    }

    let topic = unique_topic("max-ts-append");
    broker
        .create_topic(&topic, 1, &[("message.timestamp.type", "LogAppendTime")])
        .unwrap();
    let rec = |i: i64| RawRecord::new(format!("k{i}"), "v", base + 1000 - i);
    conn.produce_ok(
        &topic,
        0,
        encode_batch(&[rec(0), rec(1)], Compression::None, None),
    )
    .unwrap();
    // The next batch must get a later append time: wait out the first one's millisecond.
    let (_, _, first_time) = conn.list_offset(&topic, 0, MAX_TIMESTAMP).unwrap();
    while now_ms() <= first_time {
        std::hint::spin_loop();
    }
    conn.produce_ok(
        &topic,
        0,
        encode_batch(&[rec(2), rec(3)], Compression::None, None),
    )
    .unwrap();
    let (err, offset, ts) = conn.list_offset(&topic, 0, MAX_TIMESTAMP).unwrap();
    assert_eq!(
        (err, offset),
        (0, 2),
        "MAX_TIMESTAMP of a LogAppendTime topic"
    );
    assert!(
        ts > base + 1000,
        "append time {ts}, not a record's own time"
    );

    // An empty partition has no such record.
    let topic = unique_topic("max-ts-empty");
    broker.create_topic(&topic, 1, &[]).unwrap();
    assert_eq!(
        conn.list_offset(&topic, 0, MAX_TIMESTAMP).unwrap(),
        (0, -1, -1)
    );
    // Nor anything in the object store yet (LATEST_TIERED, KIP-1005).
    assert_eq!(conn.list_offset(&topic, 0, -5).unwrap(), (0, -1, -1));
}
