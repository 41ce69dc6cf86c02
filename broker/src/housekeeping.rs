//! The broker's periodic background work, as named [`Job`]s of one [`Scheduler`] (see
//! [`crate::schedule`]), in the order they run within a round:
//!
//! | job | every | what |
//! |---|---|---|
//! | `offsets_expiry` | `log_retention_check_interval_ms` | committed offsets past `offsets_retention_minutes` |
//! | `coordinators` | 100 ms | group, transaction and share-state loads follow leadership; session expiry and rebalance deadlines |
//! | `share_locks` | 100 ms | share groups' records whose acquisition locks expired go back, those at the delivery limit archived and written (off the round); share partitions no longer led here dropped (see `share/`) |
//! | `share_dead_letters` | 100 ms | share groups' dead letters written to their dead-letter topics, with back-off (off the round; see `share/dead_letters.rs`) |
//! | `txn_timeouts` | `transaction_abort_timed_out_transaction_cleanup_interval_ms` | transactions past their timeout aborted (off the round: its writes wait for the ISR) |
//! | `isr` | half `replica_lag_time_max_ms`, as Kafka's | followers lagging out of the ISR |
//! | `internal_topics` | 1 s | on the controller: internal topics grown to their replication factor |
//! | `leader_pins` | 1 s | on the controller: partitions of topics with `leaders.preference` led from their pinned racks (see `node/leader_pins.rs`) |
//! | `auto_balance` | `auto_balance_interval_ms` | the automatic balancer |
//! | `lag` | `lag_sample_interval_ms` | consumer lag sampled (share groups' from their share partitions' start offsets); partitions led elsewhere asked of their leaders (off the round) |
//! | `metrics_history` | 10 s | the console's charts: a sample of the series `metrics/history.rs` keeps for an hour |
//! | `log_sweep` | 100 ms | a slice of the partitions, each once per `log_retention_check_interval_ms`: retention, `segment.ms` rolls of idle segments (see `partition::activity`) |
//! | `flush` | 100 ms | partitions written since: `flush.ms` flushes, and fsyncs of rolled segments off the runtime |
//! | `log_dirs` | 1 s | the log directories probed (see `node/log_dirs.rs`) |
//! | `tls_reload` | 10 s, with TLS listeners | the certificate and key reloaded if their files changed |
//! | `jwks_refresh` | `sasl_oauthbearer_jwks_endpoint_refresh_ms`, with OAUTHBEARER | the key set read again |
//!
//! Not jobs here: the offloader (`tier/offload.rs`, its own loop of per-partition uploads with
//! back-off, reading the same clock), the controller session (`session.rs`: heartbeats whose
//! last act is the controlled shutdown), the metadata follower (driven by changes, not time)
//! and the cleaner's thread.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::task::JoinHandle;

use crate::broker::Broker;
use crate::schedule::{Job, Scheduler, Tick};

/// How often the scheduler wakes, and the interval of the per-round jobs.
pub const RESOLUTION: Duration = Duration::from_millis(100);

/// How often the controller checks that internal topics have their replication factor.
const GROW_EVERY: Duration = Duration::from_secs(1);

const LOG_DIRS_EVERY: Duration = Duration::from_secs(1);

/// How often the controller checks that pinned leaders lead from their racks.
const PIN_EVERY: Duration = Duration::from_secs(1);

