//! Records of the internal topic `__share_group_state`: one share partition's durable state
//! per key, the latest record winning (the topic is compacted, so it stays one record per
//! share partition).
//!
//! The fields are those of Kafka's ShareSnapshotKey and ShareSnapshotValue, in a fixed layout
//! of Strata's own (Kafka's coordinator reads nothing of ours):
//!
//! - key: version i16 (0, ShareSnapshotKey's type), group id (i16 length + UTF-8), topic id
//!   (16 bytes), partition i32;
//! - value: version i16 (0), snapshot epoch i32 (counts the writes of this key), state epoch
//!   i32 (moves on when the share partition is reset), leader epoch i32 (of the data
//!   partition's leader that wrote it: a write from an older leader is fenced), start offset
//!   i64, write time ms i64, then the runs (i32 count; each first i64, last i64, delivery
//!   state i8 — 0 available, 2 acknowledged, 4 archived — and delivery count i16).
//!
//! A null value is a tombstone (the group's share state deleted). Counts are checked against
//! the bytes that hold them before anything is allocated.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use uuid::Uuid;

use super::partition::Snapshot;

pub const TOPIC: &str = "__share_group_state";
/// As Kafka's `share.coordinator.state.topic.num.partitions` default.
pub const PARTITIONS: usize = 50;

const KEY_VERSION: i16 = 0;
const VALUE_VERSION: i16 = 0;
/// Bytes of one run in a value.
const RUN_BYTES: usize = 8 + 8 + 1 + 2;

/// A share partition: the group, the topic id, the partition.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StateKey {
    pub group: String,
    pub topic_id: Uuid,
    pub partition: i32,
}

impl StateKey {
    /// Kafka's name of a share partition, `group:topic-id:partition`, which also places it.
    pub fn name(&self) -> String {
        format!("{}:{}:{}", self.group, self.topic_id, self.partition)
    }

    /// The key [`StateKey::name`] names; `None` for a name not of that form.
    pub fn parse(name: &str) -> Option<StateKey> {
        let (rest, partition) = name.rsplit_once(':')?;
        let (group, topic_id) = rest.rsplit_once(':')?;
        Some(StateKey {
            group: group.to_string(),
            topic_id: Uuid::parse_str(topic_id).ok()?,
            partition: partition.parse().ok().filter(|p: &i32| *p >= 0)?,
        })
    }

    /// The `__share_group_state` partition that keeps this key.
    pub fn state_partition(&self) -> i32 {
        crate::group::store::partition_of(&self.name(), PARTITIONS)
    }
}

/// What is kept of a share partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub snapshot_epoch: i32,
    pub state_epoch: i32,
    pub leader_epoch: i32,
    pub write_ms: i64,
    pub snapshot: Snapshot,
}

pub fn key(k: &StateKey) -> Bytes {
    let mut b = BytesMut::with_capacity(2 + 2 + k.group.len() + 16 + 4);
    b.put_i16(KEY_VERSION);
    b.put_i16(k.group.len() as i16);
    b.put_slice(k.group.as_bytes());
    b.put_slice(k.topic_id.as_bytes());
    b.put_i32(k.partition);
    b.freeze()
}

pub fn value(s: &Stored) -> Bytes {
    let runs = &s.snapshot.runs;
    let mut b = BytesMut::with_capacity(2 + 4 * 3 + 8 * 2 + 4 + runs.len() * RUN_BYTES);
    b.put_i16(VALUE_VERSION);
    b.put_i32(s.snapshot_epoch);
    b.put_i32(s.state_epoch);
    b.put_i32(s.leader_epoch);
    b.put_i64(s.snapshot.start);
    b.put_i64(s.write_ms);
    b.put_i32(runs.len() as i32);
    for &(first, last, state, deliveries) in runs {
        b.put_i64(first);
        b.put_i64(last);
        b.put_i8(state);
        b.put_i16(deliveries.min(i16::MAX as u16) as i16);
    }
    b.freeze()
}

fn decode_key(mut b: &[u8]) -> Option<StateKey> {
    if b.remaining() < 4 || b.get_i16() != KEY_VERSION {
        return None;
    }
    let len = usize::try_from(b.get_i16()).ok()?;
    if b.remaining() != len + 16 + 4 {
        return None;
    }
    let group = String::from_utf8(b[..len].to_vec()).ok()?;
    b.advance(len);
    let topic_id = Uuid::from_slice(&b[..16]).ok()?;
    b.advance(16);
    Some(StateKey {
        group,
        topic_id,
        partition: b.get_i32(),
    })
}

