//! Strata's broker: the Kafka protocol server, the partition log engine, and the CLI.
//!
//! Layout:
//! - [`config`] — broker settings (file, then `STRATA_*` environment, then flags);
//! - [`topic_config`] — topic configs under Kafka's names and the per-log settings they yield;
//! - [`log`] — the partition log engine: segments, indexes, recovery, retention, producer state.

pub mod config;
pub mod log;
pub mod protocol;
pub mod topic_config;
