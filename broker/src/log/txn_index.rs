//! The aborted-transaction index of a segment: `<base_offset:020>.txnindex`.
//!
//! One entry per abort marker in the segment, in log order, in Kafka's layout (34 bytes:
//! version 0 as i16, producer id, first offset, last offset — the marker's — and the last
//! stable offset right after the abort, each an i64), so the file is what a Kafka tool
//! expects. A read_committed fetch gives its client the aborted transactions that overlap the
//! range it returns ([`collect`]); the client drops their records.
//!
//! Invariants:
//! - an entry lives in the index of the segment holding its marker; entries of one log are
//!   in marker order across its segments;
//! - each entry's last stable offset is the first unstable offset right after its marker (or
//!   the marker's next offset when nothing was open): every transaction that started before
//!   it had ended by then, so a search for transactions overlapping `[from, to)` may stop at
//!   the first entry whose last stable offset reaches `to`;
//! - like the offset index, the file is written when the segment is sealed and at a clean
//!   close, and rebuilt from the log (markers and producer state) when it cannot be trusted.
//!   A segment without aborts has no file.

use std::collections::{HashSet, VecDeque};
use std::path::Path;

use super::batch::BatchHeader;
use super::index::Durability;

const ENTRY: usize = 34;
const VERSION: i16 = 0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
    pub last_stable_offset: i64,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TxnIndex {
    entries: Vec<AbortedTxn>,
}

impl TxnIndex {
    pub fn push(&mut self, e: AbortedTxn) {
        debug_assert!(
            self.entries
                .last()
                .is_none_or(|l| l.last_offset < e.last_offset),
            "aborted transactions out of marker order: {e:?} after {:?}",
            self.entries.last()
        );
        self.entries.push(e);
    }

    pub fn entries(&self) -> &[AbortedTxn] {
        &self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Drops the entries whose marker is at or after `offset` (a replay from there adds them
    /// again; a truncation removed them).
    pub fn truncate_from(&mut self, offset: i64) {
        self.entries.retain(|e| e.last_offset < offset);
    }

    pub fn write_to(&self, path: &Path, durability: Durability) -> std::io::Result<()> {
        if self.entries.is_empty() {
            return match std::fs::remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            };
        }
        let mut buf = Vec::with_capacity(self.entries.len() * ENTRY);
        for e in &self.entries {
            buf.extend_from_slice(&VERSION.to_be_bytes());
            for v in [
                e.producer_id,
                e.first_offset,
                e.last_offset,
                e.last_stable_offset,
            ] {
                buf.extend_from_slice(&v.to_be_bytes());
            }
        }
        durability.write(path, &buf)
    }

    /// The index in `path` (empty when there is no file); `None` when the file is malformed
    /// and the caller must rebuild it.
    pub fn read_from(path: &Path) -> Option<TxnIndex> {
        let data = match std::fs::read(path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(TxnIndex::default()),
            Err(_) => return None,
        };
        if data.len() % ENTRY != 0 {
            return None;
        }
        let mut index = TxnIndex::default();
        for c in data.chunks_exact(ENTRY) {
            if i16::from_be_bytes([c[0], c[1]]) != VERSION {
                return None;
            }
            let at = |i: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&c[2 + i * 8..10 + i * 8]);
                i64::from_be_bytes(b)
            };
            let e = AbortedTxn {
                producer_id: at(0),
                first_offset: at(1),
                last_offset: at(2),
                last_stable_offset: at(3),
            };
            if e.first_offset > e.last_offset
                || index
                    .entries
                    .last()
                    .is_some_and(|l| l.last_offset >= e.last_offset)
            {
                return None;
            }
            index.entries.push(e);
        }
        Some(index)
    }
}

