//! `strata produce TOPIC`: every line of stdin becomes one record.

use std::io::{BufRead, BufReader};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::Args;
use rdkafka::client::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};

use super::common::{
    check_partition, parse_key_value, topic_partitions, Acks, Compression, ConnectArgs,
};

/// Default `message.timeout.ms`: how long librdkafka keeps retrying one record.
const MESSAGE_TIMEOUT_MS: u64 = 30_000;
/// Delivery errors printed individually before only counting them.
const MAX_PRINTED_ERRORS: u64 = 10;

#[derive(Args, Debug)]
pub struct ProduceArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// Topic to produce to.
    pub topic: String,
    /// Key of every record (with --key-separator: of lines without a separator).
    #[arg(short = 'k', long)]
    pub key: Option<String>,
    /// Split each line at the first SEP into key and value.
    #[arg(long, value_name = "SEP")]
    pub key_separator: Option<String>,
    /// Partition to produce to (default: librdkafka's partitioner).
    #[arg(short = 'P', long)]
    pub partition: Option<i32>,
    /// Acknowledgements to wait for (default: librdkafka's, `all`).
    #[arg(long, value_enum, allow_hyphen_values = true)]
    pub acks: Option<Acks>,
    /// Compression codec (default: librdkafka's, `none`).
    #[arg(long, value_enum)]
    pub compression: Option<Compression>,
    /// Header added to every record (repeatable).
    #[arg(short = 'H', long = "header", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub headers: Vec<(String, String)>,
}

/// Counts deliveries; reports the first few failures.
#[derive(Default)]
struct DeliveryCounter {
    delivered: AtomicU64,
    failed: AtomicU64,
}

impl ClientContext for DeliveryCounter {}

impl ProducerContext for DeliveryCounter {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Err((err, _)) => {
                let n = self.failed.fetch_add(1, Ordering::Relaxed) + 1;
                if n <= MAX_PRINTED_ERRORS {
                    eprintln!("delivery failed: {err}");
                } else if n == MAX_PRINTED_ERRORS + 1 {
                    eprintln!("(further delivery errors are only counted)");
                }
            }
        }
    }
}

/// Splits `line` into (key, value) at the first `separator`; lines without one keep
/// `default_key` and the whole line as value.
pub fn split_line<'a>(
    line: &'a [u8],
    separator: Option<&[u8]>,
    default_key: Option<&'a [u8]>,
) -> (Option<&'a [u8]>, &'a [u8]) {
    if let Some(sep) = separator.filter(|s| !s.is_empty()) {
        if let Some(pos) = line.windows(sep.len()).position(|w| w == sep) {
            return (Some(&line[..pos]), &line[pos + sep.len()..]);
        }
    }
    (default_key, line)
}

