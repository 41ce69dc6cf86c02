//! Share groups at the partitions' leaders (KIP-932, "queues"): for each (share group, topic
//! partition) this broker leads, which records are handed out to which member, acknowledged,
//! or done with — and the members' share sessions.
//!
//! - [`partition`] — one share partition's state machine (pure);
//! - [`session`] — share sessions and their epochs;
//! - this module — [`Shares`]: the share partitions of the partitions led here, a read of the
//!   log turned into acquired records (through the tier's one read, so a share group reads
//!   history from the remote tier like any consumer), acknowledgements, lock expiry.
//!
//! Membership (who is in a share group, which partitions each member is assigned) is the group
//! coordinator's (`crate::group::share`); a partition's leader needs none of it: any member of
//! the group may fetch any partition, and each record is handed to one member at a time.
//!
//! Lock rule: a share partition's mutex is a leaf, never held across an await (a read of the
//! log happens before it is taken, and what the read returned is acquired under it).

pub mod partition;
pub mod session;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::Notify;
use uuid::Uuid;

use crate::log::records;
use crate::log::txn_index::AbortedTxn;
use crate::node::Node;
use crate::partition::{Isolation, Partition};
use crate::tier::{Tier, TierError};
use partition::{
    AckBatch, AckError, Acquired, Batch, BatchKind, DeadLetter, Limits, SharePartition,
};
use session::Sessions;

/// A share partition's key: the group, the topic id, the partition.
pub type Key = (Arc<str>, Uuid, i32);

/// Records a fetch handed to a member from one partition: the acquired ranges and the batches
/// that hold them.
#[derive(Debug, Default)]
pub struct Handed {
    pub acquired: Vec<Acquired>,
    pub records: Bytes,
}

/// Where a share partition with no state yet starts (`share.auto.offset.reset`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reset {
    Earliest,
    Latest,
}

pub struct Shares {
    node: Arc<Node>,
    tier: Arc<Tier>,
    partitions: Mutex<HashMap<Key, Arc<Mutex<SharePartition>>>>,
    pub sessions: Sessions,
    /// Woken when records come back (released, expired): share fetches waiting for records
    /// look again.
    released: Notify,
    dead_letters: prometheus_client::metrics::counter::Counter,
}

impl Shares {
    pub fn new(node: Arc<Node>, tier: Arc<Tier>) -> Shares {
        let cfg = &node.config;
        let sessions = Sessions::new(
            cfg.group_share_max_share_sessions as usize,
            Duration::from_millis(cfg.group_share_record_lock_duration_ms),
        );
        let dead_letters = prometheus_client::metrics::counter::Counter::default();
        let counter = dead_letters.clone();
        node.metrics.register(|r| {
            r.register(
                "share_dead_letters",
                "Records archived by share groups as dead letters (rejected, or at the delivery limit)",
                counter,
            )
        });
        Shares {
            node,
            tier,
            partitions: Mutex::default(),
            sessions,
            released: Notify::new(),
            dead_letters,
        }
    }

