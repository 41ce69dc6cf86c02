//! Records of the internal topic `__consumer_offsets`, in Kafka's own binary layout so the
//! topic reads the same as a Kafka cluster's:
//!
//! - committed offsets: OffsetCommitKey v1 (group, topic, partition) → OffsetCommitValue v3;
//! - group metadata: GroupMetadataKey v2 (group) → GroupMetadataValue v3 (protocol type,
//!   generation, protocol, leader, state timestamp, and per member its ids, client, timeouts,
//!   subscription and assignment). Values v0–v4 are read (v4 is Kafka's first flexible
//!   version); v3 is written, as Kafka does.
//!
//! - a KIP-848 consumer group's epochs, members and assignments: key versions 3–8, laid out
//!   in [`super::consumer_store`]. Later key versions (share and streams groups) are skipped.
//!
//! A record with a null value is a tombstone (offset or group deleted). Every integer is
//! big-endian; strings are an i16 length and UTF-8 bytes (-1: null), byte arrays an i32 length.
//!
//! Invariant: an offset or a completed generation is acknowledged to clients only after its
//! record is in the log; the in-memory state is rebuilt from the log on start and is never
//! ahead of it.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::consumer_store;
use super::wire::{put_str, Reader};

pub const TOPIC: &str = "__consumer_offsets";
pub const PARTITIONS: usize = 50;

const OFFSET_KEY_VERSION: i16 = 1;
const OFFSET_VALUE_VERSION: i16 = 3;
const GROUP_KEY_VERSION: i16 = 2;
/// Kafka writes v3 (the newest non-flexible version) since 2.3.
const GROUP_VALUE_VERSION: i16 = 3;
/// Newest GroupMetadataValue version understood.
const GROUP_VALUE_MAX_VERSION: i16 = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp: i64,
}

/// A group's metadata as of its last completed generation (or of becoming empty): Kafka's
/// GroupMetadataValue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadata {
    pub protocol_type: String,
    pub generation: i32,
    /// The selected protocol (assignor); `None` when the group is empty.
    pub protocol: Option<String>,
    pub leader: Option<String>,
    /// Wall-clock ms of the state change the record was written for (-1: unknown).
    pub current_state_timestamp: i64,
    pub members: Vec<MemberMetadata>,
}

/// One member in a [`GroupMetadata`] record. Timeouts are in ms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberMetadata {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout: i32,
    pub session_timeout: i32,
    /// The member's metadata for the selected protocol.
    pub subscription: Bytes,
    pub assignment: Bytes,
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
    /// Group metadata (key version 2); `None` is a tombstone (the group was deleted).
    Group {
        group: String,
        value: Option<GroupMetadata>,
    },
    /// A record of a KIP-848 consumer group (key versions 3–8, [`super::consumer_store`]);
    /// `value: None` is a tombstone.
    Consumer {
        group: String,
        key: consumer_store::Key,
        value: Option<consumer_store::Value>,
    },
    /// Key versions above 8 (Kafka's records for share and streams groups): not interpreted.
    Other,
}

/// The partition of `__consumer_offsets` holding a group: Kafka's
/// `abs(groupId.hashCode) % partitions`, with Java's String hash over UTF-16 units.
pub fn partition_for(group: &str) -> i32 {
    partition_of(group, PARTITIONS)
}

/// Kafka's partition of a coordinator key among `partitions`: Java's `String.hashCode`,
/// made non-negative as Kafka's `Utils.abs` does.
pub fn partition_of(key: &str, partitions: usize) -> i32 {
    let h = key
        .encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32));
    let abs = if h == i32::MIN { 0 } else { h.abs() };
    abs % partitions as i32
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

pub fn group_key(group: &str) -> Bytes {
    let mut b = BytesMut::with_capacity(4 + group.len());
    b.put_i16(GROUP_KEY_VERSION);
    put_str(&mut b, group);
    b.freeze()
}

