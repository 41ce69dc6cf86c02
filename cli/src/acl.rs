//! `strata acl add|list|remove`: Kafka ACLs (CreateAcls, DescribeAcls, DeleteAcls), with
//! `kafka-acls.sh`'s vocabulary: `--allow-principal User:alice --operation Write --topic
//! orders`, `--resource-pattern-type prefixed`, `--cluster`, `--group`, `--transactional-id`.

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand, ValueEnum};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};
use kafka_protocol::protocol::StrBytes;
use strata_metadata::acl::{
    AclOperation, PatternType, Permission, ResourceType, ANY_CODE, CLUSTER_NAME, MATCH_CODE,
};

use crate::cluster;
use crate::cluster::kafka::{self, str_bytes};
use crate::common::{emit, ConnectArgs};

/// The ACL APIs' newest version, spoken by every Kafka since 2.4 and by Strata.
const VERSION: i16 = 3;

#[derive(Subcommand, Debug)]
pub enum AclCommand {
    /// Grant (or deny) principals operations on resources: one ACL per principal ×
    /// operation × resource.
    Add(AddArgs),
    /// List ACLs, all or those a filter selects.
    List(ListArgs),
    /// Remove the ACLs a filter selects, and print them.
    Remove(RemoveArgs),
}

impl AclCommand {
    pub fn conn(&self) -> &ConnectArgs {
        match self {
            AclCommand::Add(a) => &a.conn,
            AclCommand::List(a) => &a.conn,
            AclCommand::Remove(a) => &a.conn,
        }
    }
}

/// Which resources: any number of topics, groups and transactional ids, and the cluster.
#[derive(Args, Debug, Default)]
pub struct Resources {
    #[arg(long = "topic")]
    pub topics: Vec<String>,
    #[arg(long = "group")]
    pub groups: Vec<String>,
    #[arg(long = "transactional-id")]
    pub transactional_ids: Vec<String>,
    #[arg(long)]
    pub cluster: bool,
}

