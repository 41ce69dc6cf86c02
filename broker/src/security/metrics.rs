//! Metrics of authentication and TLS: counts by listener, mechanism and result, never by user
//! (a label per user would let anyone who can connect grow the metrics without bound).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use strata_metadata::acl::{AclOperation, ResourceType};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AuthLabels {
    listener: String,
    mechanism: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    listener: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeniedLabels {
    resource_type: &'static str,
    operation: &'static str,
}

#[derive(Default)]
pub struct SecurityMetrics {
    authentications: Family<AuthLabels, Counter>,
    tls_handshakes: Family<ResultLabels, Counter>,
    tls_reloads: Family<ReloadLabels, Counter>,
    authorization_denials: Family<DeniedLabels, Counter>,
    acls: Gauge,
}

impl SecurityMetrics {
    pub fn register(&self, r: &mut Registry) {
        r.register(
            "sasl_authentications",
            "SASL authentications by listener, mechanism and result (ok, failed, illegal_state, unsupported_mechanism)",
            self.authentications.clone(),
        );
        r.register(
            "tls_handshakes",
            "TLS handshakes by listener and result (ok, failed, timed_out)",
            self.tls_handshakes.clone(),
        );
        r.register(
            "tls_reloads",
            "Reloads of the TLS certificate, key and CA files after they changed, by result",
            self.tls_reloads.clone(),
        );
        r.register(
            "authorization_denials",
            "Requests (or parts of them) refused by the ACLs, by resource type and operation",
            self.authorization_denials.clone(),
        );
        r.register(
            "acls",
            "ACLs in the metadata state the authorizer last decided with",
            self.acls.clone(),
        );
    }

    pub fn authorization_denied(&self, resource: ResourceType, op: AclOperation) {
        self.authorization_denials
            .get_or_create(&DeniedLabels {
                resource_type: resource_label(resource),
                operation: operation_label(op),
            })
            .inc();
    }

    pub fn acls_in_use(&self, count: usize) {
        self.acls.set(count as i64);
    }

    pub fn authentication(&self, listener: &str, mechanism: &'static str, result: &'static str) {
        self.authentications
            .get_or_create(&AuthLabels {
                listener: listener.to_string(),
                mechanism,
                result,
            })
            .inc();
    }

    pub fn tls_handshake(&self, listener: &str, result: &'static str) {
        self.tls_handshakes
            .get_or_create(&ResultLabels {
                listener: listener.to_string(),
                result,
            })
            .inc();
    }

    pub fn tls_reloaded(&self, result: &'static str) {
        self.tls_reloads
            .get_or_create(&ReloadLabels { result })
            .inc();
    }
}

fn resource_label(resource: ResourceType) -> &'static str {
    match resource {
        ResourceType::Topic => "topic",
        ResourceType::Group => "group",
        ResourceType::Cluster => "cluster",
        ResourceType::TransactionalId => "transactional_id",
    }
}

fn operation_label(op: AclOperation) -> &'static str {
    use AclOperation::*;
    match op {
        All => "all",
        Read => "read",
        Write => "write",
        Create => "create",
        Delete => "delete",
        Alter => "alter",
        Describe => "describe",
        ClusterAction => "cluster_action",
        DescribeConfigs => "describe_configs",
        AlterConfigs => "alter_configs",
        IdempotentWrite => "idempotent_write",
        CreateTokens => "create_tokens",
        DescribeTokens => "describe_tokens",
    }
}