/// GroupMetadataValue v3; `None` when a string or byte field is too long for its length
/// prefix (Kafka fails such a write too).
pub fn group_value(g: &GroupMetadata) -> Option<Bytes> {
    fn string(b: &mut BytesMut, s: Option<&str>) -> Option<()> {
        match s {
            None => b.put_i16(-1),
            Some(s) => {
                b.put_i16(i16::try_from(s.len()).ok()?);
                b.put_slice(s.as_bytes());
            }
        }
        Some(())
    }
    fn bytes(b: &mut BytesMut, v: &[u8]) -> Option<()> {
        b.put_i32(i32::try_from(v.len()).ok()?);
        b.put_slice(v);
        Some(())
    }
    let size: usize = g
        .members
        .iter()
        .map(|m| {
            32 + m.member_id.len()
                + m.group_instance_id.as_ref().map_or(0, String::len)
                + m.client_id.len()
                + m.client_host.len()
                + m.subscription.len()
                + m.assignment.len()
        })
        .sum();
    let mut b = BytesMut::with_capacity(32 + g.protocol_type.len() + size);
    b.put_i16(GROUP_VALUE_VERSION);
    string(&mut b, Some(&g.protocol_type))?;
    b.put_i32(g.generation);
    string(&mut b, g.protocol.as_deref())?;
    string(&mut b, g.leader.as_deref())?;
    b.put_i64(g.current_state_timestamp);
    b.put_i32(i32::try_from(g.members.len()).ok()?);
    for m in &g.members {
        string(&mut b, Some(&m.member_id))?;
        string(&mut b, m.group_instance_id.as_deref())?;
        string(&mut b, Some(&m.client_id))?;
        string(&mut b, Some(&m.client_host))?;
        b.put_i32(m.rebalance_timeout);
        b.put_i32(m.session_timeout);
        bytes(&mut b, &m.subscription)?;
        bytes(&mut b, &m.assignment)?;
    }
    Some(b.freeze())
}

/// Decodes one record; `None` when it is malformed (logged and skipped by the caller).
pub fn decode(key: Option<Bytes>, value: Option<Bytes>) -> Option<Entry> {
    let mut key = key?;
    if key.remaining() < 2 {
        return None;
    }
    match key.get_i16() {
        0 | 1 => decode_offset(key, value),
        GROUP_KEY_VERSION => {
            let group = get_str(&mut key)?;
            let value = match value {
                None => None,
                Some(v) => Some(decode_group_value(v)?),
            };
            Some(Entry::Group { group, value })
        }
        v @ 3..=8 => {
            let (group, key, value) = consumer_store::decode(v, key, value)?;
            Some(Entry::Consumer { group, key, value })
        }
        v if v > 8 => Some(Entry::Other),
        _ => None,
    }
}

