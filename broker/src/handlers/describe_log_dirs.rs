//! DescribeLogDirs (`kafka-log-dirs --describe`, `Admin.describeLogDirs`; balancers read it
//! to size moves and follow their progress): each of this broker's log directories with the
//! local size and offset lag of every replica it holds, the copies of replicas moving into it
//! (future replicas, AlterReplicaLogDirs), and (v4) its volume's total and usable bytes.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::security::Access;
use strata_metadata::acl::AclOperation;

/// Needs DESCRIBE on the cluster (refused: v3+ say so, earlier versions list nothing).
pub fn handle(
    broker: &Arc<Broker>,
    req: DescribeLogDirsRequest,
    access: &Access,
) -> DescribeLogDirsResponse {
    if !access.cluster(AclOperation::Describe) {
        return DescribeLogDirsResponse::default()
            .with_error_code(ErrorCode::ClusterAuthorizationFailed.code());
    }
    let wanted: Option<BTreeMap<String, Vec<i32>>> = req.topics.map(|topics| {
        topics
            .into_iter()
            .map(|t| (t.topic.0.as_str().to_string(), t.partitions))
            .collect()
    });
    let dirs = broker.node.partitions.log_dirs().all();
    // Per log directory (in the configured order), per topic.
    let mut found: Vec<BTreeMap<String, Vec<DescribeLogDirsPartition>>> =
        vec![BTreeMap::new(); dirs.len()];
    for p in broker.node.partitions.hosted().all() {
        if let Some(w) = &wanted {
            if !w
                .get(&p.tp.topic)
                .is_some_and(|parts| parts.contains(&p.tp.partition))
            {
                continue;
            }
        }
        let Some(i) = broker
            .node
            .partitions
            .log_dirs()
            .index(&p.placement().dir())
        else {
            continue;
        };
        let (_, local_bytes, _) = p.stats();
        found[i].entry(p.tp.topic.clone()).or_default().push(
            DescribeLogDirsPartition::default()
                .with_partition_index(p.tp.partition)
                .with_partition_size(i64::try_from(local_bytes).unwrap_or(i64::MAX))
                .with_offset_lag(p.offset_lag())
                .with_is_future_key(false),
        );
    }
    // A move's copy, in its destination: the future replica, behind the live one by the
    // records not copied yet.
    for (tp, r) in broker.node.partitions.relocations() {
        let listed = wanted.as_ref().is_none_or(|w| {
            w.get(&tp.topic)
                .is_some_and(|parts| parts.contains(&tp.partition))
        });
        let live = broker.node.partitions.get(&tp.topic, tp.partition);
        let (Some(i), Some(live), true) = (
            dirs.iter().position(|d| Arc::ptr_eq(d, &r.dest)),
            live,
            listed,
        ) else {
            continue;
        };
        let copied_end = r.copied_end.load(std::sync::atomic::Ordering::Relaxed);
        let lag = match copied_end {
            -1 => -1,
            end => (live.published_offsets().log_end - end).max(0),
        };
        found[i].entry(tp.topic.clone()).or_default().push(
            DescribeLogDirsPartition::default()
                .with_partition_index(tp.partition)
                .with_partition_size(clamp(r.copied.load(std::sync::atomic::Ordering::Relaxed)))
                .with_offset_lag(lag)
                .with_is_future_key(true),
        );
    }
    let results = (dirs.iter().zip(found))
        .map(|(dir, topics)| {
            let path = std::fs::canonicalize(&dir.path).unwrap_or_else(|_| dir.path.clone());
            let (total, usable) =
                crate::sys::filesystem_bytes(&path).map_or((-1, -1), |(t, u)| (clamp(t), clamp(u)));
            // A failed directory is listed with Kafka's error for it, and nothing in it.
            let error = match dir.failure() {
                Some(_) => ErrorCode::KafkaStorageError,
                None => ErrorCode::None,
            };
            DescribeLogDirsResult::default()
                .with_error_code(error.code())
                .with_log_dir(str_bytes(path.display().to_string()))
                .with_total_bytes(total)
                .with_usable_bytes(usable)
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(name, partitions)| {
                            DescribeLogDirsTopic::default()
                                .with_name(TopicName(str_bytes(name)))
                                .with_partitions(partitions)
                        })
                        .collect(),
                )
        })
        .collect();
    DescribeLogDirsResponse::default().with_results(results)
}

fn clamp(bytes: u64) -> i64 {
    i64::try_from(bytes).unwrap_or(i64::MAX)
}
