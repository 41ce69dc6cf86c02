//! Log compaction end to end, with librdkafka producing and consuming: the latest value of
//! every key survives at its original offset, tombstones delete their key and go after
//! `delete.retention.ms`, keyless records are refused, and a broker killed with SIGKILL at
//! several points of a clean restarts with a readable, correct log.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::records::Compression;
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::Offset;
use strata_tests::{
    block_on, encode_batch, now_ms, poll_until, unique_topic, wait_for, Broker, BrokerOpts,
    ConsumedRecord, KafkaConn, RawRecord, Rng, TrackingProducer,
};

const HOUR_MS: i64 = 3_600_000;

/// offset → (key, value); a `None` value is a tombstone.
type Contents = BTreeMap<i64, (String, Option<Vec<u8>>)>;

fn compacted_topic(broker: &Broker, topic: &str) {
    broker
        .create_topic(
            topic,
            1,
            &[
                ("cleanup.policy", "compact"),
                ("segment.bytes", "65536"),
                // Roll the active segment soon after producing stops, so all of it is cleanable.
                ("segment.ms", "1000"),
                ("min.cleanable.dirty.ratio", "0.01"),
                ("delete.retention.ms", &HOUR_MS.to_string()),
            ],
        )
        .unwrap();
}

fn value(key: usize, round: usize) -> Vec<u8> {
    let mut v = format!("k{key}:r{round}:").into_bytes();
    v.extend(Rng::new((key * 1000 + round) as u64).text(200));
    v
}

/// Produces `rounds` updates of `keys` keys, returning everything written.
fn produce_updates(broker: &Broker, topic: &str, keys: usize, rounds: usize) -> Contents {
    let mut cfg = broker.producer_config();
    cfg.set("linger.ms", "5");
    let producer = TrackingProducer::new(&cfg);
    let mut sent = Vec::new();
    for round in 0..rounds {
        for key in 0..keys {
            let k = format!("key-{key}");
            let v = value(key, round);
            producer.send(sent.len(), topic, Some(0), k.as_bytes(), &v, &[], None);
            sent.push((k, v));
        }
    }
    producer.flush(Duration::from_secs(60));
    let offsets = producer.all_delivered(sent.len());
    offsets
        .into_iter()
        .zip(sent)
        .map(|((_, o), (k, v))| (o, (k, Some(v))))
        .collect()
}

/// Tombstones (records with a key and no value) at `timestamp`; returns their offsets.
fn tombstones(broker: &Broker, topic: &str, keys: &[String], timestamp: i64) -> Contents {
    let producer: FutureProducer = broker.producer_config().create().unwrap();
    keys.iter()
        .map(|k| {
            let record = FutureRecord::<[u8], ()>::to(topic)
                .key(k.as_bytes())
                .partition(0)
                .timestamp(timestamp);
            let delivery = block_on(producer.send(record, Duration::from_secs(10)))
                .unwrap_or_else(|(e, _)| panic!("tombstone for {k}: {e}"));
            (delivery.offset, (k.clone(), None))
        })
        .collect()
}

/// The latest record of every key.
fn latest(all: &Contents) -> Contents {
    let mut by_key = BTreeMap::new();
    for (o, (k, v)) in all {
        by_key.insert(k.clone(), (*o, v.clone()));
    }
    by_key.into_iter().map(|(k, (o, v))| (o, (k, v))).collect()
}

/// Everything a consumer reads from the beginning up to the high watermark.
fn read_all(broker: &Broker, topic: &str) -> Contents {
    let (_, high) = broker.watermarks(topic, 0);
    let records: Vec<ConsumedRecord> = broker.consume_until(
        topic,
        &[(0, Offset::Beginning)],
        Duration::from_secs(30),
        |r| r.last().is_some_and(|l| l.offset >= high - 1),
    );
    records
        .into_iter()
        .map(|r| {
            let key = String::from_utf8(r.key.expect("compacted records have keys")).unwrap();
            (r.offset, (key, r.value))
        })
        .collect()
}

