//! `strata consume TOPIC`: print record values to stdout, one per line.
//!
//! Without `--group` the consumer assigns itself the topic's partitions (or `--partition`)
//! at the requested position and commits nothing; with `--group` it subscribes and lets the
//! group coordinator assign partitions, committing offsets automatically.

use std::io::{self, Write};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use clap::Args;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};

use super::common::{check_partition, topic_partitions, ConnectArgs, ErrorReporter};

/// The `group.id` of consumers that assign partitions themselves (never joined or committed).
pub const GROUPLESS_ID: &str = "strata-cli-assigned";

#[derive(Args, Debug)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// Topic to consume.
    pub topic: String,
    /// Start at the earliest offset (default: only new records).
    #[arg(long, conflicts_with_all = ["offset", "timestamp"])]
    pub from_beginning: bool,
    /// Start at this offset in every consumed partition (not with --group).
    #[arg(long, conflicts_with_all = ["timestamp", "group"])]
    pub offset: Option<i64>,
    /// Start at the first record with a timestamp >= MS (unix milliseconds; not with --group).
    #[arg(long, value_name = "MS", conflicts_with = "group")]
    pub timestamp: Option<i64>,
    /// Consume only this partition (not with --group).
    #[arg(short = 'P', long, conflicts_with = "group")]
    pub partition: Option<i32>,
    /// Exit after this many records.
    #[arg(short = 'n', long)]
    pub max_records: Option<u64>,
    /// Consume as a member of this consumer group (subscribe, committing offsets).
    #[arg(short = 'g', long)]
    pub group: Option<String>,
    /// Print each record's key before its value (tab-separated; `null` for none).
    #[arg(long)]
    pub print_key: bool,
    /// Print `partition:offset` before each record (tab-separated).
    #[arg(long)]
    pub print_offset: bool,
    /// Exit after this long without receiving a record.
    #[arg(long, value_name = "MS")]
    pub timeout_ms: Option<u64>,
}

/// Where an assigned (group-less) consumer starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    Beginning,
    End,
    Offset(i64),
    Timestamp(i64),
}

impl StartAt {
    pub fn from_args(args: &ConsumeArgs) -> anyhow::Result<StartAt> {
        Ok(if args.from_beginning {
            StartAt::Beginning
        } else if let Some(o) = args.offset {
            if o < 0 {
                bail!("--offset must be >= 0");
            }
            StartAt::Offset(o)
        } else if let Some(ts) = args.timestamp {
            if ts < 0 {
                bail!("--timestamp must be >= 0");
            }
            StartAt::Timestamp(ts)
        } else {
            StartAt::End
        })
    }
}

/// Writes one record as a line: `[partition:offset\t][key\t]value\n`.
pub fn write_record(
    out: &mut impl Write,
    partition: i32,
    offset: i64,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    print_key: bool,
    print_offset: bool,
) -> io::Result<()> {
    if print_offset {
        write!(out, "{partition}:{offset}\t")?;
    }
    if print_key {
        out.write_all(key.unwrap_or(b"null"))?;
        out.write_all(b"\t")?;
    }
    out.write_all(value.unwrap_or(b"null"))?;
    out.write_all(b"\n")
}

