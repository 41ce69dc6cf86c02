//! `strata perf produce|consume|e2e`: load generators reporting throughput and latency.
//!
//! Progress goes to stderr once a second; the final summary is one line on stdout of
//! space-separated `key=value` fields, stable for scripts:
//!
//! ```text
//! produce records=.. bytes=.. seconds=.. records_per_sec=.. mb_per_sec=.. p50_ms=.. p99_ms=.. p999_ms=.. max_ms=.. errors=..
//! consume records=.. bytes=.. seconds=.. records_per_sec=.. mb_per_sec=..
//! e2e records=.. p50_ms=.. p99_ms=.. p999_ms=.. max_ms=..
//! ```
//!
//! `mb_per_sec` is in MiB (2^20 bytes) per second, as Kafka's perf tools report it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use hdrhistogram::Histogram;
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

use super::common::{
    emit, latency_histogram, mib_per_sec, per_sec, percentile_fields, topic_partitions, Acks,
    Compression, ConnectArgs, ErrorReporter,
};
use super::produce::message_timeout;

/// Default `message.timeout.ms` for the load generators.
const MESSAGE_TIMEOUT_MS: u64 = 60_000;
/// Size of the e2e payload header: run id (u64 LE) then send time (u64 LE nanoseconds).
const E2E_HEADER: usize = 16;

#[derive(Subcommand, Debug)]
pub enum PerfCommand {
    /// Produce generated records as fast as possible (or at --rate); report throughput and
    /// send-to-acknowledgement latency.
    Produce(PerfProduceArgs),
    /// Consume records from the beginning of every partition; report throughput.
    Consume(PerfConsumeArgs),
    /// Produce at --rate while a consumer waits at the tail; report produce-to-consume latency.
    E2e(PerfE2eArgs),
}

#[derive(Args, Debug)]
pub struct PerfProduceArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// Topic to produce to.
    pub topic: String,
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
    /// Send record i to partition i % N explicitly (round-robin over partitions 0..N)
    /// instead of letting librdkafka's sticky partitioner choose.
    #[arg(long, value_name = "N")]
    pub partitions_hint: Option<u32>,
}

#[derive(Args, Debug)]
pub struct PerfConsumeArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// Topic to consume.
    pub topic: String,
    /// Number of records to consume.
    #[arg(short = 'n', long)]
    pub records: u64,
    /// Start at the beginning of every partition (always the case; accepted for clarity).
    #[arg(long)]
    pub from_beginning: bool,
    /// librdkafka `fetch.max.bytes`.
    #[arg(long, value_name = "BYTES")]
    pub fetch_max_bytes: Option<u64>,
    /// librdkafka `max.partition.fetch.bytes`.
    #[arg(long, value_name = "BYTES")]
    pub max_partition_fetch_bytes: Option<u64>,
    /// Give up after this long without receiving a record.
    #[arg(long, default_value_t = 10_000, value_name = "MS")]
    pub timeout_ms: u64,
}

#[derive(Args, Debug)]
pub struct PerfE2eArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// Topic to produce to and consume from.
    pub topic: String,
    /// Number of records to send.
    #[arg(short = 'n', long)]
    pub records: u64,
    /// Records per second (must be > 0).
    #[arg(long, default_value_t = 1000)]
    pub rate: u64,
    /// Size of each record's value, in bytes (at least 16).
    #[arg(short = 's', long, default_value_t = 100, value_name = "BYTES")]
    pub record_size: usize,
    /// Acknowledgements the producer waits for.
    #[arg(long, value_enum, default_value = "1", allow_hyphen_values = true)]
    pub acks: Acks,
    /// Producer `linger.ms` (0 sends each record as soon as possible).
    #[arg(long, default_value_t = 0)]
    pub linger_ms: u64,
    /// Give up after this long without receiving a record once all were sent.
    #[arg(long, default_value_t = 10_000, value_name = "MS")]
    pub timeout_ms: u64,
}

impl PerfCommand {
    pub fn conn(&self) -> &ConnectArgs {
        match self {
            PerfCommand::Produce(a) => &a.conn,
            PerfCommand::Consume(a) => &a.conn,
            PerfCommand::E2e(a) => &a.conn,
        }
    }
}

