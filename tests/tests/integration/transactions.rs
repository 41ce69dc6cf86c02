//! Transactions with a real client (librdkafka through `rdkafka`): what read_committed
//! consumers see of committed, aborted and open transactions; consume-transform-produce with
//! offsets committed in the transaction; zombie fencing; the coordinator aborting a
//! transaction past its timeout; a broker killed mid-transaction; and, with raw frames, the
//! bad input Kafka refuses with its error codes.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, EndTxnRequest, FindCoordinatorRequest, InitProducerIdRequest,
    ProducerId, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::DeliveryResult;
use rdkafka::message::Message;
use rdkafka::producer::{
    BaseProducer, BaseRecord, DefaultProducerContext, Producer, ProducerContext,
};
use rdkafka::{Offset, TopicPartitionList};
use strata_tests::raw::error;
use strata_tests::{
    http_get, parse_prometheus, read_to_end, unique_topic, wait_for, Broker, BrokerOpts, Cluster,
    KafkaConn,
};

const TIMEOUT: Duration = Duration::from_secs(30);

fn txn_producer(cfg: &ClientConfig, id: &str, timeout_ms: u64) -> BaseProducer {
    txn_producer_with(cfg, id, timeout_ms, DefaultProducerContext)
}

fn txn_producer_with<C: ProducerContext>(
    cfg: &ClientConfig,
    id: &str,
    timeout_ms: u64,
    context: C,
) -> BaseProducer<C> {
    let mut cfg = cfg.clone();
    cfg.set("transactional.id", id)
        .set("transaction.timeout.ms", timeout_ms.to_string())
        .set("socket.timeout.ms", timeout_ms.min(30_000).to_string())
        .set("linger.ms", "5")
        .set("message.timeout.ms", timeout_ms.min(30_000).to_string());
    let p: BaseProducer<C> = cfg
        .create_with_context(context)
        .expect("create transactional producer");
    p.init_transactions(TIMEOUT).expect("init_transactions");
    p
}

