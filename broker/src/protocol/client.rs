//! The client side of the Kafka framing, for calls between brokers (a follower's fetches from
//! its leader): one request at a time on one connection, each bounded in time and in the size
//! of the response it accepts. A response frame grows with the bytes that arrive, never with
//! the length the peer announces.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
}

/// One connection to another broker.
pub struct Client {
    stream: TcpStream,
    correlation: i32,
    client_id: StrBytes,
    timeout: Duration,
    max_response: usize,
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
            stream,
            correlation: 0,
            client_id: StrBytes::from_string(client_id.to_string()),
            timeout,
            max_response,
        })
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
