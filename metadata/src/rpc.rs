//! Node-to-node calls of the metadata quorum: one request, one response, as length-prefixed
//! JSON frames over TCP (the raft port, `--raft-addr`).
//!
//! Raft's own RPCs (append, vote, snapshot chunks) travel here, and so do the calls a node
//! makes to whichever node leads: a proposal forwarded by a node that does not lead, a learner
//! asking to join, a broker's heartbeat, a read barrier, a change of voters.
//!
//! Invariants:
//! - A frame's length is checked against [`MAX_FRAME`], and its buffer grows only with the
//!   bytes that arrive, so a stray client (or a Kafka client pointed at the wrong port) costs
//!   one closed connection; a frame must arrive within [`FRAME_TIMEOUT`] of its length, and the
//!   port serves at most [`MAX_CONNECTIONS`] connections.
//! - A call never reports an answer it did not receive: a connection that fails in any way is
//!   dropped and the call returns an `io::Error`. Pooled connections are reused only after a
//!   complete exchange.
//! - Calls that must not run twice (proposals) use [`Peer::call_once`], which never reuses a
//!   pooled connection: a pooled connection closed by a restarted peer would fail after the
//!   request was written, leaving the caller unable to tell whether it ran.
//! - Every request carries the sender's quorum id ([`QuorumId`]); a node that knows its own
//!   answers only requests of its quorum (a node of another cluster that reaches this address
//!   — a reused port, a wrong `--voters` — gets its connection closed, and no vote or entry of
//!   a foreign cluster is ever applied here).
//! - With [`RaftTls`], every connection is mutual TLS: a node presents its certificate and
//!   accepts a peer only if it presents one the configured CA signed, so a process without
//!   the cluster's credentials can neither vote, nor join, nor append.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::command::{Command, CommandResult, NodeId};
use crate::controller::{Heartbeat, HeartbeatReply};
use crate::types::TypeConfig;

/// A TLS handshake on the raft port must finish within this.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Mutual TLS on the raft port. The configurations are asked for at each new connection, so
/// rotated files apply from the next one.
#[derive(Clone)]
pub struct RaftTls {
    /// How this node accepts a peer (it must require a client certificate).
    pub server: Arc<dyn Fn() -> io::Result<Arc<rustls::ServerConfig>> + Send + Sync>,
    /// How this node connects to a peer (presenting its certificate).
    pub client: Arc<dyn Fn() -> io::Result<Arc<rustls::ClientConfig>> + Send + Sync>,
}

impl std::fmt::Debug for RaftTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RaftTls")
    }
}

/// A connection on the raft port: TCP, or TLS over it.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}
pub(crate) type Conn = Box<dyn Stream>;

/// Accepts one connection as `tls` says: as it is, or after a TLS handshake that verified
/// the peer's certificate.
pub(crate) async fn accept(stream: TcpStream, tls: Option<&RaftTls>) -> io::Result<Conn> {
    stream.set_nodelay(true)?;
    let Some(tls) = tls else {
        return Ok(Box::new(stream));
    };
    let acceptor = tokio_rustls::TlsAcceptor::from((tls.server)()?);
    let tls = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream))
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
    Ok(Box::new(tls))
}

/// Largest frame accepted. Snapshot chunks are the biggest messages (openraft's default chunk
/// is 3 MiB, and JSON spells bytes as numbers: up to 4 characters per byte).
pub(crate) const MAX_FRAME: usize = 64 << 20;

/// Once its length has arrived, a frame's body must arrive within this.
const FRAME_TIMEOUT: Duration = Duration::from_secs(60);

/// Connections the raft port serves at once: peers keep a few each, so this is far above
/// any real cluster's need and bounds what a stray or hostile client can hold.
pub(crate) const MAX_CONNECTIONS: usize = 1024;

/// Idle connections kept per peer.
const IDLE_PER_PEER: usize = 4;

/// Calls in flight to one peer at once; more wait for one to finish. A broker of 16,384
/// partitions proposing an ISR change for each at once opened a connection per call, past the
/// peer's [`MAX_CONNECTIONS`], and the refused calls failed instead of queueing.
const CALLS_PER_PEER: usize = 64;

