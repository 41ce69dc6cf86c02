//! SASL mechanisms, both sides, with no I/O: PLAIN (RFC 4616), SCRAM-SHA-256/512
//! (RFC 5802) and OAUTHBEARER with JWTs (RFC 7628, RFC 7519). The broker's security subsystem drives the server side per connection; the
//! broker's own client (`protocol::client`) and the CLI drive the client side.

pub mod oauthbearer;
pub mod plain;
pub mod scram;

/// Why an exchange failed. The messages are for logs and the audit trail: they never contain
/// what the peer sent (a password may be in it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaslError {
    /// The peer's message does not follow the mechanism.
    #[error("malformed SASL message: {0}")]
    Malformed(&'static str),
    /// Well-formed, but the credentials do not check out.
    #[error("authentication failed: {0}")]
    Failed(&'static str),
    /// The server answered with an error (client side).
    #[error("the server refused: {0}")]
    Refused(String),
}
