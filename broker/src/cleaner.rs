//! The log cleaner: one background thread that compacts, dirtiest first, every log whose dirty
//! ratio has reached its `min.cleanable.dirty.ratio`, reading and writing at most
//! `log_cleaner_io_max_bytes_per_second`.
//!
//! One thread is enough: a clean is sequential I/O bounded by the throttle, and one cleaner
//! never races itself on a log. A log whose clean fails (a corrupt batch, say) is set aside
//! until the broker restarts rather than retried every pass, as Kafka does.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::broker::Broker;
use crate::partition::TopicPartition;

pub struct Cleaner {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Cleaner {
    /// Starts the cleaner thread (nothing runs when `log_cleaner_enable` is false).
    pub fn start(broker: Arc<Broker>) -> std::io::Result<Cleaner> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = if broker.config.log_cleaner_enable {
            let stop = stop.clone();
            Some(
                std::thread::Builder::new()
                    .name("strata-cleaner".into())
                    .spawn(move || run(&broker, &stop))?,
            )
        } else {
            None
        };
        Ok(Cleaner { stop, thread })
    }

    /// Stops the thread, abandoning a clean in progress (its staging files are discarded).
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(broker: &Broker, stop: &AtomicBool) {
    let backoff = Duration::from_millis(broker.config.log_cleaner_backoff_ms.max(10));
    let mut uncleanable = HashSet::new();
    while !stop.load(Ordering::Acquire) {
        if pass(broker, stop, &mut uncleanable) {
            continue;
        }
        let idle = Instant::now();
        while idle.elapsed() < backoff && !stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(50).min(backoff));
        }
    }
}

/// Cleans the dirtiest log that is due. Returns true if one was cleaned.
fn pass(broker: &Broker, stop: &AtomicBool, uncleanable: &mut HashSet<TopicPartition>) -> bool {
    let mut dirty: Vec<_> = broker
        .partitions
        .all()
        .into_iter()
        .filter(|p| !uncleanable.contains(&p.tp))
        .map(|p| (p.dirty_ratio(), p))
        .filter(|(ratio, _)| *ratio > 0.0)
        .collect();
    dirty.sort_by(|a, b| b.0.total_cmp(&a.0));
    broker
        .metrics
        .set_cleaner_state(dirty.first().map(|d| d.0).unwrap_or(0.0), uncleanable.len());
    let cfg = &broker.config;
    for (ratio, p) in dirty {
        if stop.load(Ordering::Acquire) {
            return false;
        }
        let started = Instant::now();
        let mut throttle = Throttle::new(cfg.log_cleaner_io_max_bytes_per_second);
        let mut progress = |bytes: u64| {
            throttle.pace(bytes);
            !stop.load(Ordering::Acquire)
        };
        let span = tracing::info_span!("clean", topic = %p.tp.topic, partition = p.tp.partition);
        let _enter = span.enter();
        match p.clean(cfg.log_cleaner_dedupe_buffer_size as usize, &mut progress) {
            Ok(Some(stats)) => {
                let secs = started.elapsed().as_secs_f64();
                tracing::info!(
                    dirty_ratio = format!("{ratio:.2}"),
                    read_mb = stats.bytes_read as f64 / 1e6,
                    written_mb = stats.bytes_written as f64 / 1e6,
                    records_removed = stats.records_removed,
                    tombstones_removed = stats.tombstones_removed,
                    segments = format!("{} -> {}", stats.segments_before, stats.segments_after),
                    seconds = format!("{secs:.2}"),
                    mb_per_s = format!("{:.1}", stats.bytes_read as f64 / 1e6 / secs.max(1e-6)),
                    "compacted log"
                );
                broker.metrics.cleaned(&stats, secs);
                return true;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::error!(error = %e, "compaction failed; this log will not be cleaned again until restart");
                broker.metrics.cleaner_failed();
                uncleanable.insert(p.tp.clone());
            }
        }
    }
    false
}

/// Paces a stream of bytes to `rate` per second (0: unbounded), measured over one-second windows
/// so a pause does not turn into a burst.
struct Throttle {
    rate: u64,
    window: Instant,
    bytes: u64,
}

impl Throttle {
    fn new(rate: u64) -> Throttle {
        Throttle {
            rate,
            window: Instant::now(),
            bytes: 0,
        }
    }

    fn pace(&mut self, bytes: u64) {
        if self.rate == 0 {
            return;
        }
        self.bytes += bytes;
        let due = Duration::from_secs_f64(self.bytes as f64 / self.rate as f64);
        let elapsed = self.window.elapsed();
        if due > elapsed {
            std::thread::sleep(due - elapsed);
        }
        if self.window.elapsed() >= Duration::from_secs(1) {
            self.window = Instant::now();
            self.bytes = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_throttle_holds_the_rate() {
        let mut t = Throttle::new(1_000_000);
        let started = Instant::now();
        for _ in 0..10 {
            t.pace(50_000);
        }
        // 500 kB at 1 MB/s cannot take less than half a second.
        assert!(started.elapsed() >= Duration::from_millis(450));
    }
}
