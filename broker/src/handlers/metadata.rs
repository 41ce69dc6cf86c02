use std::sync::Arc;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use strata_metadata::acl::{AclOperation, ResourceType};
use strata_metadata::{ClusterState, TopicInfo};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::security::Access;

/// One partition as Metadata and DescribeTopicPartitions describe it to a client of
/// `listener`: its error (no leader, or a leader without that listener), leader, epoch,
/// replicas, ISR and the offline replicas: on fenced brokers, or in a failed log directory.
pub(super) struct PartitionView {
    pub error: ErrorCode,
    pub leader: BrokerId,
    pub leader_epoch: i32,
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
    pub offline: Vec<BrokerId>,
}

pub(super) fn partition_views<'a>(
    t: &'a TopicInfo,
    state: &'a ClusterState,
    listener: &'a str,
) -> impl Iterator<Item = PartitionView> + 'a {
    let fenced = |r: &&u64| state.brokers.get(*r).is_none_or(|b| b.fenced);
    let reachable =
        move |l: u64| (state.brokers.get(&l)).is_some_and(|b| b.endpoint(listener).is_some());
    let ids = |v: &mut dyn Iterator<Item = &u64>| v.map(|r| BrokerId(*r as i32)).collect();
    t.partitions.iter().map(move |p| PartitionView {
        error: match p.leader {
            Some(l) if reachable(l) => ErrorCode::None,
            Some(_) => ErrorCode::ListenerNotFound,
            None => ErrorCode::LeaderNotAvailable,
        },
        leader: BrokerId(p.leader.map(|l| l as i32).unwrap_or(-1)),
        leader_epoch: p.leader_epoch,
        replicas: ids(&mut p.replicas.iter()),
        isr: ids(&mut p.isr.iter()),
        offline: ids(&mut (p.replicas.iter()).filter(|r| fenced(r) || p.offline.contains(r))),
    })
}

fn topic_response(t: &TopicInfo, state: &ClusterState, listener: &str) -> MetadataResponseTopic {
    let partitions = partition_views(t, state, listener)
        .enumerate()
        .map(|(i, p)| {
            MetadataResponsePartition::default()
                .with_partition_index(i as i32)
                .with_error_code(p.error.code())
                .with_leader_id(p.leader)
                .with_leader_epoch(p.leader_epoch)
                .with_replica_nodes(p.replicas)
                .with_isr_nodes(p.isr)
                .with_offline_replicas(p.offline)
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(str_bytes(t.name.clone()))))
        .with_topic_id(t.topic_id)
        .with_is_internal(t.name.starts_with("__"))
        .with_partitions(partitions)
        .with_topic_authorized_operations(i32::MIN)
}

fn error_topic(name: Option<TopicName>, id: uuid::Uuid, code: ErrorCode) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(name)
        .with_topic_id(id)
        .with_error_code(code.code())
        .with_topic_authorized_operations(i32::MIN)
}

/// Lists the topics the caller may describe (all of them, quietly filtered), or the named
/// ones, each answered TOPIC_AUTHORIZATION_FAILED where it may not (whether or not it exists,
/// so names do not leak), and auto-created only with CREATE on the cluster or the topic.
pub async fn handle(
    broker: &Arc<Broker>,
    req: MetadataRequest,
    version: i16,
    listener: &str,
    access: &Access,
) -> MetadataResponse {
    // v0: an empty list means all topics; v1+: null means all, empty means none.
    let requested = match req.topics {
        Some(t) if !(version == 0 && t.is_empty()) => Some(t),
        _ => None,
    };
    let allow_create = version < 4 || req.allow_auto_topic_creation;
    let topics = match requested {
        None => {
            let state = broker.node.metadata.state();
            state
                .topics
                .values()
                .filter(|t| access.sees(AclOperation::Describe, ResourceType::Topic, &t.name))
                .map(|t| topic_response(t, &state, listener))
                .collect()
        }
        Some(requested) => {
            let mut out = Vec::with_capacity(requested.len());
            for t in requested {
                let Some(name) = t.name.clone() else {
                    // By id (v10+).
                    let state = broker.node.metadata.state();
                    match state.topic_by_id(&t.topic_id) {
                        Some(info) if !access.topic(AclOperation::Describe, &info.name) => out
                            .push(error_topic(
                                None,
                                t.topic_id,
                                ErrorCode::TopicAuthorizationFailed,
                            )),
                        Some(info) => out.push(topic_response(info, &state, listener)),
                        None => out.push(error_topic(None, t.topic_id, ErrorCode::UnknownTopicId)),
                    }
                    continue;
                };
                let unauthorized = || {
                    error_topic(
                        Some(name.clone()),
                        uuid::Uuid::nil(),
                        ErrorCode::TopicAuthorizationFailed,
                    )
                };
                if !access.topic(AclOperation::Describe, &name) {
                    out.push(unauthorized());
                    continue;
                }
                let exists = broker
                    .node
                    .metadata
                    .state()
                    .topics
                    .contains_key(name.as_str());
                if !exists
                    && allow_create
                    && broker.node.config.auto_create_topics_enable
                    && !access.creates_topic(&name)
                {
                    out.push(unauthorized());
                    continue;
                }
                match broker
                    .node
                    .topic_or_create(name.0.as_str(), || allow_create)
                    .await
                {
                    Ok(Some(info)) => out.push(topic_response(
                        &info,
                        &broker.node.metadata.state(),
                        listener,
                    )),
                    Ok(None) => out.push(error_topic(
                        Some(name),
                        uuid::Uuid::nil(),
                        ErrorCode::UnknownTopicOrPartition,
                    )),
                    Err(e) => out.push(error_topic(Some(name), uuid::Uuid::nil(), e.code)),
                }
            }
            out
        }
    };
    // Fenced brokers (stopped or silent) are left out, as Kafka lists only live brokers, and
    // so are brokers without the client's listener.
    let brokers = broker
        .node
        .metadata
        .state()
        .brokers
        .values()
        .filter(|b| !b.fenced)
        .filter_map(|b| {
            let (host, port) = b.endpoint(listener)?;
            Some(
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(b.node_id as i32))
                    .with_host(str_bytes(host))
                    .with_port(i32::from(port))
                    .with_rack(b.rack.clone().map(str_bytes)),
            )
        })
        .collect();
    let mut resp = MetadataResponse::default()
        .with_brokers(brokers)
        .with_controller_id(BrokerId(
            broker.node.metadata.leader().map_or(-1, |l| l as i32),
        ))
        .with_topics(topics);
    if version >= 2 {
        resp.cluster_id = Some(str_bytes(broker.node.config.cluster_id.clone()));
    }
    // Authorized operations only on request (v8+; the cluster's until v10), Kafka's
    // i32::MIN otherwise.
    if (8..=10).contains(&version) {
        resp.cluster_authorized_operations = if req.include_cluster_authorized_operations {
            access.operations(ResourceType::Cluster, strata_metadata::acl::CLUSTER_NAME)
        } else {
            i32::MIN
        };
    }
    for t in &mut resp.topics {
        t.topic_authorized_operations = match &t.name {
            Some(name)
                if version >= 8 && req.include_topic_authorized_operations && t.error_code == 0 =>
            {
                access.operations(ResourceType::Topic, name)
            }
            _ => i32::MIN,
        };
    }
    resp
}
