//! Restarts: a clean shutdown keeps everything; kill -9 with flush-per-message keeps every
//! acknowledged record; the log accepts new writes where it left off; a broker whose
//! metadata store fails stops at once rather than running on without it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use rdkafka::Offset;
use strata_tests::{
    by_partition, unique_topic, wait_for, wait_until, Broker, BrokerOpts, TrackingProducer,
};

const PARTITIONS: i32 = 2;

fn value_of(i: usize) -> Vec<u8> {
    format!("value-{i}-{}", "x".repeat(i % 97)).into_bytes()
}

#[test]
fn a_clean_shutdown_and_restart_keeps_every_record() {
    let mut broker = Broker::start_default();
    let topic = unique_topic("clean-restart");
    broker.create_topic(&topic, PARTITIONS, &[]).unwrap();
    let n = 5_000;
    let producer = TrackingProducer::new(&broker.producer_config());
    for i in 0..n {
        producer.send(
            i,
            &topic,
            None,
            format!("k{i}").as_bytes(),
            &value_of(i),
            &[],
            None,
        );
    }
    producer.flush(Duration::from_secs(60));
    let delivered = producer.all_delivered(n);
    drop(producer);

    broker.terminate();
    broker.restart();

    let mut highs = HashMap::new();
    for p in 0..PARTITIONS {
        let count = delivered.iter().filter(|(dp, _)| *dp == p).count() as i64;
        assert_eq!(
            broker.watermarks(&topic, p),
            (0, count),
            "watermarks of partition {p} after restart"
        );
        highs.insert(p, count);
    }
    let records = broker.consume_n(&topic, &[0, 1], n, Duration::from_secs(60));
    let parts = by_partition(&records).unwrap();
    let mut at: HashMap<(i32, i64), usize> = HashMap::new();
    for (i, po) in delivered.iter().enumerate() {
        at.insert(*po, i);
    }
    for r in &records {
        let i = at[&(r.partition, r.offset)];
        assert_eq!(
            r.key.as_deref(),
            Some(format!("k{i}").as_bytes()),
            "key at {}/{}",
            r.partition,
            r.offset
        );
        assert_eq!(
            r.value.as_deref(),
            Some(&value_of(i)[..]),
            "value at {}/{}",
            r.partition,
            r.offset
        );
    }
    assert_eq!(parts.values().map(Vec::len).sum::<usize>(), n);

    // New writes continue at the old log end.
    let producer = TrackingProducer::new(&broker.producer_config());
    producer.send(0, &topic, Some(0), b"after", b"restart", &[], None);
    producer.flush(Duration::from_secs(30));
    assert_eq!(
        producer.all_delivered(1)[0],
        (0, highs[&0]),
        "offset of the first record after restart"
    );
}

