//! CreateAcls (KIP-140, KIP-290): adds ACLs to the metadata quorum, from where every broker's
//! authorizer applies them to its next request. Needs ALTER on the cluster.

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::{CreateAclsRequest, CreateAclsResponse};
use strata_metadata::acl::{AclBinding, AclOperation, PatternType, Permission, ResourceType};
use strata_metadata::Command;

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;

pub async fn handle(
    broker: &Broker,
    req: CreateAclsRequest,
    access: &Access,
) -> CreateAclsResponse {
    let refuse_all = super::reply::acl_api_refusal(broker, access, AclOperation::Alter);
    let bindings: Vec<Result<AclBinding, ApiError>> = req
        .creations
        .iter()
        .map(|c| match &refuse_all {
            Some(e) => Err(e.clone()),
            None => binding(c),
        })
        .collect();
    let valid: Vec<AclBinding> = bindings
        .iter()
        .filter_map(|b| b.as_ref().ok().cloned())
        .collect();
    let applied = if valid.is_empty() {
        Ok(())
    } else {
        broker
            .node
            .apply(Command::CreateAcls {
                acls: valid.clone(),
            })
            .await
            .map(|_| ())
    };
    if applied.is_ok() {
        for acl in &valid {
            access.audit("acl_created", serde_json::json!({ "acl": acl }));
        }
    }
    let results = bindings
        .into_iter()
        .map(|b| match b.and_then(|_| applied.clone()) {
            Ok(()) => AclCreationResult::default(),
            Err(e) => AclCreationResult::default()
                .with_error_code(e.code.code())
                .with_error_message(Some(str_bytes(e.message))),
        })
        .collect();
    CreateAclsResponse::default().with_results(results)
}

/// A creation as a binding, or why it cannot be one.
fn binding(c: &AclCreation) -> Result<AclBinding, ApiError> {
    let invalid = |what: &str| ApiError::new(ErrorCode::InvalidRequest, what.to_string());
    let acl = AclBinding {
        resource_type: ResourceType::from_code(c.resource_type).ok_or_else(|| {
            invalid("resource type must be TOPIC, GROUP, CLUSTER or TRANSACTIONAL_ID")
        })?,
        resource_name: c.resource_name.to_string(),
        pattern_type: PatternType::from_code(c.resource_pattern_type)
            .ok_or_else(|| invalid("pattern type must be LITERAL or PREFIXED"))?,
        principal: c.principal.to_string(),
        host: c.host.to_string(),
        operation: AclOperation::from_code(c.operation)
            .ok_or_else(|| invalid("operation must be a concrete operation (not ANY)"))?,
        permission: Permission::from_code(c.permission_type)
            .ok_or_else(|| invalid("permission type must be ALLOW or DENY"))?,
    };
    match acl.invalid() {
        Some(why) => Err(invalid(&why)),
        None => Ok(acl),
    }
}
