//! Producer state of one partition: per producer id, its epoch, the last five batches'
//! sequence ranges and offsets, and its ongoing transaction.
//!
//! Invariants:
//! - an epoch only moves forward; a batch from an older epoch is fenced;
//! - within an epoch, sequences are contiguous: a batch is accepted only if its first sequence
//!   follows the last accepted one (or it is an exact retry of one of the cached batches, which
//!   is answered with the original offset and not appended again);
//! - a producer has at most one ongoing transaction in a partition: it starts at the first
//!   transactional batch after the producer's last marker and ends at the next marker (commit
//!   or abort, see [`super::control`]); while it is open, the producer may write only
//!   transactional batches; a marker from an older producer epoch or an older coordinator epoch
//!   is fenced;
//! - `ongoing` indexes exactly the entries with an ongoing transaction, by first offset: the
//!   smallest is the partition's first unstable offset, which bounds the last stable offset;
//! - the state is a function of the log: it is snapshotted with the log and rebuilt on restart by
//!   replaying batch headers (and markers) after the snapshot's offset. A replay that starts
//!   inside a transaction learns of it at its first batch after the start, which covers every
//!   batch of it that the replayed log holds.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::batch::BatchHeader;
use super::index::Durability;

/// Batches remembered per producer for duplicate detection (Kafka's
/// `max.in.flight.requests.per.connection` limit for idempotence is 5).
const CACHED_BATCHES: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchMeta {
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: i64,
    pub timestamp: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerEntry {
    pub epoch: i16,
    pub batches: VecDeque<BatchMeta>,
    /// First offset of the producer's ongoing transaction in this partition.
    #[serde(default)]
    pub txn_first_offset: Option<i64>,
    /// Epoch of the transaction coordinator that wrote the producer's last marker (-1: none).
    #[serde(default = "no_coordinator_epoch")]
    pub coordinator_epoch: i32,
}

fn no_coordinator_epoch() -> i32 {
    -1
}

impl ProducerEntry {
    fn new(epoch: i16) -> ProducerEntry {
        ProducerEntry {
            epoch,
            batches: VecDeque::new(),
            txn_first_offset: None,
            coordinator_epoch: -1,
        }
    }
}

/// A producer as DescribeProducers shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerView {
    pub producer_id: i64,
    pub epoch: i16,
    /// -1 when no batch with a sequence is remembered.
    pub last_sequence: i32,
    pub last_timestamp: i64,
    pub coordinator_epoch: i32,
    pub txn_first_offset: Option<i64>,
}

/// A transaction a marker ended in this partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    /// The marker's offset.
    pub last_offset: i64,
    pub aborted: bool,
}

