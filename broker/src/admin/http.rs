//! A minimal HTTP/1.1 server for operators: `/metrics`, `/healthz` (the process is up),
//! `/readyz` (metadata loaded and the Kafka listener accepting), `/v1/partitions` (local and
//! remote ranges), `/v1/cluster` (controller, quorum, brokers, unhealthy partitions) and
//! `POST /v1/cluster/voters?add=ID|remove=ID` (voter membership changes), the JSON views of
//! the cluster (`/v1/overview`, `/v1/topics`, `/v1/groups`: [`super::views`]), the console at
//! `/` ([`super::console`]), and the Iceberg REST catalog's read endpoints under `/iceberg`
//! ([`crate::iceberg::rest`]). `docs/admin-api.json` documents them (OpenAPI).
//!
//! Requests are parsed into a [`Route`] before anything runs (the admin fuzz target drives
//! [`Route::parse`]); only an action ([`actions`], off by default) reads a request body, at most
//! [`actions::MAX_BODY`] of it. At most [`MAX_CONNECTIONS`] connections
//! are served at once, and a request's headers must arrive within [`HEADER_TIMEOUT`].
//!
//! With `admin_security_protocol = "SSL"` the port speaks HTTPS only: the TLS handshake (with
//! the broker's reloading certificate, and client certificates as `ssl_client_auth` says)
//! must complete within [`HEADER_TIMEOUT`], and a connection that does not complete it is
//! closed before any request is read.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::actions::{self, Action};
use super::peers::AdminPeers;
use super::views::{self, PageQuery};
use super::{console, offsets, security_view, transactions};
use crate::broker::Broker;
use crate::config::listeners::SecurityProtocol;
use crate::group::lag_leaders::Leaders;
use crate::security::Principal;

/// Admin connections served at once (Prometheus, probes and operators need a handful).
const MAX_CONNECTIONS: usize = 64;
/// A request's headers must arrive within this (hyper's slow-loris guard).
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    ready: Arc<AtomicBool>,
    mut shutdown: watch::Receiver<bool>,
) {
    // Security::new loaded the TLS files whenever the configuration asks for HTTPS.
    let tls = (broker.node.config.admin_tls().unwrap_or(false))
        .then(|| broker.security.tls_acceptor(SecurityProtocol::Ssl))
        .flatten();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let peers = match AdminPeers::new(&broker.node.config) {
        Ok(peers) => peers,
        Err(e) => {
            tracing::error!(error = %e, "the admin port cannot reach the other brokers' admin ports: not serving it");
            return;
        }
    };
    let leaders = Leaders::new(broker.node.config.node_id);
    let server = Arc::new(Server {
        broker,
        ready,
        peers,
        leaders,
    });
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "admin accept failed");
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!("admin connection refused: {MAX_CONNECTIONS} open");
            continue;
        };
        let server = server.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let host: Arc<str> = peer.ip().to_string().into();
            match tls {
                None => {
                    let caller = Caller {
                        principal: Ok(Principal::anonymous()),
                        host,
                    };
                    connection(stream, server, Arc::new(caller)).await
                }
                Some(acceptor) => {
                    let metrics = server.broker.security.metrics();
                    match tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            metrics.tls_handshake("admin", "ok");
                            // A verified client certificate names who changes things.
                            let certificate = tls.get_ref().1.peer_certificates();
                            let principal = (server.broker.security)
                                .certificate_principal(certificate.and_then(|c| c.first()))
                                .map(|p| p.unwrap_or_else(Principal::anonymous));
                            let caller = Caller { principal, host };
                            connection(tls, server, Arc::new(caller)).await
                        }
                        Ok(Err(e)) => {
                            metrics.tls_handshake("admin", "failed");
                            tracing::info!(error = %e, "admin TLS handshake failed");
                        }
                        Err(_) => metrics.tls_handshake("admin", "timed_out"),
                    }
                }
            }
            drop(slot);
        });
    }
}

/// What every connection of the port shares.
struct Server {
    broker: Arc<Broker>,
    /// Metadata loaded and the Kafka listener accepting (`/readyz`).
    ready: Arc<AtomicBool>,
    peers: AdminPeers,
    /// Kafka requests to partition leaders and group coordinators (offset resets).
    leaders: Leaders,
}

/// Who is on the other end of one connection: its address, and the principal its actions are
/// authorized and audited as (`Err`: a client certificate no mapping rule names, which may
/// change nothing).
struct Caller {
    principal: Result<Principal, String>,
    host: Arc<str>,
}

