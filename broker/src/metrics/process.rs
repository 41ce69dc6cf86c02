//! The process's own resources, read from `/proc/self` at each scrape: CPU seconds, resident
//! memory, open file descriptors and their limit. Operators watch the descriptors against the
//! limit (segments are opened on demand, connections are not). `strata perf` reads the CPU
//! seconds to report the broker's CPU per GB beside its client figures, from `/v1/process`
//! ([`usage_json`]) rather than `/metrics`: at 10,000 partitions a scrape renders ~8 MB of
//! per-partition series and costs the broker ~0.13 CPU s, which would be counted in the run.

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

#[derive(Default, Clone)]
pub(super) struct ProcessMetrics {
    cpu_seconds: Gauge<f64, AtomicU64>,
    resident_bytes: Gauge,
    open_fds: Gauge,
    max_fds: Gauge,
}

impl ProcessMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "process_cpu_seconds",
            "User and system CPU seconds this process has used",
            self.cpu_seconds.clone(),
        );
        registry.register(
            "process_resident_memory_bytes",
            "Resident memory of this process",
            self.resident_bytes.clone(),
        );
        registry.register(
            "process_open_fds",
            "Open file descriptors (segment files, mappings' files, sockets)",
            self.open_fds.clone(),
        );
        registry.register(
            "process_max_fds",
            "The open-file limit (RLIMIT_NOFILE, soft)",
            self.max_fds.clone(),
        );
    }

    pub(super) fn update(&self) {
        let usage = read_usage();
        if let Some(cpu) = usage.cpu_seconds {
            self.cpu_seconds.set(cpu);
        }
        if let Some(rss) = usage.resident_bytes {
            self.resident_bytes.set(rss as i64);
        }
        if let Some(fds) = usage.open_fds {
            self.open_fds.set(fds as i64);
        }
        if let Some(max) = usage.max_fds {
            self.max_fds.set(max as i64);
        }
    }
}

/// What the kernel says of this process now; `None` where it could not be read.
#[derive(Debug, Default, serde::Serialize)]
struct Usage {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<u64>,
    open_fds: Option<u64>,
    max_fds: Option<u64>,
}

/// This process's usage as JSON (`/v1/process`): `cpu_seconds`, `resident_bytes`,
/// `open_fds`, `max_fds` (null where unreadable), and the `extra` counters the caller adds.
pub fn usage_json(extra: &[(&str, u64)]) -> String {
    let mut v = serde_json::to_value(read_usage()).unwrap_or_default();
    if let Some(map) = v.as_object_mut() {
        for (k, n) in extra {
            map.insert(k.to_string(), (*n).into());
        }
    }
    v.to_string()
}

fn read_usage() -> Usage {
    Usage {
        cpu_seconds: cpu_seconds(),
        resident_bytes: resident_bytes(),
        open_fds: std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.count() as u64),
        max_fds: max_fds(),
    }
}

fn cpu_seconds() -> Option<f64> {
    stat_cpu_seconds("/proc/self/stat")
}

/// The calling thread's user + system CPU seconds (Linux).
pub fn thread_cpu_seconds() -> Option<f64> {
    stat_cpu_seconds("/proc/thread-self/stat")
}

/// utime + stime of a `/proc/.../stat` file, in seconds.
fn stat_cpu_seconds(path: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(path).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let hz = crate::sys::clock_ticks_per_second()?;
    Some(ticks as f64 / hz as f64)
}

fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    crate::sys::page_size().map(|p| pages * p)
}

fn max_fds() -> Option<u64> {
    crate::sys::open_file_limit().map(|(soft, _)| soft)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_cpu_memory_and_descriptors() {
        let before = read_usage();
        // Burn a little CPU so the counter is not zero on a fast machine.
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let after = read_usage();
        let (Some(b), Some(a)) = (before.cpu_seconds, after.cpu_seconds) else {
            panic!("cpu seconds unreadable: {after:?}");
        };
        assert!(a >= b);
        assert!(
            after.resident_bytes.is_some_and(|r| r > 1 << 20),
            "{after:?}"
        );
        let fds = after.open_fds.expect("fd count");
        assert!(fds >= 3, "{fds}");
        assert!(after.max_fds.is_some_and(|m| m >= fds), "{after:?}");
        let json = usage_json(&[("cross_zone_bytes", 42)]);
        let json: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(json["cross_zone_bytes"], 42);
        assert!(
            json["cpu_seconds"].as_f64().is_some_and(|c| c >= a),
            "{json}"
        );
        assert!(json["open_fds"].as_u64().is_some(), "{json}");
    }
}
