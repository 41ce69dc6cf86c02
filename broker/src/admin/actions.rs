//! Changes made from the console, and by scripts, on the admin port: create and delete a
//! topic, alter a topic's configs, cancel a partition's move, reset a group's offsets
//! (`offsets.rs`), abort a hanging transaction (`transactions.rs`). The first four are
//! submitted as the Kafka request a Kafka admin client would send (CreateTopics,
//! DeleteTopics, IncrementalAlterConfigs, AlterPartitionReassignments) and handled by the same
//! code (`handlers::administer`), so they are validated, authorized and written to the audit
//! log exactly as on the Kafka port; the last two need other brokers (a group's coordinator, a
//! partition's leader) and are authorized and audited here, then sent as a Kafka admin client
//! would send them (OffsetCommit, WriteTxnMarkers). All run as their caller's: the principal
//! of the client certificate the admin port verified (mapped by `ssl_principal_mapping_rules`),
//! else `User:ANONYMOUS`.
//!
//! Invariants:
//! - nothing changes unless `console_actions_enable` is set (read-only is the default); a
//!   refused action reads no body;
//! - an action must carry the `X-Strata-Action` header, which a page of another origin cannot
//!   send without a CORS preflight this port never grants, and an `Origin`, when present, must
//!   be this port's own: another site cannot make a browser change the cluster;
//! - a body is read only up to [`MAX_BODY`], checked against what arrives, not what
//!   `Content-Length` announces.

use std::collections::BTreeMap;
use std::sync::Arc;

use hyper::StatusCode;
use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, CreateTopicsRequest, DeleteTopicsRequest,
    IncrementalAlterConfigsRequest, RequestKind, ResponseKind, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::security::Principal;

/// The largest action body read.
pub const MAX_BODY: usize = 64 << 10;
/// The header every action carries (see the invariants).
pub const ACTION_HEADER: &str = "x-strata-action";
/// How long a submitted request may wait for the quorum.
const TIMEOUT_MS: i32 = 30_000;
/// The Kafka versions submitted: topic names (not ids) and error messages in the answers.
const CREATE_TOPICS_VERSION: i16 = 7;
const DELETE_TOPICS_VERSION: i16 = 6;
const ALTER_CONFIGS_VERSION: i16 = 1;
const REASSIGNMENTS_VERSION: i16 = 0;
/// IncrementalAlterConfigs' resource type of a topic, and its operations.
const TOPIC_RESOURCE: i8 = 2;
const SET: i8 = 0;
const DELETE: i8 = 1;

/// A change asked for, by its method and path; the body comes later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// `POST /v1/topics` with `{"name", "partitions", "replication_factor", "configs"}`.
    CreateTopic,
    /// `DELETE /v1/topics/<name>`.
    DeleteTopic(String),
    /// `POST /v1/topics/<name>/configs` with `{"set": {name: value}, "delete": [name]}`.
    AlterConfigs(String),
    /// `DELETE /v1/topics/<name>/partitions/<p>/move`: cancel the partition's move.
    CancelMove(String, i32),
    /// `POST /v1/groups/<name>/offsets` with a reset (`offsets.rs`).
    ResetOffsets(String),
    /// `POST /v1/topics/<name>/partitions/<p>/abort-transaction` with the producer
    /// (`transactions.rs`).
    AbortTransaction(String, i32),
}

impl Action {
    /// The action `method path` names, `None` for anything else (a view, or unknown).
    pub fn parse(method: &hyper::Method, path: &str) -> Option<Result<Action, String>> {
        use hyper::Method;
        if *method == Method::POST && path == "/v1/topics" {
            return Some(Ok(Action::CreateTopic));
        }
        let name = |raw: &str| match percent_encoding::percent_decode_str(raw).decode_utf8() {
            Ok(n) if !n.is_empty() => Ok(n.into_owned()),
            _ => Err(format!("'{raw}' is no name")),
        };
        if let Some(group) = path.strip_prefix("/v1/groups/") {
            return match (method, group.strip_suffix("/offsets")) {
                (&Method::POST, Some(group)) => Some(name(group).map(Action::ResetOffsets)),
                _ => None,
            };
        }
        let rest = path.strip_prefix("/v1/topics/")?;
        let parts: Vec<&str> = rest.split('/').collect();
        let partition = |p: &str| match p.parse::<i32>() {
            Ok(p) if p >= 0 => Ok(p),
            _ => Err(format!("'{p}' is no partition")),
        };
        let action = match (method, parts.as_slice()) {
            (&Method::DELETE, [topic]) => name(topic).map(Action::DeleteTopic),
            (&Method::POST, [topic, "configs"]) => name(topic).map(Action::AlterConfigs),
            (&Method::DELETE, [topic, "partitions", p, "move"]) => {
                partition(p).and_then(|p| name(topic).map(|t| Action::CancelMove(t, p)))
            }
            (&Method::POST, [topic, "partitions", p, "abort-transaction"]) => {
                partition(p).and_then(|p| name(topic).map(|t| Action::AbortTransaction(t, p)))
            }
            _ => return None,
        };
        Some(action)
    }

