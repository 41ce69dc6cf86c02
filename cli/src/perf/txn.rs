//! `strata perf txn`: a transactional producer's throughput and commit latency, the same
//! records without transactions for comparison (`--plain`), and with `--e2e` the
//! produce-to-consume latency seen by a read_committed consumer at the tail.
//!
//! Each transaction sends `--records-per-txn` records round-robin over the topic's partitions
//! (`--partitions` of them: the partitions one transaction spans), waits for their acknowledgements and commits;
//! the commit time measured is therefore the EndTxn round alone (markers written on every
//! partition before the coordinator answers), not the produce of the records before it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::Args;
use hdrhistogram::Histogram;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};

use super::e2e::{encode_e2e_header, receive, run_id, tail_consumer, Until, E2E_HEADER};
use super::produce::{make_payload, pace, producer_config, send_retrying, LatencyRecorder};
use super::report::{with_progress, IntervalRate};
use super::setup::ensure_topic;
use crate::common::{
    emit, latency_histogram, mib_per_sec, per_sec, percentile_fields, Acks, Compression,
    ConnectArgs,
};

#[derive(Args, Debug)]
pub struct PerfTxnArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// Topic to produce to; created with `--partitions` partitions when missing.
    pub topic: String,
    /// Number of records to send (rounded up to whole transactions).
    #[arg(short = 'n', long)]
    pub records: u64,
    /// Records in each transaction.
    #[arg(long, default_value_t = 100, value_name = "R")]
    pub records_per_txn: u64,
    /// Partitions of the topic, which every transaction spans (records go round-robin).
    #[arg(long, default_value_t = 1, value_name = "P")]
    pub partitions: i32,
    /// Size of each record's value, in bytes (at least 16 with `--e2e`).
    #[arg(short = 's', long, default_value_t = 100, value_name = "BYTES")]
    pub record_size: usize,
    /// Transactions per second; 0 = as fast as they commit.
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// librdkafka `linger.ms`.
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    /// The same records from an idempotent producer without transactions (the baseline).
    #[arg(long, conflicts_with = "e2e")]
    pub plain: bool,
    /// Also consume at the tail with `isolation.level=read_committed` and report each
    /// record's produce-to-consume latency (which includes waiting for its commit).
    #[arg(long)]
    pub e2e: bool,
    /// With `--e2e`: give up after this long without a record once all were committed.
    #[arg(long, default_value_t = 10_000, value_name = "MS")]
    pub timeout_ms: u64,
}

/// Time to wait for one transaction API call (init, commit).
const TXN_CALL_TIMEOUT: Duration = Duration::from_secs(60);

