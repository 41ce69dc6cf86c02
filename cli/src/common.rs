//! Pieces shared by every client command: connection flags, librdkafka configuration with
//! bounded timeouts, `key=value` parsing, metadata look-ups and latency formatting.

use std::future::Future;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::{Client, ClientContext, DefaultClientContext};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::metadata::Metadata;
use rdkafka::ClientConfig;
use strata_broker::protocol::client::{ClientSecurity, SaslCredentials};
use strata_broker::tls::{self, ClientAuth, TlsFiles};

/// Connection flags every client command takes.
#[derive(Args, Debug, Clone)]
pub struct ConnectArgs {
    /// Broker(s) to bootstrap from, `host:port[,host:port...]`.
    #[arg(
        short = 'b',
        long = "bootstrap-server",
        env = "STRATA_BOOTSTRAP",
        default_value = "127.0.0.1:9092",
        value_name = "HOST:PORT"
    )]
    pub bootstrap_server: String,

    /// librdkafka property passed through verbatim (repeatable), e.g. `-X socket.timeout.ms=5000`.
    /// Applied after the command's own defaults, so it overrides them.
    #[arg(short = 'X', long = "property", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub properties: Vec<(String, String)>,

    /// Upper bound on metadata, offset and admin requests, after which the command fails.
    #[arg(
        long = "request-timeout-ms",
        default_value_t = 15_000,
        value_name = "MS"
    )]
    pub request_timeout_ms: u64,
}

impl ConnectArgs {
    /// A librdkafka configuration: bootstrap servers, then `defaults`, then every `-X` property.
    ///
    /// Socket and message timeouts are bounded so an unreachable broker yields an error
    /// rather than librdkafka's five-minute retry loop.
    pub fn client_config(&self, defaults: &[(&str, &str)]) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.bootstrap_server);
        config.set("socket.timeout.ms", "15000");
        config.set("socket.connection.setup.timeout.ms", "10000");
        for (key, value) in defaults {
            config.set(*key, *value);
        }
        for (key, value) in &self.properties {
            config.set(key, value);
        }
        config
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms.max(1))
    }

    /// How the CLI's own Kafka client (the admin calls librdkafka lacks) secures its
    /// connections, from the same `-X` properties librdkafka takes: `security.protocol`,
    /// `sasl.mechanism`, `sasl.username`, `sasl.password`, `ssl.ca.location`,
    /// `ssl.certificate.location`, `ssl.key.location`.
    pub fn client_security(&self) -> anyhow::Result<ClientSecurity> {
        let protocol = self
            .property("security.protocol")
            .unwrap_or("plaintext")
            .to_ascii_uppercase();
        let (tls, sasl) = match protocol.as_str() {
            "PLAINTEXT" => (false, false),
            "SSL" => (true, false),
            "SASL_PLAINTEXT" => (false, true),
            "SASL_SSL" => (true, true),
            other => bail!(
                "security.protocol={other}: expected plaintext, ssl, sasl_plaintext or sasl_ssl"
            ),
        };
        let path = |key: &str| self.property(key).map(std::path::PathBuf::from);
        let tls = if tls {
            let files = TlsFiles {
                certificate: path("ssl.certificate.location"),
                key: path("ssl.key.location"),
                ca: path("ssl.ca.location"),
                client_auth: ClientAuth::None,
                min_version: 2,
            };
            Some(tls::client_config(&files)?)
        } else {
            None
        };
        let sasl = if sasl {
            let need = |key: &str| {
                self.property(key)
                    .map(str::to_string)
                    .ok_or_else(|| anyhow!("SASL needs -X {key}=..."))
            };
            Some(SaslCredentials {
                mechanism: self
                    .property("sasl.mechanism")
                    .or(self.property("sasl.mechanisms"))
                    .ok_or_else(|| anyhow!("SASL needs -X sasl.mechanism=..."))?
                    .to_ascii_uppercase(),
                username: need("sasl.username")?,
                password: need("sasl.password")?,
            })
        } else {
            None
        };
        Ok(ClientSecurity { tls, sasl })
    }

    /// The value a `-X` property was given, if any.
    pub fn property(&self, key: &str) -> Option<&str> {
        self.properties
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

pub fn admin_client(conn: &ConnectArgs) -> anyhow::Result<AdminClient<DefaultClientContext>> {
    // librdkafka's admin client is a producer handle, whose metadata requests would ask the
    // broker to auto-create the topic being described or altered.
    conn.client_config(&[("allow.auto.create.topics", "false")])
        .create()
        .context("creating admin client")
}

pub fn admin_options(conn: &ConnectArgs) -> AdminOptions {
    AdminOptions::new()
        .request_timeout(Some(conn.request_timeout()))
        .operation_timeout(Some(conn.request_timeout()))
}

/// Runs an admin future to completion, bounded by the request timeout plus a grace period
/// (librdkafka enforces the request timeout itself; this guards against a lost result).
pub fn block_on<F: Future>(
    runtime: &tokio::runtime::Runtime,
    conn: &ConnectArgs,
    what: &str,
    fut: F,
) -> anyhow::Result<F::Output> {
    let limit = conn.request_timeout() + Duration::from_secs(5);
    runtime
        .block_on(async { tokio::time::timeout(limit, fut).await })
        .map_err(|_| anyhow!("{what}: no answer within {} ms", limit.as_millis()))
}

/// A single-threaded runtime for commands that only wait on admin futures.
pub fn current_thread_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// Parses `key=value` (split at the first `=`; the value may be empty or contain `=`).
pub fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((key, value)) => {
            let key = key.trim();
            if key.is_empty() {
                Err(format!("`{s}`: empty key (expected KEY=VALUE)"))
            } else {
                Ok((key.to_string(), value.to_string()))
            }
        }
        None => Err(format!("`{s}`: expected KEY=VALUE")),
    }
}

