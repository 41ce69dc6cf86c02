//! The index object uploaded beside each remote segment, and the walk that builds it.
//!
//! A remote read cannot afford to scan a segment from its start, and cannot trust the local
//! `.index`/`.timeindex` files (they may be gone, or rebuilt differently on another replica),
//! so the offloader derives its own index from the batches it uploads:
//!
//! ```text
//! magic "STRIDX03" | base_offset i64 | last_offset i64 | max_timestamp i64
//! | offset_of_max_timestamp i64 | log_size u64 | entries u32
//! | entries × (relative_offset u32, position u32, max_timestamp_before i64)
//! | aborted u32 | aborted × (producer_id i64, first_offset i64, last_offset i64,
//! |                           last_stable_offset i64)
//! | producers u32 | producers × (producer_id i64, epoch i16, coordinator_epoch i32,
//! |                               txn_first_offset i64 (-1: none), batches u8,
//! |                               batches × (first_seq i32, last_seq i32, base_offset i64,
//! |                                          timestamp i64))
//! | crc32c u32 of everything before it
//! ```
//! big-endian. An entry is written for the first batch and then every [`INTERVAL`] bytes;
//! `max_timestamp_before` is the largest timestamp of all batches before its position, so a
//! search for timestamp `ts` may start at the last entry whose value is below `ts`.
//!
//! The aborted section lists every aborted transaction that overlaps the segment, whether its
//! marker is in it or in a later segment (a segment is offloaded only once it is below the
//! last stable offset, so all of them are known by then): a read_committed replay from the
//! remote tier lists the aborted transactions among what it returns from this one object.
//! (Kafka uploads each segment's `.txnindex` and searches later segments' too.) The producer section is the
//! producer state as of the segment's end, ongoing transactions included (Kafka uploads a
//! producer snapshot with each segment for the same reason): a replica that joins the
//! partition at that offset, copying only the tail, takes it so duplicate detection works for
//! retries of batches it never copied, and its last stable offset waits for transactions
//! that started below. Older objects are still read: `STRIDX02` has no aborted section and
//! no transaction fields, `STRIDX01` no producer section either; their segments were
//! uploaded before Strata wrote transactions.
//!
//! Invariants: entries are strictly increasing in offset and position and point at batch
//! starts; an index whose CRC does not check is never used (the read fails instead); counts
//! in an object are checked against its length before anything is read or allocated.

use std::collections::VecDeque;

use bytes::{BufMut, Bytes, BytesMut};

use crate::log::batch::{self, BatchHeader};
use crate::log::producer_state::{BatchMeta, ProducerEntry, ProducerState};
use crate::log::txn_index::AbortedTxn;

const MAGIC: &[u8; 8] = b"STRIDX03";
/// Without the aborted section and the producers' transaction fields.
const MAGIC_V2: &[u8; 8] = b"STRIDX02";
/// The first format, without the producer section.
const MAGIC_V1: &[u8; 8] = b"STRIDX01";
/// A producer's fixed part (id, epoch, coordinator epoch, transaction start, batch count) and
/// one batch of it; `STRIDX02` lacks the two transaction fields.
const PRODUCER: usize = 8 + 2 + 4 + 8 + 1;
const PRODUCER_V2: usize = 8 + 2 + 1;
const PRODUCER_BATCH: usize = 4 + 4 + 8 + 8;
const ABORTED: usize = 8 * 4;
const HEADER: usize = 8 + 8 * 5 + 4;
const ENTRY: usize = 16;
/// Bytes of log between index entries: a lookup reads at most this much before its batch,
/// within the one or two cache blocks it fetches anyway.
pub const INTERVAL: u64 = 64 * 1024;

/// What the offloader learns by walking a closed segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub offset_of_max_timestamp: i64,
    pub size: u64,
    /// CRC-32C of the whole log object.
    pub crc32c: u32,
    /// The encoded index object.
    pub index: Bytes,
}