pub fn run(args: ConsumeArgs) -> anyhow::Result<()> {
    let conn = &args.conn;
    let start = StartAt::from_args(&args)?;
    let consumer: BaseConsumer = match &args.group {
        Some(group) => {
            let reset = if args.from_beginning {
                "earliest"
            } else {
                "latest"
            };
            conn.client_config(&[
                ("group.id", group),
                ("auto.offset.reset", reset),
                // Commit only what was printed: librdkafka would otherwise store the offsets
                // of records it fetched ahead, and `-n` would skip them for the next reader.
                ("enable.auto.offset.store", "false"),
                ("fetch.queue.backoff.ms", "10"),
            ])
            .create()
            .context("creating consumer")?
        }
        None => conn
            // librdkafka's assign() needs a group.id; nothing joins or commits to it.
            .client_config(&[
                ("group.id", GROUPLESS_ID),
                ("fetch.queue.backoff.ms", "10"),
                ("enable.auto.commit", "false"),
                ("enable.auto.offset.store", "false"),
            ])
            .create()
            .context("creating consumer")?,
    };

    let partitions = topic_partitions(conn, consumer.client(), &args.topic)?;
    if args.group.is_some() {
        consumer
            .subscribe(&[&args.topic])
            .with_context(|| format!("subscribing to `{}`", args.topic))?;
    } else {
        let chosen = match args.partition {
            Some(p) => {
                check_partition(&args.topic, &partitions, p)?;
                vec![p]
            }
            None => partitions,
        };
        let tpl = assignment(&consumer, conn, &args.topic, &chosen, start)?;
        consumer.assign(&tpl).context("assigning partitions")?;
    }

    let stdout = io::stdout();
    let mut out = io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let idle_limit = args.timeout_ms.map(Duration::from_millis);
    let started = Instant::now();
    let mut warned_unassigned = args.group.is_none();
    let mut last_record = Instant::now();
    let mut count: u64 = 0;
    let mut errors = ErrorReporter::default();
    let result = loop {
        if args.max_records.is_some_and(|max| count >= max) {
            break Ok(());
        }
        if !warned_unassigned && started.elapsed() >= conn.request_timeout() {
            warned_unassigned = true;
            if consumer.assignment().is_ok_and(|a| a.count() == 0) {
                eprintln!(
                    "warning: no partitions assigned to group member after {} ms (does the \
                     broker support consumer groups?)",
                    conn.request_timeout().as_millis()
                );
            }
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {
                if let Err(e) = out.flush() {
                    break Err(e);
                }
                if idle_limit.is_some_and(|limit| last_record.elapsed() >= limit) {
                    break Ok(());
                }
            }
            Some(Ok(msg)) => {
                last_record = Instant::now();
                count += 1;
                if let Err(e) = print(&mut out, &msg, &args) {
                    break Err(e);
                }
                if args.group.is_some() {
                    if let Err(e) = consumer.store_offset_from_message(&msg) {
                        errors.report(&format!("cannot store offset: {e}"));
                    }
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) => {}
            Some(Err(e)) => {
                errors.report(&format!("consume error: {e}"));
                if idle_limit.is_some_and(|limit| last_record.elapsed() >= limit) {
                    break Ok(());
                }
            }
        }
    };
    let result = result.and_then(|()| out.flush());
    if args.group.is_some() && count > 0 {
        // Commit what was printed before exiting rather than waiting for the auto-commit tick.
        if let Err(e) = consumer.commit_consumer_state(rdkafka::consumer::CommitMode::Sync) {
            eprintln!("warning: final offset commit failed: {e}");
        }
    }
    match result {
        Ok(()) => {}
        // A closed pipe (`| head`) ends the output normally.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {}
        Err(e) => return Err(e).context("writing to stdout"),
    }
    eprintln!("consumed {count} record(s)");
    if count == 0 && errors.total > 0 {
        bail!("no records consumed; {} error(s)", errors.total);
    }
    Ok(())
}

fn print(out: &mut impl Write, msg: &BorrowedMessage<'_>, args: &ConsumeArgs) -> io::Result<()> {
    write_record(
        out,
        msg.partition(),
        msg.offset(),
        msg.key(),
        msg.payload(),
        args.print_key,
        args.print_offset,
    )
}

/// The assignment of `partitions` of `topic` at `start` (timestamps resolved to offsets).
pub fn assignment(
    consumer: &BaseConsumer,
    conn: &ConnectArgs,
    topic: &str,
    partitions: &[i32],
    start: StartAt,
) -> anyhow::Result<TopicPartitionList> {
    let mut tpl = TopicPartitionList::with_capacity(partitions.len());
    let offset = match start {
        StartAt::Beginning => Offset::Beginning,
        StartAt::End => Offset::End,
        StartAt::Offset(o) => Offset::Offset(o),
        StartAt::Timestamp(ts) => Offset::Offset(ts),
    };
    for &p in partitions {
        tpl.add_partition_offset(topic, p, offset)
            .with_context(|| format!("partition {p}"))?;
    }
    if let StartAt::Timestamp(_) = start {
        let resolved = consumer
            .offsets_for_times(tpl, conn.request_timeout())
            .map_err(|e| anyhow!("resolving --timestamp to offsets: {e}"))?;
        let mut tpl = TopicPartitionList::with_capacity(partitions.len());
        for elem in resolved.elements() {
            if let Err(e) = elem.error() {
                bail!(
                    "resolving --timestamp for partition {}: {e}",
                    elem.partition()
                );
            }
            // No record at or after the timestamp: librdkafka answers END (-1).
            let offset = match elem.offset() {
                Offset::Offset(o) => Offset::Offset(o),
                _ => Offset::End,
            };
            tpl.add_partition_offset(topic, elem.partition(), offset)
                .with_context(|| format!("partition {}", elem.partition()))?;
        }
        return Ok(tpl);
    }
    Ok(tpl)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        print_key: bool,
        print_offset: bool,
    ) -> String {
        let mut out = Vec::new();
        write_record(&mut out, 2, 17, key, value, print_key, print_offset).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn record_lines() {
        assert_eq!(line(Some(b"k"), Some(b"v"), false, false), "v\n");
        assert_eq!(line(Some(b"k"), Some(b"v"), true, false), "k\tv\n");
        assert_eq!(line(None, Some(b"v"), true, true), "2:17\tnull\tv\n");
        assert_eq!(line(None, None, false, true), "2:17\tnull\n");
    }
}