pub fn run(cmd: PerfCommand) -> anyhow::Result<()> {
    match cmd {
        PerfCommand::Produce(args) => produce(args),
        PerfCommand::Consume(args) => consume(args),
        PerfCommand::E2e(args) => e2e(args),
    }
}

/// Producer context recording send-to-delivery latency. The delivery opaque is the send
/// time in nanoseconds since `origin`.
struct LatencyRecorder {
    origin: Instant,
    histogram: Mutex<Histogram<u64>>,
    acked: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl LatencyRecorder {
    fn new(origin: Instant) -> anyhow::Result<LatencyRecorder> {
        Ok(LatencyRecorder {
            origin,
            histogram: Mutex::new(latency_histogram()?),
            acked: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            first_error: Mutex::new(None),
        })
    }

    fn now_nanos(&self) -> u64 {
        nanos_since(self.origin)
    }

    fn histogram(&self) -> Histogram<u64> {
        match self.histogram.lock() {
            Ok(h) => h.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn first_error(&self) -> Option<String> {
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

fn nanos_since(origin: Instant) -> u64 {
    u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Runs `body` while a thread prints `progress()` to stderr every second.
fn with_progress<R>(progress: impl FnMut() -> String + Send, body: impl FnOnce() -> R) -> R {
    let (stop, stopped) = mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let mut progress = progress;
        scope.spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(Duration::from_secs(1))
            {
                eprintln!("{}", progress());
            }
        });
        let result = body();
        drop(stop);
        result
    })
}

/// Counts per interval for progress lines: returns the rate since the previous call.
struct IntervalRate {
    last: Instant,
    last_count: u64,
}

impl IntervalRate {
    fn new() -> IntervalRate {
        IntervalRate {
            last: Instant::now(),
            last_count: 0,
        }
    }

    fn rate(&mut self, count: u64) -> f64 {
        let now = Instant::now();
        let rate = per_sec(
            count.saturating_sub(self.last_count),
            now.duration_since(self.last).as_secs_f64(),
        );
        self.last = now;
        self.last_count = count;
        rate
    }
}

/// A payload of `size` pseudo-random uppercase letters (compressible like text, not trivially).
pub fn make_payload(size: usize) -> Vec<u8> {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..size)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            b'A' + (state % 26) as u8
        })
        .collect()
}

