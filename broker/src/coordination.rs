//! What the group and the transaction coordinators share: each keeps its state in an internal
//! compacted topic (`__consumer_offsets`, `__transaction_state`) and coordinates the keys of
//! the partitions of it led here. [`Coordination`] follows that leadership — loads a partition's
//! keys from its whole log when its leadership arrives (at a new leader epoch), drops them when
//! it leaves — and answers the one check before serving a key ([`Coordination::check`]).
//!
//! Invariant: a key is served only while this broker leads its partition at the leader epoch
//! its keys were loaded at; a request arriving while the partition loads waits for it (up to
//! [`LOAD_WAIT`]) rather than being sent away: librdkafka gives up a commit on the first
//! COORDINATOR_LOAD_IN_PROGRESS.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;

use crate::error::{ApiError, ErrorCode};
use crate::log::control::{self, Marker};
use crate::log::records;
use crate::node::Node;
use crate::partition::Partition;

/// How long a request waits for its partition to load here.
pub const LOAD_WAIT: Duration = Duration::from_secs(5);

/// One coordinator's side of [`Coordination::follow`]: how a partition's log becomes its state
/// and what it does with it.
pub trait Loader {
    /// What it loads, for logs and errors ("groups", "transactional ids").
    const WHAT: &'static str;
    type Table;

    /// Rebuilds a partition's state from its records ([`read_whole`]); returns the number of
    /// records read and the state.
    fn read(&self, part: &Partition) -> Result<(usize, Self::Table), ApiError>;

    /// Takes a loaded partition's state; returns what to log of it.
    fn adopt(&self, partition: i32, leader_epoch: i32, table: Self::Table) -> String;

    /// Drops the state of a partition no longer led here; returns how many keys it held.
    fn drop_partition(&self, partition: i32) -> usize;
}

pub struct Coordination {
    topic: &'static str,
    /// Partitions whose keys are loaded: partition → the leader epoch they were loaded at.
    loaded: Mutex<HashMap<i32, i32>>,
    /// One follow at a time.
    following: tokio::sync::Mutex<()>,
    /// Notified after every follow: requests waiting in `check` look again.
    followed: tokio::sync::Notify,
}

impl Coordination {
    pub fn new(topic: &'static str) -> Coordination {
        Coordination {
            topic,
            loaded: Mutex::new(HashMap::new()),
            following: tokio::sync::Mutex::new(()),
            followed: tokio::sync::Notify::new(),
        }
    }

    fn loaded(&self) -> MutexGuard<'_, HashMap<i32, i32>> {
        self.loaded.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the keys of `partition` are loaded here at `leader_epoch`.
    pub fn is_loaded(&self, partition: i32, leader_epoch: i32) -> bool {
        self.loaded().get(&partition) == Some(&leader_epoch)
    }

    /// Whether this broker coordinates `key` (of `partition`) now: the leader epoch it is
    /// coordinated at. A partition led here but not loaded yet is waited for, up to
    /// [`LOAD_WAIT`]. `kind` names the key in errors ("group").
    pub async fn check(
        &self,
        node: &Node,
        partition: i32,
        kind: &str,
        key: &str,
    ) -> Result<i32, ApiError> {
        let deadline = tokio::time::Instant::now() + LOAD_WAIT;
        loop {
            // Taken before looking, so a follow that ends in between still wakes this one.
            let followed = self.followed.notified();
            match self.check_loaded(node, partition, kind, key) {
                Err(e) if e.code == ErrorCode::CoordinatorLoadInProgress => {
                    if tokio::time::timeout_at(deadline, followed).await.is_err() {
                        return Err(e);
                    }
                }
                answer => return answer,
            }
        }
    }

    /// [`Coordination::check`] without waiting.
    pub fn check_loaded(
        &self,
        node: &Node,
        partition: i32,
        kind: &str,
        key: &str,
    ) -> Result<i32, ApiError> {
        let (topic, p) = (self.topic, partition);
        let state = node.metadata.state();
        let Some(info) = state.partition(topic, p) else {
            return Err(ApiError::new(
                ErrorCode::CoordinatorNotAvailable,
                format!("{topic} does not exist yet"),
            ));
        };
        match info.leader {
            Some(l) if l == node.config.node_id => {}
            Some(l) => {
                return Err(ApiError::new(
                    ErrorCode::NotCoordinator,
                    format!("{kind} {key} is coordinated by broker {l}"),
                ))
            }
            None => {
                return Err(ApiError::new(
                    ErrorCode::CoordinatorNotAvailable,
                    format!("{topic}-{p} has no leader"),
                ))
            }
        }
        if !self.is_loaded(p, info.leader_epoch) {
            return Err(ApiError::new(
                ErrorCode::CoordinatorLoadInProgress,
                format!("loading the {kind}s of {topic}-{p}"),
            ));
        }
        Ok(info.leader_epoch)
    }

