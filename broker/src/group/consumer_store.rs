//! The records of a KIP-848 consumer group in `__consumer_offsets`, in Kafka 4.0's own layout
//! (key versions 3–8), so that the topic reads like a Kafka cluster's and a group survives a
//! coordinator move or restart with its epochs and assignments:
//!
//! | key | record (key fields) | value |
//! |---|---|---|
//! | 3 | ConsumerGroupMetadata (group) | group epoch |
//! | 4 | ConsumerGroupPartitionMetadata (group) | the subscribed topics' ids and partition counts the target was computed from |
//! | 5 | ConsumerGroupMemberMetadata (group, member) | instance/rack/client ids, subscription, rebalance timeout |
//! | 6 | ConsumerGroupTargetAssignmentMetadata (group) | assignment epoch |
//! | 7 | ConsumerGroupTargetAssignmentMember (group, member) | the member's partitions in the target |
//! | 8 | ConsumerGroupCurrentMemberAssignment (group, member) | member epoch, previous epoch, state, owned and revoking partitions |
//!
//! Keys are non-flexible (an i16 version naming the record, then i16-length strings); values
//! are version 0 of flexible messages (compact lengths, tagged fields, read and skipped). A
//! null value is a tombstone. Decoding never trusts a declared length or count beyond the
//! bytes present.

use std::collections::BTreeSet;

use bytes::{BufMut, Bytes, BytesMut};
use uuid::Uuid;

use super::wire::{put_str, Reader, Writer};

/// A partition by topic id.
type Tp = (Uuid, i32);

const GROUP_EPOCH: i16 = 3;
const PARTITIONS: i16 = 4;
const MEMBER: i16 = 5;
const TARGET_EPOCH: i16 = 6;
const TARGET: i16 = 7;
const CURRENT: i16 = 8;
/// The only value version of every record here.
const VALUE_VERSION: i16 = 0;

/// Which record of a group (the group id is beside it).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    GroupEpoch,
    Partitions,
    Member(String),
    TargetEpoch,
    Target(String),
    Current(String),
}

/// What a member is, as ConsumerGroupMemberMetadataValue holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRecord {
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed: BTreeSet<String>,
    pub regex: Option<String>,
    pub rebalance_timeout_ms: i32,
}

/// Where a member is, as ConsumerGroupCurrentMemberAssignmentValue holds it. An epoch of -2
/// is a static member away for a while.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentRecord {
    pub epoch: i32,
    pub previous_epoch: i32,
    /// Kafka's MemberState: 0 stable, 1 unrevoked partitions, 2 unreleased partitions.
    pub state: i8,
    pub assigned: BTreeSet<Tp>,
    pub revoking: BTreeSet<Tp>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    GroupEpoch(i32),
    /// The group epoch, and per subscribed topic its name, id and partition count.
    Partitions(i32, Vec<(String, Uuid, i32)>),
    Member(MemberRecord),
    TargetEpoch(i32),
    Target(BTreeSet<Tp>),
    Current(CurrentRecord),
}

/// The record key of `key` in group `group`.
pub fn key(group: &str, key: &Key) -> Bytes {
    let mut b = BytesMut::with_capacity(8 + group.len());
    let (version, member) = match key {
        Key::GroupEpoch => (GROUP_EPOCH, None),
        Key::Partitions => (PARTITIONS, None),
        Key::Member(m) => (MEMBER, Some(m)),
        Key::TargetEpoch => (TARGET_EPOCH, None),
        Key::Target(m) => (TARGET, Some(m)),
        Key::Current(m) => (CURRENT, Some(m)),
    };
    b.put_i16(version);
    put_str(&mut b, group);
    if let Some(m) = member {
        put_str(&mut b, m);
    }
    b.freeze()
}

