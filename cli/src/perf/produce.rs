//! `strata perf produce`: records as fast as possible (or at `--rate`), with the
//! send-to-acknowledgement latency of each; and the producer pieces `perf e2e` shares.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::Args;
use hdrhistogram::Histogram;
use rdkafka::client::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};

use super::broker_cpu::{BrokerCpu, BrokerCpuArgs};
use super::report::{nanos_since, with_progress, IntervalRate};
use super::setup::{ensure_topics, topic_names};
use crate::common::{
    emit, latency_histogram, mib_per_sec, per_sec, percentile_fields, topic_partitions, Acks,
    Compression, ConnectArgs,
};
use crate::produce::message_timeout;

/// Default `message.timeout.ms` for the load generators.
pub(super) const MESSAGE_TIMEOUT_MS: u64 = 60_000;

#[derive(Args, Debug)]
pub struct PerfProduceArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// Topic to produce to (with `--topics K`: `TOPIC-0` .. `TOPIC-<K-1>`, in turn).
    pub topic: String,
    /// Produce to this many topics named after TOPIC.
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub topics: u32,
    /// Create missing topics with this many partitions (replication factor: the broker's
    /// default); an existing topic with another count is an error.
    #[arg(long, value_name = "N")]
    pub partitions: Option<i32>,
    /// Number of records to send.
    #[arg(short = 'n', long)]
    pub records: u64,
    /// Size of each record's value, in bytes.
    #[arg(short = 's', long, default_value_t = 100, value_name = "BYTES")]
    pub record_size: usize,
    /// Acknowledgements to wait for.
    #[arg(long, value_enum, default_value = "1", allow_hyphen_values = true)]
    pub acks: Acks,
    /// librdkafka `linger.ms`.
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    /// librdkafka `batch.size`, in bytes.
    #[arg(long, default_value_t = 1_048_576)]
    pub batch_size: u64,
    /// Compression codec.
    #[arg(long, value_enum, default_value = "none")]
    pub compression: Compression,
    /// Target records per second; 0 = unlimited.
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Give every record its own pseudo-random letters (by default all records carry the
    /// same value): for what compresses or encodes values downstream, such as Parquet.
    #[arg(long)]
    pub distinct_values: bool,
    /// Make every value a distinct JSON object of the record size: `id` (the record's
    /// index), `amount`, `customer` and a `note` of pseudo-random letters (for
    /// `iceberg.mode=value_json` topics; needs --record-size ≥ 96).
    #[arg(long, conflicts_with = "distinct_values")]
    pub json_values: bool,
    /// Send record i to partition i % N explicitly (round-robin over partitions 0..N)
    /// instead of letting librdkafka's sticky partitioner choose.
    #[arg(long, value_name = "N")]
    pub partitions_hint: Option<u32>,
    #[command(flatten)]
    pub broker: BrokerCpuArgs,
}

/// Producer context recording send-to-delivery latency. The delivery opaque is the send
/// time in nanoseconds since `origin`.
pub(super) struct LatencyRecorder {
    origin: Instant,
    histogram: Mutex<Histogram<u64>>,
    pub(super) acked: AtomicU64,
    pub(super) failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl LatencyRecorder {
    pub(super) fn new(origin: Instant) -> anyhow::Result<LatencyRecorder> {
        Ok(LatencyRecorder {
            origin,
            histogram: Mutex::new(latency_histogram()?),
            acked: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            first_error: Mutex::new(None),
        })
    }

    pub(super) fn now_nanos(&self) -> u64 {
        nanos_since(self.origin)
    }

    pub(super) fn histogram(&self) -> Histogram<u64> {
        match self.histogram.lock() {
            Ok(h) => h.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub(super) fn first_error(&self) -> Option<String> {
        match self.first_error.lock() {
            Ok(e) => e.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

impl ClientContext for LatencyRecorder {}

impl ProducerContext for LatencyRecorder {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, sent_nanos: usize) {
        match result {
            Ok(_) => {
                let micros = self.now_nanos().saturating_sub(sent_nanos as u64) / 1000;
                if let Ok(mut h) = self.histogram.lock() {
                    h.saturating_record(micros.max(1));
                }
                self.acked.fetch_add(1, Ordering::Relaxed);
            }
            Err((err, _)) => {
                if self.failed.fetch_add(1, Ordering::Relaxed) == 0 {
                    if let Ok(mut first) = self.first_error.lock() {
                        *first = Some(err.to_string());
                    }
                }
            }
        }
    }
}

/// A payload of `size` pseudo-random uppercase letters (compressible like text, not trivially).
pub fn make_payload(size: usize) -> Vec<u8> {
    let mut out = vec![0; size];
    fill_letters(&mut out, 0);
    out
}

/// `buf` filled with pseudo-random uppercase letters from a seed (the same seed, the same
/// letters).
fn fill_letters(buf: &mut [u8], seed: u64) {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15 ^ seed.wrapping_mul(0x2545_F491_4F6C_DD1D);
    for b in buf {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        *b = b'A' + (state % 26) as u8;
    }
}

/// Fills `buf` with a JSON object of exactly its length for record `i` (see `--json-values`).
fn fill_json(buf: &mut [u8], i: u64) {
    let head = format!(
        r#"{{"id":{i},"amount":{}.{:02},"customer":"c{}","note":""#,
        i % 10_000,
        i % 100,
        i % 1000
    );
    let tail = b"\"}";
    let fill = buf.len().saturating_sub(head.len() + tail.len());
    buf[..head.len()].copy_from_slice(head.as_bytes());
    fill_letters(&mut buf[head.len()..head.len() + fill], i.wrapping_add(1));
    buf[head.len() + fill..].copy_from_slice(tail);
}

/// Sleeps until record `index` is due when sending `rate` records per second from `start`.
pub(super) fn pace(start: Instant, index: u64, rate: u64) {
    if rate == 0 {
        return;
    }
    let due = start + Duration::from_secs_f64(index as f64 / rate as f64);
    let now = Instant::now();
    if due > now {
        std::thread::sleep(due - now);
    }
}

/// Sends `record`, waiting for queue space while librdkafka's queue is full.
#[allow(clippy::result_large_err)]
pub(super) fn send_retrying<C: ProducerContext<DeliveryOpaque = usize> + 'static>(
    producer: &ThreadedProducer<C>,
    mut record: BaseRecord<'_, [u8], [u8], usize>,
) -> anyhow::Result<()> {
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                record = r;
                producer.poll(Duration::from_millis(1));
            }
            Err((e @ KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge), _)) => {
                bail!("send: {e} (librdkafka's limit is -X message.max.bytes, default 1000000)")
            }
            Err((e, _)) => bail!("send: {e}"),
        }
    }
}

