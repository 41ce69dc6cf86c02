//! One share partition (KIP-932): what a share group knows of one topic partition — where its
//! records start to matter (the share-partition start offset), how far they have been handed
//! out (the end), and between the two the state of every record: available, acquired by one
//! member until its lock expires, acknowledged, or archived — with the number of times each
//! was delivered.
//!
//! Pure: no I/O, no clock of its own (every operation that measures a lock is given `now`), so
//! the state machine is tested as it is, with time in the test's hands.
//!
//! Bookkeeping is per run of records, not per record: a run is a stretch of offsets in one state
//! with one delivery count (a whole record batch when it is handed out whole, which is the
//! common case), split only where an acknowledgement or a lock treats part of it differently and
//! merged again when its parts agree.
//!
//! Invariants (docs/invariants.md, invariant 13), checked in debug builds after every change:
//! - the runs cover `start..end` exactly, back to back;
//! - the first run is never acknowledged or archived (the start moves past such runs at once);
//! - an acquired record is held by exactly one member, until one instant: no record is handed to
//!   two members at once;
//! - an available record was delivered fewer times than the delivery limit (one that reaches it
//!   is archived when released or when its lock expires, and becomes a dead letter);
//! - a dead letter of a group with a dead-letter topic waits, neither handed out nor
//!   acknowledgeable, until its write there is done with ([`SharePartition::dead_lettered`]):
//!   the start never passes a dead letter not yet written, so none is lost to a failover.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A share partition's key: the group, the topic id, the partition.
pub type Key = (Arc<str>, uuid::Uuid, i32);

/// How a member acknowledges records (ShareFetch/ShareAcknowledge `AcknowledgeTypes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckType {
    /// The offset holds no record the member was given (a control record, a gap): done.
    Gap,
    Accept,
    /// Hand it out again (to anyone), unless it reached the delivery limit.
    Release,
    /// It cannot be processed: never deliver it again; a dead letter.
    Reject,
    /// Keep the lock for another lock duration (ShareFetch/ShareAcknowledge v2).
    Renew,
}

impl AckType {
    /// The wire value, or `None` for one this version does not know.
    pub fn from_wire(t: i8, renew_allowed: bool) -> Option<AckType> {
        match t {
            0 => Some(AckType::Gap),
            1 => Some(AckType::Accept),
            2 => Some(AckType::Release),
            3 => Some(AckType::Reject),
            4 if renew_allowed => Some(AckType::Renew),
            _ => None,
        }
    }
}

/// A record's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    Available,
    Acquired {
        member: Arc<str>,
        until: Instant,
    },
    Acknowledged,
    Archived,
    /// A dead letter waiting for its write to the group's dead-letter topic (Kafka's
    /// ARCHIVING); archived once written.
    DeadLettering(Why),
}

impl State {
    fn done(&self) -> bool {
        matches!(self, State::Acknowledged | State::Archived)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Run {
    last: i64,
    state: State,
    deliveries: u16,
}

/// The group's settings that bound a share partition.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// How long an acquisition lasts (`share.record.lock.duration.ms`).
    pub lock: Duration,
    /// Deliveries after which a record is archived instead of released
    /// (`share.delivery.count.limit`).
    pub delivery_limit: u16,
    /// Records in flight (between the start and the end) beyond which no new record is
    /// acquired (`share.partition.max.record.locks`).
    pub max_in_flight: i64,
    /// The group has a dead-letter topic (`errors.deadletterqueue.topic.name`): dead letters
    /// wait to be written there instead of being archived at once.
    pub dead_letter_queue: bool,
}

/// What a record batch read from the log is, as acquisition sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchKind {
    /// Records to hand out.
    Data,
    /// A control batch (a transaction marker): never handed out.
    Control,
    /// Records of an aborted transaction, read under read_committed: never handed out.
    Aborted,
}