/// The aborted transactions, from indexes in log order starting with the segment that holds
/// `from`, that overlap `[from, to)`.
pub fn collect<'a>(
    indexes: impl IntoIterator<Item = &'a TxnIndex>,
    from: i64,
    to: i64,
) -> Vec<AbortedTxn> {
    let mut out = Vec::new();
    for index in indexes {
        for e in &index.entries {
            if overlaps(e, from, to) {
                out.push(*e);
            }
            if e.last_stable_offset >= to {
                return out;
            }
        }
    }
    out
}

/// Whether the aborted transaction `e` overlaps `[from, to)`.
pub fn overlaps(e: &AbortedTxn, from: i64, to: i64) -> bool {
    e.last_offset >= from && e.first_offset < to
}

/// Tells which batches of a log belong to aborted transactions, walking its batches in
/// order, as a read_committed client does with the list a fetch gives it: from an aborted
/// transaction's first offset on, its producer's transactional batches are aborted until
/// that producer's next control batch (the abort marker).
pub struct AbortedFilter {
    /// Not yet reached, by first offset.
    pending: VecDeque<AbortedTxn>,
    /// Producers inside an aborted transaction.
    inside: HashSet<i64>,
}

impl AbortedFilter {
    pub fn new(mut aborted: Vec<AbortedTxn>) -> AbortedFilter {
        aborted.sort_by_key(|a| a.first_offset);
        AbortedFilter {
            pending: aborted.into(),
            inside: HashSet::new(),
        }
    }

    /// Whether the batch `h` (the next one in log order) was aborted.
    pub fn is_aborted(&mut self, h: &BatchHeader) -> bool {
        while self
            .pending
            .front()
            .is_some_and(|a| a.first_offset <= h.last_offset())
        {
            let a = self.pending.pop_front().expect("checked");
            self.inside.insert(a.producer_id);
        }
        if h.is_control() {
            self.inside.remove(&h.producer_id);
            return false;
        }
        h.is_transactional() && self.inside.contains(&h.producer_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(pid: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: lso,
        }
    }

    #[test]
    fn files_round_trip_and_an_empty_index_has_none() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("0.txnindex");
        let mut i = TxnIndex::default();
        i.push(e(1, 0, 5, 6));
        i.push(e(2, 3, 9, 10));
        i.write_to(&p, Durability::Synced).unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 68);
        assert_eq!(TxnIndex::read_from(&p), Some(i));
        TxnIndex::default()
            .write_to(&p, Durability::Synced)
            .unwrap();
        assert!(!p.exists());
        assert_eq!(TxnIndex::read_from(&p), Some(TxnIndex::default()));
    }

    #[test]
    fn a_torn_or_disordered_file_is_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("0.txnindex");
        std::fs::write(&p, [0u8; 35]).unwrap();
        assert_eq!(TxnIndex::read_from(&p), None);
        let mut i = TxnIndex::default();
        i.push(e(1, 0, 5, 6));
        i.write_to(&p, Durability::Synced).unwrap();
        let mut data = std::fs::read(&p).unwrap();
        data.extend_from_within(..);
        std::fs::write(&p, data).unwrap();
        assert_eq!(TxnIndex::read_from(&p), None, "markers must increase");
    }

    #[test]
    fn collect_returns_overlapping_aborts_and_stops_once_all_before_the_end_ended() {
        let mut a = TxnIndex::default();
        a.push(e(1, 0, 4, 2)); // producer 2's transaction from 2 was still open
        a.push(e(3, 5, 8, 2));
        let mut b = TxnIndex::default();
        b.push(e(2, 2, 20, 21));
        b.push(e(4, 30, 40, 41));
        // [5, 10): producer 1 ended before; 3 overlaps; 2 started at 2 and ended at 20.
        let got = collect([&a, &b], 5, 10);
        assert_eq!(got, vec![e(3, 5, 8, 2), e(2, 2, 20, 21)]);
        // Everything that overlaps [0, 3) had ended by the marker at 20: 30 is not reached.
        let got = collect([&a, &b], 0, 3);
        assert_eq!(got, vec![e(1, 0, 4, 2), e(2, 2, 20, 21)]);
    }
}
