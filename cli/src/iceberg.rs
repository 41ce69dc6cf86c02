//! `strata iceberg list|describe|rewrite`: topics' Iceberg tables through the admin endpoint
//! (`/v1/iceberg`). Lag is the answering broker's view (the partitions it leads); the table
//! offsets and snapshot are the cluster's.

use anyhow::Context;
use clap::{Args, Subcommand};
use strata_broker::iceberg::status::TableStatus;

use crate::cluster::AdminArgs;
use crate::common::{admin_request, emit};

#[derive(Subcommand, Debug)]
pub enum IcebergCommand {
    /// One line per topic with `iceberg.mode` set: mode, snapshot, records, lag.
    List(AdminArgs),
    /// A topic's table: metadata location, current snapshot, and per partition the table's
    /// offset against the log's last stable offset.
    Describe(TopicArgs),
    /// Start a topic's table over: delete its files and translate the whole history the
    /// tiers hold again (a table deleted or damaged by hand, or a backfill from offset 0).
    Rewrite(TopicArgs),
}

#[derive(Args, Debug)]
pub struct TopicArgs {
    /// Topic name.
    pub topic: String,
    #[command(flatten)]
    pub admin: AdminArgs,
}

pub fn run(cmd: IcebergCommand) -> anyhow::Result<()> {
    match cmd {
        IcebergCommand::List(admin) => {
            let body = admin_request(&admin.admin_addr, "GET", "/v1/iceberg")?;
            let tables: Vec<TableStatus> =
                serde_json::from_str(&body).context("decoding /v1/iceberg")?;
            if tables.is_empty() {
                return emit(format_args!("no topic has iceberg.mode set"));
            }
            for t in &tables {
                emit(format_args!("{}", summary(t)))?;
            }
            Ok(())
        }
        IcebergCommand::Describe(args) => {
            let t = table(&args.admin.admin_addr, &args.topic)?;
            describe(&t)
        }
        IcebergCommand::Rewrite(args) => {
            let path = format!("/v1/iceberg/{}/rewrite", args.topic);
            let body = admin_request(&args.admin.admin_addr, "POST", &path)?;
            emit(format_args!("{}", body.trim()))
        }
    }
}

/// A topic's table state from the admin endpoint.
pub fn table(admin_addr: &str, topic: &str) -> anyhow::Result<TableStatus> {
    let body = admin_request(admin_addr, "GET", &format!("/v1/iceberg/{topic}"))?;
    serde_json::from_str(&body).context("decoding /v1/iceberg/<topic>")
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// The one-line form of a table (`list`, and `topic describe`'s `iceberg` line).
pub fn summary(t: &TableStatus) -> String {
    let snap = t.snapshot.as_ref();
    let mut line = format!(
        "iceberg topic={} mode={} table={} snapshot={} snapshot_ms={} records={} data_files={} bytes={} lag_s={}",
        t.topic,
        t.mode,
        if t.metadata_location.is_some() { "yes" } else { "not-yet" },
        opt(snap.map(|s| s.id)),
        opt(snap.map(|s| s.timestamp_ms)),
        opt(snap.and_then(|s| s.total_records)),
        opt(snap.and_then(|s| s.total_data_files)),
        opt(snap.and_then(|s| s.total_files_size)),
        opt(t.lag_seconds),
    );
    if let Some(d) = &t.dead_letters {
        line.push_str(&format!(" dlq_records={}", opt(d.total_records)));
    }
    if let Some(e) = &t.error {
        line.push_str(&format!(" error=\"{e}\""));
    }
    line
}

fn describe(t: &TableStatus) -> anyhow::Result<()> {
    emit(format_args!("{}", summary(t)))?;
    emit(format_args!(
        "metadata_location={}",
        opt(t.metadata_location.as_deref())
    ))?;
    if let Some(s) = &t.snapshot {
        emit(format_args!("snapshots={}", s.snapshots))?;
    }
    if let Some(d) = &t.dead_letters {
        emit(format_args!(
            "dead_letters table={} records={} metadata_location={}",
            d.table,
            opt(d.total_records),
            d.metadata_location
        ))?;
    }
    for p in &t.partitions {
        emit(format_args!(
            "partition={} table_offset={} last_stable_offset={} lag_s={}",
            p.partition,
            opt(p.table_offset),
            opt(p.last_stable_offset),
            opt(p.lag_seconds),
        ))?;
    }
    Ok(())
}
