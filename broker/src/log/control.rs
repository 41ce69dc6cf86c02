//! Control batches: the commit and abort markers that end a transaction in a partition.
//!
//! A marker is a batch with the control and transactional attributes, the producer's id and
//! epoch, and one record: key `(version: i16 = 0, type: i16)` — 0 abort, 1 commit — and
//! value `(version: i16 = 0, coordinator epoch: i32)`, as Kafka writes them. Only a partition
//! leader writes markers (WriteTxnMarkers from a transaction coordinator); a client's control
//! batch is refused at append.

use bytes::{BufMut, Bytes};

use super::batch::{self, BatchHeader};
use super::records::{self, corrupt};
use super::LogError;

const ABORT: i16 = 0;
const COMMIT: i16 = 1;

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Abort,
    Commit,
}

/// A marker batch ready to append.
pub fn marker_batch(
    marker: Marker,
    producer_id: i64,
    producer_epoch: i16,
    coordinator_epoch: i32,
    timestamp: i64,
) -> Bytes {
    let mut key = Vec::with_capacity(4);
    key.put_i16(0);
    key.put_i16(match marker {
        Marker::Abort => ABORT,
        Marker::Commit => COMMIT,
    });
    let mut value = Vec::with_capacity(6);
    value.put_i16(0);
    value.put_i32(coordinator_epoch);
    batch::build_control(
        (Some(&key), Some(&value)),
        timestamp,
        (producer_id, producer_epoch),
    )
}

/// What a control batch holds: `(marker, coordinator epoch)`, or `None` for a control type
/// that is not a transaction marker (Kafka's KRaft records; they never reach data partitions
/// from Strata, and are kept as they are).
pub fn read_marker(batch: &Bytes, header: &BatchHeader) -> Result<Option<(Marker, i32)>, LogError> {
    debug_assert!(header.is_control());
    let section = records::section(batch, header)?;
    let mut first = None;
    records::for_each(&section, header, |r| {
        if first.is_none() {
            first = Some((r.key.map(<[u8]>::to_vec), r.value.map(<[u8]>::to_vec)));
        }
    })?;
    let Some((Some(key), value)) = first else {
        return Err(corrupt(header, "control batch without a keyed record"));
    };
    if key.len() < 4 {
        return Err(corrupt(header, "control record key shorter than 4 bytes"));
    }
    let marker = match i16::from_be_bytes([key[2], key[3]]) {
        ABORT => Marker::Abort,
        COMMIT => Marker::Commit,
        _ => return Ok(None),
    };
    let coordinator_epoch = match value.as_deref() {
        Some(v) if v.len() >= 6 => i32::from_be_bytes([v[2], v[3], v[4], v[5]]),
        _ => {
            return Err(corrupt(
                header,
                "transaction marker without a coordinator epoch",
            ))
        }
    };
    Ok(Some((marker, coordinator_epoch)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip_and_are_control_batches_of_their_producer() {
        for marker in [Marker::Abort, Marker::Commit] {
            let b = marker_batch(marker, 42, 7, 3, 1_000);
            let h = batch::validate(&b).expect("a valid batch");
            assert!(h.is_control() && h.is_transactional());
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.record_count),
                (42, 7, 1)
            );
            assert_eq!(read_marker(&b, &h).unwrap(), Some((marker, 3)));
        }
    }

    #[test]
    fn a_control_record_without_a_key_is_corrupt() {
        let b = batch::build_control((None, Some(&[0, 0, 0, 0, 0, 1])), 0, (1, 0));
        let h = batch::validate(&b).unwrap();
        assert!(matches!(read_marker(&b, &h), Err(LogError::Corrupt(_))));
        let other_type = batch::build_control((Some(&[0, 0, 0, 2]), Some(&[0, 0])), 0, (1, 0));
        let h = batch::validate(&other_type).unwrap();
        assert_eq!(read_marker(&other_type, &h).unwrap(), None);
    }
}
