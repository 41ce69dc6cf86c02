//! What a principal may do: Kafka's ACL authorizer over the ACLs in the metadata quorum
//! ([`strata_metadata::acl`]).
//!
//! Invariants:
//! - deny beats allow: an operation is refused when any matching DENY names it (or ALL),
//!   whatever ALLOW ACLs also match;
//! - super users may do everything; on a resource that no ACL names, everyone may do
//!   everything only with `allow_everyone_if_no_acl_found`;
//! - DESCRIBE is implied by READ, WRITE, DELETE and ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS
//!   (Kafka's implications, so `--operation Write` lets a producer fetch metadata);
//! - each request is decided against the ACLs applied when it arrived: a change applies to the
//!   next request on every broker, as soon as the broker applied it;
//! - a decision costs lookups of the resource's own name, the wildcard and the prefix lengths
//!   some prefixed ACL has, never a scan of the ACLs of other resources;
//! - with the authorizer off, [`Access`] allows everything and allocates nothing.

use std::collections::{BTreeSet, HashSet};
use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap as HashMap;
use strata_metadata::acl::{
    AclBinding, AclOperation, PatternType, Permission, ResourceType, WILDCARD, WILDCARD_PRINCIPAL,
};
use strata_metadata::SecurityState;

use super::audit::AuditLog;
use super::error::SecurityError;
use super::metrics::SecurityMetrics;
use super::Principal;
use crate::config::BrokerConfig;
use crate::node::Node;

/// The authorizer of one broker.
pub struct Authorizer {
    enabled: bool,
    super_users: HashSet<String>,
    allow_if_no_acl: bool,
    node: Arc<Node>,
    /// The index of the ACLs of the security state it was built from; rebuilt when the state
    /// changes (which is rare: ACL and credential changes).
    index: Mutex<Option<(Arc<SecurityState>, Arc<AclIndex>)>>,
    metrics: Arc<SecurityMetrics>,
    audit: Arc<AuditLog>,
}

impl Authorizer {
    pub(super) fn new(
        node: Arc<Node>,
        metrics: Arc<SecurityMetrics>,
        audit: Arc<AuditLog>,
    ) -> Result<Authorizer, SecurityError> {
        let cfg: &BrokerConfig = &node.config;
        let super_users = parse_super_users(&cfg.super_users)?;
        Ok(Authorizer {
            enabled: cfg.authorizer_enable,
            super_users,
            allow_if_no_acl: cfg.allow_everyone_if_no_acl_found,
            node,
            index: Mutex::new(None),
            metrics,
            audit,
        })
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The decisions for one request of `principal` connected from `host` (an IP address).
    pub fn access(&self, principal: &Principal, host: &Arc<str>) -> Access {
        let caller = Some(Caller {
            principal: principal.clone(),
            host: host.clone(),
            audit: self.audit.clone(),
        });
        let decider =
            (self.enabled && !self.super_users.contains(principal.as_str())).then(|| Decider {
                index: self.index(),
                allow_if_no_acl: self.allow_if_no_acl,
                metrics: self.metrics.clone(),
            });
        Access { caller, decider }
    }

    fn index(&self) -> Arc<AclIndex> {
        let security = self.node.metadata.state().security.clone();
        // A cache: whatever a panicking holder left is replaced or reused as it stands.
        let mut cached = self.index.lock().unwrap_or_else(|p| p.into_inner());
        match &*cached {
            Some((built_from, index)) if Arc::ptr_eq(built_from, &security) => index.clone(),
            _ => {
                let index = Arc::new(AclIndex::build(&security.acls));
                self.metrics.acls_in_use(security.acls.len());
                *cached = Some((security, index.clone()));
                index
            }
        }
    }
}

/// `super_users`: `User:a;User:b` (Kafka separates them with semicolons).
fn parse_super_users(text: &str) -> Result<HashSet<String>, SecurityError> {
    text.split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|p| match p.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => Ok(p.to_string()),
            _ => Err(SecurityError::Config(format!(
                "super_users: '{p}' is not a principal (Type:name, e.g. User:admin)"
            ))),
        })
        .collect()
}

