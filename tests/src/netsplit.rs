//! Network partitions between the members of a [`Cluster`](crate::Cluster) on loopback.
//!
//! Every member's raft and Kafka listeners sit behind a byte-for-byte proxy, and the members
//! know each other only by the proxies' addresses (`--voters` and `--advertised-kafka-addr`).
//! A proxy learns which member a connection comes from by finding the process that owns the
//! connecting socket (`/proc/net/tcp`, then `/proc/<pid>/fd`), and that process's
//! `--raft-addr`. Cutting a member off closes every connection between it and the others and
//! refuses new ones, in both directions, while test clients (no member) still reach every
//! member, as clients on either side of a real partition would.

use std::collections::{BTreeSet, HashMap};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use crate::outage::splice;

/// One live proxied connection: which members it joins and its two sockets.
struct Conn {
    from: Option<u64>,
    to: u64,
    sockets: [TcpStream; 2],
}

#[derive(Default)]
struct Shared {
    /// Real raft listener address → member id, to recognize a member's process.
    members: Mutex<HashMap<String, u64>>,
    /// The members' processes as last found: pid → member id.
    pids: Mutex<HashMap<u32, u64>>,
    /// Pairs (smaller id, larger id) that cannot talk.
    cut: Mutex<BTreeSet<(u64, u64)>>,
    conns: Mutex<Vec<Conn>>,
    stop: AtomicBool,
    /// Connections refused or closed because of a cut.
    refused: Mutex<u64>,
    /// Members whose host is gone: connections to them are accepted and never answered.
    vanished: Mutex<BTreeSet<u64>>,
    /// The connections to vanished members, held open.
    held: Mutex<Vec<TcpStream>>,
}

impl Shared {
    fn is_cut(&self, a: u64, b: u64) -> bool {
        self.cut.lock().unwrap().contains(&(a.min(b), a.max(b)))
    }
}

/// The proxies of one cluster; see the module docs.
pub struct NetSplit {
    shared: Arc<Shared>,
    /// Per member (index = id − 1): (proxied Kafka address, proxied raft address).
    pub proxied: Vec<(String, String)>,
    /// Bound proxy listeners waiting for [`NetSplit::route`], by address.
    unrouted: Mutex<HashMap<String, TcpListener>>,
}

impl NetSplit {
    /// Proxies for `n` members; [`NetSplit::route`] tells each where its member listens.
    pub fn new(n: usize) -> NetSplit {
        let shared = Arc::new(Shared::default());
        let mut proxied = Vec::new();
        let mut unrouted = HashMap::new();
        for _ in 0..n {
            let kafka = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
            let raft = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
            proxied.push((addr(&kafka), addr(&raft)));
            unrouted.insert(addr(&kafka), kafka);
            unrouted.insert(addr(&raft), raft);
        }
        NetSplit {
            shared,
            proxied,
            unrouted: Mutex::new(unrouted),
        }
    }

    /// Member `id` listens on `kafka` and `raft` (real addresses); its proxies forward there.
    pub fn route(&self, id: u64, kafka: &str, raft: &str) {
        self.shared
            .members
            .lock()
            .unwrap()
            .insert(raft.to_string(), id);
        let (pk, pr) = &self.proxied[id as usize - 1];
        for (proxy, target) in [(pk, kafka), (pr, raft)] {
            let listener = self
                .unrouted
                .lock()
                .unwrap()
                .remove(proxy)
                .expect("a member is routed once");
            let shared = self.shared.clone();
            let target = target.to_string();
            thread::spawn(move || accept_loop(listener, shared, id, target));
        }
    }

    /// Cuts `id` off from every other member (both directions); clients still reach it.
    pub fn isolate(&self, id: u64, members: usize) {
        {
            let mut cut = self.shared.cut.lock().unwrap();
            for other in 1..=members as u64 {
                if other != id {
                    cut.insert((id.min(other), id.max(other)));
                }
            }
        }
        let mut conns = self.shared.conns.lock().unwrap();
        conns.retain(|c| {
            let broken = c.from.is_some_and(|f| self.shared.is_cut(f, c.to));
            if broken {
                for s in &c.sockets {
                    let _ = s.shutdown(Shutdown::Both);
                }
                *self.shared.refused.lock().unwrap() += 1;
            }
            !broken
        });
    }

    /// Makes member `id`'s host vanish, as a terminated instance's does: every connection to
    /// it is closed and new ones hang, unanswered, rather than being refused (what a process
    /// killed on a host that stays up would give). Kill its process too.
    pub fn vanish(&self, id: u64) {
        self.shared.vanished.lock().unwrap().insert(id);
        let mut conns = self.shared.conns.lock().unwrap();
        conns.retain(|c| {
            if c.to == id {
                for s in &c.sockets {
                    let _ = s.shutdown(Shutdown::Both);
                }
            }
            c.to != id
        });
    }

