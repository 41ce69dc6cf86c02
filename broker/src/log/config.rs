//! What a partition's log runs with: segment size and age, retention, flushing, compaction
//! and the tier, already resolved from the topic's configuration and the broker's defaults
//! (by [`crate::topic_config::log_config`]). The log engine reads only this, never topic
//! configuration by name.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// What one partition log needs to know of its topic's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    pub segment_bytes: u64,
    pub segment_ms: i64,
    pub retention_ms: i64,
    pub retention_bytes: i64,
    pub flush_messages: i64,
    pub flush_ms: i64,
    pub index_interval_bytes: u64,
    pub max_message_bytes: usize,
    pub timestamp_type: TimestampType,
    /// `cleanup.policy` contains `compact`: the cleaner keeps the latest record per key.
    pub compact: bool,
    /// `cleanup.policy` contains `delete`: retention by time and size applies.
    pub delete: bool,
    pub delete_retention_ms: i64,
    pub min_cleanable_dirty_ratio: f64,
    pub min_compaction_lag_ms: i64,
    /// Closed segments are offloaded to the object store (`remote.storage.enable` on a topic
    /// whose policy is delete only: a compacted log keeps rewriting its segments).
    pub remote_storage: bool,
    /// Hot window kept on local disk once offloaded (`local.retention.ms/bytes`, with Kafka's
    /// -2 resolved to `retention.ms/bytes`).
    pub local_retention_ms: i64,
    pub local_retention_bytes: i64,
    /// `min.insync.replicas`: acks=all writes are refused while the ISR is smaller.
    pub min_insync_replicas: usize,
    /// `compression.type` and its level: what produced batches are stored as (`None`:
    /// `producer`, as sent).
    pub compression: Option<super::compression::Target>,
}

impl LogConfig {
    /// Defaults convenient for tests: small segments, no retention.
    #[cfg(test)]
    pub fn for_tests(segment_bytes: u64) -> LogConfig {
        LogConfig {
            segment_bytes,
            segment_ms: i64::MAX,
            retention_ms: -1,
            retention_bytes: -1,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
            index_interval_bytes: 4096,
            max_message_bytes: 1 << 20,
            timestamp_type: TimestampType::CreateTime,
            compact: false,
            delete: true,
            delete_retention_ms: 86_400_000,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            remote_storage: false,
            local_retention_ms: -1,
            local_retention_bytes: -1,
            min_insync_replicas: 1,
            compression: None,
        }
    }
}

/// `(compact, delete)` of a `cleanup.policy` value: a comma-separated subset of the two.
pub fn cleanup_policy(value: &str) -> Option<(bool, bool)> {
    let (mut compact, mut delete) = (false, false);
    // An empty list is valid, as in Kafka: neither deletion nor compaction (history kept).
    for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part {
            "compact" => compact = true,
            "delete" => delete = true,
            _ => return None,
        }
    }
    Some((compact, delete))
}
