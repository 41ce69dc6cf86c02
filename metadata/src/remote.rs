//! Where every offloaded segment lives: the remote-segment records of each partition.
//!
//! Invariants (docs/invariants.md 4–5):
//! - a record is committed only after its objects are fully written and checked, so every
//!   `Committed` record names readable objects;
//! - a partition's segments are ordered by end offset with no gap between them: a new one
//!   must start at or before the remote log's end (or where deleted records end, the log
//!   start floor) and reach past it. Replicas roll segments at different offsets, so a new
//!   leader's first upload may begin inside the last segment its predecessor uploaded; the
//!   overlap is allowed, as in Kafka, and reads take each offset from the first segment
//!   holding it. Re-committing the same id is a no-op, so a retried proposal is harmless;
//! - only the partition's current leader epoch may commit, so a deposed leader cannot add a
//!   segment the new leader does not know of;
//! - deletion is two steps: `Deleting` takes a segment out of the readable remote log before
//!   its objects are deleted, and only then is the record dropped.

use std::sync::Arc;

use crate::command::{CommandResult, RemoteSegment, RemoteSegmentState};
use crate::state::{ClusterState, PartitionInfo};

impl PartitionInfo {
    /// Committed (readable) remote segments in offset order.
    pub fn remote_segments(&self) -> impl Iterator<Item = &RemoteSegment> {
        self.remote
            .iter()
            .filter(|s| s.state == RemoteSegmentState::Committed)
    }

    /// First offset of the readable remote log, if any: the first committed segment's base,
    /// or the log start floor where DeleteRecords moved it into that segment.
    pub fn remote_log_start(&self) -> Option<i64> {
        self.remote_segments()
            .next()
            .map(|s| s.base_offset.max(self.log_start_floor))
    }

    /// One past the last offset in the remote log, if any.
    pub fn remote_log_end(&self) -> Option<i64> {
        self.remote.last().map(|s| s.last_offset + 1)
    }
}

impl ClusterState {
    /// The partition, to read before deciding whether to change it.
    pub(crate) fn partition_ref(
        &self,
        topic_id: &uuid::Uuid,
        partition: i32,
    ) -> Result<&PartitionInfo, CommandResult> {
        let topic = self
            .topic_by_id(topic_id)
            .ok_or(CommandResult::UnknownTopic)?;
        usize::try_from(partition)
            .ok()
            .and_then(|p| topic.partitions.get(p))
            .map(|p| &**p)
            .ok_or(CommandResult::UnknownPartition)
    }

    /// The partition, to change: it and its topic are copied first if an earlier state
    /// shares them, so call it only once the change is decided.
    pub(crate) fn partition_mut(
        &mut self,
        topic_id: &uuid::Uuid,
        partition: i32,
    ) -> Result<&mut PartitionInfo, CommandResult> {
        self.partition_ref(topic_id, partition)?;
        let name = self
            .topic_by_id(topic_id)
            .map(|t| t.name.clone())
            .ok_or(CommandResult::UnknownTopic)?;
        let topic = self.topic_mut(&name).ok_or(CommandResult::UnknownTopic)?;
        usize::try_from(partition)
            .ok()
            .and_then(|p| topic.partitions.get_mut(p))
            .map(Arc::make_mut)
            .ok_or(CommandResult::UnknownPartition)
    }

    pub(crate) fn commit_remote_segment(
        &mut self,
        topic_id: &uuid::Uuid,
        partition: i32,
        segment: &RemoteSegment,
    ) -> CommandResult {
        let p = match self.partition_ref(topic_id, partition) {
            Ok(p) => p,
            Err(r) => return r,
        };
        if p.remote.iter().any(|s| s.id == segment.id) {
            return CommandResult::Ok;
        }
        if segment.leader_epoch < p.leader_epoch {
            return CommandResult::FencedLeaderEpoch {
                current: p.leader_epoch,
            };
        }
        if segment.base_offset < 0
            || segment.last_offset < segment.base_offset
            || segment.state != RemoteSegmentState::Committed
        {
            return CommandResult::InvalidRemoteSegment(format!(
                "segment [{}, {}] in state {:?}",
                segment.base_offset, segment.last_offset, segment.state
            ));
        }
        if let Some(end) = p.remote_log_end() {
            if segment.base_offset > end.max(p.log_start_floor) {
                return CommandResult::InvalidRemoteSegment(format!(
                    "segment starting at {} leaves a gap after the remote log, which ends at {end}",
                    segment.base_offset
                ));
            }
            if segment.last_offset < end {
                return CommandResult::InvalidRemoteSegment(format!(
                    "segment [{}, {}] adds nothing to the remote log, which ends at {end}",
                    segment.base_offset, segment.last_offset
                ));
            }
        }
        match self.partition_mut(topic_id, partition) {
            Ok(p) => {
                p.remote.push(segment.clone());
                CommandResult::Ok
            }
            Err(r) => r,
        }
    }