    /// The bounds of a share partition of `group`.
    pub fn limits(&self, _group: &str) -> Limits {
        let cfg = &self.node.config;
        Limits {
            lock: Duration::from_millis(cfg.group_share_record_lock_duration_ms),
            delivery_limit: cfg.group_share_delivery_count_limit as u16,
            max_in_flight: cfg.group_share_partition_max_record_locks as i64,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Arc<Mutex<SharePartition>>>> {
        self.partitions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, key: &Key) -> Option<Arc<Mutex<SharePartition>>> {
        self.lock().get(key).cloned()
    }

    /// The share partition of `key`, made at `reset` of `p` when the group has none yet.
    fn get_or_start(&self, key: &Key, p: &Partition, reset: Reset) -> Arc<Mutex<SharePartition>> {
        self.lock()
            .entry(key.clone())
            .or_insert_with(|| {
                let o = p.published_offsets();
                let start = match reset {
                    Reset::Earliest => o.log_start,
                    Reset::Latest => o.high_watermark,
                };
                tracing::info!(group = %key.0, topic = %p.tp.topic, partition = p.tp.partition, start,
                    "share partition started");
                Arc::new(Mutex::new(SharePartition::new(start)))
            })
            .clone()
    }

    /// Hands `member` of `group` records of `p` (at most about `max_records`, `max_bytes`),
    /// whichever tier holds them. None: nothing to hand out now.
    pub async fn fetch(
        &self,
        group: &Arc<str>,
        member: &Arc<str>,
        p: Arc<Partition>,
        max_records: i64,
        max_bytes: usize,
        isolation: Isolation,
    ) -> Result<Option<Handed>, TierError> {
        let key: Key = (group.clone(), p.topic_id, p.tp.partition);
        let slot = self.get_or_start(&key, &p, Reset::Latest);
        let limits = self.limits(group);
        let offsets = p.published_offsets();
        let offset = {
            let mut sp = lock(&slot);
            sp.truncate_below(offsets.log_start);
            if !sp.can_acquire(&limits) {
                return Ok(None);
            }
            sp.next_fetch_offset()
        };
        if offset >= isolation.end(&offsets) {
            return Ok(None);
        }
        let read = self.tier.read(p, offset, max_bytes, isolation).await?;
        let batches = classify(&read.bytes, &read.aborted);
        if batches.is_empty() {
            return Ok(None);
        }
        let now = self.node.clock.instant();
        let acquired = lock(&slot).acquire(member, &batches, max_records, &limits, now);
        if acquired.is_empty() {
            return Ok(None);
        }
        let records = covering(&read.bytes, &acquired);
        Ok(Some(Handed { acquired, records }))
    }

    /// Applies `member`'s acknowledgements of records of `key`.
    pub fn acknowledge(
        &self,
        key: &Key,
        member: &str,
        batches: &[AckBatch],
    ) -> Result<(), AckError> {
        let Some(slot) = self.get(key) else {
            return Err(AckError::InvalidRecordState(
                "no record of this partition was handed out to the group here".into(),
            ));
        };
        let limits = self.limits(&key.0);
        let now = self.node.clock.instant();
        let dead = lock(&slot).acknowledge(member, batches, &limits, now)?;
        let released = batches
            .iter()
            .any(|b| b.types.contains(&partition::AckType::Release));
        self.dead_letters(key, dead);
        if released {
            self.released.notify_waiters();
        }
        Ok(())
    }

    /// What `member` holds in `tps` of `group` goes back (its session closed or dropped them).
    pub fn release(&self, group: &Arc<str>, member: &str, tps: &[(Uuid, i32)]) {
        let mut any = false;
        for &(topic, partition) in tps {
            let key: Key = (group.clone(), topic, partition);
            let Some(slot) = self.get(&key) else { continue };
            let limits = self.limits(group);
            let dead = lock(&slot).release_member(member, &limits);
            self.dead_letters(&key, dead);
            any = true;
        }
        if any {
            self.released.notify_waiters();
        }
    }

    /// Records whose locks expired go back; run by housekeeping.
    pub fn expire(&self) {
        let now = self.node.clock.instant();
        let slots: Vec<(Key, Arc<Mutex<SharePartition>>)> = self
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut any = false;
        for (key, slot) in slots {
            let limits = self.limits(&key.0);
            let mut sp = lock(&slot);
            if sp.next_expiry().is_none_or(|t| t > now) {
                continue;
            }
            let dead = sp.expire(now, &limits);
            drop(sp);
            self.dead_letters(&key, dead);
            any = true;
        }
        if any {
            self.released.notify_waiters();
        }
    }

    /// Resolves when records come back, for a share fetch waiting for any.
    pub fn released(&self) -> tokio::sync::futures::Notified<'_> {
        self.released.notified()
    }

    /// Dead letters are counted and logged; they leave the share partition archived, never
    /// blocking it.
    fn dead_letters(&self, key: &Key, dead: Vec<DeadLetter>) {
        for d in dead {
            let n = (d.last - d.first + 1) as u64;
            self.dead_letters.inc_by(n);
            tracing::warn!(group = %key.0, topic_id = %key.1, partition = key.2, first = d.first,
                last = d.last, deliveries = d.deliveries, why = ?d.why, "share group dead letters");
        }
    }

    /// The earliest lock expiry of any share partition here: when housekeeping next has work.
    pub fn next_expiry(&self) -> Option<Instant> {
        let slots: Vec<Arc<Mutex<SharePartition>>> = self.lock().values().cloned().collect();
        slots.iter().filter_map(|s| lock(s).next_expiry()).min()
    }
}

fn lock(slot: &Mutex<SharePartition>) -> std::sync::MutexGuard<'_, SharePartition> {
    // A panic under the lock leaves a consistent state: every operation checks before it
    // changes anything, or changes whole runs.
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

/// The batches of a read, each as acquisition sees it (a batch of an aborted transaction among
/// `aborted` — a read_committed read's — is never handed out).
fn classify(bytes: &Bytes, aborted: &[AbortedTxn]) -> Vec<Batch> {
    let mut out = Vec::new();
    for item in records::batches(bytes) {
        let Ok((h, _)) = item else { break };
        let kind = if h.is_control() {
            BatchKind::Control
        } else if h.is_transactional()
            && aborted.iter().any(|a| {
                a.producer_id == h.producer_id
                    && a.first_offset <= h.base_offset
                    && h.base_offset < a.last_offset
            })
        {
            BatchKind::Aborted
        } else {
            BatchKind::Data
        };
        out.push(Batch {
            first: h.base_offset,
            last: h.last_offset(),
            kind,
        });
    }
    out
}

/// The batches of `bytes` from the one holding the first acquired offset to the one holding
/// the last (a slice: no copy). The member reads only the acquired offsets of them.
fn covering(bytes: &Bytes, acquired: &[Acquired]) -> Bytes {
    let (Some(first), Some(last)) = (acquired.first(), acquired.last()) else {
        return Bytes::new();
    };
    let (mut from, mut to) = (None, 0usize);
    let mut pos = 0usize;
    for item in records::batches(bytes) {
        let Ok((h, b)) = item else { break };
        let end = pos + b.len();
        if h.last_offset() >= first.first && from.is_none() {
            from = Some(pos);
        }
        if h.base_offset <= last.last {
            to = end;
        }
        pos = end;
    }
    match from {
        Some(f) if to > f => bytes.slice(f..to),
        _ => Bytes::new(),
    }
}
