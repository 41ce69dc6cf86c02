//! `strata perf e2e`: records produced at `--rate` while a consumer waits at the tail of every
//! partition; reports produce-to-consume latency.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use clap::Args;
use hdrhistogram::Histogram;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::Offset;

use super::consume::assigned_consumer;
use super::produce::{
    make_payload, pace, producer_config, send_retrying, LatencyRecorder, MESSAGE_TIMEOUT_MS,
};
use super::report::{nanos_since, with_progress};
use crate::common::{
    emit, latency_histogram, percentile_fields, Acks, Compression, ConnectArgs, ErrorReporter,
};
use crate::produce::message_timeout;

/// Size of the e2e payload header: run id (u64 LE) then send time (u64 LE nanoseconds).
pub(super) const E2E_HEADER: usize = 16;

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
    /// Send record i to partition i % N over all N partitions, so every partition carries
    /// traffic (librdkafka's sticky partitioner fills one partition at a time).
    #[arg(long)]
    pub round_robin: bool,
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

/// A run id for the e2e header: records of other runs in the topic are not counted.
pub(super) fn run_id() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id()).rotate_left(32)
}

/// A consumer assigned every partition of `topic` at its high watermark: pinned explicitly, so
/// records produced after assignment cannot be skipped by a late "end" resolution.
pub(super) fn tail_consumer(
    conn: &ConnectArgs,
    topic: &str,
    extra: &[(&str, &str)],
) -> anyhow::Result<BaseConsumer> {
    let topics = [topic.to_string()];
    assigned_consumer(conn, &topics, extra, |c, p| {
        let (_, high) = c
            .fetch_watermarks(topic, p, conn.request_timeout())
            .with_context(|| format!("watermarks of partition {p}"))?;
        Ok(Offset::Offset(high))
    })
}

/// When [`receive`] stops: after `limit` records, or once the producer is done and nothing
/// came for `idle`.
pub(super) struct Until<'a> {
    pub limit: u64,
    pub idle: Duration,
    pub producer_done: &'a AtomicBool,
}

/// Records the latency of each of this run's records `consumer` receives, counting them in
/// `received`, until `until`; returns the consume errors seen.
pub(super) fn receive(
    consumer: &BaseConsumer,
    (run_id, origin): (u64, Instant),
    until: Until<'_>,
    received: &AtomicU64,
    histogram: &mut Histogram<u64>,
) -> u64 {
    let mut errors = ErrorReporter::default();
    let mut n: u64 = 0;
    let mut last_record = Instant::now();
    while n < until.limit {
        match consumer.poll(Duration::from_millis(50)) {
            Some(Ok(msg)) => {
                let now = nanos_since(origin);
                if let Some(sent_at) = msg.payload().and_then(|p| decode_e2e_header(p, run_id)) {
                    histogram.saturating_record((now.saturating_sub(sent_at) / 1000).max(1));
                    n += 1;
                    received.store(n, Ordering::Relaxed);
                    last_record = Instant::now();
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(e)) => errors.report(&format!("consume error: {e}")),
        }
        if until.producer_done.load(Ordering::Acquire) && last_record.elapsed() >= until.idle {
            break;
        }
    }
    errors.total
}

pub(super) fn run(args: PerfE2eArgs) -> anyhow::Result<()> {
    let conn = &args.conn;
    if args.rate == 0 {
        bail!("--rate must be > 0");
    }
    if args.record_size < E2E_HEADER {
        bail!("--record-size must be at least {E2E_HEADER}");
    }
    let consumer = tail_consumer(conn, &args.topic, &[])?;
    let spread = if args.round_robin {
        u32::try_from(consumer.assignment().context("assignment")?.count())?
    } else {
        0
    };
    let origin = Instant::now();
    let producer: ThreadedProducer<LatencyRecorder> =
        producer_config(conn, args.acks, args.linger_ms, None, Compression::None)
            .create_with_context(LatencyRecorder::new(origin)?)
            .context("creating producer")?;
    let ctx = producer.context().clone();
    let run_id = run_id();

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
                    let until = Until {
                        limit: args.records,
                        idle: idle_limit,
                        producer_done: &producer_done,
                    };
                    receive(
                        &consumer,
                        (run_id, origin),
                        until,
                        &received,
                        &mut histogram,
                    )
                });

                let mut payload = make_payload(args.record_size);
                let partitions = u64::from(spread);
                let start = Instant::now();
                let send_result = (|| -> anyhow::Result<()> {
                    for i in 0..args.records {
                        pace(start, i, args.rate);
                        let now = ctx.now_nanos();
                        encode_e2e_header(&mut payload, run_id, now);
                        let mut record = BaseRecord::with_opaque_to(&args.topic, now as usize)
                            .payload(&payload[..]);
                        if partitions > 0 {
                            record = record.partition((i % partitions) as i32);
                        }
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
    fn e2e_header_round_trip() {
        let mut buf = vec![0u8; 32];
        encode_e2e_header(&mut buf, 42, 123_456_789);
        assert_eq!(decode_e2e_header(&buf, 42), Some(123_456_789));
        assert_eq!(decode_e2e_header(&buf, 43), None);
        assert_eq!(decode_e2e_header(&buf[..10], 42), None);
    }
}
