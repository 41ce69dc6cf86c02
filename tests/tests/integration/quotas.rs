//! Client quotas with real clients: a producer and a consumer over their byte-rate quotas are
//! held to them and told to back off (`throttle_time_ms`, which librdkafka honours), a client
//! that ignores the hint is held by its muted connection, request-time quotas throttle a
//! chatty client, and bystanders without a quota are not slowed. Quotas are set and read with
//! `strata quota`; bad alterations are refused.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::{AlterClientQuotasRequest, MetadataRequest, ProduceRequest};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::statistics::Statistics;
use rdkafka::{ClientContext, TopicPartitionList};
use strata_tests::raw::PRODUCE_VERSION;
use strata_tests::{encode_batch, unique_topic, Broker, BrokerOpts, KafkaConn, RawRecord};

const INVALID_REQUEST: i16 = 42;

/// A shorter burst than Kafka's 10 s (`quota_window_num − 1` windows of 1 s), so that what a
/// quota allows before it bites is small next to what the tests measure.
fn broker() -> Broker {
    Broker::start(BrokerOpts::new().env("STRATA_QUOTA_WINDOW_NUM", 3))
}

/// One encoded batch of `n` records of `size` bytes.
fn batch(n: usize, size: usize) -> Bytes {
    let value = vec![b'q'; size];
    let records: Vec<RawRecord> = (0..n)
        .map(|i| RawRecord::new(format!("k{i}"), value.clone(), strata_tests::now_ms()))
        .collect();
    encode_batch(&records, Compression::None, None)
}

/// Produces `records` over and over for `run`, sending each request `pause` after the last one
/// was answered (ignoring any throttle hint); returns (seconds since start, bytes acked) per
/// answer and the largest throttle_time_ms seen.
fn produce_for(
    conn: &mut KafkaConn,
    topic: &str,
    records: &Bytes,
    run: Duration,
    pause: Duration,
) -> (Vec<(f64, usize)>, i32) {
    let start = Instant::now();
    let (mut acked, mut max_throttle) = (Vec::new(), 0);
    while start.elapsed() < run {
        let req: ProduceRequest = KafkaConn::produce_request(topic, 0, records.clone(), 30_000);
        let resp = conn.request(PRODUCE_VERSION, &req).expect("produce");
        let code = resp.responses[0].partition_responses[0].error_code;
        assert_eq!(code, 0, "produce refused");
        max_throttle = max_throttle.max(resp.throttle_time_ms);
        acked.push((start.elapsed().as_secs_f64(), records.len()));
        std::thread::sleep(pause);
    }
    (acked, max_throttle)
}

/// Bytes per second acked between `from` and `to` seconds.
fn rate_between(acked: &[(f64, usize)], from: f64, to: f64) -> f64 {
    let bytes: usize = (acked.iter())
        .filter(|(t, _)| *t > from && *t <= to)
        .map(|(_, b)| b)
        .sum();
    bytes as f64 / (to - from)
}

