//! Offsets at batch granularity: fetching from inside a multi-record batch gives the client the
//! records from that offset on, and the log end counts records, not batches.

use std::time::Duration;

use kafka_protocol::records::Compression;
use rdkafka::Offset;
use strata_tests::raw::decode_records;
use strata_tests::{
    encode_batch, now_ms, unique_topic, Broker, KafkaConn, RawRecord, TrackingProducer,
};

/// Two batches of ten records: offsets 0..10 and 10..20; keys "r{offset}".
fn two_batches(broker: &Broker, topic: &str, compression: Compression) {
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    for b in 0..2i64 {
        let recs: Vec<RawRecord> = (b * 10..b * 10 + 10)
            .map(|o| RawRecord::new(format!("r{o}"), format!("value {o}"), now_ms()))
            .collect();
        let off = conn
            .produce_ok(topic, 0, encode_batch(&recs, compression, None))
            .unwrap();
        assert_eq!(off, b * 10, "base offset of batch {b}");
    }
}

fn consume_from(broker: &Broker, topic: &str, from: i64) -> Vec<i64> {
    let want = (20 - from) as usize;
    let got = broker.consume_until(
        topic,
        &[(0, Offset::Offset(from))],
        Duration::from_secs(30),
        |r| r.len() >= want,
    );
    for r in &got {
        assert_eq!(
            r.key.as_deref(),
            Some(format!("r{}", r.offset).as_bytes()),
            "key at offset {}",
            r.offset
        );
        assert_eq!(
            r.value.as_deref(),
            Some(format!("value {}", r.offset).as_bytes())
        );
    }
    got.iter().map(|r| r.offset).collect()
}

#[test]
fn consuming_from_the_middle_of_a_batch_starts_at_the_requested_offset() {
    let broker = Broker::start_default();
    let topic = unique_topic("mid-batch");
    broker.create_topic(&topic, 1, &[]).unwrap();
    two_batches(&broker, &topic, Compression::None);
    for from in [5, 13, 19, 10, 0] {
        let offsets = consume_from(&broker, &topic, from);
        assert_eq!(
            offsets,
            (from..20).collect::<Vec<_>>(),
            "offsets consumed from {from}"
        );
    }
}

#[test]
fn consuming_from_the_middle_of_a_compressed_batch_starts_at_the_requested_offset() {
    let broker = Broker::start_default();
    let topic = unique_topic("mid-batch-gzip");
    broker.create_topic(&topic, 1, &[]).unwrap();
    two_batches(&broker, &topic, Compression::Gzip);
    for from in [7, 12] {
        let offsets = consume_from(&broker, &topic, from);
        assert_eq!(
            offsets,
            (from..20).collect::<Vec<_>>(),
            "offsets consumed from {from}"
        );
    }
}

#[test]
fn a_raw_fetch_inside_a_batch_returns_the_batch_holding_that_offset() {
    let broker = Broker::start_default();
    let topic = unique_topic("raw-mid-batch");
    broker.create_topic(&topic, 1, &[]).unwrap();
    two_batches(&broker, &topic, Compression::None);
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let resp = conn.fetch(&topic, 0, 13, 0).unwrap();
    let part = &resp.responses[0].partitions[0];
    assert_eq!(part.error_code, 0);
    assert_eq!(part.high_watermark, 20);
    let recs = decode_records(part.records.clone().expect("records")).unwrap();
    let first = recs.first().expect("at least one record").offset;
    assert!(
        first <= 13,
        "first returned offset {first} is past the requested 13"
    );
    assert!(
        recs.iter().any(|r| r.offset == 13),
        "offset 13 not in the fetched data"
    );
    assert_eq!(recs.last().unwrap().offset, 19);
}

#[test]
fn the_log_end_offset_after_multi_record_batches_is_the_record_count() {
    let broker = Broker::start_default();
    let topic = unique_topic("log-end");
    broker.create_topic(&topic, 1, &[]).unwrap();
    two_batches(&broker, &topic, Compression::None);
    assert_eq!(
        broker.watermarks(&topic, 0),
        (0, 20),
        "watermarks after two 10-record batches"
    );

    // And through librdkafka's own batching (several records per batch, lz4).
    let mut cfg = broker.producer_config();
    cfg.set("compression.type", "lz4").set("linger.ms", "50");
    let producer = TrackingProducer::new(&cfg);
    for i in 0..1000 {
        producer.send(
            i,
            &topic,
            Some(0),
            format!("k{i}").as_bytes(),
            b"some value",
            &[],
            None,
        );
    }
    producer.flush(Duration::from_secs(30));
    let delivered = producer.all_delivered(1000);
    assert_eq!(delivered[0].1, 20);
    assert_eq!(delivered[999].1, 1019);
    assert_eq!(
        broker.watermarks(&topic, 0),
        (0, 1020),
        "watermarks after 1000 more records"
    );
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    assert_eq!(
        conn.list_offset(&topic, 0, -1).unwrap().1,
        1020,
        "ListOffsets latest"
    );
    assert_eq!(
        conn.list_offset(&topic, 0, -2).unwrap().1,
        0,
        "ListOffsets earliest"
    );
}
