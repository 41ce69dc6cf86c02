//! `strata perf get`: the object store's own ranged-GET throughput, the yardstick remote reads
//! are measured against (docs/benchmarks.md): `--concurrency` GETs of `--range-bytes` ranges
//! in flight over the segment objects (`.log`) under a prefix, until `--bytes` are read.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::Args;
use futures::stream::{self, StreamExt};
use hdrhistogram::Histogram;

use crate::common::per_sec;
use strata_broker::config::BrokerConfig;

#[derive(Args, Debug)]
pub struct PerfGetArgs {
    /// Object store URL (`s3://bucket/prefix`, `file:///path`). Endpoint, region, keys and
    /// `allow_http` come from the same `STRATA_OBJECT_STORE_*` variables as `strata serve`.
    #[arg(long = "object-store", value_name = "URL")]
    pub object_store: String,
    /// Read only objects whose key starts with this.
    #[arg(long, default_value = "")]
    pub prefix: String,
    /// GETs in flight at once.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Bytes per ranged GET.
    #[arg(long = "range-bytes", default_value_t = 1 << 20)]
    pub range_bytes: u64,
    /// Stop after reading this many bytes (or when the objects run out).
    #[arg(long, default_value_t = 1 << 30)]
    pub bytes: u64,
}

pub(super) fn run(args: PerfGetArgs) -> anyhow::Result<()> {
    if args.concurrency == 0 || args.range_bytes == 0 {
        bail!("--concurrency and --range-bytes must be at least 1");
    }
    let mut cfg = BrokerConfig::load(None, std::env::vars()).context("STRATA_* settings")?;
    cfg.object_store = Some(args.object_store.clone());
    let store = strata_objstore::Store::open(&cfg.object_store_config()?)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let objects: Vec<_> = store
            .list(&args.prefix)
            .await?
            .into_iter()
            .filter(|o| o.key.ends_with(".log"))
            .collect();
        let mut ranges = Vec::new();
        let mut planned = 0u64;
        'plan: for o in &objects {
            let mut start = 0;
            while start < o.size {
                let end = (start + args.range_bytes).min(o.size);
                ranges.push((o.key.clone(), start..end));
                planned += end - start;
                start = end;
                if planned >= args.bytes {
                    break 'plan;
                }
            }
        }
        if ranges.is_empty() {
            bail!("no .log objects under `{}` in {store}", args.prefix);
        }
        let mut latency = Histogram::<u64>::new(3)?;
        let mut bytes = 0u64;
        let started = Instant::now();
        let mut results = stream::iter(ranges)
            .map(|(key, range)| {
                let store = store.clone();
                async move {
                    let t = Instant::now();
                    let got = store.get_range(&key, range).await?;
                    anyhow::Ok((got.len() as u64, t.elapsed()))
                }
            })
            .buffer_unordered(args.concurrency);
        let mut gets = 0u64;
        while let Some(r) = results.next().await {
            let (n, took) = r?;
            bytes += n;
            gets += 1;
            latency.record(took.as_micros() as u64)?;
        }
        let seconds = started.elapsed().as_secs_f64();
        let q = |p: f64| format!("{:.1}", Duration::from_micros(latency.value_at_quantile(p)).as_secs_f64() * 1000.0);
        println!(
            "get concurrency={} range_bytes={} gets={gets} bytes={bytes} seconds={seconds:.2} mb_per_sec={:.1} p50_ms={} p99_ms={} max_ms={}",
            args.concurrency,
            args.range_bytes,
            per_sec(bytes, seconds) / (1 << 20) as f64,
            q(0.5),
            q(0.99),
            q(1.0),
        );
        Ok(())
    })
}