/// Serves HTTP/1.1 on one connection, plain or TLS.
async fn connection<S>(stream: S, server: Arc<Server>, caller: Arc<Caller>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let server = server.clone();
        let caller = caller.clone();
        async move { Ok::<_, Infallible>(respond(req, &server, &caller).await) }
    });
    if let Err(e) = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .await
    {
        tracing::debug!(error = %e, "admin connection ended with an error");
    }
}

/// Local and remote ranges of every partition hosted here (or of one topic's), as JSON.
fn partitions_json(topic: Option<&str>, broker: &Broker) -> String {
    let stats: Vec<_> = broker
        .node
        .partitions
        .hosted()
        .all()
        .iter()
        .filter(|p| topic.is_none_or(|t| t == p.tp.topic))
        .map(|p| p.tier_stats())
        .collect();
    serde_json::to_string(&stats).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

/// The cluster as this node sees it: the controller, the quorum, every broker, every
/// partition that is not healthy (offline, or an ISR smaller than its replication factor) and
/// every partition being reassigned.
/// The cluster as this node sees it, with the quorum's replicas as the leader sees them
/// (`None` when no leader answered).
fn cluster_json(broker: &Broker, leader_view: Option<strata_metadata::QuorumStatus>) -> String {
    let quorum = broker.node.metadata.status();
    let state = broker.node.metadata.state();
    let mut total = 0usize;
    let mut unhealthy = Vec::new();
    let mut reassigning = Vec::new();
    for t in state.topics.values() {
        for (i, p) in t.partitions.iter().enumerate() {
            total += 1;
            if p.is_moving() {
                reassigning.push(serde_json::json!({
                    "topic": t.name,
                    "partition": i,
                    "replicas": p.replicas,
                    "adding": p.adding,
                    "removing": p.removing,
                    "isr": p.isr,
                    "leader": p.leader,
                }));
            }
            let problem = if p.leader.is_none() {
                "offline"
            } else if p.is_under_replicated() {
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
                "offline_log_dirs": b.offline_log_dirs,
            })
        })
        .collect();
    serde_json::json!({
        "node_id": broker.node.config.node_id,
        "controller": quorum.leader,
        "quorum": quorum,
        "quorum_high_watermark": leader_view.as_ref().map(|l| l.high_watermark()),
        "quorum_replicas": leader_view.map(|l| l.replicas(broker.node.clock.now_ms())),
        "brokers": brokers,
        "partitions": total,
        "unhealthy": unhealthy,
        "reassigning": reassigning,
    })
    .to_string()
}

/// What a request asks for, decided from its method and URI alone.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    Cluster,
    /// `POST /v1/cluster/voters?add=ID` or `?remove=ID`: a voter membership change.
    ChangeVoters {
        add: Vec<u64>,
        remove: Vec<u64>,
    },
    Metrics,
    /// The process's CPU seconds, memory and descriptors as JSON: what `/metrics` says of
    /// them without rendering every partition's series.
    Process,
    Healthz,
    Readyz,
    Partitions {
        topic: Option<String>,
    },
    /// The Iceberg REST catalog (`/iceberg/...`).
    #[cfg(feature = "iceberg")]
    Iceberg(crate::iceberg::rest::Request),
    /// `GET /v1/iceberg`: every topic with a table, and its state; `GET /v1/iceberg/<topic>`
    /// one (`topic` set).
    #[cfg(feature = "iceberg")]
    IcebergStatus {
        topic: Option<String>,
    },
    /// `POST /v1/iceberg/<topic>/rewrite`: start the table over from the whole history.
    #[cfg(feature = "iceberg")]
    IcebergRewrite {
        topic: String,
    },
    /// The console's page (at `/` and each page's address) and its files.
    Console(&'static console::Asset),
    /// `GET /v1/overview`: the cluster at a glance ([`views::overview`]).
    Overview,
    /// `GET /v1/topics?q=&offset=&limit=`: a page of topics.
    Topics(PageQuery),
    /// `GET /v1/topics/<name>?offset=&limit=`: one topic's partitions (a page) and configs.
    Topic(String, PageQuery),
    /// `GET /v1/topics/<name>/messages?partition=&offset=|timestamp=&limit=`: records.
    Messages(String, views::MessagesQuery),
    /// `GET /v1/groups?q=&offset=&limit=`: a page of consumer groups with their lag.
    Groups(PageQuery),
    /// `GET /v1/groups/<name>`: one group's lag by partition.
    Group(String),
    /// `GET /v1/brokers/<id>/history`: a broker's last hour of figures (charts), asked of it
    /// when it is another.
    History(u64),
    /// `GET /v1/transactions`: open transactions, coordinators' and partitions', and the
    /// hanging ones ([`transactions`]).
    Transactions,
    /// `GET /v1/security?q=`: ACLs, SCRAM users and quotas, read-only ([`security_view`]).
    Security(String),
    /// `GET /v1/local/...`: this broker's part of a view, asked by the broker answering it
    /// ([`super::peers`]).
    Local(Local),
    /// A change (`console_actions_enable`): create or delete a topic, alter its configs,
    /// cancel a move ([`actions`]).
    Action(Action),
    /// A request this server refuses, with its status and the reason.
    Refused(StatusCode, String),
}

