//! Who a connection is: TLS on the listeners that speak it, SASL authentication against the
//! credentials in the metadata quorum (SCRAM) or a development file (PLAIN), and the principal
//! every later decision is made for.
//!
//! Invariants:
//! - a connection on a SASL listener is served nothing but ApiVersions, SaslHandshake and
//!   SaslAuthenticate before it authenticates (see [`connection::Connection::admit`]);
//! - a failed authentication answers SASL_AUTHENTICATION_FAILED with a message that says
//!   which mechanism failed and never why in detail (an unknown user and a wrong password look
//!   the same), and the connection is closed after it;
//! - no secret (password, salted password, token, key) is logged, counted or put in an error;
//! - credentials are read from the latest applied metadata state at each authentication, so a
//!   credential change applies to the next authentication on every broker;
//! - the inter-broker user (`inter_broker_sasl_username`) is known from the configuration
//!   before any credential is in the quorum, so brokers reach each other from their first
//!   start; its configured password wins over a quorum credential of the same name.

pub mod audit;
pub mod authorizer;
pub mod connection;
mod error;
pub mod inter_broker;
mod jwks;
mod metrics;
pub mod principal;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::config::listeners::SecurityProtocol;
use crate::config::BrokerConfig;
use crate::node::Node;
use crate::sasl::{oauthbearer, scram, SaslError};
use crate::tls::{ClientAuth, ReloadingServer, TlsFiles};

pub use authorizer::{Access, Authorizer};
pub use connection::Connection;
pub use error::SecurityError;
use metrics::SecurityMetrics;

/// How often TLS files are checked for a change.
const TLS_RELOAD_INTERVAL: Duration = Duration::from_secs(10);

/// A SASL mechanism the broker offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    Plain,
    Scram(scram::Mechanism),
    OAuthBearer,
}

impl Mechanism {
    pub fn from_name(name: &str) -> Option<Mechanism> {
        match name {
            "PLAIN" => Some(Mechanism::Plain),
            "OAUTHBEARER" => Some(Mechanism::OAuthBearer),
            other => scram::Mechanism::from_name(other).map(Mechanism::Scram),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::Scram(m) => m.name(),
            Mechanism::OAuthBearer => "OAUTHBEARER",
        }
    }
}

/// A Kafka principal, `User:name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Principal(Arc<str>);

impl Principal {
    pub const ANONYMOUS_NAME: &'static str = "ANONYMOUS";

    pub fn user(name: &str) -> Principal {
        Principal(format!("User:{name}").into())
    }

