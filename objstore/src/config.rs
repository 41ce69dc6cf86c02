//! Where objects live: parsed from a URL plus the few S3 settings a URL cannot carry.

use std::path::PathBuf;
use std::time::Duration;

use crate::{ObjStoreError, Result};

/// The store a URL names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// `s3://bucket[/prefix]`: AWS S3 or an S3-compatible server (MinIO) at `endpoint`.
    S3 { bucket: String, prefix: String },
    /// `file:///absolute/path`: a local directory (the single-node default).
    File { path: PathBuf },
    /// `memory://`: in-process, gone at exit (tests).
    Memory,
}

impl Location {
    pub fn parse(url: &str) -> Result<Location> {
        let bad = |why: &str| ObjStoreError::InvalidUrl {
            url: url.to_string(),
            why: why.to_string(),
        };
        let parsed = url::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
        match parsed.scheme() {
            "s3" | "s3a" => {
                let bucket = parsed
                    .host_str()
                    .filter(|b| !b.is_empty())
                    .ok_or_else(|| bad("no bucket: expected s3://bucket/prefix"))?;
                let prefix = parsed.path().trim_matches('/').to_string();
                Ok(Location::S3 {
                    bucket: bucket.to_string(),
                    prefix,
                })
            }
            "file" => {
                let path = parsed
                    .to_file_path()
                    .map_err(|_| bad("expected file:///absolute/path"))?;
                Ok(Location::File { path })
            }
            "memory" => Ok(Location::Memory),
            other => Err(bad(&format!(
                "unsupported scheme '{other}' (s3, file or memory)"
            ))),
        }
    }
}

/// Everything needed to open a [`crate::Store`]. S3 credentials are the static keys below when
/// set, else the environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
/// `AWS_SESSION_TOKEN`), else web identity (EKS IRSA), ECS container credentials, EKS Pod
/// Identity, else the EC2 instance metadata service (IMDSv2), as `object_store` resolves them.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreConfig {
    pub url: String,
    /// S3: a custom endpoint (MinIO, another S3 server), e.g. `http://127.0.0.1:9000`.
    pub endpoint: Option<String>,
    /// S3: the bucket's region (`AWS_REGION` when unset, then `us-east-1`).
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    /// S3: allow `http://` endpoints.
    pub allow_http: bool,
    /// S3: `bucket.host/key` addressing instead of `host/bucket/key` (MinIO wants the latter).
    pub virtual_hosted_style: bool,
    /// Bound on one request, connection included.
    pub request_timeout: Duration,
    pub connect_timeout: Duration,
    /// Retries of a failed request (server errors, timeouts, connection errors) with jittered
    /// exponential backoff, all within `retry_timeout`.
    pub max_retries: usize,
    pub retry_timeout: Duration,
    /// Objects above this size are uploaded in parts of `part_size`.
    pub multipart_threshold: usize,
    pub part_size: usize,
}

impl StoreConfig {
    pub fn new(url: impl Into<String>) -> StoreConfig {
        StoreConfig {
            url: url.into(),
            endpoint: None,
            region: None,
            access_key_id: None,
            secret_access_key: None,
            allow_http: false,
            virtual_hosted_style: false,
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            max_retries: 5,
            retry_timeout: Duration::from_secs(60),
            multipart_threshold: 64 << 20,
            part_size: 16 << 20,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_their_store() {
        assert_eq!(
            Location::parse("s3://bucket/a/b/").unwrap(),
            Location::S3 {
                bucket: "bucket".into(),
                prefix: "a/b".into()
            }
        );
        assert_eq!(
            Location::parse("s3://bucket").unwrap(),
            Location::S3 {
                bucket: "bucket".into(),
                prefix: String::new()
            }
        );
        assert_eq!(
            Location::parse("file:///var/lib/strata/objects").unwrap(),
            Location::File {
                path: "/var/lib/strata/objects".into()
            }
        );
        assert_eq!(Location::parse("memory://").unwrap(), Location::Memory);
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        for (url, why) in [
            ("gs://bucket", "unsupported scheme"),
            ("s3:///prefix", "no bucket"),
            ("not a url", "relative URL"),
        ] {
            let err = Location::parse(url).unwrap_err().to_string();
            assert!(err.contains(why), "{url}: {err}");
        }
    }
}
