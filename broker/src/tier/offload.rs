//! The offloader: every `remote_log_manager_task_interval_ms` it looks at a tenth of the
//! partitions this broker hosts (a sweep: each is visited once per ten ticks, so an idle
//! broker's tick costs a tenth of its partitions, not all of them) and, for each it leads,
//! applies local retention, uploads the closed segments the remote log does not have yet, in
//! offset order, then expires remote segments past retention ([`super::expiry`]). The backlog
//! gauges are published once per round.
//!
//! One task per partition at a time (a partition's segments must commit in order); at most
//! `remote_log_upload_concurrency` segments upload at once across partitions, paced by
//! `remote_log_upload_max_bytes_per_second`. A failed upload is retried with a backoff that
//! doubles up to a minute, so an unreachable store costs one attempt per backoff period per
//! partition, while produce and local fetch carry on untouched.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_metadata::{Command, RemoteSegment, RemoteSegmentState};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use uuid::Uuid;

use super::index;
use super::Tier;
use super::TierError;
use crate::log::ClosedSegment;
use crate::node::Node;
use crate::partition::{Partition, TopicPartition};

const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How often the backlog warning may repeat.
const WARN_EVERY: Duration = Duration::from_secs(60);
/// Backlog (closed segments not offloaded) that earns a warning.
const WARN_SEGMENTS: u64 = 10;
/// Ticks over which every hosted partition is visited once.
const TICKS_PER_ROUND: u64 = 10;
/// How often objects no record names are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(600);

struct Backoff {
    until: Instant,
    delay: Duration,
}

pub async fn run(node: Arc<Node>, tier: Arc<Tier>, mut shutdown: watch::Receiver<bool>) {
    let every = Duration::from_millis(node.config.remote_log_manager_task_interval_ms.max(10));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tasks: HashMap<TopicPartition, JoinHandle<Result<(), TierError>>> = HashMap::new();
    let mut backoff: HashMap<TopicPartition, Backoff> = HashMap::new();
    let mut last_warning: Option<Instant> = None;
    // The first sweep runs soon after start: that is when a crash's leftovers are found.
    let mut last_sweep = node.clock.instant() - SWEEP_EVERY + Duration::from_secs(5).min(every * 5);
    let mut sweep: Option<JoinHandle<()>> = None;
    let mut round = crate::partition::Sweep::default();
    let mut visited = 0usize;
    // Over the round so far: segments and bytes waiting for upload, segments and bytes remote.
    let mut backlog = (0u64, 0u64, 0u64, 0u64);
    loop {
        tokio::select! {
            _ = tick.tick() => {},
            _ = shutdown.changed() => break,
        }
        // Collect finished partition tasks: errors set a backoff, success clears it.
        let done: Vec<TopicPartition> = tasks
            .iter()
            .filter(|(_, h)| h.is_finished())
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in done {
            let Some(handle) = tasks.remove(&tp) else {
                continue;
            };
            match handle.await {
                Ok(Ok(())) => {
                    backoff.remove(&tp);
                }
                Ok(Err(e)) => {
                    let delay = backoff
                        .get(&tp)
                        .map(|b| (b.delay * 2).min(MAX_BACKOFF))
                        .unwrap_or(every.max(Duration::from_millis(500)));
                    tracing::warn!(topic = %tp.topic, partition = tp.partition, error = %e,
                        retry_in_ms = delay.as_millis() as u64, "remote tier work failed; will retry");
                    backoff.insert(
                        tp,
                        Backoff {
                            until: node.clock.instant() + delay,
                            delay,
                        },
                    );
                }
                Err(e) => tracing::error!(error = %e, "remote tier task panicked"),
            }
        }

        let state = node.metadata.state();
        let me = node.config.node_id;
        let hosted = node.partitions.hosted();
        let slice = round.next(hosted.all(), TICKS_PER_ROUND);
        visited += slice.len();
        for p in slice {
            if !p.is_tiered() {
                continue;
            }
            let Some(info) = state
                .topic_by_id(&p.topic_id)
                .and_then(|t| t.partitions.get(p.tp.partition as usize))
            else {
                continue;
            };
            if info.leader != Some(me) {
                continue;
            }
            // Local retention of tiered logs runs at this task's pace, so offloaded segments
            // leave the disk within a tick of `local.retention.ms`, not a retention pass.
            if let Err(e) = p.enforce_retention(node.clock.now_ms()) {
                tracing::error!(topic = %p.tp.topic, partition = p.tp.partition, error = %e, "local retention failed");
            }
            let remote = p.remote();
            backlog.2 += remote.segments.len() as u64;
            backlog.3 += remote.bytes();
            let pending = p.offload_candidates(remote.end);
            backlog.0 += pending.len() as u64;
            backlog.1 += pending.iter().map(|s| s.size).sum::<u64>();
            let has_deleting = info
                .remote
                .iter()
                .any(|s| s.state == RemoteSegmentState::Deleting);
            let expirable =
                super::expiry::expired_before(p, &remote, node.clock.now_ms()).is_some();
            if (pending.is_empty() && !has_deleting && !expirable)
                || tasks.contains_key(&p.tp)
                || backoff
                    .get(&p.tp)
                    .is_some_and(|b| node.clock.instant() < b.until)
            {
                continue;
            }
            let epoch = info.leader_epoch;
            tasks.insert(
                p.tp.clone(),
                tokio::spawn(maintain_partition(
                    node.clone(),
                    tier.clone(),
                    p.clone(),
                    pending,
                    epoch,
                )),
            );
        }
        if visited < hosted.all().len() {
            continue;
        }
        // A round is complete: every partition was counted once.
        let (lag_segments, lag_bytes, remote_segments, remote_bytes) = std::mem::take(&mut backlog);
        visited = 0;
        tier.metrics
            .set_backlog(lag_segments, lag_bytes, remote_segments, remote_bytes);
        if lag_segments >= WARN_SEGMENTS
            && last_warning.is_none_or(|t| node.clock.instant() - t >= WARN_EVERY)
        {
            last_warning = Some(node.clock.instant());
            tracing::warn!(
                segments = lag_segments,
                bytes = lag_bytes,
                "offload backlog is growing: closed segments are kept on local disk until the object store takes them"
            );
        }
        if node.clock.instant() - last_sweep >= SWEEP_EVERY
            && sweep.as_ref().is_none_or(|s| s.is_finished())
        {
            last_sweep = node.clock.instant();
            sweep = Some(tier.spawn(super::expiry::sweep_orphans(node.clone(), tier.clone())));
        }
    }
    // Uploads in flight are abandoned: their objects are orphans the next sweep deletes.
    for (_, t) in tasks {
        t.abort();
    }
    if let Some(s) = sweep {
        s.abort();
    }
}

