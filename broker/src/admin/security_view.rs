//! The security view (`/v1/security`): the ACLs, the SCRAM users and the client quotas the
//! metadata quorum holds, read-only, as DescribeAcls, DescribeUserScramCredentials and
//! DescribeClientQuotas show them.
//!
//! Invariants: a SCRAM user is shown by name, mechanism and iteration count only — never its
//! salt or keys; each list is shown only to a caller the matching Kafka API would answer
//! (DESCRIBE on the cluster for ACLs and users, DESCRIBE_CONFIGS for quotas), and is otherwise
//! replaced by the refusal in words; every list is filtered (`q`) and capped at
//! [`MAX_ROWS`], its total given.

use serde_json::{json, Value};
use strata_metadata::acl::AclOperation;
use strata_metadata::quota::EntityName;

use crate::broker::Broker;
use crate::security::Access;

/// Rows shown at most of each list.
pub const MAX_ROWS: usize = 500;

/// Rows of a list the caller may see, or why not.
fn list(allowed: bool, op: AclOperation, rows: Vec<Value>) -> Value {
    if !allowed {
        return json!({ "refused": format!("{op:?} on the cluster is not authorized for this principal") });
    }
    let total = rows.len();
    json!({ "total": total, "items": rows.into_iter().take(MAX_ROWS).collect::<Vec<_>>() })
}

fn entity(name: &Option<EntityName>) -> Value {
    match name {
        None => Value::Null,
        Some(EntityName::Default) => json!("<default>"),
        Some(EntityName::Named(n)) => json!(n),
    }
}

/// The view, rows whose names contain `filter`.
pub fn view(broker: &Broker, access: &Access, filter: &str) -> Value {
    let state = broker.node.metadata.state();
    let security = &state.security;
    let matches = |s: &str| filter.is_empty() || s.contains(filter);
    let acls = (security.acls.iter())
        .filter(|a| matches(&a.principal) || matches(&a.resource_name))
        .map(|a| {
            json!({
                "principal": a.principal,
                "host": a.host,
                "resource_type": format!("{:?}", a.resource_type),
                "resource_name": a.resource_name,
                "pattern_type": format!("{:?}", a.pattern_type),
                "operation": format!("{:?}", a.operation),
                "permission": format!("{:?}", a.permission),
            })
        })
        .collect();
    let users = (security.scram.iter())
        .filter(|(user, _)| matches(user))
        .map(|(user, credentials)| {
            let mechanisms: Vec<Value> = (credentials.iter())
                .map(|(mechanism, c)| json!({ "mechanism": mechanism, "iterations": c.iterations }))
                .collect();
            json!({ "user": user, "credentials": mechanisms })
        })
        .collect();
    let quotas = (security.quotas.iter())
        .filter(|(e, _)| {
            let named = |n: &Option<EntityName>| match n {
                Some(EntityName::Named(n)) => matches(n),
                _ => filter.is_empty(),
            };
            named(&e.user) || named(&e.client_id)
        })
        .map(|(e, values)| {
            let values: serde_json::Map<String, Value> = (values.iter())
                .map(|(k, v)| (k.name().to_string(), json!(v)))
                .collect();
            json!({ "user": entity(&e.user), "client_id": entity(&e.client_id), "values": values })
        })
        .collect();
    json!({
        "authorizer": broker.security.authorizer().enabled(),
        "super_users": (broker.node.config.super_users.split(';'))
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .collect::<Vec<_>>(),
        "acls": list(access.cluster(AclOperation::Describe), AclOperation::Describe, acls),
        "users": list(access.cluster(AclOperation::Describe), AclOperation::Describe, users),
        "quotas": list(
            access.cluster(AclOperation::DescribeConfigs),
            AclOperation::DescribeConfigs,
            quotas
        ),
    })
}
