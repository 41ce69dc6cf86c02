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
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use std::sync::atomic::AtomicU64;

use crate::log::cleaning::CleanStats;
use crate::metrics::Metrics;
use crate::node::Node;
use crate::partition::TopicPartition;
use crate::throttle::Pacer;

/// `strata_log_cleaner_*`.
#[derive(Default)]
struct CleanerMetrics {
    runs: Counter,
    bytes_read: Counter,
    bytes_written: Counter,
    records_removed: Counter,
    errors: Counter,
    last_seconds: Gauge<f64, AtomicU64>,
    max_dirty_ratio: Gauge<f64, AtomicU64>,
    uncleanable: Gauge,
}

impl CleanerMetrics {
    fn new(metrics: &Metrics) -> CleanerMetrics {
        let m = CleanerMetrics::default();
        metrics.register(|registry| {
            registry.register(
                "log_cleaner_runs",
                "Compaction passes that swapped in cleaned segments",
                m.runs.clone(),
            );
            registry.register(
                "log_cleaner_read_bytes",
                "Bytes the log cleaner read",
                m.bytes_read.clone(),
            );
            registry.register(
                "log_cleaner_written_bytes",
                "Bytes the log cleaner wrote",
                m.bytes_written.clone(),
            );
            registry.register(
                "log_cleaner_removed_records",
                "Records compaction removed (superseded, keyless, or expired tombstones)",
                m.records_removed.clone(),
            );
            registry.register(
                "log_cleaner_errors",
                "Compaction passes that failed",
                m.errors.clone(),
            );
            registry.register(
                "log_cleaner_last_run_seconds",
                "Duration of the last compaction pass",
                m.last_seconds.clone(),
            );
            registry.register(
                "log_cleaner_max_dirty_ratio",
                "Largest dirty ratio among compacted partitions at the last cleaner pass",
                m.max_dirty_ratio.clone(),
            );
            registry.register(
                "log_cleaner_uncleanable_partitions",
                "Partitions the cleaner gave up on after an error (until restart)",
                m.uncleanable.clone(),
            );
        });
        m
    }

    fn cleaned(&self, stats: &CleanStats, seconds: f64) {
        self.runs.inc();
        self.bytes_read.inc_by(stats.bytes_read);
        self.bytes_written.inc_by(stats.bytes_written);
        self.records_removed.inc_by(stats.records_removed);
        self.last_seconds.set(seconds);
    }
}

pub struct Cleaner {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Cleaner {
    /// Starts the cleaner thread (nothing runs when `log_cleaner_enable` is false).
    pub fn start(node: Arc<Node>) -> std::io::Result<Cleaner> {
        let stop = Arc::new(AtomicBool::new(false));
        let metrics = CleanerMetrics::new(&node.metrics);
        let thread = if node.config.log_cleaner_enable {
            let stop = stop.clone();
            Some(
                std::thread::Builder::new()
                    .name("strata-cleaner".into())
                    .spawn(move || run(&node, &metrics, &stop))?,
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

fn run(node: &Node, metrics: &CleanerMetrics, stop: &AtomicBool) {
    let backoff = Duration::from_millis(node.config.log_cleaner_backoff_ms.max(10));
    let mut uncleanable = HashSet::new();
    while !stop.load(Ordering::Acquire) {
        if pass(node, metrics, stop, &mut uncleanable) {
            continue;
        }
        let idle = crate::clock::Stopwatch::start();
        while idle.elapsed() < backoff && !stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(50).min(backoff));
        }
    }
}

/// Cleans the dirtiest log that is due. Returns true if one was cleaned.
fn pass(
    node: &Node,
    metrics: &CleanerMetrics,
    stop: &AtomicBool,
    uncleanable: &mut HashSet<TopicPartition>,
) -> bool {
    let mut dirty: Vec<_> = node
        .partitions
        .hosted()
        .all()
        .iter()
        .filter(|p| !uncleanable.contains(&p.tp))
        .map(|p| (p.dirty_ratio(), p.clone()))
        .filter(|(ratio, _)| *ratio > 0.0)
        .collect();
    dirty.sort_by(|a, b| b.0.total_cmp(&a.0));
    metrics
        .max_dirty_ratio
        .set(dirty.first().map(|d| d.0).unwrap_or(0.0));
    metrics.uncleanable.set(uncleanable.len() as i64);
    let cfg = node.settings();
    for (ratio, p) in dirty {
        if stop.load(Ordering::Acquire) {
            return false;
        }
        let started = crate::clock::Stopwatch::start();
        let mut pacer = Pacer::default();
        let mut progress = |bytes: u64| {
            pacer.pace(bytes, cfg.log_cleaner_io_max_bytes_per_second);
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
                metrics.cleaned(&stats, secs);
                return true;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::error!(error = %e, "compaction failed; this log will not be cleaned again until restart");
                metrics.errors.inc();
                uncleanable.insert(p.tp.clone());
            }
        }
    }
    false
}