/// The record value of `value`.
pub fn value(value: &Value) -> Bytes {
    let mut w = Writer(BytesMut::with_capacity(64));
    w.0.put_i16(VALUE_VERSION);
    match value {
        Value::GroupEpoch(epoch) | Value::TargetEpoch(epoch) => w.0.put_i32(*epoch),
        Value::Partitions(epoch, topics) => {
            w.0.put_i32(*epoch);
            w.len(topics.len());
            for (name, id, count) in topics {
                w.0.put_slice(id.as_bytes());
                w.string(name);
                w.0.put_i32(*count);
                w.len(0); // no rack per partition
                w.no_tags();
            }
        }
        Value::Member(m) => {
            w.nullable(m.instance_id.as_deref());
            w.nullable(m.rack_id.as_deref());
            w.string(&m.client_id);
            w.string(&m.client_host);
            w.len(m.subscribed.len());
            for t in &m.subscribed {
                w.string(t);
            }
            w.nullable(m.regex.as_deref());
            w.0.put_i32(m.rebalance_timeout_ms);
            w.nullable(None); // no client-chosen server assignor
        }
        Value::Target(tps) => put_partitions(&mut w, tps),
        Value::Current(c) => {
            w.0.put_i32(c.epoch);
            w.0.put_i32(c.previous_epoch);
            w.0.put_i8(c.state);
            put_partitions(&mut w, &c.assigned);
            put_partitions(&mut w, &c.revoking);
        }
    }
    w.no_tags();
    w.0.freeze()
}

/// `[]TopicPartitions`: per topic id its partitions.
fn put_partitions(w: &mut Writer, tps: &BTreeSet<Tp>) {
    let mut topics: Vec<(Uuid, Vec<i32>)> = Vec::new();
    for (t, p) in tps {
        match topics.last_mut() {
            Some((last, ps)) if last == t => ps.push(*p),
            _ => topics.push((*t, vec![*p])),
        }
    }
    w.len(topics.len());
    for (t, ps) in topics {
        w.0.put_slice(t.as_bytes());
        w.len(ps.len());
        for p in ps {
            w.0.put_i32(p);
        }
        w.no_tags();
    }
}

/// Decodes the rest of a key of `version` (3–8) and its value: the group, the record and its
/// value (None: a tombstone). None when malformed.
pub fn decode(
    version: i16,
    key: Bytes,
    value: Option<Bytes>,
) -> Option<(String, Key, Option<Value>)> {
    let mut k = Reader::classic(key);
    let group = k.string()?;
    let key = match version {
        GROUP_EPOCH => Key::GroupEpoch,
        PARTITIONS => Key::Partitions,
        TARGET_EPOCH => Key::TargetEpoch,
        MEMBER => Key::Member(k.string()?),
        TARGET => Key::Target(k.string()?),
        CURRENT => Key::Current(k.string()?),
        _ => return None,
    };
    let Some(value) = value else {
        return Some((group, key, None));
    };
    let mut r = Reader::classic(value);
    if r.i16()? != VALUE_VERSION {
        return None;
    }
    r.flexible = true;
    let value = match &key {
        Key::GroupEpoch => Value::GroupEpoch(r.i32()?),
        Key::TargetEpoch => Value::TargetEpoch(r.i32()?),
        Key::Partitions => {
            let epoch = r.i32()?;
            let mut topics = Vec::new();
            for _ in 0..r.array_len()? {
                let id = r.uuid()?;
                let name = r.string()?;
                let count = r.i32()?;
                for _ in 0..r.array_len()? {
                    r.i32()?;
                    for _ in 0..r.array_len()? {
                        r.string()?;
                    }
                    r.tagged_fields()?;
                }
                r.tagged_fields()?;
                topics.push((name, id, count));
            }
            Value::Partitions(epoch, topics)
        }
        Key::Member(_) => {
            let instance_id = r.nullable_string()?;
            let rack_id = r.nullable_string()?;
            let client_id = r.string()?;
            let client_host = r.string()?;
            let mut subscribed = BTreeSet::new();
            for _ in 0..r.array_len()? {
                subscribed.insert(r.string()?);
            }
            let regex = r.nullable_string()?;
            let rebalance_timeout_ms = r.i32()?;
            r.nullable_string()?; // server assignor
            Value::Member(MemberRecord {
                instance_id,
                rack_id,
                client_id,
                client_host,
                subscribed,
                regex,
                rebalance_timeout_ms,
            })
        }
        Key::Target(_) => Value::Target(partitions(&mut r)?),
        Key::Current(_) => {
            let epoch = r.i32()?;
            let previous_epoch = r.i32()?;
            let state = r.i8()?;
            let assigned = partitions(&mut r)?;
            let revoking = partitions(&mut r)?;
            Value::Current(CurrentRecord {
                epoch,
                previous_epoch,
                state,
                assigned,
                revoking,
            })
        }
    };
    r.tagged_fields()?;
    Some((group, key, Some(value)))
}