/// Sleeps until record `index` is due when sending `rate` records per second from `start`.
fn pace(start: Instant, index: u64, rate: u64) {
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
fn send_retrying<C: ProducerContext<DeliveryOpaque = usize> + 'static>(
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

fn producer_config(
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

fn produce(args: PerfProduceArgs) -> anyhow::Result<()> {
    let conn = &args.conn;
    if args.partitions_hint == Some(0) {
        bail!("--partitions-hint must be > 0");
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
    let partitions = topic_partitions(conn, producer.client(), &args.topic)?;
    if let Some(hint) = args.partitions_hint {
        if hint as usize > partitions.len() {
            bail!(
                "--partitions-hint {hint} exceeds the topic's {} partitions",
                partitions.len()
            );
        }
    }

    let payload = make_payload(args.record_size);
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
                let mut record =
                    BaseRecord::with_opaque_to(&args.topic, opaque).payload(&payload[..]);
                if let Some(hint) = args.partitions_hint {
                    record = record.partition((i % u64::from(hint)) as i32);
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
    emit(format_args!(
        "produce records={acked} bytes={bytes} seconds={seconds:.2} records_per_sec={:.0} \
         mb_per_sec={:.1} {} errors={failed}",
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

/// A group-less consumer assigned to every partition of `topic`, each at the offset
/// `offset_of` gives it.
fn assigned_consumer(
    conn: &ConnectArgs,
    topic: &str,
    extra: &[(&str, &str)],
    offset_of: impl Fn(&BaseConsumer, i32) -> anyhow::Result<Offset>,
) -> anyhow::Result<BaseConsumer> {
    // librdkafka's assign() needs a group.id; nothing joins or commits to it.
    let mut defaults = vec![
        ("group.id", super::consume::GROUPLESS_ID),
        // librdkafka pauses a partition's fetching this long once its local queue holds
        // `queued.min.messages`; the 1 s default idles a fast consumer most of the time.
        ("fetch.queue.backoff.ms", "10"),
        ("enable.auto.commit", "false"),
        ("enable.auto.offset.store", "false"),
    ];
    defaults.extend_from_slice(extra);
    let consumer: BaseConsumer = conn
        .client_config(&defaults)
        .create()
        .context("creating consumer")?;
    let partitions = topic_partitions(conn, consumer.client(), topic)?;
    let mut tpl = TopicPartitionList::with_capacity(partitions.len());
    for p in partitions {
        let offset = offset_of(&consumer, p)?;
        tpl.add_partition_offset(topic, p, offset)
            .with_context(|| format!("partition {p}"))?;
    }
    consumer.assign(&tpl).context("assigning partitions")?;
    Ok(consumer)
}

fn consume(args: PerfConsumeArgs) -> anyhow::Result<()> {
    let conn = &args.conn;
    let fetch_max = args.fetch_max_bytes.map(|b| b.to_string());
    let partition_max = args.max_partition_fetch_bytes.map(|b| b.to_string());
    let mut extra = Vec::new();
    if let Some(b) = &fetch_max {
        extra.push(("fetch.max.bytes", b.as_str()));
    }
    if let Some(b) = &partition_max {
        extra.push(("max.partition.fetch.bytes", b.as_str()));
    }
    let consumer = assigned_consumer(conn, &args.topic, &extra, |_, _| Ok(Offset::Beginning))?;

    let idle_limit = Duration::from_millis(args.timeout_ms);
    let count = AtomicU64::new(0);
    let mut bytes: u64 = 0;
    let mut errors = ErrorReporter::default();
    let mut interval = IntervalRate::new();
    let start = Instant::now();
    let mut end = start;
    with_progress(
        || {
            let n = count.load(Ordering::Relaxed);
            format!(
                "perf consume: records={n} rate={:.0} records/s",
                interval.rate(n)
            )
        },
        || {
            let mut last_record = Instant::now();
            let mut n: u64 = 0;
            while n < args.records {
                match consumer.poll(Duration::from_millis(100)) {
                    Some(Ok(msg)) => {
                        n += 1;
                        bytes += (msg.payload_len() + msg.key().map_or(0, <[u8]>::len)) as u64;
                        count.store(n, Ordering::Relaxed);
                        last_record = Instant::now();
                        end = last_record;
                    }
                    Some(Err(KafkaError::PartitionEOF(_))) => {}
                    Some(Err(e)) => errors.report(&format!("consume error: {e}")),
                    None => {}
                }
                if last_record.elapsed() >= idle_limit {
                    break;
                }
            }
        },
    );
    let records = count.load(Ordering::Relaxed);
    let seconds = end.duration_since(start).as_secs_f64();
    emit(format_args!(
        "consume records={records} bytes={bytes} seconds={seconds:.2} records_per_sec={:.0} \
         mb_per_sec={:.1}",
        per_sec(records, seconds),
        mib_per_sec(bytes, seconds),
    ))?;
    if records < args.records {
        bail!(
            "consumed only {records} of {} records: nothing received for {} ms",
            args.records,
            args.timeout_ms
        );
    }
    Ok(())
}

/// The e2e payload header: run id and send time.
pub fn encode_e2e_header(buf: &mut [u8], run_id: u64, sent_nanos: u64) {
    buf[..8].copy_from_slice(&run_id.to_le_bytes());
    buf[8..E2E_HEADER].copy_from_slice(&sent_nanos.to_le_bytes());
}

/// The send time in a payload of this run, `None` for other records.
pub fn decode_e2e_header(payload: &[u8], run_id: u64) -> Option<u64> {
    let id = payload.get(..8)?;
    let sent = payload.get(8..E2E_HEADER)?;
    if u64::from_le_bytes(id.try_into().ok()?) != run_id {
        return None;
    }
    Some(u64::from_le_bytes(sent.try_into().ok()?))
}

fn e2e(args: PerfE2eArgs) -> anyhow::Result<()> {
    let conn = &args.conn;
    if args.rate == 0 {
        bail!("--rate must be > 0");
    }
    if args.record_size < E2E_HEADER {
        bail!("--record-size must be at least {E2E_HEADER}");
    }
    // Tail position pinned explicitly at the high watermark, so records produced after
    // assignment cannot be skipped by a late "end" resolution.
    let consumer = assigned_consumer(conn, &args.topic, &[], |c, p| {
        let (_, high) = c
            .fetch_watermarks(&args.topic, p, conn.request_timeout())
            .with_context(|| format!("watermarks of partition {p}"))?;
        Ok(Offset::Offset(high))
    })?;
    let origin = Instant::now();
    let producer: ThreadedProducer<LatencyRecorder> =
        producer_config(conn, args.acks, args.linger_ms, None, Compression::None)
            .create_with_context(LatencyRecorder::new(origin)?)
            .context("creating producer")?;
    let ctx = producer.context().clone();
    let run_id = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id()).rotate_left(32);

    let sent = AtomicU64::new(0);
    let received = AtomicU64::new(0);
    let producer_done = AtomicBool::new(false);
    let idle_limit = Duration::from_millis(args.timeout_ms);
    let mut histogram = latency_histogram()?;

    let (send_result, consumer_errors) = with_progress(
        || {
            format!(
                "perf e2e: sent={} acked={} received={}",
                sent.load(Ordering::Relaxed),
                ctx.acked.load(Ordering::Relaxed),
                received.load(Ordering::Relaxed)
            )
        },
        || {
            std::thread::scope(|scope| {
                let consumer_thread = scope.spawn(|| {
                    let mut errors = ErrorReporter::default();
                    let mut n: u64 = 0;
                    let mut last_record = Instant::now();
                    while n < args.records {
                        match consumer.poll(Duration::from_millis(50)) {
                            Some(Ok(msg)) => {
                                let now = nanos_since(origin);
                                let Some(sent_at) =
                                    msg.payload().and_then(|p| decode_e2e_header(p, run_id))
                                else {
                                    continue;
                                };
                                histogram
                                    .saturating_record((now.saturating_sub(sent_at) / 1000).max(1));
                                n += 1;
                                received.store(n, Ordering::Relaxed);
                                last_record = Instant::now();
                            }
                            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
                            Some(Err(e)) => errors.report(&format!("consume error: {e}")),
                        }
                        if producer_done.load(Ordering::Acquire)
                            && last_record.elapsed() >= idle_limit
                        {
                            break;
                        }
                    }
                    errors.total
                });

                let mut payload = make_payload(args.record_size);
                let start = Instant::now();
                let send_result = (|| -> anyhow::Result<()> {
                    for i in 0..args.records {
                        pace(start, i, args.rate);
                        let now = ctx.now_nanos();
                        encode_e2e_header(&mut payload, run_id, now);
                        let record = BaseRecord::with_opaque_to(&args.topic, now as usize)
                            .payload(&payload[..]);
                        send_retrying(&producer, record)?;
                        sent.store(i + 1, Ordering::Relaxed);
                    }
                    producer
                        .flush(message_timeout(conn, MESSAGE_TIMEOUT_MS) + Duration::from_secs(5))
                        .context("flushing")
                })();
                producer_done.store(true, Ordering::Release);
                let consumer_errors = consumer_thread.join().unwrap_or(0);
                (send_result, consumer_errors)
            })
        },
    );
    let records = histogram.len();
    emit(format_args!(
        "e2e records={records} {}",
        percentile_fields(&histogram)
    ))?;
    send_result?;
    let failed = ctx.failed.load(Ordering::Relaxed);
    if failed > 0 {
        bail!(
            "{failed} record(s) failed to produce; first error: {}",
            ctx.first_error().unwrap_or_default()
        );
    }
    if records < args.records {
        bail!(
            "received only {records} of {} records ({consumer_errors} consume errors)",
            args.records
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_is_deterministic_letters() {
        let p = make_payload(1000);
        assert_eq!(p.len(), 1000);
        assert!(p.iter().all(u8::is_ascii_uppercase));
        assert_eq!(p, make_payload(1000));
        assert!(make_payload(0).is_empty());
    }

    #[test]
    fn e2e_header_round_trip() {
        let mut buf = vec![0u8; 32];
        encode_e2e_header(&mut buf, 42, 123_456_789);
        assert_eq!(decode_e2e_header(&buf, 42), Some(123_456_789));
        assert_eq!(decode_e2e_header(&buf, 43), None);
        assert_eq!(decode_e2e_header(&buf[..10], 42), None);
    }

    #[test]
    fn interval_rate_counts_differences() {
        let mut r = IntervalRate::new();
        std::thread::sleep(Duration::from_millis(20));
        let rate = r.rate(100);
        assert!(rate > 0.0 && rate <= 100.0 / 0.02 + 1.0, "{rate}");
        assert_eq!(r.last_count, 100);
    }
}
