//! A TCP proxy that records every request frame real clients send to a broker: the raw
//! material of the hostile-input tests (mutated real requests) and the fuzzers' seed corpus.
//! The broker must advertise the proxy's address, so that clients come back through it after
//! bootstrapping.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread;

use bytes::Bytes;

#[derive(Default)]
struct Shared {
    target: Mutex<Option<String>>,
    frames: Mutex<Vec<Bytes>>,
}

/// See the module docs.
pub struct CaptureProxy {
    /// `127.0.0.1:PORT` the clients (and the broker's advertised address) should use.
    pub addr: String,
    shared: Arc<Shared>,
}

impl CaptureProxy {
    /// Binds a free port; connections wait for [`set_target`](Self::set_target).
    pub fn start() -> CaptureProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind capture proxy");
        let addr = listener.local_addr().expect("proxy addr").to_string();
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(client) = conn else { continue };
                let s = s.clone();
                thread::spawn(move || relay(client, s));
            }
        });
        CaptureProxy { addr, shared }
    }

    pub fn set_target(&self, broker_addr: &str) {
        *self.shared.target.lock().unwrap() = Some(broker_addr.to_string());
    }

    /// Every request frame seen so far (without its length prefix), in arrival order.
    pub fn frames(&self) -> Vec<Bytes> {
        self.shared.frames.lock().unwrap().clone()
    }

    /// The distinct `(api key, version)` pairs among the frames.
    pub fn apis(&self) -> BTreeSet<(i16, i16)> {
        self.frames()
            .iter()
            .filter(|f| f.len() >= 4)
            .map(|f| {
                (
                    i16::from_be_bytes([f[0], f[1]]),
                    i16::from_be_bytes([f[2], f[3]]),
                )
            })
            .collect()
    }

    /// Writes each distinct frame to `dir` as `<api>-v<version>-<crc>.bin` (a fuzz corpus).
    pub fn write_corpus(&self, dir: &Path) -> std::io::Result<usize> {
        std::fs::create_dir_all(dir)?;
        let mut n = 0;
        for f in self.frames() {
            if f.len() < 4 {
                continue;
            }
            let name = format!(
                "{}-v{}-{:08x}.bin",
                i16::from_be_bytes([f[0], f[1]]),
                i16::from_be_bytes([f[2], f[3]]),
                fnv1a(&f)
            );
            std::fs::write(dir.join(name), &f)?;
            n += 1;
        }
        Ok(n)
    }
}

/// A content hash for file names (FNV-1a: the files only need distinct names).
fn fnv1a(data: &[u8]) -> u32 {
    data.iter().fold(0x811c_9dc5u32, |h, b| {
        (h ^ *b as u32).wrapping_mul(0x0100_0193)
    })
}

fn relay(mut client: TcpStream, shared: Arc<Shared>) {
    let target = loop {
        if let Some(t) = shared.target.lock().unwrap().clone() {
            break t;
        }
        thread::sleep(std::time::Duration::from_millis(10));
    };
    let Ok(mut upstream) = TcpStream::connect(&target) else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (Ok(mut client_w), Ok(mut upstream_r)) = (client.try_clone(), upstream.try_clone()) else {
        return;
    };
    // Responses flow back untouched.
    let back = thread::spawn(move || {
        let _ = std::io::copy(&mut upstream_r, &mut client_w);
        let _ = client_w.shutdown(Shutdown::Both);
    });
    // Requests are cut into frames and recorded on the way.
    loop {
        let mut len = [0u8; 4];
        if client.read_exact(&mut len).is_err() {
            break;
        }
        let size = u32::from_be_bytes(len) as usize;
        let mut body = Vec::new();
        if (&mut client)
            .take(size as u64)
            .read_to_end(&mut body)
            .is_err()
            || body.len() < size
        {
            break;
        }
        shared
            .frames
            .lock()
            .unwrap()
            .push(Bytes::from(body.clone()));
        if upstream.write_all(&len).is_err() || upstream.write_all(&body).is_err() {
            break;
        }
    }
    let _ = upstream.shutdown(Shutdown::Both);
    let _ = back.join();
}
