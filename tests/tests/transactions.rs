//! Transactions with a real client (librdkafka through `rdkafka`): what read_committed
//! consumers see of committed, aborted and open transactions; consume-transform-produce with
//! offsets committed in the transaction; zombie fencing; the coordinator aborting a
//! transaction past its timeout; a broker killed mid-transaction; and, with raw frames, the
//! bad input Kafka refuses with its error codes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, EndTxnRequest, FindCoordinatorRequest, InitProducerIdRequest,
    ProducerId, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use strata_tests::raw::error;
use strata_tests::{
    http_get, parse_prometheus, unique_topic, wait_for, Broker, BrokerOpts, Cluster, KafkaConn,
};

const TIMEOUT: Duration = Duration::from_secs(30);

fn txn_producer(cfg: &ClientConfig, id: &str, timeout_ms: u64) -> BaseProducer {
    let mut cfg = cfg.clone();
    cfg.set("transactional.id", id)
        .set("transaction.timeout.ms", timeout_ms.to_string())
        .set("socket.timeout.ms", timeout_ms.min(30_000).to_string())
        .set("linger.ms", "5")
        .set("message.timeout.ms", timeout_ms.min(30_000).to_string());
    let p: BaseProducer = cfg.create().expect("create transactional producer");
    p.init_transactions(TIMEOUT).expect("init_transactions");
    p
}

fn send(p: &BaseProducer, topic: &str, partition: i32, value: &str) {
    let mut record = BaseRecord::<str, str>::to(topic)
        .partition(partition)
        .key(value)
        .payload(value);
    loop {
        match p.send(record) {
            Ok(()) => return,
            Err((KafkaError::MessageProduction(_), r)) => {
                record = r;
                p.poll(Duration::from_millis(10));
            }
            Err((e, _)) => panic!("send {value}: {e}"),
        }
    }
}

/// Every value readable by a consumer of `isolation` in `partitions` of `topic`, from the
/// start to the end it can see (the last stable offset for read_committed).
fn read_all(cfg: &ClientConfig, topic: &str, partitions: i32, isolation: &str) -> Vec<String> {
    let mut cfg = cfg.clone();
    cfg.set("group.id", unique_topic("txn-reader"))
        .set("isolation.level", isolation)
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "50");
    let c: BaseConsumer = cfg.create().expect("create consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let mut at_end = std::collections::BTreeSet::new();
    let deadline = Instant::now() + TIMEOUT;
    while at_end.len() < partitions as usize {
        assert!(
            Instant::now() < deadline,
            "{topic}: no end after {TIMEOUT:?}; read {out:?}"
        );
        match c.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(m)) => {
                at_end.remove(&m.partition());
                out.push(String::from_utf8(m.payload().unwrap_or_default().to_vec()).unwrap());
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            Some(Err(e)) => panic!("consume {topic}: {e}"),
        }
    }
    out
}

