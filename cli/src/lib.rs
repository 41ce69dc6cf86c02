//! The `strata` command's client side (the binary is `src/main.rs`; `strata serve` runs
//! `strata_broker::serve`). The client commands speak the Kafka protocol through librdkafka so
//! they work against any Kafka-compatible broker.
//!
//! - `strata topic create|list|describe|alter|delete` — [`topic`];
//! - `strata produce` — lines from stdin to a topic — [`produce`];
//! - `strata consume` — records to stdout — [`consume`];
//! - `strata perf produce|consume|e2e|group|commit` — load generation, latency, consumer-group
//!   rebalance times and offset-commit throughput — [`perf`];
//! - `strata group list|describe|delete|reset-offsets` — consumer groups — [`group`];
//! - `strata cluster status|add-voter|remove-voter` — the controller, quorum, brokers and
//!   unhealthy partitions, over the admin HTTP port; `strata cluster reassign|balance` —
//!   replica moves with Kafka's reassignment APIs — [`cluster`];
//! - `strata broker drain|remove` — taking a broker out of service — [`broker`];
//! - `strata txn list|describe|abort|find-hanging|abort-hanging` — transactions — [`txn`];
//! - `strata share list|describe|reset-offsets|delete|dlq replay` — share groups and their
//!   dead-letter topics — [`share`];
//! - `strata user create|delete|list` — SCRAM users — [`user`];
//! - `strata acl add|list|remove` — ACLs — [`acl`];
//! - `strata quota alter|describe` — client quotas — [`quota`];
//! - `strata iceberg list|describe|rewrite` — topics' Iceberg tables, over the admin HTTP
//!   port — [`iceberg`].
//!
//! Every command takes `-b/--bootstrap-server` (env `STRATA_BOOTSTRAP`), repeated
//! `-X key=value` librdkafka properties and `--request-timeout-ms`; the security ones
//! (`security.protocol`, `sasl.*`, `ssl.*`) also secure the CLI's own Kafka client.

// A client: benchmarks and progress output measure real time.
#![allow(clippy::disallowed_methods)]

use clap::Subcommand;

pub mod acl;
pub mod broker;
pub mod cluster;
pub mod common;
pub mod consume;
pub mod group;
pub mod health;
pub mod iceberg;
mod incremental_alter;
pub mod objstore;
pub mod perf;
pub mod produce;
pub mod quota;
pub mod share;
pub mod topic;
pub mod txn;
pub mod user;

#[derive(Subcommand, Debug)]
pub enum ClientCommand {
    /// Create, list, describe, alter and delete topics.
    #[command(subcommand)]
    Topic(topic::TopicCommand),
    /// Produce lines read from stdin, one record per line.
    Produce(produce::ProduceArgs),
    /// Consume records and print their values to stdout, one per line.
    Consume(consume::ConsumeArgs),
    /// Load generators: produce/consume throughput, end-to-end latency, consumer-group
    /// rebalance times and offset-commit throughput.
    #[command(subcommand)]
    Perf(perf::PerfCommand),
    /// List, describe (members, lag) and delete consumer groups; reset their offsets.
    #[command(subcommand)]
    Group(group::GroupCommand),
    /// Cluster health (controller, quorum, brokers, unhealthy partitions), voter changes,
    /// replica reassignment and balancing.
    #[command(subcommand)]
    Cluster(cluster::ClusterCommand),
    /// Drain a broker of its replicas and leaderships; unregister a stopped one.
    #[command(subcommand)]
    Broker(broker::BrokerCommand),
    /// List and describe transactions; abort an open or a hanging one.
    #[command(subcommand)]
    Txn(txn::TxnCommand),
    /// List, describe and delete share groups (queues); reset where they read; replay
    /// dead letters.
    #[command(subcommand)]
    Share(share::ShareCommand),
    /// Create, delete and list SCRAM users.
    #[command(subcommand)]
    User(user::UserCommand),
    /// Add, list and remove ACLs (with the broker's authorizer on).
    #[command(subcommand)]
    Acl(acl::AclCommand),
    /// Set, remove and describe client quotas (users and client ids).
    #[command(subcommand)]
    Quota(quota::QuotaCommand),
    /// Prepare the object store: create the bucket, add the multipart-abort lifecycle rule.
    #[command(subcommand)]
    Objstore(objstore::ObjstoreCommand),
    /// Probe one node: exit 0 when it is ready to serve (`--live`: when its process is up).
    Health(health::HealthArgs),
    /// Topics' Iceberg tables: list them, describe one (snapshot, offsets, lag), rewrite one.
    #[command(subcommand)]
    Iceberg(iceberg::IcebergCommand),
}

