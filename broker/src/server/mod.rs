//! The Kafka listeners: accepts connections, reads frames, answers requests in order.
//!
//! One accept loop per configured listener, under connection limits they share. On a TLS
//! listener the handshake runs first, in the connection's task and within
//! `socket_io_timeout_ms`; the TLS stream's halves then replace the socket's and nothing below
//! knows the difference. Each connection carries its `security::Connection` (listener,
//! address, principal, SASL exchange), and a request the connection may not send yet (anything
//! but ApiVersions and SASL before a SASL listener's authentication) closes it.
//!
//! Per connection, a reader task decodes frames into a small bounded queue while earlier
//! requests are handled, and a processor handles them in the order they came. A produce is
//! handled in two stages: its appends run at once, in request order (Kafka's ordering
//! guarantee: produce requests pipelined on one connection are appended in the order sent);
//! for acks=all, the wait for the ISR then runs while the processor takes the next produce, as
//! Redpanda does. A client sending one partition per request (librdkafka, spreading records
//! over many partitions) thus keeps several replication rounds in flight on one connection
//! instead of one. Any other request waits until every earlier one has been answered, and
//! responses are always written in request order.
//!
//! Invariants (docs/invariants.md 7, bad input):
//! - a TLS listener serves nothing in plaintext, and a SASL listener nothing before the
//!   client authenticated;
//! - a bad frame, a malformed request or a panic while handling one closes only its own
//!   connection; every other connection carries on (a panic is caught at the request, counted
//!   on `/metrics`, and never reaches the process);
//! - memory per connection is bounded: at most [`PIPELINE_DEPTH`] decoded requests wait, at
//!   most [`PIPELINE_DEPTH`] appended produces wait for their ISR (holding their outcomes, not
//!   their records), the read buffer, and one response being written; memory across
//!   connections is bounded by `queued_max_request_bytes` (see [`frame`]), `max_connections`
//!   and `max_connections_per_ip`;
//! - a client over a quota is told to back off (`throttle_time_ms`) and its connection takes no
//!   further request until the throttle has passed (responses already due are still
//!   written), so a client ignoring the hint is held to its quota too;
//! - no connection is held forever by a client that does nothing: idle ones close after
//!   `connections_max_idle_ms`, and a request must arrive, and its response be written, within
//!   `socket_io_timeout_ms` (a client that pipelines without reading its responses stops
//!   being read once the queue is full, then is closed).

use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{FuturesOrdered, StreamExt};
use futures::FutureExt;
use kafka_protocol::messages::{ApiKey, ResponseKind};
use tokio::io::AsyncRead;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::broker::Broker;
use crate::config::listeners::{Listener, SecurityProtocol};
use crate::handlers;
use crate::protocol::frame::{self, RequestBudget};
use crate::protocol::{self, DecodeError, Request};
use crate::quota::{self, ConnectionQuotas};
use crate::security::Connection;
use write::WriteHalf;

mod write;

/// Requests decoded ahead of the one being handled, and appended produces waiting for their
/// ISR, per connection (each).
const PIPELINE_DEPTH: usize = 8;

/// Open connections per client address.
#[derive(Default)]
struct PerIp(Mutex<HashMap<IpAddr, usize>>);

/// One connection's place in [`PerIp`], given back when dropped.
struct IpSlot {
    table: Arc<PerIp>,
    ip: IpAddr,
}

