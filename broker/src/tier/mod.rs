//! The remote tier: closed segments offloaded to the object store ([`offload`]), read back
//! through the block cache when a fetch reaches below the local log ([`read`]), and expired
//! by retention ([`expiry`]).
//!
//! Object layout: `<topic>-<topic_id>/<partition>/<base_offset:020>-<uuid>.log` (the segment,
//! byte for byte) and `.index` ([`index`]); both immutable. The uuid is new for every upload
//! attempt, so a retried or concurrent upload never overwrites an object a record names.
//!
//! Invariants (docs/invariants.md 4–5):
//! - a remote-segment record is committed only after both objects are written and the log
//!   object's size is checked in the store, and only by the partition's leader;
//! - a local segment is deleted only once its record is committed (or retention expired it
//!   whole); the log enforces this with the [`crate::log::RemoteView`] it is given;
//! - bytes read from a remote object reach a client only after every batch in them passed its
//!   CRC and offset checks: a corrupt or truncated object is an error, never data;
//! - objects no record names are deleted only when older than the orphan grace period and not
//!   being uploaded by this broker.

pub mod expiry;
pub mod index;
pub mod metrics;
pub mod offload;
pub mod read;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use strata_cache::{BlockCache, CacheConfig, CacheError};
use strata_objstore::{ObjStoreError, Store};
use uuid::Uuid;

use crate::config::BrokerConfig;
use crate::error::{ApiError, ErrorCode};
use crate::log::LogError;
use crate::metrics::Metrics;
use crate::partition::TopicPartition;
use crate::schedule::BackgroundRuntime;
pub use metrics::TierMetrics;

#[derive(Debug, thiserror::Error)]
pub enum TierError {
    #[error("object store: {0}")]
    Store(#[from] ObjStoreError),
    #[error("remote read: {0}")]
    Cache(#[from] CacheError),
    #[error("corrupt remote data: {0}")]
    Corrupt(String),
    #[error(transparent)]
    Log(#[from] LogError),
    #[error("commit refused: {0}")]
    Commit(String),
    #[error("tier task: {0}")]
    Task(String),
}

impl From<TierError> for ApiError {
    /// Remote-tier failures are retriable storage errors: the client backs off and fetches
    /// again, and a corrupt object keeps failing rather than serving wrong bytes.
    fn from(e: TierError) -> ApiError {
        if let TierError::Log(l) = e {
            return ApiError::from(l);
        }
        tracing::warn!(error = %e, "remote tier error");
        ApiError::new(ErrorCode::KafkaStorageError, e.to_string())
    }
}

impl TierError {
    /// A short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            TierError::Store(e) => e.kind(),
            TierError::Cache(CacheError::Store(e)) => e.kind(),
            TierError::Cache(_) | TierError::Corrupt(_) => "corrupt",
            TierError::Log(_) => "local",
            TierError::Commit(_) => "commit",
            TierError::Task(_) => "task",
        }
    }
}

/// The object store, the cache over it, and what the background tasks share.
pub struct Tier {
    pub store: Store,
    pub cache: BlockCache,
    pub metrics: Arc<TierMetrics>,
    /// Ids of uploads in progress: the orphan sweep must not take their objects.
    uploading: Mutex<HashSet<Uuid>>,
    upload_slots: tokio::sync::Semaphore,
    throttle: crate::throttle::Throttle,
    orphan_grace: Duration,
    /// Bytes the cache reads ahead after each remote read.
    readahead_bytes: u64,
    /// Remote segments within this many bytes of the remote end are recent (see
    /// [`read::read_class`]).
    recent_bytes: u64,
    /// Uploads, remote reads and the cache's GETs and disk writes compete with produce and hot
    /// fetch for the same cores, and must lose: they run on low-priority threads.
    runtime: BackgroundRuntime,
}

impl Tier {
    /// Opens the cache over `store` and registers the tier's, the cache's and the store's
    /// metrics.
    pub async fn open(
        cfg: &BrokerConfig,
        store: Store,
        metrics: &Metrics,
    ) -> Result<Tier, TierError> {
        let runtime = BackgroundRuntime::new("strata-tier", cfg.remote_io_threads)
            .map_err(|e| TierError::Commit(format!("cannot start the tier's threads: {e}")))?;
        let cache_config = CacheConfig {
            block_size: cfg.remote_cache_block_bytes,
            memory_bytes: cfg.remote_cache_memory_bytes as usize,
            disk_bytes: cfg.remote_cache_disk_bytes,
            replay_memory_bytes: cfg.remote_cache_replay_memory_bytes as usize,
            replay_disk_bytes: cfg.remote_cache_replay_disk_bytes,
            readahead_blocks: cfg.remote_cache_readahead_blocks,
            max_concurrent_gets: cfg.remote_fetch_max_concurrent_gets,
            ..CacheConfig::new(cfg.data_dir.join("cache"))
        };
        // Opened on the tier's runtime, so foyer's background work and prefetches run there.
        let cache_store = store.clone();
        let cache = runtime
            .handle()
            .spawn(BlockCache::open(cache_config, cache_store))
            .await
            .map_err(|e| TierError::Commit(format!("cache start-up: {e}")))??;
        let tier_metrics = Arc::new(TierMetrics::default());
        metrics.register(|registry| {
            store.metrics().register(registry);
            tier_metrics.register(registry);
            cache.metrics().register(registry);
        });
        metrics.history().register(|registry| {
            store.metrics().register(registry);
            cache.metrics().register(registry);
        });
        Ok(Tier {
            store,
            cache,
            metrics: tier_metrics,
            uploading: Mutex::new(HashSet::new()),
            upload_slots: tokio::sync::Semaphore::new(cfg.remote_log_upload_concurrency),
            throttle: crate::throttle::Throttle::default(),
            orphan_grace: Duration::from_millis(cfg.remote_log_orphan_grace_ms),
            readahead_bytes: cfg.remote_cache_block_bytes
                * cfg.remote_cache_readahead_blocks as u64,
            recent_bytes: cfg.remote_cache_memory_bytes,
            runtime,
        })
    }

