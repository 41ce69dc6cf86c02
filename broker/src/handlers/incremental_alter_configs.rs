//! IncrementalAlterConfigs: SET, DELETE, and for LIST keys APPEND and SUBTRACT, applied in
//! order to a topic's overrides or to the dynamic broker configs stored for a broker or the
//! whole cluster ([`crate::dynamic_config`]); the result is checked as a whole and stored in
//! one quorum command ([`Target::replace`], which the legacy AlterConfigs of
//! [`super::alter_configs`] shares). BROKER_LOGGER resources change log levels
//! ([`crate::loggers`]), in this process only, as in Kafka.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};
use strata_metadata::Command;

use super::describe_configs::{
    RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_GROUP, RESOURCE_TOPIC,
};
use super::reply::str_bytes;
use crate::broker::Broker;
use crate::config::catalogue::{self, Kind};
use crate::config::BrokerConfig;
use crate::dynamic_config;
use crate::error::{ApiError, ErrorCode};
use crate::group::config as group_config;
use crate::security::Access;
use crate::topic_config;
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
    let repeated = repeated_resources(
        req.resources
            .iter()
            .map(|r| (r.resource_type, r.resource_name.as_str())),
    );
    for r in req.resources {
        let name = r.resource_name.as_str().to_string();
        let configs = (r.configs.iter()).map(|c| {
            (
                c.name.as_str(),
                c.value.is_none() && c.config_operation != DELETE,
            )
        });
        let checked = admit(
            broker,
            access,
            (r.resource_type, &name),
            configs,
            &repeated,
            &[
                RESOURCE_TOPIC,
                RESOURCE_BROKER,
                RESOURCE_BROKER_LOGGER,
                RESOURCE_GROUP,
            ],
        );
        let outcome = match checked {
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

/// The resources named more than once in a request: each is refused, as Kafka refuses them.
pub(super) fn repeated_resources<'a>(
    resources: impl Iterator<Item = (i8, &'a str)>,
) -> HashSet<(i8, String)> {
    let mut seen = HashSet::new();
    (resources.filter(|r| !seen.insert(*r)))
        .map(|(t, n)| (t, n.to_string()))
        .collect()
}

/// Whether a resource of an alter request may go on to its change: Kafka's checks before
/// authorization (its `ConfigAdminManager.preprocess`), in its order — the resource named
/// twice in the request (`repeated`), a config named twice, a value missing where one is
/// needed (`configs`: name, missing), a resource type the API does not alter (`types`),
/// another broker's id — then ALTER_CONFIGS.
pub(super) fn admit<'a>(
    broker: &Broker,
    access: &Access,
    (resource_type, name): (i8, &str),
    configs: impl Iterator<Item = (&'a str, bool)> + Clone,
    repeated: &HashSet<(i8, String)>,
    types: &[i8],
) -> Result<(), ApiError> {
    let request = |message: String| Err(ApiError::new(ErrorCode::InvalidRequest, message));
    if repeated.contains(&(resource_type, name.to_string())) {
        return request("each resource must appear at most once".into());
    }
    let mut seen = HashSet::new();
    if let Some((key, _)) = configs.clone().find(|(key, _)| !seen.insert(*key)) {
        return request(format!("config '{key}' is named twice"));
    }
    let missing: Vec<&str> = configs
        .filter(|(_, missing)| *missing)
        .map(|(k, _)| k)
        .collect();
    if !missing.is_empty() {
        return request(format!("no value for {}", missing.join(", ")));
    }
    if !types.contains(&resource_type) {
        return request(format!(
            "configs of resource type {resource_type} cannot be altered"
        ));
    }
    if matches!(resource_type, RESOURCE_BROKER | RESOURCE_BROKER_LOGGER) && !name.is_empty() {
        this_broker(broker, name)?;
    }
    authorize(access, resource_type, name)
}

/// ALTER_CONFIGS on the topic or the group, or on the cluster for any other resource.
fn authorize(access: &Access, resource_type: i8, name: &str) -> Result<(), ApiError> {
    let denied = match resource_type {
        RESOURCE_TOPIC => (!access.topic(AclOperation::AlterConfigs, name))
            .then_some(ErrorCode::TopicAuthorizationFailed),
        RESOURCE_GROUP => (!access.group(AclOperation::AlterConfigs, name))
            .then_some(ErrorCode::GroupAuthorizationFailed),
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
    if resource_type == RESOURCE_BROKER_LOGGER {
        return alter_loggers(broker, name, configs, validate_only);
    }
    let (target, current) = Target::resolve(broker, resource_type, name)?;
    let settings = broker.node.settings();
    let mut merged = current.clone();
    for c in configs {
        let key = c.name.as_str();
        let value = c.value.as_ref().map(|v| v.as_str()).unwrap_or("");
        match c.config_operation {
            SET => {
                target.check(key, value, &settings)?;
                merged.insert(key.to_string(), value.to_string());
            }
            DELETE => {
                match target {
                    Target::Topic(_) | Target::Group(_) => drop(target.kind(key)?),
                    Target::Broker(_) => dynamic_config::name(key).map(drop).map_err(refused)?,
                }
                merged.remove(key);
            }
            op @ (APPEND | SUBTRACT) => {
                let verb = if op == APPEND { "APPEND" } else { "SUBTRACT" };
                if target.kind(key)? != Kind::List {
                    return Err(invalid(format!(
                        "{verb} applies to list configs; '{key}' is not one"
                    )));
                }
                let now =
                    (merged.get(key).cloned()).unwrap_or_else(|| target.inherited(broker, key));
                let changed = topic_config::list_change(&now, value, op == SUBTRACT);
                target.check(key, &changed, &settings).map_err(|e| {
                    ApiError::new(
                        e.code,
                        format!("{verb} '{value}' to '{now}': {}", e.message),
                    )
                })?;
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
    target
        .replace(broker, &current, merged, validate_only)
        .await
}

fn invalid(message: String) -> ApiError {
    ApiError::new(ErrorCode::InvalidConfig, message)
}

/// A broker config change Kafka refuses: INVALID_REQUEST, as Kafka answers every broker
/// config that fails validation (KAFKA-13609 keeps it so for compatibility).
fn refused(message: String) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, message)
}

/// BROKER_LOGGER: SET a logger's level, DELETE it (back to its parent's); all or none.
fn alter_loggers(
    broker: &Broker,
    name: &str,
    configs: &[AlterableConfig],
    validate_only: bool,
) -> Result<(), ApiError> {
    this_broker(broker, name)?;
    let mut changes = Vec::with_capacity(configs.len());
    for c in configs {
        let level = match c.config_operation {
            SET => Some(c.value.as_ref().map_or("", |v| v.as_str())),
            DELETE => None,
            op => {
                return Err(ApiError::new(
                    ErrorCode::InvalidRequest,
                    format!("operation {op} does not apply to a logger (SET or DELETE only)"),
                ))
            }
        };
        changes.push((c.name.as_str(), level));
    }
    broker
        .loggers
        .alter(&changes, validate_only)
        .map_err(invalid)
}

/// Refuses a broker resource naming another broker: each broker answers for itself, as the
/// Kafka admin clients expect (they send a broker's resource to that broker).
pub(super) fn this_broker(broker: &Broker, name: &str) -> Result<(), ApiError> {
    let own = broker.node.config.node_id.to_string();
    match name == own {
        true => Ok(()),
        false => Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("this is broker {own}; send broker '{name}''s configs to that broker"),
        )),
    }
}

/// What an alter changes: a topic's overrides, the dynamic broker configs stored for a
/// resource (`""`: cluster-wide; else this broker's id), or a group's configs (which may be set
/// before the group exists, as in Kafka).
pub(super) enum Target {
    Topic(String),
    Broker(String),
    Group(String),
}

impl Target {
    /// The target a resource names, with its configs now, or why it cannot be altered.
    pub(super) fn resolve(
        broker: &Broker,
        resource_type: i8,
        name: &str,
    ) -> Result<(Target, BTreeMap<String, String>), ApiError> {
        let state = broker.node.metadata.state();
        match resource_type {
            RESOURCE_TOPIC => match state.topic(name) {
                Some(t) => Ok((Target::Topic(name.to_string()), t.configs.clone())),
                None => Err(ApiError::new(
                    ErrorCode::UnknownTopicOrPartition,
                    format!("unknown topic '{name}'"),
                )),
            },
            // Another broker's id was refused by `admit`.
            RESOURCE_BROKER => {
                let current = state.broker_config(name).cloned().unwrap_or_default();
                Ok((Target::Broker(name.to_string()), current))
            }
            RESOURCE_GROUP => {
                crate::group::validate_group_id(name)?;
                let current = state.group_config(name).cloned().unwrap_or_default();
                Ok((Target::Group(name.to_string()), current))
            }
            other => Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!("configs of resource type {other} cannot be altered"),
            )),
        }
    }

    /// Checks that `key` may be set to `value` under the broker's settings in force; the whole
    /// set is checked again together.
    pub(super) fn check(
        &self,
        key: &str,
        value: &str,
        settings: &BrokerConfig,
    ) -> Result<(), ApiError> {
        match self {
            Target::Topic(_) => topic_config::validate(key, value).map_err(invalid),
            Target::Broker(_) => dynamic_config::name(key).map(drop).map_err(refused),
            Target::Group(_) => {
                let c = group_config::by_name(key)
                    .ok_or_else(|| invalid(format!("unknown group config '{key}'")))?;
                (c.check)(value, settings).map_err(|why| invalid(format!("{key} = {value}: {why}")))
            }
        }
    }

    /// The type of a key the target has.
    fn kind(&self, key: &str) -> Result<Kind, ApiError> {
        let unknown = || invalid(format!("unknown config '{key}'"));
        match self {
            Target::Topic(_) => topic_config::key(key).map(|k| k.kind).ok_or_else(unknown),
            Target::Broker(_) => dynamic_config::name(key)
                .map_err(refused)?
                .kind()
                .ok_or_else(unknown),
            Target::Group(_) => group_config::by_name(key)
                .map(|c| c.kind)
                .ok_or_else(unknown),
        }
    }

    /// The value of `key` in force when the target does not set it itself.
    fn inherited(&self, broker: &Broker, key: &str) -> String {
        let settings = broker.node.settings();
        match self {
            Target::Topic(_) => topic_config::default_value(&settings, key),
            Target::Broker(_) => (catalogue::by_name(key))
                .and_then(|s| catalogue::values(&settings).remove(s.key).flatten())
                .unwrap_or_default(),
            Target::Group(_) => (group_config::by_name(key))
                .map(|c| (c.default)(&broker.node.config))
                .unwrap_or_default(),
        }
    }

    /// Makes `merged` the target's configs (they were `current`): checked together, then
    /// stored as the difference in one quorum command.
    pub(super) async fn replace(
        &self,
        broker: &Broker,
        current: &BTreeMap<String, String>,
        merged: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        match self {
            Target::Topic(_) => {
                topic_config::validate_combination(&broker.node.settings(), &merged)
                    .and_then(|()| topic_config::validate_change(current, &merged))
                    .map_err(invalid)?
            }
            Target::Broker(resource) => {
                let state = broker.node.metadata.state();
                let own = broker.node.config.node_id.to_string();
                let stored = |r: &str| state.broker_config(r).cloned().unwrap_or_default();
                let (cluster, mine) = match resource.is_empty() {
                    true => (merged.clone(), stored(&own)),
                    false => (stored(""), merged.clone()),
                };
                dynamic_config::check(&broker.node.config, &cluster, &mine).map_err(refused)?
            }
            // Each value was checked as it was set; group configs constrain no other.
            Target::Group(_) => {}
        }
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
        let command = match self {
            Target::Topic(name) => Command::AlterTopicConfig {
                name: name.clone(),
                set,
                delete,
            },
            Target::Broker(resource) => Command::AlterBrokerConfig {
                resource: resource.clone(),
                set,
                delete,
            },
            Target::Group(group) => Command::AlterGroupConfig {
                group: group.clone(),
                set,
                delete,
            },
        };
        broker.node.apply(command).await?;
        broker.node.sync_partitions()
    }
}