/// Who makes one request and what it may do. Checks named `allows` count a refusal and write
/// it to the audit log; `sees` decides what a listing shows, quietly, as Kafka's filtering
/// does. [`Access::audit`] records an administrative operation as the caller's.
pub struct Access {
    /// `None` before a SASL connection authenticates (only the SASL APIs are served then).
    caller: Option<Caller>,
    /// `None`: everything is allowed (authorizer off, or a super user). Some only with a
    /// caller.
    decider: Option<Decider>,
}

struct Caller {
    principal: Principal,
    host: Arc<str>,
    audit: Arc<AuditLog>,
}

struct Decider {
    index: Arc<AclIndex>,
    allow_if_no_acl: bool,
    metrics: Arc<SecurityMetrics>,
}

impl Access {
    /// Everything allowed, nobody audited: no caller yet.
    pub fn everything() -> Access {
        Access {
            caller: None,
            decider: None,
        }
    }

    /// The decisions of `principal` from `host` under the ACLs of `index` (what
    /// [`Authorizer::access`] gives a request; public for the benchmarks).
    pub fn over(
        index: Arc<AclIndex>,
        principal: &Principal,
        host: &str,
        allow_if_no_acl: bool,
    ) -> Access {
        Access {
            caller: Some(Caller {
                principal: principal.clone(),
                host: host.into(),
                audit: Arc::new(AuditLog::off()),
            }),
            decider: Some(Decider {
                index,
                allow_if_no_acl,
                metrics: Arc::default(),
            }),
        }
    }

    /// Records `event` in the audit log as the caller's: `fields` (a JSON object) with the
    /// caller's principal and address.
    pub fn audit(&self, event: &str, mut fields: serde_json::Value) {
        let Some(c) = &self.caller else { return };
        if let serde_json::Value::Object(f) = &mut fields {
            f.insert("principal".into(), c.principal.as_str().into());
            f.insert("client".into(), (*c.host).into());
        }
        c.audit.record(event, fields);
    }

    pub fn allows(&self, op: AclOperation, resource: ResourceType, name: &str) -> bool {
        let (Some(d), Some(c)) = (&self.decider, &self.caller) else {
            return true;
        };
        let allowed = d.decide(c, op, resource, name);
        if !allowed {
            d.metrics.authorization_denied(resource, op);
            tracing::debug!(principal = %c.principal, host = %c.host, operation = ?op, resource_type = ?resource, resource = name, "authorization denied");
            self.audit(
                "authorization_denied",
                serde_json::json!({
                    "operation": format!("{op:?}"),
                    "resource_type": format!("{resource:?}"),
                    "resource": name,
                }),
            );
        }
        allowed
    }

    /// Whether an authorizer decides for this caller (without one, everything is allowed).
    pub fn enforcing(&self) -> bool {
        self.decider.is_some() && self.caller.is_some()
    }

    pub fn sees(&self, op: AclOperation, resource: ResourceType, name: &str) -> bool {
        match (&self.decider, &self.caller) {
            (Some(d), Some(c)) => d.decide(c, op, resource, name),
            _ => true,
        }
    }

    pub fn topic(&self, op: AclOperation, name: &str) -> bool {
        self.allows(op, ResourceType::Topic, name)
    }

    pub fn group(&self, op: AclOperation, name: &str) -> bool {
        self.allows(op, ResourceType::Group, name)
    }

    pub fn cluster(&self, op: AclOperation) -> bool {
        self.allows(
            op,
            ResourceType::Cluster,
            strata_metadata::acl::CLUSTER_NAME,
        )
    }

    pub fn transactional_id(&self, op: AclOperation, id: &str) -> bool {
        self.allows(op, ResourceType::TransactionalId, id)
    }

