//! Paces a stream of work to a byte rate, across tasks: each caller reserves its bytes' share
//! of time after the previous reservation and sleeps until its turn. Idle time is not saved
//! up, so a pause never turns into a burst. Used by the offloader (upload bandwidth) and by
//! replicas being moved (`replica_move_max_bytes_per_second`).

use std::time::{Duration, Instant};

pub struct Throttle {
    bytes_per_second: u64,
    next_free: std::sync::Mutex<Instant>,
}

impl Throttle {
    /// A throttle of `bytes_per_second` (0: no bound).
    pub fn new(bytes_per_second: u64) -> Throttle {
        Throttle {
            bytes_per_second,
            next_free: std::sync::Mutex::new(Instant::now()),
        }
    }

    /// Waits for `bytes`' turn; returns how long it waited.
    pub async fn acquire(&self, bytes: u64) -> Duration {
        if self.bytes_per_second == 0 {
            return Duration::ZERO;
        }
        let now = Instant::now();
        let start = {
            let mut next = self.next_free.lock().unwrap_or_else(|p| p.into_inner());
            let start = (*next).max(now);
            *next = start + Duration::from_secs_f64(bytes as f64 / self.bytes_per_second as f64);
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
        let t = Throttle::new(10_000);
        assert_eq!(
            t.acquire(500).await,
            Duration::ZERO,
            "the first goes at once"
        );
        // The second waits out the first one's 50 ms share (less what already passed).
        let waited = t.acquire(500).await;
        assert!(waited >= Duration::from_millis(40), "{waited:?}");
        assert_eq!(Throttle::new(0).acquire(1 << 30).await, Duration::ZERO);
    }
}
