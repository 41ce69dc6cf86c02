//! `strata topic create|list|describe|alter|delete`, through librdkafka's admin API.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Context as _};
use clap::{Args, Subcommand};
use rdkafka::admin::{
    AdminClient, AlterConfig, ConfigSource, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;

use super::common::{
    admin_client, admin_options, block_on, emit, fetch_metadata, parse_key_value, topic_partitions,
    ConnectArgs,
};
use super::incremental_alter::{self, AlterFailure, ConfigOp};

#[derive(Subcommand, Debug)]
pub enum TopicCommand {
    /// Create a topic.
    Create(CreateArgs),
    /// List topics, one per line with its partition count.
    List(ListArgs),
    /// Show a topic's partitions (leader, replicas, ISR, watermarks) and configs.
    Describe(DescribeArgs),
    /// Set or remove topic config overrides (IncrementalAlterConfigs).
    Alter(AlterArgs),
    /// Delete a topic.
    Delete(DeleteArgs),
}

#[derive(Args, Debug)]
pub struct CreateArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// Topic name.
    pub name: String,
    /// Number of partitions (default: the broker's `num.partitions`).
    #[arg(short = 'p', long)]
    pub partitions: Option<i32>,
    /// Replication factor (default: the broker's `default.replication.factor`).
    #[arg(short = 'r', long)]
    pub replication_factor: Option<i32>,
    /// Topic config (repeatable), e.g. `--config retention.ms=60000`.
    #[arg(short = 'c', long = "config", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub configs: Vec<(String, String)>,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args, Debug)]
pub struct DescribeArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// Topic name.
    pub name: String,
    /// Admin HTTP address of the broker hosting the partitions, for their local and remote
    /// (tiered) ranges; skipped with a note when unreachable. `https://HOST:PORT` for an
    /// admin port with TLS (see `strata cluster status --help`).
    #[arg(
        long = "admin-addr",
        env = "STRATA_ADMIN_ADDR",
        default_value = "127.0.0.1:9644",
        value_name = "HOST:PORT"
    )]
    pub admin_addr: String,
}

#[derive(Args, Debug)]
pub struct AlterArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// Topic name.
    pub name: String,
    /// Config to set (repeatable).
    #[arg(short = 'c', long = "config", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub configs: Vec<(String, String)>,
    /// Config override to remove, reverting to the broker default (repeatable).
    #[arg(short = 'd', long = "delete-config", value_name = "KEY")]
    pub delete_configs: Vec<String>,
}

#[derive(Args, Debug)]
pub struct DeleteArgs {
    #[command(flatten)]
    pub conn: ConnectArgs,
    /// Topic name.
    pub name: String,
}

impl TopicCommand {
    pub fn conn(&self) -> &ConnectArgs {
        match self {
            TopicCommand::Create(a) => &a.conn,
            TopicCommand::List(a) => &a.conn,
            TopicCommand::Describe(a) => &a.conn,
            TopicCommand::Alter(a) => &a.conn,
            TopicCommand::Delete(a) => &a.conn,
        }
    }
}

pub fn run(cmd: TopicCommand) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match cmd {
        TopicCommand::Create(args) => create(&runtime, args),
        TopicCommand::List(args) => list(args),
        TopicCommand::Describe(args) => describe(&runtime, args),
        TopicCommand::Alter(args) => alter(&runtime, args),
        TopicCommand::Delete(args) => delete(&runtime, args),
    }
}

fn create(runtime: &tokio::runtime::Runtime, args: CreateArgs) -> anyhow::Result<()> {
    let admin = admin_client(&args.conn)?;
    let mut topic = NewTopic::new(
        &args.name,
        args.partitions.unwrap_or(-1),
        TopicReplication::Fixed(args.replication_factor.unwrap_or(-1)),
    );
    for (key, value) in &args.configs {
        topic = topic.set(key, value);
    }
    let opts = admin_options(&args.conn);
    let results = block_on(
        runtime,
        &args.conn,
        "create topic",
        admin.create_topics([&topic], &opts),
    )?
    .with_context(|| format!("creating topic `{}`", args.name))?;
    for result in results {
        match result {
            Ok(name) => emit(format_args!("created topic {name}"))?,
            Err((name, code)) => bail!("cannot create topic `{name}`: {code}"),
        }
    }
    Ok(())
}

