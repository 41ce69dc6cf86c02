//! Bucket bootstrap (`strata objstore init`): create the bucket if it is missing and make sure
//! a lifecycle rule aborts multipart uploads left incomplete under the store's prefix (an
//! upload cut short by a crash leaves parts that are billed until aborted; the broker aborts
//! what it sees fail, the rule catches what it cannot see).
//!
//! These are S3's bucket-level requests, which `object_store` does not make: signed here with
//! SigV4 (`aws-sigv4`) with the credentials `object_store` resolves (static keys, the `AWS_*`
//! environment, web identity, instance metadata), sent once each, not on the data path. They
//! need an operator's permissions (`s3:ListBucket`, `s3:CreateBucket`,
//! `s3:GetLifecycleConfiguration`, `s3:PutLifecycleConfiguration`), which the brokers' own
//! role does not: see [`ADMIN_ACTIONS`].
//!
//! Invariant: an existing lifecycle configuration is kept; Strata's rule (by its ID) is added
//! beside the other rules, never replacing them.

use std::time::SystemTime;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use base64::Engine;
use md5::{Digest, Md5};
use object_store::aws::AmazonS3ConfigKey;

use crate::store::s3_builder;
use crate::{Location, ObjStoreError, Result, StoreConfig};

/// The IAM actions `init` needs (beyond the brokers' data-path actions, `Op::ALL`).
pub const ADMIN_ACTIONS: [&str; 4] = [
    "s3:ListBucket",
    "s3:CreateBucket",
    "s3:GetLifecycleConfiguration",
    "s3:PutLifecycleConfiguration",
];

/// The ID of Strata's lifecycle rule: how a second run recognises it.
pub const RULE_ID: &str = "strata-abort-incomplete-multipart";

/// What [`init_bucket`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketInit {
    pub bucket: String,
    pub created: bool,
    /// False when the rule was already there.
    pub rule_added: bool,
}

/// Creates the bucket of `cfg` if missing and adds the abort-incomplete-multipart rule (uploads
/// older than `abort_after_days`, under the store's prefix) if it is not there yet. Idempotent.
pub async fn init_bucket(cfg: &StoreConfig, abort_after_days: u32) -> Result<BucketInit> {
    let Location::S3 { bucket, prefix } = Location::parse(&cfg.url)? else {
        return Err(ObjStoreError::Config(format!(
            "{}: only an s3:// store has a bucket to create",
            cfg.url
        )));
    };
    if abort_after_days == 0 {
        return Err(ObjStoreError::Config(
            "abort-incomplete-multipart days must be at least 1".into(),
        ));
    }
    let s3 = S3Admin::new(cfg, &bucket).await?;
    let created = match s3.send("HEAD", "", Vec::new()).await? {
        (200, _) => false,
        (404, _) => {
            s3.create().await?;
            true
        }
        (status, body) => return Err(s3.refused("HEAD bucket", status, &body)),
    };
    let existing = match s3.send("GET", "lifecycle", Vec::new()).await? {
        (200, body) => Some(body),
        (404, _) => None,
        (status, body) => return Err(s3.refused("GetBucketLifecycleConfiguration", status, &body)),
    };
    if existing.as_deref().is_some_and(|b| b.contains(RULE_ID)) {
        return Ok(BucketInit {
            bucket,
            created,
            rule_added: false,
        });
    }
    let body = with_rule(existing.as_deref(), &rule(&prefix, abort_after_days))?;
    match s3.send("PUT", "lifecycle", body.into_bytes()).await? {
        (200, _) => Ok(BucketInit {
            bucket,
            created,
            rule_added: true,
        }),
        (status, body) => Err(s3.refused("PutBucketLifecycleConfiguration", status, &body)),
    }
}

/// Strata's rule: abort multipart uploads under `prefix` after `days`.
fn rule(prefix: &str, days: u32) -> String {
    let prefix = if prefix.is_empty() {
        String::new()
    } else {
        format!("{}/", xml_escape(prefix))
    };
    format!(
        "<Rule><ID>{RULE_ID}</ID><Filter><Prefix>{prefix}</Prefix></Filter><Status>Enabled</Status>\
         <AbortIncompleteMultipartUpload><DaysAfterInitiation>{days}</DaysAfterInitiation>\
         </AbortIncompleteMultipartUpload></Rule>"
    )
}

