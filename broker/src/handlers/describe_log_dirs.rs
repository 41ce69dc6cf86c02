//! DescribeLogDirs (`kafka-log-dirs --describe`, `Admin.describeLogDirs`; balancers read it
//! to size moves and follow their progress): this broker's data directory with the local
//! size and offset lag of every replica it hosts, and (v4) the volume's total and usable bytes.
//! Strata has one data directory per broker.

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};

use super::str_bytes;
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
    let mut topics: BTreeMap<String, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
    for p in broker.node.partitions.hosted().all() {
        if let Some(w) = &wanted {
            if !w
                .get(&p.tp.topic)
                .is_some_and(|parts| parts.contains(&p.tp.partition))
            {
                continue;
            }
        }
        let (_, local_bytes, _) = p.stats();
        topics.entry(p.tp.topic.clone()).or_default().push(
            DescribeLogDirsPartition::default()
                .with_partition_index(p.tp.partition)
                .with_partition_size(i64::try_from(local_bytes).unwrap_or(i64::MAX))
                .with_offset_lag(p.offset_lag())
                .with_is_future_key(false),
        );
    }
    let dir = &broker.node.config.data_dir;
    let path = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
    let (total, usable) = volume_bytes(&path).unwrap_or((-1, -1));
    let result = DescribeLogDirsResult::default()
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
        );
    DescribeLogDirsResponse::default().with_results(vec![result])
}

/// The volume's size and the bytes an unprivileged process may still write.
fn volume_bytes(path: &std::path::Path) -> Option<(i64, i64)> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `c` is a valid NUL-terminated path and `st` a properly sized out-parameter.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let frsize = st.f_frsize as i64;
    Some((
        (st.f_blocks as i64).saturating_mul(frsize),
        (st.f_bavail as i64).saturating_mul(frsize),
    ))
}
