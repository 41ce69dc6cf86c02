use std::sync::Arc;

use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;
use strata_metadata::acl::{AclOperation, ResourceType};

pub async fn handle(
    broker: &Arc<Broker>,
    req: DescribeGroupsRequest,
    version: i16,
    access: &Access,
) -> DescribeGroupsResponse {
    let mut checks = Vec::with_capacity(req.groups.len());
    for id in &req.groups {
        checks.push(if access.group(AclOperation::Describe, id) {
            broker.groups.check(id.0.as_str()).await
        } else {
            Err(ApiError::new(
                ErrorCode::GroupAuthorizationFailed,
                "DESCRIBE on the group is not authorized",
            ))
        });
    }
    let groups = req
        .groups
        .into_iter()
        .zip(checks)
        .map(|(id, checked)| {
            let g = DescribedGroup::default()
                .with_group_id(id.clone())
                .with_authorized_operations(if req.include_authorized_operations {
                    access.operations(ResourceType::Group, &id)
                } else {
                    i32::MIN
                });
            if let Err(e) = checked {
                return g
                    .with_error_code(e.code.code())
                    .with_error_message((version >= 6).then(|| str_bytes(e.message)));
            }
            let view = broker.groups.describe(id.0.as_str());
            // Before v6 an unknown group is described as Dead; from v6 it is an error.
            if version >= 6 && view.state == "Dead" {
                return g
                    .with_group_state(str_bytes(view.state))
                    .with_error_code(ErrorCode::GroupIdNotFound.code())
                    .with_error_message(Some(str_bytes(format!("group {} not found", id.0))));
            }
            let members = view
                .members
                .into_iter()
                .map(|(member, instance, client, host, meta, assignment)| {
                    DescribedGroupMember::default()
                        .with_member_id(str_bytes(member))
                        .with_group_instance_id(if version >= 4 {
                            instance.map(str_bytes)
                        } else {
                            None
                        })
                        .with_client_id(str_bytes(client))
                        .with_client_host(str_bytes(host))
                        .with_member_metadata(meta)
                        .with_member_assignment(assignment)
                })
                .collect();
            g.with_group_state(str_bytes(view.state))
                .with_protocol_type(str_bytes(view.protocol_type))
                .with_protocol_data(str_bytes(view.protocol))
                .with_members(members)
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}
