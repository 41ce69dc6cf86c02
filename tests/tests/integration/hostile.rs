//! Hostile input on every port of a running node: the exact frames that used to abort the
//! process, then thousands of random and mutated frames to the Kafka, raft and admin ports.
//! Afterwards every record acknowledged before and during the storm is still there, byte for
//! byte, the node serves new clients, and no request panicked.

use std::path::PathBuf;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader};
use rdkafka::admin::{
    AdminOptions, AlterConfig, NewPartitions, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::Offset;
use strata_tests::raw::request_header;
use strata_tests::{
    block_on, unique_topic, Broker, BrokerOpts, CaptureProxy, KafkaConn, Rng, TrackingProducer,
};

/// A frame with a valid header for `api`/`version` and `body` after it.
fn with_header(api: i16, version: i16, body: &[u8]) -> Vec<u8> {
    let mut b = request_header(api, version, 7, "hostile");
    b.extend_from_slice(body);
    b.to_vec()
}

/// Up to `max` random bytes.
fn noise(rng: &mut Rng, max: u64) -> Vec<u8> {
    let n = rng.below(max) as usize;
    rng.bytes(n)
}

fn framed(payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes().to_vec();
    f.extend_from_slice(payload);
    f
}

/// Sends `bytes`, half-closes, and waits (briefly) for the peer to answer or close: the
/// bytes were read, whatever the peer made of them.
fn send_and_drain(addr: &str, bytes: &[u8]) {
    let Ok(mut conn) = KafkaConn::connect(addr) else {
        return;
    };
    let _ = conn.send_bytes(bytes);
    conn.shutdown_write();
    let _ = conn.closed_within(Duration::from_millis(400));
}

/// The API keys and version ranges the broker advertises.
fn advertised(broker: &Broker) -> Vec<(i16, i16, i16)> {
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let resp: ApiVersionsResponse = conn.request(3, &ApiVersionsRequest::default()).unwrap();
    resp.api_keys
        .iter()
        .map(|k| (k.api_key, k.min_version, k.max_version))
        .collect()
}

/// One Kafka-port payload from a mix of strategies, seeded by real frames.
fn hostile_kafka_payload(rng: &mut Rng, real: &[Bytes], apis: &[(i16, i16, i16)]) -> Vec<u8> {
    let huge_i32 = [0x7f, 0xff, 0xff, 0xff];
    let huge_varint = [0xff, 0xff, 0xff, 0xff, 0x0f];
    match rng.below(8) {
        // Random bytes, framed or not.
        0 => {
            let b = noise(rng, 300);
            if rng.below(2) == 0 {
                framed(&b)
            } else {
                b
            }
        }
        // An absurd length prefix, then a little.
        1 => {
            let mut b = (rng.next_u64() as u32 | 0x0100_0000).to_be_bytes().to_vec();
            b.extend(noise(rng, 64));
            b
        }
        // A valid header of a supported API and version, random body.
        2 => {
            let (key, min, max) = apis[rng.below(apis.len() as u64) as usize];
            let v = min + rng.below((max - min + 1) as u64) as i16;
            framed(&with_header(key, v, &noise(rng, 200)))
        }
        // A valid header of any API key, any version.
        3 => {
            let key = rng.below(80) as i16;
            let v = rng.below(20) as i16;
            framed(&with_header(key, v, &noise(rng, 64)))
        }
        // A real request with bytes flipped.
        4 => {
            let mut f = real[rng.below(real.len() as u64) as usize].to_vec();
            for _ in 0..1 + rng.below(8) {
                if f.len() > 8 {
                    let at = 8 + rng.below(f.len() as u64 - 8) as usize;
                    f[at] = rng.next_u64() as u8;
                }
            }
            framed(&f)
        }
        // A real request with a huge count or length written over it somewhere.
        5 => {
            let mut f = real[rng.below(real.len() as u64) as usize].to_vec();
            if f.len() > 9 {
                let at = 8 + rng.below(f.len() as u64 - 9) as usize;
                let patch: &[u8] = if rng.below(2) == 0 {
                    &huge_i32
                } else {
                    &huge_varint
                };
                let end = (at + patch.len()).min(f.len());
                f.splice(at..end, patch.iter().copied());
            }
            framed(&f)
        }
        // A real request cut short, with its length still claiming the whole.
        6 => {
            let f = &real[rng.below(real.len() as u64) as usize];
            let mut b = (f.len() as u32).to_be_bytes().to_vec();
            b.extend_from_slice(&f[..rng.below(f.len() as u64) as usize]);
            b
        }
        // A real request truncated, framed to its new length.
        _ => {
            let f = &real[rng.below(real.len() as u64) as usize];
            framed(&f[..rng.below(f.len() as u64 + 1) as usize])
        }
    }
}

/// One of `templates` with up to `flips - 1` bytes replaced at random.
fn mutated(rng: &mut Rng, templates: &[&str], flips: u64) -> Vec<u8> {
    let mut t = templates[rng.below(templates.len() as u64) as usize]
        .as_bytes()
        .to_vec();
    for _ in 0..rng.below(flips) {
        let at = rng.below(t.len() as u64) as usize;
        t[at] = rng.next_u64() as u8;
    }
    t
}

fn hostile_raft_payload(rng: &mut Rng) -> Vec<u8> {
    const TEMPLATES: &[&str] = &[
        r#"{"quorum":null,"request":"ReadIndex"}"#,
        r#"{"quorum":"not-this-one","request":{"Vote":{"vote":{"leader_id":{"term":9,"node_id":7},"committed":false},"last_log_id":null}}}"#,
        r#"{"quorum":"x","request":{"Heartbeat":{"node_id":5,"epoch":1}}}"#,
        r#"{"quorum":null,"request":{"AppendEntries":{"vote":{"leader_id":{"term":1,"node_id":1},"committed":true},"prev_log_id":null,"entries":[],"leader_commit":null}}}"#,
        r#"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]"#,
    ];
    match rng.below(4) {
        0 => noise(rng, 200),
        1 => {
            // A length far past what follows (up to the 64 MiB frame limit and beyond).
            let mut b = (rng.next_u64() as u32).to_be_bytes().to_vec();
            b.extend(noise(rng, 32));
            b
        }
        _ => framed(&mutated(rng, TEMPLATES, 4)),
    }
}

fn hostile_admin_payload(rng: &mut Rng) -> Vec<u8> {
    const TEMPLATES: &[&str] = &[
        "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /v1/partitions?topic=zz HTTP/1.1\r\nHost: a\r\n\r\n",
        "GET /v1/cluster/voters?add=1 HTTP/1.1\r\nHost: a\r\n\r\n",
        "PUT /readyz HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\nabc",
        "GET /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n",
    ];
    match rng.below(4) {
        0 => noise(rng, 400),
        1 => {
            // A header line of 64 KiB to 1 MiB.
            let mut b = b"GET /metrics HTTP/1.1\r\nX-Long: ".to_vec();
            b.extend(std::iter::repeat_n(
                b'a',
                (64 << 10) + rng.below(1 << 20) as usize,
            ));
            b
        }
        _ => mutated(rng, TEMPLATES, 3),
    }
}

/// Real client traffic through a capturing proxy: an idempotent acks=all producer, a group
/// consumer that commits, admin operations. Returns the acknowledged records of `topic`.
fn real_traffic(
    broker: &Broker,
    proxy: &CaptureProxy,
    topic: &str,
) -> Vec<(i32, i64, Vec<u8>, Vec<u8>)> {
    let mut base = broker.client_config();
    base.set("bootstrap.servers", &proxy.addr);
    let admin: rdkafka::admin::AdminClient<_> = base.create().expect("admin");
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let scratch = unique_topic("hostile-scratch");
    let topics = [
        NewTopic::new(topic, 3, TopicReplication::Fixed(1)),
        NewTopic::new(&scratch, 1, TopicReplication::Fixed(1)).set("cleanup.policy", "compact"),
    ];
    for r in block_on(admin.create_topics(&topics, &opts)).expect("create topics") {
        r.expect("topic created");
    }
    let _ = block_on(admin.describe_configs(
        [
            &ResourceSpecifier::Topic(&scratch),
            &ResourceSpecifier::Broker(1),
        ],
        &opts,
    ));
    let _ = block_on(admin.alter_configs(
        [&AlterConfig::new(ResourceSpecifier::Topic(&scratch)).set("retention.ms", "3600000")],
        &opts,
    ));
    let _ = block_on(admin.create_partitions([&NewPartitions::new(&scratch, 2)], &opts));

    let mut producer_cfg = base.clone();
    producer_cfg
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("compression.type", "lz4")
        .set("linger.ms", "5");
    let producer = TrackingProducer::new(&producer_cfg);
    let mut sent = Vec::new();
    for i in 0..3000usize {
        let key = format!("key-{i}").into_bytes();
        let value = format!("value-{i}-{}", "x".repeat(i % 50)).into_bytes();
        producer.send(i, topic, None, &key, &value, &[], None);
        sent.push((key, value));
    }
    for i in 0..20usize {
        producer.send(
            3000 + i,
            &scratch,
            None,
            format!("k{i}").as_bytes(),
            b"v",
            &[],
            None,
        );
    }
    producer.flush(Duration::from_secs(60));
    let delivered = producer.all_delivered(3020);

    let mut consumer_cfg = base.clone();
    consumer_cfg
        .set("group.id", unique_topic("hostile-group"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false");
    let consumer: BaseConsumer = consumer_cfg.create().expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = 0;
    while seen < 3000 && Instant::now() < deadline {
        if let Some(Ok(_)) = consumer.poll(Duration::from_millis(100)) {
            seen += 1;
        }
    }
    assert_eq!(seen, 3000, "records consumed through the proxy");
    consumer
        .commit_consumer_state(CommitMode::Sync)
        .expect("commit");
    let _ = consumer.fetch_watermarks(topic, 0, Duration::from_secs(5));
    drop(consumer);

    sent.into_iter()
        .zip(delivered)
        .map(|((k, v), (p, o))| (p, o, k, v))
        .collect()
}

/// The `records` of every captured Produce request, as the batch fuzz target's seeds.
fn write_batch_corpus(frames: &[Bytes], dir: &std::path::Path) -> usize {
    use kafka_protocol::messages::ProduceRequest;
    use kafka_protocol::protocol::Decodable;
    std::fs::create_dir_all(dir).expect("corpus dir");
    let mut n = 0;
    for f in frames.iter().filter(|f| f.len() > 4 && f[..2] == [0, 0]) {
        let version = i16::from_be_bytes([f[2], f[3]]);
        let mut buf = f.clone();
        let Ok(_) =
            RequestHeader::decode(&mut buf, ApiKey::Produce.request_header_version(version))
        else {
            continue;
        };
        let Ok(req) = ProduceRequest::decode(&mut buf, version) else {
            continue;
        };
        for records in req
            .topic_data
            .iter()
            .flat_map(|t| &t.partition_data)
            .filter_map(|p| p.records.as_ref())
        {
            std::fs::write(dir.join(format!("produce-{n}.bin")), records).expect("write seed");
            n += 1;
        }
    }
    n
}

#[test]
fn thousands_of_hostile_frames_on_every_port_lose_nothing() {
    let proxy = CaptureProxy::start();
    let mut broker = Broker::start(BrokerOpts::new().advertised_kafka_addr(&proxy.addr));
    proxy.set_target(&broker.kafka_addr);
    let topic = unique_topic("hostile-kept");
    let acked = real_traffic(&broker, &proxy, &topic);
    let real = proxy.frames();
    let apis = advertised(&broker);
    assert!(
        proxy.apis().len() >= 12,
        "real traffic covered only {:?}",
        proxy.apis()
    );
    // The fuzzers' seed corpus (scripts/fuzz.sh sets this).
    if let Some(dir) = std::env::var_os("STRATA_FUZZ_CORPUS") {
        let dir = PathBuf::from(dir);
        let n = proxy
            .write_corpus(&dir.join("request"))
            .expect("write corpus");
        let b = write_batch_corpus(&real, &dir.join("batch"));
        eprintln!("wrote {n} request frames and {b} record batches to the fuzz corpus");
    }

    let real = Arc::new(real);
    let apis = Arc::new(apis);
    // A well-behaved producer carries on through the storm.
    let meanwhile = {
        let cfg = broker.producer_config();
        let topic = topic.clone();
        thread::spawn(move || {
            let producer = TrackingProducer::new(&cfg);
            let mut sent = Vec::new();
            for i in 0..1000usize {
                let (key, value) = (format!("during-{i}").into_bytes(), vec![b'd'; i % 300]);
                producer.send(i, &topic, None, &key, &value, &[], None);
                sent.push((key, value));
                thread::sleep(Duration::from_millis(2));
            }
            producer.flush(Duration::from_secs(60));
            let delivered = producer.all_delivered(1000);
            sent.into_iter()
                .zip(delivered)
                .map(|((k, v), (p, o))| (p, o, k, v))
                .collect::<Vec<_>>()
        })
    };
    let started = Instant::now();
    let mut workers = Vec::new();
    for t in 0..6u64 {
        let (kafka, raft, admin) = (
            broker.kafka_addr.clone(),
            broker.raft_addr.clone(),
            broker.admin_addr.clone(),
        );
        let (real, apis) = (real.clone(), apis.clone());
        workers.push(thread::spawn(move || {
            let mut rng = Rng::new(1000 + t);
            let mut sent = [0usize; 3];
            for i in 0..2500 {
                match i % 10 {
                    0 => {
                        send_and_drain(&raft, &hostile_raft_payload(&mut rng));
                        sent[1] += 1;
                    }
                    1 => {
                        send_and_drain(&admin, &hostile_admin_payload(&mut rng));
                        sent[2] += 1;
                    }
                    _ => {
                        // Up to three frames on one connection.
                        let mut b = Vec::new();
                        for _ in 0..1 + rng.below(3) {
                            b.extend(hostile_kafka_payload(&mut rng, &real, &apis));
                        }
                        send_and_drain(&kafka, &b);
                        sent[0] += 1;
                    }
                }
            }
            sent
        }));
    }
    let mut totals = [0usize; 3];
    for w in workers {
        let s = w.join().expect("storm worker");
        for (total, n) in totals.iter_mut().zip(s) {
            *total += n;
        }
    }
    eprintln!(
        "sent {} Kafka, {} raft and {} admin connections of hostile bytes in {:?}",
        totals[0],
        totals[1],
        totals[2],
        started.elapsed()
    );
    let mut acked = acked;
    acked.extend(meanwhile.join().expect("the producer beside the storm"));
    broker.assert_running();
    assert!(
        broker.metric("strata_bad_requests_total") > 500.0,
        "bad requests counted: {}",
        broker.metric("strata_bad_requests_total")
    );
    assert_eq!(
        broker.metric("strata_panics_total"),
        0.0,
        "a request panicked (a bug, even though the broker survived it):\n{}",
        broker.output()
    );

    // Every acknowledged record is still there, at its offset, byte for byte.
    for p in 0..3 {
        let mut want: Vec<_> = acked.iter().filter(|r| r.0 == p).collect();
        want.sort_by_key(|r| r.1);
        let got = broker.consume_until(
            &topic,
            &[(p, Offset::Offset(0))],
            Duration::from_secs(60),
            |r| {
                r.iter()
                    .filter(|r| r.offset <= want.last().map_or(-1, |w| w.1))
                    .count()
                    >= want.len()
            },
        );
        for w in &want {
            let r = got
                .iter()
                .find(|r| r.offset == w.1)
                .unwrap_or_else(|| panic!("acknowledged {topic}-{p}@{} is gone", w.1));
            assert_eq!(r.key.as_deref(), Some(&w.2[..]), "key at {p}@{}", w.1);
            assert_eq!(r.value.as_deref(), Some(&w.3[..]), "value at {p}@{}", w.1);
        }
    }
    broker.assert_serves_new_clients();
}

#[test]
fn huge_declared_counts_are_refused() {
    // The frame of the report (CreateTopics v4, 2^31-1 topics, a few bytes) used to make the
    // broker abort with "memory allocation of 189212250336 bytes failed". Now: that connection
    // closes, and the same pattern at every position of every supported request does too.
    let mut broker = Broker::start_default();
    let mut body = vec![0x7f, 0xff, 0xff, 0xff];
    body.extend_from_slice(&[0, 1, b'x', 0, 0, 0, 1]);
    send_and_drain(&broker.kafka_addr, &framed(&with_header(19, 4, &body)));
    broker.assert_running();
    for (key, min, max) in advertised(&broker) {
        for v in min..=max {
            for body in [
                vec![0x7f, 0xff, 0xff, 0xff, 1, 2, 3],
                vec![0xff, 0xff, 0xff, 0xff, 0x0f, 1, 2, 3],
                vec![0, 0, 0x7f, 0xff, 0xff, 0xff, 1, 2],
                vec![0, 0x7f, 0xff, 0xff, 0xff, 1, 2],
                vec![1, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 2],
                vec![0, 0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 1],
            ] {
                send_and_drain(&broker.kafka_addr, &framed(&with_header(key, v, &body)));
            }
        }
    }
    broker.assert_running();
    assert_eq!(broker.metric("strata_panics_total"), 0.0);
    broker.assert_serves_new_clients();
}
