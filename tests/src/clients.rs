//! librdkafka clients (through the `rdkafka` crate) pointed at a test broker.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::util::unique_topic;
use crate::Broker;

/// Runs a future to completion on a small runtime (for rdkafka's admin futures).
pub fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(f)
}

impl Broker {
    /// Common settings: bootstrap and quick failure detection.
    pub fn client_config(&self) -> ClientConfig {
        let mut cfg = ClientConfig::new();
        cfg.set("bootstrap.servers", &self.kafka_addr)
            .set("broker.address.family", "v4")
            .set("socket.timeout.ms", "30000")
            .set("reconnect.backoff.ms", "50")
            .set("reconnect.backoff.max.ms", "500");
        cfg
    }

    /// A producer config: acks=all, ordered (one request in flight), small linger.
    pub fn producer_config(&self) -> ClientConfig {
        let mut cfg = self.client_config();
        cfg.set("acks", "all")
            .set("linger.ms", "5")
            .set("message.timeout.ms", "60000")
            .set("enable.idempotence", "false")
            .set("max.in.flight.requests.per.connection", "1")
            .set("queue.buffering.max.messages", "200000");
        cfg
    }

    /// A consumer config for `assign()`-only use: no commits, earliest reset.
    pub fn consumer_config(&self) -> ClientConfig {
        let mut cfg = self.client_config();
        cfg.set("group.id", unique_topic("strata-tests-group"))
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .set("fetch.wait.max.ms", "100");
        cfg
    }

    pub fn admin(&self) -> AdminClient<DefaultClientContext> {
        self.client_config().create().expect("create admin client")
    }

    /// Creates a topic with CreateTopics (replication factor 1) and per-topic configs.
    pub fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        configs: &[(&str, &str)],
    ) -> Result<()> {
        let admin = self.admin();
        let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
        for (k, v) in configs {
            topic = topic.set(k, v);
        }
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        let results = block_on(admin.create_topics([&topic], &opts))
            .with_context(|| format!("CreateTopics {name}"))?;
        for r in results {
            if let Err((t, code)) = r {
                bail!("CreateTopics {t} failed: {code:?}");
            }
        }
        Ok(())
    }

    /// A consumer assigned to `(partition, offset)` pairs of `topic`.
    pub fn assigned_consumer(
        &self,
        cfg: &ClientConfig,
        topic: &str,
        assignment: &[(i32, Offset)],
    ) -> BaseConsumer {
        let consumer: BaseConsumer = cfg.create().expect("create consumer");
        let mut tpl = TopicPartitionList::new();
        for (p, off) in assignment {
            tpl.add_partition_offset(topic, *p, *off)
                .expect("tpl offset");
        }
        consumer.assign(&tpl).expect("assign");
        consumer
    }

    /// Reads `topic` partitions from `offset` until `done(records)` or `timeout`; panics on timeout.
    pub fn consume_until(
        &self,
        topic: &str,
        assignment: &[(i32, Offset)],
        timeout: Duration,
        mut done: impl FnMut(&[ConsumedRecord]) -> bool,
    ) -> Vec<ConsumedRecord> {
        let consumer = self.assigned_consumer(&self.consumer_config(), topic, assignment);
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        let mut errors = Vec::new();
        while !done(&out) {
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {timeout:?} consuming {topic}: got {} records; last errors: {:?}",
                    out.len(),
                    &errors[errors.len().saturating_sub(5)..]
                );
            }
            match consumer.poll(Duration::from_millis(100)) {
                None => {}
                Some(Ok(m)) => out.push(ConsumedRecord::from_message(&m)),
                Some(Err(e)) => errors.push(e.to_string()),
            }
        }
        out
    }

    /// Reads exactly `n` records (at least; stops at n) from the given partitions from offset 0.
    pub fn consume_n(
        &self,
        topic: &str,
        partitions: &[i32],
        n: usize,
        timeout: Duration,
    ) -> Vec<ConsumedRecord> {
        let assignment: Vec<(i32, Offset)> =
            partitions.iter().map(|p| (*p, Offset::Offset(0))).collect();
        self.consume_until(topic, &assignment, timeout, |r| r.len() >= n)
    }

    /// (low, high) watermarks of a partition via ListOffsets.
    pub fn watermarks(&self, topic: &str, partition: i32) -> (i64, i64) {
        let consumer: BaseConsumer = self.consumer_config().create().expect("create consumer");
        consumer
            .fetch_watermarks(topic, partition, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("fetch_watermarks {topic}-{partition}: {e}"))
    }

    /// A second, fresh client produces to and consumes from a new topic: the broker still serves.
    pub fn assert_serves_new_clients(&mut self) {
        self.assert_running();
        let topic = unique_topic("still-serving");
        let producer = TrackingProducer::new(&self.producer_config());
        producer.send(0, &topic, None, b"alive-key", b"alive-value", &[], None);
        producer.flush(Duration::from_secs(30));
        let d = producer.deliveries();
        assert_eq!(d.len(), 1, "no delivery report for the liveness record");
        let (partition, offset) = d[0]
            .result
            .clone()
            .unwrap_or_else(|e| panic!("liveness produce failed: {e}"));
        let got = self.consume_until(
            &topic,
            &[(partition, Offset::Offset(offset))],
            Duration::from_secs(30),
            |r| !r.is_empty(),
        );
        assert_eq!(got[0].key.as_deref(), Some(&b"alive-key"[..]));
        assert_eq!(got[0].value.as_deref(), Some(&b"alive-value"[..]));
        self.assert_running();
    }
}