fn send<C: ProducerContext<DeliveryOpaque = ()>>(
    p: &BaseProducer<C>,
    topic: &str,
    partition: i32,
    value: &str,
) {
    let mut record = BaseRecord::<str, str>::to(topic)
        .partition(partition)
        .key(value)
        .payload(value);
    loop {
        match p.send(record) {
            Ok(()) => return,
            Err((
                KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                r,
            )) => {
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
    (read_to_end(cfg, topic, partitions, isolation, TIMEOUT).into_iter())
        .map(|r| String::from_utf8(r.value.unwrap_or_default()).unwrap())
        .collect()
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
    let key = bytes::Bytes::from_static(&[0, 0, 0, 1]);
    let value = bytes::Bytes::from_static(&[0, 0, 0, 0, 0, 0]);
    txn_batch(producer_id, epoch, 0, control, Some(key), value)
}

/// One transactional record of `producer_id` at (`epoch`, `seq`) as a batch.
fn txn_batch(
    producer_id: i64,
    epoch: i16,
    seq: i32,
    control: bool,
    key: Option<bytes::Bytes>,
    value: bytes::Bytes,
) -> bytes::Bytes {
    let record = Record {
        transactional: true,
        control,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id,
        producer_epoch: epoch,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: seq,
        timestamp: 0,
        key,
        value: Some(value),
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

/// One transactional record `value` as a batch of `producer_id` at `epoch`, sequence `seq`.
fn txn_record(producer_id: i64, epoch: i16, seq: i32, value: &str) -> bytes::Bytes {
    let value = bytes::Bytes::copy_from_slice(value.as_bytes());
    txn_batch(producer_id, epoch, seq, false, None, value)
}

/// A producer of transaction version 2 (KIP-890 part 2), by hand: no stock client within
/// reach of these tests speaks it (librdkafka and kafka-python stop at version 0; the Java
/// client does, and is what this follows). It never sends AddPartitionsToTxn or
/// AddOffsetsToTxn: Produce v12 and TxnOffsetCommit v5 add their partitions, and each EndTxn
/// v5 answers the next epoch. `coordinator` is a connection to its transaction coordinator;
/// writes go through the connection given (the partition leader's, the group coordinator's).
struct Tv2Producer {
    coordinator: KafkaConn,
    coordinator_addr: String,
    id: String,
    producer_id: i64,
    epoch: i16,
}

/// The address of the coordinator of `key` (`key_type` 0: group, 1: transactional id).
fn coordinator_of(conn: &mut KafkaConn, key: &str, key_type: i8) -> String {
    let found = conn
        .request(
            3,
            &FindCoordinatorRequest::default()
                .with_key(StrBytes::from_string(key.to_string()))
                .with_key_type(key_type),
        )
        .unwrap();
    assert_eq!(found.error_code, 0, "{found:?}");
    format!("{}:{}", found.host, found.port)
}

impl Tv2Producer {
    fn init(bootstrap: &str, id: &str) -> Tv2Producer {
        let first = bootstrap.split(',').next().unwrap();
        let addr = coordinator_of(&mut KafkaConn::connect(first).unwrap(), id, 1);
        let mut coordinator = KafkaConn::connect(&addr).unwrap();
        let r = coordinator
            .request(
                5,
                &InitProducerIdRequest::default()
                    .with_transactional_id(Some(txn_id(id)))
                    .with_transaction_timeout_ms(60_000)
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1),
            )
            .unwrap();
        assert_eq!(r.error_code, 0, "{r:?}");
        Tv2Producer {
            coordinator,
            coordinator_addr: addr,
            id: id.to_string(),
            producer_id: r.producer_id.0,
            epoch: r.producer_epoch,
        }
    }

    /// Produce v12 of one record at (`epoch`, `seq`) through `leader`: the error code.
    fn produce_at(
        &self,
        leader: &mut KafkaConn,
        topic: &str,
        partition: i32,
        epoch: i16,
        seq: i32,
        value: &str,
    ) -> i16 {
        let batch = txn_record(self.producer_id, epoch, seq, value);
        let mut req = KafkaConn::produce_request(topic, partition, batch, 10_000);
        req.transactional_id = Some(txn_id(&self.id));
        let resp = leader.request(12, &req).unwrap();
        resp.responses[0].partition_responses[0].error_code
    }

    fn produce(
        &self,
        leader: &mut KafkaConn,
        topic: &str,
        partition: i32,
        seq: i32,
        value: &str,
    ) -> i16 {
        self.produce_at(leader, topic, partition, self.epoch, seq, value)
    }

    /// TxnOffsetCommit v5 of `offset` for `group` on `topic`-0, through the group's
    /// coordinator: the partition's error code.
    fn commit_offset(
        &self,
        group_coordinator: &mut KafkaConn,
        group: &str,
        topic: &str,
        offset: i64,
    ) -> i16 {
        use kafka_protocol::messages::txn_offset_commit_request::{
            TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
        };
        use kafka_protocol::messages::{GroupId, TxnOffsetCommitRequest};
        let req = TxnOffsetCommitRequest::default()
            .with_transactional_id(txn_id(&self.id))
            .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
            .with_producer_id(ProducerId(self.producer_id))
            .with_producer_epoch(self.epoch)
            .with_generation_id(-1)
            .with_topics(vec![TxnOffsetCommitRequestTopic::default()
                .with_name(strata_tests::raw::topic_name(topic))
                .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(offset)
                    .with_committed_leader_epoch(-1)
                    .with_committed_metadata(Some(StrBytes::from_static_str("")))])]);
        let resp = group_coordinator.request(5, &req).unwrap();
        resp.topics[0].partitions[0].error_code
    }

    /// EndTxn at `version` from `epoch`: the error code and the (id, epoch) answered.
    fn end_at(&mut self, version: i16, epoch: i16, commit: bool) -> (i16, i64, i16) {
        let r = self
            .coordinator
            .request(
                version,
                &EndTxnRequest::default()
                    .with_transactional_id(txn_id(&self.id))
                    .with_producer_id(ProducerId(self.producer_id))
                    .with_producer_epoch(epoch)
                    .with_committed(commit),
            )
            .unwrap();
        (r.error_code, r.producer_id.0, r.producer_epoch)
    }

    /// EndTxn v5; on success the client goes on with the epoch answered.
    fn end(&mut self, commit: bool) -> i16 {
        let (code, pid, epoch) = self.end_at(5, self.epoch, commit);
        if code == 0 {
            assert_eq!(pid, self.producer_id, "no rotation this early");
            assert_eq!(epoch, self.epoch + 1, "every end bumps the epoch");
            self.epoch = epoch;
        }
        code
    }
}

fn committed_offset(cfg: &ClientConfig, group: &str, topic: &str) -> Offset {
    let mut c = cfg.clone();
    c.set("group.id", group);
    let consumer: BaseConsumer = c.create().unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, 0);
    let committed = consumer.committed_offsets(tpl, TIMEOUT).unwrap();
    let offset = committed.find_partition(topic, 0).unwrap().offset();
    offset
}

#[test]
fn a_version_2_producer_adds_partitions_by_writing_and_every_end_fences_what_came_before() {
    let broker = Broker::start_default();
    let topic = unique_topic("txn-v2");
    broker.create_topic(&topic, 2, &[]).unwrap();
    let group = unique_topic("txn-v2-group");
    let cfg = broker.client_config();
    let mut p = Tv2Producer::init(&broker.kafka_addr, &unique_topic("txn-v2-id"));
    let mut conn = KafkaConn::connect(&broker.kafka_addr).unwrap();
    let first_epoch = p.epoch;

    // A transaction over two partitions and the group's offsets, with no AddPartitionsToTxn
    // and no AddOffsetsToTxn: the writes add them.
    assert_eq!(p.produce(&mut conn, &topic, 0, 0, "one"), 0);
    assert_eq!(p.produce(&mut conn, &topic, 1, 0, "two"), 0);
    assert_eq!(p.produce(&mut conn, &topic, 0, 1, "three"), 0);
    assert_eq!(p.commit_offset(&mut conn, &group, &topic, 42), 0);
    assert!(
        read_all(&cfg, &topic, 2, "read_committed").is_empty(),
        "open: nothing is stable yet"
    );
    assert_eq!(p.end(true), 0);
    assert_eq!(
        sorted(read_all(&cfg, &topic, 2, "read_committed")),
        ["one", "three", "two"]
    );
    assert_eq!(
        committed_offset(&cfg, &group, &topic),
        Offset::Offset(42),
        "the offsets committed with the transaction"
    );

    // The ended transaction's epoch is fenced everywhere: a late retry of one of its writes
    // (a zombie's, or one whose response was lost) cannot open a transaction after its
    // markers, and a retry of its EndTxn is answered with the epoch it handed out.
    for partition in [0, 1] {
        assert_eq!(
            p.produce_at(&mut conn, &topic, partition, first_epoch, 2, "late"),
            47,
            "INVALID_PRODUCER_EPOCH"
        );
    }
    assert_eq!(p.end_at(5, first_epoch, true), (0, p.producer_id, p.epoch));
    assert_eq!(p.end_at(5, first_epoch, false).0, 48, "INVALID_TXN_STATE");

    // The next transaction, aborted; then an abort with nothing open (a client that cannot
    // know whether its last write landed), which bumps the epoch too; a commit of nothing is
    // refused, at either protocol version.
    assert_eq!(p.produce(&mut conn, &topic, 1, 0, "aborted"), 0);
    assert_eq!(p.end(false), 0);
    assert_eq!(p.end(false), 0);
    assert_eq!(p.epoch, first_epoch + 3);
    assert_eq!(p.end(true), 48, "INVALID_TXN_STATE");
    assert_eq!(p.end_at(4, p.epoch, true).0, 48, "INVALID_TXN_STATE");
    assert_eq!(
        p.produce_at(&mut conn, &topic, 1, first_epoch + 1, 1, "late"),
        47,
        "a write of the aborted transaction after the bump"
    );
    assert_eq!(p.end_at(5, first_epoch + 1, true).0, 90, "PRODUCER_FENCED");

    // A last transaction at the current epoch, and every reader's view of it all.
    assert_eq!(p.produce(&mut conn, &topic, 0, 0, "four"), 0);
    assert_eq!(p.end(true), 0);
    assert_eq!(
        sorted(read_all(&cfg, &topic, 2, "read_committed")),
        ["four", "one", "three", "two"]
    );
    assert_eq!(
        sorted(read_all(&cfg, &topic, 2, "read_uncommitted")),
        ["aborted", "four", "one", "three", "two"]
    );
}

/// In a cluster, the partition leaders and the group coordinator add their partitions at the
/// transaction's coordinator on other brokers (AddPartitionsToTxn v4 without verify-only).
#[test]
fn a_version_2_transaction_spans_partitions_led_by_other_brokers_than_its_coordinator() {
    let mut cluster = Cluster::start(3, 3, &[]);
    let topic = unique_topic("txn-v2-cluster");
    cluster.create_replicated_topic(&topic, 3, rdkafka::admin::TopicReplication::Fixed(3), &[]);
    cluster.wait_topic_healthy(&topic);
    let leader_addrs: Vec<String> = (cluster.leaders(&topic).iter())
        .map(|l| cluster.member(l.expect("a leader")).kafka_addr.clone())
        .collect();
    let mut leader_conns: Vec<KafkaConn> = (leader_addrs.iter())
        .map(|a| KafkaConn::connect(a).unwrap())
        .collect();
    let group = unique_topic("txn-v2-cluster-group");
    let mut p = Tv2Producer::init(&cluster.bootstrap(), &unique_topic("txn-v2-cluster-id"));
    assert!(
        leader_addrs.iter().any(|a| *a != p.coordinator_addr),
        "some partition is led away from the coordinator: {leader_addrs:?}"
    );
    let mut any = KafkaConn::connect(&cluster.member(1).kafka_addr).unwrap();
    let mut group_coordinator = KafkaConn::connect(&coordinator_of(&mut any, &group, 0)).unwrap();
    let first_epoch = p.epoch;

    for (partition, leader) in leader_conns.iter_mut().enumerate() {
        let value = format!("v{partition}");
        assert_eq!(p.produce(leader, &topic, partition as i32, 0, &value), 0);
    }
    assert_eq!(
        p.commit_offset(&mut group_coordinator, &group, &topic, 7),
        0
    );
    assert_eq!(p.end(true), 0);
    let cfg = cluster.consumer_config();
    assert_eq!(
        sorted(read_all(&cfg, &topic, 3, "read_committed")),
        ["v0", "v1", "v2"]
    );
    assert_eq!(committed_offset(&cfg, &group, &topic), Offset::Offset(7));
    for (partition, leader) in leader_conns.iter_mut().enumerate() {
        assert_eq!(
            p.produce_at(leader, &topic, partition as i32, first_epoch, 1, "late"),
            47,
            "INVALID_PRODUCER_EPOCH"
        );
    }
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
/// Tiering: transactions in segments offloaded to the object store keep their meaning. A
/// read_committed replay from offset 0, served from the remote tier (and again after a
/// restart with an empty cache), skips exactly the aborted records, including aborts that
/// span segments and interleave with another producer's committed transaction;
/// read_uncommitted sees everything.
#[test]
fn a_read_committed_replay_from_the_remote_tier_skips_aborted_transactions() {
    let mut broker = Broker::start(BrokerOpts::new().quick_tiering());
    let topic = unique_topic("txn-tiered");
    let tiered = [
        ("segment.bytes", "1048576"),
        ("local.retention.ms", "1000"),
        ("remote.storage.enable", "true"),
    ];
    broker.create_topic(&topic, 1, &tiered).unwrap();
    let cfg = broker.client_config();
    let a = txn_producer(&cfg, &unique_topic("txn-tiered-a"), 60_000);
    let b = txn_producer(&cfg, &unique_topic("txn-tiered-b"), 60_000);
    let body = "x".repeat(1000);
    let sends = |p: &BaseProducer, tag: &str, range: std::ops::Range<usize>| {
        for i in range {
            send(p, &topic, 0, &format!("{tag}-{i:03}-{body}"));
        }
        p.flush(TIMEOUT).unwrap();
    };
    // In each round A's transaction (800 records, about 0.8 segment) encloses B's (400), and
    // one of the two aborts.
    let mut want: Vec<String> = Vec::new();
    let rounds = 10;
    for round in 0..rounds {
        a.begin_transaction().unwrap();
        b.begin_transaction().unwrap();
        sends(&a, &format!("a{round}"), 0..400);
        sends(&b, &format!("b{round}"), 0..400);
        sends(&a, &format!("a{round}"), 400..800);
        if round % 2 == 0 {
            b.abort_transaction(TIMEOUT).unwrap();
            a.commit_transaction(TIMEOUT).unwrap();
            want.extend((0..800).map(|i| format!("a{round}-{i:03}")));
        } else {
            a.abort_transaction(TIMEOUT).unwrap();
            b.commit_transaction(TIMEOUT).unwrap();
            want.extend((0..400).map(|i| format!("b{round}-{i:03}")));
        }
    }
    // Plain records after them close the last transactional segments.
    let plain: BaseProducer = cfg.create().unwrap();
    sends(&plain, "plain", 0..2500);
    want.extend((0..2500).map(|i| format!("plain-{i:03}")));
    let written = rounds * 1200 + 2500;
    let dir = broker.data_dir().join(format!("{topic}-0"));
    let local_segments = || {
        std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
            .count()
    };
    wait_for(
        "offloaded, local copies gone",
        Duration::from_secs(120),
        || {
            broker.metric("strata_tier_upload_lag_segments") == 0.0
                && broker.metric("strata_tier_uploaded_segments_total") >= 12.0
                && local_segments() <= 2
        },
    );
    let tags = |values: Vec<String>| -> Vec<String> {
        values
            .into_iter()
            .map(|v| v.rsplit_once('-').unwrap().0.to_string())
            .collect()
    };
    let committed = tags(read_all(&cfg, &topic, 1, "read_committed"));
    assert_eq!(committed.len(), want.len());
    assert!(committed == want, "read_committed replay differs");
    assert!(broker.metric("strata_tier_remote_fetch_bytes_total") > 10e6);
    assert_eq!(read_all(&cfg, &topic, 1, "read_uncommitted").len(), written);

    // No cache, no local copy: the aborted ranges come from the index objects alone.
    broker.terminate();
    std::fs::remove_dir_all(broker.data_dir().join("cache")).unwrap();
    broker.restart();
    let cfg = broker.client_config();
    assert!(tags(read_all(&cfg, &topic, 1, "read_committed")) == want);
}

/// What one attempt at a transaction ended as, for the checker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Committed,
    Aborted,
    /// The client could not tell (its process was killed, or its producer was fenced or
    /// failed mid-commit).
    Unknown,
}

/// Environment of a checker worker process (see [`txn_checker_worker`]).
const WORKER_ENV: &str = "STRATA_TXN_CHECKER";
const CHECKER_INPUTS: usize = 600;
/// How long the checker's nemesis keeps a killed broker down: past its session timeout (3 s),
/// so its partitions and coordinators fail over first.
const RESTART_AFTER: Duration = Duration::from_secs(6);

/// A worker process, killed (SIGKILL) when dropped, so a failing checker leaves none behind.
struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A Jepsen-style run of Kafka's transactional workload on three brokers (RF=3): a
/// consume-transform-produce worker process tags every output with its transaction attempt,
/// while a nemesis kills with SIGKILL, one after another, the worker mid-transaction, the
/// leader of an output partition, the transaction coordinator, and the worker again (each
/// broker restarted a little later, each worker replaced at once). The checker then reads the
/// output read_committed and asserts: every input appears exactly once (no lost committed
/// write, no duplicate); nothing of an attempt the client saw aborted is visible; every
/// attempt is visible whole or not at all (no partial transaction); per partition, outputs
/// are in input order; and a read_uncommitted reader sees at least as much (nothing was
/// read past the LSO that is not in the log).
#[test]
fn exactly_once_holds_when_the_producer_a_partition_leader_and_the_coordinator_are_killed() {
    let mut cluster = Cluster::start(3, 3, &[("STRATA_BROKER_SESSION_TIMEOUT_MS", "3000")]);
    let input = unique_topic("txn-jepsen-in");
    let output = unique_topic("txn-jepsen-out");
    let rf3 = || rdkafka::admin::TopicReplication::Fixed(3);
    cluster.create_replicated_topic(&input, 3, rf3(), &[("min.insync.replicas", "2")]);
    cluster.create_replicated_topic(&output, 3, rf3(), &[("min.insync.replicas", "2")]);
    let plain: BaseProducer = cluster.producer_config().create().unwrap();
    for i in 0..CHECKER_INPUTS {
        send(&plain, &input, (i % 3) as i32, &format!("in-{i:04}"));
    }
    plain.flush(TIMEOUT).unwrap();
    drop(plain);

    let group = unique_topic("txn-jepsen-group");
    let id = unique_topic("txn-jepsen");
    let (lines_tx, lines) = mpsc::channel::<(usize, String)>();
    // Each worker's stderr (its client's transaction log) goes to a file, shown on failure.
    // Kept when the checker fails, removed when it passes.
    let logs = std::env::temp_dir().join(unique_topic("strata-txn-checker"));
    std::fs::create_dir_all(&logs).unwrap();
    let log_of = |n: usize| logs.join(format!("worker-{n}.log"));
    let start_worker = |cluster: &Cluster, n: usize| -> Worker {
        let env = [
            cluster.bootstrap(),
            input.clone(),
            output.clone(),
            group.clone(),
        ];
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "transactions::txn_checker_worker",
                "--ignored",
                "--nocapture",
            ])
            .env(WORKER_ENV, format!("{}|{}|{n}", env.join("|"), id))
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log_of(n)).unwrap())
            .spawn()
            .expect("start a checker worker");
        let out = BufReader::new(child.stdout.take().unwrap());
        let tx = lines_tx.clone();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if let Some(line) = line.strip_prefix("checker ") {
                    let _ = tx.send((n, line.to_string()));
                }
            }
        });
        Worker(child)
    };
    let mut workers = 1;
    let mut worker = start_worker(&cluster, workers);
    // attempt tag -> (outcome, records written)
    let mut attempts: BTreeMap<String, (Ended, usize)> = BTreeMap::new();
    let mut processed = 0usize;
    let mut faults: Vec<String> = Vec::new();
    // A killed broker and when it died: it is restarted `RESTART_AFTER` later.
    let mut down: Option<(u64, Instant)> = None;
    let mut step = 0;
    let deadline = Instant::now() + Duration::from_secs(300);
    let coordinator_partition = txn_partition(&id) as usize;
    // Until every input is processed and every fault has happened.
    while processed < CHECKER_INPUTS || step < 4 {
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(log_of(workers)).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(80).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            let describe = Command::new(strata_tests::strata_bin())
                .args(["txn", "describe", &id, "-b", &cluster.bootstrap()])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
            panic!(
                "stuck at {processed} of {CHECKER_INPUTS} after {faults:?}: {attempts:?}\n\
                 output leaders {:?}; the coordinator's view: {describe:?}\n\
                 worker logs in {}; worker {workers}'s last lines:\n{}",
                cluster.leaders(&output),
                logs.display(),
                tail.join("\n")
            );
        }
        let line = match lines.recv_timeout(Duration::from_millis(100)) {
            Ok((w, line)) if w == workers => Some(line),
            Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(e) => panic!("worker output: {e}"),
        };
        let mut mid_transaction = false;
        if let Some(line) = &line {
            let fields: Vec<&str> = line.split(' ').collect();
            match fields[..] {
                ["attempt", tag, n] => {
                    attempts.insert(tag.into(), (Ended::Unknown, n.parse().unwrap()));
                }
                ["written", _] => mid_transaction = true,
                ["committed", tag] => attempts.get_mut(tag).unwrap().0 = Ended::Committed,
                ["aborted", tag] => attempts.get_mut(tag).unwrap().0 = Ended::Aborted,
                ["progress", n] => processed = n.parse().unwrap(),
                _ => panic!("unexpected worker line {line:?}"),
            }
        }
        // The nemesis: one fault per sixth of the input (or later: one broker down at a
        // time), the worker killed mid-transaction (or idle, once all is processed).
        let stage = processed * 6 / CHECKER_INPUTS;
        let due = step < 4 && stage > step;
        let idle = processed >= CHECKER_INPUTS;
        if due && (step == 0 || step == 3) && (mid_transaction || idle) {
            drop(worker);
            faults.push(format!("worker {workers} at {processed}"));
            workers += 1;
            worker = start_worker(&cluster, workers);
            step += 1;
        } else if due && step == 1 && down.is_none() {
            let victim = cluster.leaders(&output)[0].expect("a leader");
            cluster.node(victim).kill9();
            faults.push(format!("leader {victim} of partition 0 at {processed}"));
            down = Some((victim, Instant::now()));
            step += 1;
        } else if due && step == 2 && down.is_none() {
            let coordinator =
                cluster.leaders("__transaction_state")[coordinator_partition].expect("coordinator");
            cluster.node(coordinator).kill9();
            faults.push(format!("coordinator {coordinator} at {processed}"));
            down = Some((coordinator, Instant::now()));
            step += 1;
        } else if let Some((node, _)) = down.filter(|(_, at)| at.elapsed() >= RESTART_AFTER) {
            // Brokers come back (librdkafka needs it: its group-coordinator lookup inside
            // send_offsets_to_transaction waits for the old coordinator's connection state
            // to change and ignores its timeout, librdkafka issues 5456 and 5511).
            cluster.node(node).relaunch();
            cluster.node(node).wait_ready();
            faults.push(format!("{node} restarted"));
            down = None;
        }
        if let Ok(Some(status)) = worker.0.try_wait() {
            // A worker that gave up (its producer could not initialize in time) is replaced,
            // as a supervisor would.
            faults.push(format!("worker {workers} exited: {status}"));
            workers += 1;
            worker = start_worker(&cluster, workers);
        }
    }
    drop(worker);
    if let Some((node, _)) = down {
        cluster.node(node).relaunch();
        cluster.node(node).wait_ready();
    }
    let client = cluster.with_bootstrap(cluster.member(1).client_config());
    let out = read_all(&client, &output, 3, "read_committed");
    let tagged: Vec<(&str, &str)> = out
        .iter()
        .map(|v| v.split_once('/').expect("tagged"))
        .collect();
    // Exactly once: every input, once.
    let mut seen: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (body, tag) in &tagged {
        seen.entry(body).or_default().push(tag);
    }
    let missing: Vec<String> = (0..CHECKER_INPUTS)
        .map(|i| format!("out-{i:04}"))
        .filter(|o| !seen.contains_key(o.as_str()))
        .collect();
    let duplicated: Vec<_> = seen.iter().filter(|(_, tags)| tags.len() > 1).collect();
    assert!(missing.is_empty(), "lost: {missing:?} after {faults:?}");
    assert!(
        duplicated.is_empty(),
        "duplicated: {duplicated:?} after {faults:?}"
    );
    // No aborted read, and no partial transaction: an attempt is seen whole or not at all.
    let mut visible: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, tag) in &tagged {
        *visible.entry(tag).or_default() += 1;
    }
    for (tag, seen) in &visible {
        let (ended, wrote) = attempts[*tag];
        assert_ne!(ended, Ended::Aborted, "aborted attempt {tag} visible");
        assert_eq!(*seen, wrote, "attempt {tag} ({ended:?}) partly visible");
    }
    // Per partition, in input order.
    for partition in 0..3 {
        let order: Vec<usize> = tagged
            .iter()
            .map(|(body, _)| body[4..].parse::<usize>().unwrap())
            .filter(|i| i % 3 == partition)
            .collect();
        assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "partition {partition} out of order: {order:?}"
        );
    }
    // The committed view is a subset of everything written.
    let everything = read_all(&client, &output, 3, "read_uncommitted");
    let all: std::collections::BTreeSet<&String> = everything.iter().collect();
    assert!(out.iter().all(|v| all.contains(v)), "read past the log");
    let count = |e: Ended| attempts.values().filter(|(a, _)| *a == e).count();
    eprintln!(
        "checker: {CHECKER_INPUTS} inputs exactly once over {} attempts ({} committed, {} \
         aborted, {} unknown; {} records written in all) through {faults:?}",
        attempts.len(),
        count(Ended::Committed),
        count(Ended::Aborted),
        count(Ended::Unknown),
        everything.len(),
    );
    let _ = std::fs::remove_dir_all(&logs);
}