    /// Who an unauthenticated (PLAINTEXT, or SSL without a client certificate) client is.
    pub fn anonymous() -> Principal {
        Principal::user(Principal::ANONYMOUS_NAME)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The inter-broker user, from the configuration: its name, password and SCRAM credentials
/// (salted at start).
struct InterBrokerUser {
    name: String,
    password: String,
    credentials: Vec<(scram::Mechanism, scram::Credential)>,
}

/// The security subsystem: TLS configuration and authentication.
pub struct Security {
    node: Arc<Node>,
    tls: Option<Arc<ReloadingServer>>,
    mechanisms: Vec<Mechanism>,
    /// PLAIN's users from `sasl_plain_users_file`; without it PLAIN checks SCRAM credentials.
    plain_users: Option<BTreeMap<String, String>>,
    reauth: Option<Duration>,
    /// `ssl_principal_mapping_rules`: client certificate subject → principal name.
    principal_rules: principal::MappingRules,
    /// OAUTHBEARER: the keys tokens are signed with, and what their claims must say.
    oauth: Option<(Arc<jwks::Jwks>, oauthbearer::Expectations)>,
    authorizer: Authorizer,
    inter_broker: Option<InterBrokerUser>,
    audit: Arc<audit::AuditLog>,
    metrics: Arc<SecurityMetrics>,
}

impl Security {
    /// Reads the TLS material, the OAUTHBEARER key set and the SASL settings the configured
    /// listeners need.
    pub async fn new(node: Arc<Node>) -> Result<Arc<Security>, SecurityError> {
        let cfg = &node.config;
        let (listeners, _) = cfg
            .listeners()
            .map_err(|e| SecurityError::Config(e.to_string()))?;
        let admin_tls = cfg
            .admin_tls()
            .map_err(|e| SecurityError::Config(e.to_string()))?;
        let tls = if admin_tls || listeners.iter().any(|l| l.protocol.tls()) {
            Some(Arc::new(ReloadingServer::load(tls_files(cfg)?)?))
        } else {
            None
        };
        let mechanisms = sasl_mechanisms(cfg)?;
        let plain_users = match &cfg.sasl_plain_users_file {
            Some(path) => Some(read_plain_users(path)?),
            None => None,
        };
        let oauth = if mechanisms.contains(&Mechanism::OAuthBearer) {
            let url = cfg
                .sasl_oauthbearer_jwks_endpoint_url
                .as_deref()
                .ok_or_else(|| {
                    SecurityError::Config(
                        "OAUTHBEARER needs sasl_oauthbearer_jwks_endpoint_url (a JWKS file or URL)"
                            .into(),
                    )
                })?;
            let keys = jwks::Jwks::load(url)
                .await
                .map_err(|e| SecurityError::Config(format!("OAUTHBEARER key set {e}")))?;
            let expect = oauthbearer::Expectations {
                issuer: cfg.sasl_oauthbearer_expected_issuer.clone(),
                audience: (cfg.sasl_oauthbearer_expected_audience.as_deref())
                    .map(|a| a.split(',').map(|s| s.trim().to_string()).collect())
                    .unwrap_or_default(),
                subject_claim: cfg.sasl_oauthbearer_sub_claim_name.clone(),
                clock_skew_s: cfg.sasl_oauthbearer_clock_skew_seconds,
            };
            Some((Arc::new(keys), expect))
        } else {
            None
        };
        let principal_rules = principal::MappingRules::parse(&cfg.ssl_principal_mapping_rules)
            .map_err(|e| SecurityError::Config(format!("ssl_principal_mapping_rules: {e}")))?;
        let metrics = Arc::new(SecurityMetrics::default());
        node.metrics.register(|r| metrics.register(r));
        let audit = Arc::new(audit::AuditLog::open(cfg, node.clock.clone())?);
        let authorizer = Authorizer::new(node.clone(), metrics.clone(), audit.clone())?;
        let inter_broker = match (
            &cfg.inter_broker_sasl_username,
            &cfg.inter_broker_sasl_password,
        ) {
            (Some(user), Some(password)) => {
                let salt = scram::random(32);
                let credentials = (scram::Mechanism::ALL.iter())
                    .map(|m| {
                        let salted = m.salted_password(password, &salt, scram::MIN_ITERATIONS);
                        (*m, m.credential(&salted, &salt, scram::MIN_ITERATIONS))
                    })
                    .collect();
                Some(InterBrokerUser {
                    name: user.clone(),
                    password: password.clone(),
                    credentials,
                })
            }
            _ => None,
        };
        Ok(Arc::new(Security {
            authorizer,
            audit,
            inter_broker,
            tls,
            mechanisms,
            plain_users,
            reauth: (cfg.connections_max_reauth_ms > 0)
                .then(|| Duration::from_millis(cfg.connections_max_reauth_ms)),
            principal_rules,
            oauth,
            metrics,
            node,
        }))
    }

    /// The TLS acceptor for a new connection on a TLS listener: SSL listeners verify client
    /// certificates as `ssl_client_auth` says, SASL_SSL listeners ask for none.
    pub fn tls_acceptor(&self, protocol: SecurityProtocol) -> Option<tokio_rustls::TlsAcceptor> {
        let config = self.tls.as_ref()?.config(protocol == SecurityProtocol::Ssl);
        Some(tokio_rustls::TlsAcceptor::from(config))
    }

    /// How often the TLS files are checked for a change ([`Security::reload_tls`]); `None`
    /// without TLS listeners.
    pub fn tls_reload_interval(&self) -> Option<Duration> {
        self.tls.is_some().then_some(TLS_RELOAD_INTERVAL)
    }

    /// Reloads the TLS certificate and key if their files changed (a periodic job, see
    /// `housekeeping.rs`); a change that cannot be used keeps the previous ones.
    pub async fn reload_tls(&self) {
        let Some(tls) = self.tls.clone() else { return };
        match tokio::task::spawn_blocking(move || tls.reload_if_changed()).await {
            Ok(Ok(true)) => {
                self.metrics.tls_reloaded("ok");
                tracing::info!("TLS certificate and key reloaded");
            }
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                self.metrics.tls_reloaded("error");
                tracing::error!(error = %e, "TLS files changed but cannot be used; keeping the previous ones");
            }
            Err(e) => tracing::error!(error = %e, "TLS reload task failed"),
        }
    }

    /// `sasl_oauthbearer_jwks_endpoint_refresh_ms`; `None` without OAUTHBEARER.
    pub fn jwks_refresh_interval(&self) -> Option<Duration> {
        self.oauth.as_ref().map(|_| {
            Duration::from_millis(self.node.config.sasl_oauthbearer_jwks_endpoint_refresh_ms)
        })
    }

    /// Reads the OAUTHBEARER key set again (a periodic job); a failure keeps the keys in use.
    pub async fn refresh_jwks(&self) {
        let Some((jwks, _)) = self.oauth.clone() else {
            return;
        };
        match jwks.refresh().await {
            Ok(keys) => tracing::debug!(keys, "OAUTHBEARER key set refreshed"),
            Err(e) => {
                tracing::warn!(error = %e, "cannot refresh the OAUTHBEARER key set; keeping the keys in use")
            }
        }
    }

    /// OAUTHBEARER: the token of a client's message, validated now.
    fn check_oauth(&self, msg: &[u8]) -> Result<oauthbearer::Validated, SaslError> {
        let now_s = self.node.clock.now_ms().div_euclid(1000);
        let (jwks, expect) = self
            .oauth
            .as_ref()
            .ok_or(SaslError::Failed("OAUTHBEARER is not configured"))?;
        let token = oauthbearer::token(msg)?;
        oauthbearer::validate(token, &jwks.keys(), expect, now_s)
    }

    /// The principal of a client certificate (mTLS on an SSL listener): its subject, mapped by
    /// `ssl_principal_mapping_rules`. `Ok(None)` without a certificate; `Err` for one whose
    /// subject no rule maps.
    pub fn certificate_principal(
        &self,
        certificate: Option<&rustls::pki_types::CertificateDer<'_>>,
    ) -> Result<Option<Principal>, String> {
        let Some(der) = certificate else {
            return Ok(None);
        };
        let cert = webpki::EndEntityCert::try_from(der)
            .map_err(|e| format!("unreadable client certificate: {e}"))?;
        let dn = principal::distinguished_name(cert.subject())
            .ok_or("a client certificate subject that is not a readable name")?;
        let name = self
            .principal_rules
            .apply(&dn)
            .ok_or_else(|| format!("no ssl_principal_mapping_rules rule maps '{dn}'"))?;
        Ok(Some(Principal::user(&name)))
    }

    pub fn authorizer(&self) -> &Authorizer {
        &self.authorizer
    }

    /// Records an authentication's outcome (`principal` on success, `reason` on failure).
    pub(crate) fn audit_authentication(
        &self,
        conn: &Connection,
        mechanism: &str,
        outcome: Result<&Principal, &str>,
    ) {
        let (result, principal, reason) = match outcome {
            Ok(p) => ("success", Some(p.as_str()), None),
            Err(why) => ("failure", None, Some(why)),
        };
        self.audit.record(
            "authentication",
            serde_json::json!({
                "result": result,
                "principal": principal,
                "mechanism": mechanism,
                "client": conn.peer.to_string(),
                "listener": &*conn.listener,
                "reason": reason,
            }),
        );
    }

    pub(crate) fn metrics(&self) -> &SecurityMetrics {
        &self.metrics
    }

    /// Whether `principal` is the inter-broker user (another broker of the cluster).
    pub fn is_inter_broker(&self, principal: &Principal) -> bool {
        self.inter_broker
            .as_ref()
            .is_some_and(|b| principal.as_str().strip_prefix("User:") == Some(b.name.as_str()))
    }

    fn mechanisms(&self) -> &[Mechanism] {
        &self.mechanisms
    }

    /// PLAIN: the file's password if there is a file, else any SCRAM credential of the user.
    fn check_plain(&self, user: &str, password: &str) -> bool {
        if let Some(broker) = &self.inter_broker {
            if broker.name == user {
                return aws_lc_rs::constant_time::verify_slices_are_equal(
                    broker.password.as_bytes(),
                    password.as_bytes(),
                )
                .is_ok();
            }
        }
        if let Some(users) = &self.plain_users {
            return users.get(user).is_some_and(|p| {
                aws_lc_rs::constant_time::verify_slices_are_equal(p.as_bytes(), password.as_bytes())
                    .is_ok()
            });
        }
        let state = self.node.metadata.state();
        let Some(creds) = state.security.scram.get(user) else {
            return false;
        };
        creds.iter().any(|(name, c)| {
            scram::Mechanism::from_name(name).is_some_and(|m| credential(c).matches(m, password))
        })
    }
}

impl scram::Credentials for Security {
    fn scram(&self, user: &str, mechanism: scram::Mechanism) -> Option<scram::Credential> {
        if let Some(broker) = &self.inter_broker {
            if broker.name == user {
                return (broker.credentials.iter())
                    .find(|(m, _)| *m == mechanism)
                    .map(|(_, c)| c.clone());
            }
        }
        let state = self.node.metadata.state();
        state
            .security
            .scram
            .get(user)?
            .get(mechanism.name())
            .map(credential)
    }
}

fn credential(c: &strata_metadata::ScramCredential) -> scram::Credential {
    scram::Credential {
        salt: c.salt.clone(),
        stored_key: c.stored_key.clone(),
        server_key: c.server_key.clone(),
        iterations: c.iterations,
    }
}

/// `sasl_enabled_mechanisms`, each known.
fn sasl_mechanisms(cfg: &BrokerConfig) -> Result<Vec<Mechanism>, SecurityError> {
    cfg.sasl_enabled_mechanisms
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .map(|name| {
            Mechanism::from_name(name).ok_or_else(|| {
                SecurityError::Config(format!(
                    "sasl_enabled_mechanisms: {name} is not PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER"
                ))
            })
        })
        .collect()
}

/// The broker's TLS files, as a server.
fn tls_files(cfg: &BrokerConfig) -> Result<TlsFiles, SecurityError> {
    Ok(TlsFiles {
        certificate: cfg.ssl_certificate_location.clone(),
        key: cfg.ssl_key_location.clone(),
        ca: cfg.ssl_ca_location.clone(),
        client_auth: ClientAuth::parse(&cfg.ssl_client_auth).ok_or_else(|| {
            SecurityError::Config("ssl_client_auth must be none, requested or required".into())
        })?,
        min_version: cfg
            .ssl_min_version()
            .map_err(|e| SecurityError::Config(e.to_string()))?,
    })
}

/// `user:password` lines (`#` comments and blank lines skipped).
fn read_plain_users(path: &Path) -> Result<BTreeMap<String, String>, SecurityError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        SecurityError::Config(format!("sasl_plain_users_file {}: {e}", path.display()))
    })?;
    let mut users = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((user, password)) = line
            .split_once(':')
            .filter(|(u, p)| !u.is_empty() && !p.is_empty())
        else {
            return Err(SecurityError::Config(format!(
                "sasl_plain_users_file {} line {}: expected user:password",
                path.display(),
                i + 1
            )));
        };
        users.insert(user.to_string(), password.to_string());
    }
    Ok(users)
}

/// What a listener's connections start as.
fn initial_principal(protocol: SecurityProtocol) -> Option<Principal> {
    (!protocol.sasl()).then(Principal::anonymous)
}
