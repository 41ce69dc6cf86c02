//! One client connection's identity: its listener, its address, and the SASL exchange that
//! makes it a principal (KIP-43's SaslHandshake then SaslAuthenticate, KIP-152; KIP-368's
//! re-authentication on the same connection).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use kafka_protocol::messages::ApiKey;

use super::{Mechanism, Principal, Security};
use crate::config::listeners::SecurityProtocol;
use crate::error::ErrorCode;
use crate::sasl::{plain, scram, SaslError};

pub struct Connection {
    pub peer: SocketAddr,
    /// As Kafka reports it in DescribeGroups: "/<ip>".
    pub client_host: String,
    /// The client's IP address, as ACL hosts name it.
    host: Arc<str>,
    pub listener: Arc<str>,
    protocol: SecurityProtocol,
    principal: Option<Principal>,
    exchange: Exchange,
    /// KIP-368: past this, the connection must re-authenticate before anything else.
    expires: Option<Instant>,
}

enum Exchange {
    Idle,
    Handshaken(Mechanism),
    Scram(Box<scram::Server>),
}

/// A SaslAuthenticate that went on.
pub enum AuthStep {
    /// More to exchange: send this.
    Continue(Vec<u8>),
    /// Authenticated: send this; the session lasts this long (0: until the connection ends).
    Done {
        response: Vec<u8>,
        session_lifetime_ms: i64,
    },
}

/// A SaslHandshake or SaslAuthenticate refused: answered with this, then the connection closes
/// (for an authentication; a handshake naming an unknown mechanism leaves it open to retry).
#[derive(Debug)]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: String,
}

impl Connection {
    pub fn new(peer: SocketAddr, listener: Arc<str>, protocol: SecurityProtocol) -> Connection {
        Connection {
            peer,
            client_host: format!("/{}", peer.ip()),
            host: peer.ip().to_string().into(),
            listener,
            protocol,
            principal: super::initial_principal(protocol),
            exchange: Exchange::Idle,
            expires: None,
        }
    }

    pub fn protocol(&self) -> SecurityProtocol {
        self.protocol
    }

    /// Whether the client proved who it is: through SASL, or a certificate on a TLS
    /// listener (not the anonymous principal of PLAINTEXT or one-way TLS).
    pub fn authenticated(&self) -> bool {
        self.principal
            .as_ref()
            .is_some_and(|p| *p != Principal::anonymous())
    }

    /// The principal a verified client certificate names (mTLS, on an SSL listener).
    pub fn authenticated_by_certificate(&mut self, principal: Principal) {
        tracing::info!(principal = %principal, peer = %self.peer, listener = %self.listener, "authenticated by client certificate");
        self.principal = Some(principal);
    }

    /// What this connection's principal may do, for one request (decided against the ACLs
    /// applied now). Before authentication only the SASL APIs are served, which need nothing.
    pub fn access(&self, security: &Security) -> super::Access {
        match &self.principal {
            Some(p) => security.authorizer().access(p, &self.host),
            None => super::Access::everything(),
        }
    }

    /// Who the connection is; `None` before a SASL connection authenticates.
    pub fn principal(&self) -> Option<&Principal> {
        self.principal.as_ref()
    }

