//! Records of the internal topic `__transaction_state`, in Kafka's own layout so the topic
//! reads the same as a Kafka cluster's:
//!
//! - key: TransactionLogKey v0 — version i16 (0), transactional id (i16 length + UTF-8);
//! - value: TransactionLogValue v1 (flexible, what Kafka writes under transaction version 1
//!   and later) — version i16, producer id i64, producer epoch i16, transaction timeout ms
//!   i32, state i8 (see [`TxnState`]), partitions (compact array, null allowed; per topic a
//!   compact name and a compact array of i32 partition ids, then its tagged fields), last
//!   update ms i64, start ms i64, then the tagged fields PreviousProducerId (tag 0) and
//!   NextProducerId (tag 1), each written only when set. Values v0 (the same fixed fields
//!   with i16/i32 lengths and no tags, written by earlier Strata and Kafka 3.x) are read.
//!
//! A null value is a tombstone (an expired transactional id). Counts are checked against the
//! bytes that hold them before anything is allocated.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::state::{TxnMetadata, TxnState};

pub const TOPIC: &str = "__transaction_state";
pub const PARTITIONS: usize = 50;

const KEY_VERSION: i16 = 0;
const VALUE_VERSION: i16 = 1;
/// TransactionLogValue's tags.
const TAG_PREVIOUS_PRODUCER_ID: u64 = 0;
const TAG_NEXT_PRODUCER_ID: u64 = 1;

/// The `__transaction_state` partition that coordinates `transactional_id`.
pub fn partition_for(transactional_id: &str) -> i32 {
    crate::group::store::partition_of(transactional_id, PARTITIONS)
}

fn put_str(b: &mut BytesMut, s: &str) {
    b.put_i16(s.len() as i16);
    b.put_slice(s.as_bytes());
}

pub fn key(transactional_id: &str) -> Bytes {
    let mut b = BytesMut::with_capacity(4 + transactional_id.len());
    b.put_i16(KEY_VERSION);
    put_str(&mut b, transactional_id);
    b.freeze()
}

fn put_uvarint(b: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        b.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    b.put_u8(v as u8);
}

fn put_compact_str(b: &mut BytesMut, s: &str) {
    put_uvarint(b, s.len() as u64 + 1);
    b.put_slice(s.as_bytes());
}

pub fn value(m: &TxnMetadata) -> Bytes {
    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in &m.partitions {
        topics.entry(t).or_default().push(*p);
    }
    let mut b = BytesMut::with_capacity(64 + m.partitions.len() * 8);
    b.put_i16(VALUE_VERSION);
    b.put_i64(m.producer_id);
    b.put_i16(m.producer_epoch);
    b.put_i32(m.timeout_ms);
    b.put_i8(m.state as i8);
    put_uvarint(&mut b, topics.len() as u64 + 1);
    for (t, ps) in topics {
        put_compact_str(&mut b, t);
        put_uvarint(&mut b, ps.len() as u64 + 1);
        for p in ps {
            b.put_i32(p);
        }
        put_uvarint(&mut b, 0);
    }
    b.put_i64(m.last_update_ms);
    b.put_i64(m.start_ms);
    let tags: Vec<(u64, i64)> = [
        (TAG_PREVIOUS_PRODUCER_ID, m.last_producer_id),
        (TAG_NEXT_PRODUCER_ID, m.next_producer_id),
    ]
    .into_iter()
    .filter(|(_, v)| *v >= 0)
    .collect();
    put_uvarint(&mut b, tags.len() as u64);
    for (tag, v) in tags {
        put_uvarint(&mut b, tag);
        put_uvarint(&mut b, 8);
        b.put_i64(v);
    }
    b.freeze()
}

/// One decoded record: the id and its metadata (`None`: a tombstone).
pub type Entry = (String, Option<TxnMetadata>);

