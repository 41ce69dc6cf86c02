//! Fetch responses, encoded by hand.
//!
//! librdkafka sends no fetch sessions: each of its fetches names every partition it is
//! assigned, 10,000 at scale, and each response answers all of them, most with nothing new.
//! Through the generic codec every entry was a struct of a dozen fields with four tagged-field
//! maps, built by moves, then sized and encoded by walks that construct default sub-structs to
//! compare against; that cost more than the records. Here a response is a flat list of the
//! fields Strata sets, written in one pass; record batches of [`MIN_ZERO_COPY`] bytes or more
//! are not copied but become chunks of their own (slices of the segment mappings), written
//! with vectored I/O, or, where the read named the segment file they lie in, sent from the
//! page cache by `sendfile` on a plaintext socket ([`Encoded::files`]).
//!
//! Invariant: for every Fetch version Strata speaks (4 to 16), the bytes are exactly those
//! `kafka-protocol` encodes for the same response (`the_frame_is_what_the_codec_encodes`
//! below). Fields Strata never sets are written as their defaults: no tagged fields.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::StrBytes;

use super::encoded::Encoded;
use super::error::EncodeError;
use crate::log::handles::FileSpan;

/// Below this, copying a record batch is cheaper than a chunk of its own.
const MIN_ZERO_COPY: usize = 4096;

/// Versions whose layout this module writes: every Fetch version advertised (a test holds the
/// two together; v17 only adds a field to the request, so its response is v16's).
const VERSIONS: std::ops::RangeInclusive<i16> = 4..=17;

/// A Fetch response.
#[derive(Debug, Default)]
pub struct FetchResponse {
    /// How long the client should back off (a consumer quota's throttle).
    pub throttle_time_ms: i32,
    pub error_code: i16,
    /// 0 when the fetch has no session (and always below v7).
    pub session_id: i32,
    pub topics: Vec<Topic>,
}

/// One topic's partitions in a response: by name below v13, by id from v13.
#[derive(Debug)]
pub struct Topic {
    pub name: StrBytes,
    pub topic_id: uuid::Uuid,
    pub partitions: Vec<Partition>,
}

/// One partition's answer.
#[derive(Debug)]
pub struct Partition {
    pub index: i32,
    pub error_code: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// read_committed fetches: `(producer id, first offset)` of the aborted transactions among
    /// `records` (`None`: an empty list, as for read_uncommitted).
    pub aborted: Option<Vec<(i64, i64)>>,
    /// Whole record batches (empty for none).
    pub records: Bytes,
    /// Where `records` lie in a segment file, when read from the local log.
    pub file: Option<FileSpan>,
    /// v11+: the replica the client should read this partition from instead (KIP-392; -1:
    /// here).
    pub preferred_read_replica: i32,
}

impl FetchResponse {
    /// A response that fails the whole fetch (a session error).
    pub fn error(code: i16) -> FetchResponse {
        FetchResponse {
            error_code: code,
            ..Default::default()
        }
    }

    /// The record bytes it carries: what a consumer quota charges.
    pub fn record_bytes(&self) -> usize {
        (self.topics.iter())
            .flat_map(|t| &t.partitions)
            .map(|p| p.records.len())
            .sum()
    }

