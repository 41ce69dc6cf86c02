//! Strata's object store: one handle over S3 (AWS or MinIO), a local directory, or memory,
//! built from a URL (`s3://bucket/prefix`, `file:///path`, `memory://`), with bounded timeouts,
//! retries with jittered backoff, and request/byte/error accounting per operation.
//!
//! Keys passed to [`Store`] are relative to the URL's prefix. Only what the remote tier needs is
//! exposed: whole-object puts (multipart above a threshold), ranged gets, head, list, delete.
//!
//! Invariants:
//! - every request goes through [`Store`], so every request is counted in [`StoreMetrics`];
//! - errors are classified once ([`ObjStoreError`]) so callers decide retry vs. give up on the
//!   kind, never on message text.

// Request signatures carry the real time, and request latencies measure real work.
#![allow(clippy::disallowed_methods)]

mod bucket;
mod config;
mod metrics;
mod ops;
mod store;

pub use bucket::{init_bucket, BucketInit};
pub use config::{Location, StoreConfig};
pub use metrics::StoreMetrics;
pub use ops::Op;
pub use store::{ObjectInfo, Store};

/// What went wrong with the object store, by what a caller can do about it.
#[derive(Debug, thiserror::Error)]
pub enum ObjStoreError {
    #[error("invalid object store URL '{url}': {why}")]
    InvalidUrl { url: String, why: String },
    #[error("object store configuration: {0}")]
    Config(String),
    #[error("object {key} not found")]
    NotFound { key: String },
    #[error("bucket '{bucket}' does not exist: create it with `strata objstore init` (same configuration), or check the URL, region and endpoint")]
    BucketNotFound { bucket: String },
    #[error("access denied by the object store (check credentials and bucket policy): {0}")]
    AccessDenied(String),
    /// Unreachable, timed out, or failing with server errors after retries: worth retrying later.
    #[error("object store unavailable (check object_store_endpoint, the network, and that the server is up): {0}")]
    Unavailable(String),
    #[error("object store error: {0}")]
    Other(String),
}

impl ObjStoreError {
    /// True for failures that may succeed if tried again later.
    pub fn is_retriable(&self) -> bool {
        matches!(self, ObjStoreError::Unavailable(_))
    }

    /// A short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ObjStoreError::InvalidUrl { .. } | ObjStoreError::Config(_) => "config",
            ObjStoreError::NotFound { .. } => "not_found",
            ObjStoreError::BucketNotFound { .. } => "no_bucket",
            ObjStoreError::AccessDenied(_) => "access_denied",
            ObjStoreError::Unavailable(_) => "unavailable",
            ObjStoreError::Other(_) => "other",
        }
    }
}

pub type Result<T, E = ObjStoreError> = std::result::Result<T, E>;
