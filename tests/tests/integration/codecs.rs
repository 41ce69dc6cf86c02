//! 100,000 keyed records with headers through each compression codec come back identical and in
//! order per partition.

use std::time::{Duration, Instant};

use strata_tests::{
    by_partition, strata_bin, unique_topic, Broker, BrokerOpts, KafkaConn, Rng, TrackingProducer,
};

const RECORDS: usize = 100_000;
const PARTITIONS: i32 = 3;

struct Sent {
    key: Vec<u8>,
    value: Vec<u8>,
    headers: Vec<(String, Vec<u8>)>,
}

fn make_records(seed: u64) -> Vec<Sent> {
    let mut rng = Rng::new(seed);
    (0..RECORDS)
        .map(|i| {
            let key = format!("key-{:03}-{i:06}", rng.below(500)).into_bytes();
            let len = 20 + rng.below(180) as usize;
            let value = rng.text(len);
            // Most records carry two headers, some none, one in 7 an empty-valued one as well.
            let blob_len = rng.below(24) as usize;
            let headers = match i % 7 {
                0 => Vec::new(),
                1 => vec![
                    ("index".to_string(), i.to_string().into_bytes()),
                    ("empty".to_string(), Vec::new()),
                ],
                _ => vec![
                    ("index".to_string(), i.to_string().into_bytes()),
                    ("blob".to_string(), rng.bytes(blob_len)),
                ],
            };
            Sent {
                key,
                value,
                headers,
            }
        })
        .collect()
}

fn round_trip(codec: &str) {
    let started = Instant::now();
    let broker = Broker::start_default();
    let topic = unique_topic(&format!("codec-{codec}"));
    broker
        .create_topic(&topic, PARTITIONS, &[])
        .expect("create topic");

    let records = make_records(codec.len() as u64 * 7919);
    let mut cfg = broker.producer_config();
    cfg.set("compression.type", codec)
        .set("linger.ms", "20")
        .set("batch.num.messages", "5000")
        .set("batch.size", "500000");
    let producer = TrackingProducer::new(&cfg);
    for (i, r) in records.iter().enumerate() {
        producer.send(i, &topic, None, &r.key, &r.value, &r.headers, None);
    }
    producer.flush(Duration::from_secs(180));
    let delivered = producer.all_delivered(RECORDS);
    let produce_time = started.elapsed();

    // Expected content of each partition: records in send order; their acked offsets must be
    // increasing in that order (one request in flight, so order is kept) and contiguous.
    let mut expected: Vec<Vec<usize>> = vec![Vec::new(); PARTITIONS as usize];
    for (i, (p, _)) in delivered.iter().enumerate() {
        expected[*p as usize].push(i);
    }
    for (p, idxs) in expected.iter().enumerate() {
        for (n, i) in idxs.iter().enumerate() {
            assert_eq!(
                delivered[*i].1, n as i64,
                "record {i} (the {n}th sent to partition {p}) was acked at offset {}",
                delivered[*i].1
            );
        }
        let (low, high) = broker.watermarks(&topic, p as i32);
        assert_eq!(
            (low, high),
            (0, idxs.len() as i64),
            "watermarks of partition {p}"
        );
    }

    let consumed = broker.consume_n(
        &topic,
        &(0..PARTITIONS).collect::<Vec<_>>(),
        RECORDS,
        Duration::from_secs(240),
    );
    assert_eq!(consumed.len(), RECORDS, "consumed record count");
    let parts = by_partition(&consumed).expect("per-partition order");
    for (p, idxs) in expected.iter().enumerate() {
        let got = parts.get(&(p as i32)).map(Vec::as_slice).unwrap_or(&[]);
        assert_eq!(
            got.len(),
            idxs.len(),
            "records read back from partition {p}"
        );
        for (n, (i, c)) in idxs.iter().zip(got).enumerate() {
            let sent = &records[*i];
            assert_eq!(
                c.offset, n as i64,
                "offset of the {n}th record of partition {p}"
            );
            assert_eq!(c.key.as_deref(), Some(&sent.key[..]), "key at {p}/{n}");
            assert_eq!(
                c.value.as_deref(),
                Some(&sent.value[..]),
                "value at {p}/{n}"
            );
            let want: Vec<(String, Option<Vec<u8>>)> = sent
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), Some(v.clone())))
                .collect();
            assert_eq!(c.headers, want, "headers at {p}/{n}");
        }
    }
    eprintln!(
        "{codec}: produced {RECORDS} in {produce_time:?}, round trip in {:?}",
        started.elapsed()
    );
}

#[test]
fn records_round_trip_uncompressed() {
    round_trip("none");
}

#[test]
fn records_round_trip_through_gzip() {
    round_trip("gzip");
}

#[test]
fn records_round_trip_through_snappy() {
    round_trip("snappy");
}

#[test]
fn records_round_trip_through_lz4() {
    round_trip("lz4");
}

#[test]
fn records_round_trip_through_zstd() {
    round_trip("zstd");
}

