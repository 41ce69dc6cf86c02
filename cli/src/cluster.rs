//! `strata cluster status|add-voter|remove-voter`: the cluster as one node's admin endpoint
//! sees it, and voter membership changes. Unlike the other client commands these speak to
//! the admin HTTP port, since Kafka's protocol has no view of the metadata quorum.
//!
//! `status` prints one line per fact, `key=value` separated by spaces, for people and for
//! `grep`: the controller and quorum, each broker, then every partition that is not healthy.
//! It exits with status 2 when a partition is offline or under-replicated, or a broker is
//! fenced, so scripts can wait for health.

use anyhow::Context as _;
use clap::{Args, Subcommand};
use serde::Deserialize;

use super::common::{admin_request, emit};

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Controller, metadata quorum, brokers and every partition that is not healthy.
    Status(AdminArgs),
    /// Promote a learner (a broker started with `--voters` not listing it) to a voter.
    AddVoter(VoterArgs),
    /// Demote a voter to a learner (it stays a broker).
    RemoveVoter(VoterArgs),
}

#[derive(Args, Debug)]
pub struct AdminArgs {
    /// Admin HTTP address of any node of the cluster.
    #[arg(
        long = "admin-addr",
        env = "STRATA_ADMIN_ADDR",
        default_value = "127.0.0.1:9644",
        value_name = "HOST:PORT"
    )]
    pub admin_addr: String,
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
    brokers: Vec<BrokerView>,
    partitions: usize,
    unhealthy: Vec<Unhealthy>,
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
struct BrokerView {
    id: u64,
    host: String,
    port: u16,
    rack: Option<String>,
    epoch: i64,
    state: String,
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
        ClusterCommand::AddVoter(args) => change(&args, "add"),
        ClusterCommand::RemoveVoter(args) => change(&args, "remove"),
    }
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
    let fenced = s.brokers.iter().any(|b| b.state != "live");
    Ok(s.unhealthy.is_empty() && !fenced && s.controller.is_some())
}