/// `acks` values accepted by `--acks`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// Wait for all in-sync replicas (`-1`).
    #[value(name = "all", alias = "-1")]
    All,
    /// Wait for the leader only.
    #[value(name = "1")]
    Leader,
    /// Do not wait for any acknowledgement.
    #[value(name = "0")]
    None,
}

impl Acks {
    pub fn as_config(self) -> &'static str {
        match self {
            Acks::All => "all",
            Acks::Leader => "1",
            Acks::None => "0",
        }
    }
}

/// Codecs accepted by `--compression`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Compression {
    pub fn as_config(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

/// Metadata for one topic, failing clearly when the broker is unreachable or the topic is
/// missing. Returns the topic's partition ids, sorted.
pub fn topic_partitions<C: ClientContext>(
    conn: &ConnectArgs,
    client: &Client<C>,
    topic: &str,
) -> anyhow::Result<Vec<i32>> {
    // A topic being auto-created (or just created) may briefly report no leader.
    let deadline = std::time::Instant::now() + conn.request_timeout();
    let metadata = loop {
        let metadata = fetch_metadata(conn, client, Some(topic))?;
        let settling = metadata.topics().iter().any(|t| {
            t.name() == topic
                && (t.error().map(RDKafkaErrorCode::from)
                    == Some(RDKafkaErrorCode::LeaderNotAvailable)
                    || t.partitions().iter().any(|p| p.leader() < 0))
        });
        if !settling || std::time::Instant::now() >= deadline {
            break metadata;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
        bail!("topic `{topic}` not found in metadata");
    };
    if let Some(err) = t.error() {
        let code = RDKafkaErrorCode::from(err);
        if code == RDKafkaErrorCode::UnknownTopicOrPartition {
            bail!("topic `{topic}` does not exist (create it with `strata topic create {topic}`)");
        }
        bail!("metadata for topic `{topic}`: {code}");
    }
    let mut ids: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
    if ids.is_empty() {
        bail!("topic `{topic}` has no partitions");
    }
    ids.sort_unstable();
    Ok(ids)
}

/// `fetch_metadata` bounded by `--request-timeout-ms`, with an error naming the servers.
pub fn fetch_metadata<C: ClientContext>(
    conn: &ConnectArgs,
    client: &Client<C>,
    topic: Option<&str>,
) -> anyhow::Result<Metadata> {
    let timeout = conn.request_timeout();
    client.fetch_metadata(topic, timeout).map_err(|e| {
        anyhow!(
            "cannot fetch metadata from {} within {} ms: {e}",
            conn.bootstrap_server,
            timeout.as_millis()
        )
    })
}

/// Checks that a requested partition exists.
pub fn check_partition(topic: &str, partitions: &[i32], partition: i32) -> anyhow::Result<()> {
    if partitions.contains(&partition) {
        Ok(())
    } else {
        bail!(
            "topic `{topic}` has no partition {partition} (it has {} partitions)",
            partitions.len()
        )
    }
}

/// Writes one line to stdout. A closed pipe (`strata topic list | head`) is not an error:
/// the rest of the output is silently dropped.
pub fn emit(line: std::fmt::Arguments<'_>) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_fmt(line).and_then(|()| out.write_all(b"\n")) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(anyhow::Error::new(e).context("writing to stdout")),
    }
}

/// Prints consumer errors to stderr without flooding it: each distinct message is shown at
/// most once every five seconds, with the number of its repeats suppressed meanwhile.
#[derive(Default)]
pub struct ErrorReporter {
    /// Per message: when it was last printed and how many repeats were suppressed since.
    seen: std::collections::HashMap<String, (std::time::Instant, u64)>,
    pub total: u64,
}

impl ErrorReporter {
    pub fn report(&mut self, msg: &str) {
        self.total += 1;
        let now = std::time::Instant::now();
        if let Some((last, suppressed)) = self.seen.get_mut(msg) {
            if now.duration_since(*last) < Duration::from_secs(5) {
                *suppressed += 1;
                return;
            }
            if *suppressed > 0 {
                eprintln!("{msg} (and {suppressed} more times in the last few seconds)");
            } else {
                eprintln!("{msg}");
            }
            *last = now;
            *suppressed = 0;
            return;
        }
        eprintln!("{msg}");
        self.seen.insert(msg.to_string(), (now, 0));
    }
}

/// A latency histogram in microseconds, from 1 µs to one hour, three significant digits.
pub fn latency_histogram() -> anyhow::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).context("creating latency histogram")
}