    /// The response frame, length prefix and header included, as chunks.
    pub fn encode(&self, version: i16, correlation_id: i32) -> Result<Encoded, EncodeError> {
        if !VERSIONS.contains(&version) {
            return Err(EncodeError(format!("Fetch v{version} is not supported")));
        }
        if version < 7 && (self.session_id != 0 || self.error_code != 0) {
            return Err(EncodeError(format!(
                "Fetch v{version} carries no session or top-level error"
            )));
        }
        let flexible = version >= 12;
        let entries: usize = self.topics.iter().map(|t| t.partitions.len()).sum();
        let mut w = Writer::new(64 + self.topics.len() * 300 + entries * 48, flexible);
        w.buf.put_i32(0); // the length, patched at the end
        w.buf.put_i32(correlation_id);
        if ApiKey::Fetch.response_header_version(version) >= 1 {
            w.buf.put_u8(0); // no tagged fields
        }
        w.buf.put_i32(self.throttle_time_ms);
        if version >= 7 {
            w.buf.put_i16(self.error_code);
            w.buf.put_i32(self.session_id);
        }
        w.array_len(self.topics.len())?;
        for t in &self.topics {
            if version <= 12 {
                w.string(&t.name)?;
            } else {
                w.buf.put_slice(t.topic_id.as_bytes());
            }
            w.array_len(t.partitions.len())?;
            for p in &t.partitions {
                w.buf.put_i32(p.index);
                w.buf.put_i16(p.error_code);
                w.buf.put_i64(p.high_watermark);
                w.buf.put_i64(p.last_stable_offset);
                if version >= 5 {
                    w.buf.put_i64(p.log_start_offset);
                }
                let aborted = p.aborted.as_deref().unwrap_or_default();
                w.array_len(aborted.len())?;
                for (producer_id, first_offset) in aborted {
                    w.buf.put_i64(*producer_id);
                    w.buf.put_i64(*first_offset);
                    w.tagged_fields();
                }
                if version >= 11 {
                    w.buf.put_i32(p.preferred_read_replica);
                }
                w.bytes(&p.records, p.file.as_ref())?;
                w.tagged_fields();
            }
            w.tagged_fields();
        }
        w.tagged_fields();
        w.finish()
    }
}

/// Writes a frame as chunks: copied fields accumulate in `buf`; a large record batch ends the
/// chunk being written and becomes one of its own.
struct Writer {
    buf: BytesMut,
    /// The frame's first chunk, kept writable until its length prefix is patched.
    head: Option<BytesMut>,
    chunks: Vec<Bytes>,
    /// Chunks that also lie in a segment file, by index.
    files: Vec<(usize, FileSpan)>,
    flexible: bool,
}

impl Writer {
    fn new(capacity: usize, flexible: bool) -> Writer {
        Writer {
            buf: BytesMut::with_capacity(capacity),
            head: None,
            chunks: Vec::new(),
            files: Vec::new(),
            flexible,
        }
    }