/// A view's part one broker answers from what it holds alone.
#[derive(Debug, PartialEq, Eq)]
pub enum Local {
    Topics,
    Moves,
    History,
    Transactions,
    Topic(String, PageQuery),
    Messages(String, views::MessagesQuery),
    Groups,
    Group(String),
}

impl Route {
    pub fn parse(method: &hyper::Method, uri: &hyper::Uri) -> Route {
        let query = uri.query().unwrap_or("");
        if let Some(asset) = console::asset(uri.path()) {
            return match *method == hyper::Method::GET || *method == hyper::Method::HEAD {
                true => Route::Console(asset),
                false => Route::Refused(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into()),
            };
        }
        match Action::parse(method, uri.path()) {
            Some(Ok(action)) => return Route::Action(action),
            Some(Err(why)) => return Route::Refused(StatusCode::BAD_REQUEST, format!("{why}\n")),
            None => {}
        }
        if let Some(route) = Self::views(method, uri.path(), query) {
            return route;
        }
        #[cfg(feature = "iceberg")]
        {
            if let Some(rest) = (uri.path().strip_prefix(crate::iceberg::rest::PREFIX))
                .filter(|r| r.is_empty() || r.starts_with('/'))
            {
                return Route::Iceberg(crate::iceberg::rest::Request::parse(method, rest));
            }
            if let Some(rest) = uri.path().strip_prefix("/v1/iceberg") {
                return Self::iceberg(method, rest);
            }
        }
        if let Some(id) =
            (uri.path().strip_prefix("/v1/brokers/")).and_then(|r| r.strip_suffix("/history"))
        {
            return match (id.parse(), *method == hyper::Method::GET) {
                (Ok(id), true) => Route::History(id),
                (Err(_), _) => {
                    Route::Refused(StatusCode::BAD_REQUEST, format!("'{id}' is no broker id\n"))
                }
                (_, false) => Route::Refused(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into()),
            };
        }
        match uri.path() {
            "/v1/transactions" | "/v1/security" if *method != hyper::Method::GET => {
                Route::Refused(StatusCode::METHOD_NOT_ALLOWED, "GET only\n".into())
            }
            "/v1/transactions" => Route::Transactions,
            "/v1/security" => match PageQuery::parse(query) {
                Ok(page) if page.offset == 0 && page.limit == views::DEFAULT_LIMIT => {
                    Route::Security(page.filter)
                }
                Ok(_) => Route::Refused(
                    StatusCode::BAD_REQUEST,
                    "the security view is not paged: q= only\n".into(),
                ),
                Err(why) => Route::Refused(StatusCode::BAD_REQUEST, format!("{why}\n")),
            },
            "/v1/cluster" => Route::Cluster,
            "/v1/cluster/voters" => Self::voters(method, query),
            "/metrics" => Route::Metrics,
            "/v1/process" => Route::Process,
            "/healthz" => Route::Healthz,
            "/readyz" => Route::Readyz,
            "/v1/partitions" => Route::Partitions {
                topic: query
                    .split('&')
                    .find_map(|kv| kv.strip_prefix("topic="))
                    .map(str::to_string),
            },
            _ => Route::Refused(
                StatusCode::NOT_FOUND,
                "not found: try / (the console), /v1/overview, /v1/topics, /v1/groups, /metrics, /v1/process, /healthz, /readyz, /v1/partitions[?topic=NAME], /v1/cluster, /iceberg/v1/config (docs/admin-api.json)\n"
                    .to_string(),
            ),
        }
    }

    #[cfg(feature = "iceberg")]
    fn iceberg(method: &hyper::Method, rest: &str) -> Route {
        let parts: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
        match (method.as_str(), parts.as_slice()) {
            ("GET", []) => Route::IcebergStatus { topic: None },
            ("GET", [topic]) => Route::IcebergStatus {
                topic: Some(topic.to_string()),
            },
            ("POST", [topic, "rewrite"]) => Route::IcebergRewrite {
                topic: topic.to_string(),
            },
            _ => Route::Refused(
                StatusCode::NOT_FOUND,
                "GET /v1/iceberg[/TOPIC] or POST /v1/iceberg/TOPIC/rewrite\n".to_string(),
            ),
        }
    }