/// `(base offset, codec)` of every batch stored in partition 0 below `end`, read with raw
/// fetches (the bytes on disk, as a consumer gets them).
fn stored_codecs(broker: &Broker, topic: &str, end: i64) -> Vec<(i64, i16)> {
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let mut out = Vec::new();
    let mut next = 0;
    while next < end {
        let resp = conn.fetch(topic, 0, next, 500).unwrap();
        let records = resp.responses[0].partitions[0]
            .records
            .clone()
            .unwrap_or_default();
        let mut rest = &records[..];
        while rest.len() >= 61 {
            let base = i64::from_be_bytes(rest[0..8].try_into().unwrap());
            let len = i32::from_be_bytes(rest[8..12].try_into().unwrap()) as usize + 12;
            let attributes = i16::from_be_bytes(rest[21..23].try_into().unwrap());
            let last_delta = i32::from_be_bytes(rest[23..27].try_into().unwrap());
            if rest.len() < len {
                break;
            }
            out.push((base, attributes & 0x7));
            next = base + i64::from(last_delta) + 1;
            rest = &rest[len..];
        }
    }
    out
}

/// Sends `records` through a librdkafka producer with `compression.type=codec`; returns the
/// offsets they landed at.
fn produce_with(broker: &Broker, topic: &str, codec: &str, records: &[Sent]) -> Vec<i64> {
    let mut cfg = broker.producer_config();
    cfg.set("compression.type", codec).set("linger.ms", "20");
    let producer = TrackingProducer::new(&cfg);
    for (i, r) in records.iter().enumerate() {
        producer.send(i, topic, Some(0), &r.key, &r.value, &r.headers, None);
    }
    producer.flush(Duration::from_secs(60));
    (producer.all_delivered(records.len()).into_iter())
        .map(|(_, offset)| offset)
        .collect()
}

/// A topic with `compression.type=gzip` (Kafka's broker-side recompression): the batches of
/// uncompressed, lz4 and zstd producers are stored as gzip, a gzip producer's as sent, and
/// every record reads back whole and in order.
#[test]
fn a_gzip_topic_stores_every_producers_batches_as_gzip() {
    let broker = Broker::start_default();
    let topic = unique_topic("recompress-gzip");
    broker
        .create_topic(
            &topic,
            1,
            &[
                ("compression.type", "gzip"),
                ("compression.gzip.level", "9"),
            ],
        )
        .unwrap();
    let records = make_records(42);
    let chunks: Vec<&[Sent]> = records[..8000].chunks(2000).collect();
    let mut recompressed_in = Vec::new();
    for (codec, chunk) in ["none", "lz4", "zstd", "gzip"].into_iter().zip(&chunks) {
        produce_with(&broker, &topic, codec, chunk);
        recompressed_in.push(broker.metric("strata_recompressed_input_bytes_total"));
    }
    assert!(
        recompressed_in[0] > 0.0,
        "the uncompressed batches were rewritten"
    );
    assert!(recompressed_in[1] > recompressed_in[0] && recompressed_in[2] > recompressed_in[1]);
    assert_eq!(
        recompressed_in[3], recompressed_in[2],
        "gzip batches are stored as sent"
    );
    let stored = stored_codecs(&broker, &topic, 8000);
    assert!(stored.len() >= 4, "{stored:?}");
    assert!(
        stored.iter().all(|(_, codec)| *codec == 1),
        "not all gzip: {stored:?}"
    );

    let consumed = broker.consume_n(&topic, &[0], 8000, Duration::from_secs(60));
    assert_eq!(consumed.len(), 8000);
    for (n, (c, sent)) in consumed.iter().zip(&records).enumerate() {
        assert_eq!(c.offset, n as i64);
        assert_eq!(c.key.as_deref(), Some(&sent.key[..]), "key at {n}");
        assert_eq!(c.value.as_deref(), Some(&sent.value[..]), "value at {n}");
        assert_eq!(c.headers.len(), sent.headers.len(), "headers at {n}");
    }
}

/// The broker's `compression_type` is every new topic's default; an unknown codec or a level
/// out of range is refused with INVALID_CONFIG and creates nothing, and a broker configured
/// with one does not start.
#[test]
fn the_broker_default_codec_applies_and_bad_codecs_and_levels_are_refused() {
    let broker = Broker::start(BrokerOpts::new().env("STRATA_COMPRESSION_TYPE", "zstd"));
    let topic = unique_topic("recompress-default");
    broker.create_topic(&topic, 1, &[]).unwrap();
    produce_with(&broker, &topic, "lz4", &make_records(7)[..500]);
    let stored = stored_codecs(&broker, &topic, 500);
    assert!(
        stored.iter().all(|(_, codec)| *codec == 4),
        "not all zstd: {stored:?}"
    );

    for bad in [
        ("compression.type", "brotli"),
        ("compression.zstd.level", "23"),
        ("compression.lz4.level", "0"),
        ("compression.gzip.level", "0"),
    ] {
        let name = unique_topic("recompress-bad");
        let err = broker.create_topic(&name, 1, &[bad]).expect_err("refused");
        assert!(
            format!("{err:#}").contains("InvalidConfig"),
            "{bad:?}: {err:#}"
        );
    }

    let out = std::process::Command::new(strata_bin())
        .args(["serve", "--check-config"])
        .env("STRATA_COMPRESSION_ZSTD_LEVEL", "99")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a level out of range was accepted");
    assert!(text.contains("compression_zstd_level"), "{text}");
}
