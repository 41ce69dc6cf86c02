//! AlterReplicaLogDirs (`kafka-reassign-partitions` with `log_dirs`, `Admin.alterReplicaLogDirs`):
//! moves replicas hosted here into another of this broker's log directories, online. The
//! answer comes once each move has started; DescribeLogDirs shows a move's copy as the
//! future replica in its destination until it is swapped in (see `partition/relocate.rs`).

use std::sync::Arc;

use kafka_protocol::messages::alter_replica_log_dirs_response::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
};
use kafka_protocol::messages::{AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse};

use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::partition::{RelocateRefusal, TopicPartition};
use crate::security::Access;
use strata_metadata::acl::AclOperation;

/// Needs ALTER on the cluster, as in Kafka.
pub fn handle(
    broker: &Arc<Broker>,
    req: AlterReplicaLogDirsRequest,
    access: &Access,
) -> AlterReplicaLogDirsResponse {
    let allowed = access.cluster(AclOperation::Alter);
    let node = broker.node.clone();
    let rate: Arc<dyn Fn() -> u64 + Send + Sync> = Arc::new(move || {
        node.settings()
            .replica_alter_log_dirs_io_max_bytes_per_second
    });
    let dirs = broker.node.partitions.log_dirs();
    let mut results = Vec::new();
    for d in req.dirs {
        // Clients name a directory as DescribeLogDirs does (absolute), or as configured.
        let wanted = std::path::Path::new(d.path.as_str());
        let wanted = std::fs::canonicalize(wanted).unwrap_or_else(|_| wanted.to_path_buf());
        let dest = (dirs.all().iter()).find(|l| {
            l.path == wanted || std::fs::canonicalize(&l.path).is_ok_and(|c| c == wanted)
        });
        for t in d.topics {
            let partitions = (t.partitions.iter())
                .map(|&partition| {
                    let tp = TopicPartition {
                        topic: t.name.0.to_string(),
                        partition,
                    };
                    let code = match dest {
                        _ if !allowed => ErrorCode::ClusterAuthorizationFailed,
                        None => ErrorCode::LogDirNotFound,
                        Some(dest) => {
                            match broker.node.partitions.relocate(&tp, dest, rate.clone()) {
                                Ok(()) => ErrorCode::None,
                                Err(RelocateRefusal::NotHosted) => ErrorCode::ReplicaNotAvailable,
                                Err(RelocateRefusal::Failed) => ErrorCode::KafkaStorageError,
                                Err(RelocateRefusal::Busy) => ErrorCode::ReassignmentInProgress,
                            }
                        }
                    };
                    AlterReplicaLogDirPartitionResult::default()
                        .with_partition_index(partition)
                        .with_error_code(code.code())
                })
                .collect();
            results.push(
                AlterReplicaLogDirTopicResult::default()
                    .with_topic_name(t.name)
                    .with_partitions(partitions),
            );
        }
    }
    AlterReplicaLogDirsResponse::default().with_results(results)
}