    /// Whether a topic may be created: CREATE on the cluster (any topic) or on it.
    pub fn creates_topic(&self, name: &str) -> bool {
        self.sees(
            AclOperation::Create,
            ResourceType::Cluster,
            strata_metadata::acl::CLUSTER_NAME,
        ) || self.topic(AclOperation::Create, name)
    }

    /// Whether `op` is allowed on some resource of the type (Kafka's
    /// `authorizeByResourceType`: an idempotent producer needs WRITE on some topic).
    pub fn on_some(&self, op: AclOperation, resource: ResourceType) -> bool {
        let (Some(d), Some(c)) = (&self.decider, &self.caller) else {
            return true;
        };
        d.index.of(resource).is_none_or(|t| t.is_empty()) && d.allow_if_no_acl
            || (d.index.allowed_names(resource)).any(|name| d.decide(c, op, resource, name))
    }

    /// Kafka's authorized-operations bit set of a resource (bit `1 << code` per operation
    /// allowed), as Metadata, DescribeGroups and DescribeCluster report it on request.
    pub fn operations(&self, resource: ResourceType, name: &str) -> i32 {
        operations_of(resource)
            .iter()
            .filter(|op| self.sees(**op, resource, name))
            .fold(0, |bits, op| bits | 1 << op.code())
    }
}

/// The operations that mean something on a resource type.
fn operations_of(resource: ResourceType) -> &'static [AclOperation] {
    use AclOperation::*;
    match resource {
        ResourceType::Topic => &[
            Read,
            Write,
            Create,
            Delete,
            Alter,
            Describe,
            DescribeConfigs,
            AlterConfigs,
        ],
        ResourceType::Group => &[Read, Describe, Delete, DescribeConfigs, AlterConfigs],
        ResourceType::Cluster => &[
            Create,
            ClusterAction,
            DescribeConfigs,
            AlterConfigs,
            IdempotentWrite,
            Alter,
            Describe,
        ],
        ResourceType::TransactionalId => &[Describe, Write],
    }
}

/// The operations whose grant also grants `op`.
fn granting(op: AclOperation) -> &'static [AclOperation] {
    use AclOperation::*;
    match op {
        Describe => &[All, Describe, Read, Write, Delete, Alter],
        DescribeConfigs => &[All, DescribeConfigs, AlterConfigs],
        Read => &[All, Read],
        Write => &[All, Write],
        Create => &[All, Create],
        Delete => &[All, Delete],
        Alter => &[All, Alter],
        ClusterAction => &[All, ClusterAction],
        AlterConfigs => &[All, AlterConfigs],
        IdempotentWrite => &[All, IdempotentWrite],
        CreateTokens => &[All, CreateTokens],
        DescribeTokens => &[All, DescribeTokens],
        All => &[All],
    }
}

impl Decider {
    fn decide(
        &self,
        caller: &Caller,
        op: AclOperation,
        resource: ResourceType,
        name: &str,
    ) -> bool {
        let Some(index) = self.index.of(resource) else {
            return self.allow_if_no_acl;
        };
        let mut any = false;
        let mut allowed = false;
        let mine = (index.matching(name))
            .inspect(|_| any = true)
            .flat_map(|acls| {
                let own = acls.get(caller.principal.as_str()).into_iter().flatten();
                own.chain(acls.get(WILDCARD_PRINCIPAL).into_iter().flatten())
            })
            .filter(|e| e.host == *caller.host || e.host == WILDCARD);
        for entry in mine {
            match entry.permission {
                Permission::Deny
                    if entry.operation == op || entry.operation == AclOperation::All =>
                {
                    return false
                }
                Permission::Allow if granting(op).contains(&entry.operation) => allowed = true,
                _ => {}
            }
        }
        allowed || !any && self.allow_if_no_acl
    }
}

/// The ACLs by resource type, then by name, then by principal: a resource many principals
/// are granted costs a decision two lookups, not a scan.
#[derive(Default)]
pub struct AclIndex {
    types: HashMap<ResourceType, TypeIndex>,
}