/// A record batch read from the log: its offsets and kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch {
    pub first: i64,
    pub last: i64,
    pub kind: BatchKind,
}

/// Records handed to a member: `first..=last`, each delivered `deliveries` times so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Acquired {
    pub first: i64,
    pub last: i64,
    pub deliveries: u16,
}

/// Why a record became a dead letter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Why {
    Rejected,
    DeliveryLimit,
}

/// Records archived as dead letters: `first..=last`, delivered `deliveries` times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    pub first: i64,
    pub last: i64,
    pub deliveries: u16,
    pub why: Why,
}

/// An acknowledgement refused; nothing of it was applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AckError {
    /// Malformed: ranges backwards or overlapping, types of the wrong count or unknown.
    InvalidRequest(String),
    /// A record that is not acquired by this member (never delivered, done, another member's,
    /// or its lock expired).
    InvalidRecordState(String),
}

/// One acknowledgement batch of a request: `first..=last` and one type for all of them, or one
/// per offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AckBatch {
    pub first: i64,
    pub last: i64,
    pub types: Vec<AckType>,
}

/// Record counts by state (metrics, DescribeShareGroupOffsets).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub available: i64,
    pub acquired: i64,
    pub acknowledged: i64,
    pub archived: i64,
    /// Dead letters waiting for their write to the dead-letter topic.
    pub dead_lettering: i64,
}

/// What survives a failover: the start and every run with its state, an acquired one as
/// available (its member's lock does not outlive the leader) with its deliveries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub start: i64,
    /// (first, last, state, deliveries), state as Kafka persists it: 0 available, 2
    /// acknowledged, 4 archived; and Strata's 3 and 5 for a dead letter waiting for its
    /// write to the dead-letter topic, rejected or at the delivery limit.
    pub runs: Vec<(i64, i64, i8, u16)>,
}

pub struct SharePartition {
    start: i64,
    end: i64,
    /// By first offset.
    runs: BTreeMap<i64, Run>,
}

impl SharePartition {
    /// A share partition whose records start at `start`, none handed out yet.
    pub fn new(start: i64) -> SharePartition {
        SharePartition {
            start,
            end: start,
            runs: BTreeMap::new(),
        }
    }

