//! Record-level compaction: the key → latest-offset map of a dirty section, and the rewrite of
//! one batch keeping only the records a predicate accepts (the records are walked by
//! [`super::records`]).
//!
//! Invariants (docs/invariants.md 1, compacted topics):
//! - offsets never change: a kept record keeps its offset delta, and a rewritten batch keeps its
//!   base offset, last offset delta, timestamps, producer id, epoch and base sequence, so the
//!   producer state rebuilt from batch headers and the offsets consumers committed stay valid;
//! - a batch whose records are all kept is copied byte for byte (no re-encode, no recompress);
//! - a rewritten batch uses the codec of the original and gets a fresh CRC-32C.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::compression::{self as codec, Compressor};

use super::batch::{self, BatchHeader, HEADER_LEN, LOG_OVERHEAD};
use super::records::{self, corrupt, Record};
use super::LogError;

/// Bytes one entry of the offset map costs, counting the hash table's spare capacity.
pub const MAP_ENTRY_BYTES: usize = 32;

/// Hasher for keys that are already uniformly distributed digests.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ *b as u64;
        }
    }
    fn write_u128(&mut self, v: u128) {
        self.0 = v as u64;
    }
}

/// The offset of the latest record of every key in a dirty section. Keys are stored as 128-bit
/// digests (two independently seeded SipHashes), so memory is bounded by the number of keys,
/// not their size; a collision needs ~2^64 keys.
pub struct OffsetMap {
    seeds: (RandomState, RandomState),
    map: HashMap<u128, i64, BuildHasherDefault<Prehashed>>,
    capacity: usize,
}

impl OffsetMap {
    /// A map that holds at most `memory_bytes / MAP_ENTRY_BYTES` keys.
    pub fn with_memory(memory_bytes: usize) -> OffsetMap {
        OffsetMap {
            seeds: (RandomState::new(), RandomState::new()),
            map: HashMap::default(),
            capacity: (memory_bytes / MAP_ENTRY_BYTES).max(1),
        }
    }

    fn digest(&self, key: &[u8]) -> u128 {
        ((self.seeds.0.hash_one(key) as u128) << 64) | self.seeds.1.hash_one(key) as u128
    }

    pub fn put(&mut self, key: &[u8], offset: i64) {
        let d = self.digest(key);
        self.map.insert(d, offset);
    }

    pub fn latest(&self, key: &[u8]) -> Option<i64> {
        self.map.get(&self.digest(key)).copied()
    }

    /// Keys that still fit.
    pub fn room(&self) -> usize {
        self.capacity.saturating_sub(self.map.len())
    }
}

/// What became of one batch.
#[derive(Debug)]
pub enum Filtered {
    /// Every record kept: store the original bytes.
    Kept,
    /// No record kept: the batch disappears.
    Dropped,
    /// Some records kept: the rewritten batch.
    Rewritten(Bytes),
}

