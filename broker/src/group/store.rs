//! Committed offsets as records of the internal topic `__consumer_offsets`, in Kafka's own
//! binary layout (OffsetCommitKey v1, OffsetCommitValue v3), so the topic reads the same as a
//! Kafka cluster's. A record with a null value is a tombstone (offset deleted).
//!
//! Invariant: an offset is acknowledged to a client only after its record is in the log; the
//! in-memory table is rebuilt from the log on start and is never ahead of it.

use bytes::{Buf, BufMut, Bytes, BytesMut};

pub const TOPIC: &str = "__consumer_offsets";
pub const PARTITIONS: usize = 50;

const OFFSET_KEY_VERSION: i16 = 1;
const OFFSET_VALUE_VERSION: i16 = 3;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp: i64,
}

/// A decoded record of `__consumer_offsets`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Offset {
        group: String,
        topic: String,
        partition: i32,
        value: Option<CommittedOffset>,
    },
    /// Group metadata (key version 2) and anything newer: not interpreted yet.
    Other,
}

/// The partition of `__consumer_offsets` holding a group: Kafka's
/// `abs(groupId.hashCode) % partitions`, with Java's String hash over UTF-16 units.
pub fn partition_for(group: &str) -> i32 {
    let h = group
        .encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32));
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % PARTITIONS as i32
}

fn put_str(b: &mut BytesMut, s: &str) {
    b.put_i16(s.len() as i16);
    b.put_slice(s.as_bytes());
}

fn get_str(b: &mut Bytes) -> Option<String> {
    if b.remaining() < 2 {
        return None;
    }
    let len = b.get_i16();
    if len < 0 || b.remaining() < len as usize {
        return None;
    }
    String::from_utf8(b.split_to(len as usize).to_vec()).ok()
}

pub fn offset_key(group: &str, topic: &str, partition: i32) -> Bytes {
    let mut b = BytesMut::with_capacity(8 + group.len() + topic.len());
    b.put_i16(OFFSET_KEY_VERSION);
    put_str(&mut b, group);
    put_str(&mut b, topic);
    b.put_i32(partition);
    b.freeze()
}

pub fn offset_value(v: &CommittedOffset) -> Bytes {
    let mut b = BytesMut::with_capacity(26 + v.metadata.len());
    b.put_i16(OFFSET_VALUE_VERSION);
    b.put_i64(v.offset);
    b.put_i32(v.leader_epoch);
    put_str(&mut b, &v.metadata);
    b.put_i64(v.commit_timestamp);
    b.freeze()
}

/// Decodes one record; `None` when it is malformed (logged and skipped by the caller).
pub fn decode(key: Option<Bytes>, value: Option<Bytes>) -> Option<Entry> {
    let mut key = key?;
    if key.remaining() < 2 {
        return None;
    }
    let version = key.get_i16();
    if version > 1 {
        return Some(Entry::Other);
    }
    let group = get_str(&mut key)?;
    let topic = get_str(&mut key)?;
    if key.remaining() < 4 {
        return None;
    }
    let partition = key.get_i32();
    let value = match value {
        None => None,
        Some(mut v) => {
            if v.remaining() < 2 {
                return None;
            }
            let version = v.get_i16();
            if v.remaining() < 8 {
                return None;
            }
            let offset = v.get_i64();
            let leader_epoch = if version >= 3 {
                if v.remaining() < 4 {
                    return None;
                }
                v.get_i32()
            } else {
                -1
            };
            let metadata = get_str(&mut v)?;
            if v.remaining() < 8 {
                return None;
            }
            let commit_timestamp = v.get_i64();
            Some(CommittedOffset {
                offset,
                leader_epoch,
                metadata,
                commit_timestamp,
            })
        }
    };
    Some(Entry::Offset {
        group,
        topic,
        partition,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_records_round_trip_and_tombstones_decode_as_deletes() {
        let v = CommittedOffset {
            offset: 42,
            leader_epoch: 3,
            metadata: "m".into(),
            commit_timestamp: 7,
        };
        let e = decode(Some(offset_key("g", "t", 5)), Some(offset_value(&v))).unwrap();
        assert_eq!(
            e,
            Entry::Offset {
                group: "g".into(),
                topic: "t".into(),
                partition: 5,
                value: Some(v)
            }
        );
        let e = decode(Some(offset_key("g", "t", 5)), None).unwrap();
        assert!(matches!(e, Entry::Offset { value: None, .. }));
        assert!(decode(Some(Bytes::from_static(&[0, 1, 0, 9])), None).is_none());
        assert!(decode(None, None).is_none());
    }

    #[test]
    fn group_partitions_match_kafkas_hash() {
        // Java: "a".hashCode() == 97, "ab".hashCode() == 3105, "polygenelubricants" hashes to
        // Integer.MIN_VALUE, which Kafka's Utils.abs maps to 0.
        assert_eq!(partition_for("a"), 47);
        assert_eq!(partition_for("ab"), 5);
        assert_eq!(partition_for("polygenelubricants"), 0);
        assert!((0..50).contains(&partition_for("ünïcode-grüppe")));
    }
}
