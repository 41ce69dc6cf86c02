//! Logs spanning many segments: every offset and timestamp is found in the right segment,
//! before and after a restart, and after the sparse index files are lost or damaged.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use strata_tests::{now_ms, unique_topic, Broker, Rng, TrackingProducer};

const RECORDS: usize = 6000;
const STEP_MS: i64 = 10;

fn value_of(i: usize) -> Vec<u8> {
    let mut v = format!("{i:08}:").into_bytes();
    v.extend(Rng::new(i as u64).text(1000));
    v
}

/// A 1-partition topic with 1 MiB segments holding ~6 MB; record i has timestamp base + 10 i.
fn many_segments(broker: &Broker) -> (String, i64) {
    let topic = unique_topic("segments");
    broker
        .create_topic(
            &topic,
            1,
            &[
                ("segment.bytes", "1048576"),
                ("index.interval.bytes", "4096"),
            ],
        )
        .unwrap();
    let base = now_ms() - 3_600_000;
    let mut cfg = broker.producer_config();
    cfg.set("linger.ms", "5").set("batch.size", "65536");
    let producer = TrackingProducer::new(&cfg);
    for i in 0..RECORDS {
        let ts = base + STEP_MS * i as i64;
        producer.send(
            i,
            &topic,
            Some(0),
            format!("k{i}").as_bytes(),
            &value_of(i),
            &[],
            Some(ts),
        );
    }
    producer.flush(Duration::from_secs(120));
    let delivered = producer.all_delivered(RECORDS);
    for (i, (_, o)) in delivered.iter().enumerate() {
        assert_eq!(*o, i as i64, "offset of record {i}");
    }
    (topic, base)
}

fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    v
}

/// Reads a few records from several offsets spread over the segments, and looks up timestamps.
fn check_reads(broker: &Broker, topic: &str, base: i64, when: &str) {
    assert_eq!(
        broker.watermarks(topic, 0),
        (0, RECORDS as i64),
        "watermarks {when}"
    );
    for from in [0, 1, 977, 2048, 3333, 4999, 5990] {
        let want = 5.min(RECORDS - from);
        let got = broker.consume_until(
            topic,
            &[(0, Offset::Offset(from as i64))],
            Duration::from_secs(30),
            |r| r.len() >= want,
        );
        for (n, r) in got.iter().take(want).enumerate() {
            let i = from + n;
            assert_eq!(
                r.offset, i as i64,
                "{when}: consuming from {from}, record #{n}"
            );
            assert_eq!(
                r.key.as_deref(),
                Some(format!("k{i}").as_bytes()),
                "{when}: key at offset {i}"
            );
            assert!(
                r.value.as_deref() == Some(&value_of(i)[..]),
                "{when}: value at offset {i} differs"
            );
            assert_eq!(
                r.timestamp,
                Some(base + STEP_MS * i as i64),
                "{when}: timestamp at offset {i}"
            );
        }
    }
    let consumer: BaseConsumer = broker.consumer_config().create().unwrap();
    for (ts, want) in [
        (base - 1, Offset::Offset(0)),
        (base + STEP_MS * 1500 - 3, Offset::Offset(1500)),
        (base + STEP_MS * 4321, Offset::Offset(4321)),
        (
            base + STEP_MS * (RECORDS as i64 - 1),
            Offset::Offset(RECORDS as i64 - 1),
        ),
        (base + STEP_MS * RECORDS as i64, Offset::End),
    ] {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, Offset::Offset(ts))
            .unwrap();
        let got = consumer
            .offsets_for_times(tpl, Duration::from_secs(10))
            .unwrap();
        let off = got.find_partition(topic, 0).unwrap().offset();
        assert_eq!(off, want, "{when}: offsets_for_times(base{:+})", ts - base);
    }
}

#[test]
fn every_offset_and_timestamp_is_found_across_many_segments_before_and_after_restart() {
    let mut broker = Broker::start_default();
    let (topic, base) = many_segments(&broker);
    let dir = broker.data_dir().join(format!("{topic}-0"));
    let segments = files_with_ext(&dir, "log");
    assert!(
        segments.len() >= 4,
        "expected several 1 MiB segments for ~6 MB, found {segments:?}"
    );
    check_reads(&broker, &topic, base, "before restart");
    broker.terminate();
    broker.restart();
    check_reads(&broker, &topic, base, "after restart");
}

#[test]
fn lost_or_damaged_index_files_do_not_lose_or_misplace_records() {
    let mut broker = Broker::start_default();
    let (topic, base) = many_segments(&broker);
    broker.terminate();
    let dir = broker.data_dir().join(format!("{topic}-0"));
    let mut damaged = Vec::new();
    for (n, path) in files_with_ext(&dir, "index")
        .into_iter()
        .chain(files_with_ext(&dir, "timeindex"))
        .enumerate()
    {
        let len = std::fs::metadata(&path).unwrap().len();
        match n % 3 {
            0 => std::fs::remove_file(&path).unwrap(),
            1 => std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .unwrap()
                .set_len(0)
                .unwrap(),
            _ => {
                // Cut mid-entry: no entry size divides this length.
                let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                f.set_len(len.saturating_sub(3).max(5)).unwrap();
            }
        }
        damaged.push(path.file_name().unwrap().to_string_lossy().into_owned());
    }
    assert!(
        !damaged.is_empty(),
        "no index files found in {}",
        dir.display()
    );
    broker.restart();
    check_reads(&broker, &topic, base, "after damaging the index files");
    // And the log still takes writes at its end.
    let producer = TrackingProducer::new(&broker.producer_config());
    producer.send(0, &topic, Some(0), b"after", b"damage", &[], None);
    producer.flush(Duration::from_secs(30));
    assert_eq!(producer.all_delivered(1)[0], (0, RECORDS as i64));
}