    fn uvarint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.buf.put_u8((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.put_u8(v as u8);
    }

    /// An array's length: compact (length + 1, unsigned varint) in flexible versions.
    fn array_len(&mut self, n: usize) -> Result<(), EncodeError> {
        let n = i32::try_from(n).map_err(|_| EncodeError(format!("array of {n} entries")))?;
        if self.flexible {
            self.uvarint(n as u32 + 1);
        } else {
            self.buf.put_i32(n);
        }
        Ok(())
    }

    fn string(&mut self, s: &str) -> Result<(), EncodeError> {
        let n = i16::try_from(s.len()).map_err(|_| EncodeError("string too long".into()))?;
        if self.flexible {
            self.uvarint(n as u32 + 1);
        } else {
            self.buf.put_i16(n);
        }
        self.buf.put_slice(s.as_bytes());
        Ok(())
    }

    fn bytes(&mut self, b: &Bytes, file: Option<&FileSpan>) -> Result<(), EncodeError> {
        let n = i32::try_from(b.len()).map_err(|_| EncodeError("records too long".into()))?;
        if self.flexible {
            self.uvarint(n as u32 + 1);
        } else {
            self.buf.put_i32(n);
        }
        if b.len() < MIN_ZERO_COPY {
            self.buf.put_slice(b);
        } else {
            self.cut();
            if let Some(file) = file.filter(|f| f.len == b.len()) {
                self.files.push((self.chunks.len(), file.clone()));
            }
            self.chunks.push(b.clone());
        }
        Ok(())
    }

    fn tagged_fields(&mut self) {
        if self.flexible {
            self.buf.put_u8(0);
        }
    }

    /// Ends the chunk being written.
    fn cut(&mut self) {
        let written = self.buf.split();
        if self.head.is_none() {
            self.head = Some(written);
            self.chunks.push(Bytes::new()); // its place, filled by `finish`
        } else if !written.is_empty() {
            self.chunks.push(written.freeze());
        }
    }

    fn finish(mut self) -> Result<Encoded, EncodeError> {
        self.cut();
        let len: usize = self.chunks.iter().map(Bytes::len).sum::<usize>()
            + self.head.as_ref().map_or(0, BytesMut::len);
        let size = i32::try_from(len - 4).map_err(|_| EncodeError(format!("{len}-byte frame")))?;
        let mut head = self.head.take().expect("cut sets the head");
        head[..4].copy_from_slice(&size.to_be_bytes());
        self.chunks[0] = head.freeze();
        Ok(Encoded {
            chunks: self.chunks,
            files: self.files,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::fetch_response::{
        AbortedTransaction, FetchableTopicResponse, PartitionData,
    };
    use kafka_protocol::messages::{BrokerId, ResponseHeader, TopicName};
    use kafka_protocol::protocol::Encodable;

    /// The same response through the generic codec.
    fn codec(r: &FetchResponse, version: i16, correlation_id: i32) -> Vec<u8> {
        let body = kafka_protocol::messages::FetchResponse::default()
            .with_throttle_time_ms(r.throttle_time_ms)
            .with_error_code(r.error_code)
            .with_session_id(r.session_id)
            .with_responses(
                (r.topics.iter())
                    .map(|t| {
                        FetchableTopicResponse::default()
                            .with_topic(TopicName(t.name.clone()))
                            .with_topic_id(t.topic_id)
                            .with_partitions(
                                (t.partitions.iter())
                                    .map(|p| {
                                        PartitionData::default()
                                            .with_partition_index(p.index)
                                            .with_error_code(p.error_code)
                                            .with_high_watermark(p.high_watermark)
                                            .with_last_stable_offset(p.last_stable_offset)
                                            .with_log_start_offset(p.log_start_offset)
                                            .with_preferred_read_replica(BrokerId(
                                                match version >= 11 {
                                                    true => p.preferred_read_replica,
                                                    false => -1,
                                                },
                                            ))
                                            .with_aborted_transactions(Some(
                                                (p.aborted.iter().flatten())
                                                    .map(|(id, first)| {
                                                        AbortedTransaction::default()
                                                            .with_producer_id((*id).into())
                                                            .with_first_offset(*first)
                                                    })
                                                    .collect(),
                                            ))
                                            .with_records(Some(p.records.clone()))
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            );
        let mut b = BytesMut::new();
        b.put_i32(0);
        ResponseHeader::default()
            .with_correlation_id(correlation_id)
            .encode(&mut b, ApiKey::Fetch.response_header_version(version))
            .unwrap();
        body.encode(&mut b, version).unwrap();
        let size = (b.len() - 4) as i32;
        b[..4].copy_from_slice(&size.to_be_bytes());
        b.to_vec()
    }

    /// Responses of every shape: none, empty topics, small and large records (some 127/128
    /// and 16,383/16,384 bytes, where varint lengths grow), errors, long names.
    fn responses() -> Vec<FetchResponse> {
        let sizes = [
            0usize, 1, 126, 127, 128, 4095, 4096, 10_000, 16_383, 16_384, 70_000,
        ];
        let mut out = vec![FetchResponse::default()];
        for (k, names) in [1usize, 3, 200].into_iter().enumerate() {
            let topics = (0..names)
                .map(|t| Topic {
                    name: StrBytes::from_string("t".repeat(1 + (t * 37 + k) % 249)),
                    topic_id: uuid::Uuid::from_u128(t as u128 * 0x1234_5678_9abc + 1),
                    partitions: (0..(t * 7 + k) % 13)
                        .map(|i| Partition {
                            index: i as i32,
                            error_code: if i % 5 == 3 { 6 } else { 0 },
                            high_watermark: (i as i64) << 33,
                            last_stable_offset: i as i64 * 1000 - 1,
                            log_start_offset: -1 + i as i64,
                            aborted: (i % 3 == 1)
                                .then(|| (0..i as i64).map(|a| (a * 1_000_003, a << 20)).collect()),
                            records: Bytes::from(vec![i as u8; sizes[(t + i) % sizes.len()]]),
                            file: None,
                            preferred_read_replica: if i % 4 == 2 { i as i32 } else { -1 },
                        })
                        .collect(),
                })
                .collect();
            out.push(FetchResponse {
                throttle_time_ms: 0,
                error_code: 0,
                session_id: 0,
                topics,
            });
        }
        out
    }

    #[test]
    fn every_advertised_fetch_version_is_written() {
        let fetch = (crate::protocol::versions::SUPPORTED.iter())
            .find(|a| a.key == ApiKey::Fetch)
            .unwrap();
        assert_eq!(fetch.min..=fetch.max, VERSIONS);
    }

    #[test]
    fn the_frame_is_what_the_codec_encodes() {
        for r in responses() {
            for version in VERSIONS {
                let chunks = r.encode(version, 0x0102_0304).unwrap().chunks;
                let joined: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
                assert_eq!(joined, codec(&r, version, 0x0102_0304), "v{version}");
                assert!(
                    chunks.iter().all(|c| !c.is_empty()),
                    "v{version}: an empty chunk"
                );
            }
        }
        let with_session = FetchResponse {
            throttle_time_ms: 1234,
            error_code: 0,
            session_id: 77,
            topics: responses().pop().unwrap().topics,
        };
        for version in 7..=16 {
            let joined: Vec<u8> = (with_session.encode(version, 5).unwrap().chunks.iter())
                .flat_map(|c| c.iter().copied())
                .collect();
            assert_eq!(joined, codec(&with_session, version, 5), "v{version}");
        }
        for version in 7..=16 {
            let e = FetchResponse::error(70);
            let joined: Vec<u8> = (e.encode(version, 9).unwrap().chunks.iter())
                .flat_map(|c| c.iter().copied())
                .collect();
            assert_eq!(joined, codec(&e, version, 9), "v{version}");
        }
    }

    #[test]
    fn large_batches_are_referenced_not_copied() {
        let big = Bytes::from(vec![7u8; 10_000]);
        let small = Bytes::from(vec![1u8; 10]);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), &big).unwrap();
        let file = std::sync::Arc::new(std::fs::File::open(dir.path().join("f")).unwrap());
        let span = |len| FileSpan::unleased(file.clone(), 0, len);
        let partition = |index, records: &Bytes| Partition {
            index,
            error_code: 0,
            high_watermark: 1,
            last_stable_offset: 1,
            log_start_offset: 0,
            aborted: None,
            records: records.clone(),
            file: Some(span(records.len())),
            preferred_read_replica: -1,
        };
        let r = FetchResponse {
            throttle_time_ms: 0,
            error_code: 0,
            session_id: 0,
            topics: vec![Topic {
                name: StrBytes::from_static_str("t"),
                topic_id: uuid::Uuid::nil(),
                partitions: vec![partition(0, &big), partition(1, &small), partition(2, &big)],
            }],
        };
        for version in VERSIONS {
            let Encoded { chunks, files } = r.encode(version, 1).unwrap();
            // The large batches' files, at their chunks; the small one is copied.
            let at: Vec<usize> = files.iter().map(|(i, _)| *i).collect();
            assert_eq!(at, vec![1, 3], "v{version}");
            let referenced = chunks.iter().filter(|c| c.as_ptr() == big.as_ptr()).count();
            assert_eq!(referenced, 2, "v{version}");
            // Below v12 nothing follows the last partition's records.
            let tail = usize::from(version >= 12);
            assert_eq!(
                chunks.len(),
                4 + tail,
                "v{version}: head, big, middle, big, tail"
            );
        }
    }

    #[test]
    fn what_a_version_cannot_carry_is_an_error() {
        assert!(FetchResponse::default().encode(3, 1).is_err());
        assert!(FetchResponse::default().encode(18, 1).is_err());
        assert!(FetchResponse::error(70).encode(6, 1).is_err());
        let session = FetchResponse {
            session_id: 1,
            ..Default::default()
        };
        assert!(session.encode(6, 1).is_err());
        assert!(session.encode(7, 1).is_ok());
    }
}