/// The identity of one metadata quorum: derived from the voters it was initialized with,
/// learned by a joining node from the leader, kept in the metadata directory. Unknown only on
/// a node that has not joined yet.
#[derive(Debug, Default)]
pub(crate) struct QuorumId(std::sync::OnceLock<String>);

impl QuorumId {
    /// The id of a quorum initialized with `voters`: a stable hash of `id@addr` pairs.
    pub(crate) fn of_voters<'a>(voters: impl IntoIterator<Item = (&'a u64, &'a String)>) -> String {
        let mut pairs: Vec<String> = voters
            .into_iter()
            .map(|(id, addr)| format!("{id}@{addr}"))
            .collect();
        pairs.sort();
        // FNV-1a 64: stable across builds and platforms (std's hasher is not).
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in pairs.join(",").bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        format!("{h:016x}")
    }

    pub(crate) fn get(&self) -> Option<&str> {
        self.0.get().map(String::as_str)
    }

    /// Sets the id unless it is set already; returns the id in force.
    pub(crate) fn set(&self, id: String) -> &str {
        self.0.get_or_init(|| id)
    }
}

/// A request as it travels: the sender's quorum id, then the request.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Envelope {
    pub quorum: Option<String>,
    pub request: Request,
}

/// What one node asks of another.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Request {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    /// Propose a command (sent to the leader by a node that does not lead).
    Propose(Command),
    /// Add the sender to the quorum as a learner (a broker that is not a voter).
    Join {
        node_id: NodeId,
        addr: String,
    },
    /// A broker's liveness report to the controller.
    Heartbeat(Heartbeat),
    /// The index a read must have applied to see every write committed before it was asked.
    ReadIndex,
    /// Promote learners to voters, or demote voters to learners.
    ChangeVoters {
        add: Vec<NodeId>,
        remove: Vec<NodeId>,
    },
    /// The quorum as the leader sees it (DescribeQuorum asked of a node that does not lead).
    Status,
}

/// The answer to a [`Request`], variant for variant.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Response {
    AppendEntries(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    InstallSnapshot(
        Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
    ),
    /// The command's result and the index of the log entry that carried it.
    Proposed(Result<(CommandResult, u64), Refusal>),
    /// The quorum id, for the joining node to keep.
    Joined(Result<String, Refusal>),
    Heartbeat(Result<HeartbeatReply, Refusal>),
    ReadIndex(Result<u64, Refusal>),
    VotersChanged(Result<(), Refusal>),
    Status(Result<crate::status::QuorumStatus, Refusal>),
}

/// Why a node did not do what a leader-only request asked.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) enum Refusal {
    /// This node does not lead; `leader` is the one it knows of, if any.
    NotLeader { leader: Option<(NodeId, String)> },
    /// The request was refused for another reason (invalid membership change, shutting down).
    Failed(String),
}

async fn write_frame<T: Serialize>(stream: &mut Conn, msg: &T) -> io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(io::Error::other)?;
    if body.len() > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("frame of {} bytes is over {MAX_FRAME}", body.len()),
        ));
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    stream.write_all(&frame).await
}

/// Reads one frame; `Ok(None)` at a clean end of stream before its first byte.
pub(crate) async fn read_frame<T: DeserializeOwned>(stream: &mut Conn) -> io::Result<Option<T>> {
    let mut len = [0u8; 4];
    match stream.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes is over {MAX_FRAME}: not a strata raft peer?"),
        ));
    }
    // The buffer grows with the bytes that arrive, not with the length announced, and a frame
    // trickling in cannot hold its connection forever.
    let mut body = Vec::new();
    tokio::time::timeout(
        FRAME_TIMEOUT,
        (&mut *stream).take(len as u64).read_to_end(&mut body),
    )
    .await
    .map_err(|_| {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("a frame of {len} bytes did not arrive within {FRAME_TIMEOUT:?}"),
        )
    })??;
    if body.len() < len {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    decode(&body).map(Some)
}

