//! Delegation tokens (KIP-48): CreateDelegationToken, RenewDelegationToken,
//! ExpireDelegationToken, DescribeDelegationToken. Strata issues none: it answers as a Kafka
//! cluster without `delegation.token.secret.key` does — DELEGATION_TOKEN_REQUEST_NOT_ALLOWED on
//! a connection that is not authenticated (PLAINTEXT, or TLS without a client certificate),
//! DELEGATION_TOKEN_AUTH_DISABLED otherwise — so admin tools get Kafka's own "tokens are not
//! enabled" error rather than a closed connection.

use kafka_protocol::messages::{
    CreateDelegationTokenRequest, CreateDelegationTokenResponse, DescribeDelegationTokenRequest,
    DescribeDelegationTokenResponse, ExpireDelegationTokenRequest, ExpireDelegationTokenResponse,
    RenewDelegationTokenRequest, RenewDelegationTokenResponse,
};

use crate::error::ErrorCode;
use crate::security::Connection;

/// Why no token request can succeed on `conn`.
fn refusal(conn: &Connection) -> i16 {
    if conn.authenticated() {
        ErrorCode::DelegationTokenAuthDisabled.code()
    } else {
        ErrorCode::DelegationTokenRequestNotAllowed.code()
    }
}

pub fn create(
    _req: CreateDelegationTokenRequest,
    conn: &Connection,
) -> CreateDelegationTokenResponse {
    CreateDelegationTokenResponse::default().with_error_code(refusal(conn))
}

pub fn renew(_req: RenewDelegationTokenRequest, conn: &Connection) -> RenewDelegationTokenResponse {
    RenewDelegationTokenResponse::default().with_error_code(refusal(conn))
}

pub fn expire(
    _req: ExpireDelegationTokenRequest,
    conn: &Connection,
) -> ExpireDelegationTokenResponse {
    ExpireDelegationTokenResponse::default().with_error_code(refusal(conn))
}

pub fn describe(
    _req: DescribeDelegationTokenRequest,
    conn: &Connection,
) -> DescribeDelegationTokenResponse {
    DescribeDelegationTokenResponse::default().with_error_code(refusal(conn))
}