/// Milliseconds with three decimals from a microsecond count: `1234` → `"1.234"`.
pub fn format_ms(micros: u64) -> String {
    format!("{}.{:03}", micros / 1000, micros % 1000)
}

/// `p50_ms=.. p99_ms=.. p999_ms=.. max_ms=..` from a microsecond histogram (zeros when empty).
pub fn percentile_fields(h: &Histogram<u64>) -> String {
    let q = |quantile: f64| {
        if h.is_empty() {
            0
        } else {
            h.value_at_quantile(quantile)
        }
    };
    format!(
        "p50_ms={} p99_ms={} p999_ms={} max_ms={}",
        format_ms(q(0.50)),
        format_ms(q(0.99)),
        format_ms(q(0.999)),
        format_ms(if h.is_empty() { 0 } else { h.max() }),
    )
}

/// Bytes per second in MiB/s with one decimal, as Kafka's perf tools report "MB/sec".
pub fn mib_per_sec(bytes: u64, seconds: f64) -> f64 {
    if seconds <= 0.0 {
        0.0
    } else {
        bytes as f64 / (1024.0 * 1024.0) / seconds
    }
}

/// Records per second, zero for an empty interval.
pub fn per_sec(count: u64, seconds: f64) -> f64 {
    if seconds <= 0.0 {
        0.0
    } else {
        count as f64 / seconds
    }
}

/// A plain HTTP/1.0 request to a broker's admin endpoint (no HTTP client is worth a
/// dependency here), over TLS for an `https://host:port` address (see [`admin_tls`]).
/// Returns the body of a 200 answer; anything else is an error carrying the status line and
/// the body.
pub fn admin_request(addr: &str, method: &str, path: &str) -> anyhow::Result<String> {
    use std::io::{Read, Write};
    let (https, host_port) = match addr.strip_prefix("https://") {
        Some(a) => (true, a),
        None => (false, addr.strip_prefix("http://").unwrap_or(addr)),
    };
    let sock: std::net::SocketAddr = host_port.parse().context("admin address")?;
    let mut conn = std::net::TcpStream::connect_timeout(&sock, std::time::Duration::from_secs(2))?;
    conn.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    let request =
        format!("{method} {path} HTTP/1.0\r\nHost: {host_port}\r\nContent-Length: 0\r\n\r\n");
    let mut raw = Vec::new();
    if https {
        let name = strata_broker::tls::server_name(host_port)?;
        let session = rustls::ClientConnection::new(admin_tls()?, name)?;
        let mut tls = rustls::StreamOwned::new(session, conn);
        tls.write_all(request.as_bytes())
            .with_context(|| format!("TLS to {addr}"))?;
        match tls.read_to_end(&mut raw) {
            Ok(_) => {}
            // The server closes after an HTTP/1.0 answer, with or without close_notify.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
            Err(e) => return Err(anyhow::Error::new(e).context(format!("TLS to {addr}"))),
        }
    } else {
        conn.write_all(request.as_bytes())?;
        conn.read_to_end(&mut raw)?;
    }
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("malformed HTTP response"))?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        anyhow::bail!("{}: {}", head.lines().next().unwrap_or(head), body.trim());
    }
    Ok(body.to_string())
}