    /// The JSON views (`/v1/overview`, `/v1/topics[/NAME]`, `/v1/groups[/NAME]`, and each
    /// broker's part of them under `/v1/local`), `None` for another path.
    fn views(method: &hyper::Method, path: &str, query: &str) -> Option<Route> {
        let (local, path) = match path.strip_prefix("/v1/local") {
            Some("/moves") if *method == hyper::Method::GET => {
                return Some(Route::Local(Local::Moves))
            }
            Some("/history") if *method == hyper::Method::GET => {
                return Some(Route::Local(Local::History))
            }
            Some("/transactions") if *method == hyper::Method::GET => {
                return Some(Route::Local(Local::Transactions))
            }
            Some(rest) if rest.starts_with("/topics") || rest.starts_with("/groups") => {
                (true, format!("/v1{rest}"))
            }
            _ => (false, path.to_string()),
        };
        let path = path.as_str();
        let (list, rest) = match path {
            "/v1/overview" => ("overview", ""),
            "/v1/topics" | "/v1/groups" => (&path[4..], ""),
            _ => {
                let (list, rest) = (path.strip_prefix("/v1/topics/").map(|r| ("topics", r)))
                    .or_else(|| path.strip_prefix("/v1/groups/").map(|r| ("groups", r)))?;
                (list, rest)
            }
        };
        if *method != hyper::Method::GET {
            return Some(Route::Refused(
                StatusCode::METHOD_NOT_ALLOWED,
                "GET only\n".into(),
            ));
        }
        let refused = |why: String| Route::Refused(StatusCode::BAD_REQUEST, format!("{why}\n"));
        // A group's name may hold any character, `/` included (sent as %2F).
        let decoded = |rest: &str| match percent_encoding::percent_decode_str(rest).decode_utf8() {
            Ok(n) if !n.is_empty() => Ok(n.into_owned()),
            _ => Err(refused(format!("'{rest}' is no {list} name"))),
        };
        if let Some(name) = rest.strip_suffix("/messages").filter(|_| list == "topics") {
            let name = match decoded(name) {
                Ok(name) => name,
                Err(refusal) => return Some(refusal),
            };
            return Some(match views::MessagesQuery::parse(query) {
                Ok(q) if local => Route::Local(Local::Messages(name, q)),
                Ok(q) => Route::Messages(name, q),
                Err(why) => refused(why),
            });
        }
        if !rest.is_empty() {
            let name = match decoded(rest) {
                Ok(name) => name,
                Err(refusal) => return Some(refusal),
            };
            if list == "topics" {
                return Some(match PageQuery::parse_partitions(query) {
                    Ok(page) if local => Route::Local(Local::Topic(name, page)),
                    Ok(page) => Route::Topic(name, page),
                    Err(why) => refused(why),
                });
            }
            return Some(match (list, local) {
                (_, false) => Route::Group(name),
                (_, true) => Route::Local(Local::Group(name)),
            });
        }
        if list == "overview" {
            return Some(Route::Overview);
        }
        if local {
            return Some(match (list, query.is_empty()) {
                ("topics", true) => Route::Local(Local::Topics),
                (_, true) => Route::Local(Local::Groups),
                (_, false) => refused("a broker's part is not paged: no parameters".into()),
            });
        }
        let sorts = match list {
            "topics" => views::TOPIC_SORTS,
            _ => views::GROUP_SORTS,
        };
        Some(match PageQuery::parse_sorted(query, sorts) {
            Ok(page) if list == "topics" => Route::Topics(page),
            Ok(page) => Route::Groups(page),
            Err(why) => refused(why),
        })
    }

    fn voters(method: &hyper::Method, query: &str) -> Route {
        if method != hyper::Method::POST {
            return Route::Refused(
                StatusCode::METHOD_NOT_ALLOWED,
                "POST /v1/cluster/voters?add=ID or ?remove=ID\n".to_string(),
            );
        }
        let (mut add, mut remove) = (Vec::new(), Vec::new());
        for kv in query.split('&').filter(|kv| !kv.is_empty()) {
            let parsed = match kv.split_once('=') {
                Some(("add", v)) => v.parse().map(|id| add.push(id)),
                Some(("remove", v)) => v.parse().map(|id| remove.push(id)),
                _ => {
                    return Route::Refused(
                        StatusCode::BAD_REQUEST,
                        format!("unknown parameter '{kv}'\n"),
                    )
                }
            };
            if parsed.is_err() {
                return Route::Refused(StatusCode::BAD_REQUEST, format!("'{kv}': not a node id\n"));
            }
        }
        if add.is_empty() && remove.is_empty() {
            return Route::Refused(
                StatusCode::BAD_REQUEST,
                "nothing to change: add=ID or remove=ID\n".to_string(),
            );
        }
        Route::ChangeVoters { add, remove }
    }
}

