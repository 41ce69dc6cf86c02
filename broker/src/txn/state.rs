//! One transactional id's state machine (pure: no I/O, no clock of its own).
//!
//! ```text
//!            InitProducerId (epoch + 1)
//!  Empty ─────────────┐   ┌──────────────────────────────────────────────┐
//!    │ AddPartitions  ▼   ▼                                              │
//!    └──────────► Ongoing ──EndTxn(commit)──► PrepareCommit ──markers──► CompleteCommit
//!                  │  │                                                  │
//!                  │  └──EndTxn(abort) / timeout / fence──► PrepareAbort ──markers──► CompleteAbort
//!                  └── AddPartitions (more partitions) ──┘
//! ```
//!
//! Every transition is decided here as a [`Transition`]: the metadata it leads to, written to
//! `__transaction_state` before it takes effect ([`TxnMetadata::pending`] holds it meanwhile,
//! and any other request for the id gets CONCURRENT_TRANSACTIONS until it lands or fails).
//!
//! Invariants:
//! - at most one transition of an id is in flight;
//! - `(producer_id, producer_epoch)` only moves forward: an epoch bump keeps the id until the
//!   epoch is exhausted, then a new producer id starts at epoch 0 (`last_producer_id` keeps
//!   the old one, so a retry of the call that moved it is recognized);
//! - a request from an older epoch is fenced (PRODUCER_FENCED), from another producer id
//!   refused (INVALID_PRODUCER_ID_MAPPING);
//! - partitions are only added while the transaction is Empty, Ongoing or complete, and are
//!   cleared when it completes; a prepared transaction only moves to its completion;
//! - with transaction version 2 (KIP-890 part 2, EndTxn v5+) every end bumps the epoch: the
//!   prepared record carries the bumped epoch, which the markers carry, so no write of the
//!   ended transaction's epoch is taken after them. When the epoch is exhausted the markers
//!   carry `i16::MAX` and the completion moves the id to `next_producer_id` at epoch 0.

use std::collections::BTreeSet;

use crate::error::{ApiError, ErrorCode};

/// Kafka's transaction states, with the ids `__transaction_state` records carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnState {
    Empty = 0,
    Ongoing = 1,
    PrepareCommit = 2,
    PrepareAbort = 3,
    CompleteCommit = 4,
    CompleteAbort = 5,
    Dead = 6,
}

impl TxnState {
    /// Kafka's state graph (its `TransactionState` valid previous states, with KIP-890's abort
    /// of nothing ongoing): whether a transactional id may move from `previous` to `self`.
    pub fn may_follow(self, previous: TxnState) -> bool {
        use TxnState::*;
        let settled = matches!(previous, Empty | CompleteCommit | CompleteAbort);
        match self {
            Empty | Dead => settled,
            Ongoing => settled || previous == Ongoing,
            PrepareCommit => previous == Ongoing,
            PrepareAbort => settled || previous == Ongoing,
            CompleteCommit => previous == PrepareCommit,
            CompleteAbort => previous == PrepareAbort,
        }
    }

    pub fn from_id(id: i8) -> Option<TxnState> {
        Some(match id {
            0 => TxnState::Empty,
            1 => TxnState::Ongoing,
            2 => TxnState::PrepareCommit,
            3 => TxnState::PrepareAbort,
            4 => TxnState::CompleteCommit,
            5 => TxnState::CompleteAbort,
            6 => TxnState::Dead,
            _ => return None,
        })
    }

    /// The name DescribeTransactions and ListTransactions use.
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
        }
    }

    pub fn is_prepared(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }
}

/// What is persisted of a transactional id (Kafka's TransactionLogValue) plus the in-memory
/// transition in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    pub producer_id: i64,
    /// The producer id before the last rotation (-1: none).
    pub last_producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last bump (-1: none): a retried InitProducerId that carries it
    /// gets the current one back.
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<(String, i32)>,
    /// When the ongoing transaction started (-1: none).
    pub start_ms: i64,
    pub last_update_ms: i64,
    /// The producer id a completing transaction hands its client, when its epoch bump
    /// exhausted the current one (-1: none; Kafka's NextProducerId).
    pub next_producer_id: i64,
    /// The transition being written, not yet in effect.
    pub pending: Option<Box<TxnMetadata>>,
}