    /// Follows the leadership of the topic: loads the keys of every partition this broker has
    /// come to lead (at a new leader epoch) and drops those of partitions it no longer leads.
    /// Cheap when nothing changed; a failed load is retried on the next call.
    pub async fn follow<L: Loader>(&self, node: &Node, loader: &L) {
        let _one = self.following.lock().await;
        let (topic, me) = (self.topic, node.config.node_id);
        let led: HashMap<i32, i32> = (node.metadata.state().topic(topic))
            .map(|t| {
                (t.partitions.iter().enumerate())
                    .filter(|(_, p)| p.leader == Some(me))
                    .map(|(i, p)| (i as i32, p.leader_epoch))
                    .collect()
            })
            .unwrap_or_default();
        let stale: Vec<i32> = (self.loaded().iter())
            .filter(|(p, epoch)| led.get(p) != Some(epoch))
            .map(|(p, _)| *p)
            .collect();
        for p in stale {
            self.loaded().remove(&p);
            let dropped = loader.drop_partition(p);
            tracing::info!(
                partition = p,
                keys = dropped,
                "no longer coordinating the {} of {topic}-{p}",
                L::WHAT
            );
        }
        for (p, epoch) in led {
            if self.is_loaded(p, epoch) {
                continue;
            }
            // The partition takes its role from the same state; until it has, wait.
            let Some(part) = (node.partitions.get(topic, p)).filter(|part| {
                part.replication().leader_epoch() == epoch && part.replication().is_leader()
            }) else {
                continue;
            };
            let started = crate::clock::Stopwatch::start();
            match loader.read(&part) {
                Ok((records, table)) => {
                    let summary = loader.adopt(p, epoch, table);
                    self.loaded().insert(p, epoch);
                    tracing::info!(
                        partition = p,
                        leader_epoch = epoch,
                        records,
                        ms = started.elapsed().as_millis() as u64,
                        "coordinating the {} of {topic}-{p}: {summary}",
                        L::WHAT
                    );
                }
                Err(e) => {
                    tracing::error!(partition = p, error = %e, "cannot load the {} of {topic}-{p}; retrying", L::WHAT)
                }
            }
        }
        // Requests waiting in `check` look again: loaded, dropped, or still loading.
        self.followed.notify_waiters();
    }
}

/// Drops from a coordinator's table the keys of `partition` (see [`Loader::drop_partition`]);
/// returns how many there were.
pub fn drop_keys<V>(
    table: &mut HashMap<String, V>,
    partition: i32,
    partition_for: impl Fn(&str) -> i32,
) -> usize {
    let before = table.len();
    table.retain(|key, _| partition_for(key) != partition);
    before - table.len()
}

/// What [`read_whole`] hands a coordinator, in log order.
pub enum Item {
    /// A record: its key and value (a null value is a tombstone), and the producer whose
    /// transaction wrote it, if one did.
    Record {
        key: Option<Bytes>,
        value: Option<Bytes>,
        transactional: Option<i64>,
    },
    /// A transaction marker of `producer_id`.
    Marker { producer_id: i64, commit: bool },
}

/// Reads a partition of an internal topic from its start to its end: the end, not the high
/// watermark, since a leader keeps every record it has and they all become committed. `each`
/// sees every record at or after the log start and every transaction marker, and says whether
/// it could read the record (one it cannot is logged and skipped). A batch that cannot be read
/// is a storage error naming the partition. Returns the records read.
pub fn read_whole(part: &Partition, mut each: impl FnMut(Item) -> bool) -> Result<usize, ApiError> {
    let tp = &part.tp;
    let storage_error = |e: String| {
        ApiError::new(
            ErrorCode::KafkaStorageError,
            format!("{}-{}: {e}", tp.topic, tp.partition),
        )
    };
    let mut count = 0usize;
    let mut offset = part.offsets().log_start;
    loop {
        let (read, o) = part.read_replica(offset, 1 << 20).map_err(ApiError::from)?;
        let bytes = read.bytes;
        if bytes.is_empty() || offset >= o.log_end {
            return Ok(count);
        }
        for item in records::batches(&bytes) {
            let (h, b) = item.map_err(|e| storage_error(e.to_string()))?;
            // Continue after the batch's last offset, not its last record's: a compacted
            // batch may have lost its last records but keeps its span.
            offset = offset.max(h.next_offset());
            if h.is_control() {
                if let Ok(Some((marker, _))) = control::read_marker(&b, &h) {
                    let commit = marker == Marker::Commit;
                    each(Item::Marker {
                        producer_id: h.producer_id,
                        commit,
                    });
                }
                continue;
            }
            let transactional = h.is_transactional().then_some(h.producer_id);
            let section = records::section(&b, &h).map_err(|e| storage_error(e.to_string()))?;
            records::for_each(&section, &h, |r| {
                if r.offset < o.log_start {
                    return;
                }
                count += 1;
                let record = Item::Record {
                    key: r.key.map(|k| section.slice_ref(k)),
                    value: r.value.map(|v| section.slice_ref(v)),
                    transactional,
                };
                if !each(record) {
                    tracing::warn!(topic = %tp.topic, partition = tp.partition, offset = r.offset,
                        "skipping a malformed record");
                }
            })
            .map_err(|e| storage_error(e.to_string()))?;
        }
    }
}