#[test]
fn a_producer_over_its_quota_is_held_to_it_and_told_while_a_bystander_is_not_slowed() {
    let broker = broker();
    let topic = unique_topic("quota-produce");
    broker.create_topic(&topic, 1, &[]).unwrap();
    const QUOTA: f64 = 256.0 * 1024.0;
    broker.cli_ok(&[
        "quota",
        "alter",
        "--client-id",
        "greedy",
        "--add",
        "producer_byte_rate=262144",
    ]);
    let described = broker.cli_ok(&["quota", "describe", "--client-id", "greedy"]);
    assert_eq!(
        described.trim(),
        "client-id=greedy\tproducer_byte_rate=262144"
    );

    let records = batch(32, 1000);
    let run = Duration::from_secs(14);
    let bystander = {
        let (topic, records) = (topic.clone(), records.clone());
        let addr = broker.kafka_addr.clone();
        std::thread::spawn(move || {
            let mut conn = KafkaConn::connect(&addr)
                .unwrap()
                .with_client_id("bystander");
            // Paced, so it does not fill the disk: 1.6 MB/s, six times the greedy quota.
            produce_for(&mut conn, &topic, &records, run, Duration::from_millis(20))
        })
    };
    let mut greedy = KafkaConn::connect(&broker.kafka_addr)
        .unwrap()
        .with_client_id("greedy");
    let (acked, max_throttle) = produce_for(&mut greedy, &topic, &records, run, Duration::ZERO);
    let (bystander_acked, bystander_throttle) = bystander.join().unwrap();

    // After the burst the window allows, the greedy client gets its quota and no more,
    // though it never waited out a throttle itself: its muted connection made it wait.
    let steady = rate_between(&acked, 4.0, 14.0);
    eprintln!("producer: {steady:.0} B/s against a quota of {QUOTA} B/s");
    assert!(
        (QUOTA * 0.6..=QUOTA * 1.1).contains(&steady),
        "greedy produced {steady:.0} B/s against a quota of {QUOTA} B/s"
    );
    assert!(
        max_throttle > 0,
        "the greedy client was never told to back off"
    );
    assert_eq!(bystander_throttle, 0, "the bystander was throttled");
    let bystander_rate = rate_between(&bystander_acked, 4.0, 14.0);
    assert!(
        bystander_rate > 4.0 * QUOTA,
        "the bystander produced only {bystander_rate:.0} B/s"
    );

    let metrics = broker.metrics();
    let greedy_series = |name: &str| {
        strata_tests::parse_prometheus(&metrics)
            .into_iter()
            .filter(|s| s.name == name && s.label("client_id") == Some("greedy"))
            .map(|s| s.value)
            .sum::<f64>()
    };
    assert!(greedy_series("strata_client_quota_throttle_seconds_total") > 1.0);
    assert_eq!(greedy_series("strata_client_quota_limit"), QUOTA);
    assert!(
        !metrics.contains("client_id=\"bystander\""),
        "a client without a quota has quota metrics"
    );

    // Removing the quota frees the client at once (its next request is not charged).
    broker.cli_ok(&[
        "quota",
        "alter",
        "--client-id",
        "greedy",
        "--delete",
        "producer_byte_rate",
    ]);
    assert_eq!(broker.cli_ok(&["quota", "describe"]).trim(), "");
    // The connection's last mute may still run: its next request waits it out, and no
    // response is throttled any more.
    let one_second = Duration::from_secs(1);
    let (_, throttle) = produce_for(&mut greedy, &topic, &records, one_second, Duration::ZERO);
    assert_eq!(throttle, 0);
}

/// librdkafka's statistics: the largest throttle time any broker reported.
#[derive(Default, Clone)]
struct ThrottleSeen(Arc<Mutex<i64>>);

impl ClientContext for ThrottleSeen {
    fn stats(&self, stats: Statistics) {
        let max = (stats.brokers.values())
            .filter_map(|b| b.throttle.as_ref().map(|w| w.max))
            .max()
            .unwrap_or(0);
        let mut seen = self.0.lock().unwrap();
        *seen = (*seen).max(max);
    }
}

impl rdkafka::consumer::ConsumerContext for ThrottleSeen {}

#[test]
fn librdkafka_consumers_over_their_quota_are_throttled_and_chatty_clients_by_request_time() {
    let broker = broker();
    let topic = unique_topic("quota-consume");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let mut filler = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let records = batch(250, 1000);
    for _ in 0..48 {
        filler.produce_ok(&topic, 0, records.clone()).unwrap();
    }
    const QUOTA: f64 = 512.0 * 1024.0;
    // The quota of every user's client "slow-reader" (default user, named client id).
    broker.cli_ok(&[
        "quota",
        "alter",
        "--user-default",
        "--client-id",
        "slow-reader",
        "--add",
        "consumer_byte_rate=524288",
    ]);

    let seen = ThrottleSeen::default();
    let consumer: BaseConsumer<ThrottleSeen> = broker
        .consumer_config()
        .set("client.id", "slow-reader")
        .set("statistics.interval.ms", "500")
        .create_with_context(seen.clone())
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, rdkafka::Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let start = Instant::now();
    let mut read = Vec::new();
    while start.elapsed() < Duration::from_secs(13) {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m.expect("consume");
            read.push((start.elapsed().as_secs_f64(), m.payload_len()));
        }
    }
    let first = read.first().expect("nothing consumed").0;
    let steady = rate_between(&read, first + 3.0, first + 12.0);
    eprintln!("consumer: {steady:.0} B/s against a quota of {QUOTA} B/s");
    assert!(
        (QUOTA * 0.5..=QUOTA * 1.1).contains(&steady),
        "the consumer read {steady:.0} B/s against a quota of {QUOTA} B/s"
    );
    assert!(*seen.0.lock().unwrap() > 0, "librdkafka saw no throttle");
    // A consumer with another client id reads at full speed.
    let free: BaseConsumer = broker
        .consumer_config()
        .set("client.id", "free-reader")
        .create()
        .unwrap();
    free.assign(&tpl).unwrap();
    let (start, mut n) = (Instant::now(), 0);
    while n < 12_000 && start.elapsed() < Duration::from_secs(60) {
        if let Some(m) = free.poll(Duration::from_millis(100)) {
            m.expect("consume");
            n += 1;
        }
    }
    assert_eq!(
        n, 12_000,
        "the unthrottled consumer did not read everything"
    );

    // A request-time quota: a client sending Metadata requests back to back is told to back
    // off once its requests took more than 0.1 % of a thread.
    broker.cli_ok(&[
        "quota",
        "alter",
        "--client-id",
        "chatty",
        "--add",
        "request_percentage=0.1",
    ]);
    let mut chatty = KafkaConn::connect(&broker.kafka_addr)
        .unwrap()
        .with_client_id("chatty");
    let deadline = Instant::now() + Duration::from_secs(30);
    let throttled = loop {
        let resp = chatty.request(12, &MetadataRequest::default()).unwrap();
        if resp.throttle_time_ms > 0 || Instant::now() > deadline {
            break resp.throttle_time_ms;
        }
    };
    assert!(throttled > 0, "the chatty client was never throttled");
}