/// The lifecycle configuration to PUT: `existing` with `rule` added before its closing tag
/// (its other rules kept as they are), or a new configuration holding only `rule`.
fn with_rule(existing: Option<&str>, rule: &str) -> Result<String> {
    const CLOSE: &str = "</LifecycleConfiguration>";
    let Some(doc) = existing.filter(|d| d.contains("<Rule>")) else {
        return Ok(format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
             <LifecycleConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">{rule}{CLOSE}"
        ));
    };
    let at = doc.rfind(CLOSE).ok_or_else(|| {
        ObjStoreError::Other(format!(
            "unreadable lifecycle configuration from the object store: {doc}"
        ))
    })?;
    Ok(format!("{}{rule}{}", &doc[..at], &doc[at..]))
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The text of `<Code>` in an S3 error body.
fn error_code(body: &str) -> &str {
    body.split_once("<Code>")
        .and_then(|(_, rest)| rest.split_once("</Code>"))
        .map_or("", |(code, _)| code)
}

/// Signed bucket-level requests to one bucket.
struct S3Admin {
    http: reqwest::Client,
    /// `https://host[/bucket]` without a trailing slash.
    bucket_url: String,
    bucket: String,
    region: String,
    credentials: Credentials,
    endpoint: String,
}

impl S3Admin {
    async fn new(cfg: &StoreConfig, bucket: &str) -> Result<S3Admin> {
        let builder = s3_builder(cfg, bucket).with_allow_http(cfg.allow_http);
        let region = (builder.get_config_value(&AmazonS3ConfigKey::Region))
            .unwrap_or_else(|| "us-east-1".into());
        let endpoint = builder.get_config_value(&AmazonS3ConfigKey::Endpoint);
        let s3 = builder
            .build()
            .map_err(|e| ObjStoreError::Config(e.to_string()))?;
        let credential = s3.credentials().get_credential().await.map_err(|e| {
            ObjStoreError::AccessDenied(format!(
                "no credentials: {e} (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, \
                 object_store_access_key_id, or run with an instance role)"
            ))
        })?;
        let credentials = Credentials::new(
            &credential.key_id,
            &credential.secret_key,
            credential.token.clone(),
            None,
            "strata",
        );
        let (bucket_url, endpoint) = match endpoint {
            Some(e) if cfg.virtual_hosted_style => {
                let url = url::Url::parse(&e)
                    .map_err(|err| ObjStoreError::Config(format!("endpoint {e}: {err}")))?;
                let host = url.host_str().unwrap_or_default();
                let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
                (format!("{}://{bucket}.{host}{port}", url.scheme()), e)
            }
            Some(e) => (format!("{}/{bucket}", e.trim_end_matches('/')), e),
            None => (
                format!("https://{bucket}.s3.{region}.amazonaws.com"),
                format!("https://s3.{region}.amazonaws.com"),
            ),
        };
        if bucket_url.starts_with("http://") && !cfg.allow_http {
            return Err(ObjStoreError::Config(format!(
                "endpoint {endpoint} is plain HTTP: set object_store_allow_http = true"
            )));
        }
        let http = reqwest::Client::builder()
            .timeout(cfg.request_timeout)
            .connect_timeout(cfg.connect_timeout)
            .build()
            .map_err(|e| ObjStoreError::Config(e.to_string()))?;
        Ok(S3Admin {
            http,
            bucket_url,
            bucket: bucket.to_string(),
            region,
            credentials,
            endpoint,
        })
    }

    /// Creates the bucket in the configured region.
    async fn create(&self) -> Result<()> {
        // us-east-1 is S3's default and refuses to be named as a constraint.
        let body = if self.region == "us-east-1" {
            Vec::new()
        } else {
            format!(
                "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
                 <LocationConstraint>{}</LocationConstraint></CreateBucketConfiguration>",
                xml_escape(&self.region)
            )
            .into_bytes()
        };
        match self.send("PUT", "", body).await? {
            (200, _) => Ok(()),
            // Created by someone else of this account meanwhile: what was wanted.
            (409, body) if error_code(&body) == "BucketAlreadyOwnedByYou" => Ok(()),
            (status, body) => Err(self.refused("CreateBucket", status, &body)),
        }
    }

