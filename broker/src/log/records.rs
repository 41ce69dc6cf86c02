//! The records inside a v2 batch: bounded decompression and a walk over the records.
//!
//! Invariants (docs/invariants.md 7, bad input):
//! - no decompression produces more than [`MAX_UNCOMPRESSED_BATCH_BYTES`]: output grows as it is
//!   produced and stops at the cap, so a "zip bomb" (1 MiB of gzip that inflates to 1 GiB)
//!   costs at most the cap, never the size it would inflate to. Decompression runs without an
//!   await, so at most one per runtime worker thread is in progress at any time;
//! - a record count is checked against the bytes of the records section before any record is
//!   read (a record takes at least [`MIN_RECORD_BYTES`]), and every length inside a record
//!   against the bytes that are there;
//! - this is the only place the broker decompresses records: the `kafka-protocol` codec's own
//!   decompressors are unbounded and are not used.

use std::io::Read;
use std::ops::ControlFlow;

use bytes::Bytes;

use super::batch::{BatchHeader, HEADER_LEN, MIN_RECORD_BYTES};
use super::LogError;

/// The most one batch may decompress to. Clients bound their batches before compression
/// (librdkafka's `batch.size` is 1 MB by default, Java's 16 KiB), so a legitimate batch is
/// far below this; a batch that inflates beyond it is refused as corrupt.
pub const MAX_UNCOMPRESSED_BATCH_BYTES: usize = 64 << 20;

/// One record of a batch, borrowed from the (decompressed) records section.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// The record's headers as encoded: their count, then each (see [`headers`]).
    pub headers: &'a [u8],
    /// The record as encoded, including its length prefix.
    pub raw: &'a [u8],
}

/// The headers of a record ([`Record::headers`]): (key, value) pairs in order, a null value
/// `None`; `None` if they are malformed. The count read is checked against the bytes before
/// anything is allocated by it.
pub fn headers(encoded: &[u8]) -> Option<Vec<super::batch::Header<'_>>> {
    let mut pos = 0;
    let count = usize::try_from(varint(encoded, &mut pos)?).ok()?;
    // A header is at least two bytes (two lengths).
    if count > encoded.len() / 2 {
        return None;
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let key = field(encoded, &mut pos)??;
        let value = field(encoded, &mut pos)?;
        out.push((key, value));
    }
    Some(out)
}

impl Record<'_> {
    pub fn is_tombstone(&self) -> bool {
        self.value.is_none()
    }
}

pub(super) fn corrupt(header: &BatchHeader, why: &str) -> LogError {
    LogError::Corrupt(format!("batch at offset {}: {why}", header.base_offset))
}

/// Reads a zig-zag varint from `buf` at `*pos`.
fn varint(buf: &[u8], pos: &mut usize) -> Option<i64> {
    let mut z: u64 = 0;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        z |= ((b & 0x7f) as u64) << shift;
        if b & 0x80 == 0 {
            return Some(((z >> 1) as i64) ^ -((z & 1) as i64));
        }
    }
    None
}

/// The records section of a whole batch (`batch` starts at its base offset), decompressed to
/// at most [`MAX_UNCOMPRESSED_BATCH_BYTES`]; an uncompressed batch's section is a slice of
/// `batch`, not a copy.
pub fn section(batch: &Bytes, header: &BatchHeader) -> Result<Bytes, LogError> {
    section_within(batch, header, MAX_UNCOMPRESSED_BATCH_BYTES)
}

fn section_within(batch: &Bytes, header: &BatchHeader, limit: usize) -> Result<Bytes, LogError> {
    let end = header.total_len().min(batch.len());
    if end < HEADER_LEN {
        return Err(corrupt(header, "shorter than its header"));
    }
    let body = batch.slice(HEADER_LEN..end);
    if header.codec() == 0 {
        return Ok(body);
    }
    inflate(header.codec(), &body, limit)
        .map(Bytes::from)
        .map_err(|e| corrupt(header, &format!("cannot decompress: {e}")))
}

/// `body` under Kafka's compression `codec` (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd),
/// decompressed to at most `limit` bytes.
pub fn inflate(codec: i16, body: &[u8], limit: usize) -> std::io::Result<Vec<u8>> {
    match codec {
        0 if body.len() <= limit => Ok(body.to_vec()),
        0 => Err(too_big(limit)),
        1 => read_bounded(flate2::read::GzDecoder::new(body), limit),
        2 => snappy(body, limit),
        3 => lz4::Decoder::new(body).and_then(|d| read_bounded(d, limit)),
        4 => zstd::stream::read::Decoder::with_buffer(body).and_then(|d| read_bounded(d, limit)),
        c => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("unknown compression codec {c}"),
        )),
    }
}

