//! How a perf run reports: progress lines once a second, rates per interval, milliseconds
//! for summaries.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::common::per_sec;

/// Milliseconds with one decimal, for `key=value` summaries.
pub(super) fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

pub(super) fn nanos_since(origin: Instant) -> u64 {
    u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Runs `body` while a thread prints `progress()` to stderr every second.
pub(super) fn with_progress<R>(
    progress: impl FnMut() -> String + Send,
    body: impl FnOnce() -> R,
) -> R {
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
pub(super) struct IntervalRate {
    last: Instant,
    last_count: u64,
}

impl IntervalRate {
    pub(super) fn new() -> IntervalRate {
        IntervalRate {
            last: Instant::now(),
            last_count: 0,
        }
    }

    pub(super) fn rate(&mut self, count: u64) -> f64 {
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

    #[test]
    fn milliseconds_have_one_decimal() {
        assert_eq!(ms(Duration::from_micros(1_234_567)), "1234.6");
        assert_eq!(ms(Duration::ZERO), "0.0");
    }
}
