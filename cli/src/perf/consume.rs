//! `strata perf consume`: every partition read from the beginning by one consumer, group-less
//! (assigned every partition) or, with `--group`, as the one member of a new consumer group
//! (`--group-id`: of a named one, resuming from its committed offsets);
//! and the assigned consumer `perf e2e` shares.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::Args;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::broker_cpu::{BrokerCpu, BrokerCpuArgs};
use super::report::{ms, with_progress, IntervalRate};
use super::setup::{topic_names, unique_group};
use crate::common::{emit, mib_per_sec, per_sec, topic_partitions, ConnectArgs, ErrorReporter};

#[derive(Args, Debug)]
pub struct PerfConsumeArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// Topic to consume (with `--topics K`: `TOPIC-0` .. `TOPIC-<K-1>`).
    pub topic: String,
    /// Consume this many topics named after TOPIC.
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub topics: u32,
    /// Join a new consumer group (subscribe, committing offsets as librdkafka does by
    /// default) instead of assigning every partition; throughput counts from the first
    /// record, and the time to it is reported as `join_ms`.
    #[arg(long)]
    pub group: bool,
    /// Join this named consumer group instead of a new one: it resumes from the group's
    /// committed offsets (a partition without one from the beginning).
    #[arg(long, value_name = "GROUP", conflicts_with = "group")]
    pub group_id: Option<String>,
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
    #[command(flatten)]
    pub broker: BrokerCpuArgs,
}

/// A group-less consumer assigned to every partition of `topic`, each at the offset
/// `offset_of` gives it.
pub(super) fn assigned_consumer(
    conn: &ConnectArgs,
    topics: &[String],
    extra: &[(&str, &str)],
    offset_of: impl Fn(&BaseConsumer, i32) -> anyhow::Result<Offset>,
) -> anyhow::Result<BaseConsumer> {
    // librdkafka's assign() needs a group.id; nothing joins or commits to it.
    let mut defaults = vec![
        ("group.id", crate::consume::GROUPLESS_ID),
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
    let mut tpl = TopicPartitionList::new();
    for topic in topics {
        for p in topic_partitions(conn, consumer.client(), topic)? {
            let offset = offset_of(&consumer, p)?;
            tpl.add_partition_offset(topic, p, offset)
                .with_context(|| format!("{topic} partition {p}"))?;
        }
    }
    consumer.assign(&tpl).context("assigning partitions")?;
    Ok(consumer)
}

/// The one member of consumer group `name` (a new group when `None`) subscribed to `topics`,
/// reading from the group's committed offsets or else from the beginning.
fn group_consumer(
    conn: &ConnectArgs,
    name: Option<&str>,
    topics: &[String],
    extra: &[(&str, &str)],
) -> anyhow::Result<BaseConsumer> {
    let group = name.map_or_else(|| unique_group("perf-consume"), str::to_string);
    let mut settings = vec![
        ("group.id", group.as_str()),
        ("auto.offset.reset", "earliest"),
        ("fetch.queue.backoff.ms", "10"),
    ];
    settings.extend_from_slice(extra);
    let consumer: BaseConsumer = conn
        .client_config(&settings)
        .create()
        .context("creating consumer")?;
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    consumer.subscribe(&names).context("subscribing")?;
    Ok(consumer)
}

pub(super) fn run(args: PerfConsumeArgs) -> anyhow::Result<()> {
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
    let topics = topic_names(&args.topic, args.topics)?;
    let grouped = args.group || args.group_id.is_some();
    let consumer = if grouped {
        group_consumer(conn, args.group_id.as_deref(), &topics, &extra)?
    } else {
        assigned_consumer(conn, &topics, &extra, |_, _| Ok(Offset::Beginning))?
    };
    let broker = BrokerCpu::start(&args.broker)?;

    let idle_limit = Duration::from_millis(args.timeout_ms);
    let count = AtomicU64::new(0);
    let mut bytes: u64 = 0;
    let mut errors = ErrorReporter::default();
    let mut interval = IntervalRate::new();
    let mut start = Instant::now();
    let mut end = start;
    let mut join = None;
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
                        if grouped && join.is_none() {
                            join = Some(start.elapsed());
                            start = Instant::now();
                        }
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
    let seconds = end.saturating_duration_since(start).as_secs_f64();
    let join = join
        .map(|j| format!(" join_ms={}", ms(j)))
        .unwrap_or_default();
    let broker = match &broker {
        Some(b) => b.fields(bytes)?,
        None => String::new(),
    };
    emit(format_args!(
        "consume records={records} bytes={bytes} seconds={seconds:.2} records_per_sec={:.0} \
         mb_per_sec={:.1}{join}{broker}",
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
