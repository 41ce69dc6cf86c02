//! `strata quota alter|describe`: client quotas (AlterClientQuotas, DescribeClientQuotas), in
//! the vocabulary of `kafka-configs.sh --entity-type users|clients`: an entity is a user
//! and/or a client id, each named (`--user alice`) or the default (`--user-default`), and the
//! quotas are Kafka's `producer_byte_rate`, `consumer_byte_rate` and `request_percentage`.

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::{AlterClientQuotasRequest, DescribeClientQuotasRequest};
use strata_metadata::quota::{QuotaEntity, QuotaKey};

use crate::cluster;
use crate::cluster::kafka::{self, str_bytes};
use crate::common::{emit, ConnectArgs};

/// The quota APIs' newest version.
const VERSION: i16 = 1;

#[derive(Subcommand, Debug)]
pub enum QuotaCommand {
    /// Set and remove quotas of one entity (a user, a client id, or a user's client id).
    Alter(AlterArgs),
    /// List quotas: all, or those of the entities named.
    Describe(DescribeArgs),
}

impl QuotaCommand {
    pub fn conn(&self) -> &ConnectArgs {
        match self {
            QuotaCommand::Alter(a) => &a.conn,
            QuotaCommand::Describe(a) => &a.conn,
        }
    }
}

/// The entity: a user and/or a client id, each named or the default.
#[derive(Args, Debug, Default)]
pub struct EntityArgs {
    #[arg(long, conflicts_with = "user_default")]
    pub user: Option<String>,
    /// The default user quota: every user without a quota of its own gets one like it.
    #[arg(long)]
    pub user_default: bool,
    #[arg(long, conflicts_with = "client_id_default")]
    pub client_id: Option<String>,
    /// The default client-id quota.
    #[arg(long)]
    pub client_id_default: bool,
}

impl EntityArgs {
    /// `(entity type, name)` per side given; a `None` name is the default.
    fn components(&self) -> Vec<(&'static str, Option<&str>)> {
        fn side<'a>(
            kind: &'static str,
            name: &'a Option<String>,
            default: bool,
        ) -> Option<(&'static str, Option<&'a str>)> {
            match (name, default) {
                (Some(n), _) => Some((kind, Some(n.as_str()))),
                (None, true) => Some((kind, None)),
                (None, false) => None,
            }
        }
        [
            side(QuotaEntity::USER, &self.user, self.user_default),
            side(
                QuotaEntity::CLIENT_ID,
                &self.client_id,
                self.client_id_default,
            ),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

#[derive(Args, Debug)]
pub struct AlterArgs {
    #[command(flatten)]
    pub entity: EntityArgs,
    /// Set a quota, `key=value` (repeatable): producer_byte_rate=1048576,
    /// consumer_byte_rate=..., request_percentage=50.
    #[arg(long = "add", value_name = "KEY=VALUE")]
    pub add: Vec<String>,
    /// Remove a quota (repeatable).
    #[arg(long = "delete", value_name = "KEY")]
    pub delete: Vec<String>,
    /// Have the broker check the change without making it.
    #[arg(long)]
    pub validate_only: bool,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args, Debug)]
pub struct DescribeArgs {
    /// Only entities with exactly these sides (none: every entity).
    #[command(flatten)]
    pub entity: EntityArgs,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

pub fn run(cmd: QuotaCommand) -> anyhow::Result<()> {
    cluster::block(async {
        match cmd {
            QuotaCommand::Alter(a) => alter(a).await,
            QuotaCommand::Describe(a) => describe(a).await,
        }
    })
}

/// `key=value` as an operation, checked here so a typo fails before it reaches the broker.
fn set_op(text: &str) -> anyhow::Result<OpData> {
    let Some((key, value)) = text.split_once('=') else {
        bail!("--add {text}: expected key=value");
    };
    let key = known_key(key.trim())?;
    let value: f64 = (value.trim().parse())
        .with_context(|| format!("--add {text}: {value:?} is not a number"))?;
    Ok(OpData::default()
        .with_key(str_bytes(key.name()))
        .with_value(value))
}

fn known_key(name: &str) -> anyhow::Result<QuotaKey> {
    QuotaKey::from_name(name).with_context(|| {
        format!(
            "unknown quota {name:?}: producer_byte_rate, consumer_byte_rate or request_percentage"
        )
    })
}

/// An entity as printed: `user=alice client-id=<default>`.
fn entity_text<'a>(sides: impl Iterator<Item = (&'a str, Option<&'a str>)>) -> String {
    sides
        .map(|(kind, name)| format!("{kind}={}", name.unwrap_or("<default>")))
        .collect::<Vec<_>>()
        .join(" ")
}

async fn alter(a: AlterArgs) -> anyhow::Result<()> {
    let sides = a.entity.components();
    if sides.is_empty() {
        bail!("name the entity: --user NAME or --user-default, and/or --client-id NAME or --client-id-default");
    }
    if a.add.is_empty() && a.delete.is_empty() {
        bail!("nothing to change: give --add key=value and/or --delete key");
    }
    let mut ops = Vec::new();
    for text in &a.add {
        ops.push(set_op(text)?);
    }
    for key in &a.delete {
        ops.push(
            OpData::default()
                .with_key(str_bytes(known_key(key)?.name()))
                .with_remove(true),
        );
    }
    let entity = (sides.iter())
        .map(|(kind, name)| {
            EntityData::default()
                .with_entity_type(str_bytes(kind))
                .with_entity_name(name.map(str_bytes))
        })
        .collect();
    let req = AlterClientQuotasRequest::default()
        .with_entries(vec![EntryData::default().with_entity(entity).with_ops(ops)])
        .with_validate_only(a.validate_only);
    let mut c = kafka::connect(&a.conn).await?;
    let resp = c.call(VERSION, &req).await.context("AlterClientQuotas")?;
    let name = entity_text(sides.into_iter());
    for e in &resp.entries {
        if e.error_code != 0 {
            bail!(
                "quota of {name}: {} (error {})",
                e.error_message.as_ref().map_or("", |m| m.as_str()),
                e.error_code
            );
        }
    }
    let done = if a.validate_only { "valid" } else { "altered" };
    eprintln!("quota of {name}: {done}");
    Ok(())
}

async fn describe(a: DescribeArgs) -> anyhow::Result<()> {
    let sides = a.entity.components();
    let components = (sides.iter())
        .map(|(kind, name)| {
            let c = ComponentData::default().with_entity_type(str_bytes(kind));
            match name {
                Some(n) => c.with_match_type(0).with_match(Some(str_bytes(n))),
                None => c.with_match_type(1),
            }
        })
        .collect();
    let req = DescribeClientQuotasRequest::default()
        .with_components(components)
        .with_strict(!sides.is_empty());
    let mut c = kafka::connect(&a.conn).await?;
    let resp = c
        .call(VERSION, &req)
        .await
        .context("DescribeClientQuotas")?;
    if resp.error_code != 0 {
        bail!(
            "DescribeClientQuotas: {} (error {})",
            resp.error_message.as_ref().map_or("", |m| m.as_str()),
            resp.error_code
        );
    }
    let entries = resp.entries.unwrap_or_default();
    for e in &entries {
        let entity = entity_text(
            (e.entity.iter()).map(|c| (c.entity_type.as_str(), c.entity_name.as_deref())),
        );
        let values: Vec<String> = (e.values.iter())
            .map(|v| format!("{}={}", v.key.as_str(), v.value))
            .collect();
        emit(format_args!("{entity}\t{}", values.join(",")))?;
    }
    eprintln!("quota describe: {} entities", entries.len());
    Ok(())
}