    fn has_body(&self) -> bool {
        !matches!(self, Action::DeleteTopic(_) | Action::CancelMove(..))
    }
}

/// Whether an action may be run at all, before its body is read: the setting, the header,
/// the origin. `Err` is the answer.
pub fn admit(
    broker: &Broker,
    action: &Action,
    headers: &hyper::HeaderMap,
) -> Result<(), (StatusCode, String)> {
    if !broker.node.config.console_actions_enable {
        return Err((
            StatusCode::FORBIDDEN,
            "the console is read-only: set console_actions_enable = true (console.actions.enable) to allow changes, which are then authorized and audited as the Kafka APIs are".into(),
        ));
    }
    if !headers.contains_key(ACTION_HEADER) {
        return Err((
            StatusCode::FORBIDDEN,
            format!(
                "an action needs the {ACTION_HEADER} header (sent by the console; scripts add it)"
            ),
        ));
    }
    let origin = headers
        .get(hyper::header::ORIGIN)
        .and_then(|o| o.to_str().ok());
    let host = headers
        .get(hyper::header::HOST)
        .and_then(|h| h.to_str().ok());
    if let Some(origin) = origin {
        let same = host.is_some_and(|h| {
            origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                == Some(h)
        });
        if !same {
            return Err((
                StatusCode::FORBIDDEN,
                format!("an action from another origin ({origin}) is refused"),
            ));
        }
    }
    if action.has_body() {
        let json = (headers.get(hyper::header::CONTENT_TYPE))
            .and_then(|t| t.to_str().ok())
            .is_some_and(|t| t.starts_with("application/json"));
        if !json {
            return Err((
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "the body must be JSON (Content-Type: application/json)".into(),
            ));
        }
    }
    Ok(())
}

