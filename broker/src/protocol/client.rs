//! The client side of the Kafka framing, for calls between brokers (a follower's fetches from
//! its leader) and the CLI's admin calls: one request at a time on one connection, each
//! bounded in time and in the size of the response it accepts. A response frame grows with
//! the bytes that arrive, never with the length the peer announces. The connection may be
//! TLS and authenticate with SASL (PLAIN, SCRAM) first ([`ClientSecurity`]).

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::sasl::{plain, scram, SaslError};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("cannot encode the request: {0}")]
    Encode(String),
    #[error("malformed response: {0}")]
    Decode(String),
    #[error("response of {0} bytes, over the limit")]
    TooLarge(usize),
    #[error("the peer closed the connection mid-response")]
    Closed,
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("correlation id {got}, expected {want}")]
    Correlation { got: i32, want: i32 },
    /// The peer answered, but not with what the call needs.
    #[error("{0}")]
    Refused(String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("SASL: {0}")]
    Sasl(#[from] SaslError),
}

/// How a client secures its connections: TLS (with the configuration to verify the server
/// and, for mTLS, present a certificate) and SASL credentials.
#[derive(Clone, Default)]
pub struct ClientSecurity {
    pub tls: Option<Arc<rustls::ClientConfig>>,
    pub sasl: Option<SaslCredentials>,
}

#[derive(Clone)]
pub struct SaslCredentials {
    /// PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    pub mechanism: String,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for SaslCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        write!(f, "{} as {}", self.mechanism, self.username)
    }
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// One connection to a broker.
pub struct Client {
    stream: Box<dyn Stream>,
    correlation: i32,
    client_id: StrBytes,
    timeout: Duration,
    max_response: usize,
    security: ClientSecurity,
}

impl Client {
    /// Connects to `addr`; every call sends `client_id`, waits at most `timeout` and accepts
    /// responses up to `max_response` bytes.
    pub async fn connect(
        addr: &str,
        client_id: &str,
        timeout: Duration,
        max_response: usize,
    ) -> std::io::Result<Client> {
        let stream = TcpStream::connect(addr).await?;
        let _ = stream.set_nodelay(true);
        Ok(Client {
            stream: Box::new(stream),
            correlation: 0,
            client_id: StrBytes::from_string(client_id.to_string()),
            timeout,
            max_response,
            security: ClientSecurity::default(),
        })
    }

    /// How this client secured its connection: for more connections like it.
    pub fn security(&self) -> &ClientSecurity {
        &self.security
    }

    /// [`Client::connect`], then the TLS handshake and SASL authentication `security` asks
    /// for, each bounded by `timeout`.
    pub async fn connect_secure(
        addr: &str,
        client_id: &str,
        timeout: Duration,
        max_response: usize,
        security: &ClientSecurity,
    ) -> Result<Client, ClientError> {
        let connect = tokio::time::timeout(timeout, TcpStream::connect(addr));
        let stream = connect.await.map_err(|_| ClientError::Timeout(timeout))??;
        let _ = stream.set_nodelay(true);
        let stream: Box<dyn Stream> = match &security.tls {
            None => Box::new(stream),
            Some(config) => {
                let name =
                    crate::tls::server_name(addr).map_err(|e| ClientError::Tls(e.to_string()))?;
                let handshake =
                    tokio_rustls::TlsConnector::from(config.clone()).connect(name, stream);
                let tls = tokio::time::timeout(timeout, handshake)
                    .await
                    .map_err(|_| ClientError::Timeout(timeout))?
                    .map_err(|e| ClientError::Tls(e.to_string()))?;
                Box::new(tls)
            }
        };
        let mut client = Client {
            stream,
            correlation: 0,
            client_id: StrBytes::from_string(client_id.to_string()),
            timeout,
            max_response,
            security: security.clone(),
        };
        if let Some(creds) = &security.sasl {
            client.authenticate(creds).await?;
        }
        Ok(client)
    }

    /// SaslHandshake v1, then SaslAuthenticate until the mechanism is done.
    async fn authenticate(&mut self, creds: &SaslCredentials) -> Result<(), ClientError> {
        let handshake = self
            .call(
                1,
                &SaslHandshakeRequest::default()
                    .with_mechanism(StrBytes::from_string(creds.mechanism.clone())),
            )
            .await?;
        if handshake.error_code != 0 {
            let offered: Vec<&str> = handshake.mechanisms.iter().map(|m| m.as_str()).collect();
            return Err(ClientError::Refused(format!(
                "the broker does not offer SASL mechanism {} (it offers {})",
                creds.mechanism,
                offered.join(", ")
            )));
        }
        if creds.mechanism == "PLAIN" {
            self.sasl_step(plain::message(&creds.username, &creds.password))
                .await?;
            return Ok(());
        }
        let m = scram::Mechanism::from_name(&creds.mechanism).ok_or_else(|| {
            ClientError::Refused(format!("unknown SASL mechanism {}", creds.mechanism))
        })?;
        let (mut scram, first) = scram::Client::start(m, &creds.username, &creds.password);
        let server_first = self.sasl_step(first).await?;
        let last = scram.respond(&server_first)?;
        let server_final = self.sasl_step(last).await?;
        scram.finish(&server_final)?;
        Ok(())
    }

    async fn sasl_step(&mut self, token: Vec<u8>) -> Result<Bytes, ClientError> {
        let resp = self
            .call(
                1,
                &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)),
            )
            .await?;
        if resp.error_code != 0 {
            return Err(ClientError::Refused(
                resp.error_message
                    .map(|m| m.to_string())
                    .unwrap_or_else(|| {
                        format!("SASL authentication failed (error {})", resp.error_code)
                    }),
            ));
        }
        Ok(resp.auth_bytes)
    }

    /// Sends `req` at `version` and reads its response.
    pub async fn call<R: Request>(
        &mut self,
        version: i16,
        req: &R,
    ) -> Result<R::Response, ClientError> {
        let api = ApiKey::try_from(R::KEY)
            .map_err(|_| ClientError::Encode(format!("api key {}", R::KEY)))?;
        self.correlation = self.correlation.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(self.client_id.clone()));
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&[0; 4]);
        header
            .encode(&mut buf, api.request_header_version(version))
            .and_then(|()| req.encode(&mut buf, version))
            .map_err(|e| ClientError::Encode(e.to_string()))?;
        let len = (buf.len() - 4) as u32;
        buf[..4].copy_from_slice(&len.to_be_bytes());
        let mut frame = tokio::time::timeout(self.timeout, self.exchange(&buf))
            .await
            .map_err(|_| ClientError::Timeout(self.timeout))??;
        let header = ResponseHeader::decode(&mut frame, api.response_header_version(version))
            .map_err(|e| ClientError::Decode(e.to_string()))?;
        if header.correlation_id != self.correlation {
            return Err(ClientError::Correlation {
                got: header.correlation_id,
                want: self.correlation,
            });
        }
        <R::Response as Decodable>::decode(&mut frame, version)
            .map_err(|e| ClientError::Decode(e.to_string()))
    }

    async fn exchange(&mut self, request: &[u8]) -> Result<Bytes, ClientError> {
        self.stream.write_all(request).await?;
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len).await?;
        let len = u32::from_be_bytes(len) as usize;
        if len > self.max_response {
            return Err(ClientError::TooLarge(len));
        }
        let mut body = Vec::new();
        (&mut self.stream)
            .take(len as u64)
            .read_to_end(&mut body)
            .await?;
        if body.len() != len {
            return Err(ClientError::Closed);
        }
        Ok(Bytes::from(body))
    }
}