fn list(args: ListArgs) -> anyhow::Result<()> {
    let admin = admin_client(&args.conn)?;
    let metadata = fetch_metadata(&args.conn, admin.inner(), None)?;
    let mut topics: Vec<_> = metadata.topics().iter().collect();
    topics.sort_by(|a, b| a.name().cmp(b.name()));
    for t in topics {
        match t.error() {
            None => emit(format_args!(
                "{}\tpartitions={}",
                t.name(),
                t.partitions().len()
            ))?,
            Some(err) => emit(format_args!(
                "{}\terror={}",
                t.name(),
                rdkafka::error::RDKafkaErrorCode::from(err)
            ))?,
        }
    }
    Ok(())
}

fn join(ids: &[i32]) -> String {
    ids.iter()
        .map(|id| id.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn source_label(source: &ConfigSource) -> &'static str {
    match source {
        ConfigSource::Unknown => "unknown",
        ConfigSource::DynamicTopic => "topic",
        ConfigSource::DynamicBroker => "dynamic-broker",
        ConfigSource::DynamicDefaultBroker => "dynamic-default-broker",
        ConfigSource::StaticBroker => "static-broker",
        ConfigSource::Default => "default",
    }
}

/// One `tier` line per partition: the whole log, the local part, the remote part, and what is
/// waiting to be offloaded, from the broker's `/v1/partitions`.
fn print_tiers(admin_addr: &str, topic: &str) -> anyhow::Result<()> {
    let stats: Vec<strata_broker::partition::TierStats> = match super::common::admin_request(
        admin_addr,
        "GET",
        &format!("/v1/partitions?topic={topic}"),
    )
    .and_then(|body| serde_json::from_str(&body).context("decoding /v1/partitions"))
    {
        Ok(s) => s,
        Err(e) => {
            return emit(format_args!(
                "tier ranges unavailable: admin endpoint {admin_addr}: {e:#}"
            ))
        }
    };
    let range = |start: Option<i64>, end: Option<i64>| match (start, end) {
        (Some(s), Some(e)) => format!("[{s},{e})"),
        _ => "none".to_string(),
    };
    for t in stats {
        emit(format_args!(
            "tier partition={} tiered={} log=[{},{}) local=[{},{}) local_segments={} local_bytes={} remote={} remote_segments={} remote_bytes={} upload_lag_segments={} upload_lag_bytes={}",
            t.partition,
            t.tiered,
            t.offsets.log_start,
            t.offsets.log_end,
            t.local_start,
            t.offsets.log_end,
            t.local_segments,
            t.local_bytes,
            range(t.remote_start, t.remote_end),
            t.remote_segments,
            t.remote_bytes,
            t.upload_lag_segments,
            t.upload_lag_bytes,
        ))?;
    }
    Ok(())
}

/// The `iceberg` line of a topic with `iceberg.mode` set (nothing for other topics).
fn print_iceberg(admin_addr: &str, topic: &str) -> anyhow::Result<()> {
    match crate::iceberg::table(admin_addr, topic) {
        Ok(t) => emit(format_args!("{}", crate::iceberg::summary(&t))),
        Err(e) if format!("{e:#}").contains("404") => Ok(()),
        Err(e) => emit(format_args!(
            "iceberg table state unavailable: admin endpoint {admin_addr}: {e:#}"
        )),
    }
}

fn describe(runtime: &tokio::runtime::Runtime, args: DescribeArgs) -> anyhow::Result<()> {
    let conn = &args.conn;
    let admin = admin_client(conn)?;
    let client = admin.inner();
    // Validates the topic exists (clear error otherwise) before the detailed look-up.
    topic_partitions(conn, client, &args.name)?;
    let metadata = fetch_metadata(conn, client, Some(&args.name))?;
    let topic = metadata
        .topics()
        .iter()
        .find(|t| t.name() == args.name)
        .ok_or_else(|| anyhow!("topic `{}` not found in metadata", args.name))?;
    let mut partitions: Vec<_> = topic.partitions().iter().collect();
    partitions.sort_by_key(|p| p.id());
    let replication = partitions.first().map_or(0, |p| p.replicas().len());
    emit(format_args!(
        "topic={} partitions={} replication_factor={}",
        args.name,
        partitions.len(),
        replication
    ))?;
    // Moves in progress (ListPartitionReassignments): shown per partition. A broker without
    // the API shows none.
    let moving: std::collections::HashMap<i32, crate::cluster::kafka::Ongoing> = runtime
        .block_on(async {
            let mut c = crate::cluster::kafka::connect(conn).await?;
            crate::cluster::kafka::ongoing(&mut c).await
        })
        .unwrap_or_default()
        .into_iter()
        .filter(|o| o.topic == args.name)
        .map(|o| (o.partition, o))
        .collect();
    let mut failed_watermarks = 0;
    for p in partitions {
        let watermarks = match client.fetch_watermarks(&args.name, p.id(), conn.request_timeout()) {
            Ok((low, high)) => format!("low={low} high={high}"),
            Err(e) => {
                failed_watermarks += 1;
                format!("low=? high=? watermark_error=\"{e}\"")
            }
        };
        let error = p
            .error()
            .map(|e| format!(" error=\"{}\"", rdkafka::error::RDKafkaErrorCode::from(e)))
            .unwrap_or_default();
        let reassigning = moving.get(&p.id()).map_or(String::new(), |o| {
            format!(
                " adding={} removing={}",
                crate::cluster::reassign::list(&o.adding),
                crate::cluster::reassign::list(&o.removing)
            )
        });
        emit(format_args!(
            "partition={} leader={} replicas={} isr={}{reassigning} {watermarks}{error}",
            p.id(),
            p.leader(),
            join(p.replicas()),
            join(p.isr()),
        ))?;
    }
    print_tiers(&args.admin_addr, &args.name)?;
    print_iceberg(&args.admin_addr, &args.name)?;

    let opts = admin_options(conn);
    let resource = ResourceSpecifier::Topic(&args.name);
    let results = block_on(
        runtime,
        conn,
        "describe configs",
        admin.describe_configs([&resource], &opts),
    )?
    .with_context(|| format!("describing configs of topic `{}`", args.name))?;
    let mut config_failed = None;
    for result in results {
        match result {
            Ok(resource) => {
                emit(format_args!("configs:"))?;
                let mut entries: Vec<_> = resource.entries.iter().collect();
                entries.sort_by(|a, b| a.name.cmp(&b.name));
                for e in entries {
                    let value = if e.is_sensitive {
                        "<sensitive>"
                    } else {
                        e.value.as_deref().unwrap_or("<null>")
                    };
                    let read_only = if e.is_read_only { " read-only" } else { "" };
                    emit(format_args!(
                        "  {}={} source={}{read_only}",
                        e.name,
                        value,
                        source_label(&e.source)
                    ))?;
                }
            }
            Err(code) => config_failed = Some(code),
        }
    }
    if let Some(code) = config_failed {
        bail!("cannot describe configs of topic `{}`: {code}", args.name);
    }
    if failed_watermarks > 0 {
        bail!("could not fetch watermarks of {failed_watermarks} partition(s)");
    }
    Ok(())
}

/// The ordered list of changes `alter` applies; a key both set and deleted is refused.
fn alter_ops(sets: &[(String, String)], deletes: &[String]) -> anyhow::Result<Vec<ConfigOp>> {
    if sets.is_empty() && deletes.is_empty() {
        bail!("nothing to alter: give --config KEY=VALUE and/or --delete-config KEY");
    }
    if let Some(key) = deletes.iter().find(|d| sets.iter().any(|(k, _)| k == *d)) {
        bail!("`{key}` is both set and deleted");
    }
    let mut ops: Vec<ConfigOp> = sets
        .iter()
        .map(|(k, v)| ConfigOp::Set(k.clone(), v.clone()))
        .collect();
    ops.extend(deletes.iter().map(|k| ConfigOp::Delete(k.clone())));
    Ok(ops)
}

/// For brokers without IncrementalAlterConfigs: the full override set legacy AlterConfigs
/// must be given, from the topic's current overrides with `ops` applied.
fn merge_overrides(
    current: BTreeMap<String, String>,
    ops: &[ConfigOp],
) -> BTreeMap<String, String> {
    let mut merged = current;
    for op in ops {
        match op {
            ConfigOp::Set(k, v) => {
                merged.insert(k.clone(), v.clone());
            }
            ConfigOp::Delete(k) => {
                merged.remove(k);
            }
        }
    }
    merged
}

fn alter(runtime: &tokio::runtime::Runtime, args: AlterArgs) -> anyhow::Result<()> {
    let conn = &args.conn;
    let ops = alter_ops(&args.configs, &args.delete_configs)?;
    let admin = admin_client(conn)?;
    match incremental_alter::alter_topic(admin.inner(), &args.name, &ops, conn.request_timeout()) {
        Ok(()) => {}
        Err(AlterFailure::Failed(msg)) => bail!("cannot alter topic `{}`: {msg}", args.name),
        Err(AlterFailure::Unsupported(msg)) => {
            eprintln!(
                "note: {msg}; falling back to legacy AlterConfigs, which replaces all of the \
                 topic's overrides (sensitive values cannot be preserved)"
            );
            legacy_alter(runtime, conn, &admin, &args.name, &ops)?;
        }
    }
    for op in &ops {
        match op {
            ConfigOp::Set(k, v) => emit(format_args!("set {k}={v}"))?,
            ConfigOp::Delete(k) => emit(format_args!("deleted {k}"))?,
        }
    }
    emit(format_args!("altered topic {}", args.name))?;
    Ok(())
}

fn legacy_alter(
    runtime: &tokio::runtime::Runtime,
    conn: &ConnectArgs,
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
    ops: &[ConfigOp],
) -> anyhow::Result<()> {
    let opts = admin_options(conn);
    let resource = ResourceSpecifier::Topic(topic);
    let described = block_on(
        runtime,
        conn,
        "describe configs",
        admin.describe_configs([&resource], &opts),
    )?
    .with_context(|| format!("describing configs of topic `{topic}`"))?;
    let mut current = BTreeMap::new();
    for result in described {
        let resource = result.map_err(|code| anyhow!("describing topic `{topic}`: {code}"))?;
        for e in resource.entries {
            if e.source == ConfigSource::DynamicTopic {
                if let Some(value) = e.value {
                    current.insert(e.name, value);
                }
            }
        }
    }
    let merged = merge_overrides(current, ops);
    let mut alter = AlterConfig::new(ResourceSpecifier::Topic(topic));
    for (k, v) in &merged {
        alter = alter.set(k, v);
    }
    let results = block_on(
        runtime,
        conn,
        "alter configs",
        admin.alter_configs([&alter], &opts),
    )?
    .with_context(|| format!("altering topic `{topic}`"))?;
    for result in results {
        if let Err((_, code)) = result {
            bail!("cannot alter topic `{topic}` (legacy AlterConfigs): {code}");
        }
    }
    Ok(())
}

fn delete(runtime: &tokio::runtime::Runtime, args: DeleteArgs) -> anyhow::Result<()> {
    let admin = admin_client(&args.conn)?;
    let opts = admin_options(&args.conn);
    let results = block_on(
        runtime,
        &args.conn,
        "delete topic",
        admin.delete_topics(&[args.name.as_str()], &opts),
    )?
    .with_context(|| format!("deleting topic `{}`", args.name))?;
    for result in results {
        match result {
            Ok(name) => emit(format_args!("deleted topic {name}"))?,
            Err((name, code)) => bail!("cannot delete topic `{name}`: {code}"),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(k: &str, v: &str) -> (String, String) {
        (k.to_string(), v.to_string())
    }

    #[test]
    fn alter_ops_orders_sets_before_deletes() {
        let ops = alter_ops(&[kv("a", "1")], &["b".to_string()]).unwrap();
        assert_eq!(
            ops,
            vec![
                ConfigOp::Set("a".into(), "1".into()),
                ConfigOp::Delete("b".into())
            ]
        );
    }

    #[test]
    fn alter_ops_refuses_empty_and_contradictory() {
        assert!(alter_ops(&[], &[]).is_err());
        assert!(alter_ops(&[kv("a", "1")], &["a".to_string()]).is_err());
    }

    #[test]
    fn merge_applies_sets_and_deletes_to_current_overrides() {
        let current: BTreeMap<_, _> = [kv("retention.ms", "1"), kv("segment.bytes", "2")]
            .into_iter()
            .collect();
        let merged = merge_overrides(
            current,
            &[
                ConfigOp::Set("retention.ms".into(), "5".into()),
                ConfigOp::Set("cleanup.policy".into(), "compact".into()),
                ConfigOp::Delete("segment.bytes".into()),
            ],
        );
        let expected: BTreeMap<_, _> = [kv("retention.ms", "5"), kv("cleanup.policy", "compact")]
            .into_iter()
            .collect();
        assert_eq!(merged, expected);
    }

    #[test]
    fn join_lists_ids() {
        assert_eq!(join(&[]), "");
        assert_eq!(join(&[1, 2, 3]), "1,2,3");
    }
}
