//! How this broker reaches the others: on the inter-broker listener's protocol, with its own
//! certificate over TLS and the inter-broker SASL credentials over SASL, for replica fetches,
//! transaction markers and KIP-890 checks (the Kafka port), and with mutual TLS on the raft
//! port when `raft_security_protocol = SSL`.
//!
//! Invariants:
//! - the TLS files are read again for every new connection, so a rotated certificate (or CA)
//!   is used from the next connection on, as the listeners use theirs;
//! - the password never leaves [`SaslCredentials`], whose `Debug` omits it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kafka_protocol::protocol::Request;

use super::error::SecurityError;
use crate::config::BrokerConfig;
use crate::protocol::client::{Client, ClientError, ClientSecurity, SaslCredentials};
use crate::tls::{self, ClientAuth, TlsFiles};

/// A connection to another broker's inter-broker listener at `addr`, secured as it needs.
pub async fn connect(
    cfg: &BrokerConfig,
    addr: &str,
    client_id: &str,
    timeout: Duration,
    max_response: usize,
) -> Result<Client, ClientError> {
    let security =
        client_security(cfg).map_err(|e| ClientError::Io(std::io::Error::other(e.to_string())))?;
    Client::connect_secure(addr, client_id, timeout, max_response, &security).await
}

/// One cached connection to each other broker, one call at a time on each, made anew after a
/// failure: for the calls a broker makes often to whichever broker leads something (share
/// state, dead letters).
pub struct Peers {
    client_id: String,
    timeout: Duration,
    max_response: usize,
    conns: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<Option<Client>>>>>,
}

impl Peers {
    /// Calls time out after `timeout`; a response larger than `max_response` is refused.
    pub fn new(client_id: String, timeout: Duration, max_response: usize) -> Peers {
        Peers {
            client_id,
            timeout,
            max_response,
            conns: Mutex::default(),
        }
    }

    /// Sends `req` (at `version`) to broker `peer`, reached at `addr` when no connection to it
    /// is open; why not, as text.
    pub async fn call<R: Request>(
        &self,
        cfg: &BrokerConfig,
        peer: u64,
        addr: Option<String>,
        version: i16,
        req: &R,
    ) -> Result<R::Response, String> {
        let slot = (self.conns.lock().unwrap_or_else(|p| p.into_inner()))
            .entry(peer)
            .or_default()
            .clone();
        let mut conn = slot.lock().await;
        if conn.is_none() {
            let addr = addr.ok_or("not registered")?;
            let c = connect(cfg, &addr, &self.client_id, self.timeout, self.max_response)
                .await
                .map_err(|e| e.to_string())?;
            *conn = Some(c);
        }
        let client = conn.as_mut().ok_or("no connection")?;
        match client.call(version, req).await {
            Ok(r) => Ok(r),
            Err(e) => {
                *conn = None;
                Err(e.to_string())
            }
        }
    }
}

/// The security of a connection to another broker's inter-broker listener.
pub fn client_security(cfg: &BrokerConfig) -> Result<ClientSecurity, SecurityError> {
    let (listeners, inter_broker) = cfg
        .listeners()
        .map_err(|e| SecurityError::Config(e.to_string()))?;
    let Some(protocol) = (listeners.iter())
        .find(|l| l.name == inter_broker)
        .map(|l| l.protocol)
    else {
        return Ok(ClientSecurity::default());
    };
    let tls = if protocol.tls() {
        Some(tls::client_config(&files(cfg)?)?)
    } else {
        None
    };
    let sasl =
        if protocol.sasl() {
            match (
                &cfg.inter_broker_sasl_username,
                &cfg.inter_broker_sasl_password,
            ) {
                (Some(username), Some(password)) => Some(SaslCredentials {
                    mechanism: cfg.sasl_mechanism_inter_broker_protocol.clone(),
                    username: username.clone(),
                    password: password.clone(),
                }),
                _ => return Err(SecurityError::Config(
                    "a SASL inter-broker listener needs inter_broker_sasl_username and _password"
                        .into(),
                )),
            }
        } else {
            None
        };
    Ok(ClientSecurity { tls, sasl })
}

/// A client of the other brokers' admin ports over HTTPS: it trusts `ssl_ca_location` and
/// presents this broker's certificate, as a port requiring client certificates asks.
pub fn admin_client_tls(cfg: &BrokerConfig) -> Result<Arc<rustls::ClientConfig>, SecurityError> {
    Ok(tls::client_config(&files(cfg)?)?)
}

/// The raft port's TLS, if `raft_security_protocol = SSL`: the server configuration requires
/// a client certificate `ssl_ca_location` signed, the client presents this broker's.
pub fn raft_tls(cfg: &BrokerConfig) -> Option<strata_metadata::RaftTls> {
    if cfg.raft_security_protocol != "SSL" {
        return None;
    }
    let server_cfg = cfg.clone();
    let client_cfg = cfg.clone();
    let io = |e: SecurityError| std::io::Error::other(e.to_string());
    Some(strata_metadata::RaftTls {
        server: Arc::new(move || {
            let files = TlsFiles {
                client_auth: ClientAuth::Required,
                ..files(&server_cfg).map_err(io)?
            };
            tls::server_config(&files).map_err(|e| io(e.into()))
        }),
        client: Arc::new(move || {
            tls::client_config(&files(&client_cfg).map_err(io)?).map_err(|e| io(e.into()))
        }),
    })
}

fn files(cfg: &BrokerConfig) -> Result<TlsFiles, SecurityError> {
    Ok(TlsFiles {
        certificate: cfg.ssl_certificate_location.clone(),
        key: cfg.ssl_key_location.clone(),
        ca: cfg.ssl_ca_location.clone(),
        client_auth: ClientAuth::None,
        min_version: cfg
            .ssl_min_version()
            .map_err(|e| SecurityError::Config(e.to_string()))?,
    })
}
