//! A frame-aware TCP proxy between Kafka clients and a broker that can swallow Produce
//! responses and cut the connection: the broker has appended the batch, the client never hears
//! so, and retries it.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

#[derive(Default)]
struct Shared {
    target: Mutex<Option<String>>,
    /// Produce responses still to be swallowed.
    drop_budget: AtomicUsize,
    /// Produce responses swallowed so far.
    dropped: AtomicUsize,
    stop: AtomicBool,
    conns: Mutex<Vec<TcpStream>>,
}

/// See the module docs.
pub struct FaultProxy {
    /// `127.0.0.1:PORT` the clients should use.
    pub addr: String,
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// Binds a free port; connections wait for [`set_target`](Self::set_target).
    pub fn start() -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr").to_string();
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = conn else { continue };
                let s = s.clone();
                thread::spawn(move || handle(client, s));
            }
        });
        FaultProxy { addr, shared }
    }

    pub fn set_target(&self, broker_addr: &str) {
        *self.shared.target.lock().unwrap() = Some(broker_addr.to_string());
    }

    /// Swallows the responses to the next `n` Produce requests, cutting their connections.
    pub fn drop_produce_responses(&self, n: usize) {
        self.shared.drop_budget.fetch_add(n, Ordering::SeqCst);
    }

    /// How many Produce responses were swallowed.
    pub fn dropped(&self) -> usize {
        self.shared.dropped.load(Ordering::SeqCst)
    }

    /// Stops swallowing responses.
    pub fn heal(&self) {
        self.shared.drop_budget.store(0, Ordering::SeqCst);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(&self.addr);
        for c in self.shared.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

fn read_frame(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let n = i32::from_be_bytes(len);
    if n < 0 {
        return None;
    }
    let mut buf = vec![0u8; n as usize + 4];
    buf[..4].copy_from_slice(&len);
    s.read_exact(&mut buf[4..]).ok()?;
    Some(buf)
}

fn handle(mut client: TcpStream, shared: Arc<Shared>) {
    if shared.stop.load(Ordering::SeqCst) {
        return;
    }
    let mut target = None;
    for _ in 0..400 {
        target = shared.target.lock().unwrap().clone();
        if target.is_some() {
            break;
        }
        thread::sleep(Duration::from_millis(25));
    }
    let Some(target) = target else { return };
    let Ok(mut broker) = TcpStream::connect(&target) else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = broker.set_nodelay(true);
    {
        let mut conns = shared.conns.lock().unwrap();
        conns.extend(client.try_clone().ok());
        conns.extend(broker.try_clone().ok());
    }
    let to_drop: Arc<Mutex<HashSet<i32>>> = Arc::default();

    // client -> broker
    let (mut c_read, mut b_write) = (client.try_clone().unwrap(), broker.try_clone().unwrap());
    let (c2, b2) = (client.try_clone().unwrap(), broker.try_clone().unwrap());
    let drops = to_drop.clone();
    let sh = shared.clone();
    thread::spawn(move || {
        while let Some(frame) = read_frame(&mut c_read) {
            if frame.len() >= 12 {
                let api_key = i16::from_be_bytes([frame[4], frame[5]]);
                let correlation_id = i32::from_be_bytes([frame[8], frame[9], frame[10], frame[11]]);
                if api_key == 0
                    && sh
                        .drop_budget
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok()
                {
                    drops.lock().unwrap().insert(correlation_id);
                }
            }
            if b_write.write_all(&frame).is_err() {
                break;
            }
        }
        let _ = c2.shutdown(Shutdown::Both);
        let _ = b2.shutdown(Shutdown::Both);
    });

    // broker -> client
    while let Some(frame) = read_frame(&mut broker) {
        if frame.len() >= 8 {
            let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
            if to_drop.lock().unwrap().remove(&correlation_id) {
                shared.dropped.fetch_add(1, Ordering::SeqCst);
                break;
            }
        }
        if client.write_all(&frame).is_err() {
            break;
        }
    }
    let _ = client.shutdown(Shutdown::Both);
    let _ = broker.shutdown(Shutdown::Both);
}