/// One resource pattern's ACLs, by principal.
type ByPrincipal = HashMap<String, Vec<Entry>>;

#[derive(Default)]
struct TypeIndex {
    literal: HashMap<String, ByPrincipal>,
    prefixed: HashMap<String, ByPrincipal>,
    /// The byte lengths of the prefixed patterns: a name is looked up at these only.
    prefix_lengths: BTreeSet<usize>,
}

struct Entry {
    host: String,
    operation: AclOperation,
    permission: Permission,
}

impl AclIndex {
    pub fn build<'a>(acls: impl IntoIterator<Item = &'a AclBinding>) -> AclIndex {
        let mut index = AclIndex::default();
        for acl in acls {
            let t = index.types.entry(acl.resource_type).or_default();
            let by_name = match acl.pattern_type {
                PatternType::Literal => &mut t.literal,
                PatternType::Prefixed => {
                    t.prefix_lengths.insert(acl.resource_name.len());
                    &mut t.prefixed
                }
            };
            by_name
                .entry(acl.resource_name.clone())
                .or_default()
                .entry(acl.principal.clone())
                .or_default()
                .push(Entry {
                    host: acl.host.clone(),
                    operation: acl.operation,
                    permission: acl.permission,
                });
        }
        index
    }

    fn of(&self, resource: ResourceType) -> Option<&TypeIndex> {
        self.types.get(&resource)
    }

    /// The names an ALLOW ACL of the type is on (literal names and prefixes).
    fn allowed_names(&self, resource: ResourceType) -> impl Iterator<Item = &str> {
        self.of(resource).into_iter().flat_map(|t| {
            t.literal
                .iter()
                .chain(t.prefixed.iter())
                .filter(|(_, acls)| {
                    acls.values()
                        .flatten()
                        .any(|e| e.permission == Permission::Allow)
                })
                .map(|(name, _)| name.as_str())
        })
    }
}

impl TypeIndex {
    fn is_empty(&self) -> bool {
        self.literal.is_empty() && self.prefixed.is_empty()
    }

