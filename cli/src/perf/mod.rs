//! `strata perf produce|consume|e2e|group|commit|txn`: load generators and measurements.
//!
//! Progress goes to stderr once a second; the final summary is one line on stdout of
//! space-separated `key=value` fields, stable for scripts:
//!
//! ```text
//! produce records=.. bytes=.. seconds=.. records_per_sec=.. mb_per_sec=.. p50_ms=.. p99_ms=.. p999_ms=.. max_ms=.. errors=..
//! consume records=.. bytes=.. seconds=.. records_per_sec=.. mb_per_sec=..
//! e2e records=.. p50_ms=.. p99_ms=.. p999_ms=.. max_ms=..
//! group members=.. partitions=.. strategy=.. ... join_ms=.. add_ms=.. kill_ms=.. ...
//! commit clients=.. partitions=.. mode=sync commits=.. seconds=.. commits_per_sec=.. p50_ms=.. ...
//! txn mode=transactional records=.. transactions=.. ... commit_p50_ms=.. [e2e_p50_ms=..] errors=..
//! get concurrency=.. range_bytes=.. gets=.. bytes=.. seconds=.. mb_per_sec=.. p50_ms=.. ...
//! connect connections=.. concurrency=.. seconds=.. connections_per_sec=.. p50_ms=.. ...
//! ```
//!
//! `mb_per_sec` is in MiB (2^20 bytes) per second, as Kafka's perf tools report it.
//!
//! - [`produce`], [`consume`], [`e2e`] — record throughput and latency;
//! - [`group`] — consumer-group membership: join, scale-out and member-death times, with the
//!   members run as child processes ([`member`], the hidden `perf group-member`);
//! - [`commit`] — OffsetCommit throughput and latency against one group coordinator;
//! - [`txn`] — a transactional producer's throughput and commit latency, against the same
//!   records without transactions, and read_committed end-to-end latency;
//! - [`get`] — the object store's ranged-GET throughput (the yardstick for remote reads);
//! - [`connect`] — new connections per second, with their TLS handshake and SASL exchange.

use clap::Subcommand;

use super::common::ConnectArgs;

mod broker_cpu;
mod commit;
mod connect;
mod consume;
mod e2e;
mod get;
mod group;
mod member;
mod produce;
mod report;
mod setup;
mod standard;
mod txn;

pub use commit::PerfCommitArgs;
pub use connect::PerfConnectArgs;
pub use consume::PerfConsumeArgs;
pub use e2e::{decode_e2e_header, encode_e2e_header, PerfE2eArgs};
pub use get::PerfGetArgs;
pub use group::PerfGroupArgs;
pub use member::{AssignmentStrategy, GroupMemberArgs};
pub use produce::{make_payload, PerfProduceArgs};
pub use standard::PerfStandardArgs;
pub use txn::PerfTxnArgs;

#[derive(Subcommand, Debug)]
pub enum PerfCommand {
    /// Produce generated records as fast as possible (or at --rate); report throughput and
    /// send-to-acknowledgement latency.
    Produce(PerfProduceArgs),
    /// Consume records from the beginning of every partition; report throughput.
    Consume(PerfConsumeArgs),
    /// Produce at --rate while a consumer waits at the tail; report produce-to-consume latency.
    E2e(PerfE2eArgs),
    /// Start N consumer-group members (child processes); report the time to a stable
    /// assignment after they join, after one more joins, and after one is killed (SIGKILL).
    Group(PerfGroupArgs),
    /// Commit offsets from C clients of one group as fast as they can; report commits/s and
    /// commit latency.
    Commit(PerfCommitArgs),
    /// Transactions of R records over P partitions as fast as they commit (or at --rate);
    /// report throughput and commit latency, `--plain` the same without transactions,
    /// `--e2e` the read_committed produce-to-consume latency.
    Txn(PerfTxnArgs),
    /// Ranged GETs of segment objects straight from the object store, C in flight; report
    /// MB/s and GET latency.
    Get(PerfGetArgs),
    /// Open N connections, C at a time, each with its TLS handshake and SASL exchange (as
    /// the -X properties say) and one Metadata request; report connections/s and latency.
    Connect(PerfConnectArgs),
    /// The regression guard: start brokers, run the standard rows (produce, consume, a new
    /// group over 10,000 partitions, TLS, RF=3 latency, replay isolation) beside their floors
    /// and goals, and write the result as JSON.
    Standard(PerfStandardArgs),
    /// One member of `perf group` (internal: reports its assignment on stdout).
    #[command(hide = true)]
    GroupMember(GroupMemberArgs),
}

impl PerfCommand {
    /// The Kafka connection settings, for the commands that talk to a broker.
    pub fn conn(&self) -> Option<&ConnectArgs> {
        match self {
            PerfCommand::Produce(a) => Some(&a.conn),
            PerfCommand::Consume(a) => Some(&a.conn),
            PerfCommand::E2e(a) => Some(&a.conn),
            PerfCommand::Group(a) => Some(&a.conn),
            PerfCommand::Commit(a) => Some(&a.conn),
            PerfCommand::Txn(a) => Some(&a.conn),
            PerfCommand::GroupMember(a) => Some(&a.conn),
            PerfCommand::Connect(a) => Some(&a.conn),
            PerfCommand::Get(_) | PerfCommand::Standard(_) => None,
        }
    }
}

pub fn run(cmd: PerfCommand) -> anyhow::Result<()> {
    match cmd {
        PerfCommand::Produce(args) => produce::run(args),
        PerfCommand::Consume(args) => consume::run(args),
        PerfCommand::E2e(args) => e2e::run(args),
        PerfCommand::Group(args) => group::run(args),
        PerfCommand::Commit(args) => commit::run(args),
        PerfCommand::Txn(args) => txn::run(args),
        PerfCommand::Get(args) => get::run(args),
        PerfCommand::Connect(args) => connect::run(args),
        PerfCommand::GroupMember(args) => member::run(args),
        PerfCommand::Standard(args) => standard::run(args),
    }
}
