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

pub mod coordinator;
pub mod dead_letters;
mod metrics;
pub mod partition;
pub mod persister;
pub mod session;
pub mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::Notify;
use uuid::Uuid;

use crate::error::{ApiError, ErrorCode};
use crate::group::config::{InForce, Reset};
use crate::log::records;
use crate::log::txn_index::AbortedTxn;
use crate::node::Node;
use crate::partition::{Isolation, Partition};
use crate::tier::Tier;
use coordinator::ShareCoordinator;
use dead_letters::{DeadLetters, Done};
use metrics::{GroupLabels, StateLabels};
use partition::{AckBatch, Acquired, Batch, BatchKind, DeadLetter, Key, Limits, SharePartition};
use persister::Persister;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use session::Sessions;
use store::StateKey;
use strata_metadata::{ClusterState, ShareReset};

fn state_key(key: &Key) -> StateKey {
    StateKey {
        group: key.0.to_string(),
        topic_id: key.1,
        partition: key.2,
    }
}

/// Records a fetch handed to a member from one partition: the acquired ranges and the batches
/// that hold them.
#[derive(Debug, Default)]
pub struct Handed {
    pub acquired: Vec<Acquired>,
    pub records: Bytes,
}

/// A share partition served here, with what of it has been made durable.
struct Slot {
    /// The data partition's leader epoch it was loaded at: a share partition is served only
    /// at that epoch (a later leadership of this broker loads it again from the coordinator).
    leader_epoch: i32,
    state: Mutex<Versioned>,
    /// The version last written to the share coordinator; held while a write is under way, so
    /// writes of one share partition go one at a time and each carries every change before it.
    written: tokio::sync::Mutex<u64>,
}

struct Versioned {
    sp: SharePartition,
    /// The state epoch: that of the last operator reset applied (AlterShareGroupOffsets,
    /// DeleteShareGroupOffsets), 0 before any; written with the state.
    state_epoch: i32,
    /// Counts the changes worth keeping (acknowledgements, releases, archiving).
    version: u64,
}

pub struct Shares {
    node: Arc<Node>,
    tier: Arc<Tier>,
    /// Shared with the `/metrics` hook that counts their records.
    partitions: Arc<Mutex<HashMap<Key, Arc<Slot>>>>,
    /// One load at a time: a share partition read from the coordinator once, not by every
    /// fetch that finds it missing.
    loading: tokio::sync::Mutex<()>,
    pub sessions: Sessions,
    pub persister: Persister,
    /// Woken when records come back (released, expired): share fetches waiting for records
    /// look again.
    released: Notify,
    /// Dead letters on their way to the groups' dead-letter topics.
    letters: DeadLetters,
    dead_letters: prometheus_client::metrics::counter::Counter,
    redeliveries: Family<GroupLabels, Counter>,
    state_writes: prometheus_client::metrics::counter::Counter,
    state_write_failures: prometheus_client::metrics::counter::Counter,
}

impl Shares {
    pub fn new(node: Arc<Node>, tier: Arc<Tier>) -> Shares {
        let cfg = &node.config;
        let sessions = Sessions::new(
            cfg.group_share_max_share_sessions as usize,
            Duration::from_millis(cfg.group_share_record_lock_duration_ms),
        );
        let dead_letters = prometheus_client::metrics::counter::Counter::default();
        let state_writes = prometheus_client::metrics::counter::Counter::default();
        let state_write_failures = prometheus_client::metrics::counter::Counter::default();
        let (d, w, f) = (
            dead_letters.clone(),
            state_writes.clone(),
            state_write_failures.clone(),
        );
        node.metrics.register(|r| {
            r.register(
                "share_dead_letters",
                "Records archived by share groups as dead letters (rejected, or at the delivery limit)",
                d,
            );
            r.register(
                "share_state_writes",
                "Share partition states written to the share coordinator (one per batch of acknowledgements)",
                w,
            );
            r.register(
                "share_state_write_failures",
                "Share partition state writes that failed (the acknowledgements they carried were refused)",
                f,
            );
        });
        let partitions: Arc<Mutex<HashMap<Key, Arc<Slot>>>> = Arc::default();
        let redeliveries: Family<GroupLabels, Counter> = Family::default();
        let records: Family<StateLabels, Gauge> = Family::default();
        let (r, g) = (redeliveries.clone(), records.clone());
        node.metrics.register(|reg| {
            reg.register(
                "share_redeliveries",
                "Records a share group handed out again (a second or later delivery)",
                r,
            );
            reg.register(
                "share_records",
                "Records in flight in the share partitions led here (from each start offset to what was handed out last), by group and state: available, acquired, acknowledged, archived, dead_lettering",
                g,
            );
        });
        let weak = Arc::downgrade(&partitions);
        node.metrics.on_scrape(move || {
            if let Some(partitions) = weak.upgrade() {
                count_records(&partitions, &records);
            }
        });
        let coordinator = Arc::new(ShareCoordinator::new(node.clone()));
        Shares {
            persister: Persister::new(node.clone(), coordinator),
            letters: DeadLetters::new(node.clone(), tier.clone()),
            node,
            tier,
            partitions,
            redeliveries,
            loading: tokio::sync::Mutex::new(()),
            sessions,
            released: Notify::new(),
            dead_letters,
            state_writes,
            state_write_failures,
        }
    }

