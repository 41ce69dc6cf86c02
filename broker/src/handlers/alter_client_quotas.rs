//! AlterClientQuotas (KIP-546): sets and removes client quotas in the metadata quorum, from
//! where every broker applies them to its next request. Needs ALTER_CONFIGS on the cluster.
//! Entities name a user, a client id or both (named, or the default when the name is null);
//! Kafka's `ip` entity (connection_creation_rate) and `controller_mutation_rate` are not
//! enforced by Strata and are refused with INVALID_REQUEST rather than stored and ignored.

use kafka_protocol::messages::alter_client_quotas_request::EntryData;
use kafka_protocol::messages::alter_client_quotas_response::{self as resp, EntityData};
use kafka_protocol::messages::{AlterClientQuotasRequest, AlterClientQuotasResponse};
use strata_metadata::acl::AclOperation;
use strata_metadata::quota::{EntityName, QuotaAlteration, QuotaEntity, QuotaKey};
use strata_metadata::Command;

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;

pub async fn handle(
    broker: &Broker,
    req: AlterClientQuotasRequest,
    access: &Access,
) -> AlterClientQuotasResponse {
    let op = AclOperation::AlterConfigs;
    let refused = (!access.cluster(op)).then(|| super::reply::cluster_denied(op));
    let parsed: Vec<Result<QuotaAlteration, ApiError>> = (req.entries.iter())
        .map(|e| match &refused {
            Some(e) => Err(e.clone()),
            None => alteration(e),
        })
        .collect();
    let valid: Vec<QuotaAlteration> = parsed.iter().flatten().cloned().collect();
    let applied = if valid.is_empty() || req.validate_only {
        Ok(())
    } else {
        (broker.node)
            .apply(Command::AlterClientQuotas {
                alterations: valid.clone(),
            })
            .await
            .map(|_| ())
    };
    if applied.is_ok() && !req.validate_only {
        for a in &valid {
            let set: serde_json::Map<String, serde_json::Value> = (a.set.iter())
                .map(|(k, v)| (k.name().into(), (*v).into()))
                .collect();
            let removed: Vec<&str> = a.remove.iter().map(|k| k.name()).collect();
            access.audit(
                "quota_altered",
                serde_json::json!({ "entity": entity_json(&a.entity), "set": set, "removed": removed }),
            );
        }
    }
    let entries = (req.entries.into_iter().zip(parsed))
        .map(|(e, outcome)| {
            let entity = (e.entity.into_iter())
                .map(|c| {
                    EntityData::default()
                        .with_entity_type(c.entity_type)
                        .with_entity_name(c.entity_name)
                })
                .collect();
            let entry = resp::EntryData::default().with_entity(entity);
            match outcome.and_then(|_| applied.clone()) {
                Ok(()) => entry,
                Err(e) => entry
                    .with_error_code(e.code.code())
                    .with_error_message(Some(str_bytes(e.message))),
            }
        })
        .collect();
    AlterClientQuotasResponse::default().with_entries(entries)
}

/// An entry as an alteration, or why it cannot be one.
fn alteration(e: &EntryData) -> Result<QuotaAlteration, ApiError> {
    let invalid = |why: String| ApiError::new(ErrorCode::InvalidRequest, why);
    let mut entity = QuotaEntity {
        user: None,
        client_id: None,
    };
    for c in &e.entity {
        let name = EntityName::from_wire(c.entity_name.as_deref());
        let slot = match c.entity_type.as_str() {
            QuotaEntity::USER => &mut entity.user,
            QuotaEntity::CLIENT_ID => &mut entity.client_id,
            "ip" => {
                return Err(invalid(
                    "ip quotas (connection_creation_rate) are not supported by Strata".into(),
                ))
            }
            other => return Err(invalid(format!("unknown quota entity type {other:?}"))),
        };
        if slot.replace(name).is_some() {
            return Err(invalid(format!(
                "entity type {} is given twice",
                c.entity_type.as_str()
            )));
        }
    }
    let mut alteration = QuotaAlteration {
        entity,
        set: Vec::new(),
        remove: Vec::new(),
    };
    for op in &e.ops {
        let key = QuotaKey::from_name(&op.key).ok_or_else(|| {
            invalid(format!(
                "unknown or unsupported quota key {:?} (Strata enforces producer_byte_rate, consumer_byte_rate and request_percentage)",
                op.key.as_str()
            ))
        })?;
        let seen =
            alteration.set.iter().any(|(k, _)| *k == key) || alteration.remove.contains(&key);
        if seen {
            return Err(invalid(format!("quota key {} is given twice", key.name())));
        }
        if op.remove {
            alteration.remove.push(key);
        } else {
            alteration.set.push((key, op.value));
        }
    }
    match alteration.invalid() {
        Some(why) => Err(invalid(why)),
        None => Ok(alteration),
    }
}

/// An entity as the audit log writes it: `{"user": "alice", "client-id": "<default>"}`.
fn entity_json(entity: &QuotaEntity) -> serde_json::Value {
    let name = |n: &EntityName| n.to_wire().unwrap_or("<default>").to_string();
    let mut m = serde_json::Map::new();
    if let Some(u) = &entity.user {
        m.insert(QuotaEntity::USER.into(), name(u).into());
    }
    if let Some(c) = &entity.client_id {
        m.insert(QuotaEntity::CLIENT_ID.into(), name(c).into());
    }
    m.into()
}
