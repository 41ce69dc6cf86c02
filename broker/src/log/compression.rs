//! Broker-side recompression: a topic whose `compression.type` names a codec stores every batch
//! under that codec, whatever its producer sent, as Kafka does.
//!
//! Invariants:
//! - a batch already under the topic's codec is stored as sent: no byte is copied or touched
//!   (the common case, a producer configured like its topic, costs nothing);
//! - a batch under another codec is decompressed within the bound every decompression has
//!   ([`records::MAX_UNCOMPRESSED_BATCH_BYTES`]), its records walked (their count and lengths
//!   checked), and the same record bytes written under the topic's codec; the header keeps
//!   everything else (base offset, producer id, epoch and sequence, timestamps, record count),
//!   so idempotence, transactions and offsets see the batch the producer sent;
//! - control batches (transaction markers, written by the broker) are never rewritten.

use std::io::Write;

use bytes::Bytes;

use super::batch::{self, BatchHeader, HEADER_LEN, LOG_OVERHEAD};
use super::records::{self, corrupt};
use super::LogError;

/// A batch codec, by its Kafka name and attribute bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Uncompressed,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Codec {
    /// A `compression.type` value: `Ok(None)` for `producer` (batches kept as sent).
    pub fn parse(name: &str) -> Result<Option<Codec>, String> {
        Ok(Some(match name {
            "producer" => return Ok(None),
            "uncompressed" => Codec::Uncompressed,
            "gzip" => Codec::Gzip,
            "snappy" => Codec::Snappy,
            "lz4" => Codec::Lz4,
            "zstd" => Codec::Zstd,
            _ => {
                return Err(
                    "must be one of producer, uncompressed, gzip, snappy, lz4, zstd".to_string(),
                )
            }
        }))
    }

    /// The attribute bits of a batch under this codec.
    fn id(self) -> i16 {
        match self {
            Codec::Uncompressed => 0,
            Codec::Gzip => 1,
            Codec::Snappy => 2,
            Codec::Lz4 => 3,
            Codec::Zstd => 4,
        }
    }

    /// The `compression.<codec>.level` key of this codec, its range and Kafka's default, for
    /// the codecs that have levels (KIP-390).
    pub fn level_key(self) -> Option<(&'static str, std::ops::RangeInclusive<i32>, i32)> {
        match self {
            // -1: the library's default (6), as Java's Deflater.DEFAULT_COMPRESSION.
            Codec::Gzip => Some(("compression.gzip.level", -1..=9, -1)),
            Codec::Lz4 => Some(("compression.lz4.level", 1..=17, 9)),
            // zstd's fastest negative levels down to ZSTD_minCLevel().
            Codec::Zstd => Some(("compression.zstd.level", -131_072..=22, 3)),
            Codec::Uncompressed | Codec::Snappy => None,
        }
    }
}

/// Checks a `compression.<codec>.level` value against Kafka's range for the codec.
pub fn check_level(codec: Codec, value: i64) -> Result<(), String> {
    let Some((_, range, _)) = codec.level_key() else {
        return Ok(());
    };
    // gzip: -1 (the default) or 1..=9; 0 would store without compressing.
    let ok =
        i32::try_from(value).is_ok_and(|v| range.contains(&v) && !(codec == Codec::Gzip && v == 0));
    if ok {
        Ok(())
    } else if codec == Codec::Gzip {
        Err("must be -1 (the default) or 1..=9".to_string())
    } else {
        Err(format!("must be in {}..={}", range.start(), range.end()))
    }
}

/// What a topic stores its batches as: a codec and, for gzip, lz4 and zstd, its level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub codec: Codec,
    pub level: i32,
}