    /// The share partition a [`Snapshot`] describes.
    pub fn restore(s: &Snapshot) -> SharePartition {
        let mut p = SharePartition::new(s.start);
        for &(first, last, state, deliveries) in &s.runs {
            if last < p.end || first > last {
                continue;
            }
            let first = first.max(p.end);
            if first > p.end {
                // A stretch the snapshot does not name was never handed out: offer it again.
                p.runs.insert(
                    p.end,
                    Run {
                        last: first - 1,
                        state: State::Available,
                        deliveries: 0,
                    },
                );
            }
            let state = match state {
                2 => State::Acknowledged,
                4 => State::Archived,
                3 => State::DeadLettering(Why::Rejected),
                5 => State::DeadLettering(Why::DeliveryLimit),
                _ => State::Available,
            };
            p.runs.insert(
                first,
                Run {
                    last,
                    state,
                    deliveries,
                },
            );
            p.end = last + 1;
        }
        p.settle();
        p
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            start: self.start,
            runs: (self.runs.iter())
                .map(|(&first, r)| {
                    let state = match r.state {
                        State::Acknowledged => 2,
                        State::Archived => 4,
                        State::DeadLettering(Why::Rejected) => 3,
                        State::DeadLettering(Why::DeliveryLimit) => 5,
                        State::Available | State::Acquired { .. } => 0,
                    };
                    (first, r.last, state, r.deliveries)
                })
                .collect(),
        }
    }

    /// The share-partition start offset: every record below it is done with.
    pub fn start(&self) -> i64 {
        self.start
    }

    /// The first offset never handed out.
    pub fn end(&self) -> i64 {
        self.end
    }

    /// Where the next read of the log starts: the first available record in flight, else the
    /// end.
    pub fn next_fetch_offset(&self) -> i64 {
        (self.runs.iter())
            .find(|(_, r)| r.state == State::Available)
            .map_or(self.end, |(&first, _)| first)
    }

    /// Whether the next fetch can hand out anything (a record available in flight, or room in
    /// the window for new ones).
    pub fn can_acquire(&self, limits: &Limits) -> bool {
        self.end - self.start < limits.max_in_flight
            || self.runs.values().any(|r| r.state == State::Available)
    }

    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        for (&first, r) in &self.runs {
            let n = r.last - first + 1;
            match r.state {
                State::Available => c.available += n,
                State::Acquired { .. } => c.acquired += n,
                State::Acknowledged => c.acknowledged += n,
                State::Archived => c.archived += n,
                State::DeadLettering(_) => c.dead_lettering += n,
            }
        }
        c
    }

    /// The dead letters waiting for their write to the dead-letter topic.
    pub fn dead_lettering(&self) -> Vec<DeadLetter> {
        let mut out = Vec::new();
        for (&first, r) in &self.runs {
            if let State::DeadLettering(why) = r.state {
                push_dead(&mut out, first, r.last, r.deliveries, why);
            }
        }
        out
    }

    /// The dead letters of `first..=last` are done with (written to the dead-letter topic, or
    /// given up on): archived. Returns how many records that was.
    pub fn dead_lettered(&mut self, first: i64, last: i64) -> i64 {
        let (first, last) = (first.max(self.start), last.min(self.end - 1));
        if first > last {
            return 0;
        }
        self.split_at(first);
        self.split_at(last + 1);
        let mut n = 0;
        for (&f, run) in self.runs.range_mut(first..=last) {
            if matches!(run.state, State::DeadLettering(_)) {
                run.state = State::Archived;
                n += run.last - f + 1;
            }
        }
        self.settle();
        n
    }

    /// The earliest instant a lock expires, if any record is acquired.
    pub fn next_expiry(&self) -> Option<Instant> {
        (self.runs.values())
            .filter_map(|r| match &r.state {
                State::Acquired { until, .. } => Some(*until),
                _ => None,
            })
            .min()
    }

    /// Hands `member` the records of `batches` (read from the log, in offset order, from
    /// [`SharePartition::next_fetch_offset`]) that are available, and new records after the end
    /// while the window has room, until about `max_records`: with `whole_batches` (Kafka's
    /// batch-optimized acquire mode) the count may be passed to keep a batch of new records
    /// whole; without (record-limit mode) never. Control batches, aborted records and offsets
    /// the log no longer has are archived as they pass the end, never handed out.
    pub fn acquire(
        &mut self,
        member: &Arc<str>,
        batches: &[Batch],
        max_records: i64,
        whole_batches: bool,
        limits: &Limits,
        now: Instant,
    ) -> Vec<Acquired> {
        let until = now + limits.lock;
        let acquired_state = State::Acquired {
            member: member.clone(),
            until,
        };
        let mut acquired: Vec<Acquired> = Vec::new();
        let mut count = 0i64;
        for b in batches {
            if count >= max_records {
                break;
            }
            if b.last < self.start || b.first > b.last {
                continue;
            }
            // Records in flight: those available are handed out again.
            let lo = b.first.max(self.start);
            if lo < self.end && b.kind == BatchKind::Data {
                let hi = b.last.min(self.end - 1);
                self.split_at(lo);
                self.split_at(hi + 1);
                let firsts: Vec<i64> = self.runs.range(lo..=hi).map(|(&f, _)| f).collect();
                for first in firsts {
                    if count >= max_records {
                        break;
                    }
                    let (available, last) = {
                        let run = &self.runs[&first];
                        (run.state == State::Available, run.last)
                    };
                    if !available {
                        continue;
                    }
                    let room = max_records - count;
                    if !whole_batches && last - first + 1 > room {
                        self.split_at(first + room);
                    }
                    let run = self.runs.get_mut(&first).expect("listed");
                    run.state = acquired_state.clone();
                    run.deliveries = run.deliveries.saturating_add(1);
                    count += run.last - first + 1;
                    push_acquired(&mut acquired, first, run.last, run.deliveries);
                }
            }
            // Records past the end: new, while the window has room.
            if b.last >= self.end {
                if count >= max_records || self.end - self.start >= limits.max_in_flight {
                    break;
                }
                let lo = b.first.max(self.end);
                if lo > self.end {
                    // Offsets the log does not have (compacted away): nothing to hand out.
                    self.push(lo - 1, State::Archived, 0);
                }
                match b.kind {
                    BatchKind::Data => {
                        let last = match whole_batches {
                            true => b.last,
                            false => b.last.min(lo + (max_records - count) - 1),
                        };
                        self.push(last, acquired_state.clone(), 1);
                        count += last - lo + 1;
                        push_acquired(&mut acquired, lo, last, 1);
                        if last < b.last {
                            // The rest of the batch is past the end, for a later fetch.
                            break;
                        }
                    }
                    BatchKind::Control | BatchKind::Aborted => {
                        self.push(b.last, State::Archived, 0)
                    }
                }
            }
        }
        self.settle();
        acquired
    }

    /// Applies `member`'s acknowledgements, all or none: every offset named must be acquired
    /// by `member` now. Returns the records that became dead letters.
    pub fn acknowledge(
        &mut self,
        member: &str,
        batches: &[AckBatch],
        limits: &Limits,
        now: Instant,
    ) -> Result<Vec<DeadLetter>, AckError> {
        let mut sorted: Vec<&AckBatch> = batches.iter().collect();
        sorted.sort_by_key(|b| b.first);
        let mut previous_last: Option<i64> = None;
        for b in &sorted {
            if b.first > b.last || b.first < 0 {
                return Err(AckError::InvalidRequest(format!(
                    "acknowledgement batch {}..={} is backwards",
                    b.first, b.last
                )));
            }
            if previous_last.is_some_and(|p| b.first <= p) {
                return Err(AckError::InvalidRequest(format!(
                    "acknowledgement batches overlap at {}",
                    b.first
                )));
            }
            previous_last = Some(b.last);
            let len = b.last - b.first + 1;
            if b.types.len() != 1 && b.types.len() as i64 != len {
                return Err(AckError::InvalidRequest(format!(
                    "{} acknowledge types for {len} offsets {}..={}",
                    b.types.len(),
                    b.first,
                    b.last
                )));
            }
            self.check_held(member, b.first, b.last, now)?;
        }
        let mut dead = Vec::new();
        for b in sorted {
            if b.types.len() == 1 {
                self.apply(b.first, b.last, b.types[0], limits, now, &mut dead);
                continue;
            }
            // One type per offset: each stretch of one type at once.
            let mut from = b.first;
            for (i, t) in b.types.iter().enumerate() {
                let offset = b.first + i as i64;
                let next = b.types.get(i + 1);
                if next != Some(t) {
                    self.apply(from, offset, *t, limits, now, &mut dead);
                    from = offset + 1;
                }
            }
        }
        self.settle();
        Ok(dead)
    }

    /// Every record `member` holds goes back (the member left, or closed its share session).
    /// Their delivery counts go back down by one, as Kafka's do: a member that leaves in
    /// good order did not fail to process them (one at the limit is still archived).
    pub fn release_member(&mut self, member: &str, limits: &Limits) -> Vec<DeadLetter> {
        self.release_where(
            limits,
            true,
            |state| matches!(state, State::Acquired { member: m, .. } if &**m == member),
        )
    }

    /// Every record whose lock has expired by `now` goes back.
    pub fn expire(&mut self, now: Instant, limits: &Limits) -> Vec<DeadLetter> {
        self.release_where(
            limits,
            false,
            |state| matches!(state, State::Acquired { until, .. } if *until <= now),
        )
    }

    /// The log no longer has the records below `log_start` (retention, DeleteRecords): the
    /// share partition starts there too.
    pub fn truncate_below(&mut self, log_start: i64) {
        if log_start <= self.start {
            return;
        }
        self.split_at(log_start);
        self.runs = self.runs.split_off(&log_start);
        self.start = log_start;
        self.end = self.end.max(log_start);
        self.settle();
    }

    /// Starts the share partition again at `offset` with nothing in flight
    /// (AlterShareGroupOffsets, on a group without members).
    pub fn reset(&mut self, offset: i64) {
        *self = SharePartition::new(offset);
    }

    /// Sets `first..=last` (acquired by the acknowledging member) as `t` says.
    fn apply(
        &mut self,
        first: i64,
        last: i64,
        t: AckType,
        limits: &Limits,
        now: Instant,
        dead: &mut Vec<DeadLetter>,
    ) {
        self.split_at(first);
        self.split_at(last + 1);
        let firsts: Vec<i64> = self.runs.range(first..=last).map(|(&f, _)| f).collect();
        for f in firsts {
            let run = self.runs.get_mut(&f).expect("listed");
            match t {
                AckType::Gap => run.state = State::Archived,
                AckType::Accept => run.state = State::Acknowledged,
                AckType::Reject => {
                    run.state = dead_state(Why::Rejected, limits);
                    push_dead(dead, f, run.last, run.deliveries, Why::Rejected);
                }
                AckType::Release => release(f, run, limits, dead),
                AckType::Renew => {
                    if let State::Acquired { until, .. } = &mut run.state {
                        *until = now + limits.lock;
                    }
                }
            }
        }
    }

    /// `Err` unless every record of `first..=last` is acquired by `member` and its lock holds
    /// at `now`.
    fn check_held(
        &self,
        member: &str,
        first: i64,
        last: i64,
        now: Instant,
    ) -> Result<(), AckError> {
        if first < self.start || last >= self.end {
            return Err(AckError::InvalidRecordState(format!(
                "offsets {first}..={last} are not in flight ({}..{})",
                self.start, self.end
            )));
        }
        let from = (self.runs.range(..=first).next_back()).map_or(first, |(&f, _)| f);
        for (&f, r) in self.runs.range(from..=last) {
            if r.last < first {
                continue;
            }
            match &r.state {
                State::Acquired { member: m, until } if &**m == member && *until > now => {}
                State::Acquired { member: m, .. } if &**m == member => {
                    return Err(AckError::InvalidRecordState(format!(
                        "the lock on offsets {}..={} has expired",
                        f.max(first),
                        r.last.min(last)
                    )))
                }
                other => {
                    return Err(AckError::InvalidRecordState(format!(
                        "offsets {}..={} are not acquired by this member ({})",
                        f.max(first),
                        r.last.min(last),
                        describe(other)
                    )))
                }
            }
        }
        Ok(())
    }

    fn release_where(
        &mut self,
        limits: &Limits,
        uncount: bool,
        which: impl Fn(&State) -> bool,
    ) -> Vec<DeadLetter> {
        let mut dead = Vec::new();
        for (&first, run) in self.runs.iter_mut() {
            if which(&run.state) {
                release(first, run, limits, &mut dead);
                if uncount && run.state == State::Available {
                    run.deliveries = run.deliveries.saturating_sub(1);
                }
            }
        }
        if !dead.is_empty() || self.runs.values().any(|r| r.state == State::Available) {
            self.settle();
        }
        dead
    }

    /// Appends a run ending at `last` after the end.
    fn push(&mut self, last: i64, state: State, deliveries: u16) {
        debug_assert!(last >= self.end);
        self.runs.insert(
            self.end,
            Run {
                last,
                state,
                deliveries,
            },
        );
        self.end = last + 1;
    }

    /// Splits the run holding `offset` so that one starts there (nothing at or past the end).
    fn split_at(&mut self, offset: i64) {
        let Some((&first, run)) = self.runs.range(..=offset).next_back() else {
            return;
        };
        if first == offset || run.last < offset {
            return;
        }
        let tail = run.clone();
        self.runs.get_mut(&first).expect("found").last = offset - 1;
        self.runs.insert(offset, tail);
    }

    /// Moves the start past the runs done with, merges neighbours that agree, and checks the
    /// invariants (debug builds).
    fn settle(&mut self) {
        while let Some(entry) = self.runs.first_entry() {
            if !entry.get().state.done() {
                break;
            }
            self.start = entry.get().last + 1;
            entry.remove();
        }
        if self.runs.is_empty() {
            self.start = self.end;
        }
        let mut merged: BTreeMap<i64, Run> = BTreeMap::new();
        for (first, run) in std::mem::take(&mut self.runs) {
            if let Some((_, prev)) = merged.iter_mut().next_back() {
                if prev.state == run.state && prev.deliveries == run.deliveries {
                    prev.last = run.last;
                    continue;
                }
            }
            merged.insert(first, run);
        }
        self.runs = merged;
        self.debug_check();
    }

    /// Invariant 13 (docs/invariants.md), in debug builds.
    fn debug_check(&self) {
        if !cfg!(debug_assertions) {
            return;
        }
        let mut next = self.start;
        for (&first, r) in &self.runs {
            assert_eq!(
                first, next,
                "invariant 13 (docs/invariants.md): share partition runs not back to back at {first} (expected {next})"
            );
            assert!(r.last >= first, "invariant 13: empty run at {first}");
            next = r.last + 1;
        }
        assert_eq!(
            next, self.end,
            "invariant 13 (docs/invariants.md): share partition runs end at {next}, not at the end {}",
            self.end
        );
        if let Some(r) = self.runs.values().next() {
            assert!(
                !r.state.done(),
                "invariant 13 (docs/invariants.md): the share partition start {} was not moved past records done with",
                self.start
            );
        }
    }
}

