//! The Kafka listener: accepts connections, reads frames, answers requests in order.
//!
//! Per connection, a reader task decodes frames into a small bounded queue while the previous
//! request is handled, and a processor handles requests strictly one at a time, writing each
//! response before taking the next (Kafka's ordering guarantee: produce requests pipelined on
//! one connection are appended in the order sent). A bad frame closes only its own connection.

use std::sync::Arc;
use std::time::Instant;

use kafka_protocol::messages::{ApiKey, ResponseKind};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::broker::Broker;
use crate::handlers;
use crate::protocol::{self, frame, DecodeError, Request};

/// Requests decoded ahead of the one being handled, per connection.
const PIPELINE_DEPTH: usize = 8;

pub async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    mut shutdown: watch::Receiver<bool>,
) {
    let limit = Arc::new(Semaphore::new(broker.config.max_connections));
    let mut connections = JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            broker.metrics.connection_rejected();
            tracing::warn!(%peer, "connection refused: max_connections reached");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let broker = broker.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            broker.metrics.connection_opened();
            if let Err(e) = connection(stream, &broker, shutdown)
                .instrument(tracing::debug_span!("conn", %peer))
                .await
            {
                tracing::debug!(%peer, error = %e, "connection closed with error");
            }
            broker.metrics.connection_closed();
            drop(permit);
        });
        // Reap finished connections so the set does not grow with every client ever seen.
        while connections.try_join_next().is_some() {}
    }
    // Stop accepting; let every connection finish the request it is handling.
    drop(listener);
    while connections.join_next().await.is_some() {}
}

enum Incoming {
    Request(Box<Request>, usize),
    /// ApiVersions with a version we do not speak: answer in v0 so the client can downgrade.
    UnsupportedApiVersions(i32),
}

async fn connection(
    stream: TcpStream,
    broker: &Arc<Broker>,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    // As Kafka reports it in DescribeGroups: "/<ip>".
    let client_host = stream
        .peer_addr()
        .map(|a| format!("/{}", a.ip()))
        .unwrap_or_default();
    let (reader, mut writer) = stream.into_split();
    let (tx, mut rx) = mpsc::channel::<Incoming>(PIPELINE_DEPTH);
    let max = broker.config.max_request_bytes;
    let reader_broker = broker.clone();
    let reader_task = tokio::spawn(async move {
        let broker = reader_broker;
        let mut frames = frame::FrameReader::new(reader, max);
        loop {
            let frame = tokio::select! {
                f = frames.next() => f,
                _ = shutdown.changed() => return Ok(()),
            };
            let frame = match frame {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(()),
                // A reset or a half-sent frame is the client going away, not bad input.
                Err(e @ (frame::FrameError::Io(_) | frame::FrameError::Truncated)) => {
                    tracing::debug!(error = %e, "connection ended");
                    return Ok(());
                }
                Err(e) => {
                    broker.metrics.bad_request("frame");
                    tracing::warn!(error = %e, "closing connection: bad frame");
                    return Err(anyhow::Error::from(e));
                }
            };
            let size = frame.len() + 4;
            broker.metrics.received(size as u64);
            let item = match protocol::decode_request(frame) {
                Ok(req) => Incoming::Request(Box::new(req), size),
                Err(DecodeError::UnsupportedVersion {
                    api: ApiKey::ApiVersions,
                    correlation_id,
                    ..
                }) => Incoming::UnsupportedApiVersions(correlation_id),
                Err(e) => {
                    broker.metrics.bad_request(match e {
                        DecodeError::Short(_) => "short",
                        DecodeError::UnknownApi(_) => "unknown_api",
                        DecodeError::UnsupportedVersion { .. } => "unsupported_version",
                        DecodeError::Malformed { .. } => "malformed",
                    });
                    tracing::warn!(error = %e, "closing connection: bad request");
                    return Err(anyhow::Error::from(e));
                }
            };
            if tx.send(item).await.is_err() {
                return Ok(());
            }
        }
    });

    while let Some(item) = rx.recv().await {
        let out = match item {
            Incoming::UnsupportedApiVersions(correlation_id) => {
                let body = ResponseKind::ApiVersions(handlers::unsupported_version_response());
                protocol::encode_response(ApiKey::ApiVersions, 0, correlation_id, &body)?
            }
            Incoming::Request(req, _size) => {
                let api = req.api_key;
                let version = req.header.request_api_version;
                let correlation_id = req.header.correlation_id;
                let span = tracing::debug_span!(
                    "request",
                    api = ?api,
                    version,
                    correlation_id,
                    client_id = req.header.client_id.as_ref().map(|c| c.as_str()).unwrap_or(""),
                );
                let started = Instant::now();
                let response = handlers::handle(broker, *req, &client_host)
                    .instrument(span)
                    .await;
                broker
                    .metrics
                    .request(api_name(api), started.elapsed().as_secs_f64());
                let Some(body) = response else { continue };
                match protocol::encode_response(api, version, correlation_id, &body) {
                    Ok(b) => b,
                    Err(e) => {
                        tracing::error!(?api, version, error = %e, "cannot encode response; closing connection");
                        return Err(e);
                    }
                }
            }
        };
        broker
            .metrics
            .sent(out.iter().map(|c| c.len() as u64).sum());
        write_chunks(&mut writer, out).await?;
    }
    writer.shutdown().await.ok();
    match reader_task.await {
        Ok(r) => r,
        Err(e) => Err(e.into()),
    }
}

