//! Remote retention and orphan cleanup.
//!
//! Expiry is three steps, each safe to repeat after a crash: mark the expired records
//! `Deleting` through the quorum (they stop being readable and the log start moves past
//! them), delete their objects, drop the records. A broker that dies between steps finds the
//! `Deleting` records on its next pass and finishes them.
//!
//! The orphan sweep lists the store and deletes objects no record names: uploads a crash cut
//! short, and the objects of deleted topics. It only takes objects older than
//! `remote_log_orphan_grace_ms` that no upload here is writing, so it never races an upload.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use strata_metadata::{Command, RemoteSegmentState};
use uuid::Uuid;

use super::Tier;
use super::TierError;
use crate::node::Node;
use crate::partition::{Partition, RemoteLog};

/// The offset before which remote segments are past `retention.ms/bytes` (the whole log's
/// retention), if any are.
pub fn expired_before(p: &Partition, remote: &RemoteLog, now: i64) -> Option<i64> {
    let config = p.log_config();
    if !config.delete {
        return None;
    }
    let mut total = remote.bytes() as i64 + p.local_bytes_from(remote.end) as i64;
    let mut before = None;
    for seg in &remote.segments {
        let size = seg.size_bytes as i64;
        let old = config.retention_ms >= 0
            && seg.max_timestamp >= 0
            && now - seg.max_timestamp > config.retention_ms;
        let big = config.retention_bytes >= 0 && total - size >= config.retention_bytes;
        if !(old || big) {
            break;
        }
        total -= size;
        before = Some(seg.last_offset + 1);
    }
    before
}

/// Marks what retention expired, then deletes the objects of every `Deleting` record of the
/// partition and drops those records.
pub async fn expire(
    node: &Arc<Node>,
    tier: &Arc<Tier>,
    p: &Arc<Partition>,
) -> Result<(), TierError> {
    if let Some(before) = expired_before(p, &p.remote(), node.clock.now_ms()) {
        node.apply(Command::MarkRemoteSegmentsDeleting {
            topic_id: p.topic_id,
            partition: p.tp.partition,
            before_offset: before,
        })
        .await
        .map_err(|e| TierError::Commit(e.message))?;
        node.sync_partitions()
            .map_err(|e| TierError::Commit(e.message))?;
        // Local copies of the expired range go too (they were kept by local retention).
        p.delete_local_before(before)?;
        tracing::info!(topic = %p.tp.topic, partition = p.tp.partition, before, "remote retention expired segments");
    }
    let state = node.metadata.state();
    let Some(info) = state
        .topic_by_id(&p.topic_id)
        .and_then(|t| t.partitions.get(p.tp.partition as usize))
    else {
        return Ok(());
    };
    let doomed: Vec<_> = info
        .remote
        .iter()
        .filter(|s| s.state == RemoteSegmentState::Deleting)
        .cloned()
        .collect();
    if doomed.is_empty() {
        return Ok(());
    }
    for seg in &doomed {
        for ext in ["log", "index"] {
            let key = super::segment_key(&p.tp, &p.topic_id, seg.base_offset, &seg.id, ext);
            tier.store.delete(&key).await?;
        }
        // The cache's blocks of these objects age out; nothing reads them any more.
    }
    node.apply(Command::DropRemoteSegments {
        topic_id: p.topic_id,
        partition: p.tp.partition,
        ids: doomed.iter().map(|s| s.id).collect(),
    })
    .await
    .map_err(|e| TierError::Commit(e.message))?;
    tier.metrics.expired(doomed.len() as u64);
    Ok(())
}

/// Deletes objects that no remote-segment record names (see the module doc).
pub async fn sweep_orphans(node: Arc<Node>, tier: Arc<Tier>) {
    match sweep(&node, &tier).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(objects = n, "deleted orphaned objects"),
        Err(e) => tracing::warn!(error = %e, "orphan sweep failed; will retry"),
    }
}

async fn sweep(node: &Arc<Node>, tier: &Arc<Tier>) -> Result<usize, TierError> {
    // Listed before the state is read: an upload committed after the state was read is in
    // the listing only if it started earlier, and then the grace period protects it.
    let objects = tier.store.list("").await?;
    let state = node.metadata.state();
    let me = node.config.node_id;
    // Per topic: which partitions this broker leads, and every id any record names.
    let mut known: HashMap<Uuid, (Vec<bool>, HashSet<Uuid>)> = HashMap::new();
    for topic in state.topics.values() {
        let led = topic
            .partitions
            .iter()
            .map(|p| p.leader == Some(me))
            .collect();
        let ids = topic
            .partitions
            .iter()
            .flat_map(|p| p.remote.iter().map(|s| s.id))
            .collect();
        known.insert(topic.topic_id, (led, ids));
    }
    let now = node.clock.now_ms();
    let grace = tier.orphan_grace.as_millis() as i64;
    let mut deleted = 0;
    for obj in objects {
        if now - obj.last_modified_ms < grace {
            continue;
        }
        let Some(id) = super::id_of_key(&obj.key) else {
            continue;
        };
        let Some((topic_id, partition)) = partition_of_key(&obj.key) else {
            continue;
        };
        let orphan = match known.get(&topic_id) {
            // A deleted topic: the metadata leader cleans up after it.
            None => node.metadata.is_leader(),
            Some((led, ids)) => led.get(partition).copied().unwrap_or(false) && !ids.contains(&id),
        };
        if orphan && !tier.uploading().contains(&id) {
            tier.store.delete(&obj.key).await?;
            tier.metrics.orphan_deleted();
            deleted += 1;
        }
    }
    Ok(deleted)
}

/// The topic id and partition in `<topic>-<topic_id>/<partition>/...`.
fn partition_of_key(key: &str) -> Option<(Uuid, usize)> {
    let mut parts = key.split('/');
    let dir = parts.next()?;
    let id = dir.get(dir.len().checked_sub(36)?..)?;
    Some((Uuid::parse_str(id).ok()?, parts.next()?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_topic_id_is_read_back_from_a_key() {
        let id = Uuid::new_v4();
        let key = format!(
            "my-topic-{id}/0/00000000000000000000-{}.log",
            Uuid::new_v4()
        );
        assert_eq!(partition_of_key(&key), Some((id, 0)));
        assert_eq!(partition_of_key("short/0/x.log"), None);
        assert_eq!(partition_of_key(&format!("t-{id}/x/y.log")), None);
    }
}
