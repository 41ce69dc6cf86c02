//! 100,000 keyed records with headers through each compression codec come back identical and in
//! order per partition.

use std::time::{Duration, Instant};

use strata_tests::{by_partition, unique_topic, Broker, Rng, TrackingProducer};

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