fn partitions(r: &mut Reader) -> Option<BTreeSet<Tp>> {
    let mut out = BTreeSet::new();
    for _ in 0..r.array_len()? {
        let topic = r.uuid()?;
        for _ in 0..r.array_len()? {
            out.insert((topic, r.i32()?));
        }
        // Tagged: Kafka 4.2's assignment epochs per partition, not needed here.
        r.tagged_fields()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tps(spec: &[(u128, i32)]) -> BTreeSet<Tp> {
        spec.iter()
            .map(|(t, p)| (Uuid::from_u128(*t), *p))
            .collect()
    }

    /// A key's version, and the rest that [`decode`] takes.
    fn split_key(k: &Key) -> (i16, Bytes) {
        let mut b = key("g", k);
        let rest = b.split_off(2);
        (i16::from_be_bytes([b[0], b[1]]), rest)
    }

    fn every_record() -> Vec<(Key, Value)> {
        vec![
            (Key::GroupEpoch, Value::GroupEpoch(7)),
            (
                Key::Partitions,
                Value::Partitions(7, vec![("orders".into(), Uuid::from_u128(1), 6)]),
            ),
            (
                Key::Member("m-1".into()),
                Value::Member(MemberRecord {
                    instance_id: Some("host-a".into()),
                    rack_id: None,
                    client_id: "rdkafka".into(),
                    client_host: "/10.0.0.1".into(),
                    subscribed: ["orders".to_string(), "refunds".to_string()].into(),
                    regex: Some("pay.*".into()),
                    rebalance_timeout_ms: 300_000,
                }),
            ),
            (Key::TargetEpoch, Value::TargetEpoch(7)),
            (
                Key::Target("m-1".into()),
                Value::Target(tps(&[(1, 0), (1, 3), (2, 1)])),
            ),
            (
                Key::Current("m-1".into()),
                Value::Current(CurrentRecord {
                    epoch: 6,
                    previous_epoch: 5,
                    state: 1,
                    assigned: tps(&[(1, 0)]),
                    revoking: tps(&[(1, 1), (2, 4)]),
                }),
            ),
        ]
    }

    #[test]
    fn every_record_round_trips_and_tombstones_decode_as_deletes() {
        for (k, v) in every_record() {
            let (version, rest) = split_key(&k);
            let decoded = decode(version, rest.clone(), Some(value(&v)));
            assert_eq!(decoded, Some(("g".to_string(), k.clone(), Some(v))));
            assert_eq!(decode(version, rest, None), Some(("g".into(), k, None)));
        }
    }

    #[test]
    fn the_layout_is_kafkas() {
        // ConsumerGroupMetadataValue v0 {Epoch: 7}: version, epoch, no tagged fields.
        assert_eq!(
            &value(&Value::GroupEpoch(7))[..],
            &[0, 0, 0, 0, 0, 7, 0][..]
        );
        // ConsumerGroupTargetAssignmentMemberKey: version 7, group "g", member "m".
        assert_eq!(
            &key("g", &Key::Target("m".into()))[..],
            &[0, 7, 0, 1, b'g', 0, 1, b'm'][..]
        );
        // One topic, partitions [0, 3]: compact array of 1, uuid, compact array of 2, tags.
        let v = value(&Value::Target(tps(&[(1, 0), (1, 3)])));
        let mut want = vec![0, 0, 2];
        want.extend_from_slice(Uuid::from_u128(1).as_bytes());
        want.extend_from_slice(&[3, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0]);
        assert_eq!(&v[..], &want[..]);
    }

    #[test]
    fn truncated_oversized_and_unknown_values_are_malformed() {
        for (k, v) in every_record() {
            let (version, rest) = split_key(&k);
            let full = value(&v);
            for cut in 0..full.len() {
                assert_eq!(decode(version, rest.clone(), Some(full.slice(..cut))), None);
            }
            let mut newer = BytesMut::from(&full[..]);
            newer[1] = 1;
            assert_eq!(decode(version, rest.clone(), Some(newer.freeze())), None);
        }
        // A count of 2^28 topics with four bytes behind it: refused, nothing allocated for it.
        let mut huge = BytesMut::new();
        huge.put_i16(0);
        huge.put_slice(&[0xff, 0xff, 0xff, 0x7f]);
        let (version, target_key) = split_key(&Key::Target("m".into()));
        assert_eq!(decode(version, target_key, Some(huge.freeze())), None);
        // A member record's key without its member id.
        assert_eq!(
            decode(CURRENT, Bytes::from_static(&[0, 1, b'g']), None),
            None
        );
    }
}