/// Reads a record; `None` when it is not a transaction record this layout knows.
pub fn decode(key: Option<Bytes>, value: Option<Bytes>) -> Option<Entry> {
    let mut k = key?;
    if k.remaining() < 2 || k.get_i16() != KEY_VERSION {
        return None;
    }
    let id = get_str(&mut k, false)?;
    let Some(mut v) = value else {
        return Some((id, None));
    };
    if v.remaining() < 2 {
        return None;
    }
    let flexible = match v.get_i16() {
        0 => false,
        1 => true,
        _ => return None,
    };
    if v.remaining() < 8 + 2 + 4 + 1 {
        return None;
    }
    let producer_id = v.get_i64();
    let producer_epoch = v.get_i16();
    let timeout_ms = v.get_i32();
    let state = TxnState::from_id(v.get_i8())?;
    let mut partitions = BTreeSet::new();
    if let Some(topics) = get_len(&mut v, flexible)? {
        for _ in 0..topics {
            let topic = get_str(&mut v, flexible)?;
            let n = get_len(&mut v, flexible)??;
            if v.remaining() < n.checked_mul(4)? {
                return None;
            }
            for _ in 0..n {
                partitions.insert((topic.clone(), v.get_i32()));
            }
            if flexible {
                skip_tags(&mut v)?;
            }
        }
    }
    if v.remaining() < 16 {
        return None;
    }
    let last_update_ms = v.get_i64();
    let start_ms = v.get_i64();
    let (mut last_producer_id, mut next_producer_id) = (-1, -1);
    if flexible {
        for (tag, mut field) in tags(&mut v)? {
            let target = match tag {
                TAG_PREVIOUS_PRODUCER_ID => &mut last_producer_id,
                TAG_NEXT_PRODUCER_ID => &mut next_producer_id,
                _ => continue,
            };
            if field.remaining() != 8 {
                return None;
            }
            *target = field.get_i64();
        }
    }
    Some((
        id,
        Some(TxnMetadata {
            producer_id,
            last_producer_id,
            producer_epoch,
            last_producer_epoch: -1,
            timeout_ms,
            state,
            partitions,
            start_ms,
            last_update_ms,
            next_producer_id,
            pending: None,
        }),
    ))
}

fn uvarint(b: &mut Bytes) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..35).step_by(7) {
        if !b.has_remaining() {
            return None;
        }
        let byte = b.get_u8();
        v |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// An array length: `Some(None)` for null, `None` when malformed. Every element takes at
/// least one byte, so a count beyond the bytes left is malformed.
fn get_len(b: &mut Bytes, flexible: bool) -> Option<Option<usize>> {
    let n: i64 = if flexible {
        uvarint(b)? as i64 - 1
    } else {
        if b.remaining() < 4 {
            return None;
        }
        b.get_i32() as i64
    };
    if n < 0 {
        return Some(None);
    }
    (n as usize <= b.remaining()).then_some(Some(n as usize))
}

fn get_str(b: &mut Bytes, flexible: bool) -> Option<String> {
    let len = if flexible {
        (uvarint(b)? as usize).checked_sub(1)?
    } else {
        if b.remaining() < 2 {
            return None;
        }
        usize::try_from(b.get_i16()).ok()?
    };
    if b.remaining() < len {
        return None;
    }
    String::from_utf8(b.split_to(len).to_vec()).ok()
}

/// A tagged-field section: each tag with its bytes.
fn tags(b: &mut Bytes) -> Option<Vec<(u64, Bytes)>> {
    let n = uvarint(b)?;
    // Each field takes at least two bytes: a count beyond them is malformed.
    if n > b.remaining() as u64 / 2 {
        return None;
    }
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let tag = uvarint(b)?;
        let len = uvarint(b)? as usize;
        if b.remaining() < len {
            return None;
        }
        out.push((tag, b.split_to(len)));
    }
    Some(out)
}