    /// Runs tier work (uploads, remote reads) on the tier's low-priority threads.
    pub fn spawn<F>(&self, work: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.runtime.handle().spawn(work)
    }

    fn uploading(&self) -> std::sync::MutexGuard<'_, HashSet<Uuid>> {
        self.uploading.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Where a partition's objects live.
pub fn partition_prefix(tp: &TopicPartition, topic_id: &Uuid) -> String {
    format!("{}-{}/{}/", tp.topic, topic_id, tp.partition)
}

/// The key of one object of a remote segment (`ext` is `log` or `index`).
pub fn segment_key(
    tp: &TopicPartition,
    topic_id: &Uuid,
    base: i64,
    id: &Uuid,
    ext: &str,
) -> String {
    format!("{}{base:020}-{id}.{ext}", partition_prefix(tp, topic_id))
}

/// The upload id in an object key written by [`segment_key`].
pub fn id_of_key(key: &str) -> Option<Uuid> {
    let name = key.rsplit('/').next()?;
    let stem = name
        .strip_suffix(".log")
        .or_else(|| name.strip_suffix(".index"))?;
    let (_, id) = stem.split_once('-')?;
    Uuid::parse_str(id).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_carry_the_upload_id() {
        let tp = TopicPartition {
            topic: "orders.v1".into(),
            partition: 3,
        };
        let topic_id = Uuid::new_v4();
        let id = Uuid::new_v4();
        let key = segment_key(&tp, &topic_id, 1234, &id, "log");
        assert_eq!(
            key,
            format!("orders.v1-{topic_id}/3/00000000000000001234-{id}.log")
        );
        assert!(key.starts_with(&partition_prefix(&tp, &topic_id)));
        assert_eq!(id_of_key(&key), Some(id));
        assert_eq!(
            id_of_key(&segment_key(&tp, &topic_id, 0, &id, "index")),
            Some(id)
        );
        assert_eq!(id_of_key("orders.v1-x/3/notes.txt"), None);
    }
}
