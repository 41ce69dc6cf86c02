//! SaslAuthenticate: one step of the exchange the handshake chose. A refusal is answered,
//! then the connection closes (`Handled::ThenClose`).

use kafka_protocol::messages::{SaslAuthenticateRequest, SaslAuthenticateResponse};

use super::reply::str_bytes;
use crate::broker::Broker;
use crate::security::connection::AuthStep;
use crate::security::Connection;

/// The response, and whether the connection ends with it.
pub fn handle(
    broker: &Broker,
    req: SaslAuthenticateRequest,
    conn: &mut Connection,
) -> (SaslAuthenticateResponse, bool) {
    match conn.authenticate(
        &broker.security,
        &req.auth_bytes,
        broker.node.clock.instant(),
    ) {
        Ok(AuthStep::Continue(msg)) => (
            SaslAuthenticateResponse::default().with_auth_bytes(msg.into()),
            false,
        ),
        Ok(AuthStep::Done {
            response,
            session_lifetime_ms,
        }) => (
            SaslAuthenticateResponse::default()
                .with_auth_bytes(response.into())
                .with_session_lifetime_ms(session_lifetime_ms),
            false,
        ),
        Err(refusal) => (
            SaslAuthenticateResponse::default()
                .with_error_code(refusal.code.code())
                .with_error_message(Some(str_bytes(refusal.message))),
            true,
        ),
    }
}