/// Removes a trailing `\n` or `\r\n`.
pub fn trim_newline(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The `message.timeout.ms` in effect (a `-X` override or the default).
pub fn message_timeout(conn: &ConnectArgs, default_ms: u64) -> Duration {
    let ms = conn
        .property("message.timeout.ms")
        .or_else(|| conn.property("delivery.timeout.ms"))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(default_ms);
    Duration::from_millis(ms)
}

pub fn run(args: ProduceArgs) -> anyhow::Result<()> {
    let conn = &args.conn;
    let timeout_ms = MESSAGE_TIMEOUT_MS.to_string();
    let mut defaults = vec![("message.timeout.ms", timeout_ms.as_str())];
    if let Some(acks) = args.acks {
        defaults.push(("acks", acks.as_config()));
    }
    if let Some(c) = args.compression {
        defaults.push(("compression.type", c.as_config()));
    }
    let producer: ThreadedProducer<DeliveryCounter> = conn
        .client_config(&defaults)
        .create_with_context(DeliveryCounter::default())
        .context("creating producer")?;

    let partitions = topic_partitions(conn, producer.client(), &args.topic)?;
    if let Some(p) = args.partition {
        check_partition(&args.topic, &partitions, p)?;
    }

    let headers = if args.headers.is_empty() {
        None
    } else {
        let mut h = OwnedHeaders::new_with_capacity(args.headers.len());
        for (key, value) in &args.headers {
            h = h.insert(Header {
                key,
                value: Some(value.as_bytes()),
            });
        }
        Some(h)
    };
    let default_key = args.key.as_deref().map(str::as_bytes);
    let separator = args.key_separator.as_deref().map(str::as_bytes);

    let stdin = std::io::stdin();
    let mut input = BufReader::with_capacity(1 << 16, stdin.lock());
    let mut line = Vec::new();
    let mut sent: u64 = 0;
    loop {
        line.clear();
        if input
            .read_until(b'\n', &mut line)
            .context("reading stdin")?
            == 0
        {
            break;
        }
        let (key, value) = split_line(trim_newline(&line), separator, default_key);
        let mut record: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(&args.topic).payload(value);
        if let Some(key) = key {
            record = record.key(key);
        }
        if let Some(p) = args.partition {
            record = record.partition(p);
        }
        if let Some(h) = &headers {
            record = record.headers(h.clone());
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(10));
                }
                Err((
                    e @ KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge),
                    _,
                )) => {
                    bail!(
                        "cannot produce record {}: {e} (librdkafka's limit is -X \
                         message.max.bytes, default 1000000)",
                        sent + 1
                    )
                }
                Err((e, _)) => bail!("cannot produce record {}: {e}", sent + 1),
            }
        }
        sent += 1;
    }

    let flush_timeout = message_timeout(conn, MESSAGE_TIMEOUT_MS) + Duration::from_secs(5);
    let flushed = producer.flush(flush_timeout);
    let ctx = producer.context();
    let delivered = ctx.delivered.load(Ordering::Relaxed);
    let failed = ctx.failed.load(Ordering::Relaxed);
    eprintln!("produced {delivered} record(s) to {}", args.topic);
    if let Err(e) = flushed {
        bail!(
            "flush: {e}; {} record(s) still undelivered",
            sent.saturating_sub(delivered + failed)
        );
    }
    if failed > 0 {
        bail!("{failed} of {sent} record(s) failed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(properties: &[(&str, &str)]) -> ConnectArgs {
        ConnectArgs {
            bootstrap_server: "127.0.0.1:9092".into(),
            properties: properties
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            request_timeout_ms: 1000,
        }
    }

    #[test]
    fn message_timeout_honours_overrides() {
        assert_eq!(message_timeout(&conn(&[]), 30_000), Duration::from_secs(30));
        assert_eq!(
            message_timeout(&conn(&[("message.timeout.ms", "5000")]), 30_000),
            Duration::from_secs(5)
        );
        assert_eq!(
            message_timeout(&conn(&[("delivery.timeout.ms", "7000")]), 30_000),
            Duration::from_secs(7)
        );
        // The last -X wins, as it does in librdkafka's configuration.
        assert_eq!(
            message_timeout(
                &conn(&[("message.timeout.ms", "1"), ("message.timeout.ms", "2000")]),
                30_000
            ),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn newline_trimming() {
        assert_eq!(trim_newline(b"abc\n"), b"abc");
        assert_eq!(trim_newline(b"abc\r\n"), b"abc");
        assert_eq!(trim_newline(b"abc"), b"abc");
        assert_eq!(trim_newline(b"\n"), b"");
    }

    #[test]
    fn key_separator_splits_at_first_occurrence() {
        assert_eq!(
            split_line(b"k:v:w", Some(b":"), None),
            (Some(&b"k"[..]), &b"v:w"[..])
        );
        assert_eq!(
            split_line(b"k::v", Some(b"::"), None),
            (Some(&b"k"[..]), &b"v"[..])
        );
        assert_eq!(
            split_line(b"no-sep", Some(b":"), Some(b"dk")),
            (Some(&b"dk"[..]), &b"no-sep"[..])
        );
        assert_eq!(split_line(b"a:b", None, None), (None, &b"a:b"[..]));
        assert_eq!(split_line(b"a:b", Some(b""), None), (None, &b"a:b"[..]));
    }
}