impl PerIp {
    fn take(table: &Arc<PerIp>, ip: IpAddr, max: usize) -> Option<IpSlot> {
        let mut open = table.0.lock().unwrap_or_else(PoisonError::into_inner);
        let n = open.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(IpSlot {
            table: table.clone(),
            ip,
        })
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut open = self.table.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// Connection limits shared by every listener.
struct Limits {
    connections: Arc<Semaphore>,
    per_ip: Arc<PerIp>,
}

/// Serves every listener until shutdown, then lets each connection finish the request it is
/// handling.
pub async fn serve(
    listeners: Vec<(TcpListener, Listener)>,
    broker: Arc<Broker>,
    budget: RequestBudget,
    shutdown: watch::Receiver<bool>,
) {
    let limits = Arc::new(Limits {
        connections: Arc::new(Semaphore::new(broker.node.config.max_connections)),
        per_ip: Arc::new(PerIp::default()),
    });
    let mut accepting = JoinSet::new();
    for (socket, listener) in listeners {
        accepting.spawn(accept(
            socket,
            listener,
            broker.clone(),
            limits.clone(),
            budget.clone(),
            shutdown.clone(),
        ));
    }
    while accepting.join_next().await.is_some() {}
}

async fn accept(
    socket: TcpListener,
    listener: Listener,
    broker: Arc<Broker>,
    limits: Arc<Limits>,
    budget: RequestBudget,
    mut shutdown: watch::Receiver<bool>,
) {
    let name: Arc<str> = Arc::from(listener.name.as_str());
    let protocol = listener.protocol;
    let mut connections = JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = socket.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, most often: back off rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        let Ok(permit) = limits.connections.clone().try_acquire_owned() else {
            broker.node.metrics.connection_rejected("max_connections");
            tracing::warn!(%peer, "connection refused: max_connections reached");
            continue;
        };
        let Some(ip_slot) = PerIp::take(
            &limits.per_ip,
            peer.ip(),
            broker.node.config.max_connections_per_ip,
        ) else {
            broker
                .node
                .metrics
                .connection_rejected("max_connections_per_ip");
            tracing::warn!(%peer, "connection refused: max_connections_per_ip reached");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let broker = broker.clone();
        let shutdown = shutdown.clone();
        let budget = budget.clone();
        let conn = Connection::new(peer, name.clone(), protocol);
        connections.spawn(async move {
            broker.node.metrics.connection_opened();
            let span = tracing::debug_span!("conn", %peer, listener = %conn.listener);
            let served = async {
                let (reader, writer, conn) = open(stream, conn, &broker).await?;
                connection(reader, writer, conn, &broker, budget, shutdown)
                    .await
                    .err()
            };
            if let Some(e) = served.instrument(span).await {
                tracing::debug!(%peer, error = %e, "connection closed with error");
            }
            broker.node.metrics.connection_closed();
            drop((permit, ip_slot));
        });
        // Reap finished connections so the set does not grow with every client ever seen.
        while connections.try_join_next().is_some() {}
    }
    // Stop accepting; let every connection finish the request it is handling.
    drop(socket);
    while connections.join_next().await.is_some() {}
}

/// The connection's two halves: the socket's, or on a TLS listener the TLS stream's after
/// the handshake (bounded by `socket_io_timeout_ms`, and for mTLS naming the principal).
/// `None`: the handshake failed and the connection is over.
async fn open(
    stream: TcpStream,
    mut conn: Connection,
    broker: &Broker,
) -> Option<(Reader, WriteHalf, Connection)> {
    // The read half keeps the socket open, and the frame reader that holds this setter holds
    // the read half: the descriptor outlives every call.
    let fd = stream.as_raw_fd();
    let low_water = move || -> frame::SetLowWater {
        Box::new(move |bytes| crate::sys::set_receive_low_water(fd, bytes))
    };
    if !conn.protocol().tls() {
        let (reader, writer) = stream.into_split();
        let reader = Reader {
            stream: Box::new(reader),
            low_water: low_water(),
            slack: 0,
        };
        return Some((reader, WriteHalf::Plain(writer), conn));
    }
    let Some(acceptor) = broker.security.tls_acceptor(conn.protocol()) else {
        // Security::new loads TLS whenever a listener needs it; never fall back to plaintext.
        tracing::error!(listener = %conn.listener, "a TLS listener without a TLS configuration; closing the connection");
        return None;
    };
    let io_timeout = Duration::from_millis(broker.node.config.socket_io_timeout_ms);
    let metrics = broker.security.metrics();
    // rustls reads the socket 4 KiB at a time: a 16 KiB record took five receive calls and a
    // 1 MB produce some 300. Buffered underneath, one call takes what has arrived.
    let stream = tokio::io::BufReader::with_capacity(TLS_RECEIVE_BUFFER, stream);
    let tls = match tokio::time::timeout(io_timeout, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            metrics.tls_handshake(&conn.listener, "failed");
            // Info, as Kafka logs a failed authentication: a misconfigured client retrying
            // many times a second would otherwise flood the warnings.
            tracing::info!(peer = %conn.peer, listener = %conn.listener, error = %e, "TLS handshake failed");
            broker
                .security
                .audit_authentication(&conn, "TLS", Err(&e.to_string()));
            return None;
        }
        Err(_) => {
            metrics.tls_handshake(&conn.listener, "timed_out");
            tracing::info!(peer = %conn.peer, listener = %conn.listener, "TLS handshake timed out");
            return None;
        }
    };
    metrics.tls_handshake(&conn.listener, "ok");
    if conn.protocol() == SecurityProtocol::Ssl {
        // mTLS: a verified client certificate names the principal (SASL_SSL's comes from SASL).
        let certificate = tls.get_ref().1.peer_certificates().and_then(|c| c.first());
        match broker.security.certificate_principal(certificate) {
            Ok(Some(principal)) => {
                broker
                    .security
                    .audit_authentication(&conn, "SSL", Ok(&principal));
                conn.authenticated_by_certificate(principal)
            }
            Ok(None) => {}
            Err(why) => {
                metrics.authentication(&conn.listener, "SSL", "failed");
                broker
                    .security
                    .audit_authentication(&conn, "SSL", Err(&why));
                tracing::info!(peer = %conn.peer, listener = %conn.listener, "client certificate refused: {why}");
                return None;
            }
        }
    }
    let (reader, writer) = tokio::io::split(tls);
    let reader = Reader {
        stream: Box::new(reader),
        low_water: low_water(),
        // Ciphertext in the receive buffer, and inside rustls a partial record beside a
        // decrypted one not yet taken (it reads on only once that is empty).
        slack: TLS_RECEIVE_BUFFER + 2 * TLS_RECORD_MAX,
    };
    Some((reader, WriteHalf::Tls(Box::new(writer)), conn))
}

enum Incoming {
    Request(Box<Request>, OwnedSemaphorePermit),
    /// ApiVersions with a version we do not speak: answer in v0 so the client can downgrade.
    UnsupportedApiVersions(i32),
}

/// What the reader and the processor of one connection share to tell an idle connection.
struct Activity {
    /// On tokio's clock: the idle deadline is a timer's.
    epoch: tokio::time::Instant,
    /// Milliseconds since `epoch` of the last request received or response written.
    last: AtomicU64,
    /// Requests read and not yet answered.
    in_flight: AtomicUsize,
}

impl Activity {
    fn touch(&self) {
        self.last
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// A request read from the connection, to be answered.
    fn received(&self) {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
    }

    /// A request answered (or one that needs no answer).
    fn answered(&self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.touch();
    }

    fn idle_deadline(&self, idle: Duration) -> tokio::time::Instant {
        self.epoch + Duration::from_millis(self.last.load(Ordering::Relaxed)) + idle
    }
}

/// Why the broker closed a connection (logged; the client sees the connection close).
#[derive(Debug, thiserror::Error)]
enum ConnError {
    #[error(transparent)]
    Frame(#[from] frame::FrameError),
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error(transparent)]
    Encode(#[from] protocol::EncodeError),
    #[error("the {0:?} handler panicked")]
    Panicked(ApiKey),
    #[error("the client did not read its response within {0:?}")]
    WriteTimeout(Duration),
    #[error("{0}")]
    Unauthenticated(&'static str),
    #[error("the request reader ended abnormally: {0}")]
    Reader(String),
}

/// The reading half of a connection, plain TCP or TLS.
type ReadHalf = Box<dyn AsyncRead + Send + Unpin>;

/// A connection's read half, and how its frame reader sets the socket's receive low-water
/// mark ([`frame::FrameReader::with_low_water`]).
struct Reader {
    stream: ReadHalf,
    low_water: frame::SetLowWater,
    slack: usize,
}

/// What one receive call on a TLS connection may take: four full TLS records.
const TLS_RECEIVE_BUFFER: usize = 64 * 1024;
/// A TLS record on the wire at most: 16 KiB of plaintext and its overhead.
const TLS_RECORD_MAX: usize = 16 * 1024 + 2048;

async fn connection(
    reader: Reader,
    mut writer: WriteHalf,
    mut conn: Connection,
    broker: &Arc<Broker>,
    budget: RequestBudget,
    shutdown: watch::Receiver<bool>,
) -> Result<(), ConnError> {
    let (tx, mut rx) = mpsc::channel::<Incoming>(PIPELINE_DEPTH);
    let io_timeout = Duration::from_millis(broker.node.config.socket_io_timeout_ms);
    let idle = Duration::from_millis(broker.node.config.connections_max_idle_ms);
    let activity = Arc::new(Activity {
        epoch: tokio::time::Instant::now(),
        last: AtomicU64::new(0),
        in_flight: AtomicUsize::new(0),
    });
    let frames = frame::FrameReader::new(
        reader.stream,
        broker.node.config.max_request_bytes,
        budget,
        io_timeout,
    )
    .with_low_water(reader.low_water, reader.slack);
    let reader_task = tokio::spawn(read_requests(
        frames,
        tx,
        broker.clone(),
        activity.clone(),
        idle,
        shutdown,
    ));
    let _reader = AbortOnDrop(reader_task.abort_handle());

    let mut quotas = ConnectionQuotas::default();
    // A quota's throttle: no request is taken from the connection until then.
    let mut muted_until: Option<tokio::time::Instant> = None;
    // Responses not yet written, oldest first; see the module's invariants.
    let mut queue: FuturesOrdered<BoxFuture<'_, Result<Reply, ConnError>>> = FuturesOrdered::new();
    let mut out = Writer {
        writer: &mut writer,
        broker,
        activity: &activity,
        io_timeout,
    };
    loop {
        let muted = muted_until.filter(|t| *t > tokio::time::Instant::now());
        let item = tokio::select! {
            biased;
            Some(done) = queue.next(), if !queue.is_empty() => {
                if !out.write(done?).await? {
                    return Ok(());
                }
                continue;
            }
            _ = sleep_until_some(muted), if muted.is_some() => {
                muted_until = None;
                continue;
            }
            item = rx.recv(), if queue.len() < PIPELINE_DEPTH && muted.is_none() => item,
        };
        let Some(item) = item else { break };
        let produce = matches!(&item, Incoming::Request(r, _) if r.api_key == ApiKey::Produce);
        if produce && !queue.is_empty() {
            broker.node.metrics.produce_pipelined();
        }
        if !produce {
            // Only produces overlap: anything else is handled once every earlier request has
            // been answered, as if the connection handled one request at a time.
            while let Some(done) = queue.next().await {
                if !out.write(done?).await? {
                    return Ok(());
                }
            }
        }
        let (step, throttle) = handle(broker, item, &mut conn, &mut quotas).await?;
        if !throttle.is_zero() {
            muted_until = Some(tokio::time::Instant::now() + throttle);
        }
        match step {
            Step::Reply(reply) if queue.is_empty() => {
                if !out.write(reply).await? {
                    return Ok(());
                }
            }
            Step::Reply(reply) => queue.push_back(futures::future::ready(Ok(reply)).boxed()),
            Step::Replicating(pending) => queue.push_back(pending),
        }
    }
    while let Some(done) = queue.next().await {
        if !out.write(done?).await? {
            return Ok(());
        }
    }
    writer.shutdown().await;
    match reader_task.await {
        Ok(r) => r,
        Err(e) => Err(ConnError::Reader(e.to_string())),
    }
}

/// Aborts a connection's reader task when the processor ends before it (an error, the client
/// gone, a write timeout): the reader holds the socket's reading half, which would keep the
/// descriptor open until the client sent again or idled out.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn sleep_until_some(deadline: Option<tokio::time::Instant>) {
    if let Some(t) = deadline {
        tokio::time::sleep_until(t).await;
    }
}

/// A response ready to write: its encoded chunks (`None` when the request gets no answer) and
/// the request budget it still holds, given back once written, and whether the connection
/// ends with it.
struct Reply {
    chunks: Option<protocol::Encoded>,
    budget: Option<OwnedSemaphorePermit>,
    /// Close the connection once this is written (a failed authentication).
    close: bool,
}

/// What handling one incoming request gave the processor.
enum Step<'a> {
    Reply(Reply),
    /// An acks=all produce, appended: its response once the ISR holds the records.
    Replicating(BoxFuture<'a, Result<Reply, ConnError>>),
}

/// Handles one request (stage one of a produce: its appends); the response, or for an acks=all
/// produce the future of its response, and how long the connection is muted after it (a
/// quota's throttle, which the response also tells the client).
async fn handle<'a>(
    broker: &'a Arc<Broker>,
    item: Incoming,
    conn: &mut Connection,
    quotas: &mut ConnectionQuotas,
) -> Result<(Step<'a>, Duration), ConnError> {
    let (req, budget) = match item {
        Incoming::UnsupportedApiVersions(correlation_id) => {
            let body = ResponseKind::ApiVersions(handlers::unsupported_version_response()).into();
            let chunks = protocol::encode_response(ApiKey::ApiVersions, 0, correlation_id, &body)?;
            let reply = Reply {
                chunks: Some(chunks),
                budget: None,
                close: false,
            };
            return Ok((Step::Reply(reply), Duration::ZERO));
        }
        Incoming::Request(req, budget) => (req, budget),
    };
    let api = req.api_key;
    if let Err(why) = conn.admit(api, broker.node.clock.instant()) {
        broker
            .node
            .metrics
            .connection_closed_by_broker("unauthenticated");
        tracing::warn!(peer = %conn.peer, listener = %conn.listener, ?api, "closing connection: {why}");
        return Err(ConnError::Unauthenticated(why));
    }
    let version = req.header.request_api_version;
    let correlation_id = req.header.correlation_id;
    let span = tracing::debug_span!(
        "request",
        api = ?api,
        version,
        correlation_id,
        client_id = req.header.client_id.as_ref().map(|c| c.as_str()).unwrap_or(""),
    );
    let mut req = req;
    let charges =
        (conn.principal()).and_then(|p| (broker.quotas).charges(quotas, &req, p, &broker.security));
    if let Some(c) = &charges {
        c.bound_fetch(&mut req);
    }
    let size = req.size;
    let timed = charges.as_ref().is_some_and(|c| c.times_requests());
    let started = crate::clock::Stopwatch::start();
    // Boxed: the dispatch future is as large as the largest handler's state (kilobytes), and
    // moved by value through the wrappers below it was copied several times per request, the
    // largest cost of a small request (a one-partition ListOffsets).
    let handler = Box::pin(handlers::handle(broker, *req, conn).instrument(span.clone()));
    let (handled, busy) = AssertUnwindSafe(quota::timed(handler, timed))
        .catch_unwind()
        .await
        .map_err(|_| panicked(broker, api, version, correlation_id))?;
    let fetched = match &handled {
        handlers::Handled::Now(Some(protocol::Response::Fetch(r))) => r.record_bytes(),
        _ => 0,
    };
    let throttle = charges.map_or(Duration::ZERO, |c| c.charge(api, size, fetched, busy));
    let throttle_ms = throttle.as_millis().min(i32::MAX as u128) as i32;
    let finish = move |body: Option<protocol::Response>, budget, close| {
        broker.node.metrics.request(
            crate::protocol::versions::name(api),
            started.elapsed().as_secs_f64(),
        );
        let chunks = match body {
            None => None,
            Some(body) => Some(
                protocol::encode_response(api, version, correlation_id, &body).inspect_err(
                    |e| tracing::error!(?api, version, error = %e, "cannot encode response; closing connection"),
                )?,
            ),
        };
        Ok(Reply {
            chunks,
            budget,
            close,
        })
    };
    let step = match handled {
        handlers::Handled::Now(mut body) => {
            if let Some(body) = &mut body {
                body.set_throttle_time_ms(throttle_ms);
            }
            finish(body, Some(budget), false).map(Step::Reply)
        }
        handlers::Handled::ThenClose(body) => {
            finish(Some(body), Some(budget), true).map(Step::Reply)
        }
        handlers::Handled::Replicating(appended) => {
            // The request's bytes are in the log now: its share of the request budget goes
            // back at once, so produces waiting for followers never hold the budget the
            // followers' fetches need.
            drop(budget);
            Ok(Step::Replicating(
                async move {
                    let mut body = AssertUnwindSafe(appended.respond().instrument(span))
                        .catch_unwind()
                        .await
                        .map_err(|_| panicked(broker, api, version, correlation_id))?;
                    body.throttle_time_ms = throttle_ms;
                    finish(Some(ResponseKind::Produce(body).into()), None, false)
                }
                .boxed(),
            ))
        }
    };
    Ok((step?, throttle))
}

/// A handler panicked: the panic hook counted and logged it; the client sees its connection
/// close, as for any request the broker cannot answer.
fn panicked(broker: &Broker, api: ApiKey, version: i16, correlation_id: i32) -> ConnError {
    broker.node.metrics.connection_closed_by_broker("panic");
    tracing::error!(
        ?api,
        version,
        correlation_id,
        "request handler panicked; closing its connection"
    );
    ConnError::Panicked(api)
}

/// The writing half of a connection.
struct Writer<'a> {
    writer: &'a mut WriteHalf,
    broker: &'a Broker,
    activity: &'a Activity,
    io_timeout: Duration,
}

impl Writer<'_> {
    /// Writes one response; `false` when the client went away or the connection ends with it.
    async fn write(&mut self, reply: Reply) -> Result<bool, ConnError> {
        if let Some(frame) = reply.chunks {
            let metrics = &self.broker.node.metrics;
            metrics.sent(frame.frame_len() as u64);
            match tokio::time::timeout(self.io_timeout, self.writer.write_frame(frame)).await {
                Ok(Ok(from_page_cache)) => metrics.sent_from_page_cache(from_page_cache),
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "response not written; connection over");
                    return Ok(false);
                }
                Err(_) => {
                    metrics.connection_closed_by_broker("write_timeout");
                    return Err(ConnError::WriteTimeout(self.io_timeout));
                }
            }
        }
        drop(reply.budget);
        self.activity.answered();
        Ok(!reply.close)
    }
}

