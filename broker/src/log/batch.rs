//! Kafka RecordBatch v2 headers: parsing, validation and the few in-place edits the broker makes.
//!
//! The broker never re-encodes a batch. It reads the fixed 61-byte header, checks the CRC-32C
//! over everything after the CRC field, and rewrites only fields outside the CRC (base offset,
//! partition leader epoch) — except for `LogAppendTime` topics, where the timestamp type and max
//! timestamp change and the CRC is recomputed once per batch.

use bytes::{Buf, BufMut, Bytes, BytesMut};

pub const HEADER_LEN: usize = 61;
/// Offset + length prefix that precede the part counted by `batchLength`.
pub const LOG_OVERHEAD: usize = 12;
/// The smallest encoding of a record: length, attributes, timestamp delta, offset delta, key
/// length, value length and header count, one byte each.
pub const MIN_RECORD_BYTES: usize = 7;

const BASE_OFFSET: usize = 0;
const BATCH_LENGTH: usize = 8;
const LEADER_EPOCH: usize = 12;
const MAGIC: usize = 16;
const CRC: usize = 17;
const ATTRIBUTES: usize = 21;
const LAST_OFFSET_DELTA: usize = 23;
const BASE_TIMESTAMP: usize = 27;
const MAX_TIMESTAMP: usize = 35;
const PRODUCER_ID: usize = 43;
const PRODUCER_EPOCH: usize = 51;
const BASE_SEQUENCE: usize = 53;
const RECORD_COUNT: usize = 57;

const TIMESTAMP_TYPE_BIT: i16 = 1 << 3;
const TRANSACTIONAL_BIT: i16 = 1 << 4;
const CONTROL_BIT: i16 = 1 << 5;

/// Why a batch was refused. Mapped to a Kafka error code by the produce handler.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("record batch truncated: {0}")]
    Truncated(String),
    #[error("unsupported record batch magic {0} (only v2 is accepted)")]
    UnsupportedMagic(i8),
    #[error("record batch CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CorruptCrc { stored: u32, computed: u32 },
    #[error("invalid record batch: {0}")]
    Invalid(String),
    #[error("record batch of {size} bytes exceeds max.message.bytes {max}")]
    TooLarge { size: usize, max: usize },
    /// Some records are refused, each by its index among the partition's records and why
    /// (KIP-467 `record_errors`); never empty.
    #[error("{} record(s) rejected, the first: record {}: {}", .0.len(), .0[0].0, .0[0].1)]
    RecordsRejected(Vec<(i32, String)>),
}

/// The header of one batch, read from its first 61 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    pub batch_length: i32,
    pub leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

impl BatchHeader {
    /// Parses a header; `buf` must hold at least [`HEADER_LEN`] bytes.
    pub fn parse(buf: &[u8]) -> Result<BatchHeader, BatchError> {
        if buf.len() < HEADER_LEN {
            return Err(BatchError::Truncated(format!(
                "{} bytes, header needs {HEADER_LEN}",
                buf.len()
            )));
        }
        let mut b = buf;
        Ok(BatchHeader {
            base_offset: b.get_i64(),
            batch_length: b.get_i32(),
            leader_epoch: b.get_i32(),
            magic: b.get_i8(),
            crc: b.get_u32(),
            attributes: b.get_i16(),
            last_offset_delta: b.get_i32(),
            base_timestamp: b.get_i64(),
            max_timestamp: b.get_i64(),
            producer_id: b.get_i64(),
            producer_epoch: b.get_i16(),
            base_sequence: b.get_i32(),
            record_count: b.get_i32(),
        })
    }

