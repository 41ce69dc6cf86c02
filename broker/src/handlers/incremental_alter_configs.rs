use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};
use strata_metadata::Command;

use super::describe_configs::RESOURCE_TOPIC;
use super::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;
use crate::topic_config;
use strata_metadata::acl::AclOperation;

const SET: i8 = 0;
const DELETE: i8 = 1;

pub async fn handle(
    broker: &Arc<Broker>,
    req: IncrementalAlterConfigsRequest,
    access: &Access,
) -> IncrementalAlterConfigsResponse {
    let mut responses = Vec::with_capacity(req.resources.len());
    for r in req.resources {
        let name = r.resource_name.as_str().to_string();
        let denied = match r.resource_type {
            RESOURCE_TOPIC => (!access.topic(AclOperation::AlterConfigs, &name))
                .then_some(ErrorCode::TopicAuthorizationFailed),
            _ => (!access.cluster(AclOperation::AlterConfigs))
                .then_some(ErrorCode::ClusterAuthorizationFailed),
        };
        let outcome = match denied {
            Some(code) => Err(ApiError::new(code, "ALTER_CONFIGS is not authorized")),
            None => {
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
            access.audit(
                "config_altered",
                serde_json::json!({
                    "resource_type": r.resource_type,
                    "resource": &name,
                    "changes": changes,
                }),
            );
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

async fn alter(
    broker: &Broker,
    resource_type: i8,
    name: &str,
    configs: &[kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig],
    validate_only: bool,
) -> Result<(), ApiError> {
    if resource_type != RESOURCE_TOPIC {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "only topic configs can be altered; broker settings come from the config file",
        ));
    }
    if broker.node.metadata.state().topic(name).is_none() {
        return Err(ApiError::new(
            ErrorCode::UnknownTopicOrPartition,
            format!("unknown topic '{name}'"),
        ));
    }
    let mut set = BTreeMap::new();
    let mut delete = Vec::new();
    for c in configs {
        let key = c.name.as_str();
        match c.config_operation {
            SET => {
                let value = c.value.as_ref().map(|v| v.as_str()).unwrap_or("");
                topic_config::validate(key, value)
                    .map_err(|m| ApiError::new(ErrorCode::InvalidConfig, m))?;
                set.insert(key.to_string(), value.to_string());
            }
            DELETE => {
                topic_config::key(key).ok_or_else(|| {
                    ApiError::new(ErrorCode::InvalidConfig, format!("unknown config '{key}'"))
                })?;
                delete.push(key.to_string());
            }
            op => {
                return Err(ApiError::new(
                    ErrorCode::InvalidConfig,
                    format!(
                    "operation {op} (APPEND/SUBTRACT) applies to list configs; '{key}' is not one"
                ),
                ))
            }
        }
    }
    let mut merged = broker
        .node
        .metadata
        .state()
        .topic(name)
        .map(|t| t.configs.clone())
        .unwrap_or_default();
    merged.extend(set.clone());
    for k in &delete {
        merged.remove(k);
    }
    topic_config::validate_combination(&broker.node.config, &merged)
        .map_err(|m| ApiError::new(ErrorCode::InvalidConfig, m))?;
    if validate_only {
        return Ok(());
    }
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
