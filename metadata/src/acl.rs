//! Kafka's ACL model as the quorum stores it: an [`AclBinding`] grants or denies one
//! principal, from one host, one operation on a resource pattern (KIP-290's literal and
//! prefixed patterns). The broker's authorizer decides with them; DescribeAcls and DeleteAcls
//! select them with an [`AclFilter`].
//!
//! Invariants:
//! - a stored binding is concrete: its resource type, pattern type, operation and permission
//!   are never the filters' ANY / MATCH / UNKNOWN (the enums here cannot express them);
//! - the wire numbers ([`ResourceType::code`] and friends) are Kafka's, so an ACL written by
//!   Kafka's tools means the same here.

use serde::{Deserialize, Serialize};

/// The cluster resource's only name.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// A literal resource name or principal that matches every one.
pub const WILDCARD: &str = "*";
/// The principal that matches every principal.
pub const WILDCARD_PRINCIPAL: &str = "User:*";

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResourceType {
    Topic,
    Group,
    Cluster,
    TransactionalId,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PatternType {
    Literal,
    Prefixed,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AclOperation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
    CreateTokens,
    DescribeTokens,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Permission {
    Deny,
    Allow,
}

/// One ACL.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub resource_name: String,
    pub pattern_type: PatternType,
    /// `User:name` (or [`WILDCARD_PRINCIPAL`]).
    pub principal: String,
    /// A client IP address, or [`WILDCARD`].
    pub host: String,
    pub operation: AclOperation,
    pub permission: Permission,
}

macro_rules! kafka_codes {
    ($ty:ident { $($variant:ident = $code:literal),* $(,)? }) => {
        impl $ty {
            /// Kafka's number for it.
            pub fn code(self) -> i8 {
                match self { $($ty::$variant => $code),* }
            }
            /// From Kafka's number; `None` for a filter value (ANY, MATCH) or an unknown one.
            pub fn from_code(code: i8) -> Option<$ty> {
                match code { $($code => Some($ty::$variant),)* _ => None }
            }
        }
    };
}

kafka_codes!(ResourceType { Topic = 2, Group = 3, Cluster = 4, TransactionalId = 5 });
kafka_codes!(PatternType { Literal = 3, Prefixed = 4 });
kafka_codes!(Permission { Deny = 2, Allow = 3 });
kafka_codes!(AclOperation {
    All = 2,
    Read = 3,
    Write = 4,
    Create = 5,
    Delete = 6,
    Alter = 7,
    Describe = 8,
    ClusterAction = 9,
    DescribeConfigs = 10,
    AlterConfigs = 11,
    IdempotentWrite = 12,
    CreateTokens = 13,
    DescribeTokens = 14,
});

/// Kafka's filter numbers that match any value.
pub const ANY_CODE: i8 = 1;
/// The pattern-type filter that matches what would apply to the named resource.
pub const MATCH_CODE: i8 = 2;

/// What DescribeAcls and DeleteAcls select: each field `None` matches anything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: Option<ResourceType>,
    pub resource_name: Option<String>,
    pub pattern: PatternFilter,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Option<AclOperation>,
    pub permission: Option<Permission>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PatternFilter {
    #[default]
    Any,
    /// The bindings that apply to the named resource: its literal name, the wildcard, and
    /// every prefix of it.
    Match,
    Exactly(PatternType),
}

impl AclFilter {
    /// From Kafka's filter numbers; `Err` names the field that is not a filter value.
    pub fn from_codes(
        resource_type: i8,
        resource_name: Option<&str>,
        pattern_type: i8,
        principal: Option<&str>,
        host: Option<&str>,
        operation: i8,
        permission: i8,
    ) -> Result<AclFilter, &'static str> {
        fn any_or<T>(
            code: i8,
            of: fn(i8) -> Option<T>,
            what: &'static str,
        ) -> Result<Option<T>, &'static str> {
            if code == ANY_CODE {
                Ok(None)
            } else {
                of(code).map(Some).ok_or(what)
            }
        }
        let pattern = match pattern_type {
            ANY_CODE => PatternFilter::Any,
            MATCH_CODE => PatternFilter::Match,
            code => {
                PatternFilter::Exactly(PatternType::from_code(code).ok_or("unknown pattern type")?)
            }
        };
        Ok(AclFilter {
            resource_type: any_or(
                resource_type,
                ResourceType::from_code,
                "unknown resource type",
            )?,
            resource_name: resource_name.map(str::to_string),
            pattern,
            principal: principal.map(str::to_string),
            host: host.map(str::to_string),
            operation: any_or(operation, AclOperation::from_code, "unknown operation")?,
            permission: any_or(permission, Permission::from_code, "unknown permission type")?,
        })
    }

    pub fn matches(&self, acl: &AclBinding) -> bool {
        let name_matches = match (self.pattern, &self.resource_name) {
            (PatternFilter::Match, Some(name)) => match acl.pattern_type {
                PatternType::Literal => acl.resource_name == *name || acl.resource_name == WILDCARD,
                PatternType::Prefixed => name.starts_with(&acl.resource_name),
            },
            (PatternFilter::Exactly(p), name) => {
                p == acl.pattern_type && name.as_ref().is_none_or(|n| *n == acl.resource_name)
            }
            (_, name) => name.as_ref().is_none_or(|n| *n == acl.resource_name),
        };
        name_matches
            && self.resource_type.is_none_or(|t| t == acl.resource_type)
            && self.principal.as_ref().is_none_or(|p| *p == acl.principal)
            && self.host.as_ref().is_none_or(|h| *h == acl.host)
            && self.operation.is_none_or(|o| o == acl.operation)
            && self.permission.is_none_or(|p| p == acl.permission)
    }
}

