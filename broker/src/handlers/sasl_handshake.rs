//! SaslHandshake (v1): the client names its mechanism; the answer lists those offered.

use kafka_protocol::messages::{SaslHandshakeRequest, SaslHandshakeResponse};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::error::ErrorCode;
use crate::security::Connection;

pub fn handle(
    broker: &Broker,
    req: SaslHandshakeRequest,
    conn: &mut Connection,
) -> SaslHandshakeResponse {
    let (offered, outcome) = conn.handshake(&broker.security, req.mechanism.as_str());
    let code = match outcome {
        Ok(()) => ErrorCode::None,
        Err(refusal) => {
            tracing::debug!(peer = %conn.peer, message = %refusal.message, "SASL handshake refused");
            refusal.code
        }
    };
    SaslHandshakeResponse::default()
        .with_error_code(code.code())
        .with_mechanisms(offered.into_iter().map(str_bytes).collect())
}