/// Every job of a running broker, ready to run.
pub fn scheduler(broker: &Arc<Broker>) -> Scheduler {
    let node = &broker.node;
    let cfg = &node.config;
    let mut s = Scheduler::new(node.clock.clone(), &node.metrics);
    let b = || broker.clone();
    s.add(periodic(
        "offsets_expiry",
        Duration::from_millis(cfg.log_retention_check_interval_ms.max(100)),
        b(),
        |b, at| {
            let minutes = b.node.config.offsets_retention_minutes;
            let retention_ms = match minutes < 0 {
                true => -1,
                false => minutes.saturating_mul(60_000),
            };
            b.groups.expire_offsets(at.now_ms, retention_ms);
            Box::pin(async {})
        },
    ));
    s.add(periodic("coordinators", RESOLUTION, b(), |b, _| {
        async move {
            // Retries a failed group or transaction load; a no-op when nothing changed.
            b.groups.follow_leadership().await;
            b.txn.follow_leadership().await;
            b.shares.persister.coordinator.follow_leadership().await;
            b.groups.tick();
        }
        .boxed()
    }));
    // Its writes of archived records wait for an ISR: off the round.
    s.add(background("share_locks", RESOLUTION, b(), |b, _| {
        async move { b.shares.expire().await }.boxed()
    }));
    // Its writes wait for dead-letter topics' ISRs, and back off: off the round.
    s.add(background("share_dead_letters", RESOLUTION, b(), |b, _| {
        async move { b.shares.write_dead_letters().await }.boxed()
    }));
    // Its writes wait for the ISR: off the round.
    s.add(background(
        "txn_timeouts",
        Duration::from_millis(cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms),
        b(),
        |b, _| async move { b.txn.abort_timed_out().await }.boxed(),
    ));
    s.add(periodic(
        "isr",
        Duration::from_millis(cfg.replica_lag_time_max_ms / 2).max(RESOLUTION),
        b(),
        |b, _| async move { b.isr.check() }.boxed(),
    ));
    s.add(periodic("internal_topics", GROW_EVERY, b(), |b, _| {
        async move {
            if b.node.metadata.is_leader() {
                b.node.grow_internal_topics().await;
            }
        }
        .boxed()
    }));
    s.add(periodic("leader_pins", PIN_EVERY, b(), |b, _| {
        async move { b.node.pin_leaders().await }.boxed()
    }));
    s.add(AutoBalance {
        broker: b(),
        memory: Default::default(),
    });
    // In the background: partitions led elsewhere are asked of their leaders.
    s.add(background(
        "lag",
        Duration::from_millis(cfg.lag_sample_interval_ms),
        b(),
        |b, _| {
            async move {
                // Share groups' start offsets are their committed offsets here.
                let mut committed = b.groups.committed();
                committed.extend(b.shares.starts());
                b.lag.sample(committed).await
            }
            .boxed()
        },
    ));
    // The baseline the first point is measured from, taken before the Kafka listener accepts.
    (broker.node.metrics.history()).sample(broker.node.clock.now_ms());
    s.add(periodic(
        "metrics_history",
        crate::metrics::history::INTERVAL,
        b(),
        |b, tick| async move { b.node.metrics.history().sample(tick.now_ms) }.boxed(),
    ));
    s.add(LogSweep {
        broker: b(),
        cursor: Default::default(),
    });
    s.add(Flush {
        broker: b(),
        running: None,
    });
    // A failing disk's probe may hang: off the round, so the other jobs go on.
    s.add(background("log_dirs", LOG_DIRS_EVERY, b(), |b, _| {
        async move { b.node.check_log_dirs().await }.boxed()
    }));
    if let Some(every) = broker.security.tls_reload_interval() {
        s.add(background("tls_reload", every, b(), |b, _| {
            async move { b.security.reload_tls().await }.boxed()
        }));
    }
    // A key-set endpoint may be slow to answer.
    if let Some(every) = broker.security.jwks_refresh_interval() {
        s.add(background("jwks_refresh", every, b(), |b, _| {
            async move { b.security.refresh_jwks().await }.boxed()
        }));
    }
    s
}

type Round = fn(Arc<Broker>, Tick) -> BoxFuture<'static, ()>;

/// A job with no state of its own: a round is `run(broker, tick)`, awaited.
fn periodic(name: &'static str, every: Duration, broker: Arc<Broker>, run: Round) -> Periodic {
    Periodic {
        name,
        every,
        broker,
        run,
        running: None,
        detached: false,
    }
}