fn decode_value(mut b: &[u8]) -> Option<Stored> {
    if b.remaining() < 2 + 4 * 3 + 8 * 2 + 4 || b.get_i16() != VALUE_VERSION {
        return None;
    }
    let (snapshot_epoch, state_epoch, leader_epoch) = (b.get_i32(), b.get_i32(), b.get_i32());
    let (start, write_ms) = (b.get_i64(), b.get_i64());
    let count = usize::try_from(b.get_i32()).ok()?;
    // The count is believed only as far as the bytes that follow hold its runs.
    if b.remaining() != count.checked_mul(RUN_BYTES)? {
        return None;
    }
    let mut runs = Vec::with_capacity(count);
    for _ in 0..count {
        let (first, last, state) = (b.get_i64(), b.get_i64(), b.get_i8());
        let deliveries = u16::try_from(b.get_i16()).ok()?;
        runs.push((first, last, state, deliveries));
    }
    Some(Stored {
        snapshot_epoch,
        state_epoch,
        leader_epoch,
        write_ms,
        snapshot: Snapshot { start, runs },
    })
}

/// A record of the topic: its key and what it keeps (`None`: a tombstone). `None` for a
/// record that is not one of ours.
pub fn decode(key: Option<Bytes>, value: Option<Bytes>) -> Option<(StateKey, Option<Stored>)> {
    let k = decode_key(&key?)?;
    match value {
        None => Some((k, None)),
        Some(v) => Some((k, Some(decode_value(&v)?))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (StateKey, Stored) {
        let k = StateKey {
            group: "orders-workers".into(),
            topic_id: Uuid::from_u128(0x1234),
            partition: 7,
        };
        let s = Stored {
            snapshot_epoch: 3,
            state_epoch: 1,
            leader_epoch: 9,
            write_ms: 1_700_000_000_000,
            snapshot: Snapshot {
                start: 100,
                runs: vec![(100, 149, 2, 1), (150, 150, 4, 5), (151, 199, 0, 2)],
            },
        };
        (k, s)
    }

    #[test]
    fn records_read_back_as_written() {
        let (k, s) = sample();
        assert_eq!(
            decode(Some(key(&k)), Some(value(&s))),
            Some((k.clone(), Some(s)))
        );
        assert_eq!(decode(Some(key(&k)), None), Some((k, None)));
    }

    #[test]
    fn truncated_or_lying_records_are_refused_without_allocating_by_their_counts() {
        let (k, s) = sample();
        let v = value(&s);
        for cut in 0..v.len() {
            assert_eq!(
                decode(Some(key(&k)), Some(v.slice(..cut))),
                None,
                "cut at {cut}"
            );
        }
        let mut lying = BytesMut::from(&v[..]);
        // The run count claims two billion runs over the three present.
        let at = 2 + 4 * 3 + 8 * 2;
        lying[at..at + 4].copy_from_slice(&i32::MAX.to_be_bytes());
        assert_eq!(decode(Some(key(&k)), Some(lying.freeze())), None);
        let kb = key(&k);
        for cut in 0..kb.len() {
            assert_eq!(
                decode(Some(kb.slice(..cut)), None),
                None,
                "key cut at {cut}"
            );
        }
        assert_eq!(decode(None, Some(v)), None);
    }

    #[test]
    fn a_share_partition_is_placed_by_kafkas_name_for_it() {
        let (k, _) = sample();
        assert_eq!(k.name(), format!("orders-workers:{}:7", k.topic_id));
        assert_eq!(StateKey::parse(&k.name()), Some(k.clone()));
        for bad in [
            "",
            "g",
            "g:1",
            "g:not-a-uuid:1",
            &format!("g:{}:-1", k.topic_id),
        ] {
            assert_eq!(StateKey::parse(bad), None, "{bad}");
        }
        let p = k.state_partition();
        assert!((0..PARTITIONS as i32).contains(&p));
        assert_eq!(p, crate::group::store::partition_of(&k.name(), PARTITIONS));
    }
}
