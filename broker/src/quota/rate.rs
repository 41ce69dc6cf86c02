//! Kafka's sampled rate: what a client used over the last `samples` windows of `sample_ms`
//! each, and how long it must pause to come back to its quota.
//!
//! Invariants:
//! - the rate is the sum of the live samples divided by the time they cover, padded to at
//!   least `samples − 1` whole windows: a new client does not see its first bytes divided by
//!   a few milliseconds, and may burst up to about that many windows' worth of its quota;
//! - a sample older than `samples` windows counts for nothing, and a client idle that long
//!   starts afresh;
//! - the throttle brings the rate back to the quota if the client then sends nothing:
//!   `(rate − quota) / quota × window`, at most the whole window.

use std::time::Duration;

pub(super) struct Rate {
    samples: Vec<Sample>,
    sample_ms: u64,
}

#[derive(Clone, Copy, Default)]
struct Sample {
    /// The start of the sample's window, aligned to `sample_ms`.
    start_ms: u64,
    value: f64,
    used: bool,
}

impl Rate {
    pub(super) fn new(samples: u32, sample_ms: u64) -> Rate {
        Rate {
            samples: vec![Sample::default(); samples.max(2) as usize],
            sample_ms: sample_ms.max(1),
        }
    }

    /// Adds `value` at `now_ms`; returns the throttle that brings the client back to `quota`
    /// (zero when within it) and the rate it measured.
    pub(super) fn record(&mut self, value: f64, now_ms: u64, quota: f64) -> (Duration, f64) {
        let start_ms = now_ms - now_ms % self.sample_ms;
        let n = self.samples.len();
        let sample = &mut self.samples[(start_ms / self.sample_ms) as usize % n];
        if !sample.used || sample.start_ms != start_ms {
            *sample = Sample {
                start_ms,
                value: 0.0,
                used: true,
            };
        }
        sample.value += value;
        let (rate, window_ms) = self.measure(now_ms);
        (throttle(rate, quota, window_ms, self.full_ms()), rate)
    }

    /// The rate per second at `now_ms` and the window it was measured over.
    fn measure(&self, now_ms: u64) -> (f64, u64) {
        let full = self.full_ms();
        let live = || (self.samples.iter()).filter(|s| s.used && s.start_ms + full > now_ms);
        let total: f64 = live().map(|s| s.value).sum();
        let oldest = live().map(|s| s.start_ms).min().unwrap_or(now_ms);
        // Kafka's window: the time the samples cover, plus the whole windows missing from
        // `samples − 1`.
        let elapsed = now_ms - oldest;
        let least = self.samples.len() as u64 - 1;
        let missing = least.saturating_sub(elapsed / self.sample_ms);
        let window_ms = elapsed + missing * self.sample_ms;
        (total * 1000.0 / window_ms as f64, window_ms)
    }

    fn full_ms(&self) -> u64 {
        self.samples.len() as u64 * self.sample_ms
    }

    /// When the last value was recorded (ms), for expiring idle clients.
    pub(super) fn last_ms(&self) -> u64 {
        (self.samples.iter())
            .filter(|s| s.used)
            .map(|s| s.start_ms)
            .max()
            .unwrap_or(0)
    }
}

fn throttle(rate: f64, quota: f64, window_ms: u64, max_ms: u64) -> Duration {
    if rate <= quota || quota <= 0.0 {
        return Duration::ZERO;
    }
    let ms = ((rate - quota) / quota * window_ms as f64).min(max_ms as f64);
    Duration::from_millis(ms as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_within_its_quota_is_never_throttled() {
        let mut r = Rate::new(11, 1000);
        // 900 bytes/s for a minute against a quota of 1,000.
        for ms in (0..60_000).step_by(100) {
            let (t, _) = r.record(90.0, 1_000_000 + ms, 1000.0);
            assert_eq!(t, Duration::ZERO, "at {ms} ms");
        }
    }

    #[test]
    fn a_burst_is_allowed_up_to_the_window_then_throttled_back_to_the_quota() {
        let mut r = Rate::new(11, 1000);
        let now = 5_000_000;
        // Ten windows' worth at once is within the quota measured over ten windows.
        assert_eq!(r.record(10_000.0, now, 1000.0).0, Duration::ZERO);
        // Twice that: 20,000 over 10 s is 2,000/s, twice the quota; a pause of another 10 s
        // brings the average back to 1,000/s.
        let (t, rate) = r.record(10_000.0, now, 1000.0);
        assert_eq!(rate, 2000.0);
        assert_eq!(t, Duration::from_secs(10));
        // Far over: capped at the whole window.
        let (t, _) = r.record(1_000_000.0, now, 1000.0);
        assert_eq!(t, Duration::from_secs(11));
    }

    #[test]
    fn old_samples_expire_and_a_steady_sender_converges_on_the_quota() {
        let mut r = Rate::new(11, 1000);
        assert!(!r.record(50_000.0, 0, 1000.0).0.is_zero());
        // Eleven windows later the burst is forgotten.
        assert!(r.record(100.0, 11_000, 1000.0).0.is_zero());
        assert_eq!(r.last_ms(), 11_000);

        // A client that sends 1 KB, waits out its throttle and sends again holds 1 KB/s.
        let mut r = Rate::new(11, 1000);
        let (mut now, mut sent) = (1_000_000u64, 0.0);
        let start = now;
        while now < start + 120_000 {
            let (t, _) = r.record(1000.0, now, 500.0);
            sent += 1000.0;
            now += 10 + t.as_millis() as u64;
        }
        let achieved = sent * 1000.0 / (now - start) as f64;
        assert!((500.0..=560.0).contains(&achieved), "{achieved}");
    }
}
