//! `strata broker drain|remove`: taking a broker out of service.
//!
//! `drain N` moves every replica off broker N (to the least loaded live brokers the partition
//! does not use, rack-aware) with the reassignment executor, so leadership leaves it too; when
//! it returns, N holds nothing and may be stopped with no partition under-replicated.
//! `remove N` then unregisters it (Kafka's UnregisterBroker); the broker refuses while N is
//! running, still holds replicas, or is a metadata voter, and says what to do first.

use clap::{Args, Subcommand};

use crate::cluster::{self, kafka, plan, RunArgs};
use crate::common::{emit, ConnectArgs};

#[derive(Subcommand, Debug)]
pub enum BrokerCommand {
    /// Move every replica and every leadership off a broker, then report it is safe to stop.
    Drain(DrainArgs),
    /// Unregister a stopped broker that holds no replicas.
    Remove(RemoveArgs),
}

impl BrokerCommand {
    pub fn conn(&self) -> &ConnectArgs {
        match self {
            BrokerCommand::Drain(a) => &a.conn,
            BrokerCommand::Remove(a) => &a.conn,
        }
    }
}

#[derive(Args, Debug)]
pub struct DrainArgs {
    /// The broker's node id.
    pub node_id: i32,
    /// Print the plan (Kafka's reassignment JSON) and move nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args, Debug)]
pub struct RemoveArgs {
    /// The broker's node id.
    pub node_id: i32,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

pub fn run(cmd: BrokerCommand) -> anyhow::Result<()> {
    match cmd {
        BrokerCommand::Drain(args) => drain(args),
        BrokerCommand::Remove(args) => cluster::block(async {
            let mut c = kafka::connect(&args.conn).await?;
            kafka::unregister(&mut c, args.node_id).await?;
            emit(format_args!("removed broker={}", args.node_id))
        }),
    }
}

fn drain(args: DrainArgs) -> anyhow::Result<()> {
    let n = args.node_id;
    cluster::block(async {
        let mut c = kafka::connect(&args.conn).await?;
        cluster::check_quiet(&mut c).await?;
        let view = kafka::cluster(&mut c).await?;
        let moves = plan::drain(&view.live(), &view.partitions, n).map_err(anyhow::Error::msg)?;
        eprintln!(
            "drain: broker {n} holds {} replicas; moving them to {} other live brokers",
            moves.len(),
            view.brokers.iter().filter(|b| b.id != n).count()
        );
        if args.dry_run {
            emit(format_args!("{}", cluster::reassign::plan_json(&moves)))?;
            return Ok(());
        }
        cluster::run_moves(&mut c, &view, moves, args.run).await?;
        if args.run.no_wait {
            return Ok(());
        }
        let after = kafka::cluster(&mut c).await?;
        let left: Vec<String> = after
            .partitions
            .iter()
            .filter(|p| p.replicas.contains(&n))
            .map(|p| format!("{}-{}", p.topic, p.partition))
            .collect();
        if !left.is_empty() {
            anyhow::bail!(
                "broker {n} still holds {} replicas (created during the drain?): {}; run the drain again",
                left.len(),
                left.join(",")
            );
        }
        emit(format_args!(
            "drained broker={n} replicas=0: stop it now (SIGTERM), then `strata broker remove {n}`"
        ))
    })
}
