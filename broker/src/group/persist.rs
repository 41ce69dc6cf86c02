//! Appending a group's records (committed offsets, GroupMetadata, tombstones) to its partition
//! of `__consumer_offsets`, as its leader.

use std::sync::Arc;

use bytes::Bytes;

use super::consumer_store;
use super::store::{self, GroupMetadata};
use super::{Coordinator, Entry};
use crate::error::{ApiError, ErrorCode};
use crate::log::batch;
use crate::partition::Partition;

/// Kafka's mapping of a failed GroupMetadata append to the error members are told
/// (`appendGroupMetadataErrorToResponseError`).
pub(super) fn store_error(code: ErrorCode) -> ErrorCode {
    match code {
        ErrorCode::UnknownTopicOrPartition
        | ErrorCode::NotEnoughReplicas
        | ErrorCode::NotEnoughReplicasAfterAppend
        | ErrorCode::RequestTimedOut => ErrorCode::CoordinatorNotAvailable,
        ErrorCode::NotLeaderOrFollower | ErrorCode::KafkaStorageError => ErrorCode::NotCoordinator,
        ErrorCode::MessageTooLarge | ErrorCode::RecordListTooLarge => ErrorCode::UnknownServerError,
        c => c,
    }
}

impl Coordinator {
    /// Appends records to the group's partition of `__consumer_offsets`.
    /// Only the leader appends: a coordinator that lost the partition gets NOT_COORDINATOR
    /// rather than writing into a follower's log. Returns the partition, the leader epoch
    /// appended under and the last offset written.
    pub(super) fn persist(
        &self,
        group: &str,
        records: &[(Bytes, Option<Bytes>)],
    ) -> Result<(Arc<Partition>, i32, i64), ApiError> {
        let partition = store::partition_for(group);
        let part = self
            .node
            .leader_partition(store::TOPIC, partition, -1)
            .map_err(|e| ApiError::new(ErrorCode::NotCoordinator, e.message))?;
        let refs: Vec<batch::KeyValue<'_>> = records
            .iter()
            .map(|(k, v)| (Some(&k[..]), v.as_deref()))
            .collect();
        let epoch = part.replication().leader_epoch();
        let info = part.append(&batch::build(&refs, self.node.clock.now_ms()))?;
        Ok((part, epoch, info.last_offset))
    }

    /// Appends tombstones deleting the given committed offsets.
    pub(super) fn tombstone_offsets<'a>(
        &self,
        group: &str,
        partitions: impl Iterator<Item = &'a (String, i32)>,
    ) -> Result<(), ApiError> {
        self.tombstones(
            group,
            partitions.map(|(t, p)| store::offset_key(group, t, *p)),
        )
    }

    /// Appends, in one batch, tombstones for everything the log holds for a group that goes:
    /// its committed offsets, its GroupMetadata record and a consumer group's records.
    pub(super) fn tombstone_group(&self, group: &str, entry: &Entry) -> Result<(), ApiError> {
        let offsets = (entry.offsets.keys()).map(|(t, p)| store::offset_key(group, t, *p));
        let metadata = entry.group.is_some().then(|| store::group_key(group));
        let consumer = (entry.consumer.iter())
            .flat_map(|g| g.written_keys())
            .map(|k| consumer_store::key(group, k));
        self.tombstones(group, offsets.chain(metadata).chain(consumer))
    }

    fn tombstones(&self, group: &str, keys: impl Iterator<Item = Bytes>) -> Result<(), ApiError> {
        let records: Vec<(Bytes, Option<Bytes>)> = keys.map(|k| (k, None)).collect();
        if records.is_empty() {
            return Ok(());
        }
        self.persist(group, &records).map(|_| ())
    }

    /// Appends a GroupMetadata record.
    pub(super) fn store_group(&self, group: &str, record: &GroupMetadata) -> Result<(), ApiError> {
        let value = store::group_value(record).ok_or_else(|| {
            ApiError::new(
                ErrorCode::UnknownServerError,
                "a group metadata field is too long for Kafka's record layout",
            )
        })?;
        self.persist(group, &[(store::group_key(group), Some(value))])
            .map(|_| ())
    }

    /// Appends the group's record if its state machine asked for one (it became empty, or a
    /// static member was replaced). A failure is logged: the change stands in memory and the
    /// log keeps the previous record, which a restart would bring back.
    pub(super) fn store_if_asked(&self, id: &str, entry: &mut Entry) {
        let Some(group) = entry.group.as_mut() else {
            return;
        };
        if !group.take_store() {
            return;
        }
        let now = self.node.clock.now_ms();
        if group.is_empty() {
            entry.last_active_ms = now;
        }
        if let Err(e) = self.store_group(id, &group.metadata(now)) {
            tracing::error!(group = id, error = %e, "cannot persist group metadata");
        }
    }
}