/// Waits until a consumer reads exactly `expected` from the beginning.
fn wait_compacted(broker: &Broker, topic: &str, expected: &Contents) {
    poll_until(
        Duration::from_secs(60),
        || (&read_all(broker, topic) == expected).then_some(()),
        || {
            let last = read_all(broker, topic);
            let extra: Vec<_> = last
                .keys()
                .filter(|o| !expected.contains_key(o))
                .take(5)
                .collect();
            let missing: Vec<_> = expected
                .keys()
                .filter(|o| !last.contains_key(o))
                .take(5)
                .collect();
            format!(
                "log not compacted to the expected {} records within 60 s: read {}, extra offsets {extra:?}, missing {missing:?}",
                expected.len(),
                last.len()
            )
        },
    );
}

/// True when the highest-based segment of a partition directory holds no batch yet.
fn newest_segment_is_empty(dir: &std::path::Path) -> bool {
    let newest = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .max_by_key(|e| e.file_name());
    newest.is_some_and(|e| e.metadata().is_ok_and(|m| m.len() == 0))
}

fn fast_cleaner() -> BrokerOpts {
    BrokerOpts::new().env("STRATA_LOG_CLEANER_BACKOFF_MS", 100)
}

#[test]
fn the_latest_value_per_key_survives_at_its_offset_and_tombstones_expire() {
    let mut broker = Broker::start(fast_cleaner());
    let topic = unique_topic("compact");
    compacted_topic(&broker, &topic);
    let mut all = produce_updates(&broker, &topic, 100, 40);
    // Keys 0–9 are deleted by tombstones two hours old (past delete.retention.ms: they go
    // too); keys 10–19 by fresh tombstones, which must stay for consumers to see.
    let old: Vec<String> = (0..10).map(|k| format!("key-{k}")).collect();
    let fresh: Vec<String> = (10..20).map(|k| format!("key-{k}")).collect();
    all.extend(tombstones(&broker, &topic, &old, now_ms() - 2 * HOUR_MS));
    all.extend(tombstones(&broker, &topic, &fresh, now_ms()));
    // key-0 lives again after its tombstone; the log ends with a record every reader reaches.
    all.extend(produce_updates(&broker, &topic, 1, 1));
    let high = broker.watermarks(&topic, 0).1;
    assert_eq!(high, all.len() as i64);

    let mut expected = latest(&all);
    expected.retain(|_, (k, v)| !(old.contains(k) && v.is_none()));
    assert_eq!(
        expected.len(),
        91,
        "80 live keys, key-0 written after its tombstone, 10 fresh tombstones"
    );
    wait_compacted(&broker, &topic, &expected);
    assert_eq!(
        broker.watermarks(&topic, 0),
        (0, high),
        "compaction never moves the log start or the log end"
    );
    assert!(broker.metric("strata_log_cleaner_runs_total") >= 1.0);
    assert!(broker.metric("strata_log_cleaner_removed_records_total") >= (high - 91) as f64);

    // The compacted log is what both a clean restart and a crash come back with.
    broker.restart();
    assert_eq!(read_all(&broker, &topic), expected);
    broker.kill9();
    broker.restart();
    assert_eq!(read_all(&broker, &topic), expected);
    // And it keeps taking writes at the old log end.
    let more = produce_updates(&broker, &topic, 1, 1);
    assert_eq!(more.keys().next(), Some(&high));
}

#[test]
fn a_record_without_a_key_is_refused_by_a_compacted_topic() {
    let broker = Broker::start(fast_cleaner());
    let topic = unique_topic("compact-nokey");
    compacted_topic(&broker, &topic);
    let producer: FutureProducer = broker.producer_config().create().unwrap();
    let keyless = FutureRecord::<(), str>::to(&topic)
        .payload("no key")
        .partition(0);
    let err = block_on(producer.send(keyless, Duration::from_secs(10)))
        .expect_err("a keyless record must be refused")
        .0;
    assert!(
        err.to_string().contains("InvalidRecord"),
        "expected INVALID_RECORD, got {err}"
    );
    // The same producer goes on writing keyed records.
    let keyed = FutureRecord::to(&topic).key("k").payload("v").partition(0);
    let delivery = block_on(producer.send(keyed, Duration::from_secs(10))).unwrap();
    assert_eq!(delivery.offset, 0, "the refused record took no offset");
}

