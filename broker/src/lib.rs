//! Strata's broker: the Kafka protocol server, the partition log engine and admin HTTP. The
//! `strata` binary and its client commands are the `strata-cli` crate (`cli/`).
//!
//! Layout, top to bottom; each module imports only modules below it (`tools/check-cycles`
//! keeps it so, and `docs/architecture.md` says what each room owns):
//! - [`serve`] — `strata serve`: start-up order, clean shutdown;
//! - [`housekeeping`] — the periodic background jobs, run by a [`schedule::Scheduler`];
//! - [`server`] — Kafka listener and connections (frames in, responses out, in order);
//! - [`admin`] — the operators' HTTP port: `/metrics`, `/healthz`, `/readyz`, `/v1/...`;
//! - [`handlers`] — one module per Kafka API, each taking a [`broker::Broker`];
//! - [`broker`] — the thin holder of the node and the subsystems, for handlers;
//! - subsystems, each on an `Arc<`[`node::Node`]`>` and never importing `broker`:
//!   [`txn`] (the transaction coordinator and its markers, above [`group`], whose offsets a
//!   transaction commits), [`group`] (the group coordinator and consumer lag), both above
//!   [`coordination`] (following the leadership of their internal topic, loading it),
//!   [`replication`] (followers fetching
//!   from leaders, ISR proposals), [`tier`] (offload, remote reads, remote retention),
//!   [`cleaner`] (compaction thread), [`session`] (registration and heartbeats),
//!   [`fetch_session`] (incremental fetch sessions, KIP-227), [`quota`] (client quotas:
//!   sensors and throttles, above [`security`], whose principals it charges), [`security`]
//!   (TLS, SASL authentication, principals, ACLs), [`telemetry`] (metrics clients push,
//!   KIP-714);
//! - [`node`] — the shared core: settings, metadata handle, partitions, metrics, clock; topic
//!   operations, leader lookup, producer ids;
//! - [`partition`] — a hosted partition: log operations, replica state, its view across
//!   tiers, the registry kept in step with the metadata state;
//! - [`zones`] — this broker's zone, KIP-392's replica selector, bytes counted by zone crossed;
//! - [`metrics`] — the registry subsystems register with, request-path and cluster metrics;
//! - [`error`] — Kafka error codes, chosen in one place;
//! - [`config`], [`topic_config`] — broker settings (with Kafka-style listeners) and Kafka
//!   topic configs;
//! - [`log`] — the partition log engine: segments, indexes, recovery, retention, compaction,
//!   producer state;
//! - [`placement`] — rack-aware replica placement for new partitions;
//! - [`protocol`] — frames, request decoding, the API table, the inter-broker client;
//! - [`tls`], [`sasl`] — rustls configurations from PEM files; SASL PLAIN and SCRAM, both
//!   sides, without I/O;
//! - [`schedule`] — periodic jobs of one shape, due by the clock, counted on `/metrics`;
//! - [`clock`] — every time read: wall-clock milliseconds and monotonic instants, injectable.

pub mod admin;
pub mod balance;
pub mod broker;
pub mod cleaner;
pub mod clock;
pub mod config;
pub mod coordination;
pub mod dynamic_config;
pub mod error;
pub mod fetch_session;
pub mod group;
pub mod handlers;
pub mod housekeeping;
#[cfg(feature = "iceberg")]
pub mod iceberg;
pub mod log;
pub mod loggers;
pub mod metrics;
pub mod node;
pub mod partition;
pub mod placement;
pub mod protocol;
pub mod quota;
pub mod replication;
pub mod sasl;
pub mod schedule;
pub mod security;
pub mod serve;
pub mod server;
pub mod session;
pub mod share;
pub mod sys;
pub mod telemetry;
#[cfg(test)]
mod testing;
pub mod throttle;
pub mod tier;
pub mod tls;
pub mod topic_config;
pub mod txn;
pub mod zones;

/// Inputs that once crashed or hung a fuzz target, kept in `fuzz/regressions/<target>/` and
/// replayed by the unit tests beside the code each target drives.
#[cfg(test)]
pub(crate) fn fuzz_regressions(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/regressions")
        .join(target);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let path = e.expect("dir entry").path();
            let data = std::fs::read(&path).expect("read regression input");
            (path.display().to_string(), data)
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no regression inputs in {}", dir.display());
    out
}
