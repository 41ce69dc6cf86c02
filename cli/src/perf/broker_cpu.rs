//! The broker's CPU seconds over a run, read before and after from its admin endpoint, so a
//! perf summary can say what the broker spent per GB beside what the client saw
//! (`--broker-admin`). Read from `/v1/process`, which costs the broker nothing to answer;
//! `/metrics` (`strata_process_cpu_seconds`) only for brokers without it (an A/B run against
//! an older build), since a scrape at 10,000 partitions renders ~8 MB and its own cost would
//! land in the run's figure.

use clap::Args;

use crate::common::admin_request;

const METRIC: &str = "strata_process_cpu_seconds";

#[derive(Args, Debug, Clone, Default)]
pub struct BrokerCpuArgs {
    /// Admin HTTP address(es) of the broker(s) (host:port, comma-separated): report their
    /// CPU seconds over the run and per GB moved (`broker_cpu_s`, `broker_cpu_s_per_gb`).
    #[arg(long, value_name = "ADDR[,ADDR..]", value_delimiter = ',')]
    pub broker_admin: Vec<String>,
}

/// CPU seconds of the brokers when the run started.
pub(super) struct BrokerCpu {
    admins: Vec<String>,
    start: f64,
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

    /// ` broker_cpu_s=.. broker_cpu_s_per_gb=..` for `bytes` moved since [`BrokerCpu::start`].
    pub(super) fn fields(&self, bytes: u64) -> anyhow::Result<String> {
        let spent = total(&self.admins)? - self.start;
        let per_gb = if bytes == 0 {
            0.0
        } else {
            spent / (bytes as f64 / 1e9)
        };
        Ok(format!(
            " broker_cpu_s={spent:.2} broker_cpu_s_per_gb={per_gb:.3}"
        ))
    }
}

/// The summed counter of every broker.
fn total(admins: &[String]) -> anyhow::Result<f64> {
    let mut sum = 0.0;
    for admin in admins {
        sum += match admin_request(admin, "GET", "/v1/process") {
            Ok(json) => from_process(&json)
                .ok_or_else(|| anyhow::anyhow!("{admin}/v1/process has no cpu_seconds"))?,
            Err(_) => {
                let text = admin_request(admin, "GET", "/metrics")?;
                parse(&text).ok_or_else(|| anyhow::anyhow!("{admin}/metrics has no {METRIC}"))?
            }
        };
    }
    Ok(sum)
}

fn from_process(json: &str) -> Option<f64> {
    serde_json::from_str::<serde_json::Value>(json).ok()?["cpu_seconds"].as_f64()
}

fn parse(metrics: &str) -> Option<f64> {
    metrics.lines().find_map(|line| {
        let value = line.strip_prefix(METRIC)?.strip_prefix(' ')?;
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
        assert_eq!(parse(text), Some(12.5));
        assert_eq!(parse("strata_requests 3\n"), None);
    }

    #[test]
    fn the_process_endpoint_is_read() {
        assert_eq!(
            from_process(r#"{"cpu_seconds":1.5,"open_fds":7}"#),
            Some(1.5)
        );
        assert_eq!(from_process(r#"{"cpu_seconds":null}"#), None);
        assert_eq!(from_process("not json"), None);
    }
}