impl Resources {
    fn list(&self) -> Vec<(ResourceType, String)> {
        let named = [
            (ResourceType::Topic, &self.topics),
            (ResourceType::Group, &self.groups),
            (ResourceType::TransactionalId, &self.transactional_ids),
        ];
        named
            .into_iter()
            .flat_map(|(t, names)| names.iter().map(move |n| (t, n.clone())))
            .chain(
                self.cluster
                    .then(|| (ResourceType::Cluster, CLUSTER_NAME.to_string())),
            )
            .collect()
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperationArg {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    #[value(alias = "clusteraction")]
    ClusterAction,
    #[value(alias = "describeconfigs")]
    DescribeConfigs,
    #[value(alias = "alterconfigs")]
    AlterConfigs,
    #[value(alias = "idempotentwrite")]
    IdempotentWrite,
}

impl OperationArg {
    fn operation(self) -> AclOperation {
        match self {
            OperationArg::All => AclOperation::All,
            OperationArg::Read => AclOperation::Read,
            OperationArg::Write => AclOperation::Write,
            OperationArg::Create => AclOperation::Create,
            OperationArg::Delete => AclOperation::Delete,
            OperationArg::Alter => AclOperation::Alter,
            OperationArg::Describe => AclOperation::Describe,
            OperationArg::ClusterAction => AclOperation::ClusterAction,
            OperationArg::DescribeConfigs => AclOperation::DescribeConfigs,
            OperationArg::AlterConfigs => AclOperation::AlterConfigs,
            OperationArg::IdempotentWrite => AclOperation::IdempotentWrite,
        }
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternArg {
    Literal,
    Prefixed,
    /// Filters only: every pattern type.
    Any,
    /// Filters only: the ACLs that apply to the named resource (its name, the wildcard, its
    /// prefixes).
    Match,
}

impl PatternArg {
    fn code(self) -> i8 {
        match self {
            PatternArg::Literal => PatternType::Literal.code(),
            PatternArg::Prefixed => PatternType::Prefixed.code(),
            PatternArg::Any => ANY_CODE,
            PatternArg::Match => MATCH_CODE,
        }
    }
}

#[derive(Args, Debug)]
pub struct AddArgs {
    /// Principals the ACLs allow (`User:name`, `User:*` for everyone); repeatable.
    #[arg(long = "allow-principal")]
    pub allow: Vec<String>,
    /// Principals the ACLs deny (a DENY beats every ALLOW); repeatable.
    #[arg(long = "deny-principal")]
    pub deny: Vec<String>,
    /// Operations; repeatable.
    #[arg(long = "operation", value_enum, ignore_case = true, required = true)]
    pub operations: Vec<OperationArg>,
    #[command(flatten)]
    pub resources: Resources,
    #[arg(long, value_enum, ignore_case = true, default_value = "literal")]
    pub resource_pattern_type: PatternArg,
    /// The client address the ACLs apply to (`*`: any).
    #[arg(long, default_value = "*")]
    pub host: String,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub resources: Resources,
    #[arg(long, value_enum, ignore_case = true, default_value = "any")]
    pub resource_pattern_type: PatternArg,
    /// Only this principal's ACLs.
    #[arg(long)]
    pub principal: Option<String>,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

#[derive(Args, Debug)]
pub struct RemoveArgs {
    #[command(flatten)]
    pub resources: Resources,
    #[arg(long, value_enum, ignore_case = true, default_value = "literal")]
    pub resource_pattern_type: PatternArg,
    /// Only this principal's ACLs.
    #[arg(long)]
    pub principal: Option<String>,
    /// Only these operations; repeatable [default: all].
    #[arg(long = "operation", value_enum, ignore_case = true)]
    pub operations: Vec<OperationArg>,
    #[command(flatten)]
    pub conn: ConnectArgs,
}

pub fn run(cmd: AclCommand) -> anyhow::Result<()> {
    cluster::block(async {
        match cmd {
            AclCommand::Add(a) => add(a).await,
            AclCommand::List(a) => list(a).await,
            AclCommand::Remove(a) => remove(a).await,
        }
    })
}

fn refused(api: &str, code: i16, message: Option<&StrBytes>) -> anyhow::Result<()> {
    if code != 0 {
        bail!(
            "{api}: {} (error {code})",
            message.map_or("", |m| m.as_str())
        );
    }
    Ok(())
}

/// One ACL as `list` and `remove` print it: Kafka's names, tab-separated.
fn line(
    resource_type: i8,
    name: &str,
    pattern: i8,
    principal: &str,
    host: &str,
    operation: i8,
    permission: i8,
) -> String {
    let named = |o: Option<String>, code: i8| o.unwrap_or_else(|| code.to_string());
    format!(
        "{}\t{name}\t{}\t{principal}\t{host}\t{}\t{}",
        named(
            ResourceType::from_code(resource_type).map(|t| format!("{t:?}")),
            resource_type
        ),
        named(
            PatternType::from_code(pattern).map(|p| format!("{p:?}")),
            pattern
        ),
        named(
            AclOperation::from_code(operation).map(|o| format!("{o:?}")),
            operation
        ),
        named(
            Permission::from_code(permission).map(|p| format!("{p:?}")),
            permission
        ),
    )
}

async fn add(a: AddArgs) -> anyhow::Result<()> {
    let resources = a.resources.list();
    if resources.is_empty() {
        bail!("name a resource: --topic, --group, --transactional-id or --cluster");
    }
    if a.allow.is_empty() && a.deny.is_empty() {
        bail!("name a principal: --allow-principal or --deny-principal");
    }
    if matches!(a.resource_pattern_type, PatternArg::Any | PatternArg::Match) {
        bail!("an ACL's pattern type is literal or prefixed");
    }
    let principals = (a.allow.iter().map(|p| (p, Permission::Allow)))
        .chain(a.deny.iter().map(|p| (p, Permission::Deny)));
    let mut creations = Vec::new();
    for (principal, permission) in principals {
        for (rt, name) in &resources {
            for op in &a.operations {
                creations.push(
                    AclCreation::default()
                        .with_resource_type(rt.code())
                        .with_resource_name(str_bytes(name))
                        .with_resource_pattern_type(a.resource_pattern_type.code())
                        .with_principal(str_bytes(principal))
                        .with_host(str_bytes(&a.host))
                        .with_operation(op.operation().code())
                        .with_permission_type(permission.code()),
                );
            }
        }
    }
    let count = creations.len();
    let mut c = kafka::connect(&a.conn).await?;
    let resp = c
        .call(
            VERSION,
            &CreateAclsRequest::default().with_creations(creations),
        )
        .await
        .context("CreateAcls")?;
    for r in &resp.results {
        refused("CreateAcls", r.error_code, r.error_message.as_ref())?;
    }
    eprintln!("acl add: {count} ACLs created");
    Ok(())
}

/// The filters of a `list` or `remove`: one per resource named (or one for every resource),
/// times one per operation named (or any operation).
struct Filter {
    resource_type: i8,
    name: Option<String>,
    pattern: i8,
    operation: i8,
}

fn filters(resources: &Resources, pattern: PatternArg, operations: &[OperationArg]) -> Vec<Filter> {
    let named: Vec<(i8, Option<String>)> = match resources.list() {
        r if r.is_empty() => vec![(ANY_CODE, None)],
        r => r.into_iter().map(|(t, n)| (t.code(), Some(n))).collect(),
    };
    let ops: Vec<i8> = if operations.is_empty() {
        vec![ANY_CODE]
    } else {
        operations.iter().map(|o| o.operation().code()).collect()
    };
    named
        .into_iter()
        .flat_map(|(t, n)| {
            ops.iter().map(move |op| Filter {
                resource_type: t,
                name: n.clone(),
                pattern: pattern.code(),
                operation: *op,
            })
        })
        .collect()
}

async fn list(a: ListArgs) -> anyhow::Result<()> {
    let mut c = kafka::connect(&a.conn).await?;
    let mut count = 0;
    for f in filters(&a.resources, a.resource_pattern_type, &[]) {
        let req = DescribeAclsRequest::default()
            .with_resource_type_filter(f.resource_type)
            .with_resource_name_filter(f.name.as_deref().map(str_bytes))
            .with_pattern_type_filter(f.pattern)
            .with_principal_filter(a.principal.as_deref().map(str_bytes))
            .with_host_filter(None)
            .with_operation(ANY_CODE)
            .with_permission_type(ANY_CODE);
        let resp = c.call(VERSION, &req).await.context("DescribeAcls")?;
        refused("DescribeAcls", resp.error_code, resp.error_message.as_ref())?;
        for r in &resp.resources {
            for acl in &r.acls {
                count += 1;
                emit(format_args!(
                    "{}",
                    line(
                        r.resource_type,
                        &r.resource_name,
                        r.pattern_type,
                        &acl.principal,
                        &acl.host,
                        acl.operation,
                        acl.permission_type
                    )
                ))?;
            }
        }
    }
    eprintln!("acl list: {count} ACLs");
    Ok(())
}

async fn remove(a: RemoveArgs) -> anyhow::Result<()> {
    if a.resources.list().is_empty() {
        bail!("name the resources to remove ACLs from: --topic, --group, --transactional-id or --cluster");
    }
    let filters = filters(&a.resources, a.resource_pattern_type, &a.operations)
        .into_iter()
        .map(|f| {
            DeleteAclsFilter::default()
                .with_resource_type_filter(f.resource_type)
                .with_resource_name_filter(f.name.as_deref().map(str_bytes))
                .with_pattern_type_filter(f.pattern)
                .with_principal_filter(a.principal.as_deref().map(str_bytes))
                .with_host_filter(None)
                .with_operation(f.operation)
                .with_permission_type(ANY_CODE)
        })
        .collect();
    let mut c = kafka::connect(&a.conn).await?;
    let resp = c
        .call(VERSION, &DeleteAclsRequest::default().with_filters(filters))
        .await
        .context("DeleteAcls")?;
    let mut count = 0;
    for r in &resp.filter_results {
        refused("DeleteAcls", r.error_code, r.error_message.as_ref())?;
        for m in &r.matching_acls {
            count += 1;
            emit(format_args!(
                "{}",
                line(
                    m.resource_type,
                    &m.resource_name,
                    m.pattern_type,
                    &m.principal,
                    &m.host,
                    m.operation,
                    m.permission_type
                )
            ))?;
        }
    }
    eprintln!("acl remove: {count} ACLs removed");
    Ok(())
}