    /// Total bytes of the batch on disk and on the wire.
    pub fn total_len(&self) -> usize {
        LOG_OVERHEAD + self.batch_length.max(0) as usize
    }
    pub fn last_offset(&self) -> i64 {
        self.base_offset + self.last_offset_delta as i64
    }
    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_BIT != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_BIT != 0
    }
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_BIT != 0
    }
    /// Compression codec id (attribute bits 0–2): 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
    pub fn codec(&self) -> i16 {
        self.attributes & 0x7
    }
    pub fn is_idempotent(&self) -> bool {
        self.producer_id >= 0
    }
    /// Sequence number of the last record (sequences wrap at i32::MAX).
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence < 0 {
            return self.base_sequence;
        }
        let last = self.base_sequence as i64 + self.last_offset_delta as i64;
        (last % (i32::MAX as i64 + 1)) as i32
    }
}

/// Computes the CRC-32C a v2 batch carries: everything after the CRC field.
pub fn compute_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(&batch[ATTRIBUTES..])
}

/// Checks one complete batch (`batch.len()` == its total length): magic, CRC, counts.
/// This is the only place a batch's bytes are all touched, once, on the produce path.
pub fn validate(batch: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = BatchHeader::parse(batch)?;
    if header.magic != 2 {
        return Err(BatchError::UnsupportedMagic(header.magic));
    }
    if header.total_len() != batch.len() {
        return Err(BatchError::Truncated(format!(
            "batchLength says {} bytes, have {}",
            header.total_len(),
            batch.len()
        )));
    }
    let computed = compute_crc(batch);
    if computed != header.crc {
        return Err(BatchError::CorruptCrc {
            stored: header.crc,
            computed,
        });
    }
    // Compaction leaves fewer records than the offset span (it never renumbers), so a stored
    // batch may have gaps; a produced one may not (checked in `split_and_validate`).
    if header.record_count <= 0
        || header.last_offset_delta < 0
        || header.record_count as i64 > header.last_offset_delta as i64 + 1
    {
        return Err(BatchError::Invalid(format!(
            "recordCount {} does not fit lastOffsetDelta {}",
            header.record_count, header.last_offset_delta
        )));
    }
    Ok(header)
}

/// Splits a produce request's `records` into complete batches, validating each.
/// Kafka's v2 producers send one batch per partition; several are accepted, each checked.
pub fn split_and_validate(
    records: &Bytes,
    max_message_bytes: usize,
) -> Result<Vec<(BatchHeader, Bytes)>, BatchError> {
    let mut out = Vec::with_capacity(1);
    let mut pos = 0usize;
    if records.is_empty() {
        return Err(BatchError::Invalid("no record batch in request".into()));
    }
    while pos < records.len() {
        let rest = &records[pos..];
        if rest.len() < LOG_OVERHEAD + 5 {
            return Err(BatchError::Truncated(format!(
                "{} trailing bytes after the last batch",
                rest.len()
            )));
        }
        let batch_length = i32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]);
        if batch_length < (HEADER_LEN - LOG_OVERHEAD) as i32 {
            if rest[MAGIC] != 2 {
                return Err(BatchError::UnsupportedMagic(rest[MAGIC] as i8));
            }
            return Err(BatchError::Invalid(format!("batchLength {batch_length}")));
        }
        let total = LOG_OVERHEAD + batch_length as usize;
        if total > max_message_bytes {
            return Err(BatchError::TooLarge {
                size: total,
                max: max_message_bytes,
            });
        }
        if total > rest.len() {
            return Err(BatchError::Truncated(format!(
                "batch of {total} bytes, only {} present",
                rest.len()
            )));
        }
        let bytes = records.slice(pos..pos + total);
        let header = validate(&bytes)?;
        if header.last_offset_delta != header.record_count - 1 {
            return Err(BatchError::Invalid(format!(
                "recordCount {} does not match lastOffsetDelta {}",
                header.record_count, header.last_offset_delta
            )));
        }
        // An uncompressed batch cannot hold more records than its bytes allow (a compressed
        // one is checked where it is decompressed, log/records.rs).
        let body = total - HEADER_LEN;
        if header.codec() == 0 && header.record_count as usize > body / MIN_RECORD_BYTES {
            return Err(BatchError::Truncated(format!(
                "recordCount {} cannot fit in {body} bytes of records",
                header.record_count
            )));
        }
        out.push((header, bytes));
        pos += total;
    }
    Ok(out)
}

