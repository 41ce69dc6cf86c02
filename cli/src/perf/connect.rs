//! `strata perf connect`: how fast a broker accepts new connections secured as the `-X`
//! properties say (a TLS handshake, a SASL exchange, both or neither), each followed by one
//! Metadata request so the connection is known to be usable: `--concurrency` clients
//! connecting in a loop until `--connections` succeeded.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;
use hdrhistogram::Histogram;
use kafka_protocol::messages::MetadataRequest;

use crate::cluster::kafka;
use crate::common::{per_sec, ConnectArgs};

#[derive(Args, Debug)]
pub struct PerfConnectArgs {
    /// Connections to open (each authenticated, asked for metadata, then closed).
    #[arg(long, short = 'n', default_value_t = 2000)]
    pub connections: u64,
    /// Clients connecting at once.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

pub(super) fn run(args: PerfConnectArgs) -> anyhow::Result<()> {
    if args.concurrency == 0 || args.connections == 0 {
        bail!("--concurrency and --connections must be at least 1");
    }
    let security = args.conn.client_security()?;
    let addr = args
        .conn
        .bootstrap_server
        .split(',')
        .next()
        .unwrap_or_default()
        .trim()
        .to_string();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let remaining = Arc::new(AtomicU64::new(args.connections));
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..args.concurrency {
            let (remaining, security, addr) = (remaining.clone(), security.clone(), addr.clone());
            tasks.spawn(async move {
                let mut latency = Histogram::<u64>::new(3)?;
                while remaining
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                    .is_ok()
                {
                    let t = Instant::now();
                    let mut c = kafka::connect_to(&addr, &security).await?;
                    c.call(12, &MetadataRequest::default().with_topics(Some(vec![])))
                        .await?;
                    latency.record(t.elapsed().as_micros() as u64)?;
                }
                anyhow::Ok(latency)
            });
        }
        let mut latency = Histogram::<u64>::new(3)?;
        while let Some(done) = tasks.join_next().await {
            latency.add(done??)?;
        }
        let seconds = started.elapsed().as_secs_f64();
        let q = |p: f64| {
            format!(
                "{:.2}",
                Duration::from_micros(latency.value_at_quantile(p)).as_secs_f64() * 1000.0
            )
        };
        println!(
            "connect connections={} concurrency={} seconds={seconds:.2} connections_per_sec={:.0} p50_ms={} p99_ms={} max_ms={}",
            latency.len(),
            args.concurrency,
            per_sec(latency.len(), seconds),
            q(0.5),
            q(0.99),
            q(1.0),
        );
        Ok(())
    })
}
