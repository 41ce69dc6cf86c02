//! Periodic background work, one shape for all of it: a [`Job`] has a name, an interval, a
//! round ([`Job::tick`]) and a last word at shutdown ([`Job::stop`]); a [`Scheduler`] runs the
//! jobs due, in the order they were added, and counts each round and its time on `/metrics`
//! (`strata_job_runs_total{job}`, `strata_job_seconds{job}`).
//!
//! Due-ness is read from the injected [`Clock`], so a test moves a manual clock on and calls
//! [`Scheduler::run_due`] to see exactly which jobs run; the scheduler's own wake-ups are a
//! tokio interval at its resolution. A round is awaited before the next job's: a job whose
//! work outlasts a round (fsyncs, writes waiting for the ISR) spawns it and skips rounds while
//! it runs, so one slow job never holds the others back.

use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use tokio::sync::watch;
use tracing::Instrument;

use crate::clock::{Clock, Stopwatch};
use crate::metrics::Metrics;

/// The time a round runs at.
#[derive(Clone, Copy, Debug)]
pub struct Tick {
    pub instant: Instant,
    /// Milliseconds since the Unix epoch.
    pub now_ms: i64,
}

pub trait Job: Send {
    /// The label of its metrics and logs.
    fn name(&self) -> &'static str;

    /// How long after a round the next is due; read after every round, so it may follow a
    /// dynamic setting.
    fn every(&self) -> Duration;

    fn tick(&mut self, at: Tick) -> BoxFuture<'_, ()>;

    /// At shutdown, after the last round: waits for work the job spawned that must not be
    /// cut short.
    fn stop(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct JobLabels {
    job: &'static str,
}

#[derive(Clone)]
struct JobMetrics {
    runs: Family<JobLabels, Counter>,
    seconds: Family<JobLabels, Histogram>,
}

impl JobMetrics {
    fn new() -> JobMetrics {
        JobMetrics {
            runs: Family::default(),
            // 10 µs .. ~40 s
            seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.00001, 2.0, 22))
            }),
        }
    }
}

struct Scheduled {
    job: Box<dyn Job>,
    due: Instant,
}

pub struct Scheduler {
    clock: Clock,
    jobs: Vec<Scheduled>,
    metrics: JobMetrics,
}

impl Scheduler {
    pub fn new(clock: Clock, metrics: &Metrics) -> Scheduler {
        let m = JobMetrics::new();
        let (runs, seconds) = (m.runs.clone(), m.seconds.clone());
        metrics.register(|r| {
            r.register("job_runs", "Rounds of each periodic background job", runs);
            r.register(
                "job_seconds",
                "How long each round of a periodic background job took",
                seconds,
            );
        });
        Scheduler {
            clock,
            jobs: Vec::new(),
            metrics: m,
        }
    }

    /// Adds a job; its first round is due one interval from now.
    pub fn add(&mut self, job: impl Job + 'static) {
        let due = self.clock.instant() + job.every();
        self.jobs.push(Scheduled {
            job: Box::new(job),
            due,
        });
    }

    /// Runs, in order, every job due at the clock's now; returns the names of those run.
    pub async fn run_due(&mut self) -> Vec<&'static str> {
        let at = Tick {
            instant: self.clock.instant(),
            now_ms: self.clock.now_ms(),
        };
        let mut ran = Vec::new();
        for s in &mut self.jobs {
            if s.due > at.instant {
                continue;
            }
            let name = s.job.name();
            let took = Stopwatch::start();
            (s.job.tick(at))
                .instrument(tracing::debug_span!("job", job = name))
                .await;
            let labels = JobLabels { job: name };
            self.metrics.runs.get_or_create(&labels).inc();
            (self.metrics.seconds.get_or_create(&labels)).observe(took.elapsed().as_secs_f64());
            // From the round's start: a round that overran is not made up for.
            s.due = at.instant + s.job.every();
            ran.push(name);
        }
        ran
    }

    /// Wakes every `resolution` and runs what is due until `shutdown`, then stops every job.
    pub async fn run(mut self, resolution: Duration, mut shutdown: watch::Receiver<bool>) {
        let mut wake = tokio::time::interval(resolution);
        wake.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = wake.tick() => {}
                _ = shutdown.changed() => break,
            }
            self.run_due().await;
        }
        for s in &mut self.jobs {
            s.job.stop().await;
        }
    }
}

