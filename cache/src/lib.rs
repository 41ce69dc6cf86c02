//! Strata's block cache: byte ranges of immutable objects in the object store, kept in RAM and
//! on local disk (foyer hybrid caches), fetched from the store by block on a miss.
//!
//! It knows objects (a key, a unique id and a size) and byte ranges, nothing of what is in them.
//!
//! Invariants:
//! - objects are immutable and named by a unique id, so a cached block is an immutable copy that
//!   never needs invalidating; entries are keyed by (object id, byte range), so one key can only
//!   ever hold one content;
//! - a block is cached only when complete: a GET that returns fewer bytes than the block must
//!   hold is an error ([`CacheError::Truncated`]), and no error is ever cached, so a later read
//!   tries again;
//! - one GET per missing block, however many readers want it at once (foyer's single-flight
//!   fetch), and at most `max_concurrent_gets` GETs in flight over the whole cache;
//! - reads of [`ReadClass::Replay`] only look up and fill the replay cache, so catching up on old
//!   history never evicts what readers near the tail use.

// Only its tests read time, to bound their waits.
#![allow(clippy::disallowed_methods)]

mod block;
mod cache;
mod config;
mod metrics;

pub use cache::{BlockCache, ObjectRef};
pub use config::CacheConfig;
pub use config::ReadClass;
pub use metrics::{CacheMetrics, Tier};

use strata_objstore::ObjStoreError;

/// What went wrong reading through the cache.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error(transparent)]
    Store(#[from] ObjStoreError),
    /// The object is shorter than its reference says: damaged, or not the object meant.
    #[error("object {key} is truncated: expected {expected} bytes, got {got}")]
    Truncated {
        key: String,
        expected: u64,
        got: u64,
    },
    #[error("cache configuration: {0}")]
    Config(String),
    /// The cache itself failed (foyer: local disk I/O, closed cache).
    #[error("block cache: {0}")]
    Cache(String),
}

impl CacheError {
    /// True for failures that may succeed if tried again later.
    pub fn is_retriable(&self) -> bool {
        match self {
            CacheError::Store(e) => e.is_retriable(),
            CacheError::Truncated { .. } | CacheError::Config(_) | CacheError::Cache(_) => false,
        }
    }

    /// A short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            CacheError::Store(e) => e.kind(),
            CacheError::Truncated { .. } => "truncated",
            CacheError::Config(_) => "config",
            CacheError::Cache(_) => "cache",
        }
    }
}

// By hand because `ObjStoreError` is not `Clone`: every reader waiting on one fetch gets its
// own copy of that fetch's error.
impl Clone for CacheError {
    fn clone(&self) -> Self {
        match self {
            CacheError::Store(e) => CacheError::Store(clone_store_error(e)),
            CacheError::Truncated { key, expected, got } => CacheError::Truncated {
                key: key.clone(),
                expected: *expected,
                got: *got,
            },
            CacheError::Config(s) => CacheError::Config(s.clone()),
            CacheError::Cache(s) => CacheError::Cache(s.clone()),
        }
    }
}

fn clone_store_error(e: &ObjStoreError) -> ObjStoreError {
    match e {
        ObjStoreError::InvalidUrl { url, why } => ObjStoreError::InvalidUrl {
            url: url.clone(),
            why: why.clone(),
        },
        ObjStoreError::Config(s) => ObjStoreError::Config(s.clone()),
        ObjStoreError::NotFound { key } => ObjStoreError::NotFound { key: key.clone() },
        ObjStoreError::BucketNotFound { bucket } => ObjStoreError::BucketNotFound {
            bucket: bucket.clone(),
        },
        ObjStoreError::AccessDenied(s) => ObjStoreError::AccessDenied(s.clone()),
        ObjStoreError::Unavailable(s) => ObjStoreError::Unavailable(s.clone()),
        ObjStoreError::Other(s) => ObjStoreError::Other(s.clone()),
    }
}

pub type Result<T, E = CacheError> = std::result::Result<T, E>;