/// The 16-byte prefix (base offset, batch length, leader epoch) written in place of the
/// producer's: neither field is covered by the CRC, so the body is written untouched.
pub fn assigned_prefix(batch: &[u8], base_offset: i64, leader_epoch: i32) -> [u8; 16] {
    let mut prefix = [0u8; 16];
    prefix[BASE_OFFSET..8].copy_from_slice(&base_offset.to_be_bytes());
    prefix[BATCH_LENGTH..12].copy_from_slice(&batch[BATCH_LENGTH..12]);
    prefix[LEADER_EPOCH..16].copy_from_slice(&leader_epoch.to_be_bytes());
    prefix
}

/// Rewrites a batch for a `LogAppendTime` topic: timestamp type bit set, max timestamp = now,
/// CRC recomputed. One copy per batch, only on such topics.
pub fn with_log_append_time(batch: &[u8], now_ms: i64) -> Bytes {
    let mut b = BytesMut::from(batch);
    let attrs = i16::from_be_bytes([b[ATTRIBUTES], b[ATTRIBUTES + 1]]) | TIMESTAMP_TYPE_BIT;
    b[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&attrs.to_be_bytes());
    b[MAX_TIMESTAMP..MAX_TIMESTAMP + 8].copy_from_slice(&now_ms.to_be_bytes());
    let crc = compute_crc(&b);
    b[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

/// Appends a zig-zag varint, the integer encoding inside v2 records.
fn put_varint(buf: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        buf.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    buf.push(z as u8);
}

/// A record's key and value; `None` is null.
pub type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// A record header: its key and value (`None`: null).
pub type Header<'a> = (&'a [u8], Option<&'a [u8]>);

/// Builds an uncompressed v2 batch of records with headers, every record stamped `timestamp`
/// (records the broker writes on a group's behalf, such as dead letters). Base offset 0.
pub fn build_with_headers(records: &[(KeyValue<'_>, Vec<Header<'_>>)], timestamp: i64) -> Bytes {
    encode(
        records.iter().map(|(kv, h)| (*kv, &h[..])),
        records.len(),
        timestamp,
        (-1, -1),
        0,
    )
}

/// Builds an uncompressed v2 batch of key/value records (for records the broker writes itself,
/// such as committed offsets). A `None` value is a tombstone. Base offset 0, assigned on append.
pub fn build(records: &[KeyValue<'_>], timestamp: i64) -> Bytes {
    build_as(records, timestamp, (-1, -1), 0)
}

/// A transactional batch of `producer`'s id and epoch, without sequence numbers: records a
/// coordinator writes for a producer's transaction (its offset commits).
pub fn build_transactional(
    records: &[KeyValue<'_>],
    timestamp: i64,
    producer: (i64, i16),
) -> Bytes {
    build_as(records, timestamp, producer, TRANSACTIONAL_BIT)
}

/// A control batch (see [`super::control`]) of `producer`'s id and epoch.
pub(super) fn build_control(record: KeyValue<'_>, timestamp: i64, producer: (i64, i16)) -> Bytes {
    build_as(
        &[record],
        timestamp,
        producer,
        TRANSACTIONAL_BIT | CONTROL_BIT,
    )
}

fn build_as(
    records: &[KeyValue<'_>],
    timestamp: i64,
    producer: (i64, i16),
    attributes: i16,
) -> Bytes {
    let none: &[Header<'_>] = &[];
    let records_iter = records.iter().map(|kv| (*kv, none));
    encode(records_iter, records.len(), timestamp, producer, attributes)
}

fn encode<'a, 'h: 'a>(
    records: impl Iterator<Item = (KeyValue<'a>, &'a [Header<'h>])>,
    count: usize,
    timestamp: i64,
    (producer_id, producer_epoch): (i64, i16),
    attributes: i16,
) -> Bytes {
    fn put_nullable(buf: &mut Vec<u8>, b: Option<&[u8]>) {
        match b {
            Some(b) => {
                put_varint(buf, b.len() as i64);
                buf.extend_from_slice(b);
            }
            None => put_varint(buf, -1),
        }
    }
    let mut body = Vec::new();
    for (i, ((key, value), headers)) in records.enumerate() {
        let mut r = Vec::with_capacity(16);
        r.push(0u8); // attributes
        put_varint(&mut r, 0); // timestamp delta
        put_varint(&mut r, i as i64); // offset delta
        put_nullable(&mut r, key);
        put_nullable(&mut r, value);
        put_varint(&mut r, headers.len() as i64);
        for (k, v) in headers {
            put_nullable(&mut r, Some(k));
            put_nullable(&mut r, *v);
        }
        put_varint(&mut body, r.len() as i64);
        body.extend_from_slice(&r);
    }
    let count = count as i32;
    let mut b = BytesMut::with_capacity(HEADER_LEN + body.len());
    b.put_i64(0);
    b.put_i32((HEADER_LEN - LOG_OVERHEAD + body.len()) as i32);
    b.put_i32(-1);
    b.put_i8(2);
    b.put_u32(0);
    b.put_i16(attributes);
    b.put_i32(count - 1);
    b.put_i64(timestamp);
    b.put_i64(timestamp);
    b.put_i64(producer_id);
    b.put_i16(producer_epoch);
    b.put_i32(-1);
    b.put_i32(count);
    b.extend_from_slice(&body);
    let crc = compute_crc(&b);
    b[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
    b.freeze()
}

/// Field offsets used by tests and by the recovery scanner.
pub mod field {
    pub const ATTRIBUTES: usize = super::ATTRIBUTES;
    pub const BATCH_LENGTH: usize = super::BATCH_LENGTH;
    pub const BASE_TIMESTAMP: usize = super::BASE_TIMESTAMP;
    pub const MAX_TIMESTAMP: usize = super::MAX_TIMESTAMP;
    pub const PRODUCER_ID: usize = super::PRODUCER_ID;
    pub const PRODUCER_EPOCH: usize = super::PRODUCER_EPOCH;
    pub const BASE_SEQUENCE: usize = super::BASE_SEQUENCE;
    pub const RECORD_COUNT: usize = super::RECORD_COUNT;
    pub const LAST_OFFSET_DELTA: usize = super::LAST_OFFSET_DELTA;
    pub const CRC: usize = super::CRC;
}

#[cfg(test)]
pub mod testing {
    //! Builds real v2 batches (uncompressed) for log tests.
    use super::*;

    /// A batch of `count` records with values `value-<i>` and timestamps `ts + i`.
    pub fn batch(count: i32, ts: i64) -> Bytes {
        batch_with_producer(count, ts, -1, -1, -1)
    }

    /// A batch of a transactional producer.
    pub fn transactional(count: i32, ts: i64, pid: i64, epoch: i16, seq: i32) -> Bytes {
        let mut b = BytesMut::from(&batch_with_producer(count, ts, pid, epoch, seq)[..]);
        b[ATTRIBUTES..ATTRIBUTES + 2].copy_from_slice(&TRANSACTIONAL_BIT.to_be_bytes());
        let crc = compute_crc(&b);
        b[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
        b.freeze()
    }

    pub fn batch_with_producer(count: i32, ts: i64, pid: i64, epoch: i16, seq: i32) -> Bytes {
        let mut records = Vec::new();
        for i in 0..count {
            let mut r = Vec::new();
            r.push(0u8); // attributes
            put_varint(&mut r, i as i64); // timestamp delta
            put_varint(&mut r, i as i64); // offset delta
            put_varint(&mut r, -1); // key
            let v = format!("value-{i}");
            put_varint(&mut r, v.len() as i64);
            r.extend_from_slice(v.as_bytes());
            put_varint(&mut r, 0); // headers
            put_varint(&mut records, r.len() as i64);
            records.extend_from_slice(&r);
        }
        let mut b = BytesMut::new();
        b.put_i64(0);
        b.put_i32((HEADER_LEN - LOG_OVERHEAD + records.len()) as i32);
        b.put_i32(-1);
        b.put_i8(2);
        b.put_u32(0);
        b.put_i16(0);
        b.put_i32(count - 1);
        b.put_i64(ts);
        b.put_i64(ts + count as i64 - 1);
        b.put_i64(pid);
        b.put_i16(epoch);
        b.put_i32(seq);
        b.put_i32(count);
        b.extend_from_slice(&records);
        let crc = compute_crc(&b);
        b[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
        b.freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::batch;
    use super::*;

    #[test]
    fn a_well_formed_batch_validates_and_reports_its_header() {
        let b = batch(5, 1000);
        let h = validate(&b).unwrap();
        assert_eq!(h.record_count, 5);
        assert_eq!(h.last_offset_delta, 4);
        assert_eq!(h.max_timestamp, 1004);
        assert_eq!(h.total_len(), b.len());
    }

    #[test]
    fn a_flipped_byte_is_a_crc_error() {
        let mut b = BytesMut::from(&batch(3, 0)[..]);
        let last = b.len() - 1;
        b[last] ^= 0xff;
        assert!(matches!(validate(&b), Err(BatchError::CorruptCrc { .. })));
    }

    #[test]
    fn oversized_and_truncated_batches_are_refused() {
        let b = batch(3, 0);
        assert!(matches!(
            split_and_validate(&b, 10),
            Err(BatchError::TooLarge { .. })
        ));
        let cut = b.slice(..b.len() - 1);
        assert!(matches!(
            split_and_validate(&cut, 1 << 20),
            Err(BatchError::Truncated(_))
        ));
        let mut two = BytesMut::from(&b[..]);
        two.extend_from_slice(&batch(2, 5));
        assert_eq!(split_and_validate(&two.freeze(), 1 << 20).unwrap().len(), 2);
    }

    #[test]
    fn an_uncompressed_batch_claiming_more_records_than_it_holds_is_refused() {
        // 3 records claimed as 100000 (lastOffsetDelta to match), the CRC made right again.
        let mut b = BytesMut::from(&batch(3, 0)[..]);
        b[RECORD_COUNT..RECORD_COUNT + 4].copy_from_slice(&100_000i32.to_be_bytes());
        b[LAST_OFFSET_DELTA..LAST_OFFSET_DELTA + 4].copy_from_slice(&99_999i32.to_be_bytes());
        let crc = compute_crc(&b);
        b[CRC..CRC + 4].copy_from_slice(&crc.to_be_bytes());
        let e = split_and_validate(&b.freeze(), 1 << 20).unwrap_err();
        assert!(e.to_string().contains("cannot fit"), "{e}");
    }

    #[test]
    fn log_append_time_rewrite_keeps_the_batch_valid() {
        let b = with_log_append_time(&batch(2, 10), 99);
        let h = validate(&b).unwrap();
        assert!(h.is_log_append_time());
        assert_eq!(h.max_timestamp, 99);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_the_validator(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let _ = split_and_validate(&Bytes::from(data), 1 << 20);
        }

        #[test]
        fn any_single_byte_flip_in_the_crc_range_is_caught(pos in 21usize..200, bit in 0u8..8) {
            let b = batch(5, 0);
            let pos = pos % b.len();
            proptest::prop_assume!(pos >= ATTRIBUTES);
            let mut m = BytesMut::from(&b[..]);
            m[pos] ^= 1 << bit;
            proptest::prop_assert!(split_and_validate(&m.freeze(), 1 << 20).is_err());
        }
    }

    #[test]
    fn assigned_prefix_changes_only_uncovered_fields() {
        let b = batch(2, 10);
        let p = assigned_prefix(&b, 42, 7);
        let mut stored = BytesMut::from(&p[..]);
        stored.extend_from_slice(&b[16..]);
        let h = validate(&stored).unwrap();
        assert_eq!(h.base_offset, 42);
        assert_eq!(h.leader_epoch, 7);
    }
}