fn skip_tags(b: &mut Bytes) -> Option<()> {
    tags(b).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata() -> TxnMetadata {
        let mut m = TxnMetadata::new(42, 60_000, 5);
        m.producer_epoch = 3;
        m.state = TxnState::Ongoing;
        m.start_ms = 4;
        m.partitions.insert(("orders".into(), 2));
        m.partitions.insert(("orders".into(), 0));
        m.partitions.insert(("__consumer_offsets".into(), 17));
        m
    }

    /// A TransactionLogValue v0, as earlier Strata (and Kafka 3.x) wrote it.
    fn value_v0(m: &TxnMetadata) -> Bytes {
        let mut b = BytesMut::new();
        b.put_i16(0);
        b.put_i64(m.producer_id);
        b.put_i16(m.producer_epoch);
        b.put_i32(m.timeout_ms);
        b.put_i8(m.state as i8);
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in &m.partitions {
            topics.entry(t).or_default().push(*p);
        }
        b.put_i32(topics.len() as i32);
        for (t, ps) in topics {
            put_str(&mut b, t);
            b.put_i32(ps.len() as i32);
            ps.iter().for_each(|p| b.put_i32(*p));
        }
        b.put_i64(m.last_update_ms);
        b.put_i64(m.start_ms);
        b.freeze()
    }

    #[test]
    fn records_round_trip_in_kafkas_layout() {
        let mut m = metadata();
        let v = value(&m);
        // version 1, id, epoch, timeout, state, 3 topics (compact: 4), ...
        assert_eq!(&v[..2], &[0, 1]);
        assert_eq!(i64::from_be_bytes(v[2..10].try_into().unwrap()), 42);
        assert_eq!((v[16], v[17]), (TxnState::Ongoing as u8, 3));
        assert_eq!(*v.last().unwrap(), 0, "no tagged field set");
        let (id, back) = decode(Some(key("tx-1")), Some(v)).unwrap();
        assert_eq!(id, "tx-1");
        assert_eq!(back, Some(m.clone()));
        assert_eq!(decode(Some(key("tx-1")), None), Some(("tx-1".into(), None)));
        // The producer ids of a rotation travel in the tagged fields.
        m.last_producer_id = 41;
        m.next_producer_id = 43;
        let v = value(&m);
        assert_eq!(
            decode(Some(key("tx-1")), Some(v)).unwrap().1,
            Some(m.clone())
        );
        // Earlier records (v0) are read.
        m.last_producer_id = -1;
        m.next_producer_id = -1;
        assert_eq!(
            decode(Some(key("tx-1")), Some(value_v0(&m))).unwrap().1,
            Some(m)
        );
    }

    #[test]
    fn malformed_records_are_skipped_not_trusted() {
        let mut m = metadata();
        m.next_producer_id = 43;
        for v in [value(&m), value_v0(&metadata())] {
            for cut in 0..v.len() {
                assert_eq!(
                    decode(Some(key("t")), Some(v.slice(..cut))),
                    None,
                    "cut at {cut}"
                );
            }
            let mut state = v.to_vec();
            state[16] = 9;
            assert_eq!(decode(Some(key("t")), Some(Bytes::from(state))), None);
            assert_eq!(decode(None, Some(v)), None);
        }
        let mut huge = value_v0(&metadata()).to_vec();
        huge[17..21].copy_from_slice(&i32::MAX.to_be_bytes());
        assert_eq!(decode(Some(key("t")), Some(Bytes::from(huge))), None);
        let mut huge = value(&metadata()).to_vec();
        huge.splice(17..18, [0xff, 0xff, 0xff, 0xff, 0x07]);
        assert_eq!(decode(Some(key("t")), Some(Bytes::from(huge))), None);
        // A tag whose length is not its type's.
        let v = value(&m);
        let mut bad = v[..v.len() - 11].to_vec();
        bad.extend_from_slice(&[1, 1, 4, 0, 0, 0, 43]);
        assert_eq!(decode(Some(key("t")), Some(Bytes::from(bad))), None);
    }

    #[test]
    fn the_partition_of_an_id_is_kafkas() {
        // Java: "my-txn".hashCode() is -1061187895; Utils.abs of it, mod 50, is 45.
        assert_eq!(partition_for("my-txn"), 45);
        assert_eq!(partition_for("strata-txn-0"), 35);
    }
}