/// Decodes one frame's body (the raft RPC fuzz target's entry point).
pub(crate) fn decode<T: DeserializeOwned>(body: &[u8]) -> io::Result<T> {
    serde_json::from_slice(body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

pub(crate) async fn write_response(stream: &mut Conn, msg: &Response) -> io::Result<()> {
    write_frame(stream, msg).await
}

/// Connections to one peer address.
pub(crate) struct Peer {
    addr: String,
    quorum: Arc<QuorumId>,
    tls: Option<RaftTls>,
    idle: Mutex<Vec<Conn>>,
    /// [`CALLS_PER_PEER`] permits.
    calls: tokio::sync::Semaphore,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Peer({})", self.addr)
    }
}

impl Peer {
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    async fn connect(&self, timeout: Duration) -> io::Result<Conn> {
        let timed_out = || {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("connecting to {} timed out", self.addr),
            )
        };
        // Whatever keeps the connection from being made — refused, a name that no longer
        // resolves, a host that does not answer (a terminated instance) — is NotConnected:
        // the raft transport reports the peer unreachable and openraft backs off rather
        // than redialing (and logging) on every heartbeat.
        let not_connected = |e: io::Error| {
            io::Error::new(
                io::ErrorKind::NotConnected,
                format!("cannot connect to {}: {e}", self.addr),
            )
        };
        let stream = tokio::time::timeout(timeout, TcpStream::connect(&self.addr))
            .await
            .map_err(|_| not_connected(timed_out()))?
            .map_err(not_connected)?;
        stream.set_nodelay(true)?;
        let Some(tls) = &self.tls else {
            return Ok(Box::new(stream));
        };
        let host = self.addr.rsplit_once(':').map_or(&*self.addr, |(h, _)| h);
        let name =
            rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']).to_string())
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let connector = tokio_rustls::TlsConnector::from((tls.client)()?);
        let tls = tokio::time::timeout(timeout, connector.connect(name, stream))
            .await
            .map_err(|_| timed_out())??;
        Ok(Box::new(tls))
    }

    /// One of the peer's call permits, waiting at most `timeout` for it (then nothing was
    /// sent), and what is left of `timeout` for the call.
    async fn permit(
        &self,
        timeout: Duration,
    ) -> io::Result<(tokio::sync::SemaphorePermit<'_>, Duration)> {
        let started = tokio::time::Instant::now();
        let permit = tokio::time::timeout(timeout, self.calls.acquire())
            .await
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{CALLS_PER_PEER} calls to {} in flight for {timeout:?}",
                        self.addr
                    ),
                )
            })?
            .map_err(|_| io::Error::other("the peer's call permits are closed"))?;
        let left = timeout.saturating_sub(started.elapsed());
        Ok((permit, left.max(Duration::from_millis(1))))
    }

    async fn exchange(&self, stream: &mut Conn, req: &Request) -> io::Result<Response> {
        #[derive(Serialize)]
        struct EnvelopeRef<'a> {
            quorum: Option<&'a str>,
            request: &'a Request,
        }
        let envelope = EnvelopeRef {
            quorum: self.quorum.get(),
            request: req,
        };
        write_frame(stream, &envelope).await?;
        read_frame(stream).await?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the peer closed the connection before answering",
            )
        })
    }

    /// Sends `req` and waits for the answer, on a pooled connection when one is idle.
    /// For requests that are safe to repeat.
    pub(crate) async fn call(&self, req: &Request, timeout: Duration) -> io::Result<Response> {
        let (_permit, timeout) = self.permit(timeout).await?;
        let pooled = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let mut stream = match pooled {
            Some(s) => s,
            None => self.connect(timeout).await?,
        };
        let response = tokio::time::timeout(timeout, self.exchange(&mut stream, req))
            .await
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{} did not answer within {timeout:?}", self.addr),
                )
            })??;
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < IDLE_PER_PEER {
            idle.push(stream);
        }
        Ok(response)
    }

    /// Sends `req` on a new connection that is closed afterwards: for requests that must not
    /// run twice. A connect failure means the request was not sent; any later failure leaves
    /// it unknown.
    pub(crate) async fn call_once(
        &self,
        req: &Request,
        timeout: Duration,
    ) -> Result<Response, CallError> {
        let (_permit, timeout) = self.permit(timeout).await.map_err(CallError::NotSent)?;
        let mut stream = self.connect(timeout).await.map_err(CallError::NotSent)?;
        tokio::time::timeout(timeout, self.exchange(&mut stream, req))
            .await
            .map_err(|_| {
                CallError::Unknown(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{} did not answer within {timeout:?}", self.addr),
                ))
            })?
            .map_err(CallError::Unknown)
    }
}