/// The highest offset a consumer of `isolation` sees in a partition (ListOffsets LATEST).
fn end_offset(cfg: &ClientConfig, topic: &str, partition: i32, isolation: &str) -> i64 {
    let mut cfg = cfg.clone();
    cfg.set("group.id", unique_topic("txn-offsets"))
        .set("isolation.level", isolation);
    let c: BaseConsumer = cfg.create().unwrap();
    c.fetch_watermarks(topic, partition, TIMEOUT).unwrap().1
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn values(prefix: &str, n: usize) -> Vec<String> {
    sorted((0..n).map(|i| format!("{prefix}-{i:03}")).collect())
}

#[test]
fn read_committed_sees_committed_transactions_once_never_aborted_ones_and_stops_at_an_open_one() {
    let broker = Broker::start_default();
    let topic = unique_topic("txn-visibility");
    broker.create_topic(&topic, 3, &[]).unwrap();
    let cfg = broker.client_config();
    let p = txn_producer(&cfg, &unique_topic("txn-vis"), 30_000);
    for (prefix, commit) in [("c1", true), ("ab", false), ("c2", true)] {
        p.begin_transaction().unwrap();
        for i in 0..30 {
            send(&p, &topic, i % 3, &format!("{prefix}-{i:03}"));
        }
        p.flush(TIMEOUT).unwrap();
        if commit {
            p.commit_transaction(TIMEOUT).unwrap();
        } else {
            p.abort_transaction(TIMEOUT).unwrap();
        }
    }
    let mut committed = values("c1", 30);
    committed.extend(values("c2", 30));
    assert_eq!(
        sorted(read_all(&cfg, &topic, 3, "read_committed")),
        sorted(committed.clone())
    );
    let mut everything = committed.clone();
    everything.extend(values("ab", 30));
    assert_eq!(
        sorted(read_all(&cfg, &topic, 3, "read_uncommitted")),
        sorted(everything)
    );

    // An open transaction holds read_committed readers back at its first record: what others
    // write after it waits too, until it ends.
    let lso = end_offset(&cfg, &topic, 0, "read_committed");
    p.begin_transaction().unwrap();
    send(&p, &topic, 0, "open-000");
    p.flush(TIMEOUT).unwrap();
    let plain: BaseProducer = broker.producer_config().create().unwrap();
    send(&plain, &topic, 0, "after-000");
    plain.flush(TIMEOUT).unwrap();
    assert_eq!(
        end_offset(&cfg, &topic, 0, "read_committed"),
        lso,
        "LSO at the open transaction"
    );
    assert_eq!(end_offset(&cfg, &topic, 0, "read_uncommitted"), lso + 2);
    assert_eq!(
        sorted(read_all(&cfg, &topic, 3, "read_committed")),
        sorted(committed.clone())
    );
    p.commit_transaction(TIMEOUT).unwrap();
    // The marker took an offset too.
    assert_eq!(end_offset(&cfg, &topic, 0, "read_committed"), lso + 3);
    committed.extend(["open-000".to_string(), "after-000".to_string()]);
    assert_eq!(
        sorted(read_all(&cfg, &topic, 3, "read_committed")),
        sorted(committed)
    );

    let metrics = parse_prometheus(&http_get(&broker.admin_addr, "/metrics").unwrap().body);
    let completed = |result: &str| {
        metrics
            .iter()
            .filter(|s| s.name == "strata_txn_completed_total" && s.label("result") == Some(result))
            .map(|s| s.value)
            .sum::<f64>()
    };
    assert_eq!((completed("commit"), completed("abort")), (3.0, 1.0));
}

/// Consume-transform-produce: each input record becomes one output record, and the input
/// offsets are committed in the same transaction. Halfway, the process "dies" mid-transaction
/// (its producer and consumer are abandoned, the producer still alive as a zombie); a new
/// instance with the same transactional id and group takes over. Every input is in the output
/// exactly once, and the zombie can no longer write or commit.
#[test]
fn consume_transform_produce_is_exactly_once_across_a_takeover_and_the_zombie_is_fenced() {
    let broker = Broker::start_default();
    let input = unique_topic("txn-in");
    let output = unique_topic("txn-out");
    broker.create_topic(&input, 2, &[]).unwrap();
    broker.create_topic(&output, 2, &[]).unwrap();
    let plain: BaseProducer = broker.producer_config().create().unwrap();
    for i in 0..200 {
        send(&plain, &input, i % 2, &format!("in-{i:03}"));
    }
    plain.flush(TIMEOUT).unwrap();

    let cfg = broker.client_config();
    let group = unique_topic("txn-group");
    let id = unique_topic("txn-ctp");
    let consumer = |cfg: &ClientConfig| -> BaseConsumer {
        let mut cfg = cfg.clone();
        cfg.set("group.id", &group)
            .set("isolation.level", "read_committed")
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("session.timeout.ms", "6000");
        let c: BaseConsumer = cfg.create().unwrap();
        c.subscribe(&[&input]).unwrap();
        c
    };
    // One transaction: up to `n` records consumed, transformed, offsets committed with them.
    let process = |c: &BaseConsumer, p: &BaseProducer, n: usize, commit: bool| -> usize {
        let mut batch = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while batch.len() < n && Instant::now() < deadline {
            if let Some(m) = c.poll(Duration::from_millis(100)) {
                let m = m.expect("consume input");
                batch.push((m.partition(), m.offset(), m.payload().unwrap().to_vec()));
            }
        }
        if batch.is_empty() {
            return 0;
        }
        p.begin_transaction().unwrap();
        let mut next: BTreeMap<i32, i64> = BTreeMap::new();
        for (partition, offset, value) in &batch {
            let out = String::from_utf8(value.clone())
                .unwrap()
                .replace("in-", "out-");
            send(p, &output, *partition, &out);
            next.insert(*partition, offset + 1);
        }
        let mut offsets = TopicPartitionList::new();
        for (partition, offset) in next {
            offsets
                .add_partition_offset(&input, partition, Offset::Offset(offset))
                .unwrap();
        }
        p.send_offsets_to_transaction(&offsets, &c.group_metadata().unwrap(), TIMEOUT)
            .unwrap();
        if commit {
            p.commit_transaction(TIMEOUT).unwrap();
        } else {
            p.flush(TIMEOUT).unwrap();
        }
        batch.len()
    };

    let c1 = consumer(&cfg);
    let p1 = txn_producer(&cfg, &id, 60_000);
    let mut done = 0;
    while done < 100 {
        done += process(&c1, &p1, 25, true);
    }
    // The instance dies mid-transaction: records written and offsets sent, no commit.
    assert!(process(&c1, &p1, 30, false) > 0);
    drop(c1);
    let p2 = txn_producer(&cfg, &id, 60_000);
    // The zombie is fenced: its commit is refused.
    let zombie = p1.commit_transaction(TIMEOUT);
    assert!(zombie.is_err(), "the fenced producer committed");
    let c2 = consumer(&cfg);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut total = 0;
    while Instant::now() < deadline {
        total += process(&c2, &p2, 25, true);
        let out = read_all(&cfg, &output, 2, "read_committed");
        if out.len() >= 200 {
            break;
        }
    }
    let out = read_all(&cfg, &output, 2, "read_committed");
    assert_eq!(
        sorted(out),
        values("out", 200),
        "every input exactly once (took over after {done}, then {total})"
    );
}

#[test]
fn a_transaction_left_open_is_aborted_after_its_timeout_and_readers_move_on() {
    let broker = Broker::start(BrokerOpts::new().env(
        "STRATA_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS",
        200,
    ));
    let topic = unique_topic("txn-timeout");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let cfg = broker.client_config();
    let p = txn_producer(&cfg, &unique_topic("txn-slow"), 2_000);
    p.begin_transaction().unwrap();
    send(&p, &topic, 0, "stuck-000");
    p.flush(TIMEOUT).unwrap();
    let plain: BaseProducer = broker.producer_config().create().unwrap();
    send(&plain, &topic, 0, "later-000");
    plain.flush(TIMEOUT).unwrap();
    assert_eq!(end_offset(&cfg, &topic, 0, "read_committed"), 0);
    wait_for("the timed-out transaction to be aborted", TIMEOUT, || {
        end_offset(&cfg, &topic, 0, "read_committed") == 3
    });
    assert_eq!(
        read_all(&cfg, &topic, 1, "read_committed"),
        vec!["later-000"]
    );
    // The producer was fenced by the abort's epoch bump.
    assert!(p.commit_transaction(TIMEOUT).is_err());
}

#[test]
fn a_broker_killed_mid_transaction_comes_back_with_its_transactions_and_completes_them() {
    let mut cluster = Cluster::start(1, 1, &[]);
    let topic = unique_topic("txn-crash");
    cluster.create_replicated_topic(&topic, 2, rdkafka::admin::TopicReplication::Fixed(1), &[]);
    let cfg = cluster.with_bootstrap(cluster.member(1).client_config());
    let p = txn_producer(&cfg, &unique_topic("txn-crash"), 60_000);
    p.begin_transaction().unwrap();
    for i in 0..20 {
        send(&p, &topic, i % 2, &format!("c-{i:03}"));
    }
    p.commit_transaction(TIMEOUT).unwrap();
    p.begin_transaction().unwrap();
    for i in 0..20 {
        send(&p, &topic, i % 2, &format!("a-{i:03}"));
    }
    p.flush(TIMEOUT).unwrap();
    p.abort_transaction(TIMEOUT).unwrap();
    p.begin_transaction().unwrap();
    for i in 0..20 {
        send(&p, &topic, i % 2, &format!("o-{i:03}"));
    }
    p.flush(TIMEOUT).unwrap();
    cluster.node(1).kill9();
    cluster.node(1).relaunch();
    cluster.node(1).wait_ready();
    // The coordinator reloads the open transaction; the producer commits it.
    p.commit_transaction(TIMEOUT).unwrap();
    let mut expected = values("c", 20);
    expected.extend(values("o", 20));
    assert_eq!(
        sorted(read_all(&cfg, &topic, 2, "read_committed")),
        sorted(expected)
    );
}

/// A transactional batch (or a control batch) as raw bytes.
fn raw_batch(producer_id: i64, epoch: i16, control: bool) -> bytes::Bytes {
    let record = Record {
        transactional: true,
        control,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id,
        producer_epoch: epoch,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: 0,
        timestamp: 0,
        key: Some(bytes::Bytes::from_static(&[0, 0, 0, 1])),
        value: Some(bytes::Bytes::from_static(&[0, 0, 0, 0, 0, 0])),
        headers: Default::default(),
    };
    let mut buf = bytes::BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        [record].iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    buf.freeze()
}

fn txn_id(id: &str) -> TransactionalId {
    TransactionalId(StrBytes::from_string(id.to_string()))
}

#[test]
fn bad_transactional_input_gets_kafkas_error_codes_and_changes_nothing() {
    let broker = Broker::start_default();
    let topic = unique_topic("txn-bad");
    broker.create_topic(&topic, 1, &[]).unwrap();
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let id = unique_topic("txn-raw");
    // The coordinator exists once asked for.
    let found = conn
        .request(
            3,
            &FindCoordinatorRequest::default()
                .with_key(StrBytes::from_string(id.clone()))
                .with_key_type(1),
        )
        .unwrap();
    assert_eq!(found.error_code, 0);
    // A timeout beyond transaction_max_timeout_ms.
    let init = |conn: &mut KafkaConn, timeout_ms: i32| {
        conn.request(
            3,
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(txn_id(&id)))
                .with_transaction_timeout_ms(timeout_ms)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )
        .unwrap()
    };
    assert_eq!(
        init(&mut conn, 900_001).error_code,
        50,
        "INVALID_TRANSACTION_TIMEOUT"
    );
    let ok = init(&mut conn, 60_000);
    assert_eq!(ok.error_code, 0);
    let (pid, epoch) = (ok.producer_id.0, ok.producer_epoch);

    // A transactional produce to a partition never added to the transaction (KIP-890).
    let mut produce = KafkaConn::produce_request(&topic, 0, raw_batch(pid, epoch, false), 10_000);
    produce.transactional_id = Some(txn_id(&id));
    let resp = conn.request(3, &produce).unwrap();
    let code = resp.responses[0].partition_responses[0].error_code;
    assert_eq!(code, 48, "INVALID_TXN_STATE");
    // Transactional records without the request's transactional id.
    let p = conn
        .produce(&topic, 0, raw_batch(pid, epoch, false))
        .unwrap();
    assert_eq!(p.error_code, error::INVALID_RECORD);
    // A control batch from a client, even inside its transaction.
    let add = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(txn_id(&id))
        .with_v3_and_below_producer_id(ProducerId(pid))
        .with_v3_and_below_producer_epoch(epoch)
        .with_v3_and_below_topics(vec![
            kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                .with_name(strata_tests::raw::topic_name(&topic))
                .with_partitions(vec![0]),
        ]);
    let added = conn.request(3, &add).unwrap();
    assert_eq!(
        added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
        0
    );
    let mut control = KafkaConn::produce_request(&topic, 0, raw_batch(pid, epoch, true), 10_000);
    control.transactional_id = Some(txn_id(&id));
    let resp = conn.request(3, &control).unwrap();
    assert_eq!(
        resp.responses[0].partition_responses[0].error_code,
        error::INVALID_RECORD
    );
    // EndTxn for an unknown id, and for an older epoch.
    let end = |conn: &mut KafkaConn, id: &str, pid: i64, epoch: i16| {
        conn.request(
            3,
            &EndTxnRequest::default()
                .with_transactional_id(txn_id(id))
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_committed(true),
        )
        .unwrap()
        .error_code
    };
    assert_eq!(
        end(&mut conn, &unique_topic("nobody"), pid, epoch),
        49,
        "INVALID_PRODUCER_ID_MAPPING"
    );
    // A new producer: the open transaction is aborted under epoch + 1, then it gets epoch + 2.
    let newer = init(&mut conn, 60_000);
    assert_eq!(newer.error_code, 0);
    assert_eq!(newer.producer_epoch, epoch + 2);
    assert_eq!(end(&mut conn, &id, pid, epoch), 90, "PRODUCER_FENCED");
    // Nothing was written: the partition holds only the fencing abort's marker.
    let (_, hw) = broker.watermarks(&topic, 0);
    assert!(hw <= 1, "high watermark {hw}");
    assert!(read_all(&broker.client_config(), &topic, 1, "read_uncommitted").is_empty());
}

