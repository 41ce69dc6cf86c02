//! `strata cluster status|add-voter|remove-voter`: the cluster as one node's admin endpoint
//! sees it, and voter membership changes. Unlike the other client commands these speak to
//! the admin HTTP port, since Kafka's protocol has no view of the metadata quorum.
//!
//! `strata cluster reassign|balance` move replicas with Kafka's reassignment APIs
//! ([`reassign`], [`plan`] — the broker's `balance` — and [`kafka`]); `strata broker drain`
//! uses the same executor.
//!
//! `status` prints one line per fact, `key=value` separated by spaces, for people and for
//! `grep`: the controller and quorum, each broker, then every partition that is not healthy.
//! It exits with status 2 when a partition is offline or under-replicated, or a broker is
//! fenced, so scripts can wait for health.

use anyhow::Context as _;
use clap::{Args, Subcommand};
use serde::Deserialize;

use super::common::{admin_request, emit, ConnectArgs};

pub mod kafka;
pub mod reassign;

/// The planner is the broker's, so the controller's automatic balancer and these commands
/// plan alike.
pub use strata_broker::balance as plan;

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Controller, metadata quorum, brokers, every partition that is not healthy and every
    /// reassignment in progress.
    Status(AdminArgs),
    /// Move partitions' replicas: run a plan in Kafka's reassignment JSON, show the moves in
    /// progress, or cancel them.
    Reassign(ReassignArgs),
    /// Spread replicas and preferred leaders evenly (rack-aware) over the live brokers.
    Balance(BalanceArgs),
    /// Promote a learner (a broker started with `--voters` not listing it) to a voter.
    AddVoter(VoterArgs),
    /// Demote a voter to a learner (it stays a broker).
    RemoveVoter(VoterArgs),
}

#[derive(Args, Debug)]
pub struct AdminArgs {
    /// Admin HTTP address of any node of the cluster; `https://HOST:PORT` for an admin port
    /// with TLS (CA and client certificate from `STRATA_ADMIN_SSL_CA_LOCATION`,
    /// `STRATA_ADMIN_SSL_CERTIFICATE_LOCATION`, `STRATA_ADMIN_SSL_KEY_LOCATION`).
    #[arg(
        long = "admin-addr",
        env = "STRATA_ADMIN_ADDR",
        default_value = "127.0.0.1:9644",
        value_name = "HOST:PORT"
    )]
    pub admin_addr: String,
}

#[derive(Args, Debug)]
pub struct ReassignArgs {
    /// A plan in Kafka's format (`{"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..]}]}`)
    /// to run (or, with --cancel, whose moves to cancel).
    #[arg(long, value_name = "FILE", conflicts_with = "status")]
    pub plan: Option<std::path::PathBuf>,
    /// Show the moves in progress and how far their new replicas have got.
    #[arg(long)]
    pub status: bool,
    /// Cancel the moves in progress (all, or those of --plan): back to the original replicas.
    #[arg(long, conflicts_with = "status")]
    pub cancel: bool,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args, Debug, Clone, Copy)]
pub struct RunArgs {
    /// Moves running at once; the next starts when one completes.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub max_concurrent: usize,
    /// Submit the first moves and return instead of following them to the end.
    #[arg(long)]
    pub no_wait: bool,
}