    pub(crate) fn mark_remote_deleting(
        &mut self,
        topic_id: &uuid::Uuid,
        partition: i32,
        before_offset: i64,
    ) -> CommandResult {
        let unchanged = |p: &PartitionInfo| {
            p.log_start_floor >= before_offset
                && p.remote.iter().all(|s| {
                    s.last_offset >= before_offset || s.state == RemoteSegmentState::Deleting
                })
        };
        match self.partition_ref(topic_id, partition) {
            Ok(p) if unchanged(p) => return CommandResult::Ok,
            Ok(_) => {}
            Err(r) => return r,
        }
        match self.partition_mut(topic_id, partition) {
            Ok(p) => {
                p.log_start_floor = p.log_start_floor.max(before_offset);
                for s in p
                    .remote
                    .iter_mut()
                    .filter(|s| s.last_offset < before_offset)
                {
                    s.state = RemoteSegmentState::Deleting;
                }
                CommandResult::Ok
            }
            Err(r) => r,
        }
    }

    pub(crate) fn drop_remote_segments(
        &mut self,
        topic_id: &uuid::Uuid,
        partition: i32,
        ids: &[uuid::Uuid],
    ) -> CommandResult {
        let dropped =
            |s: &RemoteSegment| s.state == RemoteSegmentState::Deleting && ids.contains(&s.id);
        match self.partition_ref(topic_id, partition) {
            Ok(p) if !p.remote.iter().any(dropped) => return CommandResult::Ok,
            Ok(_) => {}
            Err(r) => return r,
        }
        match self.partition_mut(topic_id, partition) {
            Ok(p) => {
                p.remote.retain(|s| !dropped(s));
                CommandResult::Ok
            }
            Err(r) => r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Command;

    fn cluster() -> (ClusterState, uuid::Uuid) {
        let mut state = ClusterState::default();
        state.apply(&Command::RegisterBroker {
            node_id: 1,
            host: "h".into(),
            port: 1,
            rack: None,
            listeners: vec![],
            admin: None,
        });
        let id = uuid::Uuid::new_v4();
        assert!(state
            .apply(&Command::CreateTopic {
                name: "t".into(),
                topic_id: id,
                replicas: vec![vec![1]],
                configs: Default::default(),
            })
            .is_ok());
        (state, id)
    }

    fn segment(base: i64, last: i64) -> RemoteSegment {
        RemoteSegment {
            id: uuid::Uuid::new_v4(),
            base_offset: base,
            last_offset: last,
            size_bytes: 100,
            index_size_bytes: 60,
            max_timestamp: 1,
            leader_epoch: 0,
            crc32c: 7,
            state: RemoteSegmentState::Committed,
        }
    }

    fn commit(state: &mut ClusterState, id: uuid::Uuid, s: &RemoteSegment) -> CommandResult {
        state.apply(&Command::CommitRemoteSegment {
            topic_id: id,
            partition: 0,
            segment: s.clone(),
        })
    }

    #[test]
    fn segments_commit_in_order_and_a_retry_is_a_no_op() {
        let (mut state, id) = cluster();
        let a = segment(0, 99);
        let b = segment(100, 199);
        assert_eq!(commit(&mut state, id, &a), CommandResult::Ok);
        assert_eq!(commit(&mut state, id, &b), CommandResult::Ok);
        assert_eq!(
            commit(&mut state, id, &b),
            CommandResult::Ok,
            "retried proposal"
        );
        let p = &state.topics["t"].partitions[0];
        assert_eq!(p.remote.len(), 2);
        assert_eq!(
            (p.remote_log_start(), p.remote_log_end()),
            (Some(0), Some(200))
        );
        // Covered already, leaving a gap, malformed, fenced, unknown: refused, nothing changes.
        for refused in [segment(150, 199), segment(201, 300), segment(300, 299)] {
            assert!(matches!(
                commit(&mut state, id, &refused),
                CommandResult::InvalidRemoteSegment(_)
            ));
        }
        Arc::make_mut(&mut Arc::make_mut(state.topics.get_mut("t").unwrap()).partitions[0])
            .leader_epoch = 3;
        assert_eq!(
            commit(&mut state, id, &segment(200, 299)),
            CommandResult::FencedLeaderEpoch { current: 3 }
        );
        assert_eq!(
            commit(&mut state, uuid::Uuid::new_v4(), &segment(200, 299)),
            CommandResult::UnknownTopic
        );
        assert_eq!(
            state.apply(&Command::CommitRemoteSegment {
                topic_id: id,
                partition: 5,
                segment: segment(200, 299)
            }),
            CommandResult::UnknownPartition
        );
        assert_eq!(state.topics["t"].partitions[0].remote.len(), 2);
    }

    #[test]
    fn a_new_leaders_segment_may_straddle_the_remote_end_but_never_leave_a_gap() {
        let (mut state, id) = cluster();
        commit(&mut state, id, &segment(0, 199));
        // The new leader rolled at 150: its segment [150, 299] overlaps and extends.
        assert_eq!(
            commit(&mut state, id, &segment(150, 299)),
            CommandResult::Ok
        );
        assert_eq!(state.topics["t"].partitions[0].remote_log_end(), Some(300));
        assert_eq!(
            commit(&mut state, id, &segment(300, 399)),
            CommandResult::Ok
        );
        // Past deleted records (DeleteRecords raised the floor) a gap is no gap.
        Arc::make_mut(&mut Arc::make_mut(state.topics.get_mut("t").unwrap()).partitions[0])
            .log_start_floor = 450;
        assert_eq!(
            commit(&mut state, id, &segment(450, 499)),
            CommandResult::Ok
        );
        assert!(matches!(
            commit(&mut state, id, &segment(600, 699)),
            CommandResult::InvalidRemoteSegment(_)
        ));
    }

    #[test]
    fn retention_marks_then_drops_and_the_remote_log_start_moves() {
        let (mut state, id) = cluster();
        let segs = [segment(0, 99), segment(100, 199), segment(200, 299)];
        for s in &segs {
            commit(&mut state, id, s);
        }
        state.apply(&Command::MarkRemoteSegmentsDeleting {
            topic_id: id,
            partition: 0,
            before_offset: 200,
        });
        let p = &state.topics["t"].partitions[0];
        assert_eq!(
            p.remote_log_start(),
            Some(200),
            "deleting segments are not readable"
        );
        assert_eq!(p.remote_segments().count(), 1);
        // Dropping only removes records already marked.
        state.apply(&Command::DropRemoteSegments {
            topic_id: id,
            partition: 0,
            ids: segs.iter().map(|s| s.id).collect(),
        });
        let p = &state.topics["t"].partitions[0];
        assert_eq!(p.remote.len(), 1);
        assert_eq!(p.remote[0].id, segs[2].id);
        // DeleteRecords into the middle of a segment: the floor hides the records below it.
        state.apply(&Command::MarkRemoteSegmentsDeleting {
            topic_id: id,
            partition: 0,
            before_offset: 250,
        });
        let p = &state.topics["t"].partitions[0];
        assert_eq!(p.remote_log_start(), Some(250));
        assert_eq!(p.remote_segments().count(), 1);
        // The next segment still has to follow the last one.
        assert_eq!(
            commit(&mut state, id, &segment(300, 399)),
            CommandResult::Ok
        );
    }

    #[test]
    fn a_state_without_remote_segments_still_decodes() {
        // Snapshots written before remote segments existed have no `remote` field.
        let (state, _) = cluster();
        let mut json: serde_json::Value = serde_json::to_value(&state).unwrap();
        for t in json["topics"].as_object_mut().unwrap().values_mut() {
            for p in t["partitions"].as_array_mut().unwrap() {
                p.as_object_mut().unwrap().remove("remote");
            }
        }
        let back: ClusterState = serde_json::from_value(json).unwrap();
        assert_eq!(back, state);
    }
}
