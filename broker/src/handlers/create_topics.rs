use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;
use crate::topic_config;

pub async fn handle(
    broker: &Arc<Broker>,
    req: CreateTopicsRequest,
    version: i16,
    access: &Access,
) -> CreateTopicsResponse {
    let mut results = Vec::with_capacity(req.topics.len());
    let mut seen = std::collections::HashSet::new();
    for t in req.topics {
        let name = t.name.0.as_str().to_string();
        let result = CreatableTopicResult::default().with_name(t.name.clone());
        if !seen.insert(name.clone()) {
            results.push(
                result
                    .with_error_code(ErrorCode::InvalidRequest.code())
                    .with_error_message(Some(str_bytes(format!(
                        "topic '{name}' appears twice in the request"
                    )))),
            );
            continue;
        }
        let mut configs = BTreeMap::new();
        let mut bad: Option<ApiError> = None;
        for c in &t.configs {
            match &c.value {
                Some(v) => {
                    configs.insert(c.name.as_str().to_string(), v.as_str().to_string());
                }
                None => {
                    bad = Some(ApiError::new(
                        ErrorCode::InvalidConfig,
                        format!("null value for {}", c.name.as_str()),
                    ))
                }
            }
        }
        let assignments = (!t.assignments.is_empty()).then(|| {
            let mut a: Vec<_> = t.assignments.iter().collect();
            a.sort_by_key(|x| x.partition_index);
            a.iter()
                .map(|x| x.broker_ids.iter().map(|b| b.0 as u64).collect())
                .collect()
        });
        let outcome = match bad {
            _ if !access.creates_topic(&name) => Err(ApiError::new(
                ErrorCode::TopicAuthorizationFailed,
                "CREATE on the cluster or the topic is not authorized",
            )),
            // Existence comes before the request's own faults, as in Kafka.
            Some(_) if broker.node.metadata.state().topic(&name).is_some() => Err(ApiError::new(
                ErrorCode::TopicAlreadyExists,
                format!("topic '{name}' already exists"),
            )),
            Some(e) => Err(e),
            None => {
                broker
                    .node
                    .create_topic(
                        &name,
                        t.num_partitions,
                        t.replication_factor,
                        assignments,
                        configs,
                        req.validate_only,
                    )
                    .await
            }
        };
        results.push(match outcome {
            Ok(info) => {
                if !req.validate_only {
                    access.audit(
                        "topic_created",
                        serde_json::json!({
                            "topic": &name,
                            "partitions": info.partitions.len(),
                            "configs": &info.configs,
                        }),
                    );
                }
                let mut r = result
                    .with_topic_id(info.topic_id)
                    .with_num_partitions(if req.validate_only {
                        t.num_partitions
                    } else {
                        info.partitions.len() as i32
                    })
                    .with_replication_factor(
                        info.partitions
                            .first()
                            .map(|p| p.replication_factor() as i16)
                            .unwrap_or(t.replication_factor),
                    );
                if version >= 5 {
                    let configs = topic_config::effective(&broker.node.settings(), &info.configs)
                        .into_iter()
                        .map(|(k, (v, is_default))| {
                            CreatableTopicConfigs::default()
                                .with_name(str_bytes(k))
                                .with_value(Some(str_bytes(v)))
                                .with_config_source(if is_default { 5 } else { 1 })
                        })
                        .collect();
                    r = r.with_configs(Some(configs));
                }
                r
            }
            Err(e) => {
                tracing::info!(topic = %name, error = %e, "create topic refused");
                result
                    .with_error_code(e.code.code())
                    .with_error_message(Some(str_bytes(e.message)))
            }
        });
    }
    CreateTopicsResponse::default().with_topics(results)
}