/// [`periodic`], but each round is spawned and rounds are skipped while one runs: for work
/// that may wait long. Abandoned at shutdown.
fn background(name: &'static str, every: Duration, broker: Arc<Broker>, run: Round) -> Periodic {
    Periodic {
        detached: true,
        ..periodic(name, every, broker, run)
    }
}

struct Periodic {
    name: &'static str,
    every: Duration,
    broker: Arc<Broker>,
    run: Round,
    detached: bool,
    running: Option<JoinHandle<()>>,
}

impl Job for Periodic {
    fn name(&self) -> &'static str {
        self.name
    }
    fn every(&self) -> Duration {
        self.every
    }
    fn tick(&mut self, at: Tick) -> BoxFuture<'_, ()> {
        if !self.detached {
            return (self.run)(self.broker.clone(), at);
        }
        if self.running.as_ref().is_none_or(|t| t.is_finished()) {
            self.running = Some(tokio::spawn((self.run)(self.broker.clone(), at)));
        }
        Box::pin(async {})
    }
}

struct AutoBalance {
    broker: Arc<Broker>,
    memory: crate::node::AutoBalance,
}

impl Job for AutoBalance {
    fn name(&self) -> &'static str {
        "auto_balance"
    }
    fn every(&self) -> Duration {
        Duration::from_millis(self.broker.node.config.auto_balance_interval_ms.max(100))
    }
    fn tick(&mut self, _: Tick) -> BoxFuture<'_, ()> {
        Box::pin(self.broker.node.auto_balance(&mut self.memory))
    }
}

struct LogSweep {
    broker: Arc<Broker>,
    cursor: crate::partition::Sweep,
}

impl Job for LogSweep {
    fn name(&self) -> &'static str {
        "log_sweep"
    }
    fn every(&self) -> Duration {
        RESOLUTION
    }
    fn tick(&mut self, at: Tick) -> BoxFuture<'_, ()> {
        let node = &self.broker.node;
        let retention_every = node.config.log_retention_check_interval_ms.max(100);
        let rounds_per_sweep = retention_every / RESOLUTION.as_millis() as u64;
        let hosted = node.partitions.hosted();
        for p in self.cursor.next(hosted.all(), rounds_per_sweep) {
            if let Err(e) = p.sweep(at.now_ms) {
                tracing::error!(topic = %p.tp.topic, partition = p.tp.partition, error = %e, "housekeeping failed");
            }
        }
        Box::pin(async {})
    }
}

struct Flush {
    broker: Arc<Broker>,
    running: Option<JoinHandle<()>>,
}

impl Job for Flush {
    fn name(&self) -> &'static str {
        "flush"
    }
    fn every(&self) -> Duration {
        RESOLUTION
    }
    fn tick(&mut self, at: Tick) -> BoxFuture<'_, ()> {
        let written = self.broker.node.partitions.activity().take();
        for p in &written {
            match p.flush_due(at.now_ms) {
                Ok(false) => {}
                Ok(true) => p.revisit(),
                Err(e) => {
                    tracing::error!(topic = %p.tp.topic, partition = p.tp.partition, error = %e, "flush failed; will retry");
                    p.revisit();
                }
            }
        }
        // Fsyncs of rolled segments block for as long as the disk takes: off the runtime, one
        // batch at a time; partitions written meanwhile wait for the next.
        if self.running.as_ref().is_none_or(|f| f.is_finished()) {
            self.running = Some(tokio::task::spawn_blocking(move || {
                for p in written {
                    if let Err(e) = p.flush_rolled() {
                        tracing::error!(topic = %p.tp.topic, partition = p.tp.partition, error = %e, "fsync of a rolled segment failed; will retry");
                        p.revisit();
                    }
                }
            }));
        } else {
            for p in written {
                p.revisit();
            }
        }
        Box::pin(async {})
    }
    fn stop(&mut self) -> BoxFuture<'_, ()> {
        // Clean close flushes what is left; it must not race a batch in flight.
        Box::pin(async {
            if let Some(f) = self.running.take() {
                let _ = f.await;
            }
        })
    }
}