    /// Ends every cut.
    pub fn heal(&self) {
        self.shared.cut.lock().unwrap().clear();
    }

    /// How many member-to-member connections a cut has closed or refused.
    pub fn refused(&self) -> u64 {
        *self.shared.refused.lock().unwrap()
    }
}

impl Drop for NetSplit {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loops so they see `stop`.
        for (kafka, raft) in &self.proxied {
            let _ = TcpStream::connect(kafka);
            let _ = TcpStream::connect(raft);
        }
        for c in self.shared.conns.lock().unwrap().drain(..) {
            for s in &c.sockets {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        self.shared.held.lock().unwrap().clear();
    }
}

fn addr(l: &TcpListener) -> String {
    l.local_addr().expect("proxy addr").to_string()
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>, to: u64, target: String) {
    let local = listener.local_addr().expect("proxy addr");
    let raft = shared.members.lock().unwrap().contains_key(&target);
    for conn in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(client) = conn else { continue };
        if shared.vanished.lock().unwrap().contains(&to) {
            shared.held.lock().unwrap().push(client);
            continue;
        }
        // One connection at a time: while this one is placed, the next waits in the backlog,
        // which throttles members redialing in a storm (a thread per connection let them pile
        // up faster than /proc could be read).
        let from = client
            .peer_addr()
            .ok()
            .and_then(|peer| member_of(&shared, peer, local));
        if raft && from.is_none() {
            // Only members dial a raft port: one not recognized (gone before it was found)
            // would slip past every cut, so it is closed and the member redials.
            let _ = client.shutdown(Shutdown::Both);
            continue;
        }
        forward(client, &shared, from, to, &target);
    }
}

/// Joins `client` (from member `from`, if one) to `target`, unless `from` is cut off from `to`.
fn forward(client: TcpStream, shared: &Shared, from: Option<u64>, to: u64, target: &str) {
    let Ok(server) = TcpStream::connect(target) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    {
        // Under the lock `isolate` closes connections with, after it has set the cut: a
        // connection is either refused here or closed there, never missed by both.
        let mut conns = shared.conns.lock().unwrap();
        if from.is_some_and(|f| shared.is_cut(f, to)) {
            *shared.refused.lock().unwrap() += 1;
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
            return;
        }
        conns.push(Conn {
            from,
            to,
            sockets: [c2, s2],
        });
    }
    splice(client, server);
}

/// The member whose process owns the socket at `peer` connected to `local`, if any: the
/// members' processes seen last time are searched first, and /proc is scanned for them again
/// only when none holds the socket (a member restarted), so a connection costs a few
/// directory reads, not a walk of every process.
fn member_of(shared: &Shared, peer: SocketAddr, local: SocketAddr) -> Option<u64> {
    let inode = socket_inode(peer, local)?;
    let needle = format!("socket:[{inode}]");
    let known = shared.pids.lock().unwrap().clone();
    if let Some(member) = holder(&known, &needle) {
        return Some(member);
    }
    let found = member_processes(shared);
    let member = holder(&found, &needle);
    *shared.pids.lock().unwrap() = found;
    member
}

/// The member among `pids` (pid → member) whose process has an open fd linking to `needle`.
fn holder(pids: &HashMap<u32, u64>, needle: &str) -> Option<u64> {
    pids.iter().find_map(|(pid, member)| {
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
        fds.flatten()
            .any(|fd| {
                std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str().to_str() == Some(needle))
            })
            .then_some(*member)
    })
}

/// Every running process that is a member (by its `--raft-addr`), pid → member.
fn member_processes(shared: &Shared) -> HashMap<u32, u64> {
    let members = shared.members.lock().unwrap().clone();
    let mut out = HashMap::new();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if let Some(member) = args
            .windows(2)
            .find(|w| w[0] == b"--raft-addr")
            .and_then(|w| members.get(std::str::from_utf8(w[1]).ok()?))
        {
            out.insert(pid, *member);
        }
    }
    out
}

/// The inode of the loopback socket with local address `peer` and remote address `local`,
/// from `/proc/net/tcp` (addresses as hex `IP:PORT`, the IP in host byte order).
fn socket_inode(peer: SocketAddr, local: SocketAddr) -> Option<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let hex = |a: SocketAddr| match a {
        SocketAddr::V4(v4) => Some(format!(
            "{:08X}:{:04X}",
            u32::from_ne_bytes(v4.ip().octets()),
            v4.port()
        )),
        SocketAddr::V6(_) => None,
    };
    let (want_local, want_remote) = (hex(peer)?, hex(local)?);
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.len() > 9 && f[1] == want_local && f[2] == want_remote)
            .then(|| f[9].parse().ok())
            .flatten()
    })
}