/// How a [`Peer::call_once`] failed.
#[derive(Debug)]
pub(crate) enum CallError {
    /// The connection could not be made: the request was not sent.
    NotSent(io::Error),
    /// The request may or may not have run.
    Unknown(io::Error),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::NotSent(e) => write!(f, "not sent: {e}"),
            CallError::Unknown(e) => write!(f, "outcome unknown: {e}"),
        }
    }
}

/// Every peer this node talks to, by address.
#[derive(Debug, Default)]
pub(crate) struct Peers {
    quorum: Arc<QuorumId>,
    tls: Option<RaftTls>,
    by_addr: Mutex<HashMap<String, Arc<Peer>>>,
}

impl Peers {
    pub(crate) fn new(quorum: Arc<QuorumId>, tls: Option<RaftTls>) -> Peers {
        Peers {
            quorum,
            tls,
            by_addr: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn get(&self, addr: &str) -> Arc<Peer> {
        self.by_addr
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(addr.to_string())
            .or_insert_with(|| {
                Arc::new(Peer {
                    addr: addr.to_string(),
                    quorum: self.quorum.clone(),
                    tls: self.tls.clone(),
                    idle: Mutex::new(Vec::new()),
                    calls: tokio::sync::Semaphore::new(CALLS_PER_PEER),
                })
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use tokio::net::TcpListener;

    use super::*;

    /// A peer that accepts connections and never answers: at most [`CALLS_PER_PEER`] of a
    /// burst of calls reach it at once, the rest wait their turn, and every call ends by its
    /// timeout.
    #[tokio::test]
    async fn calls_to_one_peer_are_capped_and_the_rest_wait() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                held.push(s);
            }
        });
        let peer = Peers::new(Arc::default(), None).get(&addr);
        let calls: Vec<_> = (0..3 * CALLS_PER_PEER)
            .map(|_| {
                let peer = peer.clone();
                tokio::spawn(async move {
                    peer.call_once(&Request::ReadIndex, Duration::from_millis(300))
                        .await
                })
            })
            .collect();
        for call in calls {
            assert!(call.await.unwrap().is_err(), "nobody answers");
        }
        let reached = accepted.load(Ordering::SeqCst);
        assert!(
            reached > 0 && reached <= CALLS_PER_PEER,
            "{reached} connections"
        );
    }

    #[test]
    fn fuzz_regressions_are_refused() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions/raft_rpc");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            assert!(
                !crate::decode_rpc_frame(&std::fs::read(&path).unwrap()),
                "{}",
                path.display()
            );
            n += 1;
        }
        assert!(n > 0);
    }

    /// Frames as nodes send them, one of each kind that carries data: they decode, and they
    /// are the raft_rpc fuzz target's seeds (written to `$STRATA_FUZZ_CORPUS/raft_rpc` when
    /// that is set, by scripts/fuzz.sh).
    #[test]
    fn real_frames_decode_and_seed_the_fuzzer() {
        use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Vote};
        let vote = Vote::new(3, 1);
        let log_id = LogId::new(CommittedLeaderId::new(3, 1), 41);
        let entry = Entry::<TypeConfig> {
            log_id,
            payload: EntryPayload::Normal(Command::RegisterBroker {
                node_id: 2,
                host: "127.0.0.1".into(),
                port: 9192,
                rack: Some("a".into()),
                listeners: vec![],
                admin: None,
            }),
        };
        let requests = vec![
            Request::Vote(VoteRequest::new(vote, Some(log_id))),
            Request::AppendEntries(AppendEntriesRequest {
                vote,
                prev_log_id: Some(log_id),
                entries: vec![entry],
                leader_commit: Some(log_id),
            }),
            Request::Propose(Command::FenceBroker {
                node_id: 2,
                epoch: 7,
            }),
            Request::Heartbeat(Heartbeat {
                node_id: 2,
                epoch: 7,
                shutting_down: false,
            }),
            Request::ReadIndex,
            Request::ChangeVoters {
                add: vec![4],
                remove: vec![],
            },
        ];
        let mut frames: Vec<Vec<u8>> = requests
            .into_iter()
            .map(|request| {
                serde_json::to_vec(&Envelope {
                    quorum: Some("quorum".into()),
                    request,
                })
                .unwrap()
            })
            .collect();
        for response in [
            Response::ReadIndex(Ok(41)),
            Response::Proposed(Err(Refusal::NotLeader {
                leader: Some((1, "127.0.0.1:9093".into())),
            })),
            Response::Vote(Ok(VoteResponse::new(vote, Some(log_id), true))),
        ] {
            frames.push(serde_json::to_vec(&response).unwrap());
        }
        let seeds = std::env::var_os("STRATA_FUZZ_CORPUS")
            .map(|d| std::path::PathBuf::from(d).join("raft_rpc"));
        for (i, f) in frames.iter().enumerate() {
            assert!(crate::decode_rpc_frame(f), "{}", String::from_utf8_lossy(f));
            if let Some(dir) = &seeds {
                std::fs::create_dir_all(dir).unwrap();
                std::fs::write(dir.join(format!("real-{i}.json")), f).unwrap();
            }
        }
        assert!(!crate::decode_rpc_frame(
            b"{\"quorum\":null,\"request\":{\"Vote\":[[[[[[["
        ));
    }

    async fn echo_server() -> (String, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let mut stream: Conn = Box::new(stream);
                tokio::spawn(async move {
                    while let Ok(Some(env)) = read_frame::<Envelope>(&mut stream).await {
                        let answer = match env.request {
                            Request::ReadIndex => Response::ReadIndex(Ok(7)),
                            _ => Response::ReadIndex(Err(Refusal::Failed("no".into()))),
                        };
                        if write_response(&mut stream, &answer).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (addr, task)
    }

    #[tokio::test]
    async fn calls_reuse_a_connection_and_fresh_calls_do_not() {
        let (addr, server) = echo_server().await;
        let peers = Peers::default();
        let peer = peers.get(&addr);
        assert!(Arc::ptr_eq(&peer, &peers.get(&addr)));
        for _ in 0..3 {
            let r = peer
                .call(&Request::ReadIndex, Duration::from_secs(5))
                .await
                .expect("call");
            assert!(matches!(r, Response::ReadIndex(Ok(7))), "{r:?}");
        }
        assert_eq!(peer.idle.lock().unwrap().len(), 1);
        let r = peer
            .call_once(&Request::ReadIndex, Duration::from_secs(5))
            .await
            .expect("call once");
        assert!(matches!(r, Response::ReadIndex(Ok(7))), "{r:?}");
        assert_eq!(peer.idle.lock().unwrap().len(), 1);
        server.abort();
    }

    #[tokio::test]
    async fn an_unreachable_peer_is_an_error_and_a_fresh_call_was_not_sent() {
        // Bind and drop, so nothing listens on the port.
        let addr = {
            let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            l.local_addr().expect("addr").to_string()
        };
        let peer = Peers::default().get(&addr);
        assert!(peer
            .call(&Request::ReadIndex, Duration::from_secs(1))
            .await
            .is_err());
        assert!(matches!(
            peer.call_once(&Request::ReadIndex, Duration::from_secs(1))
                .await,
            Err(CallError::NotSent(_))
        ));
    }

    #[tokio::test]
    async fn an_oversized_frame_is_refused_before_allocation() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let client = tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.expect("connect");
            s.write_all(&u32::MAX.to_be_bytes()).await.expect("write");
            s
        });
        let (stream, _) = listener.accept().await.expect("accept");
        let mut stream: Conn = Box::new(stream);
        let err = read_frame::<Request>(&mut stream)
            .await
            .expect_err("refused");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        drop(client.await);
    }

    #[test]
    fn quorum_ids_depend_on_the_voters_not_their_order() {
        let a =
            std::collections::BTreeMap::from([(1u64, "h:1".to_string()), (2, "h:2".to_string())]);
        let (h1, h2) = ("h:1".to_string(), "h:2".to_string());
        let b = vec![(&2u64, &h2), (&1u64, &h1)];
        let id = QuorumId::of_voters(&a);
        assert_eq!(id, QuorumId::of_voters(b));
        let c =
            std::collections::BTreeMap::from([(1u64, "h:1".to_string()), (2, "h:3".to_string())]);
        assert_ne!(id, QuorumId::of_voters(&c));
        let q = QuorumId::default();
        assert_eq!(q.get(), None);
        assert_eq!(q.set(id.clone()), id);
        assert_eq!(q.set("other".into()), id, "set once");
    }
}