/// The batch under `target`'s codec, or `None` when it is stored as sent (already that
/// codec, or a control batch).
pub fn recompress(
    batch: &Bytes,
    header: &BatchHeader,
    target: Target,
) -> Result<Option<Bytes>, LogError> {
    if header.is_control() || header.codec() == target.codec.id() {
        return Ok(None);
    }
    let section = records::section(batch, header)?;
    records::for_each(&section, header, |_| {})?;
    let mut out = Vec::with_capacity(HEADER_LEN + section.len());
    out.extend_from_slice(&batch[..HEADER_LEN]);
    let written = match target.codec {
        Codec::Uncompressed => out.write_all(&section),
        Codec::Gzip => {
            let level = match target.level {
                -1 => flate2::Compression::default(),
                l => flate2::Compression::new(l as u32),
            };
            let mut enc = flate2::write::GzEncoder::new(&mut out, level);
            enc.write_all(&section)
                .and_then(|()| enc.finish().map(drop))
        }
        // Raw snappy, as librdkafka writes it; every client reads raw and xerial-framed.
        Codec::Snappy => snap::raw::Encoder::new()
            .compress_vec(&section)
            .map(|c| out.extend_from_slice(&c))
            .map_err(std::io::Error::other),
        Codec::Lz4 => lz4::EncoderBuilder::new()
            .level(target.level as u32)
            .block_mode(lz4::BlockMode::Independent)
            .build(&mut out)
            .and_then(|mut enc| {
                enc.write_all(&section)?;
                enc.finish().1
            }),
        Codec::Zstd => zstd::stream::copy_encode(&section[..], &mut out, target.level),
    };
    written.map_err(|e| corrupt(header, &format!("cannot recompress: {e}")))?;
    let attributes = (header.attributes & !0x7) | target.codec.id();
    out[batch::field::ATTRIBUTES..batch::field::ATTRIBUTES + 2]
        .copy_from_slice(&attributes.to_be_bytes());
    let batch_length = i32::try_from(out.len() - LOG_OVERHEAD)
        .map_err(|_| corrupt(header, "recompressed beyond 2 GiB"))?;
    out[batch::field::BATCH_LENGTH..batch::field::BATCH_LENGTH + 4]
        .copy_from_slice(&batch_length.to_be_bytes());
    let crc = batch::compute_crc(&out);
    out[batch::field::CRC..batch::field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(Some(Bytes::from(out)))
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
        TimestampType,
    };

    use super::*;

    fn records() -> Vec<Record> {
        (0..50)
            .map(|i| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: 7,
                producer_epoch: 3,
                timestamp_type: TimestampType::Creation,
                offset: i,
                sequence: 100 + i as i32,
                timestamp: 1_000 + (i * 37) % 11,
                key: (i % 5 != 0).then(|| Bytes::from(format!("key-{i}"))),
                value: Some(Bytes::from(format!(
                    "value {i} {}",
                    "abc".repeat(i as usize)
                ))),
                headers: Default::default(),
            })
            .collect()
    }

    fn encode(compression: Compression) -> Bytes {
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression,
        };
        RecordBatchEncoder::encode(&mut buf, &records(), &options).unwrap();
        buf.freeze()
    }

    fn decode(batch: &Bytes) -> Vec<Record> {
        let mut b = batch.clone();
        RecordBatchDecoder::decode(&mut b).unwrap().records
    }

    const SOURCES: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    #[test]
    fn every_codec_becomes_every_other_with_the_same_records_and_header() {
        let targets = [
            (Codec::Uncompressed, 0),
            (Codec::Gzip, -1),
            (Codec::Gzip, 9),
            (Codec::Snappy, 0),
            (Codec::Lz4, 1),
            (Codec::Lz4, 17),
            (Codec::Zstd, -5),
            (Codec::Zstd, 19),
        ];
        for source in SOURCES {
            let batch = encode(source);
            let header = batch::validate(&batch).unwrap();
            for (codec, level) in targets {
                let target = Target { codec, level };
                let Some(out) = recompress(&batch, &header, target).unwrap() else {
                    assert_eq!(header.codec(), codec.id(), "{source:?} → {codec:?}");
                    continue;
                };
                let h = batch::validate(&out).expect("a valid batch with its CRC");
                assert_eq!(h.codec(), codec.id());
                assert_eq!(
                    (h.base_offset, h.last_offset_delta, h.record_count),
                    (
                        header.base_offset,
                        header.last_offset_delta,
                        header.record_count
                    )
                );
                assert_eq!(
                    (h.producer_id, h.producer_epoch, h.base_sequence),
                    (
                        header.producer_id,
                        header.producer_epoch,
                        header.base_sequence
                    )
                );
                assert_eq!(
                    (h.base_timestamp, h.max_timestamp),
                    (header.base_timestamp, header.max_timestamp)
                );
                assert_eq!(h.attributes & !0x7, header.attributes & !0x7);
                assert_eq!(
                    decode(&out),
                    records(),
                    "{source:?} → {codec:?} level {level}"
                );
            }
        }
    }

    #[test]
    fn a_batch_already_in_the_codec_or_a_control_batch_is_stored_as_sent() {
        let batch = encode(Compression::Zstd);
        let header = batch::validate(&batch).unwrap();
        let zstd = Target {
            codec: Codec::Zstd,
            level: 19,
        };
        assert!(recompress(&batch, &header, zstd).unwrap().is_none());
        let marker =
            crate::log::control::marker_batch(crate::log::control::Marker::Commit, 7, 3, 5, 1_000);
        let h = batch::validate(&marker).unwrap();
        assert!(h.is_control());
        let gzip = Target {
            codec: Codec::Gzip,
            level: -1,
        };
        assert!(recompress(&marker, &h, gzip).unwrap().is_none());
    }

    #[test]
    fn a_batch_whose_records_do_not_parse_is_refused_not_rewritten() {
        let batch = encode(Compression::Gzip);
        let mut bad = BytesMut::from(&batch[..]);
        // One record more than the section holds: its walk must fail.
        let count = i32::from_be_bytes(bad[57..61].try_into().unwrap()) + 1;
        bad[57..61].copy_from_slice(&count.to_be_bytes());
        let crc = batch::compute_crc(&bad);
        bad[batch::field::CRC..batch::field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        let bad = bad.freeze();
        let header = BatchHeader::parse(&bad).unwrap();
        let target = Target {
            codec: Codec::Lz4,
            level: 9,
        };
        assert!(recompress(&bad, &header, target).is_err());
    }

    #[test]
    fn codec_names_and_levels_are_kafkas() {
        assert_eq!(Codec::parse("producer"), Ok(None));
        assert_eq!(Codec::parse("zstd"), Ok(Some(Codec::Zstd)));
        assert!(Codec::parse("brotli").is_err());
        assert!(Codec::parse("none").is_err(), "Kafka calls it uncompressed");
        for (codec, ok, bad) in [
            (Codec::Gzip, [-1, 1, 9], [0, 10, -2]),
            (Codec::Lz4, [1, 9, 17], [0, 18, -1]),
            (Codec::Zstd, [-131_072, 3, 22], [23, -131_073, i64::MAX]),
        ] {
            for v in ok {
                assert_eq!(check_level(codec, v), Ok(()), "{codec:?} {v}");
            }
            for v in bad {
                assert!(check_level(codec, v).is_err(), "{codec:?} {v}");
            }
        }
    }
}