    /// Whether the connection may send `api` now; `Err` (why) closes it, as Kafka does.
    pub fn admit(&self, api: ApiKey, now: Instant) -> Result<(), &'static str> {
        match api {
            ApiKey::ApiVersions | ApiKey::SaslHandshake | ApiKey::SaslAuthenticate => Ok(()),
            _ if self.principal.is_none() => Err("a request before SASL authentication"),
            _ if !matches!(self.exchange, Exchange::Idle) => {
                Err("a request in the middle of a SASL exchange")
            }
            _ if self.expires.is_some_and(|e| now >= e) => Err(
                "the SASL session expired (connections_max_reauth_ms) without re-authentication",
            ),
            _ => Ok(()),
        }
    }

    /// SaslHandshake: the mechanisms offered, and whether `mechanism` is one of them.
    pub fn handshake(
        &mut self,
        security: &Security,
        mechanism: &str,
    ) -> (Vec<&'static str>, Result<(), Refusal>) {
        let offered: Vec<&'static str> = security.mechanisms().iter().map(|m| m.name()).collect();
        if !self.protocol.sasl() {
            return (
                offered,
                Err(Refusal {
                    code: ErrorCode::IllegalSaslState,
                    message: format!("listener {} is {}, not SASL", self.listener, self.protocol),
                }),
            );
        }
        if !matches!(self.exchange, Exchange::Idle) {
            return (
                offered,
                Err(Refusal {
                    code: ErrorCode::IllegalSaslState,
                    message: "a SaslHandshake in the middle of a SASL exchange".into(),
                }),
            );
        }
        match Mechanism::from_name(mechanism).filter(|m| security.mechanisms().contains(m)) {
            Some(m) => {
                self.exchange = Exchange::Handshaken(m);
                (offered, Ok(()))
            }
            None => {
                security.metrics().authentication(
                    &self.listener,
                    "unknown",
                    "unsupported_mechanism",
                );
                security.audit_authentication(self, mechanism, Err("unsupported mechanism"));
                (
                    offered,
                    Err(Refusal {
                        code: ErrorCode::UnsupportedSaslMechanism,
                        message: format!("SASL mechanism {mechanism:.64} is not enabled"),
                    }),
                )
            }
        }
    }

    /// SaslAuthenticate with the client's `token`.
    pub fn authenticate(
        &mut self,
        security: &Security,
        token: &[u8],
        now: Instant,
    ) -> Result<AuthStep, Refusal> {
        // When the credential itself expires (an OAUTHBEARER token's `exp`), in seconds.
        let mut credential_expires_s = None;
        let (mechanism, outcome) = match std::mem::replace(&mut self.exchange, Exchange::Idle) {
            Exchange::Idle => {
                return Err(self.refuse(
                    security,
                    "none",
                    ErrorCode::IllegalSaslState,
                    "SaslAuthenticate before SaslHandshake".into(),
                ))
            }
            Exchange::Handshaken(Mechanism::Plain) => {
                let outcome = plain::parse(token).and_then(|(user, password)| {
                    if security.check_plain(&user, &password) {
                        Ok(scram::Step::Done {
                            user,
                            response: Vec::new(),
                        })
                    } else {
                        Err(SaslError::Failed("invalid credentials"))
                    }
                });
                (Mechanism::Plain, outcome)
            }
            Exchange::Handshaken(Mechanism::OAuthBearer) => {
                let outcome = security.check_oauth(token).map(|v| {
                    credential_expires_s = Some(v.expires_s);
                    scram::Step::Done {
                        user: v.subject,
                        response: Vec::new(),
                    }
                });
                (Mechanism::OAuthBearer, outcome)
            }
            Exchange::Handshaken(Mechanism::Scram(m)) => {
                let mut server = Box::new(scram::Server::new(m));
                let outcome = server.step(token, security);
                if matches!(outcome, Ok(scram::Step::Continue(_))) {
                    self.exchange = Exchange::Scram(server);
                }
                (Mechanism::Scram(m), outcome)
            }
            Exchange::Scram(mut server) => (
                Mechanism::Scram(server.mechanism()),
                server.step(token, security),
            ),
        };
        let name = mechanism.name();
        match outcome {
            Ok(scram::Step::Continue(msg)) => Ok(AuthStep::Continue(msg)),
            Ok(scram::Step::Done { user, response }) => {
                let principal = Principal::user(&user);
                if self.principal.as_ref().is_some_and(|p| *p != principal) {
                    security.audit_authentication(
                        self,
                        name,
                        Err("a re-authentication as another principal"),
                    );
                    return Err(self.refuse(
                        security,
                        name,
                        ErrorCode::SaslAuthenticationFailed,
                        "a re-authentication may not change the principal".into(),
                    ));
                }
                security
                    .metrics()
                    .authentication(&self.listener, name, "ok");
                tracing::info!(principal = %principal, mechanism = name, peer = %self.peer, listener = %self.listener, "authenticated");
                security.audit_authentication(self, name, Ok(&principal));
                self.principal = Some(principal);
                // KIP-368: with re-authentication on, a session ends at the earlier of
                // connections_max_reauth_ms and the credential's own expiry.
                let lifetime = security.reauth.map(|d| match credential_expires_s {
                    Some(exp) => {
                        let left_ms = (exp * 1000 - security.node.clock.now_ms()).max(1);
                        d.min(std::time::Duration::from_millis(left_ms as u64))
                    }
                    None => d,
                });
                self.expires = lifetime.map(|d| now + d);
                Ok(AuthStep::Done {
                    response,
                    session_lifetime_ms: lifetime.map_or(0, |d| d.as_millis() as i64),
                })
            }
            Err(e) => {
                let message = match &e {
                    SaslError::Failed(_) => format!(
                        "Authentication failed during authentication due to invalid credentials with SASL mechanism {name}"
                    ),
                    other => format!("Authentication failed with SASL mechanism {name}: {other}"),
                };
                tracing::info!(mechanism = name, peer = %self.peer, listener = %self.listener, reason = %e, "authentication failed");
                // The audit log says why (the client is only told that it failed).
                let refusal =
                    self.refuse(security, name, ErrorCode::SaslAuthenticationFailed, message);
                security.audit_authentication(self, name, Err(&e.to_string()));
                Err(refusal)
            }
        }
    }

    fn refuse(
        &mut self,
        security: &Security,
        mechanism: &'static str,
        code: ErrorCode,
        message: String,
    ) -> Refusal {
        self.exchange = Exchange::Idle;
        if code != ErrorCode::SaslAuthenticationFailed {
            security.audit_authentication(self, mechanism, Err(&message));
        }
        security.metrics().authentication(
            &self.listener,
            mechanism,
            if code == ErrorCode::IllegalSaslState {
                "illegal_state"
            } else {
                "failed"
            },
        );
        Refusal { code, message }
    }
}
