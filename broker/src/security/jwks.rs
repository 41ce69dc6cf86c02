//! The keys OAUTHBEARER tokens are verified with: a JSON Web Key Set read from a file or an
//! HTTPS endpoint (`sasl_oauthbearer_jwks_endpoint_url`), refreshed every
//! `sasl_oauthbearer_jwks_endpoint_refresh_ms`. A refresh that fails keeps the keys in use and
//! says why; identity providers rotate keys by publishing the new one before signing with it.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use crate::sasl::oauthbearer::{self, Key};

/// How long one fetch of the key set may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest key set accepted.
const MAX_JWKS_BYTES: usize = 1 << 20;

pub struct Jwks {
    url: String,
    keys: RwLock<Arc<Vec<Key>>>,
}

impl Jwks {
    /// Reads the key set at `url` (`file:///path`, a path, or `https://...`).
    pub async fn load(url: &str) -> Result<Jwks, String> {
        let keys = fetch(url).await?;
        Ok(Jwks {
            url: url.to_string(),
            keys: RwLock::new(Arc::new(keys)),
        })
    }

    pub fn keys(&self) -> Arc<Vec<Key>> {
        self.keys
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Reads the key set again; the old keys stay when it fails.
    pub async fn refresh(&self) -> Result<usize, String> {
        let keys = fetch(&self.url).await?;
        let n = keys.len();
        *self.keys.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(keys);
        Ok(n)
    }
}

async fn fetch(url: &str) -> Result<Vec<Key>, String> {
    let body = if url.starts_with("https://") || url.starts_with("http://") {
        let response = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .build()
            .map_err(|e| format!("{url}: {e}"))?
            .get(url)
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|e| format!("{url}: {e}"))?;
        if response
            .content_length()
            .is_some_and(|n| n > MAX_JWKS_BYTES as u64)
        {
            return Err(format!("{url}: a key set over {MAX_JWKS_BYTES} bytes"));
        }
        let body = response.bytes().await.map_err(|e| format!("{url}: {e}"))?;
        body.to_vec()
    } else {
        let path = url.strip_prefix("file://").unwrap_or(url).to_string();
        tokio::task::spawn_blocking(move || std::fs::read(&path))
            .await
            .map_err(|e| format!("{url}: {e}"))?
            .map_err(|e| format!("{url}: {e}"))?
    };
    if body.len() > MAX_JWKS_BYTES {
        return Err(format!("{url}: a key set over {MAX_JWKS_BYTES} bytes"));
    }
    oauthbearer::parse_jwks(&body).map_err(|e| format!("{url}: {e}"))
}