/// Walks every batch of a closed segment, checking each one's CRC, and builds its index with
/// `aborted` (its aborted-transaction index) and `producers` (the producer state as of the
/// segment's end). A segment that does not parse or check is refused: it must not reach the
/// object store.
pub fn summarize(
    log: &[u8],
    base_offset: i64,
    aborted: &[AbortedTxn],
    producers: &ProducerState,
) -> Result<Summary, String> {
    let mut entries = BytesMut::new();
    let mut count = 0u32;
    let mut pos = 0usize;
    let mut last_entry: Option<u64> = None;
    let mut max_ts = -1i64;
    let mut offset_of_max = base_offset;
    let mut last_offset = base_offset - 1;
    let mut crc = 0u32;
    while pos < log.len() {
        let header =
            BatchHeader::parse(&log[pos..]).map_err(|e| format!("batch at position {pos}: {e}"))?;
        let end = pos + header.total_len();
        if end > log.len() {
            return Err(format!("batch at position {pos} runs past the segment end"));
        }
        let header =
            batch::validate(&log[pos..end]).map_err(|e| format!("batch at position {pos}: {e}"))?;
        if header.base_offset <= last_offset || header.base_offset < base_offset {
            return Err(format!(
                "batch at position {pos} starts at offset {}, after {last_offset}",
                header.base_offset
            ));
        }
        let relative = u32::try_from(header.base_offset - base_offset)
            .map_err(|_| format!("offset {} too far from the base", header.base_offset))?;
        if last_entry.is_none_or(|l| pos as u64 >= l + INTERVAL) {
            entries.put_u32(relative);
            entries.put_u32(pos as u32);
            entries.put_i64(max_ts);
            count += 1;
            last_entry = Some(pos as u64);
        }
        if header.max_timestamp > max_ts {
            max_ts = header.max_timestamp;
            offset_of_max = header.last_offset();
        }
        last_offset = header.last_offset();
        crc = crc32c::crc32c_append(crc, &log[pos..end]);
        pos = end;
    }
    if count == 0 {
        return Err("the segment is empty".into());
    }
    let mut out = BytesMut::with_capacity(HEADER + entries.len() + 4);
    out.put_slice(MAGIC);
    out.put_i64(base_offset);
    out.put_i64(last_offset);
    out.put_i64(max_ts);
    out.put_i64(offset_of_max);
    out.put_u64(log.len() as u64);
    out.put_u32(count);
    out.put_slice(&entries);
    out.put_u32(aborted.len() as u32);
    for a in aborted {
        out.put_i64(a.producer_id);
        out.put_i64(a.first_offset);
        out.put_i64(a.last_offset);
        out.put_i64(a.last_stable_offset);
    }
    put_producers(&mut out, producers);
    let index_crc = crc32c::crc32c(&out);
    out.put_u32(index_crc);
    Ok(Summary {
        base_offset,
        last_offset,
        max_timestamp: max_ts,
        offset_of_max_timestamp: offset_of_max,
        size: log.len() as u64,
        crc32c: crc,
        index: out.freeze(),
    })
}

fn put_producers(out: &mut BytesMut, producers: &ProducerState) {
    let mut entries: Vec<(i64, &ProducerEntry)> = producers.entries().collect();
    entries.sort_by_key(|(id, _)| *id);
    out.put_u32(entries.len() as u32);
    for (id, e) in entries {
        out.put_i64(id);
        out.put_i16(e.epoch);
        out.put_i32(e.coordinator_epoch);
        out.put_i64(e.txn_first_offset.unwrap_or(-1));
        out.put_u8(e.batches.len() as u8);
        for b in &e.batches {
            out.put_i32(b.first_seq);
            out.put_i32(b.last_seq);
            out.put_i64(b.base_offset);
            out.put_i64(b.timestamp);
        }
    }
}

/// Which layout an object has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
    V3,
}

/// A checked index object.
#[derive(Debug, Clone)]
pub struct RemoteIndex {
    bytes: Bytes,
    count: usize,
    version: Version,
    /// The aborted section's entries (empty before `STRIDX03`).
    aborted: Vec<AbortedTxn>,
    /// Where the producer section begins and ends (`None`: a `STRIDX01` object).
    producers: Option<(usize, usize)>,
    pub base_offset: i64,
    pub last_offset: i64,
    pub offset_of_max_timestamp: i64,
    pub log_size: u64,
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().expect("4 bytes"))
}
fn be_i64(b: &[u8]) -> i64 {
    i64::from_be_bytes(b[..8].try_into().expect("8 bytes"))
}

