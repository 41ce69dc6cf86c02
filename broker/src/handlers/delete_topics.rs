use std::sync::Arc;

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, TopicName};
use strata_metadata::Command;

use super::str_bytes;
use crate::broker::Broker;
use crate::error::{ApiError, ErrorCode};
use crate::security::Access;
use strata_metadata::acl::AclOperation;

pub async fn handle(
    broker: &Arc<Broker>,
    req: DeleteTopicsRequest,
    version: i16,
    access: &Access,
) -> DeleteTopicsResponse {
    // v0–5 name topics in `topic_names`; v6+ in `topics`, by name or by id.
    let targets: Vec<(Option<TopicName>, uuid::Uuid)> = if version >= 6 {
        req.topics
            .into_iter()
            .map(|t| (t.name, t.topic_id))
            .collect()
    } else {
        req.topic_names
            .into_iter()
            .map(|n| (Some(n), uuid::Uuid::nil()))
            .collect()
    };
    let mut responses = Vec::with_capacity(targets.len());
    for (name, id) in targets {
        let state = broker.node.metadata.state();
        let found = match &name {
            Some(n) => state.topic(n.0.as_str()).cloned(),
            None => state.topic_by_id(&id).cloned(),
        };
        // Refused before its existence is told: by name, whether or not it exists; by id,
        // without its name.
        let asked_name = name
            .as_ref()
            .map(|n| n.0.as_str())
            .or(found.as_ref().map(|t| t.name.as_str()));
        let denied = asked_name.is_some_and(|n| !access.topic(AclOperation::Delete, n));
        let (name, found) = if denied && name.is_none() {
            (None, None)
        } else {
            (name, found)
        };
        let outcome = match &found {
            _ if denied => Err(ApiError::new(
                ErrorCode::TopicAuthorizationFailed,
                "DELETE on the topic is not authorized",
            )),
            None => Err(if name.is_some() {
                ApiError::new(ErrorCode::UnknownTopicOrPartition, "unknown topic")
            } else {
                ApiError::new(ErrorCode::UnknownTopicId, "unknown topic id")
            }),
            Some(t) => match broker
                .node
                .apply(Command::DeleteTopic {
                    name: t.name.clone(),
                })
                .await
            {
                Ok(_) => broker.node.sync_partitions(),
                Err(e) => Err(e),
            },
        };
        let result = DeletableTopicResult::default()
            .with_name(
                name.or_else(|| found.as_ref().map(|t| TopicName(str_bytes(t.name.clone())))),
            )
            .with_topic_id(found.as_ref().map(|t| t.topic_id).unwrap_or(id));
        responses.push(match outcome {
            Ok(()) => {
                if let Some(t) = &found {
                    access.audit("topic_deleted", serde_json::json!({ "topic": &t.name }));
                }
                tracing::info!(topic = ?found.map(|t| t.name), "deleted topic");
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