/// The reading half of a connection: frames in, decoded requests out to the processor, until
/// the client leaves, sends a bad frame, idles past `idle`, or the broker shuts down.
async fn read_requests(
    mut frames: frame::FrameReader<ReadHalf>,
    tx: mpsc::Sender<Incoming>,
    broker: Arc<Broker>,
    activity: Arc<Activity>,
    idle: Duration,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), ConnError> {
    loop {
        let frame = tokio::select! {
            f = frames.next() => f,
            _ = shutdown.changed() => return Ok(()),
            _ = tokio::time::sleep_until(activity.idle_deadline(idle)) => {
                // Reading a frame, or a request in flight (a JoinGroup may take minutes),
                // is activity; `next` is cancel-safe, so the frame read goes on.
                if frames.in_frame() || activity.in_flight.load(Ordering::Acquire) > 0 {
                    activity.touch();
                    continue;
                }
                broker.node.metrics.connection_closed_by_broker("idle");
                tracing::debug!(?idle, "closing idle connection");
                return Ok(());
            }
        };
        let frame = match frame {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(()),
            // A reset or a half-sent frame is the client going away, not bad input.
            Err(e @ (frame::FrameError::Io(_) | frame::FrameError::Truncated)) => {
                tracing::debug!(error = %e, "connection ended");
                return Ok(());
            }
            Err(e @ frame::FrameError::TimedOut { .. }) => {
                broker
                    .node
                    .metrics
                    .connection_closed_by_broker("read_timeout");
                tracing::warn!(error = %e, "closing connection: request too slow to arrive");
                return Err(e.into());
            }
            Err(e) => {
                broker.node.metrics.bad_request("frame");
                tracing::warn!(error = %e, "closing connection: bad frame");
                return Err(e.into());
            }
        };
        activity.touch();
        if frame.waited {
            broker.node.metrics.request_waited_for_budget();
        }
        broker.node.metrics.received(frame.bytes.len() as u64 + 4);
        let item = match protocol::decode_request(frame.bytes) {
            Ok(req) => Incoming::Request(Box::new(req), frame.budget),
            Err(DecodeError::UnsupportedVersion {
                api: ApiKey::ApiVersions,
                correlation_id,
                ..
            }) => Incoming::UnsupportedApiVersions(correlation_id),
            Err(e) => {
                broker.node.metrics.bad_request(match e {
                    DecodeError::Short(_) => "short",
                    DecodeError::UnknownApi(_) => "unknown_api",
                    DecodeError::UnsupportedVersion { .. } => "unsupported_version",
                    DecodeError::Malformed { .. } => "malformed",
                });
                tracing::warn!(error = %e, "closing connection: bad request");
                return Err(e.into());
            }
        };
        activity.received();
        if tx.send(item).await.is_err() {
            return Ok(());
        }
    }
}
