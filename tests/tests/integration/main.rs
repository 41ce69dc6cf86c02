//! The integration, fault and compatibility suite: one test binary (each module drives real
//! `strata` processes), so the broker and librdkafka are linked once rather than once per file.

// Tests wait on real processes in real time.
#![allow(clippy::disallowed_methods)]

mod abuse;
mod admin_http;
mod admin_precedence;
mod api_coverage;
mod bad_input;
mod broker_configs;
mod chaos;
mod cli_errors;
mod cluster;
mod codecs;
mod compaction;
mod console;
mod containers;
mod cooperative;
mod deploy;
mod elastic;
mod fetch_sessions;
mod group_restart;
mod groups;
mod hostile;
mod iceberg;
mod idempotence;
mod lag;
mod leader_epochs;
mod log_dirs;
mod long_poll;
mod objstore_s3;
mod objstore_serve;
mod offsets;
mod partition;
mod perf_cli;
mod quotas;
mod reassignment;
mod replication;
mod restart;
mod retention;
mod scale;
mod security;
mod segments;
mod share_groups;
mod telemetry;
mod tiered;
mod timestamps;
mod topics;
mod transactions;
mod zero_copy;
mod zones;
