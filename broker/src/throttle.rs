//! Paces work to a byte rate. [`Throttle`], across async tasks: each caller reserves its
//! bytes' share of time after the previous reservation and sleeps until its turn (the
//! offloader's upload bandwidth, `remote_log_upload_max_bytes_per_second`). [`Pacer`], one
//! blocking stream (the cleaner's I/O, a replica's copy between log directories). Idle time is
//! not saved up, so a pause never turns into a burst. The rate comes with each step: it is a
//! dynamic setting, so it may change between two. Both pace real I/O, so they measure real
//! time: the throttle on tokio's clock (its waits are tokio timers), the pacer with a
//! [`Stopwatch`].

use std::time::Duration;

use tokio::time::Instant;

use crate::clock::Stopwatch;

pub struct Throttle {
    next_free: std::sync::Mutex<Instant>,
}

impl Default for Throttle {
    fn default() -> Throttle {
        Throttle {
            next_free: std::sync::Mutex::new(Instant::now()),
        }
    }
}

impl Throttle {
    /// Waits for `bytes`' turn at `bytes_per_second` (0: no bound); returns how long it waited.
    pub async fn acquire(&self, bytes: u64, bytes_per_second: u64) -> Duration {
        if bytes_per_second == 0 {
            return Duration::ZERO;
        }
        let now = Instant::now();
        let start = {
            let mut next = self.next_free.lock().unwrap_or_else(|p| p.into_inner());
            let start = (*next).max(now);
            *next = start + Duration::from_secs_f64(bytes as f64 / bytes_per_second as f64);
            start
        };
        tokio::time::sleep_until(start).await;
        start - now
    }
}

/// Paces a blocking stream of bytes (the cleaner's I/O, a replica's copy between log
/// directories) to a rate per second given with each step (0: unbounded; it may change
/// between steps), measured over one-second windows so a pause does not turn into a burst.
pub struct Pacer {
    window: Stopwatch,
    bytes: u64,
}

impl Default for Pacer {
    fn default() -> Pacer {
        Pacer {
            window: Stopwatch::start(),
            bytes: 0,
        }
    }
}

impl Pacer {
    /// Counts `bytes` done and sleeps as long as `rate` says they take.
    pub fn pace(&mut self, bytes: u64, rate: u64) {
        if rate == 0 {
            return;
        }
        self.bytes += bytes;
        let due = Duration::from_secs_f64(self.bytes as f64 / rate as f64);
        let elapsed = self.window.elapsed();
        if due > elapsed {
            std::thread::sleep(due - elapsed);
        }
        if self.window.elapsed() >= Duration::from_secs(1) {
            self.window = Stopwatch::start();
            self.bytes = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reservations_follow_each_other_at_the_rate() {
        let t = Throttle::default();
        assert_eq!(
            t.acquire(500, 10_000).await,
            Duration::ZERO,
            "the first goes at once"
        );
        // The second waits out the first one's 50 ms share (less what already passed).
        let waited = t.acquire(500, 10_000).await;
        assert!(waited >= Duration::from_millis(40), "{waited:?}");
        assert_eq!(
            Throttle::default().acquire(1 << 30, 0).await,
            Duration::ZERO
        );
    }

    #[test]
    fn the_pacer_holds_the_rate() {
        let mut p = Pacer::default();
        let started = Stopwatch::start();
        for _ in 0..10 {
            p.pace(50_000, 1_000_000);
        }
        // 500 kB at 1 MB/s cannot take less than half a second.
        assert!(started.elapsed() >= Duration::from_millis(450));
        let started = Stopwatch::start();
        p.pace(1 << 30, 0);
        assert!(started.elapsed() < Duration::from_millis(100), "unbounded");
    }
}
