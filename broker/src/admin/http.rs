//! A minimal HTTP/1.1 server for operators: `/metrics`, `/healthz` (the process is up) and
//! `/readyz` (metadata loaded and the Kafka listener accepting).

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::broker::Broker;

pub async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    ready: Arc<AtomicBool>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "admin accept failed");
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let broker = broker.clone();
        let ready = ready.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let broker = broker.clone();
                let ready = ready.clone();
                async move { Ok::<_, Infallible>(route(&req, &broker, &ready)) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(error = %e, "admin connection ended with an error");
            }
        });
    }
}

/// Local and remote ranges of every partition hosted here (or of `?topic=NAME`'s), as JSON.
fn partitions_json(req: &Request<hyper::body::Incoming>, broker: &Broker) -> String {
    let topic = req.uri().query().and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("topic="))
            .map(str::to_string)
    });
    let stats: Vec<_> = broker
        .partitions
        .all()
        .into_iter()
        .filter(|p| topic.as_ref().is_none_or(|t| *t == p.tp.topic))
        .map(|p| p.tier_stats())
        .collect();
    serde_json::to_string(&stats).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

fn route(
    req: &Request<hyper::body::Incoming>,
    broker: &Broker,
    ready: &AtomicBool,
) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match req.uri().path() {
        "/metrics" => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            broker.metrics.render(&broker.partitions),
        ),
        "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_string()),
        "/v1/partitions" => (
            StatusCode::OK,
            "application/json",
            partitions_json(req, broker),
        ),
        "/readyz" if ready.load(Ordering::Acquire) => {
            (StatusCode::OK, "text/plain", "ready\n".to_string())
        }
        "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "starting\n".to_string(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found: try /metrics, /healthz, /readyz, /v1/partitions[?topic=NAME]\n".to_string(),
        ),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    resp
}