/// The TLS client of `https://` admin addresses: the CA that signed the brokers' certificate
/// from `STRATA_ADMIN_SSL_CA_LOCATION`, and a client certificate and key (for an admin port
/// that requires them) from `STRATA_ADMIN_SSL_CERTIFICATE_LOCATION` and
/// `STRATA_ADMIN_SSL_KEY_LOCATION`.
fn admin_tls() -> anyhow::Result<std::sync::Arc<rustls::ClientConfig>> {
    let file = |name: &str| std::env::var_os(name).map(std::path::PathBuf::from);
    let files = strata_broker::tls::TlsFiles {
        certificate: file("STRATA_ADMIN_SSL_CERTIFICATE_LOCATION"),
        key: file("STRATA_ADMIN_SSL_KEY_LOCATION"),
        ca: Some(file("STRATA_ADMIN_SSL_CA_LOCATION").context(
            "an https:// admin address needs STRATA_ADMIN_SSL_CA_LOCATION (the CA of the brokers' certificate)",
        )?),
        client_auth: strata_broker::tls::ClientAuth::None,
        min_version: 2,
    };
    Ok(strata_broker::tls::client_config(&files)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_value_splits_at_first_equals() {
        assert_eq!(
            parse_key_value("retention.ms=1000"),
            Ok(("retention.ms".to_string(), "1000".to_string()))
        );
        assert_eq!(
            parse_key_value("sasl.jaas=a=b=c"),
            Ok(("sasl.jaas".to_string(), "a=b=c".to_string()))
        );
        assert_eq!(parse_key_value("k="), Ok(("k".to_string(), String::new())));
        assert_eq!(
            parse_key_value(" k =v"),
            Ok(("k".to_string(), "v".to_string()))
        );
    }

    #[test]
    fn key_value_rejects_malformed() {
        assert!(parse_key_value("novalue").is_err());
        assert!(parse_key_value("=v").is_err());
        assert!(parse_key_value("").is_err());
    }

    #[test]
    fn ms_formatting() {
        assert_eq!(format_ms(0), "0.000");
        assert_eq!(format_ms(1), "0.001");
        assert_eq!(format_ms(1234), "1.234");
        assert_eq!(format_ms(1_000_000), "1000.000");
    }

    #[test]
    fn percentiles_of_empty_and_filled_histograms() {
        let mut h = latency_histogram().unwrap();
        assert_eq!(
            percentile_fields(&h),
            "p50_ms=0.000 p99_ms=0.000 p999_ms=0.000 max_ms=0.000"
        );
        for v in 1..=1000u64 {
            h.record(v * 1000).unwrap();
        }
        let fields = percentile_fields(&h);
        let value = |name: &str| -> f64 {
            fields
                .split(' ')
                .find_map(|f| f.strip_prefix(name))
                .and_then(|v| v.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .unwrap_or(f64::NAN)
        };
        // Three significant digits: each value within 0.1% of the exact one.
        for (name, exact) in [
            ("p50_ms", 500.0),
            ("p99_ms", 990.0),
            ("p999_ms", 999.0),
            ("max_ms", 1000.0),
        ] {
            let got = value(name);
            assert!((got - exact).abs() <= exact * 0.001, "{name}: {fields}");
        }
    }

    #[test]
    fn rates() {
        assert_eq!(per_sec(10, 0.0), 0.0);
        assert_eq!(per_sec(10, 2.0), 5.0);
        assert!((mib_per_sec(1024 * 1024 * 3, 1.5) - 2.0).abs() < 1e-9);
    }

    #[test]
    fn partition_check() {
        assert!(check_partition("t", &[0, 1, 2], 2).is_ok());
        assert!(check_partition("t", &[0, 1, 2], 3).is_err());
    }
}