fn too_big(limit: usize) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("decompresses to more than {limit} bytes"),
    )
}

/// Reads a decompressor to its end, refusing output beyond `limit`.
fn read_bounded(reader: impl Read, limit: usize) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    reader.take(limit as u64 + 1).read_to_end(&mut out)?;
    if out.len() > limit {
        return Err(too_big(limit));
    }
    Ok(out)
}

/// Kafka's snappy: xerial framing (a magic header, then blocks each prefixed by its length)
/// or, as the Java client accepts too, one raw snappy block. A block's uncompressed length
/// is read from its header and checked against the limit before its buffer exists.
fn snappy(body: &[u8], limit: usize) -> std::io::Result<Vec<u8>> {
    const MAGIC: &[u8; 16] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";
    let invalid = |e: snap::Error| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
    let mut out = Vec::new();
    let block = |raw: &[u8], out: &mut Vec<u8>| -> std::io::Result<()> {
        let len = snap::raw::decompress_len(raw).map_err(invalid)?;
        if out.len() + len > limit {
            return Err(too_big(limit));
        }
        let start = out.len();
        out.resize(start + len, 0);
        let n = snap::raw::Decoder::new()
            .decompress(raw, &mut out[start..])
            .map_err(invalid)?;
        out.truncate(start + n);
        Ok(())
    };
    let Some(mut rest) = body.strip_prefix(MAGIC.as_slice()) else {
        block(body, &mut out)?;
        return Ok(out);
    };
    while !rest.is_empty() {
        let short = || std::io::Error::new(std::io::ErrorKind::InvalidData, "truncated block");
        let len_bytes = rest.get(..4).ok_or_else(short)?;
        let len = u32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
        let raw = rest.get(4..4 + len as usize).ok_or_else(short)?;
        block(raw, &mut out)?;
        rest = &rest[4 + len as usize..];
    }
    Ok(out)
}

/// The offset after the last whole batch of `data` (where a read that returned it ends), or
/// `None` when it holds no whole batch.
pub fn end_offset(data: &Bytes) -> Option<i64> {
    batches(data)
        .map_while(Result::ok)
        .last()
        .map(|(h, _)| h.next_offset())
}

/// Walks the whole batches of stored bytes (a segment, or a read of one), each with its header;
/// a batch that runs past the end is an error, and the walk stops there.
pub fn batches(data: &Bytes) -> impl Iterator<Item = Result<(BatchHeader, Bytes), LogError>> + '_ {
    let mut pos = 0usize;
    std::iter::from_fn(move || {
        if pos >= data.len() {
            return None;
        }
        let item = BatchHeader::parse(&data[pos..])
            .map_err(|e| LogError::Corrupt(e.to_string()))
            .and_then(|h| {
                let end = pos + h.total_len();
                if h.total_len() < HEADER_LEN || end > data.len() {
                    return Err(corrupt(&h, "runs past the end of the bytes read"));
                }
                let b = data.slice(pos..end);
                pos = end;
                Ok((h, b))
            });
        if item.is_err() {
            pos = data.len();
        }
        Some(item)
    })
}

/// The timestamp of the record at `offset` in the first batch of `bytes` (a log read or a
/// Fetch's answer): the batch's for log-append time, else the record's. `None` when the bytes
/// hold no readable batch there, never a wrong time (for lag in seconds).
pub fn timestamp_at(bytes: &Bytes, offset: i64) -> Option<i64> {
    let header = BatchHeader::parse(bytes).ok()?;
    if header.is_log_append_time() {
        return Some(header.max_timestamp);
    }
    first(bytes, &header, |r| r.offset >= offset)
        .ok()?
        .map(|(_, timestamp)| timestamp)
}

