//! Node-to-node calls of the metadata quorum: one request, one response, as length-prefixed
//! JSON frames over TCP (the raft port, `--raft-addr`).
//!
//! Raft's own RPCs (append, vote, snapshot chunks) travel here, and so do the calls a node
//! makes to whichever node leads: a proposal forwarded by a node that does not lead, a learner
//! asking to join, a broker's heartbeat, a read barrier, a change of voters.
//!
//! Invariants:
//! - A frame's length is checked against [`MAX_FRAME`] before anything is allocated, so a
//!   stray client (or a Kafka client pointed at the wrong port) costs one closed connection.
//! - A call never reports an answer it did not receive: a connection that fails in any way is
//!   dropped and the call returns an `io::Error`. Pooled connections are reused only after a
//!   complete exchange.
//! - Calls that must not run twice (proposals) use [`Peer::call_once`], which never reuses a
//!   pooled connection: a pooled connection closed by a restarted peer would fail after the
//!   request was written, leaving the caller unable to tell whether it ran.

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
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::command::{Command, CommandResult, NodeId};
use crate::controller::{Heartbeat, HeartbeatReply};
use crate::types::TypeConfig;

/// Largest frame accepted. Snapshot chunks are the biggest messages (openraft's default chunk
/// is 3 MiB, and JSON spells bytes as numbers: up to 4 characters per byte).
pub(crate) const MAX_FRAME: usize = 64 << 20;

/// Idle connections kept per peer.
const IDLE_PER_PEER: usize = 4;

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
    Joined(Result<(), Refusal>),
    Heartbeat(Result<HeartbeatReply, Refusal>),
    ReadIndex(Result<u64, Refusal>),
    VotersChanged(Result<(), Refusal>),
}

/// Why a node did not do what a leader-only request asked.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub(crate) enum Refusal {
    /// This node does not lead; `leader` is the one it knows of, if any.
    NotLeader { leader: Option<(NodeId, String)> },
    /// The request was refused for another reason (invalid membership change, shutting down).
    Failed(String),
}

async fn write_frame<T: Serialize>(stream: &mut TcpStream, msg: &T) -> io::Result<()> {
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
pub(crate) async fn read_frame<T: DeserializeOwned>(
    stream: &mut TcpStream,
) -> io::Result<Option<T>> {
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
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).await?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

pub(crate) async fn write_response(stream: &mut TcpStream, msg: &Response) -> io::Result<()> {
    write_frame(stream, msg).await
}

/// Connections to one peer address.
#[derive(Debug)]
pub(crate) struct Peer {
    addr: String,
    idle: Mutex<Vec<TcpStream>>,
}

impl Peer {
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    async fn connect(&self, timeout: Duration) -> io::Result<TcpStream> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect(&self.addr))
            .await
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connecting to {} timed out", self.addr),
                )
            })??;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    async fn exchange(stream: &mut TcpStream, req: &Request) -> io::Result<Response> {
        write_frame(stream, req).await?;
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
        let pooled = self
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let mut stream = match pooled {
            Some(s) => s,
            None => self.connect(timeout).await?,
        };
        let response = tokio::time::timeout(timeout, Self::exchange(&mut stream, req))
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
        let mut stream = self.connect(timeout).await.map_err(CallError::NotSent)?;
        tokio::time::timeout(timeout, Self::exchange(&mut stream, req))
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
    by_addr: Mutex<HashMap<String, Arc<Peer>>>,
}

impl Peers {
    pub(crate) fn get(&self, addr: &str) -> Arc<Peer> {
        self.by_addr
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(addr.to_string())
            .or_insert_with(|| {
                Arc::new(Peer {
                    addr: addr.to_string(),
                    idle: Mutex::new(Vec::new()),
                })
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use tokio::net::TcpListener;

    use super::*;

    async fn echo_server() -> (String, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    while let Ok(Some(req)) = read_frame::<Request>(&mut stream).await {
                        let answer = match req {
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
        let (mut stream, _) = listener.accept().await.expect("accept");
        let err = read_frame::<Request>(&mut stream)
            .await
            .expect_err("refused");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        drop(client.await);
    }
}
