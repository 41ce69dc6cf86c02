//! Idempotent producers: retried batches are appended once; sequence gaps are refused.

use std::collections::HashMap;
use std::time::Duration;

use kafka_protocol::records::Compression;
use rdkafka::config::ClientConfig;
use strata_tests::raw::error;
use strata_tests::{
    encode_batch, unique_topic, wait_for, Broker, BrokerOpts, ConsumedRecord, FaultProxy,
    Idempotence, KafkaConn, RawRecord, TrackingProducer,
};

const PARTITIONS: i32 = 3;

/// A broker reached only through a proxy that swallows Produce responses on demand.
fn broker_behind_proxy() -> (FaultProxy, Broker) {
    let proxy = FaultProxy::start();
    let broker = Broker::start(BrokerOpts::new().advertised_kafka_addr(&proxy.addr));
    proxy.set_target(&broker.kafka_addr);
    (proxy, broker)
}

fn via_proxy(cfg: &ClientConfig, proxy: &FaultProxy) -> ClientConfig {
    let mut cfg = cfg.clone();
    cfg.set("bootstrap.servers", &proxy.addr);
    cfg
}

/// Sends `n` distinct keys while the proxy swallows `drops` Produce responses (one armed every
/// n/drops records); returns (records read back, high watermarks summed over partitions).
fn produce_through_lost_acks(
    idempotent: bool,
    n: usize,
    drops: usize,
) -> (Vec<ConsumedRecord>, i64, usize) {
    let (proxy, broker) = broker_behind_proxy();
    let topic = unique_topic(if idempotent { "idem" } else { "nonidem" });
    broker.create_topic(&topic, PARTITIONS, &[]).unwrap();

    let mut cfg = via_proxy(&broker.producer_config(), &proxy);
    cfg.set(
        "enable.idempotence",
        if idempotent { "true" } else { "false" },
    )
    .set("max.in.flight.requests.per.connection", "5")
    .set("linger.ms", "2")
    .set("batch.num.messages", "50")
    .set("retry.backoff.ms", "20");
    let producer = TrackingProducer::new(&cfg);
    // In each round: arm one swallowed response, send a chunk, and wait until the proxy has
    // swallowed it (the chunk's own Produce requests guarantee there is one to swallow).
    let chunk = n / drops;
    for round in 0..drops {
        proxy.drop_produce_responses(1);
        for i in round * chunk..(round + 1) * chunk {
            let key = format!("key-{i:06}");
            let value = format!("value-{i}");
            producer.send(i, &topic, None, key.as_bytes(), value.as_bytes(), &[], None);
        }
        wait_for(
            &format!("the proxy to swallow Produce response #{}", round + 1),
            Duration::from_secs(30),
            || proxy.dropped() > round,
        );
    }
    producer.flush(Duration::from_secs(120));
    let delivered = producer.all_delivered(n);
    assert_eq!(delivered.len(), n);
    let dropped = proxy.dropped();
    proxy.heal();
    eprintln!("idempotent={idempotent}: {n} records acked, {dropped} Produce responses swallowed");

    // Consumers bootstrap on the broker but are sent to the (now healed) proxy by metadata.
    let mut high_sum = 0;
    for p in 0..PARTITIONS {
        high_sum += broker.watermarks(&topic, p).1;
    }
    let records = broker.consume_n(
        &topic,
        &(0..PARTITIONS).collect::<Vec<_>>(),
        high_sum as usize,
        Duration::from_secs(60),
    );
    (records, high_sum, dropped)
}

#[test]
fn idempotent_producer_retries_after_lost_acks_append_no_duplicates() {
    let n = 20_000;
    let (records, high_sum, dropped) = produce_through_lost_acks(true, n, 10);
    assert!(
        dropped > 0,
        "the proxy swallowed no Produce response, so nothing was retried"
    );
    let mut seen: HashMap<Vec<u8>, usize> = HashMap::new();
    for r in &records {
        *seen.entry(r.key.clone().unwrap_or_default()).or_default() += 1;
    }
    let dupes: Vec<_> = seen
        .iter()
        .filter(|(_, c)| **c > 1)
        .map(|(k, c)| (String::from_utf8_lossy(k).into_owned(), *c))
        .collect();
    let missing: Vec<usize> = (0..n)
        .filter(|i| !seen.contains_key(format!("key-{i:06}").as_bytes()))
        .collect();
    assert!(
        dupes.is_empty(),
        "{} keys appended more than once after {dropped} lost acks, e.g. {:?}",
        dupes.len(),
        &dupes[..dupes.len().min(5)]
    );
    assert!(
        missing.is_empty(),
        "{} keys missing, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    assert_eq!(
        high_sum, n as i64,
        "sum of high watermarks (log holds exactly the sent records)"
    );
}

/// Control for the test above: without idempotence the same lost acks do produce duplicates,
/// which shows the proxy really made the client retry appended batches.
#[test]
fn non_idempotent_retries_after_lost_acks_do_duplicate_showing_the_fault_is_real() {
    let n = 5_000;
    let (records, high_sum, dropped) = produce_through_lost_acks(false, n, 5);
    assert_eq!(dropped, 5, "Produce responses swallowed");
    assert!(
        high_sum > n as i64,
        "expected duplicates from {dropped} retried batches, but the log holds {high_sum} records for {n} sent"
    );
    assert_eq!(records.len() as i64, high_sum);
}