#[cfg(feature = "iceberg")]
async fn iceberg_status(
    topic: Option<&str>,
    broker: &Broker,
) -> (StatusCode, &'static str, String) {
    use crate::iceberg::status;
    let tables = status::tables(&broker.iceberg);
    match topic {
        None => {
            let mut out = Vec::with_capacity(tables.len());
            for t in &tables {
                out.push(status::status(&broker.iceberg, t).await);
            }
            (StatusCode::OK, "application/json", to_json(&out))
        }
        Some(name) => match tables.iter().find(|t| t.name == name) {
            Some(t) => {
                let s = status::status(&broker.iceberg, t).await;
                (StatusCode::OK, "application/json", to_json(&s))
            }
            None => (
                StatusCode::NOT_FOUND,
                "text/plain",
                format!("no topic {name} with iceberg.mode set or a table\n"),
            ),
        },
    }
}

#[cfg(feature = "iceberg")]
fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

async fn change_voters(add: Vec<u64>, remove: Vec<u64>, broker: &Broker) -> (StatusCode, String) {
    match broker.node.metadata.change_voters(add, remove).await {
        Ok(()) => {
            let voters: Vec<_> = broker.node.metadata.status().voters.into_keys().collect();
            (StatusCode::OK, format!("voters {voters:?}\n"))
        }
        Err(e) => (StatusCode::CONFLICT, format!("{e}\n")),
    }
}

/// What the caller may do, for the views that show records; `None` for a client certificate
/// no mapping rule names.
fn access(broker: &Broker, caller: &Caller) -> Option<crate::security::Access> {
    let principal = caller.principal.as_ref().ok()?;
    Some(broker.security.authorizer().access(principal, &caller.host))
}

/// A partition's records, or why not, in words.
fn messages(
    answer: Result<serde_json::Value, views::Refusal>,
) -> (StatusCode, &'static str, String) {
    match answer {
        Ok(v) => (StatusCode::OK, "application/json", v.to_string()),
        Err((status, why)) => (
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            "text/plain",
            format!("{why}\n"),
        ),
    }
}

/// An action's answer: checked, then its body read (bounded), then run as the caller's.
async fn act(
    req: Request<hyper::body::Incoming>,
    action: Action,
    server: &Server,
    caller: &Caller,
) -> (StatusCode, serde_json::Value) {
    use http_body_util::BodyExt;
    let refused = |status, error: &str, message: String| {
        (
            status,
            serde_json::json!({ "error": error, "message": message }),
        )
    };
    if let Err((status, why)) = actions::admit(&server.broker, &action, req.headers()) {
        return refused(status, "REFUSED", why);
    }
    let principal = match &caller.principal {
        Ok(p) => p.clone(),
        Err(why) => return refused(StatusCode::FORBIDDEN, "REFUSED", why.clone()),
    };
    let body = match http_body_util::Limited::new(req.into_body(), actions::MAX_BODY)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(e) => {
            let why = match e.downcast_ref::<http_body_util::LengthLimitError>() {
                Some(_) => format!("a body over {} bytes", actions::MAX_BODY),
                None => format!("the body did not arrive: {e}"),
            };
            return refused(StatusCode::PAYLOAD_TOO_LARGE, "REFUSED", why);
        }
    };
    let caller = actions::Caller {
        principal,
        host: caller.host.clone(),
    };
    match action {
        Action::ResetOffsets(group) => {
            offsets::reset(&server.broker, &server.leaders, &group, &body, &caller).await
        }
        Action::AbortTransaction(topic, partition) => {
            let peers = &server.peers;
            transactions::abort(&server.broker, peers, &topic, partition, &body, &caller).await
        }
        action => actions::run(&server.broker, action, &body, &caller).await,
    }
}