/// `strata txn`: list and describe show an open transaction with its partition; abort ends it
/// and fences its producer; errors for what is not there.
#[test]
fn the_txn_command_lists_describes_and_aborts_an_open_transaction() {
    let broker = Broker::start_default();
    let topic = unique_topic("txn-cli");
    broker.create_topic(&topic, 2, &[]).unwrap();
    let id = unique_topic("txn-cli");
    let p = txn_producer(&broker.client_config(), &id, 60_000);
    p.begin_transaction().unwrap();
    send(&p, &topic, 1, "held-000");
    p.flush(TIMEOUT).unwrap();
    let strata = |args: &[&str]| {
        let out = std::process::Command::new(strata_tests::strata_bin())
            .args(args)
            .args(["-b", &broker.kafka_addr])
            .env("RUST_BACKTRACE", "0")
            .output()
            .expect("run strata");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, out, _) = strata(&["txn", "list", "--state", "Ongoing"]);
    assert_eq!(code, Some(0));
    let line = out
        .lines()
        .find(|l| l.contains(&id))
        .expect("the id is listed");
    assert!(line.contains("state=Ongoing"), "{line}");
    assert!(line.contains(&format!("partitions={topic}-1")), "{line}");
    let (code, out, _) = strata(&["txn", "describe", &id]);
    assert_eq!(code, Some(0));
    assert!(out.contains("producer_epoch=0"), "{out}");
    let (code, out, err) = strata(&["txn", "abort", &id]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("producer_epoch=2"), "{out}");
    assert_eq!(
        end_offset(&broker.client_config(), &topic, 1, "read_committed"),
        2
    );
    assert!(
        p.commit_transaction(TIMEOUT).is_err(),
        "the producer is fenced"
    );
    let (code, _, err) = strata(&["txn", "abort", &id]);
    assert_eq!(code, Some(1));
    assert!(err.contains("no open transaction"), "{err}");
    let (code, _, err) = strata(&["txn", "describe", "no-such-id"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("105"), "{err}");
    let (code, out, _) = strata(&["txn", "find-hanging"]);
    assert_eq!((code, out.as_str()), (Some(0), ""), "nothing hangs");
}