/// KIP-467: a batch of keyed and keyless records is refused whole, and the response names
/// each keyless record by its index with why, so a client fails exactly those with
/// INVALID_RECORD and the others with "a different record was invalid" (librdkafka's
/// delivery reports), free to send them again.
#[test]
fn a_batch_with_some_keyless_records_names_exactly_those() {
    let broker = Broker::start(fast_cleaner());
    let topic = unique_topic("compact-record-errors");
    compacted_topic(&broker, &topic);

    // The raw answer: error INVALID_RECORD, one record error per keyless record.
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let keyless = |ts| RawRecord {
        key: None,
        ..RawRecord::new("", "v", ts)
    };
    let now = now_ms();
    let records = [
        RawRecord::new("a", "v", now),
        keyless(now),
        RawRecord::new("b", "v", now),
        keyless(now),
    ];
    let resp = conn
        .produce(&topic, 0, encode_batch(&records, Compression::Lz4, None))
        .unwrap();
    assert_eq!(resp.error_code, 87, "INVALID_RECORD");
    let named: Vec<(i32, String)> = (resp.record_errors.iter())
        .map(|e| {
            let why = e.batch_index_error_message.as_deref().unwrap_or("");
            (e.batch_index, why.to_string())
        })
        .collect();
    assert_eq!(named.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [1, 3]);
    assert!(
        named.iter().all(|(_, why)| why.contains("needs a key")),
        "{named:?}"
    );
    assert_eq!(
        broker.watermarks(&topic, 0),
        (0, 0),
        "nothing of the batch was appended"
    );

    // librdkafka's delivery reports: 6 records in one batch, 2 keyless.
    let mut cfg = broker.producer_config();
    cfg.set("linger.ms", "500")
        .set("enable.idempotence", "false");
    let producer: FutureProducer = cfg.create().unwrap();
    let keyless_at = [2, 5];
    let pending: Vec<_> = (0..6)
        .map(|i| {
            let key = format!("k{i}");
            let rec = FutureRecord::to(&topic).payload("v").partition(0);
            let rec = if keyless_at.contains(&i) {
                rec
            } else {
                rec.key(&key)
            };
            producer.send_result(rec).map_err(|(e, _)| e).unwrap()
        })
        .collect();
    for (i, report) in pending.into_iter().enumerate() {
        let code = match block_on(report).expect("a delivery report") {
            Err((KafkaError::MessageProduction(code), _)) => Some(code),
            other => panic!("record {i}: {other:?}"),
        };
        let want = if keyless_at.contains(&i) {
            RDKafkaErrorCode::InvalidRecord
        } else {
            RDKafkaErrorCode::InvalidDifferentRecord
        };
        assert_eq!(code, Some(want), "record {i}");
    }
    assert_eq!(broker.watermarks(&topic, 0), (0, 0));
}

