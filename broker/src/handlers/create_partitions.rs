use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse, TopicName};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;
use strata_metadata::acl::AclOperation;

pub async fn handle(
    broker: &Arc<Broker>,
    req: CreatePartitionsRequest,
    access: &Access,
) -> CreatePartitionsResponse {
    let mut results = Vec::with_capacity(req.topics.len());
    let mut named: HashMap<TopicName, usize> = HashMap::new();
    for t in &req.topics {
        *named.entry(t.name.clone()).or_default() += 1;
    }
    for t in req.topics {
        // Kafka's order: a topic named twice, then authorization, then the change itself.
        if named[&t.name] > 1 {
            results.push(
                CreatePartitionsTopicResult::default()
                    .with_name(t.name)
                    .with_error_code(ErrorCode::InvalidRequest.code())
                    .with_error_message(Some(str_bytes("duplicate topic name"))),
            );
            continue;
        }
        let assignments = t.assignments.as_ref().map(|a| {
            a.iter()
                .map(|x| x.broker_ids.iter().map(|b| b.0 as u64).collect())
                .collect()
        });
        let outcome = if access.topic(AclOperation::Alter, t.name.0.as_str()) {
            broker
                .node
                .create_partitions(t.name.0.as_str(), t.count, assignments, req.validate_only)
                .await
        } else {
            Err(ApiError::new(
                ErrorCode::TopicAuthorizationFailed,
                "ALTER on the topic is not authorized",
            ))
        };
        let r = CreatePartitionsTopicResult::default().with_name(t.name);
        if outcome.is_ok() && !req.validate_only {
            access.audit(
                "partitions_created",
                serde_json::json!({ "topic": r.name.as_str(), "count": t.count }),
            );
        }
        results.push(match outcome {
            Ok(()) => r,
            Err(e) => r
                .with_error_code(e.code.code())
                .with_error_message(Some(str_bytes(e.message))),
        });
    }
    CreatePartitionsResponse::default().with_results(results)
}