/// Every record a consumer of `isolation` (`read_committed`, `read_uncommitted`) reads of
/// `partitions` of `topic` from the start to the end it can see (the last stable offset for
/// read_committed), in the order read; panics if the ends are not reached within `timeout`.
pub fn read_to_end(
    cfg: &ClientConfig,
    topic: &str,
    partitions: i32,
    isolation: &str,
    timeout: Duration,
) -> Vec<ConsumedRecord> {
    let mut cfg = cfg.clone();
    cfg.set("group.id", unique_topic("reader"))
        .set("isolation.level", isolation)
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "50");
    let c: BaseConsumer = cfg.create().expect("create consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("tpl offset");
    }
    c.assign(&tpl).expect("assign");
    let mut out = Vec::new();
    let mut at_end = std::collections::BTreeSet::new();
    let deadline = Instant::now() + timeout;
    while at_end.len() < partitions as usize {
        assert!(
            Instant::now() < deadline,
            "{topic}: no end after {timeout:?}; read {} records",
            out.len()
        );
        match c.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(m)) => {
                at_end.remove(&m.partition());
                out.push(ConsumedRecord::from_message(&m));
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            Some(Err(e)) => panic!("consume {topic}: {e}"),
        }
    }
    out
}

/// A record as a consumer saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumedRecord {
    pub partition: i32,
    pub offset: i64,
    pub timestamp: Option<i64>,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl ConsumedRecord {
    pub fn from_message<M: Message>(m: &M) -> Self {
        let headers = m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                    .collect()
            })
            .unwrap_or_default();
        ConsumedRecord {
            partition: m.partition(),
            offset: m.offset(),
            timestamp: m.timestamp().to_millis(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            headers,
        }
    }
}

/// The outcome of one produced record: (partition, offset) or an error text.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub index: usize,
    pub result: Result<(i32, i64), String>,
}

/// Collects delivery reports; the opaque is the caller's record index.
#[derive(Default)]
pub struct TrackingContext {
    deliveries: Arc<Mutex<Vec<Delivery>>>,
}

impl ClientContext for TrackingContext {}

impl ProducerContext for TrackingContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, index: usize) {
        let result = match result {
            Ok(m) => Ok((m.partition(), m.offset())),
            Err((e, _)) => Err(e.to_string()),
        };
        self.deliveries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Delivery { index, result });
    }
}

