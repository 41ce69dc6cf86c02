//! Long polling: a Fetch waiting at the tail is answered as soon as data arrives, not at
//! max_wait_ms. The bounds are correctness checks (a broker that is not woken by the append
//! would take the full 5 s), not benchmarks.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use kafka_protocol::messages::FetchRequest;
use kafka_protocol::records::Compression;
use rdkafka::Offset;
use strata_tests::raw::{decode_records, FETCH_VERSION};
use strata_tests::{
    encode_batch, now_ms, unique_topic, Broker, KafkaConn, RawRecord, TrackingProducer,
};

const MAX_WAIT_MS: i32 = 5000;
const WOKEN_WITHIN: Duration = Duration::from_secs(4);
/// How long the fetch is left parked before data arrives.
const PARKED_FOR: Duration = Duration::from_millis(500);

fn one(tag: &str) -> bytes::Bytes {
    encode_batch(
        &[RawRecord::new(tag, format!("value-{tag}"), now_ms())],
        Compression::None,
        None,
    )
}

#[test]
fn a_waiting_fetch_returns_as_soon_as_a_record_arrives() {
    let broker = Broker::start_default();
    let topic = unique_topic("long-poll");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let mut producer = KafkaConn::connect(&broker.kafka_addr).unwrap();
    assert_eq!(producer.produce_ok(&topic, 0, one("first")).unwrap(), 0);

    let mut fetcher = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let req: FetchRequest = KafkaConn::fetch_request(&topic, 0, 1, MAX_WAIT_MS, 1);
    let started = Instant::now();
    let id = fetcher.send_request(FETCH_VERSION, &req).unwrap();
    let (tx, rx) = mpsc::channel();
    let waiter = thread::spawn(move || {
        let resp = fetcher.recv_response::<FetchRequest>(FETCH_VERSION, id);
        tx.send(Instant::now()).unwrap();
        resp
    });
    // The fetch must still be parked: nothing to return yet.
    assert!(
        rx.recv_timeout(PARKED_FOR).is_err(),
        "the fetch at the log end returned within {PARKED_FOR:?} with no new data (min_bytes=1, max_wait_ms={MAX_WAIT_MS})"
    );
    let appended = Instant::now();
    assert_eq!(producer.produce_ok(&topic, 0, one("second")).unwrap(), 1);
    let answered = rx
        .recv_timeout(Duration::from_secs(15))
        .expect("no fetch response within 15 s");
    let resp = waiter.join().unwrap().expect("fetch response");
    let total = answered - started;
    let after_append = answered.saturating_duration_since(appended);
    assert!(
        total < WOKEN_WITHIN,
        "fetch with max_wait_ms={MAX_WAIT_MS} took {total:?} ({after_append:?} after the append): not woken by the append"
    );
    let part = &resp.responses[0].partitions[0];
    assert_eq!(part.error_code, 0);
    let recs = decode_records(part.records.clone().expect("records in the woken fetch")).unwrap();
    assert!(
        recs.iter()
            .any(|r| r.offset == 1 && r.key.as_deref() == Some(&b"second"[..])),
        "the woken fetch does not hold the new record: {recs:?}"
    );
}

#[test]
fn an_empty_fetch_waits_for_max_wait_ms_before_answering() {
    let broker = Broker::start_default();
    let topic = unique_topic("empty-wait");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let started = Instant::now();
    let resp = conn.fetch(&topic, 0, 0, 1000).unwrap();
    let took = started.elapsed();
    let part = &resp.responses[0].partitions[0];
    assert_eq!(part.error_code, 0);
    assert!(
        part.records.as_ref().is_none_or(|r| r.is_empty()),
        "records from an empty partition"
    );
    assert!(
        took >= Duration::from_millis(800),
        "an empty fetch with max_wait_ms=1000 returned after {took:?}"
    );
    assert!(
        took < Duration::from_secs(5),
        "an empty fetch with max_wait_ms=1000 took {took:?}"
    );
}

#[test]
fn a_consumer_waiting_at_the_tail_receives_a_later_record_promptly() {
    let broker = Broker::start_default();
    let topic = unique_topic("tail");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let producer = TrackingProducer::new(&broker.producer_config());
    producer.send(0, &topic, Some(0), b"k0", b"first", &[], None);
    producer.flush(Duration::from_secs(30));
    producer.all_delivered(1);

    let mut cfg = broker.consumer_config();
    cfg.set("fetch.wait.max.ms", MAX_WAIT_MS.to_string())
        .set("fetch.min.bytes", "1");
    let consumer = broker.assigned_consumer(&cfg, &topic, &[(0, Offset::Offset(1))]);
    // Poll for a while with nothing to read: the consumer's fetch parks at the tail.
    let idle_until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < idle_until {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            panic!(
                "unexpected record at offset {} before anything was produced",
                rdkafka::Message::offset(&m)
            );
        }
    }
    let sent_at = Instant::now();
    producer.send(1, &topic, Some(0), b"k1", b"later", &[], None);
    let deadline = sent_at + Duration::from_secs(15);
    let received = loop {
        assert!(
            Instant::now() < deadline,
            "the tail consumer got nothing within 15 s"
        );
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(50)) {
            let rec = strata_tests::ConsumedRecord::from_message(&m);
            break (Instant::now(), rec);
        }
    };
    let took = received.0 - sent_at;
    assert_eq!(received.1.offset, 1);
    assert_eq!(received.1.value.as_deref(), Some(&b"later"[..]));
    assert!(
        took < WOKEN_WITHIN,
        "record produced to a consumer parked at the tail (fetch.wait.max.ms={MAX_WAIT_MS}) arrived after {took:?}"
    );
}