#[test]
fn a_kill_9_at_several_points_of_a_clean_leaves_a_readable_correct_log() {
    let data = tempfile::tempdir().unwrap();
    let topic = unique_topic("compact-crash");
    // Throttled to 400 kB/s, a clean of these ~2.5 MB takes several seconds: long enough to
    // kill the broker while it builds its key map, while it writes, and around the swap.
    let throttled = || {
        fast_cleaner()
            .data_dir(data.path())
            .env("STRATA_LOG_CLEANER_IO_MAX_BYTES_PER_SECOND", 400_000)
    };
    let all = {
        let mut broker = Broker::start(throttled().env("STRATA_LOG_CLEANER_ENABLE", false));
        compacted_topic(&broker, &topic);
        let all = produce_updates(&broker, &topic, 200, 40);
        // segment.ms rolls the active segment, so every record is in a cleanable segment.
        let dir = data.path().join(format!("{topic}-0"));
        wait_for(
            "segment.ms to roll the active segment",
            Duration::from_secs(30),
            || newest_segment_is_empty(&dir),
        );
        broker.terminate();
        all
    };
    let high = all.len() as i64;
    let expected = latest(&all);
    let staging = data.path().join(format!("{topic}-0")).join("cleaning");
    let mut interrupted_writes = 0;
    for delay_ms in [1000, 4000, 7000, 9000] {
        let mut broker = Broker::start(throttled());
        // The fault itself: SIGKILL this long into the throttled clean.
        std::thread::sleep(Duration::from_millis(delay_ms));
        interrupted_writes += staging.exists() as usize;
        broker.kill9();
        let broker = Broker::start(
            fast_cleaner()
                .data_dir(data.path())
                .env("STRATA_LOG_CLEANER_ENABLE", false),
        );
        // Whatever the crash left: every key's latest value at its offset, nothing that was
        // never written, and offsets strictly increasing up to the old log end.
        let got = read_all(&broker, &topic);
        for (o, rec) in &expected {
            assert_eq!(
                got.get(o),
                Some(rec),
                "after a kill at {delay_ms} ms: latest record at offset {o}"
            );
        }
        for (o, rec) in &got {
            assert_eq!(
                all.get(o),
                Some(rec),
                "after a kill at {delay_ms} ms: offset {o} holds a record never written there"
            );
        }
        assert_eq!(broker.watermarks(&topic, 0), (0, high));
        drop(broker);
    }
    assert!(
        interrupted_writes > 0,
        "no kill landed while cleaned segments were being written; the throttle no longer makes the clean slow enough"
    );
    // Unthrottled, the cleaner finishes and the log is exactly compacted.
    let broker = Broker::start(fast_cleaner().data_dir(data.path()));
    wait_compacted(&broker, &topic, &expected);
    wait_for(
        "the cleaner's metrics to count the clean",
        Duration::from_secs(10),
        || broker.metric("strata_log_cleaner_runs_total") >= 1.0,
    );
}

#[test]
fn consumer_offsets_is_a_compacted_topic() {
    let broker = Broker::start(fast_cleaner());
    let topic = unique_topic("compact-offsets");
    broker.create_topic(&topic, 1, &[]).unwrap();
    produce_updates(&broker, &topic, 1, 1);
    // A commit creates __consumer_offsets.
    let mut cfg = broker.consumer_config();
    cfg.set("group.id", "compaction-test");
    let consumer = broker.assigned_consumer(&cfg, &topic, &[(0, Offset::Beginning)]);
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, Offset::Offset(1))
        .unwrap();
    use rdkafka::consumer::Consumer;
    consumer
        .commit(&tpl, rdkafka::consumer::CommitMode::Sync)
        .expect("commit");
    let admin = broker.admin();
    let res = block_on(admin.describe_configs(
        [&rdkafka::admin::ResourceSpecifier::Topic(
            "__consumer_offsets",
        )],
        &rdkafka::admin::AdminOptions::new(),
    ))
    .expect("DescribeConfigs");
    let configs = res
        .into_iter()
        .next()
        .unwrap()
        .expect("__consumer_offsets configs");
    let policy = configs
        .entries
        .iter()
        .find(|e| e.name == "cleanup.policy")
        .and_then(|e| e.value.clone());
    assert_eq!(policy.as_deref(), Some("compact"));
}

#[test]
fn deleting_a_topic_while_it_is_being_cleaned_removes_it_and_the_broker_carries_on() {
    let broker =
        Broker::start(fast_cleaner().env("STRATA_LOG_CLEANER_IO_MAX_BYTES_PER_SECOND", 400_000));
    let topic = unique_topic("compact-delete");
    compacted_topic(&broker, &topic);
    produce_updates(&broker, &topic, 200, 20);
    let dir = broker.data_dir().join(format!("{topic}-0"));
    // The throttled clean of ~1 MB takes seconds; delete the topic while it writes.
    wait_for(
        "the cleaner to start writing",
        Duration::from_secs(30),
        || dir.join("cleaning").exists(),
    );
    let admin = broker.admin();
    let results =
        block_on(admin.delete_topics(&[topic.as_str()], &rdkafka::admin::AdminOptions::new()))
            .expect("DeleteTopics");
    assert!(results.iter().all(|r| r.is_ok()), "{results:?}");
    wait_for(
        "the partition directory to go",
        Duration::from_secs(10),
        || !dir.exists(),
    );
    // The name is free again, the new topic starts empty, and the broker still serves.
    compacted_topic(&broker, &topic);
    let again = produce_updates(&broker, &topic, 1, 1);
    assert_eq!(again.keys().next(), Some(&0));
    assert!(!dir.join("cleaning").exists());
}