/// A producer that records every delivery report.
pub struct TrackingProducer {
    inner: ThreadedProducer<TrackingContext>,
    deliveries: Arc<Mutex<Vec<Delivery>>>,
}

impl TrackingProducer {
    pub fn new(cfg: &ClientConfig) -> Self {
        let ctx = TrackingContext::default();
        let deliveries = ctx.deliveries.clone();
        let inner = cfg.create_with_context(ctx).expect("create producer");
        TrackingProducer { inner, deliveries }
    }

    /// Enqueues one record (waiting while the local queue is full).
    #[allow(clippy::too_many_arguments)]
    pub fn send(
        &self,
        index: usize,
        topic: &str,
        partition: Option<i32>,
        key: &[u8],
        value: &[u8],
        headers: &[(String, Vec<u8>)],
        timestamp: Option<i64>,
    ) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let mut rec = BaseRecord::with_opaque_to(topic, index)
                .key(key)
                .payload(value);
            if let Some(p) = partition {
                rec = rec.partition(p);
            }
            if let Some(ts) = timestamp {
                rec = rec.timestamp(ts);
            }
            if !headers.is_empty() {
                let mut h = OwnedHeaders::new_with_capacity(headers.len());
                for (k, v) in headers {
                    h = h.insert(Header {
                        key: k,
                        value: Some(v),
                    });
                }
                rec = rec.headers(h);
            }
            match self.inner.send(rec) {
                Ok(()) => return,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    assert!(
                        Instant::now() < deadline,
                        "producer queue stayed full for 120 s"
                    );
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err((e, _)) => panic!(
                    "enqueue record {index}: {e} (fatal error: {:?})",
                    self.inner.client().fatal_error()
                ),
            }
        }
    }

    /// Waits until every enqueued record has a delivery report (or `timeout`).
    pub fn flush(&self, timeout: Duration) {
        if let Err(e) = self.inner.flush(timeout) {
            panic!(
                "producer flush failed after {timeout:?}: {e} ({} in flight)",
                self.inner.in_flight_count()
            );
        }
    }

    /// Delivery reports so far, in arrival order.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.deliveries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn acked_count(&self) -> usize {
        self.deliveries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|d| d.result.is_ok())
            .count()
    }

    pub fn in_flight(&self) -> i32 {
        self.inner.in_flight_count()
    }

    /// Every record's (partition, offset), indexed by the caller's record index; panics on any
    /// failed or missing delivery.
    pub fn all_delivered(&self, count: usize) -> Vec<(i32, i64)> {
        let mut out: Vec<Option<(i32, i64)>> = vec![None; count];
        let mut failures = Vec::new();
        for d in self.deliveries() {
            match d.result {
                Ok(po) => out[d.index] = Some(po),
                Err(e) => failures.push((d.index, e)),
            }
        }
        assert!(
            failures.is_empty(),
            "{} of {count} records failed, first: {:?}",
            failures.len(),
            &failures[..failures.len().min(5)]
        );
        out.into_iter()
            .enumerate()
            .map(|(i, d)| d.unwrap_or_else(|| panic!("no delivery report for record {i}")))
            .collect()
    }
}

/// Groups consumed records by partition, checking offsets are strictly increasing.
pub fn by_partition(records: &[ConsumedRecord]) -> Result<HashMap<i32, Vec<ConsumedRecord>>> {
    let mut out: HashMap<i32, Vec<ConsumedRecord>> = HashMap::new();
    for r in records {
        let v = out.entry(r.partition).or_default();
        if let Some(last) = v.last() {
            if r.offset <= last.offset {
                return Err(anyhow!(
                    "partition {} went from offset {} to {}",
                    r.partition,
                    last.offset,
                    r.offset
                ));
            }
        }
        v.push(r.clone());
    }
    Ok(out)
}