impl RemoteIndex {
    /// Parses and checks an index object against the segment it should describe.
    pub fn parse(bytes: Bytes, base_offset: i64, log_size: u64) -> Result<RemoteIndex, String> {
        if bytes.len() < HEADER + 4 {
            return Err("not a Strata remote index".into());
        }
        let version = match &bytes[..8] {
            m if m == MAGIC => Version::V3,
            m if m == MAGIC_V2 => Version::V2,
            m if m == MAGIC_V1 => Version::V1,
            _ => return Err("not a Strata remote index".into()),
        };
        let body = bytes.len() - 4;
        if crc32c::crc32c(&bytes[..body]) != be_u32(&bytes[body..]) {
            return Err("remote index CRC mismatch".into());
        }
        let count = be_u32(&bytes[HEADER - 4..]) as usize;
        let cannot_hold = || {
            format!(
                "remote index of {} bytes cannot hold {count} entries",
                bytes.len()
            )
        };
        let entries_end = count
            .checked_mul(ENTRY)
            .and_then(|n| n.checked_add(HEADER))
            .filter(|end| *end <= body)
            .ok_or_else(cannot_hold)?;
        if count == 0 {
            return Err(cannot_hold());
        }
        let mut aborted = Vec::new();
        let producers_start = match version {
            Version::V1 if entries_end == body => None,
            Version::V1 => return Err(cannot_hold()),
            Version::V2 => Some(entries_end),
            Version::V3 => {
                if entries_end + 4 > body {
                    return Err(cannot_hold());
                }
                let n = be_u32(&bytes[entries_end..]) as usize;
                let start = entries_end + 4;
                let end = n
                    .checked_mul(ABORTED)
                    .and_then(|len| len.checked_add(start))
                    .filter(|end| *end <= body)
                    .ok_or_else(|| format!("{n} aborted transactions run past the index"))?;
                for e in bytes[start..end].chunks_exact(ABORTED) {
                    aborted.push(AbortedTxn {
                        producer_id: be_i64(e),
                        first_offset: be_i64(&e[8..]),
                        last_offset: be_i64(&e[16..]),
                        last_stable_offset: be_i64(&e[24..]),
                    });
                }
                Some(end)
            }
        };
        let producers = match producers_start {
            Some(start) if start + 4 <= body => Some((start, body)),
            Some(_) => return Err(cannot_hold()),
            None => None,
        };
        let index = RemoteIndex {
            base_offset: be_i64(&bytes[8..]),
            last_offset: be_i64(&bytes[16..]),
            offset_of_max_timestamp: be_i64(&bytes[32..]),
            log_size: be_i64(&bytes[40..]) as u64,
            bytes,
            count,
            version,
            aborted,
            producers,
        };
        if index.base_offset != base_offset || index.log_size != log_size {
            return Err(format!(
                "remote index describes segment {} of {} bytes, expected {base_offset} of {log_size}",
                index.base_offset, index.log_size
            ));
        }
        Ok(index)
    }

    /// The aborted transactions whose markers are in the segment.
    pub fn aborted(&self) -> &[AbortedTxn] {
        &self.aborted
    }

    /// The producer state as of the segment's end; `Ok(None)` for an object written before
    /// the index carried it. Every count is checked against the bytes that hold it.
    pub fn producers(&self) -> Result<Option<ProducerState>, String> {
        let Some((start, end)) = self.producers else {
            return Ok(None);
        };
        let b = &self.bytes[start..end];
        let n = be_u32(b) as usize;
        let mut pos = 4;
        let mut entries = Vec::new();
        let fixed = match self.version {
            Version::V3 => PRODUCER,
            _ => PRODUCER_V2,
        };
        for _ in 0..n {
            if pos + fixed > b.len() {
                return Err(format!(
                    "producer section ends inside producer {}",
                    entries.len()
                ));
            }
            let id = be_i64(&b[pos..]);
            let epoch = i16::from_be_bytes([b[pos + 8], b[pos + 9]]);
            let (coordinator_epoch, txn_first_offset) = match self.version {
                Version::V3 => (
                    be_u32(&b[pos + 10..]) as i32,
                    Some(be_i64(&b[pos + 14..])).filter(|first| *first >= 0),
                ),
                _ => (-1, None),
            };
            let batches = b[pos + fixed - 1] as usize;
            pos += fixed;
            if pos + batches * PRODUCER_BATCH > b.len() {
                return Err(format!(
                    "producer {id}'s {batches} batches run past the section"
                ));
            }
            let mut list = VecDeque::new();
            for _ in 0..batches {
                list.push_back(BatchMeta {
                    first_seq: be_u32(&b[pos..]) as i32,
                    last_seq: be_u32(&b[pos + 4..]) as i32,
                    base_offset: be_i64(&b[pos + 8..]),
                    timestamp: be_i64(&b[pos + 16..]),
                });
                pos += PRODUCER_BATCH;
            }
            entries.push((
                id,
                ProducerEntry {
                    epoch,
                    batches: list,
                    txn_first_offset,
                    coordinator_epoch,
                },
            ));
        }
        if pos != b.len() {
            return Err(format!(
                "{} bytes after the producer section",
                b.len() - pos
            ));
        }
        Ok(Some(ProducerState::from_entries(entries)))
    }