/// Writes a response's chunks with vectored writes, resuming after partial writes.
async fn write_chunks<W: tokio::io::AsyncWrite + Unpin>(
    writer: &mut W,
    mut chunks: Vec<bytes::Bytes>,
) -> std::io::Result<()> {
    use bytes::Buf;
    let mut first = 0;
    while first < chunks.len() {
        let slices: Vec<std::io::IoSlice<'_>> = chunks[first..]
            .iter()
            .take(64)
            .map(|c| std::io::IoSlice::new(c))
            .collect();
        let mut n = writer.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 {
            let len = chunks[first].len();
            if n >= len {
                n -= len;
                first += 1;
            } else {
                chunks[first].advance(n);
                n = 0;
            }
        }
    }
    Ok(())
}

fn api_name(api: ApiKey) -> &'static str {
    match api {
        ApiKey::Produce => "Produce",
        ApiKey::Fetch => "Fetch",
        ApiKey::ListOffsets => "ListOffsets",
        ApiKey::Metadata => "Metadata",
        ApiKey::ApiVersions => "ApiVersions",
        ApiKey::CreateTopics => "CreateTopics",
        ApiKey::DeleteTopics => "DeleteTopics",
        ApiKey::DeleteRecords => "DeleteRecords",
        ApiKey::InitProducerId => "InitProducerId",
        ApiKey::DescribeConfigs => "DescribeConfigs",
        ApiKey::CreatePartitions => "CreatePartitions",
        ApiKey::IncrementalAlterConfigs => "IncrementalAlterConfigs",
        ApiKey::DescribeCluster => "DescribeCluster",
        ApiKey::FindCoordinator => "FindCoordinator",
        ApiKey::JoinGroup => "JoinGroup",
        ApiKey::SyncGroup => "SyncGroup",
        ApiKey::Heartbeat => "Heartbeat",
        ApiKey::LeaveGroup => "LeaveGroup",
        ApiKey::OffsetCommit => "OffsetCommit",
        ApiKey::OffsetFetch => "OffsetFetch",
        ApiKey::ListGroups => "ListGroups",
        ApiKey::DescribeGroups => "DescribeGroups",
        ApiKey::DeleteGroups => "DeleteGroups",
        ApiKey::OffsetDelete => "OffsetDelete",
        ApiKey::OffsetForLeaderEpoch => "OffsetForLeaderEpoch",
        ApiKey::ElectLeaders => "ElectLeaders",
        _ => "Other",
    }
}
