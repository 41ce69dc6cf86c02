//! Paces a stream of work to a byte rate, across tasks: each caller reserves its bytes' share
//! of time after the previous reservation and sleeps until its turn. Idle time is not saved
//! up, so a pause never turns into a burst. Used by the offloader (upload bandwidth,
//! `remote_log_upload_max_bytes_per_second`). The rate comes with each reservation: it is a
//! dynamic setting, so it may change between two.

use std::time::{Duration, Instant};

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
        tokio::time::sleep_until(start.into()).await;
        start - now
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
}