/// A decided change: the metadata to write, or nothing to write (the request is answered
/// from the current metadata).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    Write(TxnMetadata),
    Unchanged,
}

/// Epochs stop short of i16::MAX (Kafka reserves it): then the producer id rotates.
const MAX_EPOCH: i16 = i16::MAX - 1;

fn err(code: ErrorCode, msg: impl Into<String>) -> ApiError {
    ApiError::new(code, msg.into())
}

impl TxnMetadata {
    /// A new id's first producer.
    pub fn new(producer_id: i64, timeout_ms: i32, now_ms: i64) -> TxnMetadata {
        TxnMetadata {
            producer_id,
            last_producer_id: -1,
            producer_epoch: 0,
            last_producer_epoch: -1,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            start_ms: -1,
            last_update_ms: now_ms,
            next_producer_id: -1,
            pending: None,
        }
    }

    /// The producer id and epoch the client holds once the transaction in progress completes:
    /// what EndTxn v5 answers.
    pub fn client_identity(&self) -> (i64, i16) {
        if self.next_producer_id >= 0 {
            (self.next_producer_id, 0)
        } else {
            (self.producer_id, self.producer_epoch)
        }
    }

    /// The value as persisted: without the transition in flight.
    fn settled(&self) -> TxnMetadata {
        TxnMetadata {
            pending: None,
            ..self.clone()
        }
    }

    fn busy(&self) -> Result<(), ApiError> {
        if self.pending.is_some() || self.state.is_prepared() {
            return Err(err(
                ErrorCode::ConcurrentTransactions,
                format!("a transition from {} is in progress", self.state.name()),
            ));
        }
        Ok(())
    }

    /// The producer's id and epoch must be the current ones (or, while a version-2 end is
    /// being completed, the ones it hands out: the caller then meets CONCURRENT_TRANSACTIONS).
    fn check_producer(&self, producer_id: i64, epoch: i16) -> Result<(), ApiError> {
        if self.state.is_prepared() && (producer_id, epoch) == self.client_identity() {
            return Ok(());
        }
        if producer_id != self.producer_id {
            return Err(err(
                ErrorCode::InvalidProducerIdMapping,
                format!(
                    "producer id {producer_id} is not this transactional id's ({})",
                    self.producer_id
                ),
            ));
        }
        if epoch != self.producer_epoch {
            return Err(err(
                ErrorCode::ProducerFenced,
                format!(
                    "epoch {epoch} is fenced by epoch {} of producer {producer_id}",
                    self.producer_epoch
                ),
            ));
        }
        Ok(())
    }

    /// InitProducerId for an existing id. `expected` is the `(producer id, epoch)` the client
    /// sent (KIP-360: a producer recovering from an error), `(-1, -1)` for a new producer.
    /// `fresh_id` is called when the epoch is exhausted. An ongoing transaction is aborted
    /// first under a bumped epoch ([`TxnMetadata::fence`]); the caller answers
    /// CONCURRENT_TRANSACTIONS and the client retries once it has completed.
    pub fn init_producer(
        &self,
        expected: (i64, i16),
        timeout_ms: i32,
        now_ms: i64,
        fresh_id: impl FnOnce() -> Result<i64, ApiError>,
    ) -> Result<Transition, ApiError> {
        self.busy()?;
        if expected.0 >= 0 {
            let current = expected == (self.producer_id, self.producer_epoch);
            let retried = expected.0 == self.last_producer_id
                || (expected.0 == self.producer_id && expected.1 == self.last_producer_epoch);
            if !current && !retried {
                return Err(err(
                    ErrorCode::ProducerFenced,
                    format!(
                        "producer {}/{} is not the current {}/{}",
                        expected.0, expected.1, self.producer_id, self.producer_epoch
                    ),
                ));
            }
            if retried && !current && self.state != TxnState::Ongoing {
                // The bump this retry asks for already happened.
                return Ok(Transition::Unchanged);
            }
        }
        if self.state == TxnState::Ongoing {
            return Ok(Transition::Write(self.fence(now_ms)));
        }
        let mut next = self.settled();
        next.bump(fresh_id)?;
        next.timeout_ms = timeout_ms;
        next.state = TxnState::Empty;
        next.partitions.clear();
        next.start_ms = -1;
        next.last_update_ms = now_ms;
        Ok(Transition::Write(next))
    }

