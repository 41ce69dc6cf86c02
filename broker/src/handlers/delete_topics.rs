//! DeleteTopics, by name (v0+) or by id (v6+), with Kafka's precedence: a topic named twice,
//! by both name and id, or by neither is INVALID_REQUEST; an unknown id is UNKNOWN_TOPIC_ID
//! whoever asks; a name the caller may not describe is TOPIC_AUTHORIZATION_FAILED whether or
//! not it exists, then UNKNOWN_TOPIC_OR_PARTITION, then TOPIC_AUTHORIZATION_FAILED without
//! DELETE; a topic given both by name and by id is INVALID_REQUEST both ways (Kafka answers
//! only the name; the id goes unanswered).

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, TopicName};
use strata_metadata::Command;

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;
use strata_metadata::acl::AclOperation;

/// One topic of the request, as asked.
struct Target {
    name: Option<String>,
    id: uuid::Uuid,
}

pub async fn handle(
    broker: &Arc<Broker>,
    req: DeleteTopicsRequest,
    version: i16,
    access: &Access,
) -> DeleteTopicsResponse {
    // v0–5 name topics in `topic_names`; v6+ in `topics`, by name or by id.
    let targets: Vec<Target> = if version >= 6 {
        (req.topics.into_iter())
            .map(|t| Target {
                name: t.name.map(|n| n.0.to_string()),
                id: t.topic_id,
            })
            .collect()
    } else {
        (req.topic_names.into_iter())
            .map(|n| Target {
                name: Some(n.0.to_string()),
                id: uuid::Uuid::nil(),
            })
            .collect()
    };
    // How often each name and id is asked for: a repeated one is refused every time.
    let mut asked: HashMap<(Option<&str>, uuid::Uuid), usize> = HashMap::new();
    for t in &targets {
        *asked.entry((t.name.as_deref(), t.id)).or_default() += 1;
    }
    let state = broker.node.metadata.state();
    // A topic asked for by name and by id is refused both ways.
    let ids_asked: Vec<uuid::Uuid> = (targets.iter())
        .filter(|t| t.name.is_none() && !t.id.is_nil())
        .map(|t| t.id)
        .collect();
    let names_asked: Vec<&str> = (targets.iter())
        .filter(|t| t.id.is_nil())
        .filter_map(|t| t.name.as_deref())
        .collect();
    let mut responses = Vec::with_capacity(targets.len());
    for t in &targets {
        let refuse = |message: &str| Err(ApiError::new(ErrorCode::InvalidRequest, message));
        let denied = || {
            Err(ApiError::new(
                ErrorCode::TopicAuthorizationFailed,
                "DELETE on the topic is not authorized",
            ))
        };
        // The topic to delete, or why not; and the name the answer may show.
        let (outcome, shown) = match (&t.name, t.id.is_nil()) {
            (None, true) => (refuse("neither topic name nor id was given"), None),
            (Some(_), false) => (refuse("a topic by both name and id"), t.name.clone()),
            _ if asked[&(t.name.as_deref(), t.id)] > 1 => (
                refuse(match t.name {
                    Some(_) => "duplicate topic name",
                    None => "duplicate topic id",
                }),
                t.name.clone(),
            ),
            (None, false) => match state.topic_by_id(&t.id) {
                None => (
                    Err(ApiError::new(ErrorCode::UnknownTopicId, "unknown topic id")),
                    None,
                ),
                Some(found) if !access.topic(AclOperation::Delete, &found.name) => {
                    // The name only to a caller who may describe the topic.
                    let shown = (access.topic(AclOperation::Describe, &found.name))
                        .then(|| found.name.clone());
                    (denied(), shown)
                }
                Some(found) if names_asked.contains(&found.name.as_str()) => (
                    refuse("the topic id is also given by its name"),
                    Some(found.name.clone()),
                ),
                Some(found) => (Ok(found.clone()), Some(found.name.clone())),
            },
            (Some(name), true) => {
                let shown = Some(name.clone());
                match state.topic(name) {
                    _ if !access.topic(AclOperation::Describe, name) => (denied(), shown),
                    None => (
                        Err(ApiError::new(
                            ErrorCode::UnknownTopicOrPartition,
                            "unknown topic",
                        )),
                        shown,
                    ),
                    Some(_) if !access.topic(AclOperation::Delete, name) => (denied(), shown),
                    Some(found) if ids_asked.contains(&found.topic_id) => {
                        (refuse("the topic name maps to an id also given"), shown)
                    }
                    Some(found) => (Ok(found.clone()), shown),
                }
            }
        };
        let id = match &outcome {
            Ok(found) => found.topic_id,
            Err(_) => t.id,
        };
        let outcome = match outcome {
            Ok(found) => match (broker.node)
                .apply(Command::DeleteTopic {
                    name: found.name.clone(),
                })
                .await
            {
                Ok(_) => broker.node.sync_partitions().map(|()| found),
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        };
        let result = DeletableTopicResult::default()
            .with_name(shown.map(|n| TopicName(str_bytes(n))))
            .with_topic_id(id);
        responses.push(match outcome {
            Ok(found) => {
                access.audit("topic_deleted", serde_json::json!({ "topic": &found.name }));
                tracing::info!(topic = %found.name, "deleted topic");
                result
            }
            Err(e) => {
                let r = result.with_error_code(e.code.code());
                if version >= 5 {
                    r.with_error_message(Some(str_bytes(e.message)))
                } else {
                    r
                }
            }
        });
    }
    DeleteTopicsResponse::default().with_responses(responses)
}