#[test]
fn kill_9_with_flush_per_message_keeps_every_acknowledged_record() {
    let mut broker = Broker::start(BrokerOpts::new().env("STRATA_LOG_FLUSH_MESSAGES", 1));
    let topic = unique_topic("kill9");
    broker.create_topic(&topic, PARTITIONS, &[]).unwrap();

    let mut cfg = broker.producer_config();
    cfg.set("message.timeout.ms", "8000")
        .set("linger.ms", "1")
        .set("batch.num.messages", "20")
        .set("max.in.flight.requests.per.connection", "5");
    let producer = Arc::new(TrackingProducer::new(&cfg));
    let stop = Arc::new(AtomicBool::new(false));
    let sender = {
        let (producer, stop, topic) = (producer.clone(), stop.clone(), topic.clone());
        thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) && i < 200_000 {
                producer.send(
                    i,
                    &topic,
                    None,
                    format!("k{i}").as_bytes(),
                    &value_of(i),
                    &[],
                    None,
                );
                i += 1;
                if i % 50 == 0 {
                    // Keep a modest number in flight so the kill lands mid-stream.
                    while producer.in_flight() > 500 && !stop.load(Ordering::SeqCst) {
                        thread::sleep(Duration::from_millis(1));
                    }
                }
            }
            i
        })
    };
    wait_for(
        "3000 acknowledged records",
        Duration::from_secs(120),
        || producer.acked_count() >= 3000,
    );
    broker.kill9();
    stop.store(true, Ordering::SeqCst);
    let sent = sender.join().unwrap();
    // Let the producer give up on what was in flight (timeouts), then read the acks.
    wait_until(Duration::from_secs(30), || producer.in_flight() == 0);
    let acked: Vec<(usize, (i32, i64))> = producer
        .deliveries()
        .into_iter()
        .filter_map(|d| d.result.ok().map(|po| (d.index, po)))
        .collect();
    assert!(acked.len() >= 3000);
    eprintln!("sent {sent}, acknowledged {} before kill -9", acked.len());

    broker.restart();
    let mut highs = HashMap::new();
    for p in 0..PARTITIONS {
        let max_acked = acked
            .iter()
            .filter(|(_, (dp, _))| *dp == p)
            .map(|(_, (_, o))| *o)
            .max()
            .unwrap_or(-1);
        let (low, high) = broker.watermarks(&topic, p);
        assert_eq!(low, 0);
        assert!(high > max_acked, "partition {p}: high watermark {high} after restart, but offset {max_acked} was acknowledged");
        highs.insert(p, high);
    }
    let total: i64 = highs.values().sum();
    let records = broker.consume_n(&topic, &[0, 1], total as usize, Duration::from_secs(60));
    let parts = by_partition(&records).unwrap();
    for (p, recs) in &parts {
        assert!(
            recs.iter().map(|r| r.offset).eq(0..highs[p]),
            "partition {p}: offsets read back are not exactly 0..{}",
            highs[p]
        );
    }
    let found: HashMap<(i32, i64), &strata_tests::ConsumedRecord> = records
        .iter()
        .map(|r| ((r.partition, r.offset), r))
        .collect();
    let mut lost = Vec::new();
    for (i, po) in &acked {
        match found.get(po) {
            Some(r)
                if r.key.as_deref() == Some(format!("k{i}").as_bytes())
                    && r.value.as_deref() == Some(&value_of(*i)[..]) => {}
            Some(r) => lost.push(format!(
                "record {i} acked at {po:?} but that offset holds key {:?}",
                r.key
                    .as_ref()
                    .map(|k| String::from_utf8_lossy(k).into_owned())
            )),
            None => lost.push(format!("record {i} acked at {po:?} is missing")),
        }
    }
    assert!(
        lost.is_empty(),
        "{} acknowledged records lost or changed, e.g.:\n{}",
        lost.len(),
        lost[..lost.len().min(10)].join("\n")
    );

    // The recovered log takes new writes at its end.
    let producer = TrackingProducer::new(&broker.producer_config());
    producer.send(0, &topic, Some(1), b"after", b"crash", &[], None);
    producer.flush(Duration::from_secs(30));
    assert_eq!(
        producer.all_delivered(1)[0],
        (1, highs[&1]),
        "offset of the first record after recovery"
    );
    let got = broker.consume_until(
        &topic,
        &[(1, Offset::Offset(highs[&1]))],
        Duration::from_secs(30),
        |r| !r.is_empty(),
    );
    assert_eq!(got[0].key.as_deref(), Some(&b"after"[..]));
}

#[test]
fn sigint_also_shuts_down_cleanly_and_restarts() {
    let mut broker = Broker::start_default();
    let topic = unique_topic("sigint");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let producer = TrackingProducer::new(&broker.producer_config());
    for i in 0..100 {
        producer.send(i, &topic, None, format!("k{i}").as_bytes(), b"v", &[], None);
    }
    producer.flush(Duration::from_secs(30));
    producer.all_delivered(100);
    drop(producer);
    let status = broker.signal_and_wait(libc::SIGINT);
    assert!(status.success(), "exit status after SIGINT: {status}");
    broker.restart();
    assert_eq!(broker.watermarks(&topic, 0), (0, 100));
}

#[test]
fn a_broker_whose_metadata_store_fails_exits_instead_of_running_on() {
    let mut broker = Broker::start_default();
    let topic = unique_topic("store-fails");
    broker.create_topic(&topic, 1, &[]).unwrap();
    // The raft store's directory goes away: its next write (a commit, a vote) fails, and
    // openraft stops the node's raft core for good.
    std::fs::remove_dir_all(broker.data_dir().join("metadata")).expect("remove the store");
    let _ = broker.create_topic(&unique_topic("after"), 1, &[]);
    let status = broker.wait_exit(Duration::from_secs(30));
    assert!(!status.success(), "exit status {status}");
    let output = broker.output();
    assert!(
        output.contains("the metadata quorum member stopped"),
        "the reason is given:\n{output}"
    );
}