/// One consume-transform-produce process of the checker above (which starts it with
/// `--ignored` and kills it with SIGKILL). It reports on stdout `checker attempt TAG N` before
/// each transaction of N records, `checker written TAG` once they are acknowledged (the
/// transaction is open on the brokers), `checker committed|aborted TAG` after it, and
/// `checker progress N` with the group's committed input offsets summed, at start and after each
/// commit.
#[test]
#[ignore = "a worker process of the exactly-once checker, started by it"]
fn txn_checker_worker() {
    let env = std::env::var(WORKER_ENV).expect("run by the checker");
    let [bootstrap, input, output, group, id, worker]: [&str; 6] =
        env.split('|').collect::<Vec<_>>().try_into().unwrap();
    let mut client = ClientConfig::new();
    client.set("bootstrap.servers", bootstrap);
    let mut producer_cfg = client.clone();
    producer_cfg
        .set("debug", "eos")
        .set_log_level(RDKafkaLogLevel::Debug);
    let mut consumer_cfg = client.clone();
    consumer_cfg
        .set("group.id", group)
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000");
    consumer_cfg
        .set("debug", "cgrp")
        .set_log_level(RDKafkaLogLevel::Debug);
    let c: BaseConsumer<LogToStderr> = consumer_cfg.create_with_context(LogToStderr).unwrap();
    c.subscribe(&[input]).unwrap();
    let producer = || txn_producer_with(&producer_cfg, id, 30_000, LogToStderr);
    let mut p = producer();
    let mut all = TopicPartitionList::new();
    for partition in 0..3 {
        all.add_partition(input, partition);
    }
    // The input consumed and committed so far, by every worker.
    let progress = |c: &BaseConsumer<LogToStderr>| loop {
        if let Ok(committed) = c.committed_offsets(all.clone(), TIMEOUT) {
            let sum: i64 = committed
                .elements()
                .iter()
                .map(|e| match e.offset() {
                    Offset::Offset(o) => o,
                    _ => 0,
                })
                .sum();
            println!("checker progress {sum}");
            return;
        }
    };
    // Rewinds the consumer to the group's committed offsets (after an abort).
    let rewind = |c: &BaseConsumer<LogToStderr>| {
        if let Ok(committed) = c.committed(TIMEOUT) {
            for e in committed.elements() {
                let offset = match e.offset() {
                    Offset::Offset(o) => Offset::Offset(o),
                    _ => Offset::Beginning,
                };
                let _ = c.seek(e.topic(), e.partition(), offset, TIMEOUT);
            }
        }
    };
    // A watchdog, as a deployment's liveness probe: librdkafka's send_offsets_to_transaction
    // can block past its timeout when the group coordinator died (librdkafka issues 5456
    // and 5511, open in 2.12); a worker stuck in one transaction for twice the API timeout
    // exits, and the checker starts another, whose init fences this one's transaction.
    // Each transaction sends `true` as it begins and `false` once it has ended.
    let (busy, watched) = mpsc::channel::<bool>();
    std::thread::spawn(move || {
        while let Ok(began) = watched.recv() {
            if began && watched.recv_timeout(2 * TIMEOUT) == Err(RecvTimeoutError::Timeout) {
                eprintln!("checker: the client is stuck in a transaction for {TIMEOUT:?} x 2");
                std::process::exit(3);
            }
        }
    });
    progress(&c);
    for attempt in 0.. {
        let mut batch = Vec::new();
        let until = Instant::now() + Duration::from_secs(2);
        while batch.len() < 5 && Instant::now() < until {
            if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
                batch.push((m.partition(), m.offset(), m.payload().unwrap().to_vec()));
            }
        }
        if batch.is_empty() {
            continue;
        }
        let tag = format!("w{worker}a{attempt}");
        println!("checker attempt {tag} {}", batch.len());
        eprintln!("checker: {tag} begins with {} records", batch.len());
        let _ = busy.send(true);
        let ended = (|| -> Result<(), KafkaError> {
            p.begin_transaction()?;
            let mut next: BTreeMap<i32, i64> = BTreeMap::new();
            for (partition, offset, value) in &batch {
                let body = String::from_utf8_lossy(value).replace("in-", "out-");
                send(&p, output, *partition, &format!("{body}/{tag}"));
                next.insert(*partition, offset + 1);
            }
            p.flush(TIMEOUT)?;
            println!("checker written {tag}");
            eprintln!("checker: {tag} written; sending offsets");
            let mut offsets = TopicPartitionList::new();
            for (partition, offset) in next {
                offsets.add_partition_offset(input, partition, Offset::Offset(offset))?;
            }
            p.send_offsets_to_transaction(&offsets, &c.group_metadata().unwrap(), TIMEOUT)?;
            eprintln!("checker: {tag} offsets sent; committing");
            p.commit_transaction(TIMEOUT)
        })();
        let _ = busy.send(false);
        if let Err(e) = &ended {
            eprintln!("checker: attempt {tag} failed: {e}");
        }
        match ended {
            Ok(()) => {
                println!("checker committed {tag}");
                progress(&c);
                // Paced, so that the nemesis' faults land in the middle of the stream.
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(KafkaError::Transaction(e)) if e.txn_requires_abort() => {
                if p.abort_transaction(TIMEOUT).is_ok() {
                    println!("checker aborted {tag}");
                } else {
                    p = producer();
                }
                rewind(&c);
            }
            Err(_) => {
                // Fatal or unclear: a new producer fences this one (aborting what it left
                // open), and the input is read again from the committed offsets.
                p = producer();
                rewind(&c);
            }
        }
    }
}

/// A client context that writes the client's log to stderr (the checker keeps it).
struct LogToStderr;

impl ClientContext for LogToStderr {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        eprintln!("{level:?} {facility} {message}");
    }
}

impl rdkafka::consumer::ConsumerContext for LogToStderr {}

impl ProducerContext for LogToStderr {
    type DeliveryOpaque = ();

    fn delivery(&self, _: &DeliveryResult<'_>, _: ()) {}
}

/// Kafka's `__transaction_state` partition of a transactional id (Java's hashCode).
fn txn_partition(id: &str) -> i32 {
    let h = id
        .encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32));
    (if h == i32::MIN { 0 } else { h.abs() }) % 50
}