/// A Tokio runtime for background work (the tier's uploads and remote reads, Iceberg
/// translation) on threads the kernel schedules after the Kafka request threads (nice 10):
/// that work competes with produce and hot fetch for the same cores, and must lose.
pub struct BackgroundRuntime(Option<tokio::runtime::Runtime>);

impl BackgroundRuntime {
    pub fn new(name: &'static str, threads: usize) -> std::io::Result<BackgroundRuntime> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name(name)
            .on_thread_start(move || {
                // Failure only means the thread keeps normal priority.
                if !crate::sys::set_thread_nice(10) {
                    tracing::debug!(name, "could not lower the priority of a background thread");
                }
            })
            .enable_all()
            .build()?;
        Ok(BackgroundRuntime(Some(rt)))
    }

    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("runtime lives until drop").handle()
    }
}

impl Drop for BackgroundRuntime {
    fn drop(&mut self) {
        // Dropped from async code at shutdown, where a blocking drop would panic.
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    struct Recorder {
        name: &'static str,
        every: Duration,
        seen: Arc<Mutex<Vec<(&'static str, i64)>>>,
        stopped: Arc<Mutex<bool>>,
    }

    impl Job for Recorder {
        fn name(&self) -> &'static str {
            self.name
        }
        fn every(&self) -> Duration {
            self.every
        }
        fn tick(&mut self, at: Tick) -> BoxFuture<'_, ()> {
            self.seen.lock().unwrap().push((self.name, at.now_ms));
            Box::pin(async {})
        }
        fn stop(&mut self) -> BoxFuture<'_, ()> {
            *self.stopped.lock().unwrap() = true;
            Box::pin(async {})
        }
    }

    #[tokio::test]
    async fn jobs_run_when_due_on_the_clock_in_the_order_added_and_are_counted() {
        let clock = Clock::manual(0);
        let metrics = Metrics::new();
        let mut s = Scheduler::new(clock.clone(), &metrics);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stopped = Arc::new(Mutex::new(false));
        for (name, ms) in [("fast", 100), ("slow", 1_000)] {
            s.add(Recorder {
                name,
                every: Duration::from_millis(ms),
                seen: seen.clone(),
                stopped: stopped.clone(),
            });
        }
        assert!(
            s.run_due().await.is_empty(),
            "nothing due before an interval"
        );
        clock.advance(Duration::from_millis(100));
        assert_eq!(s.run_due().await, ["fast"]);
        assert!(s.run_due().await.is_empty(), "not twice at one instant");
        clock.advance(Duration::from_millis(900));
        assert_eq!(s.run_due().await, ["fast", "slow"]);
        // A long pause is one round, not the rounds missed.
        clock.advance(Duration::from_secs(10));
        assert_eq!(s.run_due().await, ["fast", "slow"]);
        assert_eq!(
            *seen.lock().unwrap(),
            [
                ("fast", 100),
                ("fast", 1_000),
                ("slow", 1_000),
                ("fast", 11_000),
                ("slow", 11_000)
            ]
        );
        let text = metrics.render();
        assert!(
            text.contains(r#"strata_job_runs_total{job="fast"} 3"#),
            "{text}"
        );
        assert!(
            text.contains(r#"strata_job_seconds_count{job="slow"} 2"#),
            "{text}"
        );

        let (tx, rx) = watch::channel(false);
        tx.send(true).unwrap();
        s.run(Duration::from_millis(10), rx).await;
        assert!(*stopped.lock().unwrap(), "stop runs at shutdown");
    }
}