    fn entry(&self, i: usize) -> (i64, u64, i64) {
        let e = &self.bytes[HEADER + i * ENTRY..];
        (
            self.base_offset + be_u32(e) as i64,
            be_u32(&e[4..]) as u64,
            be_i64(&e[8..]),
        )
    }

    /// Position from which a scan finds the batch holding `offset`.
    pub fn position_for_offset(&self, offset: i64) -> u64 {
        let i = partition_point(self.count, |i| self.entry(i).0 <= offset);
        i.checked_sub(1).map(|i| self.entry(i).1).unwrap_or(0)
    }

    /// Position from which a scan finds the first batch with a timestamp ≥ `ts`.
    pub fn position_for_timestamp(&self, ts: i64) -> u64 {
        let i = partition_point(self.count, |i| self.entry(i).2 < ts);
        i.checked_sub(1).map(|i| self.entry(i).1).unwrap_or(0)
    }
}

fn partition_point(len: usize, pred: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, len);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if pred(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::testing::batch;

    /// A segment of `n` batches of 5 records each, with assigned offsets from `base`.
    fn segment(base: i64, n: usize, pad: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..n {
            let b = batch(5 + pad as i32, 1000 + i as i64 * 10);
            let mut b = b.to_vec();
            let offset = base + (i * (5 + pad)) as i64;
            let prefix = batch::assigned_prefix(&b, offset, 0);
            b[..prefix.len()].copy_from_slice(&prefix);
            out.extend_from_slice(&b);
        }
        out
    }

    #[test]
    fn an_index_finds_every_batch_by_offset_and_timestamp() {
        let log = segment(100, 3000, 0);
        let s = summarize(&log, 100, &[], &ProducerState::default()).unwrap();
        assert_eq!(s.last_offset, 100 + 3000 * 5 - 1);
        assert_eq!(s.crc32c, crc32c::crc32c(&log));
        assert_eq!(s.max_timestamp, 1000 + 2999 * 10 + 4);
        let idx = RemoteIndex::parse(s.index.clone(), 100, log.len() as u64).unwrap();
        assert!(idx.count > 2, "entries every {INTERVAL} bytes");
        for offset in [100, 101, 104, 105, 7000, s.last_offset] {
            let pos = idx.position_for_offset(offset) as usize;
            let h = BatchHeader::parse(&log[pos..]).unwrap();
            assert!(h.base_offset <= offset, "{offset}");
            assert!(
                offset - h.base_offset < 5 * 1000,
                "starts within an interval"
            );
        }
        for ts in [0, 1000, 1500, 20_000, 30_990] {
            let pos = idx.position_for_timestamp(ts) as usize;
            // Every batch before the position is older than ts.
            let mut p = 0;
            while p < pos {
                let h = BatchHeader::parse(&log[p..]).unwrap();
                assert!(h.max_timestamp < ts, "ts {ts}");
                p += h.total_len();
            }
        }
    }

    #[test]
    fn damaged_segments_and_indexes_are_refused() {
        let mut log = segment(0, 10, 0);
        let s = summarize(&log, 0, &[], &ProducerState::default()).unwrap();
        let mut bad = s.index.to_vec();
        bad[HEADER + 2] ^= 1;
        assert!(RemoteIndex::parse(Bytes::from(bad), 0, log.len() as u64)
            .unwrap_err()
            .contains("CRC"));
        assert!(RemoteIndex::parse(s.index.clone(), 5, log.len() as u64).is_err());
        assert!(RemoteIndex::parse(s.index.slice(..20), 0, log.len() as u64).is_err());
        let n = log.len();
        log[n - 3] ^= 0xff;
        assert!(summarize(&log, 0, &[], &ProducerState::default())
            .unwrap_err()
            .contains("CRC"));
        assert!(
            summarize(&log[..n - 3], 0, &[], &ProducerState::default()).is_err(),
            "truncated"
        );
        assert!(summarize(&[], 0, &[], &ProducerState::default()).is_err());
    }

    #[test]
    fn the_producer_state_round_trips_and_a_damaged_section_is_an_error() {
        let log = segment(0, 10, 0);
        let mut state = ProducerState::default();
        let mut h = BatchHeader::parse(&batch(3, 5)).unwrap();
        h.producer_id = 77;
        h.producer_epoch = 2;
        h.base_sequence = 10;
        h.base_offset = 40;
        state.record(&h, 123);
        let s = summarize(&log, 0, &[], &state).unwrap();
        let idx = RemoteIndex::parse(s.index.clone(), 0, log.len() as u64).unwrap();
        assert_eq!(idx.producers().unwrap(), Some(state.clone()));
        // Same lookups as without the section.
        assert_eq!(idx.position_for_offset(0), 0);

        // A version-1 object (no sections) still reads, with no producer state.
        let plain = summarize(&log, 0, &[], &ProducerState::default())
            .unwrap()
            .index;
        let mut v1 = plain[..plain.len() - 12].to_vec();
        v1[..8].copy_from_slice(MAGIC_V1);
        let crc = crc32c::crc32c(&v1);
        v1.extend_from_slice(&crc.to_be_bytes());
        let idx = RemoteIndex::parse(Bytes::from(v1), 0, log.len() as u64).unwrap();
        assert_eq!(idx.producers().unwrap(), None);

        // A producer count larger than the section: an error, not an allocation.
        let mut bad = s.index.to_vec();
        let section = HEADER + idx.count * ENTRY + 4;
        bad[section..section + 4].copy_from_slice(&u32::MAX.to_be_bytes());
        let n = bad.len();
        let crc = crc32c::crc32c(&bad[..n - 4]);
        bad[n - 4..].copy_from_slice(&crc.to_be_bytes());
        let idx = RemoteIndex::parse(Bytes::from(bad), 0, log.len() as u64).unwrap();
        assert!(idx.producers().is_err());
    }

    #[test]
    fn aborted_transactions_and_ongoing_ones_round_trip_and_older_layouts_still_read() {
        let log = segment(0, 10, 0);
        let mut state = ProducerState::default();
        let mut h =
            BatchHeader::parse(&crate::log::batch::testing::transactional(2, 5, 9, 1, 0)).unwrap();
        h.base_offset = 30;
        state.record(&h, 5);
        assert_eq!(state.first_unstable_offset(), Some(30));
        let aborted = [
            AbortedTxn {
                producer_id: 4,
                first_offset: 2,
                last_offset: 12,
                last_stable_offset: 13,
            },
            AbortedTxn {
                producer_id: 5,
                first_offset: 20,
                last_offset: 40,
                last_stable_offset: 30,
            },
        ];
        let s = summarize(&log, 0, &aborted, &state).unwrap();
        let idx = RemoteIndex::parse(s.index.clone(), 0, log.len() as u64).unwrap();
        assert_eq!(idx.aborted(), &aborted);
        let back = idx.producers().unwrap().unwrap();
        assert_eq!(back, state);
        assert_eq!(back.first_unstable_offset(), Some(30));

        // An aborted count larger than the object: refused before anything is allocated.
        let mut bad = s.index.to_vec();
        let section = HEADER + idx.count * ENTRY;
        bad[section..section + 4].copy_from_slice(&u32::MAX.to_be_bytes());
        let n = bad.len();
        let crc = crc32c::crc32c(&bad[..n - 4]);
        bad[n - 4..].copy_from_slice(&crc.to_be_bytes());
        assert!(RemoteIndex::parse(Bytes::from(bad), 0, log.len() as u64).is_err());

        // A version-2 object: no aborted section, producers without transaction fields.
        let mut plain = ProducerState::default();
        let mut h = BatchHeader::parse(&batch(3, 5)).unwrap();
        h.producer_id = 77;
        h.producer_epoch = 2;
        h.base_sequence = 10;
        plain.record(&h, 1);
        let mut v2 = MAGIC_V2.to_vec();
        v2.extend_from_slice(&s.index[8..section]);
        v2.extend_from_slice(&1u32.to_be_bytes());
        v2.extend_from_slice(&77i64.to_be_bytes());
        v2.extend_from_slice(&2i16.to_be_bytes());
        v2.push(1);
        for v in [10i32, 12] {
            v2.extend_from_slice(&v.to_be_bytes());
        }
        for v in [0i64, 1] {
            v2.extend_from_slice(&v.to_be_bytes());
        }
        let crc = crc32c::crc32c(&v2);
        v2.extend_from_slice(&crc.to_be_bytes());
        let idx = RemoteIndex::parse(Bytes::from(v2), 0, log.len() as u64).unwrap();
        assert!(idx.aborted().is_empty());
        assert_eq!(idx.producers().unwrap(), Some(plain));
    }
}