    /// One signed request to the bucket (`subresource`: "" or e.g. "lifecycle"); the status
    /// and body of whatever the server answered.
    async fn send(&self, method: &str, subresource: &str, body: Vec<u8>) -> Result<(u16, String)> {
        let url = if subresource.is_empty() {
            format!("{}/", self.bucket_url)
        } else {
            format!("{}/?{subresource}", self.bucket_url)
        };
        let parsed = url::Url::parse(&url).map_err(|e| ObjStoreError::Config(e.to_string()))?;
        let host = match parsed.port() {
            Some(p) => format!("{}:{p}", parsed.host_str().unwrap_or_default()),
            None => parsed.host_str().unwrap_or_default().to_string(),
        };
        let mut headers = vec![("host".to_string(), host)];
        if !body.is_empty() {
            // PutBucketLifecycleConfiguration requires an integrity header; Content-MD5 is
            // the one every S3 server (MinIO included) accepts.
            let md5 = base64::engine::general_purpose::STANDARD.encode(Md5::digest(&body));
            headers.push(("content-md5".to_string(), md5));
            headers.push(("content-type".to_string(), "application/xml".to_string()));
        }
        let identity = self.credentials.clone().into();
        let mut settings = SigningSettings::default();
        settings.payload_checksum_kind = aws_sigv4::http_request::PayloadChecksumKind::XAmzSha256;
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("s3")
            .time(SystemTime::now())
            .settings(settings)
            .build()
            .map_err(|e| ObjStoreError::Config(format!("signing: {e}")))?
            .into();
        let signable = SignableRequest::new(
            method,
            url.as_str(),
            headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            SignableBody::Bytes(&body),
        )
        .map_err(|e| ObjStoreError::Config(format!("signing: {e}")))?;
        let (signed, _) = sign(signable, &params)
            .map_err(|e| ObjStoreError::Config(format!("signing: {e}")))?
            .into_parts();
        let method = reqwest::Method::from_bytes(method.as_bytes())
            .map_err(|e| ObjStoreError::Config(e.to_string()))?;
        let mut request = self.http.request(method, url.as_str());
        for (k, v) in headers.iter().filter(|(k, _)| k != "host") {
            request = request.header(k.as_str(), v.as_str());
        }
        for (k, v) in signed.headers() {
            request = request.header(k, v);
        }
        let response = request.body(body).send().await.map_err(|e| {
            ObjStoreError::Unavailable(format!(
                "cannot reach {} ({e}): check object_store_endpoint and that the server is up",
                self.endpoint
            ))
        })?;
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        Ok((status, text))
    }

    /// The error for an answer `op` did not expect, with what to do about it.
    fn refused(&self, op: &str, status: u16, body: &str) -> ObjStoreError {
        let code = error_code(body);
        let code = if code.is_empty() {
            format!("HTTP {status}")
        } else {
            code.to_string()
        };
        match (status, code.as_str()) {
            (403, _) | (_, "InvalidAccessKeyId" | "SignatureDoesNotMatch") => {
                ObjStoreError::AccessDenied(format!(
                    "{op} on bucket '{}': {code} (check the credentials; this command needs {})",
                    self.bucket,
                    ADMIN_ACTIONS.join(", ")
                ))
            }
            (301, _) | (_, "PermanentRedirect" | "AuthorizationHeaderMalformed") => {
                ObjStoreError::Config(format!(
                    "{op}: bucket '{}' is in another region than {} ({code}): set object_store_region",
                    self.bucket, self.region
                ))
            }
            (409, "BucketAlreadyExists") => ObjStoreError::Config(format!(
                "bucket name '{}' is taken by another account: choose another bucket",
                self.bucket
            )),
            (500..=599, _) => ObjStoreError::Unavailable(format!("{op}: {code}")),
            _ => ObjStoreError::Other(format!("{op} on bucket '{}': {code}", self.bucket)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_is_added_beside_existing_rules_never_over_them() {
        let ours = rule("cluster-1", 2);
        assert!(ours.contains("<Prefix>cluster-1/</Prefix>"), "{ours}");
        assert!(ours.contains("<DaysAfterInitiation>2</DaysAfterInitiation>"));
        assert!(rule("", 1).contains("<Prefix></Prefix>"));
        assert!(rule("a&b", 1).contains("<Prefix>a&amp;b/</Prefix>"));

        let fresh = with_rule(None, &ours).unwrap();
        assert!(fresh.starts_with("<?xml") && fresh.ends_with("</LifecycleConfiguration>"));
        assert_eq!(fresh.matches("<Rule>").count(), 1);

        let theirs = "<LifecycleConfiguration><Rule><ID>expire-logs</ID><Status>Enabled</Status></Rule></LifecycleConfiguration>";
        let merged = with_rule(Some(theirs), &ours).unwrap();
        assert!(merged.contains("<ID>expire-logs</ID>") && merged.contains(RULE_ID));
        assert!(merged.ends_with("</Rule></LifecycleConfiguration>"));
        assert!(with_rule(Some("<Rule>garbage"), &ours).is_err());
    }

    #[test]
    fn s3_error_codes_are_read_from_the_body() {
        let body =
            "<?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code><Message>x</Message></Error>";
        assert_eq!(error_code(body), "NoSuchBucket");
        assert_eq!(error_code(""), "");
    }

    #[tokio::test]
    async fn only_an_s3_store_has_a_bucket() {
        let cfg = StoreConfig::new("file:///tmp/x");
        let err = init_bucket(&cfg, 1).await.unwrap_err();
        assert!(err.to_string().contains("only an s3:// store"), "{err}");
        let cfg = StoreConfig::new("s3://b/p");
        assert!(init_bucket(&cfg, 0).await.is_err());
    }
}