impl ClientCommand {
    fn conn(&self) -> Option<&common::ConnectArgs> {
        match self {
            ClientCommand::Topic(cmd) => Some(cmd.conn()),
            ClientCommand::Produce(args) => Some(&args.conn),
            ClientCommand::Consume(args) => Some(&args.conn),
            ClientCommand::Perf(cmd) => cmd.conn(),
            ClientCommand::Group(cmd) => Some(cmd.conn()),
            ClientCommand::Cluster(_) => None,
            ClientCommand::Broker(cmd) => Some(cmd.conn()),
            ClientCommand::Txn(cmd) => Some(cmd.conn()),
            ClientCommand::Share(cmd) => Some(cmd.conn()),
            ClientCommand::User(cmd) => Some(cmd.conn()),
            ClientCommand::Acl(cmd) => Some(cmd.conn()),
            ClientCommand::Quota(cmd) => Some(cmd.conn()),
            ClientCommand::Health(_) | ClientCommand::Objstore(_) | ClientCommand::Iceberg(_) => {
                None
            }
        }
    }
}

/// Routes librdkafka's log (through the `log` facade) to stderr once `-X debug=...` asks
/// librdkafka for debug contexts; silent otherwise, since the commands report the errors
/// that matter themselves and librdkafka repeats connection errors many times a second.
/// `STRATA_LOG` (an env-filter directive, e.g. `STRATA_LOG=error`) overrides both.
fn init_logging(conn: Option<&common::ConnectArgs>) {
    let default = if conn.is_some_and(|c| c.property("debug").is_some()) {
        "debug"
    } else {
        "off"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("STRATA_LOG")
        .unwrap_or_else(|_| default.into());
    // Ignored if a subscriber is already installed (e.g. in tests).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .without_time()
        .with_target(false)
        .try_init();
}

pub fn run(cmd: ClientCommand) -> anyhow::Result<()> {
    init_logging(cmd.conn());
    match cmd {
        ClientCommand::Topic(cmd) => topic::run(cmd),
        ClientCommand::Produce(args) => produce::run(args),
        ClientCommand::Consume(args) => consume::run(args),
        ClientCommand::Perf(cmd) => perf::run(cmd),
        ClientCommand::Group(cmd) => group::run(cmd),
        ClientCommand::Broker(cmd) => broker::run(cmd),
        ClientCommand::Txn(cmd) => txn::run(cmd),
        ClientCommand::Share(cmd) => share::run(cmd),
        ClientCommand::User(cmd) => user::run(cmd),
        ClientCommand::Acl(cmd) => acl::run(cmd),
        ClientCommand::Quota(cmd) => quota::run(cmd),
        ClientCommand::Health(args) => health::run(args),
        ClientCommand::Objstore(cmd) => objstore::run(cmd),
        ClientCommand::Iceberg(cmd) => iceberg::run(cmd),
        ClientCommand::Cluster(cmd) => {
            if !cluster::run(cmd)? {
                // Unhealthy: distinct from an error (1), for scripts that wait for health.
                std::process::exit(2);
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::*;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        command: ClientCommand,
    }

    fn parse(args: &[&str]) -> Result<ClientCommand, clap::Error> {
        Cli::try_parse_from(std::iter::once("strata").chain(args.iter().copied()))
            .map(|c| c.command)
    }

    #[test]
    fn command_definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn topic_create_flags() {
        let cmd = parse(&[
            "topic",
            "create",
            "t",
            "-p",
            "3",
            "--replication-factor",
            "1",
            "--config",
            "retention.ms=5",
            "-X",
            "debug=broker",
            "-b",
            "h:1",
        ])
        .unwrap();
        let ClientCommand::Topic(topic::TopicCommand::Create(a)) = cmd else {
            panic!("{cmd:?}");
        };
        assert_eq!(a.name, "t");
        assert_eq!(a.partitions, Some(3));
        assert_eq!(a.replication_factor, Some(1));
        assert_eq!(a.configs, vec![("retention.ms".into(), "5".into())]);
        assert_eq!(a.conn.bootstrap_server, "h:1");
        assert_eq!(a.conn.properties, vec![("debug".into(), "broker".into())]);
    }

    #[test]
    fn malformed_property_is_rejected() {
        assert!(parse(&["topic", "list", "-X", "novalue"]).is_err());
    }

    #[test]
    fn consume_position_flags_conflict() {
        assert!(parse(&["consume", "t", "--from-beginning", "--offset", "3"]).is_err());
        assert!(parse(&["consume", "t", "--group", "g", "--partition", "0"]).is_err());
        assert!(parse(&["consume", "t", "--offset", "3", "--partition", "1"]).is_ok());
    }

    #[test]
    fn perf_produce_defaults() {
        let cmd = parse(&["perf", "produce", "t", "--records", "10"]).unwrap();
        let ClientCommand::Perf(perf::PerfCommand::Produce(a)) = cmd else {
            panic!("{cmd:?}");
        };
        assert_eq!(a.record_size, 100);
        assert_eq!(a.acks, common::Acks::Leader);
        assert_eq!(a.linger_ms, 5);
        assert_eq!(a.batch_size, 1_048_576);
        assert_eq!(a.compression, common::Compression::None);
        assert_eq!(a.rate, 0);
    }

    #[test]
    fn perf_group_and_commit_defaults() {
        let cmd = parse(&["perf", "group", "--topic", "t", "--members", "3"]).unwrap();
        let ClientCommand::Perf(perf::PerfCommand::Group(a)) = cmd else {
            panic!("{cmd:?}");
        };
        assert_eq!((a.members, a.partitions), (3, None));
        assert_eq!(
            (a.session_timeout_ms, a.heartbeat_interval_ms),
            (6000, 3000)
        );
        assert_eq!(a.assignment_strategy, perf::AssignmentStrategy::Range);
        assert!(parse(&["perf", "group", "--topic", "t", "--members", "0"]).is_err());
        let cmd = parse(&[
            "perf",
            "group",
            "-t",
            "t",
            "-m",
            "2",
            "--assignment-strategy",
            "cooperative-sticky",
        ])
        .unwrap();
        let ClientCommand::Perf(perf::PerfCommand::Group(a)) = cmd else {
            panic!("{cmd:?}");
        };
        assert_eq!(
            a.assignment_strategy,
            perf::AssignmentStrategy::CooperativeSticky
        );

        let cmd = parse(&["perf", "commit", "--group", "g", "--topic", "t"]).unwrap();
        let ClientCommand::Perf(perf::PerfCommand::Commit(a)) = cmd else {
            panic!("{cmd:?}");
        };
        assert_eq!((a.clients, a.seconds, a.partitions), (1, 10, None));
        assert!(parse(&["perf", "commit", "--group", "g", "--topic", "t", "-c", "0"]).is_err());
    }

    #[test]
    fn produce_acks_accepts_minus_one() {
        let cmd = parse(&["produce", "t", "--acks", "-1"]).unwrap();
        let ClientCommand::Produce(a) = cmd else {
            panic!("{cmd:?}");
        };
        assert_eq!(a.acks, Some(common::Acks::All));
    }
}
