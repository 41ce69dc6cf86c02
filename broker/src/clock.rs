//! Wall-clock time as Kafka measures it: milliseconds since the Unix epoch. Record timestamps,
//! retention, group expiry and lag all read it here, through a [`Clock`] handed down from the
//! [`crate::node::Node`], so a test can hold time still or move it on.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// The system clock, or (in tests) a manual one.
#[derive(Clone, Debug, Default)]
pub struct Clock {
    manual: Option<Arc<AtomicI64>>,
}

impl Clock {
    pub fn system() -> Clock {
        Clock::default()
    }

    /// A clock that reads `start_ms` until [`Clock::advance`] moves it.
    #[cfg(test)]
    pub fn manual(start_ms: i64) -> Clock {
        Clock {
            manual: Some(Arc::new(AtomicI64::new(start_ms))),
        }
    }

    #[cfg(test)]
    pub fn advance(&self, ms: i64) {
        if let Some(m) = &self.manual {
            m.fetch_add(ms, Ordering::Relaxed);
        }
    }

    pub fn now_ms(&self) -> i64 {
        match &self.manual {
            Some(m) => m.load(Ordering::Relaxed),
            None => now_ms(),
        }
    }
}

/// The system clock's milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced_and_its_clones_share_it() {
        let clock = Clock::manual(1_000);
        let handed_out = clock.clone();
        assert_eq!(handed_out.now_ms(), 1_000);
        clock.advance(500);
        assert_eq!(handed_out.now_ms(), 1_500);
        let system = Clock::system();
        assert!((system.now_ms() - now_ms()).abs() < 60_000);
    }
}
