//! The broker's CPU seconds over a run, read before and after from its admin endpoint, so a
//! perf summary can say what the broker spent per GB beside what the client saw
//! (`--broker-admin`); and the bytes that crossed a zone boundary meanwhile, with their price
//! at [`USD_PER_GB_EACH_WAY`] in each direction (what EC2 bills between availability zones). Read from `/v1/process`, which costs the broker nothing to answer;
//! `/metrics` (`strata_process_cpu_seconds`) only for brokers without it (an A/B run against
//! an older build), since a scrape at 10,000 partitions renders ~8 MB and its own cost would
//! land in the run's figure.

use clap::Args;

use crate::common::admin_request;

const METRIC: &str = "strata_process_cpu_seconds";

/// The inter-zone transfer price, charged once for the bytes leaving a zone and once for those
/// entering the other.
const USD_PER_GB_EACH_WAY: f64 = 0.01;

#[derive(Args, Debug, Clone, Default)]
pub struct BrokerCpuArgs {
    /// Admin HTTP address(es) of the broker(s) (host:port, comma-separated): report their
    /// CPU seconds over the run and per GB moved (`broker_cpu_s`, `broker_cpu_s_per_gb`).
    #[arg(long, value_name = "ADDR[,ADDR..]", value_delimiter = ',')]
    pub broker_admin: Vec<String>,
}

/// The brokers' counters when the run started.
pub(super) struct BrokerCpu {
    admins: Vec<String>,
    start: Counters,
}

/// Summed over the brokers: CPU seconds, and bytes that crossed zones (`None` from brokers
/// that do not count them).
#[derive(Default, Clone, Copy)]
struct Counters {
    cpu: f64,
    cross_zone: Option<u64>,
}

impl BrokerCpu {
    /// Reads the counters now; `None` when no broker was named.
    pub(super) fn start(args: &BrokerCpuArgs) -> anyhow::Result<Option<BrokerCpu>> {
        if args.broker_admin.is_empty() {
            return Ok(None);
        }
        Ok(Some(BrokerCpu {
            admins: args.broker_admin.clone(),
            start: total(&args.broker_admin)?,
        }))
    }

    /// ` broker_cpu_s=.. broker_cpu_s_per_gb=..` for `bytes` moved since [`BrokerCpu::start`],
    /// and where the brokers count them ` cross_zone_bytes=.. cross_zone_gb_per_gb=..
    /// cross_zone_usd_per_tb=..`: every zone crossing by the brokers' reckoning (replication,
    /// and clients that name their zone), per GB moved, and its price per TB moved.
    pub(super) fn fields(&self, bytes: u64) -> anyhow::Result<String> {
        let now = total(&self.admins)?;
        let gb = bytes as f64 / 1e9;
        let per_gb = |x: f64| if bytes == 0 { 0.0 } else { x / gb };
        let spent = now.cpu - self.start.cpu;
        let mut out = format!(
            " broker_cpu_s={spent:.2} broker_cpu_s_per_gb={:.3}",
            per_gb(spent)
        );
        if let (Some(a), Some(b)) = (self.start.cross_zone, now.cross_zone) {
            let crossed = b.saturating_sub(a);
            let ratio = per_gb(crossed as f64 / 1e9);
            out.push_str(&format!(
                " cross_zone_bytes={crossed} cross_zone_gb_per_gb={ratio:.3} cross_zone_usd_per_tb={:.2}",
                ratio * 2.0 * USD_PER_GB_EACH_WAY * 1000.0
            ));
        }
        Ok(out)
    }
}

/// The summed counters of every broker.
fn total(admins: &[String]) -> anyhow::Result<Counters> {
    let mut sum = Counters {
        cpu: 0.0,
        cross_zone: Some(0),
    };
    for admin in admins {
        let one = match admin_request(admin, "GET", "/v1/process") {
            Ok(json) => from_process(&json)
                .ok_or_else(|| anyhow::anyhow!("{admin}/v1/process has no cpu_seconds"))?,
            Err(_) => {
                let text = admin_request(admin, "GET", "/metrics")?;
                Counters {
                    cpu: metric_value(&text, METRIC)
                        .ok_or_else(|| anyhow::anyhow!("{admin}/metrics has no {METRIC}"))?,
                    cross_zone: None,
                }
            }
        };
        sum.cpu += one.cpu;
        sum.cross_zone = sum.cross_zone.zip(one.cross_zone).map(|(a, b)| a + b);
    }
    Ok(sum)
}

fn from_process(json: &str) -> Option<Counters> {
    let v = serde_json::from_str::<serde_json::Value>(json).ok()?;
    Some(Counters {
        cpu: v["cpu_seconds"].as_f64()?,
        cross_zone: v["cross_zone_bytes"].as_u64(),
    })
}

/// The value of the unlabelled metric `name` in a Prometheus text exposition.
pub(super) fn metric_value(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let value = line.strip_prefix(name)?.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counter_is_found_among_other_lines() {
        let text = "# HELP strata_process_cpu_seconds x\n# TYPE strata_process_cpu_seconds gauge\n\
                    strata_process_cpu_seconds_other 9\nstrata_process_cpu_seconds 12.5\n";
        assert_eq!(metric_value(text, METRIC), Some(12.5));
        assert_eq!(metric_value("strata_requests 3\n", METRIC), None);
    }

    #[test]
    fn the_process_endpoint_is_read() {
        let c = from_process(r#"{"cpu_seconds":1.5,"open_fds":7}"#).unwrap();
        assert_eq!((c.cpu, c.cross_zone), (1.5, None));
        let c = from_process(r#"{"cpu_seconds":2.0,"cross_zone_bytes":300}"#).unwrap();
        assert_eq!((c.cpu, c.cross_zone), (2.0, Some(300)));
        assert!(from_process(r#"{"cpu_seconds":null}"#).is_none());
        assert!(from_process("not json").is_none());
    }
}
