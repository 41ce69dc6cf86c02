//! Strata's broker: the Kafka protocol server, the partition log engine and admin HTTP. The
//! `strata` binary and its client commands are the `strata-cli` crate (`cli/`).
//!
//! Layout (request path top to bottom):
//! - [`serve`] — `strata serve`: start-up order, housekeeping, clean shutdown;
//! - [`session`] — registration, heartbeats and controlled shutdown with the controller;
//! - [`server`] — Kafka listener and connections (frames in, responses out, in order);
//! - [`protocol`] — frames, request decoding, the API versions Strata speaks;
//! - [`handlers`] — one module per Kafka API;
//! - [`broker`] — state shared by handlers; topic creation; producer ids;
//! - [`group`] — the group coordinator: membership and committed offsets;
//! - [`partition`] — the hosted partitions, kept in step with the metadata state;
//! - [`placement`] — rack-aware replica placement for new partitions;
//! - [`replication`] — followers fetching from leaders, the high watermark and the ISR;
//! - [`log`] — the partition log engine: segments, indexes, recovery, retention, compaction,
//!   producer state;
//! - [`cleaner`] — the background thread that compacts `cleanup.policy=compact` logs;
//! - [`config`], [`topic_config`] — broker settings and Kafka topic configs;
//! - [`error`] — Kafka error codes, chosen in one place;
//! - [`admin`] — `/metrics`, `/healthz`, `/readyz`.

pub mod admin;
pub mod broker;
pub mod cleaner;
pub mod clock;
pub mod config;
pub mod error;
pub mod group;
pub mod handlers;
pub mod log;
pub mod metrics;
pub mod node;
pub mod partition;
pub mod placement;
pub mod protocol;
pub mod replication;
pub mod serve;
pub mod server;
pub mod session;
pub mod tier;
pub mod topic_config;

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