fn decode_offset(mut key: Bytes, value: Option<Bytes>) -> Option<Entry> {
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

/// GroupMetadataValue v0–v4. Fields a version lacks get Kafka's defaults: the rebalance timeout
/// is the session timeout (v0), the state timestamp -1 (v0–1), no instance id (v0–2).
fn decode_group_value(mut v: Bytes) -> Option<GroupMetadata> {
    if v.remaining() < 2 {
        return None;
    }
    let version = v.get_i16();
    if !(0..=GROUP_VALUE_MAX_VERSION).contains(&version) {
        return None;
    }
    let mut r = Reader::classic(v);
    r.flexible = version >= 4;
    let protocol_type = r.string()?;
    let generation = r.i32()?;
    let protocol = r.nullable_string()?;
    let leader = r.nullable_string()?;
    let current_state_timestamp = if version >= 2 { r.i64()? } else { -1 };
    let count = r.array_len()?;
    let mut members = Vec::with_capacity(count.min(r.remaining() / 16));
    for _ in 0..count {
        let member_id = r.string()?;
        let group_instance_id = if version >= 3 {
            r.nullable_string()?
        } else {
            None
        };
        let client_id = r.string()?;
        let client_host = r.string()?;
        let rebalance_timeout = if version >= 1 { Some(r.i32()?) } else { None };
        let session_timeout = r.i32()?;
        let subscription = r.bytes()?;
        let assignment = r.bytes()?;
        r.tagged_fields()?;
        members.push(MemberMetadata {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout: rebalance_timeout.unwrap_or(session_timeout),
            session_timeout,
            subscription,
            assignment,
        });
    }
    r.tagged_fields()?;
    Some(GroupMetadata {
        protocol_type,
        generation,
        protocol,
        leader,
        current_state_timestamp,
        members,
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

    fn unhex(s: &str) -> Bytes {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect::<Vec<u8>>()
            .into()
    }

    /// Records written by a Kafka cluster (GroupMetadataValue v3, from a librdkafka consumer
    /// group), published as test fixtures 02 and 05 of github.com/kafkesc/konsumer_offsets
    /// (MIT OR Apache-2.0): a stable group of one member with partitions 0–2 of `t01`, and the
    /// same group after it became empty.
    const KAFKA_GROUP_KEY: &str = "0002001b6b61666b6573632d646576636c75737465722d67726f75702d6964";
    const KAFKA_STABLE_VALUE: &str = "00030008636f6e73756d657200000003000572616e6765002c72646b61666b612d39663466633162302d316437642d343437312d393065382d653066363466336339643966000001857edafbc300000001002c72646b61666b612d39663466633162302d316437642d343437312d393065382d653066363466336339643966ffff000772646b61666b61000b2f3137322e31382e302e31000493e00000afc800000013000100000001000374303100000000000000000000001f00000000000100037430310000000300000000000000010000000200000000";
    const KAFKA_EMPTY_VALUE: &str =
        "00030008636f6e73756d657200000008ffffffff000001857ee12e3800000000";

    fn kafka_stable_group() -> GroupMetadata {
        let member = "rdkafka-9f4fc1b0-1d7d-4471-90e8-e0f64f3c9d9f";
        GroupMetadata {
            protocol_type: "consumer".into(),
            generation: 3,
            protocol: Some("range".into()),
            leader: Some(member.into()),
            current_state_timestamp: 1_672_870_558_659,
            members: vec![MemberMetadata {
                member_id: member.into(),
                group_instance_id: None,
                client_id: "rdkafka".into(),
                client_host: "/172.18.0.1".into(),
                rebalance_timeout: 300_000,
                session_timeout: 45_000,
                // ConsumerProtocolSubscription v1: topics [t01], empty user data, no owned
                // partitions.
                subscription: unhex("00010000000100037430310000000000000000"),
                // ConsumerProtocolAssignment v0: t01 → [0, 1, 2], empty user data.
                assignment: unhex("00000000000100037430310000000300000000000000010000000200000000"),
            }],
        }
    }

    #[test]
    fn group_metadata_matches_records_written_by_kafka_byte_for_byte() {
        let group = "kafkesc-devcluster-group-id";
        assert_eq!(group_key(group), unhex(KAFKA_GROUP_KEY));
        let stable = kafka_stable_group();
        assert_eq!(
            decode(
                Some(unhex(KAFKA_GROUP_KEY)),
                Some(unhex(KAFKA_STABLE_VALUE))
            ),
            Some(Entry::Group {
                group: group.into(),
                value: Some(stable.clone())
            })
        );
        assert_eq!(group_value(&stable).unwrap(), unhex(KAFKA_STABLE_VALUE));

        let empty = GroupMetadata {
            protocol_type: "consumer".into(),
            generation: 8,
            protocol: None,
            leader: None,
            current_state_timestamp: 1_672_870_964_792,
            members: vec![],
        };
        assert_eq!(
            decode(Some(unhex(KAFKA_GROUP_KEY)), Some(unhex(KAFKA_EMPTY_VALUE))),
            Some(Entry::Group {
                group: group.into(),
                value: Some(empty.clone())
            })
        );
        assert_eq!(group_value(&empty).unwrap(), unhex(KAFKA_EMPTY_VALUE));
    }

    #[test]
    fn group_metadata_round_trips_and_tombstones_decode_as_deletes() {
        let mut g = kafka_stable_group();
        g.members.push(MemberMetadata {
            member_id: "static-1".into(),
            group_instance_id: Some("instance-ü".into()),
            client_id: String::new(),
            client_host: "/10.0.0.2".into(),
            rebalance_timeout: 1,
            session_timeout: 2,
            subscription: Bytes::new(),
            assignment: Bytes::from_static(b"\x00\x01"),
        });
        let value = group_value(&g).unwrap();
        assert_eq!(
            decode(Some(group_key("g")), Some(value.clone())),
            Some(Entry::Group {
                group: "g".into(),
                value: Some(g.clone())
            })
        );
        assert_eq!(
            decode(Some(group_key("g")), None),
            Some(Entry::Group {
                group: "g".into(),
                value: None
            })
        );
        // Truncated anywhere: malformed, never a partial group.
        for cut in 0..value.len() {
            assert_eq!(
                decode(Some(group_key("g")), Some(value.slice(..cut))),
                None,
                "value cut at {cut}"
            );
        }
        let mut long = g.clone();
        long.members[0].client_id = "x".repeat(40_000);
        assert_eq!(group_value(&long), None, "a string over i16::MAX bytes");
    }

    #[test]
    fn older_and_flexible_group_metadata_versions_decode() {
        // v0: no rebalance timeout (it is the session timeout), no state timestamp.
        let mut v0 = BytesMut::new();
        v0.put_i16(0);
        put_str(&mut v0, "consumer");
        v0.put_i32(5);
        put_str(&mut v0, "range");
        put_str(&mut v0, "m1");
        v0.put_i32(1);
        put_str(&mut v0, "m1");
        put_str(&mut v0, "c1");
        put_str(&mut v0, "/h");
        v0.put_i32(10_000);
        v0.put_i32(1);
        v0.put_u8(7);
        v0.put_i32(0);
        let Some(Entry::Group { value: Some(g), .. }) =
            decode(Some(group_key("g")), Some(v0.freeze()))
        else {
            panic!("v0 did not decode")
        };
        assert_eq!((g.generation, g.current_state_timestamp), (5, -1));
        let m = &g.members[0];
        assert_eq!((m.rebalance_timeout, m.session_timeout), (10_000, 10_000));
        assert_eq!((&m.subscription[..], m.assignment.len()), (&[7u8][..], 0));

        // v4 (flexible): compact strings/bytes/arrays (length + 1), tagged fields.
        let mut v4 = BytesMut::new();
        v4.put_i16(4);
        let compact = |b: &mut BytesMut, s: Option<&[u8]>| match s {
            None => b.put_u8(0),
            Some(s) => {
                b.put_u8(s.len() as u8 + 1);
                b.put_slice(s);
            }
        };
        compact(&mut v4, Some(b"consumer"));
        v4.put_i32(9);
        compact(&mut v4, Some(b"range"));
        compact(&mut v4, Some(b"m1"));
        v4.put_i64(1234);
        v4.put_u8(2); // one member
        compact(&mut v4, Some(b"m1"));
        compact(&mut v4, None);
        compact(&mut v4, Some(b"c1"));
        compact(&mut v4, Some(b"/h"));
        v4.put_i32(300);
        v4.put_i32(100);
        compact(&mut v4, Some(b"s"));
        compact(&mut v4, Some(b"a"));
        v4.put_slice(&[1, 5, 2, 0xab, 0xcd]); // one unknown tagged field (tag 5, 2 bytes)
        v4.put_u8(0); // no tagged fields on the value
        let Some(Entry::Group { value: Some(g), .. }) =
            decode(Some(group_key("g")), Some(v4.freeze()))
        else {
            panic!("v4 did not decode")
        };
        assert_eq!(
            g,
            GroupMetadata {
                protocol_type: "consumer".into(),
                generation: 9,
                protocol: Some("range".into()),
                leader: Some("m1".into()),
                current_state_timestamp: 1234,
                members: vec![MemberMetadata {
                    member_id: "m1".into(),
                    group_instance_id: None,
                    client_id: "c1".into(),
                    client_host: "/h".into(),
                    rebalance_timeout: 300,
                    session_timeout: 100,
                    subscription: Bytes::from_static(b"s"),
                    assignment: Bytes::from_static(b"a"),
                }],
            }
        );
    }

    #[test]
    fn newer_record_types_are_skipped_and_bad_keys_are_malformed() {
        // A share group's metadata (key version 11): skipped.
        let mut k = BytesMut::new();
        k.put_i16(11);
        put_str(&mut k, "g");
        assert_eq!(
            decode(Some(k.freeze()), Some(Bytes::new())),
            Some(Entry::Other)
        );
        assert_eq!(decode(Some(Bytes::from_static(&[0xff, 0xff])), None), None);
        let mut bad_version = BytesMut::new();
        bad_version.put_i16(5);
        assert_eq!(
            decode(Some(group_key("g")), Some(bad_version.freeze())),
            None
        );
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
