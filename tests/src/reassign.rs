//! Partition reassignment through Kafka's own APIs (AlterPartitionReassignments,
//! ListPartitionReassignments, DescribeLogDirs), spoken with raw `kafka-protocol` frames: the
//! requests stock admin tools send.

use anyhow::Result;
use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::describe_log_dirs_request::DescribableLogDirTopic;
use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, BrokerId, DescribeLogDirsRequest,
    ListPartitionReassignmentsRequest,
};

use crate::raw::{topic_name, KafkaConn};

/// One partition's answer: its error code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub topic: String,
    pub partition: i32,
    pub code: i16,
    pub message: Option<String>,
}

/// Asks for each `(topic, partition, target)` (a `None` target cancels), v1 with
/// `allow_rf_change`; returns the answer per partition, in request order.
pub fn alter(
    conn: &mut KafkaConn,
    moves: &[(&str, i32, Option<&[i32]>)],
    allow_rf_change: bool,
) -> Result<Vec<Outcome>> {
    let mut topics: Vec<ReassignableTopic> = Vec::new();
    for (topic, partition, target) in moves {
        let p = ReassignablePartition::default()
            .with_partition_index(*partition)
            .with_replicas(target.map(|t| t.iter().map(|b| BrokerId(*b)).collect()));
        match topics.iter_mut().find(|t| t.name.0.as_str() == *topic) {
            Some(t) => t.partitions.push(p),
            None => topics.push(
                ReassignableTopic::default()
                    .with_name(topic_name(topic))
                    .with_partitions(vec![p]),
            ),
        }
    }
    let req = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(30_000)
        .with_allow_replication_factor_change(allow_rf_change)
        .with_topics(topics);
    let resp = conn.request(1, &req)?;
    anyhow::ensure!(resp.error_code == 0, "request refused: {}", resp.error_code);
    Ok(resp
        .responses
        .into_iter()
        .flat_map(|t| {
            let topic = t.name.0.as_str().to_string();
            t.partitions.into_iter().map(move |p| Outcome {
                topic: topic.clone(),
                partition: p.partition_index,
                code: p.error_code,
                message: p.error_message.map(|m| m.as_str().to_string()),
            })
        })
        .collect())
}

/// A partition moving: `(topic, partition, replicas, adding, removing)`.
pub type Ongoing = (String, i32, Vec<i32>, Vec<i32>, Vec<i32>);

/// The reassignments in progress (of `topics`' partitions 0..8, or all with `None`).
pub fn list(conn: &mut KafkaConn, topics: Option<&[&str]>) -> Result<Vec<Ongoing>> {
    let req = ListPartitionReassignmentsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(topics.map(|ts| {
            ts.iter()
                .map(|t| {
                    ListPartitionReassignmentsTopics::default()
                        .with_name(topic_name(t))
                        .with_partition_indexes((0..8).collect())
                })
                .collect()
        }));
    let resp = conn.request(0, &req)?;
    let ids = |v: Vec<BrokerId>| v.into_iter().map(|b| b.0).collect::<Vec<i32>>();
    let mut out = Vec::new();
    for t in resp.topics {
        for p in t.partitions {
            out.push((
                t.name.0.as_str().to_string(),
                p.partition_index,
                ids(p.replicas),
                ids(p.adding_replicas),
                ids(p.removing_replicas),
            ));
        }
    }
    Ok(out)
}

/// One replica in DescribeLogDirs: `(topic, partition, size, offset_lag)`.
pub type LogDirReplica = (String, i32, i64, i64);

/// The broker's log dir (path, total bytes, usable bytes) and its replicas of `topic` (all
/// topics with `None`).
pub fn describe_log_dirs(
    conn: &mut KafkaConn,
    topic: Option<(&str, &[i32])>,
) -> Result<(String, i64, i64, Vec<LogDirReplica>)> {
    let req = DescribeLogDirsRequest::default().with_topics(topic.map(|(t, parts)| {
        vec![DescribableLogDirTopic::default()
            .with_topic(topic_name(t))
            .with_partitions(parts.to_vec())]
    }));
    let resp = conn.request(4, &req)?;
    anyhow::ensure!(resp.error_code == 0, "refused: {}", resp.error_code);
    let dir = resp
        .results
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("no log dir"))?;
    let mut replicas = Vec::new();
    for t in dir.topics {
        for p in t.partitions {
            replicas.push((
                t.name.0.as_str().to_string(),
                p.partition_index,
                p.partition_size,
                p.offset_lag,
            ));
        }
    }
    Ok((
        dir.log_dir.as_str().to_string(),
        dir.total_bytes,
        dir.usable_bytes,
        replicas,
    ))
}
