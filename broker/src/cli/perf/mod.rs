//! `strata perf produce|consume|e2e`: load generators reporting throughput and latency.
//!
//! Progress goes to stderr once a second; the final summary is one line on stdout of
//! space-separated `key=value` fields, stable for scripts:
//!
//! ```text
//! produce records=.. bytes=.. seconds=.. records_per_sec=.. mb_per_sec=.. p50_ms=.. p99_ms=.. p999_ms=.. max_ms=.. errors=..
//! consume records=.. bytes=.. seconds=.. records_per_sec=.. mb_per_sec=..
//! e2e records=.. p50_ms=.. p99_ms=.. p999_ms=.. max_ms=..
//! ```
//!
//! `mb_per_sec` is in MiB (2^20 bytes) per second, as Kafka's perf tools report it.
//!
//! - [`produce`], [`consume`], [`e2e`] — record throughput and latency.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use clap::Subcommand;

use super::common::{per_sec, ConnectArgs};

mod consume;
mod e2e;
mod produce;

pub use consume::PerfConsumeArgs;
pub use e2e::{decode_e2e_header, encode_e2e_header, PerfE2eArgs};
pub use produce::{make_payload, PerfProduceArgs};

#[derive(Subcommand, Debug)]
pub enum PerfCommand {
    /// Produce generated records as fast as possible (or at --rate); report throughput and
    /// send-to-acknowledgement latency.
    Produce(PerfProduceArgs),
    /// Consume records from the beginning of every partition; report throughput.
    Consume(PerfConsumeArgs),
    /// Produce at --rate while a consumer waits at the tail; report produce-to-consume latency.
    E2e(PerfE2eArgs),
}

impl PerfCommand {
    pub fn conn(&self) -> &ConnectArgs {
        match self {
            PerfCommand::Produce(a) => &a.conn,
            PerfCommand::Consume(a) => &a.conn,
            PerfCommand::E2e(a) => &a.conn,
        }
    }
}

pub fn run(cmd: PerfCommand) -> anyhow::Result<()> {
    match cmd {
        PerfCommand::Produce(args) => produce::run(args),
        PerfCommand::Consume(args) => consume::run(args),
        PerfCommand::E2e(args) => e2e::run(args),
    }
}

fn nanos_since(origin: Instant) -> u64 {
    u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Runs `body` while a thread prints `progress()` to stderr every second.
fn with_progress<R>(progress: impl FnMut() -> String + Send, body: impl FnOnce() -> R) -> R {
    let (stop, stopped) = mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let mut progress = progress;
        scope.spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(Duration::from_secs(1))
            {
                eprintln!("{}", progress());
            }
        });
        let result = body();
        drop(stop);
        result
    })
}

/// Counts per interval for progress lines: returns the rate since the previous call.
struct IntervalRate {
    last: Instant,
    last_count: u64,
}

impl IntervalRate {
    fn new() -> IntervalRate {
        IntervalRate {
            last: Instant::now(),
            last_count: 0,
        }
    }

    fn rate(&mut self, count: u64) -> f64 {
        let now = Instant::now();
        let rate = per_sec(
            count.saturating_sub(self.last_count),
            now.duration_since(self.last).as_secs_f64(),
        );
        self.last = now;
        self.last_count = count;
        rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_rate_counts_differences() {
        let mut r = IntervalRate::new();
        std::thread::sleep(Duration::from_millis(20));
        let rate = r.rate(100);
        assert!(rate > 0.0 && rate <= 100.0 / 0.02 + 1.0, "{rate}");
        assert_eq!(r.last_count, 100);
    }
}