pub(super) fn run(args: PerfTxnArgs) -> anyhow::Result<()> {
    let conn = &args.conn;
    if args.records_per_txn == 0 {
        bail!("--records-per-txn must be at least 1");
    }
    if args.e2e && args.record_size < E2E_HEADER {
        bail!("--record-size must be at least {E2E_HEADER} with --e2e");
    }
    let partitions = ensure_topic(conn, &args.topic, Some(args.partitions), 1)?;
    let run_id = run_id();
    let consumer = if args.e2e {
        let extra = [("isolation.level", "read_committed")];
        Some(tail_consumer(conn, &args.topic, &extra)?)
    } else {
        None
    };

    let origin = Instant::now();
    let mut config = producer_config(conn, Acks::All, args.linger_ms, None, Compression::None);
    config.set("enable.idempotence", "true");
    if !args.plain {
        config.set("transactional.id", format!("strata-perf-txn-{run_id:x}"));
    }
    let producer: ThreadedProducer<LatencyRecorder> = config
        .create_with_context(LatencyRecorder::new(origin)?)
        .context("creating producer")?;
    if !args.plain {
        producer
            .init_transactions(TXN_CALL_TIMEOUT)
            .context("init_transactions")?;
    }
    let ctx = producer.context().clone();
    let transactions = args.records.div_ceil(args.records_per_txn);
    let committed = AtomicU64::new(0);
    let received = AtomicU64::new(0);
    let producer_done = AtomicBool::new(false);
    let mut commits = latency_histogram()?;
    let mut e2e = latency_histogram()?;
    let mut interval = IntervalRate::new();
    let start = Instant::now();

    let (sent, seconds, consumer_errors) = with_progress(
        || {
            let n = ctx.acked.load(Ordering::Relaxed);
            format!(
                "perf txn: acked={n} transactions={} received={} rate={:.0} records/s",
                committed.load(Ordering::Relaxed),
                received.load(Ordering::Relaxed),
                interval.rate(n)
            )
        },
        || {
            std::thread::scope(|scope| {
                let reader = consumer.as_ref().map(|consumer| {
                    let (received, producer_done, e2e) = (&received, &producer_done, &mut e2e);
                    let idle_limit = Duration::from_millis(args.timeout_ms);
                    scope.spawn(move || {
                        let until = Until {
                            // Until idle: the count is known only at the end.
                            limit: u64::MAX,
                            idle: idle_limit,
                            producer_done,
                        };
                        receive(consumer, (run_id, origin), until, received, e2e)
                    })
                });
                let mut payload = make_payload(args.record_size);
                let sent = (|| -> anyhow::Result<u64> {
                    let mut sent = 0u64;
                    for t in 0..transactions {
                        pace(start, t, args.rate);
                        if !args.plain {
                            producer.begin_transaction().context("begin_transaction")?;
                        }
                        let n = args.records_per_txn.min(args.records - sent);
                        for i in 0..n {
                            let now = ctx.now_nanos();
                            if args.e2e {
                                encode_e2e_header(&mut payload, run_id, now);
                            }
                            let partition = ((sent + i) % partitions as u64) as i32;
                            let record = BaseRecord::with_opaque_to(&args.topic, now as usize)
                                .payload(&payload[..])
                                .partition(partition);
                            send_retrying(&producer, record)?;
                        }
                        sent += n;
                        if !args.plain {
                            wait_delivered(&ctx, sent)?;
                            let began = Instant::now();
                            producer
                                .commit_transaction(TXN_CALL_TIMEOUT)
                                .context("commit_transaction")?;
                            let micros = began.elapsed().as_micros() as u64;
                            commits.saturating_record(micros.max(1));
                        }
                        committed.store(t + 1, Ordering::Relaxed);
                    }
                    wait_delivered(&ctx, sent)?;
                    Ok(sent)
                })();
                // The producer's time: the consumer idles a while after the last record.
                let seconds = start.elapsed().as_secs_f64();
                producer_done.store(true, Ordering::Release);
                let consumer_errors = reader.map_or(0, |r| r.join().unwrap_or(0));
                (sent, seconds, consumer_errors)
            })
        },
    );
    let acked = ctx.acked.load(Ordering::Relaxed);
    let bytes = acked * args.record_size as u64;
    let e2e_fields = if args.e2e {
        format!(" e2e_records={} {}", e2e.len(), prefixed("e2e_", &e2e))
    } else {
        String::new()
    };
    emit(format_args!(
        "txn mode={} records={acked} transactions={} records_per_txn={} partitions={partitions} \
         seconds={seconds:.2} records_per_sec={:.0} mb_per_sec={:.1} txns_per_sec={:.1} {}{e2e_fields} \
         errors={}",
        if args.plain { "plain" } else { "transactional" },
        committed.load(Ordering::Relaxed),
        args.records_per_txn,
        per_sec(acked, seconds),
        mib_per_sec(bytes, seconds),
        committed.load(Ordering::Relaxed) as f64 / seconds.max(f64::EPSILON),
        prefixed("commit_", &commits),
        ctx.failed.load(Ordering::Relaxed),
    ))?;
    let sent = sent?;
    let failed = ctx.failed.load(Ordering::Relaxed);
    if failed > 0 {
        bail!(
            "{failed} record(s) failed; first error: {}",
            ctx.first_error().unwrap_or_default()
        );
    }
    if args.e2e && (e2e.len() as u64) < sent {
        bail!(
            "the read_committed consumer received only {} of {sent} records \
             ({consumer_errors} consume errors)",
            e2e.len()
        );
    }
    Ok(())
}

/// Waits until librdkafka reported the delivery of all `sent` records (the producer's
/// `flush` polls in 100 ms steps, which would hide the commit time under its own).
fn wait_delivered(ctx: &LatencyRecorder, sent: u64) -> anyhow::Result<()> {
    let deadline = Instant::now() + TXN_CALL_TIMEOUT;
    while ctx.acked.load(Ordering::Relaxed) + ctx.failed.load(Ordering::Relaxed) < sent {
        if Instant::now() > deadline {
            bail!("records not acknowledged within {TXN_CALL_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    Ok(())
}

/// [`percentile_fields`] with each key prefixed (`commit_p50_ms=..`).
fn prefixed(prefix: &str, h: &Histogram<u64>) -> String {
    percentile_fields(h)
        .split(' ')
        .map(|field| format!("{prefix}{field}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_gets_the_prefix() {
        let mut h = latency_histogram().unwrap();
        h.saturating_record(1500);
        let fields = prefixed("commit_", &h);
        assert!(fields.starts_with("commit_p50_ms="), "{fields}");
        assert_eq!(fields.matches("commit_").count(), 4, "{fields}");
    }
}