/// Uploads `pending` in order, then expires what retention allows.
async fn maintain_partition(
    node: Arc<Node>,
    tier: Arc<Tier>,
    p: Arc<Partition>,
    pending: Vec<ClosedSegment>,
    leader_epoch: i32,
) -> Result<(), TierError> {
    for seg in pending {
        upload_segment(&node, &tier, &p, seg, leader_epoch).await?;
    }
    super::expiry::expire(&node, &tier, &p).await
}

async fn upload_segment(
    node: &Arc<Node>,
    tier: &Arc<Tier>,
    p: &Arc<Partition>,
    seg: ClosedSegment,
    leader_epoch: i32,
) -> Result<(), TierError> {
    let _slot = tier
        .upload_slots
        .acquire()
        .await
        .map_err(|_| TierError::Commit("shutting down".into()))?;
    let started = crate::clock::Stopwatch::start();
    // Retention may have deleted it meanwhile; the bytes stay mapped while we hold them.
    let Some((bytes, aborted)) = p.closed_segment(seg.base_offset)? else {
        return Ok(());
    };
    let base = seg.base_offset;
    let walk = bytes.clone();
    // Its aborted transactions and the producer state as of its end travel with it (see
    // `index`).
    let producers = p.producers_before(seg.next_offset);
    let summary =
        tokio::task::spawn_blocking(move || index::summarize(&walk, base, &aborted, &producers))
            .await
            .map_err(|e| TierError::Corrupt(e.to_string()))?
            .map_err(|e| {
                tier.metrics.upload_failed("corrupt");
                TierError::Corrupt(format!("local segment {base} cannot be offloaded: {e}"))
            })?;
    let id = Uuid::new_v4();
    let log_key = super::segment_key(&p.tp, &p.topic_id, base, &id, "log");
    let index_key = super::segment_key(&p.tp, &p.topic_id, base, &id, "index");
    tier.uploading().insert(id);
    let result = async {
        tier.store.put(&log_key, bytes).await?;
        // Paced after the bytes went out: the next upload waits for this one's share.
        let rate = node.settings().remote_log_upload_max_bytes_per_second;
        tier.throttle.acquire(summary.size, rate).await;
        tier.store.put(&index_key, summary.index.clone()).await?;
        let head = tier.store.head(&log_key).await?;
        if head.size != summary.size {
            return Err(TierError::Corrupt(format!(
                "{log_key}: the store holds {} bytes, {} were written",
                head.size, summary.size
            )));
        }
        let segment = RemoteSegment {
            id,
            base_offset: base,
            last_offset: summary.last_offset,
            size_bytes: summary.size,
            index_size_bytes: summary.index.len() as u64,
            max_timestamp: summary.max_timestamp,
            leader_epoch,
            crc32c: summary.crc32c,
            state: RemoteSegmentState::Committed,
        };
        node.apply(Command::CommitRemoteSegment {
            topic_id: p.topic_id,
            partition: p.tp.partition,
            segment,
        })
        .await
        .map_err(|e| TierError::Commit(e.message.clone()))?;
        Ok(())
    }
    .await;
    if let Err(e) = &result {
        tier.metrics.upload_failed(e.kind());
        // Nothing names these objects; delete them now rather than leave them to the sweep.
        for key in [&log_key, &index_key] {
            let _ = tier.store.delete(key).await;
        }
    }
    tier.uploading().remove(&id);
    result?;
    node.sync_partitions()
        .map_err(|e| TierError::Commit(e.message))?;
    // One log over two tiers, without a hole: local retention drops only what is offloaded,
    // so the local log still starts at or below the new remote end.
    debug_assert!(
        p.local_log_start() <= summary.last_offset + 1,
        "{}-{}: local log starts at {}, past the remote end {}",
        p.tp.topic,
        p.tp.partition,
        p.local_log_start(),
        summary.last_offset + 1
    );
    tier.metrics
        .uploaded(summary.size, started.elapsed().as_secs_f64());
    tracing::info!(topic = %p.tp.topic, partition = p.tp.partition, base, last = summary.last_offset,
        bytes = summary.size, ms = started.elapsed().as_millis() as u64, "offloaded segment");
    Ok(())
}
