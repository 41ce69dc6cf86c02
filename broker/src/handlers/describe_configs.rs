use std::sync::Arc;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};

use super::str_bytes;
use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::security::Access;
use crate::topic_config;
use strata_metadata::acl::AclOperation;

pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;

const SOURCE_DYNAMIC_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

/// (name, value, type) of the broker settings shown for a BROKER resource; all read-only.
fn broker_configs(b: &Broker) -> Vec<(&'static str, String, topic_config::Kind)> {
    use topic_config::Kind::*;
    let c = &b.node.config;
    vec![
        ("broker.id", c.node_id.to_string(), Int),
        (
            "auto.create.topics.enable",
            c.auto_create_topics_enable.to_string(),
            Bool,
        ),
        ("num.partitions", c.num_partitions.to_string(), Int),
        (
            "default.replication.factor",
            c.default_replication_factor.to_string(),
            Int,
        ),
        ("log.segment.bytes", c.log_segment_bytes.to_string(), Int),
        ("log.retention.ms", c.log_retention_ms.to_string(), Long),
        (
            "log.retention.bytes",
            c.log_retention_bytes.to_string(),
            Long,
        ),
        (
            "log.flush.interval.messages",
            c.log_flush_messages.to_string(),
            Long,
        ),
        ("log.flush.interval.ms", c.log_flush_ms.to_string(), Long),
        ("message.max.bytes", c.message_max_bytes.to_string(), Int),
        (
            "socket.request.max.bytes",
            c.max_request_bytes.to_string(),
            Int,
        ),
        (
            "log.message.timestamp.type",
            c.log_message_timestamp_type.clone(),
            Str,
        ),
        ("log.cleanup.policy", c.log_cleanup_policy.clone(), Str),
        ("log.cleaner.enable", c.log_cleaner_enable.to_string(), Bool),
        (
            "log.cleaner.backoff.ms",
            c.log_cleaner_backoff_ms.to_string(),
            Long,
        ),
        (
            "log.cleaner.dedupe.buffer.size",
            c.log_cleaner_dedupe_buffer_size.to_string(),
            Long,
        ),
        (
            "log.cleaner.io.max.bytes.per.second",
            c.log_cleaner_io_max_bytes_per_second.to_string(),
            Double,
        ),
        (
            "log.cleaner.delete.retention.ms",
            c.log_cleaner_delete_retention_ms.to_string(),
            Long,
        ),
        (
            "log.cleaner.min.cleanable.ratio",
            c.log_cleaner_min_cleanable_ratio.to_string(),
            Double,
        ),
        (
            "log.cleaner.min.compaction.lag.ms",
            c.log_cleaner_min_compaction_lag_ms.to_string(),
            Long,
        ),
    ]
}

pub fn handle(
    broker: &Arc<Broker>,
    req: DescribeConfigsRequest,
    version: i16,
    access: &Access,
) -> DescribeConfigsResponse {
    let results = req
        .resources
        .into_iter()
        .map(|r| {
            let result = DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            let wanted = |name: &str| {
                r.configuration_keys
                    .as_ref()
                    .is_none_or(|keys| keys.iter().any(|k| k.as_str() == name))
            };
            let entry = |name: &str,
                         value: String,
                         source: i8,
                         read_only: bool,
                         kind: topic_config::Kind,
                         doc: &str| {
                let mut e = DescribeConfigsResourceResult::default()
                    .with_name(str_bytes(name))
                    .with_value(Some(str_bytes(value)))
                    .with_read_only(read_only)
                    .with_config_source(source);
                if version >= 3 {
                    e = e.with_config_type(kind.code());
                    if req.include_documentation {
                        e = e.with_documentation(Some(str_bytes(doc)));
                    }
                }
                e
            };
            let denied = match r.resource_type {
                RESOURCE_TOPIC => (!access.topic(AclOperation::DescribeConfigs, &r.resource_name))
                    .then_some(ErrorCode::TopicAuthorizationFailed),
                RESOURCE_BROKER => (!access.cluster(AclOperation::DescribeConfigs))
                    .then_some(ErrorCode::ClusterAuthorizationFailed),
                _ => None,
            };
            if let Some(code) = denied {
                return result
                    .with_error_code(code.code())
                    .with_error_message(Some(str_bytes("DESCRIBE_CONFIGS is not authorized")));
            }
            match r.resource_type {
                RESOURCE_TOPIC => {
                    match broker.node.metadata.state().topic(r.resource_name.as_str()) {
                        None => result
                            .with_error_code(ErrorCode::UnknownTopicOrPartition.code())
                            .with_error_message(Some(str_bytes(format!(
                                "unknown topic '{}'",
                                r.resource_name.as_str()
                            )))),
                        Some(t) => {
                            let configs = topic_config::effective(&broker.node.config, &t.configs)
                                .into_iter()
                                .filter(|(k, _)| wanted(k))
                                .map(|(k, (v, is_default))| {
                                    let def =
                                        topic_config::key(&k).expect("effective lists known keys");
                                    let source = if is_default {
                                        SOURCE_DEFAULT
                                    } else {
                                        SOURCE_DYNAMIC_TOPIC
                                    };
                                    entry(&k, v, source, false, def.kind, def.doc)
                                })
                                .collect();
                            result.with_configs(configs)
                        }
                    }
                }
                RESOURCE_BROKER => {
                    let name = r.resource_name.as_str();
                    if !name.is_empty() && name != broker.node.config.node_id.to_string() {
                        return result
                            .with_error_code(ErrorCode::InvalidRequest.code())
                            .with_error_message(Some(str_bytes(format!(
                                "this is broker {}",
                                broker.node.config.node_id
                            ))));
                    }
                    let configs = broker_configs(broker)
                        .into_iter()
                        .filter(|(k, _, _)| wanted(k))
                        .map(|(k, v, kind)| entry(k, v, SOURCE_STATIC_BROKER, true, kind, ""))
                        .collect();
                    result.with_configs(configs)
                }
                other => result
                    .with_error_code(ErrorCode::InvalidRequest.code())
                    .with_error_message(Some(str_bytes(format!(
                        "resource type {other} is not supported"
                    )))),
            }
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}