/// Who asks: the principal and the client's address, as the audit log names them.
pub struct Caller {
    pub principal: Principal,
    pub host: Arc<str>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewTopic {
    name: String,
    #[serde(default = "default_count")]
    partitions: i32,
    #[serde(default = "default_count")]
    replication_factor: i16,
    #[serde(default)]
    configs: BTreeMap<String, String>,
}

/// -1: the broker's default (`num_partitions`, `default_replication_factor`).
fn default_count<T: From<i8>>() -> T {
    T::from(-1)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigChanges {
    #[serde(default)]
    set: BTreeMap<String, String>,
    #[serde(default)]
    delete: Vec<String>,
}

/// Runs `action` with `body` as `caller`: the status and a JSON answer (`{"error", "message"}`
/// when refused, in Kafka's words).
pub async fn run(
    broker: &Arc<Broker>,
    action: Action,
    body: &[u8],
    caller: &Caller,
) -> (StatusCode, Value) {
    let request = match request(&action, body) {
        Ok(r) => r,
        Err(why) => {
            return (
                StatusCode::BAD_REQUEST,
                json!({ "error": "INVALID_REQUEST", "message": why }),
            )
        }
    };
    let (kind, version) = request;
    let access = broker
        .security
        .authorizer()
        .access(&caller.principal, &caller.host);
    tracing::info!(principal = %caller.principal, client = %caller.host, ?action, "admin port action");
    let Some(response) = crate::handlers::administer(broker, kind, version, &access).await else {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({ "error": "UNKNOWN_SERVER_ERROR", "message": "not an administrative request" }),
        );
    };
    let (code, message) = outcome(&response);
    if code == 0 {
        return (StatusCode::OK, json!({ "done": describe(&action) }));
    }
    let error = ErrorCode::from_code(code);
    let status = match error {
        ErrorCode::TopicAuthorizationFailed | ErrorCode::ClusterAuthorizationFailed => {
            StatusCode::FORBIDDEN
        }
        ErrorCode::UnknownTopicOrPartition | ErrorCode::NoReassignmentInProgress => {
            StatusCode::NOT_FOUND
        }
        ErrorCode::TopicAlreadyExists | ErrorCode::ReassignmentInProgress => StatusCode::CONFLICT,
        ErrorCode::InvalidConfig
        | ErrorCode::InvalidRequest
        | ErrorCode::InvalidPartitions
        | ErrorCode::InvalidReplicationFactor
        | ErrorCode::InvalidTopicException
        | ErrorCode::PolicyViolation => StatusCode::BAD_REQUEST,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    let message = message.unwrap_or_else(|| format!("{error:?}"));
    (
        status,
        json!({ "error": format!("{error:?}"), "message": message }),
    )
}

fn describe(action: &Action) -> String {
    match action {
        Action::CreateTopic => "topic created".into(),
        Action::DeleteTopic(t) => format!("topic {t} deleted"),
        Action::AlterConfigs(t) => format!("configs of {t} altered"),
        Action::CancelMove(t, p) => format!("the move of {t}-{p} cancelled"),
        Action::ResetOffsets(g) => format!("offsets of {g} reset"),
        Action::AbortTransaction(t, p) => format!("a transaction in {t}-{p} aborted"),
    }
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// The Kafka request `action` submits, and its version.
fn request(action: &Action, body: &[u8]) -> Result<(RequestKind, i16), String> {
    let json = |what: &str| format!("the body is not {what}");
    Ok(match action {
        Action::CreateTopic => {
            let t: NewTopic = serde_json::from_slice(body).map_err(|e| {
                format!(
                    "{}: {e}",
                    json("a topic (name, partitions, replication_factor, configs)")
                )
            })?;
            let configs = (t.configs.iter())
                .map(|(k, v)| {
                    CreatableTopicConfig::default()
                        .with_name(str_bytes(k))
                        .with_value(Some(str_bytes(v)))
                })
                .collect();
            let topic = CreatableTopic::default()
                .with_name(TopicName(str_bytes(&t.name)))
                .with_num_partitions(t.partitions)
                .with_replication_factor(t.replication_factor)
                .with_configs(configs);
            let req = CreateTopicsRequest::default()
                .with_topics(vec![topic])
                .with_timeout_ms(TIMEOUT_MS);
            (RequestKind::CreateTopics(req), CREATE_TOPICS_VERSION)
        }
        Action::DeleteTopic(name) => {
            let req = DeleteTopicsRequest::default()
                .with_topics(vec![
                    DeleteTopicState::default().with_name(Some(TopicName(str_bytes(name))))
                ])
                .with_timeout_ms(TIMEOUT_MS);
            (RequestKind::DeleteTopics(req), DELETE_TOPICS_VERSION)
        }
        Action::AlterConfigs(name) => {
            let c: ConfigChanges = serde_json::from_slice(body).map_err(|e| {
                format!(
                    "{}: {e}",
                    json("config changes ({\"set\": {...}, \"delete\": [...]})")
                )
            })?;
            if c.set.is_empty() && c.delete.is_empty() {
                return Err("nothing to change: set or delete a config".into());
            }
            let set = (c.set.iter()).map(|(k, v)| {
                AlterableConfig::default()
                    .with_name(str_bytes(k))
                    .with_config_operation(SET)
                    .with_value(Some(str_bytes(v)))
            });
            let delete = (c.delete.iter()).map(|k| {
                AlterableConfig::default()
                    .with_name(str_bytes(k))
                    .with_config_operation(DELETE)
            });
            let resource = AlterConfigsResource::default()
                .with_resource_type(TOPIC_RESOURCE)
                .with_resource_name(str_bytes(name))
                .with_configs(set.chain(delete).collect());
            let req = IncrementalAlterConfigsRequest::default().with_resources(vec![resource]);
            (
                RequestKind::IncrementalAlterConfigs(req),
                ALTER_CONFIGS_VERSION,
            )
        }
        Action::CancelMove(name, partition) => {
            let topic = ReassignableTopic::default()
                .with_name(TopicName(str_bytes(name)))
                .with_partitions(vec![ReassignablePartition::default()
                    .with_partition_index(*partition)
                    .with_replicas(None)]);
            let req = AlterPartitionReassignmentsRequest::default()
                .with_timeout_ms(TIMEOUT_MS)
                .with_topics(vec![topic]);
            (
                RequestKind::AlterPartitionReassignments(req),
                REASSIGNMENTS_VERSION,
            )
        }
        Action::ResetOffsets(_) | Action::AbortTransaction(..) => {
            return Err(
                "not a request of one Kafka API: run by offsets.rs or transactions.rs".into(),
            )
        }
    })
}

/// The one result's error code and message from the answer to a one-item request.
fn outcome(response: &ResponseKind) -> (i16, Option<String>) {
    let message = |m: &Option<StrBytes>| m.as_ref().map(|m| m.to_string());
    match response {
        ResponseKind::CreateTopics(r) => (r.topics.first())
            .map(|t| (t.error_code, message(&t.error_message)))
            .unwrap_or((ErrorCode::UnknownServerError.code(), None)),
        ResponseKind::DeleteTopics(r) => (r.responses.first())
            .map(|t| (t.error_code, message(&t.error_message)))
            .unwrap_or((ErrorCode::UnknownServerError.code(), None)),
        ResponseKind::IncrementalAlterConfigs(r) => (r.responses.first())
            .map(|t| (t.error_code, message(&t.error_message)))
            .unwrap_or((ErrorCode::UnknownServerError.code(), None)),
        ResponseKind::AlterPartitionReassignments(r) if r.error_code != 0 => {
            (r.error_code, message(&r.error_message))
        }
        ResponseKind::AlterPartitionReassignments(r) => (r.responses.iter())
            .flat_map(|t| &t.partitions)
            .map(|p| (p.error_code, message(&p.error_message)))
            .next()
            .unwrap_or((ErrorCode::UnknownServerError.code(), None)),
        _ => (ErrorCode::UnknownServerError.code(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::Method;

    #[test]
    fn actions_are_named_by_method_and_path() {
        let parse = |m: Method, p: &str| Action::parse(&m, p);
        assert_eq!(
            parse(Method::POST, "/v1/topics"),
            Some(Ok(Action::CreateTopic))
        );
        assert_eq!(
            parse(Method::DELETE, "/v1/topics/a%2Fb"),
            Some(Ok(Action::DeleteTopic("a/b".into())))
        );
        assert_eq!(
            parse(Method::POST, "/v1/topics/t/configs"),
            Some(Ok(Action::AlterConfigs("t".into())))
        );
        assert_eq!(
            parse(Method::DELETE, "/v1/topics/t/partitions/3/move"),
            Some(Ok(Action::CancelMove("t".into(), 3)))
        );
        assert!(matches!(
            parse(Method::DELETE, "/v1/topics/t/partitions/-1/move"),
            Some(Err(_))
        ));
        assert!(matches!(
            parse(Method::DELETE, "/v1/topics/%ff"),
            Some(Err(_))
        ));
        assert_eq!(
            parse(Method::POST, "/v1/groups/g%2F1/offsets"),
            Some(Ok(Action::ResetOffsets("g/1".into())))
        );
        assert_eq!(
            parse(Method::POST, "/v1/topics/t/partitions/2/abort-transaction"),
            Some(Ok(Action::AbortTransaction("t".into(), 2)))
        );
        assert!(matches!(
            parse(Method::POST, "/v1/topics/t/partitions/x/abort-transaction"),
            Some(Err(_))
        ));
        assert_eq!(parse(Method::GET, "/v1/groups/g/offsets"), None);
        assert_eq!(parse(Method::POST, "/v1/groups/g"), None);
        // Views and anything else are not actions.
        assert_eq!(parse(Method::GET, "/v1/topics/t"), None);
        assert_eq!(parse(Method::PUT, "/v1/topics/t"), None);
        assert_eq!(parse(Method::POST, "/v1/topics/t/messages"), None);
    }

    #[test]
    fn bodies_are_checked_before_anything_is_submitted() {
        let create = |body: &str| request(&Action::CreateTopic, body.as_bytes());
        let (kind, _) =
            create(r#"{"name":"t","partitions":3,"configs":{"retention.ms":"1000"}}"#).unwrap();
        let RequestKind::CreateTopics(r) = kind else {
            panic!()
        };
        assert_eq!(
            (r.topics[0].num_partitions, r.topics[0].replication_factor),
            (3, -1)
        );
        assert_eq!(r.topics[0].configs.len(), 1);
        for bad in [
            "",
            "[]",
            r#"{"partitions":3}"#,
            r#"{"name":"t","extra":1}"#,
            r#"{"name":"t","partitions":"x"}"#,
        ] {
            assert!(create(bad).is_err(), "{bad}");
        }
        let alter = |body: &str| request(&Action::AlterConfigs("t".into()), body.as_bytes());
        assert!(alter("{}").unwrap_err().contains("nothing to change"));
        let (kind, _) =
            alter(r#"{"set":{"retention.ms":"5"},"delete":["cleanup.policy"]}"#).unwrap();
        let RequestKind::IncrementalAlterConfigs(r) = kind else {
            panic!()
        };
        let ops: Vec<i8> = r.resources[0]
            .configs
            .iter()
            .map(|c| c.config_operation)
            .collect();
        assert_eq!(ops, vec![SET, DELETE]);
    }
}
