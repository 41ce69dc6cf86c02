use std::sync::Arc;

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::security::Access;
use strata_metadata::acl::{AclOperation, ResourceType, CLUSTER_NAME};

/// The groups the caller may describe (all of them with DESCRIBE on the cluster).
pub fn handle(
    broker: &Arc<Broker>,
    req: ListGroupsRequest,
    version: i16,
    access: &Access,
) -> ListGroupsResponse {
    let all = access.sees(AclOperation::Describe, ResourceType::Cluster, CLUSTER_NAME);
    let groups = broker
        .groups
        .list()
        .into_iter()
        .filter(|g| all || access.sees(AclOperation::Describe, ResourceType::Group, &g.id))
        .filter(|g| {
            req.states_filter.is_empty()
                || req
                    .states_filter
                    .iter()
                    .any(|s| s.as_str().eq_ignore_ascii_case(g.state))
        })
        .filter(|g| {
            req.types_filter.is_empty()
                || req
                    .types_filter
                    .iter()
                    .any(|t| t.as_str().eq_ignore_ascii_case(g.kind))
        })
        .map(|listed| {
            let g = ListedGroup::default()
                .with_group_id(GroupId(str_bytes(listed.id)))
                .with_protocol_type(str_bytes(listed.protocol_type));
            let g = if version >= 4 {
                g.with_group_state(str_bytes(listed.state))
            } else {
                g
            };
            if version >= 5 {
                g.with_group_type(str_bytes(listed.kind))
            } else {
                g
            }
        })
        .collect();
    ListGroupsResponse::default().with_groups(groups)
}
