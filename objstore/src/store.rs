//! The handle: one `object_store` client, the key prefix, and accounting around every request.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures::stream::{FuturesOrdered, StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig,
};

use crate::config::{Location, StoreConfig};
use crate::metrics::StoreMetrics;
use crate::ops::Op;
use crate::{ObjStoreError, Result};

/// Parts of one multipart upload in flight at once.
const PARTS_IN_FLIGHT: usize = 4;

/// An object as listed or headed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Key relative to the store's prefix.
    pub key: String,
    pub size: u64,
    pub e_tag: Option<String>,
    /// Last modification, milliseconds since the Unix epoch.
    pub last_modified_ms: i64,
}

#[derive(Clone)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    location: Location,
    /// Joined in front of every key (S3 URL path); empty for none.
    prefix: String,
    metrics: Arc<StoreMetrics>,
    multipart_threshold: usize,
    part_size: usize,
}

impl fmt::Display for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.location {
            Location::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
            Location::File { path } => write!(f, "file://{}", path.display()),
            Location::Memory => write!(f, "memory://"),
        }
    }
}

/// The S3 client settings of `cfg`: endpoint, region, addressing and credentials (static
/// keys, else the `AWS_*` environment, web identity, container credentials, instance metadata).
pub(crate) fn s3_builder(cfg: &StoreConfig, bucket: &str) -> AmazonS3Builder {
    let mut b = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_virtual_hosted_style_request(cfg.virtual_hosted_style);
    if let Some(e) = &cfg.endpoint {
        b = b.with_endpoint(e);
    }
    if let Some(r) = &cfg.region {
        b = b.with_region(r);
    }
    if let (Some(id), Some(secret)) = (&cfg.access_key_id, &cfg.secret_access_key) {
        b = b.with_access_key_id(id).with_secret_access_key(secret);
    }
    b
}

impl Store {
    /// Builds the client. Nothing is contacted until the first request: call [`Store::check`]
    /// at start-up to fail early on a wrong bucket or credentials.
    pub fn open(cfg: &StoreConfig) -> Result<Store> {
        let location = Location::parse(&cfg.url)?;
        let (inner, prefix): (Arc<dyn ObjectStore>, String) = match &location {
            Location::S3 { bucket, prefix } => {
                let options = ClientOptions::new()
                    .with_timeout(cfg.request_timeout)
                    .with_connect_timeout(cfg.connect_timeout)
                    .with_allow_http(cfg.allow_http);
                let retry = RetryConfig {
                    backoff: BackoffConfig::default(),
                    max_retries: cfg.max_retries,
                    retry_timeout: cfg.retry_timeout,
                };
                let s3 = s3_builder(cfg, bucket)
                    .with_client_options(options)
                    .with_retry(retry)
                    .build()
                    .map_err(|e| ObjStoreError::Config(e.to_string()))?;
                (Arc::new(s3), prefix.clone())
            }
            Location::File { path } => {
                std::fs::create_dir_all(path).map_err(|e| {
                    ObjStoreError::Config(format!("cannot create {}: {e}", path.display()))
                })?;
                let fs = LocalFileSystem::new_with_prefix(path)
                    .map_err(|e| ObjStoreError::Config(e.to_string()))?;
                (Arc::new(fs), String::new())
            }
            Location::Memory => (Arc::new(InMemory::new()), String::new()),
        };
        Ok(Store {
            inner,
            location,
            prefix,
            metrics: Arc::new(StoreMetrics::default()),
            multipart_threshold: cfg.multipart_threshold.max(1),
            part_size: cfg.part_size.max(5 << 20),
        })
    }

    pub fn metrics(&self) -> &Arc<StoreMetrics> {
        &self.metrics
    }

    /// The full URI of `key` as readers outside Strata name it (`s3://bucket/prefix/key`,
    /// `file:///dir/key`): Iceberg metadata records data files by such URIs.
    pub fn uri(&self, key: &str) -> String {
        let root = self.to_string();
        format!("{}/{key}", root.trim_end_matches('/'))
    }

    /// The key of a URI made by [`Store::uri`]; `None` for a URI outside this store (a
    /// `.` or `..` segment included: a metadata file cannot name a path above the root).
    pub fn key_of_uri(&self, uri: &str) -> Option<String> {
        let root = self.to_string();
        let rest = uri.strip_prefix(root.trim_end_matches('/'))?;
        let key = rest.strip_prefix('/')?;
        let dots = key.split('/').any(|s| s == "." || s == "..");
        (!key.is_empty() && !dots).then(|| key.to_string())
    }

    fn path(&self, key: &str) -> Path {
        if self.prefix.is_empty() {
            Path::from(key)
        } else {
            Path::from(format!("{}/{key}", self.prefix))
        }
    }

    fn key_of(&self, path: &Path) -> String {
        let s = path.as_ref();
        match s.strip_prefix(&self.prefix) {
            Some(rest) if !self.prefix.is_empty() => rest.trim_start_matches('/').to_string(),
            _ => s.to_string(),
        }
    }

