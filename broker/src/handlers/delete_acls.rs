//! DeleteAcls: removes the ACLs each filter selects and reports them per filter. The filters
//! are resolved against the applied state, then the exact ACLs found are removed in one
//! quorum command. Needs ALTER on the cluster.

use std::collections::BTreeSet;

use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::{DeleteAclsRequest, DeleteAclsResponse};
use strata_metadata::acl::{AclBinding, AclFilter, AclOperation};
use strata_metadata::Command;

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;

pub async fn handle(
    broker: &Broker,
    req: DeleteAclsRequest,
    access: &Access,
) -> DeleteAclsResponse {
    let refuse_all = super::reply::acl_api_refusal(broker, access, AclOperation::Alter);
    let state = broker.node.metadata.state();
    let found: Vec<Result<Vec<AclBinding>, ApiError>> = req
        .filters
        .iter()
        .map(|f| {
            if let Some(e) = &refuse_all {
                return Err(e.clone());
            }
            let filter = AclFilter::from_codes(
                f.resource_type_filter,
                f.resource_name_filter.as_deref(),
                f.pattern_type_filter,
                f.principal_filter.as_deref(),
                f.host_filter.as_deref(),
                f.operation,
                f.permission_type,
            )
            .map_err(|why| ApiError::new(ErrorCode::InvalidRequest, why))?;
            Ok(state
                .security
                .acls
                .iter()
                .filter(|a| filter.matches(a))
                .cloned()
                .collect())
        })
        .collect();
    let doomed: BTreeSet<&AclBinding> = found.iter().flatten().flatten().collect();
    let applied = if doomed.is_empty() {
        Ok(())
    } else {
        let acls: Vec<AclBinding> = doomed.iter().map(|a| (*a).clone()).collect();
        broker
            .node
            .apply(Command::DeleteAcls { acls })
            .await
            .map(|_| ())
    };
    if applied.is_ok() {
        for acl in &doomed {
            access.audit("acl_deleted", serde_json::json!({ "acl": acl }));
        }
    }
    let results = found
        .into_iter()
        .map(
            |f| match f.and_then(|acls| applied.clone().map(|()| acls)) {
                Ok(acls) => DeleteAclsFilterResult::default().with_matching_acls(
                    acls.iter()
                        .map(|a| {
                            DeleteAclsMatchingAcl::default()
                                .with_resource_type(a.resource_type.code())
                                .with_resource_name(str_bytes(a.resource_name.as_str()))
                                .with_pattern_type(a.pattern_type.code())
                                .with_principal(str_bytes(a.principal.as_str()))
                                .with_host(str_bytes(a.host.as_str()))
                                .with_operation(a.operation.code())
                                .with_permission_type(a.permission.code())
                        })
                        .collect(),
                ),
                Err(e) => DeleteAclsFilterResult::default()
                    .with_error_code(e.code.code())
                    .with_error_message(Some(str_bytes(e.message))),
            },
        )
        .collect();
    DeleteAclsResponse::default().with_filter_results(results)
}