/// Keeps the records of `batch` for which `keep` is true. Returns the outcome and how many
/// records were removed.
pub fn filter_batch(
    batch: &Bytes,
    header: &BatchHeader,
    mut keep: impl FnMut(&Record<'_>) -> bool,
) -> Result<(Filtered, u64), LogError> {
    let section = records::section(batch, header)?;
    let mut kept: Vec<&[u8]> = Vec::new();
    let mut total = 0u64;
    records::for_each(&section, header, |r| {
        total += 1;
        if keep(&r) {
            kept.push(r.raw);
        }
    })?;
    let removed = total - kept.len() as u64;
    if removed == 0 {
        return Ok((Filtered::Kept, 0));
    }
    if kept.is_empty() {
        return Ok((Filtered::Dropped, removed));
    }
    let kept_len: usize = kept.iter().map(|r| r.len()).sum();
    let mut out = BytesMut::with_capacity(HEADER_LEN + kept_len);
    out.extend_from_slice(&batch[..HEADER_LEN]);
    let put = |tmp: &mut BytesMut| {
        for r in &kept {
            tmp.put_slice(r);
        }
        Ok(())
    };
    let compressed = match header.codec() {
        0 => codec::None::compress(&mut out, put),
        1 => codec::Gzip::compress(&mut out, put),
        2 => codec::Snappy::compress(&mut out, put),
        3 => codec::Lz4::compress(&mut out, put),
        4 => codec::Zstd::compress(&mut out, put),
        c => return Err(corrupt(header, &format!("unknown compression codec {c}"))),
    };
    compressed.map_err(|e| corrupt(header, &format!("cannot recompress: {e}")))?;
    let batch_length = (out.len() - LOG_OVERHEAD) as i32;
    out[batch::field::BATCH_LENGTH..batch::field::BATCH_LENGTH + 4]
        .copy_from_slice(&batch_length.to_be_bytes());
    out[batch::field::RECORD_COUNT..batch::field::RECORD_COUNT + 4]
        .copy_from_slice(&(kept.len() as i32).to_be_bytes());
    let crc = batch::compute_crc(&out);
    out[batch::field::CRC..batch::field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Ok((Filtered::Rewritten(out.freeze()), removed))
}

/// A compacted topic refuses records without a key (Kafka: INVALID_RECORD), since the cleaner
/// could never decide which of them is the latest. Every keyless record of the partition's
/// batches is named by its index among them (KIP-467), so a client fails exactly those; the
/// batches are refused whole, as Kafka refuses them.
pub fn check_keys(batches: &[(BatchHeader, Bytes)]) -> Result<(), batch::BatchError> {
    let mut rejected = Vec::new();
    let mut first_index = 0i64;
    for (header, bytes) in batches {
        let section = records::section(bytes, header)
            .map_err(|e| batch::BatchError::Invalid(e.to_string()))?;
        records::for_each(&section, header, |r| {
            if r.key.is_none() {
                let index = first_index + (r.offset - header.base_offset);
                rejected.push((
                    i32::try_from(index).unwrap_or(i32::MAX),
                    "a compacted topic needs a key on every record; this one has none".to_string(),
                ));
            }
        })
        .map_err(|e| batch::BatchError::Invalid(e.to_string()))?;
        first_index += i64::from(header.record_count);
    }
    if rejected.is_empty() {
        Ok(())
    } else {
        Err(batch::BatchError::RecordsRejected(rejected))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::records::{
        Compression, Record as KRecord, RecordBatchDecoder, RecordBatchEncoder,
        RecordEncodeOptions, TimestampType,
    };

    fn encode(records: &[(i64, Option<&str>, Option<&str>)], compression: Compression) -> Bytes {
        let recs: Vec<KRecord> = records
            .iter()
            .map(|(off, k, v)| KRecord {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: 7,
                producer_epoch: 1,
                timestamp_type: TimestampType::Creation,
                offset: *off,
                sequence: *off as i32,
                timestamp: 1_000 + off,
                key: k.map(|k| Bytes::copy_from_slice(k.as_bytes())),
                value: v.map(|v| Bytes::copy_from_slice(v.as_bytes())),
                headers: Default::default(),
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            &recs,
            &RecordEncodeOptions {
                version: 2,
                compression,
            },
        )
        .unwrap();
        buf.freeze()
    }

    fn sample() -> Vec<(i64, Option<&'static str>, Option<&'static str>)> {
        vec![
            (10, Some("a"), Some("1")),
            (11, Some("b"), Some("2")),
            (12, Some("a"), None),
            (13, Some("c"), Some("3")),
        ]
    }

    #[test]
    fn the_walker_sees_every_record_with_its_offset_key_and_tombstone_flag() {
        for c in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let b = encode(&sample(), c);
            let h = batch::validate(&b).unwrap();
            let section = records::section(&b, &h).unwrap();
            let mut seen = Vec::new();
            records::for_each(&section, &h, |r| {
                seen.push((
                    r.offset,
                    r.key.map(|k| k.to_vec()),
                    r.is_tombstone(),
                    r.timestamp,
                ))
            })
            .unwrap();
            assert_eq!(
                seen,
                vec![
                    (10, Some(b"a".to_vec()), false, 1010),
                    (11, Some(b"b".to_vec()), false, 1011),
                    (12, Some(b"a".to_vec()), true, 1012),
                    (13, Some(b"c".to_vec()), false, 1013),
                ],
                "{c:?}"
            );
        }
    }

    #[test]
    fn a_filtered_batch_keeps_offsets_span_producer_fields_and_codec_and_decodes() {
        for c in [Compression::None, Compression::Gzip, Compression::Zstd] {
            let b = encode(&sample(), c);
            let h = batch::validate(&b).unwrap();
            // Keep only the middle two records: the batch's first and last offsets disappear.
            let (out, removed) =
                filter_batch(&b, &h, |r| r.offset == 11 || r.offset == 12).unwrap();
            assert_eq!(removed, 2);
            let Filtered::Rewritten(nb) = out else {
                panic!("expected a rewrite")
            };
            let nh = batch::validate(&nb).expect("CRC and length are right");
            assert_eq!(nh.base_offset, 10);
            assert_eq!(nh.last_offset(), 13, "span kept so the log end stays put");
            assert_eq!(nh.record_count, 2);
            assert_eq!(
                (nh.producer_id, nh.producer_epoch, nh.base_sequence),
                (7, 1, 10)
            );
            assert_eq!(nh.attributes & 7, h.attributes & 7, "same codec");
            let mut buf = nb.clone();
            let set = RecordBatchDecoder::decode(&mut buf).unwrap();
            let got: Vec<(i64, Option<Bytes>)> = set
                .records
                .iter()
                .map(|r| (r.offset, r.value.clone()))
                .collect();
            assert_eq!(got, vec![(11, Some(Bytes::from("2"))), (12, None)]);
        }
    }

    #[test]
    fn all_kept_is_a_byte_copy_and_none_kept_drops_the_batch() {
        let b = encode(&sample(), Compression::Lz4);
        let h = batch::validate(&b).unwrap();
        assert!(matches!(
            filter_batch(&b, &h, |_| true).unwrap(),
            (Filtered::Kept, 0)
        ));
        assert!(matches!(
            filter_batch(&b, &h, |_| false).unwrap(),
            (Filtered::Dropped, 4)
        ));
    }

    #[test]
    fn the_offset_map_keeps_the_latest_offset_per_key_and_counts_its_room() {
        let mut m = OffsetMap::with_memory(3 * MAP_ENTRY_BYTES);
        m.put(b"a", 1);
        m.put(b"b", 2);
        m.put(b"a", 3);
        assert_eq!(m.latest(b"a"), Some(3));
        assert_eq!(m.latest(b"b"), Some(2));
        assert_eq!(m.latest(b"zz"), None);
        assert_eq!(m.room(), 1, "two distinct keys of three");
    }

    #[test]
    fn records_without_a_key_are_refused_for_compacted_topics() {
        let b = encode(
            &[(0, Some("k"), Some("v")), (1, None, Some("v"))],
            Compression::None,
        );
        let h = batch::validate(&b).unwrap();
        let second = encode(
            &[
                (0, None, Some("v")),
                (1, Some("k"), Some("v")),
                (2, None, None),
            ],
            Compression::Gzip,
        );
        let h2 = batch::validate(&second).unwrap();
        // Indexes run across the partition's batches: 1 in the first, 0 and 2 in the second.
        let err = check_keys(&[(h, b), (h2, second)]).unwrap_err();
        let batch::BatchError::RecordsRejected(rejected) = &err else {
            panic!("{err:?}")
        };
        let indexes: Vec<i32> = rejected.iter().map(|(i, _)| *i).collect();
        assert_eq!(indexes, [1, 2, 4]);
        assert!(err.to_string().contains("record 1"), "{err}");
        let ok = encode(&[(0, Some("k"), None)], Compression::Snappy);
        check_keys(&[(batch::validate(&ok).unwrap(), ok)]).unwrap();
    }

    #[test]
    fn truncated_records_are_corrupt_not_a_panic() {
        let b = encode(&sample(), Compression::None);
        let h = batch::validate(&b).unwrap();
        let section = records::section(&b, &h).unwrap();
        for cut in 0..section.len() {
            let _ = records::for_each(&section[..cut], &h, |_| {});
        }
        assert!(records::for_each(&section[..section.len() - 1], &h, |_| {}).is_err());
    }
}
