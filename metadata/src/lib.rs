//! `strata-metadata`: Strata's metadata quorum.
//!
//! An [openraft](https://docs.rs/openraft/0.9) node whose replicated state machine is the
//! cluster metadata ([`ClusterState`]: brokers, topics, partitions, producer-id blocks),
//! persisted in one local directory. The broker drives it through [`Metadata`]: propose a
//! [`Command`], get its [`CommandResult`] once committed and applied, read or subscribe to the
//! latest state.
//!
//! The quorum has 1, 3 or 5 voters and any number of learners (every other broker), talking
//! over TCP ([`rpc`](crate::rpc)); the leader is also the controller ([`controller`]): it
//! tracks broker heartbeats and fences silent brokers, which moves partition leadership
//! ([`leadership`]).
//!
//! # Layout
//!
//! | module | concern |
//! |---|---|
//! | `command` | [`Command`] and [`CommandResult`]: the raft payload and its response |
//! | `state` | [`ClusterState`] and its pure, deterministic [`ClusterState::apply`] |
//! | `leadership` | broker registration and fencing, and the leader elections they cause |
//! | `security` | SCRAM credentials (KIP-554), stored as salted keys, never as passwords; ACLs; client quotas |
//! | `acl` | Kafka's ACL model: bindings, their wire numbers, the filters that select them |
//! | `quota` | client quota entities (user, client id, named or default) and the quotas on them |
//! | `reassignment` | moving a partition's replicas (KIP-455): start, complete when in sync, cancel |
//! | `controller` | broker liveness on the leader: heartbeats, session expiry |
//! | `types` | the openraft type configuration ([`TypeConfig`]) |
//! | `log_store` | the raft log (`raft.log`: length-prefixed, CRC-32C-checked JSON records), `vote.json`, `committed.json`, `purged.json` |
//! | `state_machine` | the raft state machine over `ClusterState`; snapshots in `snapshot/snapshot.json` |
//! | `rpc` | node-to-node calls: length-prefixed JSON over TCP, pooled connections |
//! | `network` | openraft's transport over `rpc` |
//! | `quorum` | [`Metadata`]: open (initialize or join), propose and heartbeat via the leader, read, snapshot, shut down; the raft port's server |
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

// The quorum's timing is openraft's and real: its liveness logic takes `now` as an argument
// (tested with explicit instants), read here where the quorum runs. The broker's clock rule
// (`clippy.toml`, docs/invariants.md) is for the broker crate.
#![allow(clippy::disallowed_methods)]

pub mod acl;
mod command;
mod controller;
mod error;
mod fs_util;
mod leadership;
mod log_store;
mod network;
mod status;
pub use status::{Contact, QuorumStatus, ReplicaView};
mod quorum;
pub mod quota;
mod reassignment;
pub mod remote;
mod rpc;
mod security;
mod state;
mod state_machine;
mod types;

pub use command::{
    Command, CommandResult, Endpoint, IcebergRange, IsrUpdate, NodeId, RemoteSegment,
    RemoteSegmentState, ScramCredential,
};
pub use controller::{Heartbeat, HeartbeatReply};
pub use error::MetadataError;
pub use quorum::{LeaderBalance, Metadata, MetadataOptions};
pub use rpc::RaftTls;
pub use state::{
    BrokerInfo, ClusterState, IcebergTable, PartitionInfo, SecurityState, ShareReset, TopicInfo,
    FIRST_PRODUCER_ID,
};
pub use types::TypeConfig;

/// Decodes one raft-port frame body as a request and as a response, as a node would: the
/// entry point of the raft RPC fuzz target (`fuzz/`). `true` if either decodes.
#[doc(hidden)]
pub fn decode_rpc_frame(body: &[u8]) -> bool {
    let request = rpc::decode::<rpc::Envelope>(body).is_ok();
    let response = rpc::decode::<rpc::Response>(body).is_ok();
    request || response
}
