//! A byte-for-byte TCP proxy that can take its target "down": while down, open connections
//! are cut and new ones are closed at once, as a crashed or unreachable server would; while
//! stalled, new ones are accepted and never answered, as a server that hangs would. Placed
//! between a broker and the S3 server, it makes the object store unavailable and back again
//! without losing what the server holds (moto keeps objects only in memory).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

struct Shared {
    target: String,
    down: AtomicBool,
    stalled: AtomicBool,
    stop: AtomicBool,
    conns: Mutex<Vec<TcpStream>>,
}

pub struct OutageProxy {
    /// `http://127.0.0.1:PORT`, to use in place of the target's address.
    pub endpoint: String,
    addr: String,
    shared: Arc<Shared>,
}

impl OutageProxy {
    /// Proxies a free local port to `target` (`host:port`).
    pub fn start(target: &str) -> OutageProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr").to_string();
        let shared = Arc::new(Shared {
            target: target.to_string(),
            down: AtomicBool::new(false),
            stalled: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            conns: Mutex::new(Vec::new()),
        });
        let s = shared.clone();
        thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = conn else { continue };
                if s.down.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                if s.stalled.load(Ordering::SeqCst) {
                    s.conns.lock().unwrap().push(client);
                    continue;
                }
                let s = s.clone();
                thread::spawn(move || pipe(client, s));
            }
        });
        OutageProxy {
            endpoint: format!("http://{addr}"),
            addr,
            shared,
        }
    }

    /// Cuts every connection and refuses new ones until [`up`](Self::up).
    pub fn down(&self) {
        self.shared.down.store(true, Ordering::SeqCst);
        for c in self.shared.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    /// Cuts every connection; new ones are accepted and never answered until
    /// [`up`](Self::up).
    pub fn stall(&self) {
        self.shared.stalled.store(true, Ordering::SeqCst);
        for c in self.shared.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    pub fn up(&self) {
        self.shared.down.store(false, Ordering::SeqCst);
        self.shared.stalled.store(false, Ordering::SeqCst);
        // The connections held by a stall end now; clients open new ones.
        for c in self.shared.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for OutageProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(&self.addr);
        self.down();
    }
}

fn pipe(client: TcpStream, shared: Arc<Shared>) {
    let Ok(server) = TcpStream::connect(&shared.target) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    {
        let mut conns = shared.conns.lock().unwrap();
        conns.extend(client.try_clone().ok());
        conns.extend(server.try_clone().ok());
    }
    splice(client, server);
}

/// Copies bytes both ways until either side closes, then closes both.
pub(crate) fn splice(client: TcpStream, server: TcpStream) {
    let (Ok(mut c_read), Ok(mut s_write)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    thread::spawn(move || {
        copy(&mut c_read, &mut s_write);
        let _ = c_read.shutdown(Shutdown::Both);
        let _ = s_write.shutdown(Shutdown::Both);
    });
    let (mut s_read, mut c_write) = (server, client);
    thread::spawn(move || {
        copy(&mut s_read, &mut c_write);
        let _ = s_read.shutdown(Shutdown::Both);
        let _ = c_write.shutdown(Shutdown::Both);
    });
}

fn copy(from: &mut TcpStream, to: &mut TcpStream) {
    let mut buf = [0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}
