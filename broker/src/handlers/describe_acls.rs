//! DescribeAcls: the ACLs a filter selects, grouped by resource pattern. Needs DESCRIBE on
//! the cluster.

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{DescribeAclsRequest, DescribeAclsResponse};
use strata_metadata::acl::{AclFilter, AclOperation};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::security::Access;

pub fn handle(broker: &Broker, req: DescribeAclsRequest, access: &Access) -> DescribeAclsResponse {
    if let Some(e) = super::reply::acl_api_refusal(broker, access, AclOperation::Describe) {
        return DescribeAclsResponse::default()
            .with_error_code(e.code.code())
            .with_error_message(Some(str_bytes(e.message)));
    }
    let filter = match AclFilter::from_codes(
        req.resource_type_filter,
        req.resource_name_filter.as_deref(),
        req.pattern_type_filter,
        req.principal_filter.as_deref(),
        req.host_filter.as_deref(),
        req.operation,
        req.permission_type,
    ) {
        Ok(f) => f,
        Err(why) => {
            return DescribeAclsResponse::default()
                .with_error_code(ErrorCode::InvalidRequest.code())
                .with_error_message(Some(str_bytes(why)))
        }
    };
    let state = broker.node.metadata.state();
    let mut resources: BTreeMap<_, Vec<AclDescription>> = BTreeMap::new();
    for acl in state.security.acls.iter().filter(|a| filter.matches(a)) {
        resources
            .entry((
                acl.resource_type,
                acl.resource_name.as_str(),
                acl.pattern_type,
            ))
            .or_default()
            .push(
                AclDescription::default()
                    .with_principal(str_bytes(acl.principal.as_str()))
                    .with_host(str_bytes(acl.host.as_str()))
                    .with_operation(acl.operation.code())
                    .with_permission_type(acl.permission.code()),
            );
    }
    let resources = resources
        .into_iter()
        .map(|((rt, name, pattern), acls)| {
            DescribeAclsResource::default()
                .with_resource_type(rt.code())
                .with_resource_name(str_bytes(name))
                .with_pattern_type(pattern.code())
                .with_acls(acls)
        })
        .collect();
    DescribeAclsResponse::default().with_resources(resources)
}