    /// The ACLs, by principal, of every pattern that applies to the resource `name`: its
    /// literal name, the wildcard, and the prefixes of it that some prefixed ACL names.
    fn matching<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a ByPrincipal> + 'a {
        let literal = self.literal.get(name);
        let wildcard = (name != WILDCARD)
            .then(|| self.literal.get(WILDCARD))
            .flatten();
        let prefixed = self
            .prefix_lengths
            .range(..=name.len())
            .filter(|len| name.is_char_boundary(**len))
            .filter_map(|len| self.prefixed.get(&name[..*len]));
        literal.into_iter().chain(wildcard).chain(prefixed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(
        resource_type: ResourceType,
        name: &str,
        pattern_type: PatternType,
        principal: &str,
        operation: AclOperation,
        permission: Permission,
    ) -> AclBinding {
        AclBinding {
            resource_type,
            resource_name: name.into(),
            pattern_type,
            principal: principal.into(),
            host: "*".into(),
            operation,
            permission,
        }
    }

    fn access(acls: &[AclBinding], principal: &str, allow_if_no_acl: bool) -> Access {
        let index = Arc::new(AclIndex::build(acls));
        Access::over(
            index,
            &Principal(principal.into()),
            "10.0.0.1",
            allow_if_no_acl,
        )
    }

    use AclOperation::*;
    use PatternType::*;
    use Permission::*;
    use ResourceType::*;

    #[test]
    fn literal_prefixed_and_wildcard_acls_apply_to_their_names_only() {
        let acls = [
            acl(Topic, "orders", Literal, "User:alice", Write, Allow),
            acl(Topic, "logs-", Prefixed, "User:alice", Read, Allow),
            acl(Group, "*", Literal, "User:alice", Read, Allow),
        ];
        let a = access(&acls, "User:alice", false);
        assert!(a.topic(Write, "orders"));
        assert!(a.topic(Describe, "orders"), "WRITE implies DESCRIBE");
        assert!(!a.topic(Read, "orders"));
        assert!(!a.topic(Write, "orders2"));
        assert!(a.topic(Read, "logs-app"));
        assert!(!a.topic(Read, "logs"), "shorter than the prefix");
        assert!(a.group(Read, "any-group"));
        assert!(!a.group(Delete, "any-group"));
        assert!(
            !a.cluster(Describe),
            "no ACL on the cluster: refused by default"
        );
        let bob = access(&acls, "User:bob", false);
        assert!(!bob.topic(Describe, "orders"), "another principal");
        assert!(!bob.topic(Write, "unnamed"));
        assert!(access(&acls, "User:bob", true).topic(Write, "unnamed"));
        assert!(
            !access(&acls, "User:bob", true).topic(Write, "orders"),
            "allow_everyone_if_no_acl_found opens only resources no ACL names"
        );
    }

    #[test]
    fn deny_beats_allow_and_wildcards_match_everyone() {
        let acls = [
            acl(Topic, "*", Literal, "User:*", All, Allow),
            acl(Topic, "secret-", Prefixed, "User:mallory", Read, Deny),
            acl(Topic, "secret-keys", Literal, "User:*", All, Deny),
        ];
        let mallory = access(&acls, "User:mallory", false);
        assert!(mallory.topic(Write, "public"));
        assert!(!mallory.topic(Read, "secret-plans"));
        assert!(
            mallory.topic(Describe, "secret-plans"),
            "a denied READ does not deny DESCRIBE"
        );
        let alice = access(&acls, "User:alice", false);
        assert!(alice.topic(Read, "secret-plans"));
        assert!(
            !alice.topic(Describe, "secret-keys"),
            "deny ALL denies every op"
        );
    }

    #[test]
    fn hosts_narrow_an_acl() {
        let mut only_elsewhere = acl(Topic, "t", Literal, "User:alice", Read, Allow);
        only_elsewhere.host = "10.9.9.9".into();
        let mut here = only_elsewhere.clone();
        here.host = "10.0.0.1".into();
        assert!(!access(&[only_elsewhere.clone()], "User:alice", false).topic(Read, "t"));
        assert!(access(&[only_elsewhere, here], "User:alice", false).topic(Read, "t"));
    }

    #[test]
    fn operations_and_resource_type_checks() {
        let acls = [
            acl(Topic, "orders", Literal, "User:alice", Write, Allow),
            acl(Topic, "orders", Literal, "User:alice", AlterConfigs, Allow),
            acl(Topic, "held-", Prefixed, "User:bob", Write, Allow),
            acl(Topic, "held-", Prefixed, "User:bob", Write, Deny),
        ];
        let a = access(&acls, "User:alice", false);
        let bits = a.operations(Topic, "orders");
        for op in [Write, Describe, DescribeConfigs, AlterConfigs] {
            assert_ne!(bits & (1 << op.code()), 0, "{op:?}");
        }
        assert_eq!(bits & (1 << Read.code()), 0);
        assert!(a.on_some(Write, Topic));
        assert!(!a.on_some(Read, Topic));
        assert!(
            !access(&acls, "User:bob", false).on_some(Write, Topic),
            "denied where allowed"
        );
        assert!(Access::everything().on_some(Write, Topic));
    }

    #[test]
    fn prefixes_are_looked_up_on_character_boundaries() {
        let acls = [acl(Topic, "é", Prefixed, "User:alice", Read, Allow)];
        let a = access(&acls, "User:alice", false);
        assert!(a.topic(Read, "éa"));
        assert!(
            !a.topic(Read, "e\u{301}"),
            "a byte prefix that is not a character"
        );
    }

    #[test]
    fn super_users_parse_as_kafka_lists_them() {
        let users = parse_super_users("User:admin; User:broker ;").unwrap();
        assert!(users.contains("User:admin") && users.contains("User:broker"));
        assert!(parse_super_users("admin").is_err());
    }
}