async fn respond(
    req: Request<hyper::body::Incoming>,
    server: &Server,
    caller: &Caller,
) -> Response<Full<Bytes>> {
    let (broker, ready, peers) = (&server.broker, &*server.ready, &server.peers);
    let route = Route::parse(req.method(), req.uri());
    if let Route::Console(asset) = route {
        return reply(
            StatusCode::OK,
            asset.content_type,
            Bytes::from_static(asset.body),
        );
    }
    if let Route::Action(action) = route {
        let (status, body) = act(req, action, server, caller).await;
        return reply(status, "application/json", Bytes::from(body.to_string()));
    }
    let json = |v: serde_json::Value| (StatusCode::OK, "application/json", v.to_string());
    let not_found = |what: String| (StatusCode::NOT_FOUND, "text/plain", format!("{what}\n"));
    let unmapped = || {
        (
            StatusCode::FORBIDDEN,
            "text/plain",
            "the client certificate maps to no principal\n".to_string(),
        )
    };
    let (status, content_type, body) = match route {
        // Answered above: from the embedded files, and by `act`.
        Route::Console(_) | Route::Action(_) => {
            (StatusCode::NO_CONTENT, "text/plain", String::new())
        }
        Route::Overview => json(views::overview(broker, peers).await),
        Route::Topics(page) => json(views::topics(broker, peers, &page).await),
        Route::Topic(name, page) => match views::topic(broker, peers, &name, &page).await {
            Some(v) => json(v),
            None => not_found(format!("no topic {name}")),
        },
        Route::Messages(topic, query) => {
            let access = access(broker, caller);
            let answer = views::messages(broker, peers, &topic, &query, false, access.as_ref());
            messages(answer.await)
        }
        Route::Groups(page) => json(views::groups(broker, peers, &page).await),
        Route::Transactions => match access(broker, caller) {
            Some(access) => json(transactions::view(broker, peers, &access).await),
            None => unmapped(),
        },
        Route::Security(filter) => match access(broker, caller) {
            Some(access) => json(security_view::view(broker, &access, &filter)),
            None => unmapped(),
        },
        Route::Group(name) => match access(broker, caller) {
            None => unmapped(),
            Some(access) => match views::group(broker, peers, &name, &access).await {
                Some(v) => json(v),
                None => not_found(format!("no group {name}")),
            },
        },
        Route::Local(part) => match part {
            Local::Topics => json(views::local_topics(broker)),
            Local::Moves => json(views::local_moves(broker)),
            Local::History => json(views::history(broker)),
            Local::Transactions => match access(broker, caller) {
                Some(access) => json(serde_json::json!(transactions::local(broker, &access))),
                None => unmapped(),
            },
            Local::Groups => json(views::local_groups(broker)),
            Local::Topic(name, page) => json(views::local_topic(broker, &name, &page)),
            Local::Group(name) => match access(broker, caller) {
                Some(access) => json(serde_json::json!(
                    views::local_group(broker, &name, &access).await
                )),
                None => unmapped(),
            },
            Local::Messages(topic, query) => {
                let access = access(broker, caller);
                let answer = views::messages(broker, peers, &topic, &query, true, access.as_ref());
                messages(answer.await)
            }
        },
        Route::History(id) if id == broker.node.config.node_id => json(views::history(broker)),
        Route::History(id) => match peers.relay(&broker.node, id, "/v1/local/history").await {
            Ok((status, body)) => (
                StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
                if status == 200 {
                    "application/json"
                } else {
                    "text/plain"
                },
                body,
            ),
            Err(why) => (
                StatusCode::BAD_GATEWAY,
                "text/plain",
                format!("broker {id} did not answer: {why}\n"),
            ),
        },
        Route::Cluster => {
            let leader_view = broker.node.metadata.leader_status().await.ok();
            (
                StatusCode::OK,
                "application/json",
                cluster_json(broker, leader_view),
            )
        }
        Route::ChangeVoters { add, remove } => {
            let (status, body) = change_voters(add, remove, broker).await;
            (status, "text/plain", body)
        }
        Route::Metrics => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            broker.node.metrics.render(),
        ),
        Route::Process => {
            let (same, cross) = broker.node.zones.crossings();
            let extra = [("same_zone_bytes", same), ("cross_zone_bytes", cross)];
            let body = crate::metrics::usage_json(&extra);
            (StatusCode::OK, "application/json", body)
        }
        Route::Healthz => (StatusCode::OK, "text/plain", "ok\n".to_string()),
        Route::Partitions { topic } => (
            StatusCode::OK,
            "application/json",
            partitions_json(topic.as_deref(), broker),
        ),
        Route::Readyz if ready.load(Ordering::Acquire) => {
            (StatusCode::OK, "text/plain", "ready\n".to_string())
        }
        Route::Readyz => (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "starting\n".to_string(),
        ),
        #[cfg(feature = "iceberg")]
        Route::IcebergStatus { topic } => iceberg_status(topic.as_deref(), broker).await,
        #[cfg(feature = "iceberg")]
        Route::IcebergRewrite { topic } => match broker.iceberg.rewrite(&topic).await {
            Ok(()) => (
                StatusCode::OK,
                "text/plain",
                format!("the table of {topic} starts over: the next round writes it again\n"),
            ),
            Err(crate::iceberg::IcebergError::Refused(why)) => {
                (StatusCode::CONFLICT, "text/plain", format!("{why}\n"))
            }
            Err(e) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                format!("{e}\n"),
            ),
        },
        #[cfg(feature = "iceberg")]
        Route::Iceberg(request) => {
            let settings = broker.node.settings();
            let (status, body) =
                crate::iceberg::rest::respond(request, &settings, &broker.iceberg).await;
            (status, "application/json", body)
        }
        Route::Refused(status, why) => (status, "text/plain", why),
    };
    reply(status, content_type, Bytes::from(body))
}

