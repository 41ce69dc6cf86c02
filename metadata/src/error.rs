//! The crate's one error type.
//!
//! Invariants:
//! - A command the state machine *rejects* (unknown topic, bad assignment, ...) is not an error;
//!   it is a [`CommandResult`](crate::CommandResult). `MetadataError` means the quorum itself
//!   could not do its job: disk trouble, corrupt state, no leadership, shut down, timed out.
//! - Corruption found on disk is reported as [`MetadataError::Corrupt`], never by panicking.

use std::time::Duration;

use openraft::error::{Fatal, RaftError};
use openraft::StorageError;

use crate::command::NodeId;

/// Everything that can go wrong in the metadata quorum.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    /// An I/O operation on the metadata directory failed.
    #[error("metadata I/O error while {context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },

    /// Data on disk is damaged beyond what recovery repairs (a torn tail is repaired, not this).
    #[error("metadata store is corrupt: {0}")]
    Corrupt(String),

    /// The raft storage layer failed (wraps the error openraft saw from our log store or state
    /// machine).
    #[error("raft storage error: {0}")]
    Storage(Box<StorageError<NodeId>>),

    /// Raft stopped with a fatal error (a panic inside raft).
    #[error("raft fatal error: {0}")]
    Fatal(Box<Fatal<NodeId>>),

    /// Any other error reported by the raft API (bad config, failed initialization, ...).
    #[error("raft error: {0}")]
    Raft(String),

    /// This node is not the metadata leader, so it cannot accept a proposal.
    #[error("this node is not the metadata leader")]
    NotLeader,

    /// The quorum has been shut down.
    #[error("the metadata quorum is shut down")]
    Shutdown,

    /// A wait on the quorum (leadership at startup, a snapshot) did not finish in time.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout { what: String, after: Duration },
}

impl MetadataError {
    /// An [`MetadataError::Io`] with what was being done.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        MetadataError::Io {
            context: context.into(),
            source,
        }
    }
}

impl From<StorageError<NodeId>> for MetadataError {
    fn from(err: StorageError<NodeId>) -> Self {
        MetadataError::Storage(Box::new(err))
    }
}

impl From<Fatal<NodeId>> for MetadataError {
    fn from(fatal: Fatal<NodeId>) -> Self {
        match fatal {
            Fatal::Stopped => MetadataError::Shutdown,
            Fatal::StorageError(e) => e.into(),
            other => MetadataError::Fatal(Box::new(other)),
        }
    }
}

impl<E> From<RaftError<NodeId, E>> for MetadataError
where
    E: std::error::Error,
{
    fn from(err: RaftError<NodeId, E>) -> Self {
        match err {
            RaftError::Fatal(fatal) => fatal.into(),
            RaftError::APIError(api) => MetadataError::Raft(api.to_string()),
        }
    }
}
