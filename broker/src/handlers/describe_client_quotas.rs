//! DescribeClientQuotas (KIP-546): the stored quotas of the entities a filter selects. Needs
//! DESCRIBE_CONFIGS on the cluster. Each component selects on one entity type: an exact name,
//! the default, or any entity that has the type; with `strict`, an entity must have no other
//! type. A filter on an entity type Strata does not store (`ip`) selects nothing.

use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{DescribeClientQuotasRequest, DescribeClientQuotasResponse};
use strata_metadata::acl::AclOperation;
use strata_metadata::quota::{EntityName, QuotaEntity};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;

/// Kafka's match types.
const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_ANY: i8 = 2;

pub fn handle(
    broker: &Broker,
    req: DescribeClientQuotasRequest,
    access: &Access,
) -> DescribeClientQuotasResponse {
    let op = AclOperation::DescribeConfigs;
    let filter = match (access.cluster(op), filter(&req.components)) {
        (false, _) => Err(super::reply::cluster_denied(op)),
        (true, f) => f,
    };
    let filter = match filter {
        Ok(f) => f,
        Err(e) => {
            return DescribeClientQuotasResponse::default()
                .with_error_code(e.code.code())
                .with_error_message(Some(str_bytes(e.message)))
        }
    };
    let state = broker.node.metadata.state();
    let entries = (state.security.quotas.iter())
        .filter(|(entity, _)| filter.selects(entity, req.strict))
        .map(|(entity, values)| {
            let mut components = Vec::new();
            for (kind, name) in [
                (QuotaEntity::USER, &entity.user),
                (QuotaEntity::CLIENT_ID, &entity.client_id),
            ] {
                if let Some(name) = name {
                    components.push(
                        EntityData::default()
                            .with_entity_type(str_bytes(kind))
                            .with_entity_name(name.to_wire().map(str_bytes)),
                    );
                }
            }
            let values = (values.iter())
                .map(|(k, v)| {
                    ValueData::default()
                        .with_key(str_bytes(k.name()))
                        .with_value(*v)
                })
                .collect();
            EntryData::default()
                .with_entity(components)
                .with_values(values)
        })
        .collect();
    DescribeClientQuotasResponse::default().with_entries(Some(entries))
}

/// What one entity type must be: `None` any name (the type present), else that name.
type Component = Option<EntityName>;

struct Filter {
    user: Option<Component>,
    client_id: Option<Component>,
    /// A component on a type Strata stores no quota for: nothing matches.
    unknown_type: bool,
}

impl Filter {
    fn selects(&self, entity: &QuotaEntity, strict: bool) -> bool {
        if self.unknown_type {
            return false;
        }
        let side = |want: &Option<Component>, have: &Option<EntityName>| match (want, have) {
            (None, None) => true,
            (None, Some(_)) => !strict,
            (Some(_), None) => false,
            (Some(None), Some(_)) => true,
            (Some(Some(w)), Some(h)) => w == h,
        };
        side(&self.user, &entity.user) && side(&self.client_id, &entity.client_id)
    }
}

fn filter(components: &[ComponentData]) -> Result<Filter, ApiError> {
    let invalid = |why: String| ApiError::new(ErrorCode::InvalidRequest, why);
    let mut f = Filter {
        user: None,
        client_id: None,
        unknown_type: false,
    };
    let mut seen = Vec::new();
    for c in components {
        let kind = c.entity_type.as_str();
        if seen.contains(&kind) {
            return Err(invalid(format!("entity type {kind:?} is filtered twice")));
        }
        seen.push(kind);
        let component = match c.match_type {
            MATCH_EXACT => match &c._match {
                Some(name) => Some(EntityName::Named(name.to_string())),
                None => return Err(invalid("an exact match needs a name".into())),
            },
            MATCH_DEFAULT => Some(EntityName::Default),
            MATCH_ANY => None,
            other => return Err(invalid(format!("unknown match type {other}"))),
        };
        match kind {
            QuotaEntity::USER => f.user = Some(component),
            QuotaEntity::CLIENT_ID => f.client_id = Some(component),
            _ => f.unknown_type = true,
        }
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn component(kind: &str, match_type: i8, name: Option<&str>) -> ComponentData {
        ComponentData::default()
            .with_entity_type(str_bytes(kind))
            .with_match_type(match_type)
            .with_match(name.map(str_bytes))
    }

    fn entity(user: Option<EntityName>, client_id: Option<EntityName>) -> QuotaEntity {
        QuotaEntity { user, client_id }
    }

    #[test]
    fn filters_select_as_kafka_does() {
        let alice = || Some(EntityName::Named("alice".into()));
        let app = || Some(EntityName::Named("app".into()));
        let entities = [
            entity(alice(), None),
            entity(alice(), app()),
            entity(Some(EntityName::Default), None),
            entity(None, app()),
        ];
        let selected = |components: &[ComponentData], strict: bool| -> Vec<usize> {
            let f = filter(components).unwrap();
            (0..entities.len())
                .filter(|i| f.selects(&entities[*i], strict))
                .collect()
        };
        let user_alice = [component("user", MATCH_EXACT, Some("alice"))];
        assert_eq!(selected(&user_alice, false), vec![0, 1]);
        assert_eq!(selected(&user_alice, true), vec![0]);
        assert_eq!(
            selected(&[component("user", MATCH_ANY, None)], false),
            vec![0, 1, 2]
        );
        assert_eq!(
            selected(&[component("user", MATCH_DEFAULT, None)], true),
            vec![2]
        );
        assert_eq!(
            selected(&[component("client-id", MATCH_ANY, None)], true),
            vec![3]
        );
        assert_eq!(selected(&[], false), vec![0, 1, 2, 3]);
        assert!(selected(&[component("ip", MATCH_ANY, None)], false).is_empty());
        assert!(filter(&[component("user", MATCH_EXACT, None)]).is_err());
        assert!(filter(&[component("user", 7, None)]).is_err());
        assert!(filter(&[
            component("user", MATCH_ANY, None),
            component("user", MATCH_DEFAULT, None)
        ])
        .is_err());
    }
}