/// A response with its content type and the console's [`console::SECURITY_HEADERS`].
fn reply(status: StatusCode, content_type: &str, body: Bytes) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        headers.insert(hyper::header::CONTENT_TYPE, v);
    }
    for (name, value) in console::SECURITY_HEADERS {
        headers.insert(name, hyper::header::HeaderValue::from_static(value));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(method: &str, uri: &str) -> Route {
        Route::parse(&method.parse().unwrap(), &uri.parse().unwrap())
    }

    #[test]
    fn fuzz_regressions_are_routed() {
        for (name, input) in crate::fuzz_regressions("admin_route") {
            let text = String::from_utf8(input).unwrap();
            let (method, uri) = text.split_once(' ').unwrap();
            if let (Ok(m), Ok(u)) = (method.parse(), uri.parse()) {
                let route = Route::parse(&m, &u);
                assert!(matches!(route, Route::Refused(..)), "{name}: {route:?}");
            }
        }
    }

    /// `docs/admin-api.json` (OpenAPI) names routes that exist, and the JSON views are in it.
    #[test]
    fn the_openapi_document_lists_the_routes() {
        let doc: serde_json::Value =
            serde_json::from_str(include_str!("../../../docs/admin-api.json")).unwrap();
        let paths = doc["paths"].as_object().unwrap();
        for (path, ops) in paths {
            let concrete = path
                .replace("{name}", "x")
                .replace("{topic}", "x")
                .replace("{partition}", "0")
                .replace("{id}", "1");
            for method in ops.as_object().unwrap().keys() {
                let route = parse(&method.to_uppercase(), &concrete);
                let missing = matches!(&route, Route::Refused(s, _) if *s == StatusCode::NOT_FOUND || *s == StatusCode::METHOD_NOT_ALLOWED);
                assert!(!missing, "{method} {path}: {route:?}");
            }
        }
        for path in [
            "/v1/overview",
            "/v1/topics",
            "/v1/topics/{name}",
            "/v1/groups",
            "/v1/groups/{name}",
            "/v1/groups/{name}/offsets",
            "/v1/transactions",
            "/v1/security",
            "/v1/topics/{name}/partitions/{partition}/abort-transaction",
        ] {
            assert!(
                paths.contains_key(path),
                "{path} is not in docs/admin-api.json"
            );
        }
    }

    #[test]
    fn views_and_the_console_are_routed_and_bad_input_refused() {
        assert_eq!(parse("GET", "/v1/overview"), Route::Overview);
        assert!(matches!(parse("GET", "/"), Route::Console(_)));
        assert!(matches!(parse("HEAD", "/groups/a%20b"), Route::Console(_)));
        assert!(matches!(
            parse("POST", "/"),
            Route::Refused(StatusCode::METHOD_NOT_ALLOWED, _)
        ));
        assert_eq!(
            parse("GET", "/v1/groups/a%20b%2Fc"),
            Route::Group("a b/c".into())
        );
        assert_eq!(parse("GET", "/v1/groups/a%20b"), Route::Group("a b".into()));
        assert_eq!(
            parse("GET", "/v1/topics/orders"),
            Route::Topic("orders".into(), PageQuery::parse_partitions("").unwrap())
        );
        assert!(matches!(
            parse("GET", "/v1/topics/orders/messages?partition=1&offset=5"),
            Route::Messages(t, views::MessagesQuery { partition: 1, start: views::Start::Offset(5), .. }) if t == "orders"
        ));
        assert!(matches!(
            parse("GET", "/v1/topics/orders/messages?limit=1000"),
            Route::Refused(StatusCode::BAD_REQUEST, _)
        ));
        // A broker's own part of a view, asked by another: names decoded as in the views.
        assert_eq!(
            parse("GET", "/v1/local/topics"),
            Route::Local(Local::Topics)
        );
        assert_eq!(
            parse("GET", "/v1/local/groups"),
            Route::Local(Local::Groups)
        );
        assert_eq!(parse("GET", "/v1/local/moves"), Route::Local(Local::Moves));
        assert_eq!(
            parse("GET", "/v1/local/history"),
            Route::Local(Local::History)
        );
        assert_eq!(parse("GET", "/v1/brokers/3/history"), Route::History(3));
        assert_eq!(parse("GET", "/v1/transactions"), Route::Transactions);
        assert_eq!(
            parse("GET", "/v1/local/transactions"),
            Route::Local(Local::Transactions)
        );
        assert_eq!(
            parse("GET", "/v1/security?q=alice"),
            Route::Security("alice".into())
        );
        for (method, uri, status) in [
            ("POST", "/v1/transactions", StatusCode::METHOD_NOT_ALLOWED),
            ("DELETE", "/v1/security", StatusCode::METHOD_NOT_ALLOWED),
            ("GET", "/v1/security?offset=5", StatusCode::BAD_REQUEST),
            (
                "GET",
                &format!("/v1/security?q={}", "x".repeat(300)),
                StatusCode::BAD_REQUEST,
            ),
        ] {
            assert!(
                matches!(parse(method, uri), Route::Refused(s, _) if s == status),
                "{method} {uri}"
            );
        }
        assert!(matches!(parse("GET", "/transactions"), Route::Console(_)));
        assert!(matches!(parse("GET", "/security"), Route::Console(_)));
        assert!(matches!(
            parse("GET", "/v1/brokers/x/history"),
            Route::Refused(StatusCode::BAD_REQUEST, _)
        ));
        assert_eq!(
            parse("GET", "/v1/local/groups/a%2Fb"),
            Route::Local(Local::Group("a/b".into()))
        );
        assert_eq!(
            parse("GET", "/v1/local/topics/or%2Dders"),
            Route::Local(Local::Topic(
                "or-ders".into(),
                PageQuery::parse_partitions("").unwrap()
            ))
        );
        assert!(matches!(
            parse("GET", "/v1/local/topics/or%2Dders/messages?partition=2"),
            Route::Local(Local::Messages(t, views::MessagesQuery { partition: 2, .. })) if t == "or-ders"
        ));
        assert!(matches!(
            parse("GET", "/v1/topics/or%2Dders/messages"),
            Route::Messages(t, _) if t == "or-ders"
        ));
        for bad in ["/v1/local/topics?limit=5", "/v1/local/topics/%ff/messages"] {
            assert!(
                matches!(
                    parse("GET", bad),
                    Route::Refused(StatusCode::BAD_REQUEST, _)
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            parse("POST", "/v1/local/groups"),
            Route::Refused(StatusCode::METHOD_NOT_ALLOWED, _)
        ));
        assert!(matches!(
            parse("GET", "/v1/localx"),
            Route::Refused(StatusCode::NOT_FOUND, _)
        ));
        assert!(matches!(
            parse("GET", "/v1/topics?q=or&limit=2"),
            Route::Topics(PageQuery { limit: 2, .. })
        ));
        for bad in ["/v1/topics?limit=0", "/v1/groups?x=1", "/v1/topics/%ff"] {
            assert!(
                matches!(
                    parse("GET", bad),
                    Route::Refused(StatusCode::BAD_REQUEST, _)
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            parse("PUT", "/v1/topics/x"),
            Route::Refused(StatusCode::METHOD_NOT_ALLOWED, _)
        ));
        // Changes are routed as actions (whether they may run is decided when they arrive).
        assert_eq!(
            parse("DELETE", "/v1/topics/x"),
            Route::Action(Action::DeleteTopic("x".into()))
        );
        assert!(matches!(
            parse("DELETE", "/v1/topics/x/partitions/z/move"),
            Route::Refused(StatusCode::BAD_REQUEST, _)
        ));
    }

    #[test]
    fn routes_are_decided_from_method_and_uri() {
        assert_eq!(parse("GET", "/metrics"), Route::Metrics);
        assert_eq!(parse("GET", "/v1/process"), Route::Process);
        assert_eq!(
            parse("GET", "/v1/partitions?x=1&topic=t"),
            Route::Partitions {
                topic: Some("t".into())
            }
        );
        assert_eq!(
            parse("POST", "/v1/cluster/voters?add=4&remove=2"),
            Route::ChangeVoters {
                add: vec![4],
                remove: vec![2]
            }
        );
        for (method, uri, status) in [
            (
                "GET",
                "/v1/cluster/voters?add=4",
                StatusCode::METHOD_NOT_ALLOWED,
            ),
            ("POST", "/v1/cluster/voters?add=x", StatusCode::BAD_REQUEST),
            ("POST", "/v1/cluster/voters?drop=1", StatusCode::BAD_REQUEST),
            ("POST", "/v1/cluster/voters", StatusCode::BAD_REQUEST),
            (
                "POST",
                "/v1/cluster/voters?add=99999999999999999999999",
                StatusCode::BAD_REQUEST,
            ),
            ("GET", "/nope", StatusCode::NOT_FOUND),
        ] {
            assert!(
                matches!(parse(method, uri), Route::Refused(s, _) if s == status),
                "{method} {uri}"
            );
        }
    }
}
