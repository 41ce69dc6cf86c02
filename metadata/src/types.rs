//! The openraft type configuration of the metadata quorum, and short aliases for the openraft
//! types this crate uses.
//!
//! Invariants:
//! - Log entries and snapshots are serialized with serde_json; changing any type named here
//!   changes the on-disk format (see the invariants of [`crate::command`]).

use std::io::Cursor;

use crate::command::{Command, CommandResult, NodeId};

openraft::declare_raft_types!(
    /// Types of Strata's metadata raft: commands in, command results out, `u64` node ids,
    /// snapshots as in-memory JSON bytes.
    pub TypeConfig:
        D = Command,
        R = CommandResult,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// The raft node handle.
pub type Raft = openraft::Raft<TypeConfig>;
/// A raft log entry.
pub type Entry = openraft::Entry<TypeConfig>;
/// The identity of a log entry (leader term + index).
pub type LogId = openraft::LogId<NodeId>;
/// A persisted vote.
pub type Vote = openraft::Vote<NodeId>;
/// A voter's or learner's network address record.
pub type Node = openraft::BasicNode;
/// The error type of every storage trait method.
pub type StorageError = openraft::StorageError<NodeId>;
/// A membership config together with the log id that introduced it.
pub type StoredMembership = openraft::StoredMembership<NodeId, Node>;
/// Metadata of a snapshot: last included log id, membership and snapshot id.
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, Node>;