#[derive(Args, Debug)]
pub struct BalanceArgs {
    /// Print the plan (Kafka's reassignment JSON, for `reassign --plan`) and move nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args, Debug)]
pub struct VoterArgs {
    /// The node id.
    pub node_id: u64,
    #[command(flatten)]
    pub admin: AdminArgs,
}

#[derive(Deserialize)]
struct Status {
    node_id: u64,
    controller: Option<u64>,
    quorum: Quorum,
    /// The quorum's replicas as its leader sees them (absent when no leader answered).
    #[serde(default)]
    quorum_replicas: Option<Vec<QuorumReplica>>,
    #[serde(default)]
    quorum_high_watermark: Option<i64>,
    brokers: Vec<BrokerView>,
    partitions: usize,
    unhealthy: Vec<Unhealthy>,
    #[serde(default)]
    reassigning: Vec<Reassigning>,
}

#[derive(Deserialize)]
struct Reassigning {
    topic: String,
    partition: usize,
    replicas: Vec<u64>,
    adding: Vec<u64>,
    removing: Vec<u64>,
    isr: Vec<u64>,
}

#[derive(Deserialize)]
struct Quorum {
    role: String,
    term: u64,
    last_applied_index: Option<u64>,
    voters: std::collections::BTreeMap<u64, String>,
    learners: std::collections::BTreeMap<u64, String>,
}

#[derive(Deserialize)]
struct QuorumReplica {
    id: u64,
    voter: bool,
    log_end: i64,
    last_fetch_ms: i64,
    last_caught_up_ms: i64,
}

#[derive(Deserialize)]
struct BrokerView {
    id: u64,
    host: String,
    port: u16,
    rack: Option<String>,
    epoch: i64,
    state: String,
    /// Log directories that failed (KIP-858).
    #[serde(default)]
    offline_log_dirs: Vec<String>,
}

#[derive(Deserialize)]
struct Unhealthy {
    topic: String,
    partition: usize,
    state: String,
    leader: Option<u64>,
    leader_epoch: i32,
    replicas: Vec<u64>,
    isr: Vec<u64>,
}

fn ids<T>(m: &std::collections::BTreeMap<u64, T>) -> String {
    let v: Vec<String> = m.keys().map(u64::to_string).collect();
    if v.is_empty() {
        "-".to_string()
    } else {
        v.join(",")
    }
}

fn list(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

/// Runs a cluster command; `Ok(false)` when `status` found the cluster unhealthy.
pub fn run(cmd: ClusterCommand) -> anyhow::Result<bool> {
    match cmd {
        ClusterCommand::Status(args) => status(&args.admin_addr),
        ClusterCommand::Reassign(args) => reassign_cmd(args),
        ClusterCommand::Balance(args) => balance_cmd(args),
        ClusterCommand::AddVoter(args) => change(&args, "add"),
        ClusterCommand::RemoveVoter(args) => change(&args, "remove"),
    }
}

/// Runs an async admin conversation on a current-thread runtime.
pub fn block<T>(f: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    super::common::current_thread_runtime()?.block_on(f)
}

fn reassign_cmd(args: ReassignArgs) -> anyhow::Result<bool> {
    block(async {
        let mut c = kafka::connect(&args.conn).await?;
        if args.status {
            reassign::status(&mut c).await?;
            return Ok(true);
        }
        let view = kafka::cluster(&mut c).await?;
        let moves = match &args.plan {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                Some(reassign::read_plan(&text, &view)?)
            }
            None => None,
        };
        if args.cancel {
            let failed = reassign::cancel(&mut c, moves.as_deref()).await?;
            if failed > 0 {
                anyhow::bail!("{failed} reassignments could not be cancelled");
            }
            return Ok(true);
        }
        let Some(moves) = moves else {
            anyhow::bail!("say what to do: --plan FILE, --status or --cancel");
        };
        run_moves(&mut c, &view, moves, args.run).await
    })
}

/// Runs `moves` with the executor and fails if any was refused.
pub async fn run_moves(
    c: &mut strata_broker::protocol::client::Client,
    view: &kafka::ClusterView,
    moves: Vec<plan::Move>,
    run: RunArgs,
) -> anyhow::Result<bool> {
    let failed = reassign::execute(c, view, moves, run.max_concurrent, !run.no_wait).await?;
    if failed > 0 {
        anyhow::bail!("{failed} moves were refused (see the refused lines)");
    }
    Ok(true)
}

/// Refuses to plan while moves are running: a plan from a moving cluster would fight them.
pub async fn check_quiet(c: &mut strata_broker::protocol::client::Client) -> anyhow::Result<()> {
    let ongoing = kafka::ongoing(c).await?;
    if !ongoing.is_empty() {
        anyhow::bail!(
            "{} reassignments are in progress; wait for them (strata cluster reassign --status) or cancel them (--cancel) first",
            ongoing.len()
        );
    }
    Ok(())
}

fn balance_cmd(args: BalanceArgs) -> anyhow::Result<bool> {
    block(async {
        let mut c = kafka::connect(&args.conn).await?;
        check_quiet(&mut c).await?;
        let view = kafka::cluster(&mut c).await?;
        let live = view.live();
        let moves = plan::balance(&live, &view.partitions);
        let copies = moves.iter().filter(|m| m.copies_data()).count();
        eprintln!(
            "balance: {} partitions on {} live brokers; {} moves ({copies} copy data, {} only change the preferred leader)",
            view.partitions.len(),
            view.brokers.len(),
            moves.len(),
            moves.len() - copies
        );
        // Each follower in another zone than its leader carries the partition's produce bytes
        // across a zone boundary once more (billed per GB in both directions on most clouds).
        eprintln!(
            "balance: followers in another zone than their preferred leader: {} before, {} after",
            plan::cross_zone_followers(&live, &view.partitions, &[]),
            plan::cross_zone_followers(&live, &view.partitions, &moves),
        );
        if args.dry_run {
            emit(format_args!("{}", reassign::plan_json(&moves)))?;
            return Ok(true);
        }
        run_moves(&mut c, &view, moves, args.run).await
    })
}

fn change(args: &VoterArgs, op: &str) -> anyhow::Result<bool> {
    let body = admin_request(
        &args.admin.admin_addr,
        "POST",
        &format!("/v1/cluster/voters?{op}={}", args.node_id),
    )
    .with_context(|| format!("{op} voter {}", args.node_id))?;
    emit(format_args!("{}", body.trim()))?;
    Ok(true)
}

fn status(admin_addr: &str) -> anyhow::Result<bool> {
    let body = admin_request(admin_addr, "GET", "/v1/cluster")
        .with_context(|| format!("admin endpoint {admin_addr}"))?;
    let s: Status = serde_json::from_str(&body).context("decoding /v1/cluster")?;
    let controller = s.controller.map_or("none".to_string(), |c| c.to_string());
    emit(format_args!(
        "controller={controller} term={} voters={} learners={} asked_node={} asked_role={} applied_index={}",
        s.quorum.term,
        ids(&s.quorum.voters),
        ids(&s.quorum.learners),
        s.node_id,
        s.quorum.role,
        s.quorum.last_applied_index.map_or("-".to_string(), |i| i.to_string()),
    ))?;
    // As `kafka-metadata-quorum describe --replication`: each node's log end, lag behind the
    // leader's, and how long ago it last fetched and was caught up.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let ago = |t: i64| {
        if t < 0 {
            "-".to_string()
        } else {
            format!("{}ms", (now - t).max(0))
        }
    };
    let leader_end = (s.quorum_replicas.iter().flatten())
        .find(|r| Some(r.id) == s.controller)
        .map(|r| r.log_end);
    for r in s.quorum_replicas.iter().flatten() {
        emit(format_args!(
            "quorum_replica id={} kind={} log_end={} lag={} last_fetch={} last_caught_up={} high_watermark={}",
            r.id,
            if r.voter { "voter" } else { "observer" },
            r.log_end,
            match leader_end {
                Some(end) if r.log_end >= 0 => (end - r.log_end).max(0).to_string(),
                _ => "-".to_string(),
            },
            ago(r.last_fetch_ms),
            ago(r.last_caught_up_ms),
            s.quorum_high_watermark.unwrap_or(-1),
        ))?;
    }
    for b in &s.brokers {
        emit(format_args!(
            "broker id={} addr={}:{} rack={} epoch={} state={}",
            b.id,
            b.host,
            b.port,
            b.rack.as_deref().unwrap_or("-"),
            b.epoch,
            b.state
        ))?;
        for dir in &b.offline_log_dirs {
            emit(format_args!("failed_log_dir broker={} dir={dir}", b.id))?;
        }
    }
    let offline = s.unhealthy.iter().filter(|u| u.state == "offline").count();
    emit(format_args!(
        "partitions total={} offline={offline} under_replicated={}",
        s.partitions,
        s.unhealthy.len() - offline
    ))?;
    for u in &s.unhealthy {
        emit(format_args!(
            "unhealthy topic={} partition={} state={} leader={} leader_epoch={} replicas={} isr={}",
            u.topic,
            u.partition,
            u.state,
            u.leader.map_or("none".to_string(), |l| l.to_string()),
            u.leader_epoch,
            list(&u.replicas),
            list(&u.isr)
        ))?;
    }
    emit(format_args!(
        "reassignments in_progress={}",
        s.reassigning.len()
    ))?;
    for r in &s.reassigning {
        emit(format_args!(
            "reassigning topic={} partition={} replicas={} adding={} removing={} isr={}",
            r.topic,
            r.partition,
            list(&r.replicas),
            list(&r.adding),
            list(&r.removing),
            list(&r.isr)
        ))?;
    }
    let fenced = s.brokers.iter().any(|b| b.state != "live");
    Ok(s.unhealthy.is_empty() && !fenced && s.controller.is_some())
}
