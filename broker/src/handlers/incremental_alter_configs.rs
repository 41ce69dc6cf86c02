//! IncrementalAlterConfigs: SET, DELETE, and for LIST keys APPEND and SUBTRACT, applied in
//! order to a topic's overrides; the result is checked as a whole and stored in one quorum
//! command. The legacy AlterConfigs ([`super::alter_configs`]) replaces the whole set through
//! the same [`replace_topic_configs`].

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};
use strata_metadata::Command;

use super::describe_configs::RESOURCE_TOPIC;
use super::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;
use crate::topic_config::{self, Kind};
use strata_metadata::acl::AclOperation;

const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

pub async fn handle(
    broker: &Arc<Broker>,
    req: IncrementalAlterConfigsRequest,
    access: &Access,
) -> IncrementalAlterConfigsResponse {
    let mut responses = Vec::with_capacity(req.resources.len());
    for r in req.resources {
        let name = r.resource_name.as_str().to_string();
        let outcome = match authorize(access, r.resource_type, &name) {
            Err(e) => Err(e),
            Ok(()) => {
                alter(
                    broker,
                    r.resource_type,
                    &name,
                    &r.configs,
                    req.validate_only,
                )
                .await
            }
        };
        if outcome.is_ok() && !req.validate_only {
            let changes: Vec<_> = (r.configs.iter())
                .map(|c| {
                    serde_json::json!({
                        "name": c.name.as_str(),
                        "op": c.config_operation,
                        "value": c.value.as_deref(),
                    })
                })
                .collect();
            audit(access, r.resource_type, &name, changes);
        }
        let resp = AlterConfigsResourceResponse::default()
            .with_resource_type(r.resource_type)
            .with_resource_name(r.resource_name);
        responses.push(match outcome {
            Ok(()) => resp,
            Err(e) => resp
                .with_error_code(e.code.code())
                .with_error_message(Some(str_bytes(e.message))),
        });
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

/// ALTER_CONFIGS on the topic, or on the cluster for any other resource.
pub(super) fn authorize(access: &Access, resource_type: i8, name: &str) -> Result<(), ApiError> {
    let denied = match resource_type {
        RESOURCE_TOPIC => (!access.topic(AclOperation::AlterConfigs, name))
            .then_some(ErrorCode::TopicAuthorizationFailed),
        _ => (!access.cluster(AclOperation::AlterConfigs))
            .then_some(ErrorCode::ClusterAuthorizationFailed),
    };
    match denied {
        Some(code) => Err(ApiError::new(code, "ALTER_CONFIGS is not authorized")),
        None => Ok(()),
    }
}

pub(super) fn audit(
    access: &Access,
    resource_type: i8,
    name: &str,
    changes: Vec<serde_json::Value>,
) {
    access.audit(
        "config_altered",
        serde_json::json!({
            "resource_type": resource_type,
            "resource": name,
            "changes": changes,
        }),
    );
}

async fn alter(
    broker: &Broker,
    resource_type: i8,
    name: &str,
    configs: &[AlterableConfig],
    validate_only: bool,
) -> Result<(), ApiError> {
    let current = topic_overrides(broker, resource_type, name)?;
    let mut merged = current.clone();
    let invalid = |m: String| ApiError::new(ErrorCode::InvalidConfig, m);
    for c in configs {
        let key = c.name.as_str();
        let value = c.value.as_ref().map(|v| v.as_str()).unwrap_or("");
        match c.config_operation {
            SET => {
                topic_config::validate(key, value).map_err(invalid)?;
                merged.insert(key.to_string(), value.to_string());
            }
            DELETE => {
                topic_config::key(key).ok_or_else(|| invalid(format!("unknown config '{key}'")))?;
                merged.remove(key);
            }
            op @ (APPEND | SUBTRACT) => {
                let def = (topic_config::key(key))
                    .ok_or_else(|| invalid(format!("unknown config '{key}'")))?;
                let verb = if op == APPEND { "APPEND" } else { "SUBTRACT" };
                if def.kind != Kind::List {
                    return Err(invalid(format!(
                        "{verb} applies to list configs; '{key}' is not one"
                    )));
                }
                let now = (merged.get(key).cloned())
                    .unwrap_or_else(|| topic_config::default_value(&broker.node.config, key));
                let changed = topic_config::list_change(&now, value, op == SUBTRACT);
                topic_config::validate(key, &changed)
                    .map_err(|m| invalid(format!("{verb} '{value}' to '{now}': {m}")))?;
                merged.insert(key.to_string(), changed);
            }
            op => {
                return Err(ApiError::new(
                    ErrorCode::InvalidRequest,
                    format!("unknown config operation {op} for '{key}'"),
                ))
            }
        }
    }
    replace_topic_configs(broker, name, &current, merged, validate_only).await
}

/// A topic's overrides, or why they cannot be altered.
pub(super) fn topic_overrides(
    broker: &Broker,
    resource_type: i8,
    name: &str,
) -> Result<BTreeMap<String, String>, ApiError> {
    if resource_type != RESOURCE_TOPIC {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "only topic configs can be altered; broker settings come from the config file",
        ));
    }
    match broker.node.metadata.state().topic(name) {
        Some(t) => Ok(t.configs.clone()),
        None => Err(ApiError::new(
            ErrorCode::UnknownTopicOrPartition,
            format!("unknown topic '{name}'"),
        )),
    }
}

/// Makes `merged` a topic's overrides (they were `current`): checked together, then stored
/// as the difference in one quorum command.
pub(super) async fn replace_topic_configs(
    broker: &Broker,
    name: &str,
    current: &BTreeMap<String, String>,
    merged: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<(), ApiError> {
    topic_config::validate_combination(&broker.node.config, &merged)
        .map_err(|m| ApiError::new(ErrorCode::InvalidConfig, m))?;
    if validate_only {
        return Ok(());
    }
    let delete: Vec<String> = (current.keys())
        .filter(|k| !merged.contains_key(*k))
        .cloned()
        .collect();
    let set: BTreeMap<String, String> = (merged.into_iter())
        .filter(|(k, v)| current.get(k) != Some(v))
        .collect();
    broker
        .node
        .apply(Command::AlterTopicConfig {
            name: name.to_string(),
            set,
            delete,
        })
        .await?;
    broker.node.sync_partitions()
}