    /// The bounds of a share partition of `group`: its group configs over the broker's.
    pub fn limits(&self, group: &str) -> Limits {
        let state = self.node.metadata.state();
        let f = self.configs(&state, group);
        Limits {
            lock: f.lock_duration(),
            delivery_limit: f.delivery_limit(),
            max_in_flight: f.max_record_locks(),
            dead_letter_queue: f.dead_letter_topic().is_some(),
        }
    }

    fn configs<'a>(&'a self, state: &'a ClusterState, group: &str) -> InForce<'a> {
        InForce {
            broker: &self.node.config,
            overrides: state.group_config(group),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Arc<Slot>>> {
        self.partitions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The share partition of `key` as served at `p`'s current leader epoch, unless an
    /// operator reset it since it was loaded (then it is loaded again, with the reset).
    fn current(&self, key: &Key, p: &Partition) -> Option<Arc<Slot>> {
        let epoch = p.replication().leader_epoch();
        let slot = (self.lock().get(key))
            .filter(|s| s.leader_epoch == epoch)
            .cloned()?;
        let reset = self.reset_of(key).map_or(0, |r| r.state_epoch);
        let applied = lock(&slot.state).state_epoch;
        (applied >= reset).then_some(slot)
    }

    /// The latest operator reset of a share partition.
    fn reset_of(&self, key: &Key) -> Option<ShareReset> {
        let state = self.node.metadata.state();
        state.share_reset(&key.0, &key.1, key.2).cloned()
    }

    /// The share partition of `key`, served here at `p`'s leader epoch: loaded from the share
    /// coordinator, or — for a group that has none yet — started at `reset` of `p` and written
    /// there before anything of it is handed out (so a failover resumes where it started).
    async fn load(&self, key: &Key, p: &Arc<Partition>) -> Result<Arc<Slot>, ApiError> {
        if let Some(slot) = self.current(key, p) {
            return Ok(slot);
        }
        let _one = self.loading.lock().await;
        if let Some(slot) = self.current(key, p) {
            return Ok(slot);
        }
        let leader_epoch = p.replication().leader_epoch();
        let skey = state_key(key);
        let stored = (self.persister.read(&skey).await)
            .map_err(|e| ApiError::new(ErrorCode::CoordinatorNotAvailable, e.message))?;
        let stored_epoch = stored.as_ref().map_or(0, |s| s.state_epoch);
        let reset = self.reset_of(key).filter(|r| r.state_epoch > stored_epoch);
        let (sp, fresh, state_epoch) = match (stored, reset) {
            // An operator's reset not applied yet: the share partition starts again there
            // (or, the state deleted, where `share.auto.offset.reset` says).
            (_, Some(r)) => {
                let start = match r.start_offset {
                    Some(o) => o,
                    None => self.start_of(&key.0, p).await?,
                };
                (SharePartition::new(start), true, r.state_epoch)
            }
            (Some(stored), None) => (
                SharePartition::restore(&stored.snapshot),
                false,
                stored.state_epoch,
            ),
            (None, None) => (
                SharePartition::new(self.start_of(&key.0, p).await?),
                true,
                0,
            ),
        };
        let (start, end) = (sp.start(), sp.end());
        // Dead letters a previous leader had not written yet: written from here.
        let pending = sp.dead_lettering();
        let slot = Arc::new(Slot {
            leader_epoch,
            state: Mutex::new(Versioned {
                sp,
                state_epoch,
                version: u64::from(fresh),
            }),
            written: tokio::sync::Mutex::new(0),
        });
        if fresh {
            self.persist(key, &slot).await?;
        }
        tracing::info!(group = %key.0, topic = %p.tp.topic, partition = p.tp.partition, start,
            end, leader_epoch, loaded = !fresh, "share partition started");
        self.lock().insert(key.clone(), slot.clone());
        self.letters
            .enqueue(key, pending, self.node.clock.instant());
        Ok(slot)
    }

    /// Where share group `group` reads `topic_id`-`partition` from, as kept (with an
    /// operator's reset not applied yet counted as done): (start offset, leader epoch of the
    /// write); `None` with no state (never read, or its state deleted).
    pub async fn kept_start(
        &self,
        group: &str,
        topic_id: Uuid,
        partition: i32,
    ) -> Result<Option<(i64, i32)>, ApiError> {
        let key: Key = (Arc::from(group), topic_id, partition);
        let stored = (self.persister.read(&state_key(&key)).await)
            .map_err(|e| ApiError::new(ErrorCode::CoordinatorNotAvailable, e.message))?;
        let stored_epoch = stored.as_ref().map_or(0, |s| s.state_epoch);
        if let Some(r) = self.reset_of(&key).filter(|r| r.state_epoch > stored_epoch) {
            return Ok(r.start_offset.map(|o| (o, -1)));
        }
        Ok(stored.map(|s| (s.snapshot.start, s.leader_epoch)))
    }

    /// Where a share partition of `group` with no state starts in `p`
    /// (`share.auto.offset.reset`): the log start, the high watermark, or the first record at
    /// most so old (the high watermark when there is none).
    async fn start_of(&self, group: &str, p: &Arc<Partition>) -> Result<i64, ApiError> {
        let reset = self
            .configs(&self.node.metadata.state(), group)
            .auto_offset_reset();
        let o = p.published_offsets();
        Ok(match reset {
            Reset::Earliest => o.log_start,
            Reset::Latest => o.high_watermark,
            Reset::ByDuration(d) => {
                let ts =
                    self.node.clock.now_ms() - i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
                let found = self.tier.offset_for_timestamp(p.clone(), ts).await?;
                found.map_or(o.high_watermark, |(offset, _)| offset.min(o.high_watermark))
            }
        })
    }

    /// Writes the share partition's state to its share coordinator unless a write since its
    /// last change already carried it. Returns once it is durable.
    async fn persist(&self, key: &Key, slot: &Slot) -> Result<(), ApiError> {
        let wanted = lock(&slot.state).version;
        let mut written = slot.written.lock().await;
        if *written >= wanted {
            return Ok(());
        }
        let (snapshot, version, state_epoch) = {
            let v = lock(&slot.state);
            (v.sp.snapshot(), v.version, v.state_epoch)
        };
        match (self.persister)
            .write(&state_key(key), slot.leader_epoch, state_epoch, snapshot)
            .await
        {
            Ok(()) => {
                self.state_writes.inc();
                *written = version;
                Ok(())
            }
            Err(e) => {
                self.state_write_failures.inc();
                tracing::warn!(group = %key.0, topic_id = %key.1, partition = key.2, error = %e,
                    "cannot write share partition state");
                // What a member is told: its partition moved (a newer leader wrote the state:
                // this copy is stale), or the state cannot be kept just now (retriable).
                if matches!(
                    e.code,
                    ErrorCode::FencedLeaderEpoch | ErrorCode::FencedStateEpoch
                ) {
                    self.lock().remove(key);
                    return Err(ApiError::new(ErrorCode::NotLeaderOrFollower, e.message));
                }
                Err(ApiError::new(ErrorCode::CoordinatorNotAvailable, e.message))
            }
        }
    }

    /// Hands `member` of `group` records of `p` (at most about `max_records` — exactly at
    /// most, without `whole_batches` —, `max_bytes`), whichever tier holds them. None: nothing
    /// to hand out now.
    pub async fn fetch(
        &self,
        group: &Arc<str>,
        member: &Arc<str>,
        p: Arc<Partition>,
        (max_records, whole_batches): (i64, bool),
        max_bytes: usize,
    ) -> Result<Option<Handed>, ApiError> {
        let key: Key = (group.clone(), p.topic_id, p.tp.partition);
        let slot = self.load(&key, &p).await?;
        let limits = self.limits(group);
        let isolation = match self
            .configs(&self.node.metadata.state(), group)
            .read_committed()
        {
            true => Isolation::Committed,
            false => Isolation::HighWatermark,
        };
        let offsets = p.published_offsets();
        let offset = {
            let mut v = lock(&slot.state);
            v.sp.truncate_below(offsets.log_start);
            if !v.sp.can_acquire(&limits) {
                return Ok(None);
            }
            v.sp.next_fetch_offset()
        };
        if offset >= isolation.end(&offsets) {
            return Ok(None);
        }
        let read = self.tier.read(p, offset, max_bytes, isolation).await?;
        let batches = classify(&read.batches.bytes, &read.aborted);
        if batches.is_empty() {
            return Ok(None);
        }
        let now = self.node.clock.instant();
        let acquired = (lock(&slot.state).sp).acquire(
            member,
            &batches,
            max_records,
            whole_batches,
            &limits,
            now,
        );
        if acquired.is_empty() {
            return Ok(None);
        }
        let again: i64 = (acquired.iter())
            .filter(|a| a.deliveries > 1)
            .map(|a| a.last - a.first + 1)
            .sum();
        if again > 0 {
            let labels = GroupLabels {
                group: group.to_string(),
            };
            self.redeliveries
                .get_or_create(&labels)
                .inc_by(again as u64);
        }
        let records = covering(&read.batches.bytes, &acquired);
        Ok(Some(Handed { acquired, records }))
    }

    /// Applies `member`'s acknowledgements of records of `p` in `group`; returns once they are
    /// durable.
    pub async fn acknowledge(
        &self,
        group: &Arc<str>,
        p: &Partition,
        member: &str,
        batches: &[AckBatch],
    ) -> Result<(), ApiError> {
        let key: Key = (group.clone(), p.topic_id, p.tp.partition);
        let Some(slot) = self.current(&key, p) else {
            return Err(ApiError::new(
                ErrorCode::InvalidRecordState,
                "no record of this partition was handed out to the group by this leader",
            ));
        };
        let limits = self.limits(group);
        let now = self.node.clock.instant();
        let dead = {
            let mut v = lock(&slot.state);
            let dead = v.sp.acknowledge(member, batches, &limits, now)?;
            v.version += 1;
            dead
        };
        let released = batches
            .iter()
            .any(|b| b.types.contains(&partition::AckType::Release));
        self.dead_letters(&key, dead, &limits);
        if released {
            self.released.notify_waiters();
        }
        self.persist(&key, &slot).await
    }

    /// What `member` holds in `tps` of `group` goes back (its session closed or dropped them).
    pub async fn release(&self, group: &Arc<str>, member: &str, tps: &[(Uuid, i32)]) {
        let mut changed = Vec::new();
        for &(topic, partition) in tps {
            let key: Key = (group.clone(), topic, partition);
            let Some(slot) = self.lock().get(&key).cloned() else {
                continue;
            };
            let limits = self.limits(group);
            let dead = {
                let mut v = lock(&slot.state);
                let dead = v.sp.release_member(member, &limits);
                v.version += 1;
                dead
            };
            self.dead_letters(&key, dead, &limits);
            changed.push((key, slot));
        }
        if !changed.is_empty() {
            self.released.notify_waiters();
        }
        for (key, slot) in changed {
            // A failure is logged and counted; the records are back either way, and the next
            // write carries the change.
            let _ = self.persist(&key, &slot).await;
        }
    }

    /// Records whose locks expired go back, and those at the delivery limit are archived (and
    /// written); share partitions this broker no longer leads at their epoch are dropped.
    /// Run by housekeeping.
    pub async fn expire(&self) {
        let now = self.node.clock.instant();
        let slots: Vec<(Key, Arc<Slot>)> = self
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut any = false;
        let mut archived = Vec::new();
        for (key, slot) in slots {
            if !self.still_led(&key, &slot) {
                self.lock().remove(&key);
                continue;
            }
            let limits = self.limits(&key.0);
            let dead = {
                let mut v = lock(&slot.state);
                if v.sp.next_expiry().is_none_or(|t| t > now) {
                    continue;
                }
                let dead = v.sp.expire(now, &limits);
                if !dead.is_empty() {
                    v.version += 1;
                }
                dead
            };
            if !dead.is_empty() {
                archived.push((key.clone(), slot));
            }
            self.dead_letters(&key, dead, &limits);
            any = true;
        }
        if any {
            self.released.notify_waiters();
        }
        for (key, slot) in archived {
            let _ = self.persist(&key, &slot).await;
        }
    }

    /// Whether this broker still leads the share partition's data partition at the epoch it
    /// was loaded at.
    fn still_led(&self, key: &Key, slot: &Slot) -> bool {
        let state = self.node.metadata.state();
        let Some(topic) = state.topic_by_id(&key.1) else {
            return false;
        };
        (self.node.partitions.get(&topic.name, key.2)).is_some_and(|p| {
            p.replication().is_leader() && p.replication().leader_epoch() == slot.leader_epoch
        })
    }

    /// Where each share partition led here starts: (group, topic, partition, start offset),
    /// for the lag sampler (a share group's lag is measured from its start offsets as a
    /// consumer group's is from its committed offsets).
    pub fn starts(&self) -> Vec<(String, String, i32, i64)> {
        let state = self.node.metadata.state();
        let slots: Vec<(Key, Arc<Slot>)> = (self.lock().iter())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        (slots.into_iter())
            .filter_map(|(key, slot)| {
                let topic = state.topic_by_id(&key.1)?.name.clone();
                let start = lock(&slot.state).sp.start();
                Some((key.0.to_string(), topic, key.2, start))
            })
            .collect()
    }

    /// `group`'s share partitions led here, for the console's group page: where each starts
    /// and ends and its records in flight by state. One an operator reset since it was loaded
    /// is shown as it will be loaded again: from the reset's offset, nothing in flight (left
    /// out when the reset deleted its state: where it starts is decided when it is loaded).
    pub fn views(&self, group: &str) -> Vec<ShareView> {
        let state = self.node.metadata.state();
        let slots: Vec<(Key, Arc<Slot>)> = (self.lock().iter())
            .filter(|(k, _)| &*k.0 == group)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut out: Vec<ShareView> = (slots.into_iter())
            .filter_map(|(key, slot)| {
                let topic = state.topic_by_id(&key.1)?.name.clone();
                let s = lock(&slot.state);
                let reset = (state.share_reset(&key.0, &key.1, key.2))
                    .filter(|r| r.state_epoch > s.state_epoch);
                if let Some(r) = reset {
                    let start = r.start_offset?;
                    return Some(ShareView {
                        topic,
                        partition: key.2,
                        start,
                        end: start,
                        available: 0,
                        acquired: 0,
                        acknowledged: 0,
                        archived: 0,
                        dead_lettering: 0,
                    });
                }
                let c = s.sp.counts();
                Some(ShareView {
                    topic,
                    partition: key.2,
                    start: s.sp.start(),
                    end: s.sp.end(),
                    available: c.available,
                    acquired: c.acquired,
                    acknowledged: c.acknowledged,
                    archived: c.archived,
                    dead_lettering: c.dead_lettering,
                })
            })
            .collect();
        out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        out
    }

    /// The topic `group`'s dead letters go to, if it has one (`errors.deadletterqueue.topic.name`).
    pub fn dead_letter_topic(&self, group: &str) -> Option<String> {
        let state = self.node.metadata.state();
        self.configs(&state, group).dead_letter_topic()
    }

    /// Resolves when records come back, for a share fetch waiting for any.
    pub fn released(&self) -> tokio::sync::futures::Notified<'_> {
        self.released.notified()
    }

    /// Dead letters are counted and logged, and queued for the group's dead-letter topic
    /// when it has one (`limits` as they were when the records became dead letters); they
    /// never block the share partition.
    fn dead_letters(&self, key: &Key, dead: Vec<DeadLetter>, limits: &Limits) {
        for d in &dead {
            let n = (d.last - d.first + 1) as u64;
            self.dead_letters.inc_by(n);
            tracing::warn!(group = %key.0, topic_id = %key.1, partition = key.2, first = d.first,
                last = d.last, deliveries = d.deliveries, why = ?d.why, "share group dead letters");
        }
        if limits.dead_letter_queue && !dead.is_empty() {
            self.letters.enqueue(key, dead, self.node.clock.instant());
        }
    }

    /// Writes the dead letters due to their groups' dead-letter topics, one job after another;
    /// each done with (written, or given up on) is archived and the change persisted. Run by
    /// housekeeping, off its round.
    pub async fn write_dead_letters(&self) {
        for job in self.letters.due(self.node.clock.instant()) {
            // Only the share partition's leader at its epoch writes; a later leader writes
            // again what the persisted state still shows waiting.
            let led = (self.lock().get(&job.key).cloned())
                .filter(|slot| self.still_led(&job.key, slot))
                .zip(self.data_partition(&job.key));
            let Some((slot, p)) = led else {
                self.letters.drop_job(&job);
                continue;
            };
            let result = self.letters.write(&job, p).await;
            let (key, letter) = (job.key.clone(), job.letter);
            let done = self.letters.settle(job, result, self.node.clock.instant());
            if let Some(done) = done {
                {
                    let mut v = lock(&slot.state);
                    v.sp.dead_lettered(letter.first, letter.last);
                    v.version += 1;
                }
                if let Done::Written(n) = done {
                    tracing::debug!(group = %key.0, first = letter.first, last = letter.last, n,
                        "dead letters written");
                }
                // A failure is logged and counted; the next write carries the change.
                let _ = self.persist(&key, &slot).await;
            }
        }
    }

    /// The data partition of a share partition, hosted here.
    fn data_partition(&self, key: &Key) -> Option<Arc<Partition>> {
        let state = self.node.metadata.state();
        let topic = state.topic_by_id(&key.1)?;
        self.node.partitions.get(&topic.name, key.2)
    }
}

/// The records of every share partition led here by group and state, for `/metrics`.
fn count_records(
    partitions: &Mutex<HashMap<Key, Arc<Slot>>>,
    records: &Family<StateLabels, Gauge>,
) {
    let slots: Vec<(Arc<str>, Arc<Slot>)> = (partitions.lock().unwrap_or_else(|p| p.into_inner()))
        .iter()
        .map(|(k, v)| (k.0.clone(), v.clone()))
        .collect();
    let mut by_group: HashMap<Arc<str>, partition::Counts> = HashMap::new();
    for (group, slot) in slots {
        let c = lock(&slot.state).sp.counts();
        let sum = by_group.entry(group).or_default();
        sum.available += c.available;
        sum.acquired += c.acquired;
        sum.acknowledged += c.acknowledged;
        sum.archived += c.archived;
        sum.dead_lettering += c.dead_lettering;
    }
    records.clear();
    for (group, c) in by_group {
        for (state, n) in [
            ("available", c.available),
            ("acquired", c.acquired),
            ("acknowledged", c.acknowledged),
            ("archived", c.archived),
            ("dead_lettering", c.dead_lettering),
        ] {
            let labels = StateLabels {
                group: group.to_string(),
                state,
            };
            records.get_or_create(&labels).set(n);
        }
    }
}

fn lock(slot: &Mutex<Versioned>) -> std::sync::MutexGuard<'_, Versioned> {
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

/// A share partition as the console's group page shows it: from its start offset to the last
/// record handed out (`end`), records in flight by state.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShareView {
    pub topic: String,
    pub partition: i32,
    pub start: i64,
    pub end: i64,
    pub available: i64,
    pub acquired: i64,
    pub acknowledged: i64,
    pub archived: i64,
    pub dead_lettering: i64,
}