/// Why a marker may not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerCheck {
    Accept,
    /// The producer has moved to a newer epoch than the marker's.
    ProducerFenced {
        current: i16,
        got: i16,
    },
    /// A newer coordinator has written this producer's markers.
    CoordinatorFenced {
        current: i32,
        got: i32,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Append it.
    Accept,
    /// An exact retry of a batch already in the log at this base offset.
    Duplicate {
        base_offset: i64,
        timestamp: i64,
    },
    OutOfOrder {
        expected: i32,
        got: i32,
    },
    Fenced {
        current: i16,
        got: i16,
    },
    /// A plain batch from a producer with a transaction open in this partition.
    TxnOpen,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProducerState {
    producers: HashMap<i64, ProducerEntry>,
    /// `(first offset, producer id)` of every ongoing transaction (derived from `producers`).
    #[serde(skip)]
    ongoing: BTreeSet<(i64, i64)>,
}

#[derive(Serialize, Deserialize)]
struct Snapshot {
    version: u8,
    /// The state covers every batch below this offset.
    offset: i64,
    state: ProducerState,
}

fn next_seq(seq: i32) -> i32 {
    if seq == i32::MAX {
        0
    } else {
        seq + 1
    }
}

impl ProducerState {
    /// Decides what to do with an idempotent batch before it is appended.
    pub fn check(&self, h: &BatchHeader) -> SequenceCheck {
        let Some(entry) = self.producers.get(&h.producer_id) else {
            // Unknown producer (new, or its state expired with the log): any sequence starts it.
            return SequenceCheck::Accept;
        };
        if h.producer_epoch < entry.epoch {
            return SequenceCheck::Fenced {
                current: entry.epoch,
                got: h.producer_epoch,
            };
        }
        if entry.txn_first_offset.is_some() && !h.is_transactional() {
            return SequenceCheck::TxnOpen;
        }
        if h.producer_epoch > entry.epoch {
            return if h.base_sequence == 0 {
                SequenceCheck::Accept
            } else {
                SequenceCheck::OutOfOrder {
                    expected: 0,
                    got: h.base_sequence,
                }
            };
        }
        let last_seq = h.last_sequence();
        if let Some(b) = entry
            .batches
            .iter()
            .find(|b| b.first_seq == h.base_sequence && b.last_seq == last_seq)
        {
            return SequenceCheck::Duplicate {
                base_offset: b.base_offset,
                timestamp: b.timestamp,
            };
        }
        match entry.batches.back() {
            Some(last) if next_seq(last.last_seq) != h.base_sequence => SequenceCheck::OutOfOrder {
                expected: next_seq(last.last_seq),
                got: h.base_sequence,
            },
            _ => SequenceCheck::Accept,
        }
    }

    /// Records a data batch that is now in the log (at `h.base_offset`).
    pub fn record(&mut self, h: &BatchHeader, timestamp: i64) {
        if !h.is_idempotent() {
            return;
        }
        let entry = self
            .producers
            .entry(h.producer_id)
            .or_insert_with(|| ProducerEntry::new(h.producer_epoch));
        if h.producer_epoch != entry.epoch {
            entry.epoch = h.producer_epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == CACHED_BATCHES {
            entry.batches.pop_front();
        }
        entry.batches.push_back(BatchMeta {
            first_seq: h.base_sequence,
            last_seq: h.last_sequence(),
            base_offset: h.base_offset,
            timestamp,
        });
        if h.is_transactional() && entry.txn_first_offset.is_none() {
            entry.txn_first_offset = Some(h.base_offset);
            self.ongoing.insert((h.base_offset, h.producer_id));
        }
    }

    /// Whether a marker of `producer_id` at these epochs may be written.
    pub fn check_marker(
        &self,
        producer_id: i64,
        epoch: i16,
        coordinator_epoch: i32,
    ) -> MarkerCheck {
        let Some(entry) = self.producers.get(&producer_id) else {
            return MarkerCheck::Accept;
        };
        if epoch < entry.epoch {
            MarkerCheck::ProducerFenced {
                current: entry.epoch,
                got: epoch,
            }
        } else if coordinator_epoch < entry.coordinator_epoch {
            MarkerCheck::CoordinatorFenced {
                current: entry.coordinator_epoch,
                got: coordinator_epoch,
            }
        } else {
            MarkerCheck::Accept
        }
    }

    /// Records a marker now in the log (at `h.base_offset`): it ends the producer's ongoing
    /// transaction, if it has one here, and returns it. A marker of a newer producer epoch (the
    /// coordinator aborting after a bump) moves the producer to it.
    pub fn complete(
        &mut self,
        h: &BatchHeader,
        aborted: bool,
        coordinator_epoch: i32,
    ) -> Option<CompletedTxn> {
        let entry = self
            .producers
            .entry(h.producer_id)
            .or_insert_with(|| ProducerEntry::new(h.producer_epoch));
        if h.producer_epoch > entry.epoch {
            entry.epoch = h.producer_epoch;
            entry.batches.clear();
        }
        entry.coordinator_epoch = entry.coordinator_epoch.max(coordinator_epoch);
        let first_offset = entry.txn_first_offset.take()?;
        self.ongoing.remove(&(first_offset, h.producer_id));
        Some(CompletedTxn {
            producer_id: h.producer_id,
            first_offset,
            last_offset: h.base_offset,
            aborted,
        })
    }

    /// The first offset of the oldest ongoing transaction: nothing from there on is stable.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing.first().map(|(offset, _)| *offset)
    }

    /// Every producer, by id.
    pub fn views(&self) -> Vec<ProducerView> {
        let mut out: Vec<ProducerView> = (self.producers.iter())
            .map(|(id, e)| ProducerView {
                producer_id: *id,
                epoch: e.epoch,
                last_sequence: e.batches.back().map_or(-1, |b| b.last_seq),
                last_timestamp: e.batches.back().map_or(-1, |b| b.timestamp),
                coordinator_epoch: e.coordinator_epoch,
                txn_first_offset: e.txn_first_offset,
            })
            .collect();
        out.sort_by_key(|v| v.producer_id);
        out
    }

    /// The epoch of `producer_id`'s ongoing transaction here, if it has one.
    pub fn ongoing_txn_epoch(&self, producer_id: i64) -> Option<i16> {
        let entry = self.producers.get(&producer_id)?;
        entry.txn_first_offset.map(|_| entry.epoch)
    }

    fn index_ongoing(&mut self) {
        self.ongoing = self
            .producers
            .iter()
            .filter_map(|(id, e)| e.txn_first_offset.map(|first| (first, *id)))
            .collect();
    }

    /// The state as it was before `offset`, for the producers whose cached batches reach below
    /// it: each keeps only its batches below `offset`, and its transaction if that started
    /// below. A producer all of whose cached batches are at or past `offset` is left out —
    /// whoever starts a log at `offset` replays those batches and learns it from them, which is
    /// why this is exact for duplicate detection. A transaction that a marker at or past
    /// `offset` already ended is left out too; the replay from `offset` learns of it at its
    /// first batch there.
    pub fn before(&self, offset: i64) -> ProducerState {
        let producers = self
            .producers
            .iter()
            .filter_map(|(id, e)| {
                let batches: VecDeque<BatchMeta> = e
                    .batches
                    .iter()
                    .copied()
                    .filter(|b| b.base_offset < offset)
                    .collect();
                let txn_first_offset = e.txn_first_offset.filter(|first| *first < offset);
                (!batches.is_empty() || txn_first_offset.is_some()).then_some((
                    *id,
                    ProducerEntry {
                        epoch: e.epoch,
                        batches,
                        txn_first_offset,
                        coordinator_epoch: e.coordinator_epoch,
                    },
                ))
            })
            .collect();
        let mut state = ProducerState {
            producers,
            ongoing: BTreeSet::new(),
        };
        state.index_ongoing();
        state
    }

    /// Every producer and its entry, in no particular order.
    pub fn entries(&self) -> impl Iterator<Item = (i64, &ProducerEntry)> {
        self.producers.iter().map(|(id, e)| (*id, e))
    }

    /// A state made of these entries (at most [`CACHED_BATCHES`] batches each are kept).
    pub fn from_entries(entries: impl IntoIterator<Item = (i64, ProducerEntry)>) -> ProducerState {
        let producers = entries
            .into_iter()
            .map(|(id, mut e)| {
                while e.batches.len() > CACHED_BATCHES {
                    e.batches.pop_front();
                }
                (id, e)
            })
            .collect();
        let mut state = ProducerState {
            producers,
            ongoing: BTreeSet::new(),
        };
        state.index_ongoing();
        state
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    pub fn save(&self, path: &Path, offset: i64, durability: Durability) -> std::io::Result<()> {
        let snap = Snapshot {
            version: 1,
            offset,
            state: self.clone(),
        };
        let data = serde_json::to_vec(&snap).map_err(std::io::Error::other)?;
        durability.write(path, &data)
    }

    /// The snapshot and the offset it covers up to, or `None` if missing or unreadable.
    pub fn load(path: &Path) -> Option<(ProducerState, i64)> {
        let data = std::fs::read(path).ok()?;
        let mut snap: Snapshot = serde_json::from_slice(&data).ok()?;
        snap.state.index_ongoing();
        (snap.version == 1).then_some((snap.state, snap.offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(pid: i64, epoch: i16, seq: i32, count: i32, base: i64) -> BatchHeader {
        BatchHeader {
            base_offset: base,
            batch_length: 0,
            leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            record_count: count,
        }
    }

    #[test]
    fn contiguous_sequences_are_accepted_and_retries_are_duplicates() {
        let mut s = ProducerState::default();
        let a = header(7, 0, 0, 3, 0);
        assert_eq!(s.check(&a), SequenceCheck::Accept);
        s.record(&a, 1);
        let b = header(7, 0, 3, 2, 3);
        assert_eq!(s.check(&b), SequenceCheck::Accept);
        s.record(&b, 2);
        assert_eq!(
            s.check(&header(7, 0, 0, 3, 99)),
            SequenceCheck::Duplicate {
                base_offset: 0,
                timestamp: 1
            }
        );
        assert_eq!(
            s.check(&header(7, 0, 9, 1, 99)),
            SequenceCheck::OutOfOrder {
                expected: 5,
                got: 9
            }
        );
    }

    #[test]
    fn an_older_epoch_is_fenced_and_a_newer_one_restarts_at_zero() {
        let mut s = ProducerState::default();
        s.record(&header(1, 3, 0, 1, 0), 0);
        assert!(matches!(
            s.check(&header(1, 2, 1, 1, 1)),
            SequenceCheck::Fenced { .. }
        ));
        assert!(matches!(
            s.check(&header(1, 4, 5, 1, 1)),
            SequenceCheck::OutOfOrder { .. }
        ));
        assert_eq!(s.check(&header(1, 4, 0, 1, 1)), SequenceCheck::Accept);
    }

    #[test]
    fn sequences_wrap_after_i32_max() {
        let mut s = ProducerState::default();
        s.record(&header(1, 0, i32::MAX - 1, 2, 0), 0);
        assert_eq!(s.check(&header(1, 0, 0, 1, 2)), SequenceCheck::Accept);
    }

    #[test]
    fn snapshots_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("producer-state.json");
        let mut s = ProducerState::default();
        s.record(&header(1, 0, 0, 1, 0), 5);
        s.save(&p, 10, Durability::Synced).unwrap();
        let (back, off) = ProducerState::load(&p).unwrap();
        assert_eq!(off, 10);
        assert_eq!(back, s);
    }

    #[test]
    fn the_state_before_an_offset_keeps_only_older_batches_and_their_producers() {
        let mut s = ProducerState::default();
        s.record(&header(1, 0, 0, 2, 0), 1);
        s.record(&header(2, 0, 0, 2, 2), 1);
        s.record(&header(1, 0, 2, 2, 4), 1);
        s.record(&header(3, 0, 0, 2, 6), 1);
        let before = s.before(4);
        assert_eq!(before.len(), 2, "producer 3 starts at 6");
        let one: Vec<i64> = before
            .entries()
            .find(|(id, _)| *id == 1)
            .unwrap()
            .1
            .batches
            .iter()
            .map(|b| b.base_offset)
            .collect();
        assert_eq!(one, vec![0]);
        // A retry of producer 1's first batch is a duplicate there; its next batch is new.
        assert_eq!(
            before.check(&header(1, 0, 0, 2, 99)),
            SequenceCheck::Duplicate {
                base_offset: 0,
                timestamp: 1
            }
        );
        assert_eq!(before.check(&header(1, 0, 2, 2, 99)), SequenceCheck::Accept);
        let rebuilt = ProducerState::from_entries(before.entries().map(|(id, e)| (id, e.clone())));
        assert_eq!(rebuilt, before);
        assert!(s.before(0).is_empty());
    }
}
