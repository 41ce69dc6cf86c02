//! `strata-metadata`: Strata's metadata quorum.
//!
//! An [openraft](https://docs.rs/openraft/0.9) node whose replicated state machine is the
//! cluster metadata ([`ClusterState`]: brokers, topics, partitions, producer-id blocks),
//! persisted in one local directory. The broker drives it through [`Metadata`]: propose a
//! [`Command`], get its [`CommandResult`] once committed and applied, read or subscribe to the
//! latest state.
//!
//! Today the quorum has exactly one voter ([`Metadata::open_single_voter`]); multi-voter
//! quorums need the TCP transport that will replace [`network::UnreachableNetwork`].
//!
//! # Layout
//!
//! | module | concern |
//! |---|---|
//! | `command` | [`Command`] and [`CommandResult`]: the raft payload and its response |
//! | `state` | [`ClusterState`] and its pure, deterministic [`ClusterState::apply`] |
//! | `types` | the openraft type configuration ([`TypeConfig`]) |
//! | `log_store` | the raft log (`raft.log`: length-prefixed, CRC-32C-checked JSON records), `vote.json`, `committed.json`, `purged.json` |
//! | `state_machine` | the raft state machine over `ClusterState`; snapshots in `snapshot/snapshot.json` |
//! | [`network`] | raft transport between voters (single-node: every peer unreachable) |
//! | `quorum` | [`Metadata`]: open, propose, read, snapshot, shut down |
//! | `error` | [`MetadataError`] |
//! | `fs_util` | atomic, durable small-file writes |
//!
//! # On disk (`MetadataOptions::dir`)
//!
//! ```text
//! raft.log          log entries after the last purge
//! vote.json         last vote
//! committed.json    last committed log id
//! purged.json       last purged log id
//! snapshot/snapshot.json   latest snapshot: raft metadata + ClusterState
//! ```
//!
//! At open, the latest snapshot is loaded and raft re-applies the log after it; a torn log tail
//! left by a crash is cut off first.

mod command;
mod error;
mod fs_util;
mod log_store;
pub mod network;
mod quorum;
pub mod remote;
mod state;
mod state_machine;
mod types;

pub use command::{Command, CommandResult, NodeId};
pub use error::MetadataError;
pub use quorum::{Metadata, MetadataOptions};
pub use remote::{RemoteSegment, RemoteSegmentState};
pub use state::{BrokerInfo, ClusterState, PartitionInfo, TopicInfo, FIRST_PRODUCER_ID};
pub use types::TypeConfig;