/// A record going back: available again, or archived as a dead letter at the delivery limit.
fn release(first: i64, run: &mut Run, limits: &Limits, dead: &mut Vec<DeadLetter>) {
    if run.deliveries >= limits.delivery_limit {
        run.state = dead_state(Why::DeliveryLimit, limits);
        push_dead(dead, first, run.last, run.deliveries, Why::DeliveryLimit);
    } else {
        run.state = State::Available;
    }
}

/// A dead letter's state: waiting for its write when the group has a dead-letter topic, else
/// archived at once.
fn dead_state(why: Why, limits: &Limits) -> State {
    match limits.dead_letter_queue {
        true => State::DeadLettering(why),
        false => State::Archived,
    }
}

fn push_acquired(out: &mut Vec<Acquired>, first: i64, last: i64, deliveries: u16) {
    if let Some(prev) = out.last_mut() {
        if prev.last + 1 == first && prev.deliveries == deliveries {
            prev.last = last;
            return;
        }
    }
    out.push(Acquired {
        first,
        last,
        deliveries,
    });
}

fn push_dead(out: &mut Vec<DeadLetter>, first: i64, last: i64, deliveries: u16, why: Why) {
    if let Some(prev) = out.last_mut() {
        if prev.last + 1 == first && prev.deliveries == deliveries && prev.why == why {
            prev.last = last;
            return;
        }
    }
    out.push(DeadLetter {
        first,
        last,
        deliveries,
        why,
    });
}

fn describe(state: &State) -> &'static str {
    match state {
        State::Available => "available",
        State::Acquired { .. } => "acquired by another member",
        State::Acknowledged => "acknowledged",
        State::Archived => "archived",
        State::DeadLettering(_) => "being written to the dead-letter topic",
    }
}

#[cfg(test)]
mod tests;
