//! The other brokers' admin ports, for the views that need every broker's part of the
//! cluster: a group's lag is sampled by its coordinator, a partition's offsets and local bytes
//! are its leader's, its records are read where it is hosted. Each broker registers its admin
//! address with the quorum (`BrokerInfo::admin`); a view asks the brokers it needs at once,
//! each call bounded by [`CALL_TIMEOUT`] and [`MAX_ANSWER`], on the `/v1/local/...` endpoints
//! that answer from the asked broker alone (so a question is never passed on again).
//!
//! A broker that does not answer is named in the view with why ([`Unanswered`]), never
//! silently left out of a sum. With `admin_security_protocol = SSL` the calls are HTTPS,
//! checked against `ssl_ca_location` and presenting this broker's certificate, as the other
//! brokers' admin ports may require one.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::config::BrokerConfig;
use crate::node::Node;

/// One call to another broker's admin port.
const CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// The largest answer read from another broker.
const MAX_ANSWER: usize = 16 << 20;

/// A broker a view asked that did not answer, and why.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Unanswered {
    pub broker: u64,
    pub error: String,
}

pub struct AdminPeers {
    client: reqwest::Client,
    scheme: &'static str,
}

impl AdminPeers {
    pub fn new(cfg: &BrokerConfig) -> Result<AdminPeers, String> {
        let tls = cfg.admin_tls().map_err(|e| e.to_string())?;
        let mut builder = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none());
        if tls && cfg.ssl_ca_location.is_some() {
            let config = crate::security::inter_broker::admin_client_tls(cfg)
                .map_err(|e| format!("the admin port's TLS client: {e}"))?;
            builder = builder.tls_backend_preconfigured((*config).clone());
        }
        let client = builder.build().map_err(|e| e.to_string())?;
        Ok(AdminPeers {
            client,
            scheme: if tls { "https" } else { "http" },
        })
    }

    /// `GET path` on each of `brokers` at once: their JSON answers by broker, and those that
    /// did not answer. `path` is a `/v1/local/...` path with its query.
    pub async fn ask(
        &self,
        node: &Node,
        brokers: impl IntoIterator<Item = u64>,
        path: &str,
    ) -> (Vec<(u64, Value)>, Vec<Unanswered>) {
        let state = node.metadata.state();
        let calls = brokers.into_iter().map(|id| {
            let addr = (state.brokers.get(&id))
                .filter(|b| !b.fenced)
                .map(|b| b.admin.clone());
            async move {
                let answer = match addr {
                    None => Err("not a live broker".to_string()),
                    Some(None) => Err("registered no admin address (an older version)".into()),
                    Some(Some(addr)) => self.get(&addr, path).await,
                };
                (id, answer)
            }
        });
        let (mut answers, mut unanswered) = (Vec::new(), Vec::new());
        for (broker, answer) in futures::future::join_all(calls).await {
            match answer {
                Ok(v) => answers.push((broker, v)),
                Err(error) => {
                    tracing::debug!(broker, %error, path, "admin view: a broker did not answer");
                    unanswered.push(Unanswered { broker, error });
                }
            }
        }
        (answers, unanswered)
    }

    /// One broker's answer, relayed whole (status and body): for a request only it can answer
    /// (a partition's records, read where it is hosted).
    pub async fn relay(
        &self,
        node: &Node,
        broker: u64,
        path: &str,
    ) -> Result<(u16, String), String> {
        let addr = (node.metadata.state().brokers.get(&broker))
            .and_then(|b| b.admin.clone())
            .ok_or_else(|| format!("broker {broker} registered no admin address"))?;
        let (status, body) = self.fetch(&addr, path).await?;
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }

    async fn get(&self, addr: &str, path: &str) -> Result<Value, String> {
        let (status, body) = self.fetch(addr, path).await?;
        if status != 200 {
            let why = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
            return Err(format!("answered {status}: {}", why.trim_end()));
        }
        serde_json::from_slice(&body).map_err(|e| format!("answered no JSON: {e}"))
    }

    /// Status and body, the body read as it arrives and refused past [`MAX_ANSWER`].
    async fn fetch(&self, addr: &str, path: &str) -> Result<(u16, Vec<u8>), String> {
        let url = format!("{}://{addr}{path}", self.scheme);
        let mut response = self
            .client
            .get(&url)
            .send()
            .await
            .map_err(|e| describe(&e))?;
        let status = response.status().as_u16();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| describe(&e))? {
            if body.len() + chunk.len() > MAX_ANSWER {
                return Err(format!("an answer over {MAX_ANSWER} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        Ok((status, body))
    }
}

/// A failed call in words a person reads on the console.
fn describe(e: &reqwest::Error) -> String {
    if e.is_timeout() {
        format!("no answer within {CALL_TIMEOUT:?}")
    } else if e.is_connect() {
        "cannot connect".to_string()
    } else {
        e.to_string()
    }
}
