//! What the clients sharing one quota used, as a token bucket kept in time: the moment until
//! which their use so far is paid for at the quota's rate. Kafka measures a sampled rate over
//! a window instead and throttles by `(rate − quota) / quota × window`; that forgets a
//! sample's bytes all at once when it leaves the window, so clients whose requests or
//! responses are large next to the window (a fetch of whole batches) got 15–40 % over their
//! quota in our tests. The bucket holds them to it exactly, with the same burst.
//!
//! Invariants:
//! - over any time, the clients get at most the quota's rate plus one burst: a request's use
//!   moves the paid-until moment forward by `use / quota`, and it never lags more than the
//!   burst behind now (idle time saves up at most one burst);
//! - the throttle is how far the paid-until moment is ahead of now, at most `max`: a client
//!   that waits it out is back within its quota, and one enormous request is paid off over
//!   several throttles rather than by one unbounded wait.

use std::time::Duration;

pub(super) struct Bucket {
    /// Milliseconds (on the quota manager's clock) until which the use so far is paid for.
    paid_until_ms: f64,
    last_ms: u64,
}

impl Bucket {
    pub(super) fn new() -> Bucket {
        Bucket {
            paid_until_ms: f64::NEG_INFINITY,
            last_ms: 0,
        }
    }

    /// Adds `used` (bytes, or percent-seconds of a thread) at `now_ms` against `quota` (per
    /// second); the throttle it earned.
    pub(super) fn record(
        &mut self,
        used: f64,
        now_ms: u64,
        quota: f64,
        burst: Duration,
        max: Duration,
    ) -> Duration {
        let now = now_ms as f64;
        let floor = now - burst.as_millis() as f64;
        self.paid_until_ms = self.paid_until_ms.max(floor) + used / quota * 1000.0;
        self.last_ms = now_ms;
        let ahead = (self.paid_until_ms - now).clamp(0.0, max.as_millis() as f64);
        Duration::from_millis(ahead as u64)
    }

    /// When use was last recorded, for expiring clients gone idle.
    pub(super) fn last_ms(&self) -> u64 {
        self.last_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BURST: Duration = Duration::from_secs(10);
    const MAX: Duration = Duration::from_secs(11);

    #[test]
    fn a_client_within_its_quota_is_never_throttled() {
        let mut b = Bucket::new();
        for ms in (0..60_000).step_by(100) {
            let t = b.record(100.0, 1_000_000 + ms, 1000.0, BURST, MAX);
            assert_eq!(t, Duration::ZERO, "at {ms} ms");
        }
    }

    #[test]
    fn a_burst_is_allowed_then_the_client_pays_for_what_it_takes() {
        let mut b = Bucket::new();
        let now = 5_000_000;
        assert_eq!(b.record(10_000.0, now, 1000.0, BURST, MAX), Duration::ZERO);
        assert_eq!(
            b.record(2_000.0, now, 1000.0, BURST, MAX),
            Duration::from_secs(2)
        );
        // Far over: the throttle is capped, the debt is not.
        assert_eq!(b.record(100_000.0, now, 1000.0, BURST, MAX), MAX);
        assert_eq!(
            b.record(0.0, now + 60_000, 1000.0, BURST, MAX),
            MAX,
            "still paying off a minute later"
        );
        // Idle long enough, the client has a whole burst again, and no more.
        let later = now + 1_000_000;
        assert_eq!(
            b.record(10_000.0, later, 1000.0, BURST, MAX),
            Duration::ZERO
        );
        assert_eq!(
            b.record(1_000.0, later, 1000.0, BURST, MAX),
            Duration::from_secs(1)
        );
        assert_eq!(b.last_ms(), later);
    }

    #[test]
    fn clients_that_wait_out_their_throttle_get_the_quota_whatever_their_request_size() {
        for chunk in [4_000.0, 65_536.0, 1_000_000.0] {
            let mut b = Bucket::new();
            let quota = 262_144.0;
            let (start, mut now, mut sent) = (1_000_000u64, 1_000_000u64, 0.0);
            while now < start + 600_000 {
                let t = b.record(chunk, now, quota, BURST, MAX);
                sent += chunk;
                now += 1 + t.as_millis() as u64;
            }
            // The burst (10 s of quota) spread over ten minutes is under 2 %.
            let achieved = sent * 1000.0 / (now - start) as f64 / quota;
            assert!((0.97..=1.02).contains(&achieved), "{chunk}: {achieved}");
        }
    }
}