#[test]
fn idempotent_producer_with_a_healthy_connection_writes_each_record_once() {
    let broker = Broker::start_default();
    let topic = unique_topic("idem-plain");
    broker.create_topic(&topic, PARTITIONS, &[]).unwrap();
    let mut cfg = broker.producer_config();
    cfg.set("enable.idempotence", "true")
        .set("max.in.flight.requests.per.connection", "5");
    let producer = TrackingProducer::new(&cfg);
    let n = 20_000;
    for i in 0..n {
        producer.send(i, &topic, None, format!("k{i}").as_bytes(), b"v", &[], None);
    }
    producer.flush(Duration::from_secs(60));
    let delivered = producer.all_delivered(n);
    let mut per_partition: HashMap<i32, Vec<i64>> = HashMap::new();
    for (p, o) in &delivered {
        per_partition.entry(*p).or_default().push(*o);
    }
    for (p, mut offs) in per_partition {
        offs.sort_unstable();
        let len = offs.len() as i64;
        assert!(
            offs.iter().copied().eq(0..len),
            "partition {p}: acked offsets not exactly 0..{len}"
        );
        assert_eq!(
            broker.watermarks(&topic, p).1,
            len,
            "high watermark of partition {p}"
        );
    }
    let records = broker.consume_n(
        &topic,
        &(0..PARTITIONS).collect::<Vec<_>>(),
        n,
        Duration::from_secs(60),
    );
    let mut keys: Vec<_> = records.iter().map(|r| r.key.clone().unwrap()).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), n, "distinct keys read back");
}

fn batch(pid: i64, epoch: i16, seq: i32, n: usize, tag: &str) -> bytes::Bytes {
    let recs: Vec<RawRecord> = (0..n)
        .map(|i| {
            RawRecord::new(
                format!("{tag}-{i}"),
                format!("value-{tag}-{i}"),
                strata_tests::now_ms(),
            )
        })
        .collect();
    encode_batch(
        &recs,
        Compression::None,
        Some(Idempotence {
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
        }),
    )
}

#[test]
fn a_resent_idempotent_batch_gets_the_same_offset_and_is_not_appended_again() {
    let broker = Broker::start_default();
    let topic = unique_topic("idem-raw");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let (pid, epoch) = conn.init_producer_id().unwrap();
    assert!(pid >= 0, "producer id {pid}");

    let first = batch(pid, epoch, 0, 3, "a");
    let p = conn.produce(&topic, 0, first.clone()).unwrap();
    assert_eq!((p.error_code, p.base_offset), (0, 0), "first send");
    let second = batch(pid, epoch, 3, 2, "b");
    assert_eq!(
        conn.produce_ok(&topic, 0, second.clone()).unwrap(),
        3,
        "second batch"
    );
    assert_eq!(
        conn.list_offset(&topic, 0, -1).unwrap().1,
        5,
        "log end after two batches"
    );

    // The same bytes again, as a producer does after a lost ack.
    let p = conn.produce(&topic, 0, second).unwrap();
    assert_eq!(p.error_code, 0, "duplicate of the latest batch: error code");
    assert_eq!(
        p.base_offset, 3,
        "duplicate of the latest batch: base offset"
    );
    let p = conn.produce(&topic, 0, first).unwrap();
    assert_eq!(p.error_code, 0, "duplicate of an older batch: error code");
    assert_eq!(p.base_offset, 0, "duplicate of an older batch: base offset");
    assert_eq!(
        conn.list_offset(&topic, 0, -1).unwrap().1,
        5,
        "log end after duplicates"
    );

    // The next sequence still goes through.
    assert_eq!(
        conn.produce_ok(&topic, 0, batch(pid, epoch, 5, 1, "c"))
            .unwrap(),
        5
    );
    let got = broker.consume_n(&topic, &[0], 6, Duration::from_secs(30));
    let keys: Vec<String> = got
        .iter()
        .map(|r| String::from_utf8(r.key.clone().unwrap()).unwrap())
        .collect();
    assert_eq!(keys, ["a-0", "a-1", "a-2", "b-0", "b-1", "c-0"]);
}

#[test]
fn a_gap_in_idempotent_sequence_numbers_is_out_of_order_sequence() {
    let broker = Broker::start_default();
    let topic = unique_topic("idem-gap");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let (pid, epoch) = conn.init_producer_id().unwrap();
    assert_eq!(
        conn.produce_ok(&topic, 0, batch(pid, epoch, 0, 3, "a"))
            .unwrap(),
        0
    );

    // Expected next sequence is 3; 10 leaves a gap.
    let p = conn
        .produce(&topic, 0, batch(pid, epoch, 10, 2, "gap"))
        .unwrap();
    assert_eq!(
        p.error_code,
        error::OUT_OF_ORDER_SEQUENCE_NUMBER,
        "produce with a sequence gap"
    );
    assert_eq!(
        conn.list_offset(&topic, 0, -1).unwrap().1,
        3,
        "log end after the refused batch"
    );

    // The right sequence is still accepted on the same connection.
    assert_eq!(
        conn.produce_ok(&topic, 0, batch(pid, epoch, 3, 2, "b"))
            .unwrap(),
        3
    );
    assert_eq!(conn.list_offset(&topic, 0, -1).unwrap().1, 5);
}