    fn bucket(&self) -> Option<&str> {
        match &self.location {
            Location::S3 { bucket, .. } => Some(bucket),
            _ => None,
        }
    }

    fn classify(&self, e: object_store::Error, key: &str) -> ObjStoreError {
        // object_store reports S3 and HTTP failures as text; this is the one place read.
        let text = format!("{e}: {:?}", std::error::Error::source(&e));
        let bucket_missing = || ObjStoreError::BucketNotFound {
            bucket: self.bucket().unwrap_or_default().to_string(),
        };
        match e {
            _ if text.contains("NoSuchBucket") => bucket_missing(),
            object_store::Error::NotFound { .. } => ObjStoreError::NotFound {
                key: key.to_string(),
            },
            _ if [
                "AccessDenied",
                "InvalidAccessKeyId",
                "SignatureDoesNotMatch",
                "403 Forbidden",
            ]
            .iter()
            .any(|s| text.contains(s)) =>
            {
                ObjStoreError::AccessDenied(e.to_string())
            }
            object_store::Error::Generic { .. }
                if [
                    "timed out",
                    "timeout",
                    "error sending request",
                    "onnection",
                    "Server returned non-2xx status code: 5",
                    "retries",
                    "dns error",
                ]
                .iter()
                .any(|s| text.contains(s)) =>
            {
                ObjStoreError::Unavailable(e.to_string())
            }
            _ => ObjStoreError::Other(text),
        }
    }

    /// Times `fut` as operation `op`, classifies its error and counts it.
    async fn request<T>(
        &self,
        op: Op,
        key: &str,
        fut: impl std::future::Future<Output = object_store::Result<T>>,
    ) -> Result<T> {
        let started = Instant::now();
        let result = fut.await.map_err(|e| self.classify(e, key));
        let kind = result.as_ref().err().map(ObjStoreError::kind);
        (self.metrics).observe(op.label(), started.elapsed().as_secs_f64(), kind);
        if let Err(e) = &result {
            tracing::debug!(store = %self, op = op.label(), key, error = %e, "object store request failed");
        }
        result
    }

    /// Checks that the bucket (or directory) is reachable with these credentials.
    pub async fn check(&self) -> Result<()> {
        let prefix = (!self.prefix.is_empty()).then(|| Path::from(self.prefix.as_str()));
        self.request(
            Op::List,
            "",
            self.inner.list_with_delimiter(prefix.as_ref()),
        )
        .await
        .map(|_| ())
    }