    fn bump(&mut self, fresh_id: impl FnOnce() -> Result<i64, ApiError>) -> Result<(), ApiError> {
        if self.epoch_exhausted() {
            self.last_producer_id = self.producer_id;
            self.producer_id = fresh_id()?;
            self.last_producer_epoch = -1;
            self.producer_epoch = 0;
        } else {
            self.last_producer_epoch = self.producer_epoch;
            self.producer_epoch += 1;
        }
        Ok(())
    }

    /// Aborts the ongoing transaction under a bumped epoch (a new producer with the same id,
    /// or the transaction's timeout): the old producer's writes and its commit are refused
    /// from then on, at the coordinator and at every partition the markers reach.
    pub fn fence(&self, now_ms: i64) -> TxnMetadata {
        let mut next = self.settled();
        // A bump past the exhausted epoch would rotate the id and orphan the markers' id:
        // abort under the last epoch then (the client then gets a new id at its next init).
        if next.producer_epoch < MAX_EPOCH {
            next.last_producer_epoch = next.producer_epoch;
            next.producer_epoch += 1;
        }
        next.state = TxnState::PrepareAbort;
        next.last_update_ms = now_ms;
        next
    }

    /// Whether the next epoch bump needs a fresh producer id.
    pub fn epoch_exhausted(&self) -> bool {
        self.producer_epoch >= MAX_EPOCH
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn: the partitions join the transaction, which
    /// becomes Ongoing.
    pub fn add_partitions(
        &self,
        producer_id: i64,
        epoch: i16,
        partitions: &[(String, i32)],
        now_ms: i64,
    ) -> Result<Transition, ApiError> {
        self.check_producer(producer_id, epoch)?;
        self.busy()?;
        if self.state == TxnState::Dead {
            return Err(err(
                ErrorCode::InvalidTxnState,
                "the transactional id expired",
            ));
        }
        if self.state == TxnState::Ongoing && partitions.iter().all(|p| self.partitions.contains(p))
        {
            return Ok(Transition::Unchanged);
        }
        let mut next = self.settled();
        if next.state != TxnState::Ongoing {
            next.partitions.clear();
            next.start_ms = now_ms;
        }
        next.state = TxnState::Ongoing;
        next.partitions.extend(partitions.iter().cloned());
        next.last_update_ms = now_ms;
        Ok(Transition::Write(next))
    }

    /// KIP-890's check for a partition leader before it takes a transactional produce:
    /// the partition must be in the producer's ongoing transaction.
    pub fn verify(&self, producer_id: i64, epoch: i16, partition: &(String, i32)) -> ErrorCode {
        if producer_id != self.producer_id {
            ErrorCode::InvalidProducerIdMapping
        } else if epoch < self.producer_epoch {
            ErrorCode::ProducerFenced
        } else if self.state != TxnState::Ongoing || !self.partitions.contains(partition) {
            ErrorCode::InvalidTxnState
        } else {
            ErrorCode::None
        }
    }

    /// EndTxn: the ongoing transaction is prepared to commit or abort. A retry after the
    /// transaction completed the same way is answered as success.
    pub fn end(
        &self,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        now_ms: i64,
    ) -> Result<Transition, ApiError> {
        self.check_producer(producer_id, epoch)?;
        if self.pending.is_some() {
            return Err(err(
                ErrorCode::ConcurrentTransactions,
                "a transition is in progress",
            ));
        }
        let wrong = |what: &str| {
            Err(err(
                ErrorCode::InvalidTxnState,
                format!("{what} a transaction in state {}", self.state.name()),
            ))
        };
        match (self.state, commit) {
            (TxnState::Ongoing, _) => {
                let mut next = self.settled();
                next.state = if commit {
                    TxnState::PrepareCommit
                } else {
                    TxnState::PrepareAbort
                };
                next.last_update_ms = now_ms;
                Ok(Transition::Write(next))
            }
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => {
                Ok(Transition::Unchanged)
            }
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => Err(err(
                ErrorCode::ConcurrentTransactions,
                "the transaction is completing",
            )),
            (_, true) => wrong("cannot commit"),
            (_, false) => wrong("cannot abort"),
        }
    }

    /// EndTxn of transaction version 2 (KIP-890 part 2): the end bumps the epoch (see the
    /// invariants), and an abort with nothing ongoing is taken too, as a bumped-epoch abort of
    /// no partition: a client that cannot know whether a failed produce added its partition
    /// aborts, and the bump fences that produce wherever it lands. A retry carries the epoch
    /// before the bump (or, after a rotation, the old id's last epoch) and is answered from
    /// the current metadata; `fresh_id` is called when the epoch is exhausted.
    pub fn end_bumping(
        &self,
        producer_id: i64,
        epoch: i16,
        commit: bool,
        now_ms: i64,
        fresh_id: impl FnOnce() -> Result<i64, ApiError>,
    ) -> Result<Transition, ApiError> {
        let completed = matches!(
            self.state,
            TxnState::CompleteCommit | TxnState::CompleteAbort
        );
        let bump_retry =
            producer_id == self.producer_id && epoch.checked_add(1) == Some(self.producer_epoch);
        let rotation_retry = completed
            && producer_id == self.last_producer_id
            && epoch == MAX_EPOCH
            && self.producer_epoch == 0;
        let retry = bump_retry || rotation_retry;
        if producer_id != self.producer_id && !rotation_retry {
            return Err(err(
                ErrorCode::InvalidProducerIdMapping,
                format!(
                    "producer id {producer_id} is not this transactional id's ({})",
                    self.producer_id
                ),
            ));
        }
        let valid = match self.state {
            TxnState::PrepareCommit | TxnState::PrepareAbort => bump_retry,
            TxnState::CompleteCommit | TxnState::CompleteAbort => {
                retry || epoch == self.producer_epoch
            }
            _ => epoch == self.producer_epoch,
        };
        if !valid {
            return Err(err(
                ErrorCode::ProducerFenced,
                format!(
                    "epoch {epoch} is fenced by epoch {} of producer {producer_id}",
                    self.producer_epoch
                ),
            ));
        }
        if self.pending.is_some() {
            return Err(err(
                ErrorCode::ConcurrentTransactions,
                "a transition is in progress",
            ));
        }
        let wrong = || {
            Err(err(
                ErrorCode::InvalidTxnState,
                format!(
                    "cannot {} a transaction in state {}",
                    if commit { "commit" } else { "abort" },
                    self.state.name()
                ),
            ))
        };
        let prepare = |state: TxnState| -> Result<Transition, ApiError> {
            let mut next = self.settled();
            if next.epoch_exhausted() {
                next.next_producer_id = fresh_id()?;
                next.producer_epoch = i16::MAX;
            } else {
                next.producer_epoch += 1;
            }
            next.last_producer_epoch = -1;
            next.state = state;
            next.last_update_ms = now_ms;
            Ok(Transition::Write(next))
        };
        match (self.state, commit) {
            (TxnState::Ongoing, true) => prepare(TxnState::PrepareCommit),
            (TxnState::Ongoing, false) => prepare(TxnState::PrepareAbort),
            (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) if retry => {
                Ok(Transition::Unchanged)
            }
            (TxnState::CompleteCommit, false) if retry => wrong(),
            (TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort, false) => {
                prepare(TxnState::PrepareAbort)
            }
            (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => Err(err(
                ErrorCode::ConcurrentTransactions,
                "the transaction is completing",
            )),
            _ => wrong(),
        }
    }

    /// The markers are written: the prepared transaction completes.
    pub fn complete(&self, now_ms: i64) -> Option<TxnMetadata> {
        let state = match self.state {
            TxnState::PrepareCommit => TxnState::CompleteCommit,
            TxnState::PrepareAbort => TxnState::CompleteAbort,
            _ => return None,
        };
        let mut next = self.settled();
        next.state = state;
        next.partitions.clear();
        next.start_ms = -1;
        next.last_update_ms = now_ms;
        if next.next_producer_id >= 0 {
            next.last_producer_id = next.producer_id;
            next.producer_id = next.next_producer_id;
            next.producer_epoch = 0;
            next.next_producer_id = -1;
        }
        Some(next)
    }

    /// Whether the ongoing transaction has outlived its timeout at `now_ms`.
    pub fn timed_out(&self, now_ms: i64) -> bool {
        self.state == TxnState::Ongoing
            && self.pending.is_none()
            && self.start_ms >= 0
            && now_ms.saturating_sub(self.start_ms) > self.timeout_ms as i64
    }
}

/// Invariant 11 (docs/invariants.md), checked in debug builds where the coordinator takes a
/// transition: a transactional id moves only along Kafka's state graph, starts Empty, and its
/// producer epoch never goes back under the same producer id.
pub fn check_transition(current: Option<&TxnMetadata>, next: &TxnMetadata) {
    if !cfg!(debug_assertions) {
        return;
    }
    let Some(current) = current else {
        assert!(
            next.state == TxnState::Empty,
            "invariant 11 (docs/invariants.md): a new transactional id starts {}",
            next.state.name()
        );
        return;
    };
    assert!(
        next.state.may_follow(current.state),
        "invariant 11 (docs/invariants.md): {} cannot follow {}",
        next.state.name(),
        current.state.name()
    );
    assert!(
        next.producer_id != current.producer_id || next.producer_epoch >= current.producer_epoch,
        "invariant 11 (docs/invariants.md): producer {} epoch {} went back to {}",
        current.producer_id,
        current.producer_epoch,
        next.producer_epoch
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_id() -> Result<i64, ApiError> {
        panic!("no new producer id expected")
    }

    fn write(t: Result<Transition, ApiError>) -> TxnMetadata {
        match t.unwrap() {
            Transition::Write(m) => m,
            Transition::Unchanged => panic!("expected a write"),
        }
    }

    fn code(t: Result<Transition, ApiError>) -> ErrorCode {
        t.unwrap_err().code
    }

    fn tp(p: i32) -> (String, i32) {
        ("t".to_string(), p)
    }

    #[test]
    fn a_transaction_goes_through_its_states_and_retries_are_recognized() {
        let m = TxnMetadata::new(7, 60_000, 0);
        let m = write(m.init_producer((-1, -1), 60_000, 1, no_id));
        assert_eq!(
            (m.producer_id, m.producer_epoch, m.state),
            (7, 1, TxnState::Empty)
        );
        let m = write(m.add_partitions(7, 1, &[tp(0)], 10));
        assert_eq!((m.state, m.start_ms), (TxnState::Ongoing, 10));
        assert_eq!(
            m.add_partitions(7, 1, &[tp(0)], 11).unwrap(),
            Transition::Unchanged
        );
        let m = write(m.add_partitions(7, 1, &[tp(1)], 12));
        assert_eq!(m.partitions.len(), 2);
        assert_eq!(
            m.start_ms, 10,
            "the transaction started with its first partition"
        );
        assert_eq!(m.verify(7, 1, &tp(1)), ErrorCode::None);
        assert_eq!(m.verify(7, 1, &tp(2)), ErrorCode::InvalidTxnState);
        let m = write(m.end(7, 1, true, 20));
        assert_eq!(m.state, TxnState::PrepareCommit);
        assert_eq!(
            code(m.end(7, 1, true, 21)),
            ErrorCode::ConcurrentTransactions
        );
        assert_eq!(
            code(m.add_partitions(7, 1, &[tp(0)], 21)),
            ErrorCode::ConcurrentTransactions
        );
        let m = m.complete(30).unwrap();
        assert_eq!((m.state, m.partitions.len()), (TxnState::CompleteCommit, 0));
        assert_eq!(
            m.end(7, 1, true, 31).unwrap(),
            Transition::Unchanged,
            "a retried commit"
        );
        assert_eq!(code(m.end(7, 1, false, 31)), ErrorCode::InvalidTxnState);
        // The next transaction.
        let m = write(m.add_partitions(7, 1, &[tp(3)], 40));
        assert_eq!(
            (m.state, m.start_ms, m.partitions.len()),
            (TxnState::Ongoing, 40, 1)
        );
    }

    #[test]
    fn an_older_epoch_is_fenced_and_a_new_producer_aborts_the_open_transaction() {
        let m = write(TxnMetadata::new(7, 60_000, 0).init_producer((-1, -1), 60_000, 1, no_id));
        let m = write(m.add_partitions(7, 1, &[tp(0)], 10));
        // A second producer with the same transactional id.
        let fenced = write(m.init_producer((-1, -1), 60_000, 11, no_id));
        assert_eq!(
            (fenced.state, fenced.producer_epoch),
            (TxnState::PrepareAbort, 2)
        );
        assert_eq!(
            code(fenced.add_partitions(7, 1, &[tp(0)], 12)),
            ErrorCode::ProducerFenced
        );
        assert_eq!(code(fenced.end(7, 1, true, 12)), ErrorCode::ProducerFenced);
        assert_eq!(
            code(fenced.init_producer((-1, -1), 60_000, 12, no_id)),
            ErrorCode::ConcurrentTransactions,
            "the new producer waits for the abort"
        );
        let done = fenced.complete(13).unwrap();
        let m = write(done.init_producer((-1, -1), 60_000, 14, no_id));
        assert_eq!((m.state, m.producer_epoch), (TxnState::Empty, 3));
        assert_eq!(
            code(m.end(8, 3, true, 15)),
            ErrorCode::InvalidProducerIdMapping
        );
        assert_eq!(
            code(m.end(7, 3, true, 15)),
            ErrorCode::InvalidTxnState,
            "nothing to commit"
        );
    }

    #[test]
    fn an_exhausted_epoch_rotates_the_producer_id_and_kip_360_retries_are_idempotent() {
        let mut m = TxnMetadata::new(7, 60_000, 0);
        m.producer_epoch = MAX_EPOCH;
        let next = write(m.init_producer((7, MAX_EPOCH), 60_000, 1, || Ok(99)));
        assert_eq!(
            (next.producer_id, next.producer_epoch, next.last_producer_id),
            (99, 0, 7)
        );
        // The same call again (its response was lost): the current producer, unchanged.
        assert_eq!(
            next.init_producer((7, MAX_EPOCH), 60_000, 2, no_id)
                .unwrap(),
            Transition::Unchanged
        );
        assert_eq!(
            code(next.init_producer((5, 0), 60_000, 2, no_id)),
            ErrorCode::ProducerFenced
        );
    }

    #[test]
    fn a_transaction_times_out_only_while_ongoing() {
        let m = write(TxnMetadata::new(7, 1_000, 0).init_producer((-1, -1), 1_000, 0, no_id));
        assert!(!m.timed_out(10_000), "empty");
        let m = write(m.add_partitions(7, 1, &[tp(0)], 100));
        assert!(!m.timed_out(1_100));
        assert!(m.timed_out(1_101));
        let aborting = m.fence(1_101);
        assert!(!aborting.timed_out(5_000));
        assert_eq!(aborting.producer_epoch, 2);
    }

    fn bump_end(
        m: &TxnMetadata,
        pid: i64,
        epoch: i16,
        commit: bool,
    ) -> Result<Transition, ApiError> {
        m.end_bumping(pid, epoch, commit, 50, no_id)
    }

    #[test]
    fn a_version_2_end_bumps_the_epoch_and_its_retries_are_recognized() {
        let m = write(TxnMetadata::new(7, 60_000, 0).init_producer((-1, -1), 60_000, 1, no_id));
        let m = write(m.add_partitions(7, 1, &[tp(0)], 10));
        let prepared = write(bump_end(&m, 7, 1, true));
        assert_eq!(
            (prepared.state, prepared.producer_epoch),
            (TxnState::PrepareCommit, 2),
            "the markers carry the bumped epoch"
        );
        assert_eq!(prepared.client_identity(), (7, 2));
        assert_eq!(
            code(bump_end(&prepared, 7, 1, true)),
            ErrorCode::ConcurrentTransactions,
            "a retry while the markers are written"
        );
        assert_eq!(
            code(bump_end(&prepared, 7, 1, false)),
            ErrorCode::InvalidTxnState
        );
        assert_eq!(
            code(prepared.add_partitions(7, 2, &[tp(0)], 51)),
            ErrorCode::ConcurrentTransactions,
            "the next transaction waits for the markers"
        );
        assert_eq!(
            code(prepared.add_partitions(7, 1, &[tp(0)], 51)),
            ErrorCode::ProducerFenced,
            "a late write of the ended transaction"
        );
        let done = prepared.complete(60).unwrap();
        assert_eq!((done.producer_id, done.producer_epoch), (7, 2));
        assert_eq!(
            bump_end(&done, 7, 1, true).unwrap(),
            Transition::Unchanged,
            "a retried commit"
        );
        assert_eq!(
            code(bump_end(&done, 7, 1, false)),
            ErrorCode::InvalidTxnState
        );
        assert_eq!(code(bump_end(&done, 7, 0, true)), ErrorCode::ProducerFenced);
        assert_eq!(code(bump_end(&done, 7, 3, true)), ErrorCode::ProducerFenced);
        assert_eq!(
            code(bump_end(&done, 8, 2, true)),
            ErrorCode::InvalidProducerIdMapping
        );
        // Nothing ongoing: a commit is refused, an abort bumps the epoch over no partition.
        assert_eq!(
            code(bump_end(&done, 7, 2, true)),
            ErrorCode::InvalidTxnState
        );
        let empty_abort = write(bump_end(&done, 7, 2, false));
        assert_eq!(
            (
                empty_abort.state,
                empty_abort.producer_epoch,
                empty_abort.partitions.len()
            ),
            (TxnState::PrepareAbort, 3, 0)
        );
        let aborted = empty_abort.complete(70).unwrap();
        assert_eq!(
            bump_end(&aborted, 7, 2, false).unwrap(),
            Transition::Unchanged,
            "a retried abort"
        );
        let next = write(aborted.add_partitions(7, 3, &[tp(1)], 80));
        assert_eq!((next.state, next.producer_epoch), (TxnState::Ongoing, 3));
    }

    #[test]
    fn a_version_2_end_at_the_last_epoch_rotates_the_producer_id() {
        let mut m = TxnMetadata::new(7, 60_000, 0);
        m.producer_epoch = MAX_EPOCH;
        let m = write(m.add_partitions(7, MAX_EPOCH, &[tp(0)], 10));
        let prepared = write(m.end_bumping(7, MAX_EPOCH, true, 20, || Ok(99)));
        assert_eq!(
            (
                prepared.producer_id,
                prepared.producer_epoch,
                prepared.next_producer_id
            ),
            (7, i16::MAX, 99),
            "the markers carry the old id at the reserved epoch"
        );
        assert_eq!(prepared.client_identity(), (99, 0));
        assert_eq!(
            code(bump_end(&prepared, 7, MAX_EPOCH, true)),
            ErrorCode::ConcurrentTransactions
        );
        assert_eq!(
            code(prepared.add_partitions(99, 0, &[tp(0)], 21)),
            ErrorCode::ConcurrentTransactions,
            "the new identity waits for the markers"
        );
        let done = prepared.complete(30).unwrap();
        assert_eq!(
            (
                done.producer_id,
                done.producer_epoch,
                done.last_producer_id,
                done.next_producer_id
            ),
            (99, 0, 7, -1)
        );
        assert_eq!(
            bump_end(&done, 7, MAX_EPOCH, true).unwrap(),
            Transition::Unchanged,
            "a retry with the old id"
        );
        assert_eq!(
            code(bump_end(&done, 7, MAX_EPOCH - 1, true)),
            ErrorCode::InvalidProducerIdMapping
        );
        let next = write(done.add_partitions(99, 0, &[tp(0)], 40));
        assert_eq!(next.state, TxnState::Ongoing);
    }

    #[test]
    fn every_transition_the_state_machine_takes_is_on_kafkas_graph() {
        use TxnState::*;
        assert!(PrepareCommit.may_follow(Ongoing) && CompleteCommit.may_follow(PrepareCommit));
        assert!(
            PrepareAbort.may_follow(Empty),
            "KIP-890: an abort of nothing ongoing"
        );
        assert!(!CompleteCommit.may_follow(PrepareAbort));
        assert!(!Ongoing.may_follow(PrepareCommit), "not while completing");
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "invariant 11")]
    fn a_commit_completed_from_an_abort_is_caught() {
        let mut prepared = TxnMetadata::new(7, 60_000, 0);
        prepared.state = TxnState::PrepareAbort;
        let mut next = prepared.clone();
        next.state = TxnState::CompleteCommit;
        check_transition(Some(&prepared), &next);
    }
}