pub(super) fn producer_config(
    conn: &ConnectArgs,
    acks: Acks,
    linger_ms: u64,
    batch_size: Option<u64>,
    compression: Compression,
) -> rdkafka::ClientConfig {
    let linger = linger_ms.to_string();
    let batch = batch_size.map(|b| b.to_string());
    let timeout = MESSAGE_TIMEOUT_MS.to_string();
    let mut defaults = vec![
        ("acks", acks.as_config()),
        ("linger.ms", linger.as_str()),
        ("compression.type", compression.as_config()),
        ("message.timeout.ms", timeout.as_str()),
    ];
    if let Some(batch) = &batch {
        defaults.push(("batch.size", batch.as_str()));
    }
    conn.client_config(&defaults)
}

pub(super) fn run(args: PerfProduceArgs) -> anyhow::Result<()> {
    let conn = &args.conn;
    if args.partitions_hint == Some(0) {
        bail!("--partitions-hint must be > 0");
    }
    if args.json_values && args.record_size < 96 {
        bail!("--json-values needs --record-size of at least 96 bytes");
    }
    let origin = Instant::now();
    let producer: ThreadedProducer<LatencyRecorder> = producer_config(
        conn,
        args.acks,
        args.linger_ms,
        Some(args.batch_size),
        args.compression,
    )
    .create_with_context(LatencyRecorder::new(origin)?)
    .context("creating producer")?;
    let topics = topic_names(&args.topic, args.topics)?;
    if args.partitions.is_some() {
        ensure_topics(conn, &topics, args.partitions, 1)?;
    }
    let partitions = topic_partitions(conn, producer.client(), &topics[0])?;
    if let Some(hint) = args.partitions_hint {
        if hint as usize > partitions.len() {
            bail!(
                "--partitions-hint {hint} exceeds the topic's {} partitions",
                partitions.len()
            );
        }
    }
    let broker = BrokerCpu::start(&args.broker)?;

    let mut payload = make_payload(args.record_size);
    let ctx = producer.context().clone();
    let sent = AtomicU64::new(0);
    let mut interval = IntervalRate::new();
    let start = Instant::now();
    let result = with_progress(
        || {
            let n = sent.load(Ordering::Relaxed);
            format!(
                "perf produce: sent={n} acked={} errors={} rate={:.0} records/s",
                ctx.acked.load(Ordering::Relaxed),
                ctx.failed.load(Ordering::Relaxed),
                interval.rate(n)
            )
        },
        || -> anyhow::Result<()> {
            for i in 0..args.records {
                pace(start, i, args.rate);
                let opaque = ctx.now_nanos() as usize;
                let k = u64::from(args.topics);
                let topic = &topics[(i % k) as usize];
                if args.distinct_values {
                    fill_letters(&mut payload, i + 1);
                }
                if args.json_values {
                    fill_json(&mut payload, i);
                }
                let mut record = BaseRecord::with_opaque_to(topic, opaque).payload(&payload[..]);
                if let Some(hint) = args.partitions_hint {
                    record = record.partition((i / k % u64::from(hint)) as i32);
                }
                send_retrying(&producer, record)?;
                sent.store(i + 1, Ordering::Relaxed);
            }
            producer
                .flush(message_timeout(conn, MESSAGE_TIMEOUT_MS) + Duration::from_secs(5))
                .context("flushing")
        },
    );
    let seconds = start.elapsed().as_secs_f64();
    let acked = ctx.acked.load(Ordering::Relaxed);
    let failed = ctx.failed.load(Ordering::Relaxed);
    let bytes = acked * args.record_size as u64;
    let broker = match &broker {
        Some(b) => b.fields(bytes)?,
        None => String::new(),
    };
    emit(format_args!(
        "produce records={acked} bytes={bytes} seconds={seconds:.2} records_per_sec={:.0} \
         mb_per_sec={:.1} {} errors={failed}{broker}",
        per_sec(acked, seconds),
        mib_per_sec(bytes, seconds),
        percentile_fields(&ctx.histogram()),
    ))?;
    result?;
    if failed > 0 {
        bail!(
            "{failed} record(s) failed; first error: {}",
            ctx.first_error().unwrap_or_default()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_values_are_one_object_of_the_record_size() {
        for (size, i) in [(96, 0), (96, u64::MAX), (1000, 12345)] {
            let mut buf = vec![0u8; size];
            fill_json(&mut buf, i);
            let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
            assert_eq!(v["id"], i, "{}", String::from_utf8_lossy(&buf));
        }
    }

    #[test]
    fn payload_is_deterministic_letters() {
        let p = make_payload(1000);
        assert_eq!(p.len(), 1000);
        assert!(p.iter().all(u8::is_ascii_uppercase));
        assert_eq!(p, make_payload(1000));
        assert!(make_payload(0).is_empty());
    }
}