impl AclBinding {
    /// Why the binding cannot be stored, if it cannot: Kafka's rules for a creation.
    pub fn invalid(&self) -> Option<String> {
        if self.resource_name.is_empty() {
            return Some("resource name must not be empty".into());
        }
        if self.resource_type == ResourceType::Cluster && self.resource_name != CLUSTER_NAME {
            return Some(format!("the cluster resource is named {CLUSTER_NAME}"));
        }
        if self.pattern_type == PatternType::Prefixed && self.resource_name == WILDCARD {
            return Some("a prefixed pattern cannot be the wildcard '*'".into());
        }
        match self.principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => {}
            _ => return Some(format!("principal '{}' is not Type:name", self.principal)),
        }
        if self.host.is_empty() {
            return Some("host must not be empty (use '*' for any)".into());
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(name: &str, pattern: PatternType) -> AclBinding {
        AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: name.into(),
            pattern_type: pattern,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: AclOperation::Read,
            permission: Permission::Allow,
        }
    }

    #[test]
    fn codes_round_trip_and_filters_are_not_bindings() {
        for op in 2..=14 {
            assert_eq!(AclOperation::from_code(op).unwrap().code(), op);
        }
        assert_eq!(AclOperation::from_code(ANY_CODE), None);
        assert_eq!(PatternType::from_code(MATCH_CODE), None);
        assert_eq!(
            ResourceType::from_code(7),
            None,
            "USER resources are not ACL'd here"
        );
    }

    #[test]
    fn match_filter_selects_what_applies_to_a_name() {
        let filter = AclFilter::from_codes(
            2,
            Some("orders-eu"),
            MATCH_CODE,
            None,
            None,
            ANY_CODE,
            ANY_CODE,
        )
        .unwrap();
        assert!(filter.matches(&binding("orders-eu", PatternType::Literal)));
        assert!(filter.matches(&binding("*", PatternType::Literal)));
        assert!(filter.matches(&binding("orders-", PatternType::Prefixed)));
        assert!(!filter.matches(&binding("orders", PatternType::Literal)));
        assert!(!filter.matches(&binding("payments", PatternType::Prefixed)));

        let exact =
            AclFilter::from_codes(2, Some("orders-"), 4, None, None, ANY_CODE, ANY_CODE).unwrap();
        assert!(exact.matches(&binding("orders-", PatternType::Prefixed)));
        assert!(!exact.matches(&binding("orders-", PatternType::Literal)));
        assert!(AclFilter::from_codes(0, None, 1, None, None, 1, 1).is_err());
    }

    #[test]
    fn invalid_bindings_are_named() {
        assert!(binding("t", PatternType::Literal).invalid().is_none());
        assert!(binding("", PatternType::Literal).invalid().is_some());
        assert!(binding("*", PatternType::Prefixed).invalid().is_some());
        let mut b = binding("t", PatternType::Literal);
        b.principal = "alice".into();
        assert!(b.invalid().is_some());
        let mut c = binding("other", PatternType::Literal);
        c.resource_type = ResourceType::Cluster;
        assert!(c.invalid().is_some());
    }
}
