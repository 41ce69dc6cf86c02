//! A minimal HTTP/1.1 server for operators: `/metrics`, `/healthz` (the process is up),
//! `/readyz` (metadata loaded and the Kafka listener accepting), `/v1/partitions` (local and
//! remote ranges), `/v1/cluster` (controller, quorum, brokers, unhealthy partitions) and
//! `POST /v1/cluster/voters?add=ID|remove=ID` (voter membership changes).

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
                async move { Ok::<_, Infallible>(route(&req, &broker, &ready).await) }
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

/// The cluster as this node sees it: the controller, the quorum, every broker, and every
/// partition that is not healthy (offline, or an ISR smaller than its replicas).
fn cluster_json(broker: &Broker) -> String {
    let quorum = broker.metadata.status();
    let state = broker.metadata.state();
    let mut total = 0usize;
    let mut unhealthy = Vec::new();
    for t in state.topics.values() {
        for (i, p) in t.partitions.iter().enumerate() {
            total += 1;
            let problem = if p.leader.is_none() {
                "offline"
            } else if p.isr.len() < p.replicas.len() {
                "under_replicated"
            } else {
                continue;
            };
            unhealthy.push(serde_json::json!({
                "topic": t.name,
                "partition": i,
                "state": problem,
                "leader": p.leader,
                "leader_epoch": p.leader_epoch,
                "replicas": p.replicas,
                "isr": p.isr,
            }));
        }
    }
    let brokers: Vec<_> = state
        .brokers
        .values()
        .map(|b| {
            serde_json::json!({
                "id": b.node_id,
                "host": b.host,
                "port": b.port,
                "rack": b.rack,
                "epoch": b.epoch,
                "state": if b.fenced { "fenced" } else { "live" },
            })
        })
        .collect();
    serde_json::json!({
        "node_id": broker.config.node_id,
        "controller": quorum.leader,
        "quorum": quorum,
        "brokers": brokers,
        "partitions": total,
        "unhealthy": unhealthy,
    })
    .to_string()
}

/// `POST /v1/cluster/voters?add=ID` or `?remove=ID`: a voter membership change.
async fn change_voters(
    req: &Request<hyper::body::Incoming>,
    broker: &Broker,
) -> (StatusCode, String) {
    if req.method() != hyper::Method::POST {
        return (
            StatusCode::METHOD_NOT_ALLOWED,
            "POST /v1/cluster/voters?add=ID or ?remove=ID\n".to_string(),
        );
    }
    let (mut add, mut remove) = (Vec::new(), Vec::new());
    for kv in req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty())
    {
        let parsed = match kv.split_once('=') {
            Some(("add", v)) => v.parse().map(|id| add.push(id)),
            Some(("remove", v)) => v.parse().map(|id| remove.push(id)),
            _ => {
                return (
                    StatusCode::BAD_REQUEST,
                    format!("unknown parameter '{kv}'\n"),
                )
            }
        };
        if parsed.is_err() {
            return (StatusCode::BAD_REQUEST, format!("'{kv}': not a node id\n"));
        }
    }
    if add.is_empty() && remove.is_empty() {
        return (
            StatusCode::BAD_REQUEST,
            "nothing to change: add=ID or remove=ID\n".to_string(),
        );
    }
    match broker.metadata.change_voters(add, remove).await {
        Ok(()) => {
            let voters: Vec<_> = broker.metadata.status().voters.into_keys().collect();
            (StatusCode::OK, format!("voters {voters:?}\n"))
        }
        Err(e) => (StatusCode::CONFLICT, format!("{e}\n")),
    }
}

async fn route(
    req: &Request<hyper::body::Incoming>,
    broker: &Broker,
    ready: &AtomicBool,
) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match req.uri().path() {
        "/v1/cluster" => (StatusCode::OK, "application/json", cluster_json(broker)),
        "/v1/cluster/voters" => {
            let (status, body) = change_voters(req, broker).await;
            (status, "text/plain", body)
        }
        "/metrics" => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            broker.metrics.render(&broker.partitions, &broker.metadata),
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
            "not found: try /metrics, /healthz, /readyz, /v1/partitions[?topic=NAME], /v1/cluster\n"
                .to_string(),
        ),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    resp
}