#[test]
fn bad_quota_alterations_are_refused_and_change_nothing() {
    let mut broker = broker();
    let refused = |args: &[&str]| {
        let out = broker.cli(args);
        assert!(!out.status.success(), "strata {args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = refused(&[
        "quota",
        "alter",
        "--user",
        "alice",
        "--add",
        "producer_byte_rate=1.5",
    ]);
    assert!(e.contains("whole number") && e.contains("error 42"), "{e}");
    let e = refused(&[
        "quota",
        "alter",
        "--user",
        "alice",
        "--add",
        "request_percentage=-3",
    ]);
    assert!(e.contains("positive"), "{e}");
    let e = refused(&["quota", "alter", "--user", "alice", "--add", "bogus_rate=3"]);
    assert!(e.contains("unknown quota"), "{e}");
    let e = refused(&["quota", "alter", "--add", "producer_byte_rate=3"]);
    assert!(e.contains("name the entity"), "{e}");

    // What the CLI cannot send, a raw client can: each entry is refused on its own, and the
    // valid one beside them is applied.
    let entity = |kind: &str, name: Option<&str>| {
        EntityData::default()
            .with_entity_type(StrBytes::from_string(kind.into()))
            .with_entity_name(name.map(|n| StrBytes::from_string(n.into())))
    };
    let op = |key: &str, value: f64| {
        OpData::default()
            .with_key(StrBytes::from_string(key.into()))
            .with_value(value)
    };
    let entry = |entity: Vec<EntityData>, ops: Vec<OpData>| {
        EntryData::default().with_entity(entity).with_ops(ops)
    };
    let req = AlterClientQuotasRequest::default().with_entries(vec![
        entry(
            vec![entity("ip", Some("10.0.0.1"))],
            vec![op("connection_creation_rate", 5.0)],
        ),
        entry(
            vec![entity("user", None), entity("user", Some("x"))],
            vec![op("producer_byte_rate", 5.0)],
        ),
        entry(
            vec![entity("client-id", Some("app"))],
            vec![op("controller_mutation_rate", 5.0)],
        ),
        entry(
            vec![entity("client-id", Some("app"))],
            vec![op("producer_byte_rate", 5.0), op("producer_byte_rate", 6.0)],
        ),
        entry(vec![], vec![op("producer_byte_rate", 5.0)]),
        entry(
            vec![entity("client-id", Some("ok"))],
            vec![op("producer_byte_rate", 1024.0)],
        ),
    ]);
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let resp = conn.request(1, &req).unwrap();
    let codes: Vec<i16> = resp.entries.iter().map(|e| e.error_code).collect();
    assert_eq!(
        codes,
        [
            INVALID_REQUEST,
            INVALID_REQUEST,
            INVALID_REQUEST,
            INVALID_REQUEST,
            INVALID_REQUEST,
            0
        ]
    );
    assert_eq!(
        broker.cli_ok(&["quota", "describe"]).trim(),
        "client-id=ok\tproducer_byte_rate=1024"
    );
    broker.assert_running();
}
