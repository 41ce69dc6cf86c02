//! Time, read in one place. Two readings exist:
//! - [`Clock::now_ms`], wall-clock milliseconds since the Unix epoch as Kafka measures them
//!   (record timestamps, retention, offset expiry, transaction start times);
//! - [`Clock::instant`], a monotonic instant for every timeout the broker decides (session
//!   timeouts, rebalance and join deadlines, fetch-session eviction, ISR lag, throttles,
//!   back-offs, periodic jobs).
//!
//! Both come from the [`Clock`] handed down from the [`crate::node::Node`], so a test can hold
//! time still or move it on ([`Clock::manual`], [`Clock::advance`]) and check a timeout without
//! sleeping. A [`Stopwatch`] measures how long real work took, for metrics and logs only: it
//! never decides anything, so it reads the system's monotonic clock directly. Waits handed to
//! tokio's timers (`sleep_until`, `interval`) use tokio's clock, which a test pauses with
//! `tokio::time::pause`.
//!
//! `clippy.toml` bans `Instant::now` and `SystemTime::now`; this module is the one place
//! allowed to call them (see docs/invariants.md, invariant 8).
#![allow(clippy::disallowed_methods)]

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The system clock, or (in tests) a manual one.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    manual: Option<Arc<Manual>>,
}

#[derive(Debug)]
struct Manual {
    /// The instant the manual clock was made: its instants are this plus what was advanced.
    origin: Instant,
    start_ms: i64,
    advanced_ms: AtomicI64,
}

impl Clock {
    pub fn system() -> Clock {
        Clock::default()
    }

    /// A clock that reads `start_ms` (and an instant fixed at its making) until
    /// [`Clock::advance`] moves both on.
    #[cfg(test)]
    pub fn manual(start_ms: i64) -> Clock {
        Clock {
            manual: Some(Arc::new(Manual {
                origin: Instant::now(),
                start_ms,
                advanced_ms: AtomicI64::new(0),
            })),
        }
    }

    /// Moves a manual clock (and every clone of it) on by `by`; the system clock ignores it.
    #[cfg(test)]
    pub fn advance(&self, by: Duration) {
        if let Some(m) = &self.manual {
            m.advanced_ms
                .fetch_add(by.as_millis() as i64, Ordering::Relaxed);
        }
    }

    /// Milliseconds since the Unix epoch (0 if the system clock is before it).
    pub fn now_ms(&self) -> i64 {
        match &self.manual {
            Some(m) => m.start_ms + m.advanced_ms.load(Ordering::Relaxed),
            None => system_ms(),
        }
    }

    /// The monotonic instant timeouts are measured from.
    pub fn instant(&self) -> Instant {
        match &self.manual {
            Some(m) => {
                m.origin + Duration::from_millis(m.advanced_ms.load(Ordering::Relaxed) as u64)
            }
            None => Instant::now(),
        }
    }
}

fn system_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// How long real work took: request latencies, load and flush times in metrics and logs.
#[derive(Clone, Copy, Debug)]
pub struct Stopwatch(Instant);

impl Stopwatch {
    pub fn start() -> Stopwatch {
        Stopwatch(Instant::now())
    }

    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced_and_its_clones_share_it() {
        let clock = Clock::manual(1_000);
        let handed_out = clock.clone();
        let t0 = handed_out.instant();
        assert_eq!(handed_out.now_ms(), 1_000);
        clock.advance(Duration::from_millis(500));
        assert_eq!(handed_out.now_ms(), 1_500);
        assert_eq!(handed_out.instant() - t0, Duration::from_millis(500));
        let system = Clock::system();
        assert!((system.now_ms() - system_ms()).abs() < 60_000);
    }
}
