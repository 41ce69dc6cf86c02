//! Idempotent-producer state of one partition: per producer id, its epoch and the last five
//! batches' sequence ranges and offsets.
//!
//! Invariants:
//! - an epoch only moves forward; a batch from an older epoch is fenced;
//! - within an epoch, sequences are contiguous: a batch is accepted only if its first sequence
//!   follows the last accepted one (or it is an exact retry of one of the cached batches, which
//!   is answered with the original offset and not appended again);
//! - the state is a function of the log: it is snapshotted with the log and rebuilt on restart by
//!   replaying batch headers after the snapshot's offset.

use std::collections::{HashMap, VecDeque};
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
}

#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProducerState {
    producers: HashMap<i64, ProducerEntry>,
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

    /// Records a batch that is now in the log (at `h.base_offset`).
    pub fn record(&mut self, h: &BatchHeader, timestamp: i64) {
        if !h.is_idempotent() {
            return;
        }
        let entry = self
            .producers
            .entry(h.producer_id)
            .or_insert_with(|| ProducerEntry {
                epoch: h.producer_epoch,
                batches: VecDeque::new(),
            });
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
    }

    /// The state as it was before `offset`, for the producers whose cached batches reach below
    /// it: each keeps only its batches below `offset`. A producer all of whose cached batches
    /// are at or past `offset` is left out — whoever starts a log at `offset` replays those
    /// batches and learns it from them, which is why this is exact for duplicate detection.
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
                (!batches.is_empty()).then_some((
                    *id,
                    ProducerEntry {
                        epoch: e.epoch,
                        batches,
                    },
                ))
            })
            .collect();
        ProducerState { producers }
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
        ProducerState { producers }
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
        let snap: Snapshot = serde_json::from_slice(&data).ok()?;
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