/// `(offset, timestamp)` of the first record of a whole batch that `pred` accepts. The walk
/// stops there: a lag sample or a timestamp lookup in a batch of a thousand records reads
/// on average half of them, not all.
pub fn first(
    batch: &Bytes,
    header: &BatchHeader,
    mut pred: impl FnMut(&Record<'_>) -> bool,
) -> Result<Option<(i64, i64)>, LogError> {
    let section = section(batch, header)?;
    let mut found = None;
    walk(&section, header, |r| {
        if pred(&r) {
            found = Some((r.offset, r.timestamp));
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    })?;
    Ok(found)
}

/// Calls `f` with every record of a decompressed records section.
pub fn for_each<'a>(
    section: &'a [u8],
    header: &BatchHeader,
    mut f: impl FnMut(Record<'a>),
) -> Result<(), LogError> {
    walk(section, header, |r| {
        f(r);
        ControlFlow::Continue(())
    })
}

/// Calls `f` with the records of a decompressed records section in order until it breaks.
fn walk<'a>(
    section: &'a [u8],
    header: &BatchHeader,
    mut f: impl FnMut(Record<'a>) -> ControlFlow<()>,
) -> Result<(), LogError> {
    let count = usize::try_from(header.record_count)
        .map_err(|_| corrupt(header, "negative record count"))?;
    if count > section.len() / MIN_RECORD_BYTES {
        return Err(corrupt(
            header,
            &format!(
                "{count} records cannot fit in a records section of {} bytes",
                section.len()
            ),
        ));
    }
    let mut pos = 0usize;
    for _ in 0..count {
        let start = pos;
        let len = varint(section, &mut pos).ok_or_else(|| corrupt(header, "record length"))?;
        let body_start = pos;
        let end = body_start
            .checked_add(usize::try_from(len).map_err(|_| corrupt(header, "record length"))?)
            .filter(|&e| e <= section.len())
            .ok_or_else(|| corrupt(header, "record runs past the batch"))?;
        let body = &section[..end];
        pos += 1; // attributes
        let ts_delta = varint(body, &mut pos).ok_or_else(|| corrupt(header, "timestamp"))?;
        let off_delta = varint(body, &mut pos).ok_or_else(|| corrupt(header, "offset delta"))?;
        let key = field(body, &mut pos).ok_or_else(|| corrupt(header, "key"))?;
        let value = field(body, &mut pos).ok_or_else(|| corrupt(header, "value"))?;
        let timestamp = if header.is_log_append_time() {
            header.max_timestamp
        } else {
            header.base_timestamp.wrapping_add(ts_delta)
        };
        let flow = f(Record {
            offset: header.base_offset.wrapping_add(off_delta),
            timestamp,
            key,
            value,
            headers: section.get(pos..end).unwrap_or_default(),
            raw: &section[start..end],
        });
        if flow.is_break() {
            break;
        }
        pos = end;
    }
    Ok(())
}

/// A length-prefixed key or value (-1: null) inside one record's bytes.
fn field<'a>(body: &'a [u8], pos: &mut usize) -> Option<Option<&'a [u8]>> {
    let len = varint(body, pos)?;
    if len < 0 {
        return Some(None);
    }
    let end = pos.checked_add(usize::try_from(len).ok()?)?;
    let v = body.get(*pos..end)?;
    *pos = end;
    Some(Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch;
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::records::{
        Compression, Record as KRecord, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    fn encode(values: &[&[u8]], compression: Compression) -> Bytes {
        let records: Vec<KRecord> = values
            .iter()
            .enumerate()
            .map(|(i, v)| KRecord {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                sequence: i as i32,
                timestamp: 1000 + i as i64,
                key: Some(Bytes::from(format!("k{i}"))),
                value: Some(Bytes::copy_from_slice(v)),
                headers: Default::default(),
            })
            .collect();
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression,
        };
        RecordBatchEncoder::encode(&mut buf, &records, &options).unwrap();
        buf.freeze()
    }

    #[test]
    fn every_codec_decompresses_and_walks() {
        for c in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let b = encode(&[b"one", b"two", b""], c);
            let h = batch::validate(&b).unwrap();
            let s = section(&b, &h).unwrap();
            let mut got = vec![];
            for_each(&s, &h, |r| {
                got.push((r.offset, r.timestamp, r.key, r.value))
            })
            .unwrap();
            assert_eq!(
                got,
                vec![
                    (0, 1000, Some(&b"k0"[..]), Some(&b"one"[..])),
                    (1, 1001, Some(&b"k1"[..]), Some(&b"two"[..])),
                    (2, 1002, Some(&b"k2"[..]), Some(&b""[..])),
                ],
                "{c:?}"
            );
        }
    }

    #[test]
    fn first_stops_at_the_record_it_finds() {
        let b = encode(&[b"a", b"b", b"c", b"d"], Compression::None);
        let h = batch::validate(&b).unwrap();
        let mut asked = 0;
        let found = first(&b, &h, |r| {
            asked += 1;
            r.offset >= 1
        })
        .unwrap();
        assert_eq!(found, Some((1, 1001)));
        assert_eq!(asked, 2, "records after the one found are not read");
        assert_eq!(first(&b, &h, |r| r.offset >= 9).unwrap(), None);
    }

    #[test]
    fn a_decompression_bomb_stops_at_the_limit() {
        // 8 MiB of zeros in one record compresses to a few KiB in every codec.
        let zeros = vec![0u8; 8 << 20];
        for c in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let b = encode(&[&zeros], c);
            assert!(b.len() < 1 << 20, "{c:?}: {} bytes", b.len());
            let h = batch::validate(&b).unwrap();
            assert!(section_within(&b, &h, 9 << 20).unwrap().len() > 8 << 20);
            let e = section_within(&b, &h, 1 << 20).unwrap_err().to_string();
            assert!(e.contains("more than 1048576 bytes"), "{c:?}: {e}");
        }
    }

    #[test]
    fn a_raw_snappy_block_claiming_a_huge_length_is_refused_before_allocating() {
        let b = encode(&[b"x"], Compression::Snappy);
        let h = batch::validate(&b).unwrap();
        // A raw block (no xerial magic) whose header varint claims 4 GiB - 1.
        let mut raw = BytesMut::from(&b[..HEADER_LEN]);
        raw.put_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0]);
        let mut h2 = h;
        h2.batch_length = (raw.len() - batch::LOG_OVERHEAD) as i32;
        let e = section(&raw.freeze(), &h2).unwrap_err().to_string();
        assert!(e.contains("more than"), "{e}");
    }

    #[test]
    fn fuzz_regressions_are_refused() {
        // As the batch fuzz target drives them: parsed as a stored batch, then walked.
        for (name, input) in crate::fuzz_regressions("batch") {
            let bytes = Bytes::from(input);
            let h = batch::BatchHeader::parse(&bytes).unwrap();
            let walked = section(&bytes, &h).and_then(|s| for_each(&s, &h, |_| {}));
            assert!(walked.is_err(), "{name}");
        }
    }

    #[test]
    fn headers_written_by_the_broker_read_back_here_and_in_kafkas_decoder() {
        let headers = vec![
            (&b"__dlq.errors.offset"[..], Some(&b"41"[..])),
            (&b"h"[..], None),
        ];
        let b = batch::build_with_headers(
            &[
                ((Some(&b"k"[..]), Some(&b"v"[..])), headers.clone()),
                ((None, None), vec![]),
            ],
            7,
        );
        let h = crate::log::batch::BatchHeader::parse(&b).unwrap();
        let section = section(&b, &h).unwrap();
        let mut seen = Vec::new();
        for_each(&section, &h, |r| {
            seen.push((r.key, r.value, super::headers(r.headers)))
        })
        .unwrap();
        assert_eq!(seen[0], (Some(&b"k"[..]), Some(&b"v"[..]), Some(headers)));
        assert_eq!(seen[1], (None, None, Some(vec![])));
        let mut buf = b.clone();
        let set = kafka_protocol::records::RecordBatchDecoder::decode(&mut buf).unwrap();
        let r = &set.records[0];
        assert_eq!(r.timestamp, 7);
        assert_eq!(r.headers.len(), 2);
        assert_eq!(
            r.headers[&kafka_protocol::protocol::StrBytes::from_static_str("__dlq.errors.offset")]
                .as_deref(),
            Some(&b"41"[..])
        );
        // A count larger than the bytes could hold is refused, not allocated.
        assert_eq!(super::headers(&[0xfe, 0xff, 0xff, 0xff, 0x0f]), None);
    }

    #[test]
    fn record_counts_are_checked_against_the_bytes() {
        let b = encode(&[b"a"], Compression::None);
        let mut h = batch::validate(&b).unwrap();
        let s = section(&b, &h).unwrap();
        h.record_count = i32::MAX;
        let e = for_each(&s, &h, |_| {}).unwrap_err().to_string();
        assert!(e.contains("cannot fit"), "{e}");
        h.record_count = -1;
        assert!(for_each(&s, &h, |_| {}).is_err());
        // Every truncation of the section is an error or fewer records, never a panic.
        h.record_count = 1;
        for cut in 0..s.len() {
            assert!(for_each(&s[..cut], &h, |_| {}).is_err());
        }
    }
}
