//! The legacy AlterConfigs (still in Kafka 4.0; librdkafka's `rd_kafka_AlterConfigs` and older
//! tools use it): the configs named become the resource's whole set of overrides, every other
//! key goes back to its default. Checked and stored as IncrementalAlterConfigs stores them.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse};

use super::describe_configs::{RESOURCE_BROKER, RESOURCE_TOPIC};
use super::incremental_alter_configs::{admit, audit, repeated_resources, Target};
use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;

pub async fn handle(
    broker: &Arc<Broker>,
    req: AlterConfigsRequest,
    access: &Access,
) -> AlterConfigsResponse {
    let mut responses = Vec::with_capacity(req.resources.len());
    let repeated = repeated_resources(
        req.resources
            .iter()
            .map(|r| (r.resource_type, r.resource_name.as_str())),
    );
    for r in req.resources {
        let name = r.resource_name.as_str().to_string();
        let wanted: Vec<(&str, &str)> = (r.configs.iter())
            .map(|c| (c.name.as_str(), c.value.as_deref().unwrap_or("")))
            .collect();
        let configs = (r.configs.iter()).map(|c| (c.name.as_str(), c.value.is_none()));
        let checked = admit(
            broker,
            access,
            (r.resource_type, &name),
            configs,
            &repeated,
            // The legacy API has no BROKER_LOGGER.
            &[RESOURCE_TOPIC, RESOURCE_BROKER],
        );
        let outcome = match checked {
            Err(e) => Err(e),
            Ok(()) => replace(broker, r.resource_type, &name, &wanted, req.validate_only).await,
        };
        if outcome.is_ok() && !req.validate_only {
            let changes = (wanted.iter())
                .map(|(k, v)| serde_json::json!({ "name": k, "value": v }))
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
    AlterConfigsResponse::default().with_responses(responses)
}

async fn replace(
    broker: &Broker,
    resource_type: i8,
    name: &str,
    wanted: &[(&str, &str)],
    validate_only: bool,
) -> Result<(), ApiError> {
    let (target, current) = Target::resolve(broker, resource_type, name)?;
    let settings = broker.node.settings();
    let mut merged = BTreeMap::new();
    for (key, value) in wanted {
        target.check(key, value, &settings)?;
        if merged.insert(key.to_string(), value.to_string()).is_some() {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!("'{key}' is named twice"),
            ));
        }
    }
    target
        .replace(broker, &current, merged, validate_only)
        .await
}