    /// Writes a whole object: one PUT, or a multipart upload above the threshold (parts sent
    /// `PARTS_IN_FLIGHT` at a time, slices of `data` without copies; aborted on failure).
    pub async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        let path = self.path(key);
        let len = data.len() as u64;
        if data.len() <= self.multipart_threshold {
            self.request(Op::Put, key, self.inner.put(&path, PutPayload::from(data)))
                .await?;
        } else {
            let mut upload = self
                .request(Op::PutMultipart, key, self.inner.put_multipart(&path))
                .await?;
            let mut parts = FuturesOrdered::new();
            let mut failed = None;
            for start in (0..data.len()).step_by(self.part_size) {
                let end = (start + self.part_size).min(data.len());
                let part = upload.put_part(PutPayload::from(data.slice(start..end)));
                parts.push_back(self.request(Op::PutPart, key, part));
                if parts.len() >= PARTS_IN_FLIGHT {
                    if let Some(Err(e)) = parts.next().await {
                        failed = Some(e);
                        break;
                    }
                }
            }
            while failed.is_none() {
                match parts.next().await {
                    Some(Err(e)) => failed = Some(e),
                    Some(Ok(())) => {}
                    None => break,
                }
            }
            if let Some(e) = failed {
                drop(parts);
                if let Err(abort) = self.request(Op::AbortMultipart, key, upload.abort()).await {
                    tracing::warn!(store = %self, key, error = %abort, "cannot abort multipart upload");
                }
                return Err(e);
            }
            self.request(Op::CompleteMultipart, key, upload.complete())
                .await?;
        }
        self.metrics.written(len);
        Ok(())
    }

    /// Bytes `range` of an object.
    pub async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes> {
        let path = self.path(key);
        let bytes = self
            .request(Op::Get, key, self.inner.get_range(&path, range))
            .await?;
        self.metrics.read(bytes.len() as u64);
        Ok(bytes)
    }

    /// A whole object.
    pub async fn get(&self, key: &str) -> Result<Bytes> {
        let path = self.path(key);
        // One request: the response and its body, counted once.
        let fetch = async { self.inner.get(&path).await?.bytes().await };
        let bytes = self.request(Op::Get, key, fetch).await?;
        self.metrics.read(bytes.len() as u64);
        Ok(bytes)
    }

    pub async fn head(&self, key: &str) -> Result<ObjectInfo> {
        let path = self.path(key);
        let meta = self.request(Op::Head, key, self.inner.head(&path)).await?;
        Ok(ObjectInfo {
            key: key.to_string(),
            size: meta.size,
            e_tag: meta.e_tag,
            last_modified_ms: meta.last_modified.timestamp_millis(),
        })
    }

    /// Every object whose key starts with `prefix` (a path prefix: whole segments).
    pub async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        let path = self.path(prefix.trim_end_matches('/'));
        let listed: Vec<object_store::ObjectMeta> = self
            .request(Op::List, prefix, self.inner.list(Some(&path)).try_collect())
            .await?;
        let mut out: Vec<ObjectInfo> = listed
            .into_iter()
            .map(|m| ObjectInfo {
                key: self.key_of(&m.location),
                size: m.size,
                e_tag: m.e_tag,
                last_modified_ms: m.last_modified.timestamp_millis(),
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    /// Deletes an object; deleting one that does not exist is not an error (S3 semantics).
    pub async fn delete(&self, key: &str) -> Result<()> {
        let path = self.path(key);
        match self
            .request(Op::Delete, key, self.inner.delete(&path))
            .await
        {
            Err(ObjStoreError::NotFound { .. }) => Ok(()),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_name_keys_under_the_store_root_and_only_those() {
        let s3 = Store::open(&StoreConfig::new("s3://bucket/pre/fix")).unwrap();
        assert_eq!(s3.uri("t/a.json"), "s3://bucket/pre/fix/t/a.json");
        assert_eq!(
            s3.key_of_uri("s3://bucket/pre/fix/t/a.json").unwrap(),
            "t/a.json"
        );
        assert_eq!(s3.key_of_uri("s3://bucket/pre/fixx/a"), None);
        assert_eq!(s3.key_of_uri("s3://other/pre/fix/a"), None);
        assert_eq!(s3.key_of_uri("s3://bucket/pre/fix/"), None);
        assert_eq!(s3.key_of_uri("s3://bucket/pre/fix/a/../../x"), None);
        let bare = Store::open(&StoreConfig::new("s3://bucket")).unwrap();
        assert_eq!(bare.uri("k"), "s3://bucket/k");
        assert_eq!(bare.key_of_uri("s3://bucket/k").unwrap(), "k");
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().display());
        let fs = Store::open(&StoreConfig::new(url.clone())).unwrap();
        assert_eq!(fs.uri("k/v"), format!("{url}/k/v"));
        assert_eq!(fs.key_of_uri(&format!("{url}/k/v")).unwrap(), "k/v");
    }

    fn payload(len: usize) -> Bytes {
        (0..len)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<u8>>()
            .into()
    }

    async fn round_trip(store: &Store) {
        store.check().await.unwrap();
        let small = payload(1000);
        store.put("t/0/a.log", small.clone()).await.unwrap();
        assert_eq!(store.get("t/0/a.log").await.unwrap(), small);
        assert_eq!(
            store.get_range("t/0/a.log", 10..20).await.unwrap(),
            small.slice(10..20)
        );
        assert_eq!(store.head("t/0/a.log").await.unwrap().size, 1000);
        // Above the threshold: multipart, parts of 5 MiB (the S3 minimum).
        let big = payload((12 << 20) + 7);
        store.put("t/0/b.log", big.clone()).await.unwrap();
        assert_eq!(store.get("t/0/b.log").await.unwrap(), big);
        let keys: Vec<String> = store
            .list("t/0")
            .await
            .unwrap()
            .into_iter()
            .map(|o| o.key)
            .collect();
        assert_eq!(keys, vec!["t/0/a.log", "t/0/b.log"]);
        assert!(store.list("t/1").await.unwrap().is_empty());
        store.delete("t/0/a.log").await.unwrap();
        store.delete("t/0/a.log").await.unwrap();
        let err = store.get("t/0/a.log").await.unwrap_err();
        assert!(matches!(err, ObjStoreError::NotFound { .. }), "{err}");
        assert!(!err.is_retriable());
        let m = store.metrics();
        assert!(
            m.requests("put") >= 1 && m.requests("put_part") >= 3,
            "parts counted"
        );
        assert_eq!(m.written_bytes(), 1000 + (12 << 20) + 7);
    }

    fn config(url: &str) -> StoreConfig {
        StoreConfig {
            multipart_threshold: 8 << 20,
            part_size: 5 << 20,
            ..StoreConfig::new(url)
        }
    }

    #[tokio::test]
    async fn a_memory_store_round_trips_objects() {
        round_trip(&Store::open(&config("memory://")).unwrap()).await;
    }

    #[tokio::test]
    async fn a_file_store_round_trips_objects_under_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}/objects", dir.path().display());
        let store = Store::open(&config(&url)).unwrap();
        round_trip(&store).await;
        assert!(dir.path().join("objects/t/0/b.log").exists());
    }
}
