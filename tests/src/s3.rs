//! A real S3 HTTP server for object-store tests: moto (installed by `scripts/test.sh`), started on a free
//! port per test and killed on drop. `scripts/test.sh` installs it and sets
//! `STRATA_MOTO_SERVER`; otherwise `~/.cache/strata-venv/bin/moto_server` is tried.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use strata_objstore::StoreConfig;

/// Region and static keys the tests use (moto accepts any).
pub const REGION: &str = "us-east-1";

pub struct MotoServer {
    child: Option<Child>,
    pub endpoint: String,
    port: u16,
    /// Refuse every request: moto's IAM knows no key (a server given wrong credentials).
    authenticating: bool,
}

fn moto_bin() -> PathBuf {
    if let Ok(p) = std::env::var("STRATA_MOTO_SERVER") {
        return p.into();
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    PathBuf::from(home).join(".cache/strata-venv/bin/moto_server")
}

impl MotoServer {
    /// Starts moto and waits until it answers.
    pub fn start() -> MotoServer {
        MotoServer::launch(false)
    }

    /// A server that checks signatures against its IAM, where no key exists: every request
    /// is refused as wrong credentials would be.
    pub fn start_authenticating() -> MotoServer {
        MotoServer::launch(true)
    }

    fn launch(authenticating: bool) -> MotoServer {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let mut s = MotoServer {
            child: None,
            endpoint: format!("http://127.0.0.1:{port}"),
            port,
            authenticating,
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let bin = moto_bin();
        assert!(
            bin.exists(),
            "moto_server not found at {} (scripts/test.sh installs it; or set STRATA_MOTO_SERVER)",
            bin.display()
        );
        let mut cmd = Command::new(&bin);
        if self.authenticating {
            cmd.env("INITIAL_NO_AUTH_ACTION_COUNT", "0");
        }
        let child = cmd
            .args(["-H", "127.0.0.1", "-p", &self.port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto_server");
        self.child = Some(child);
        crate::wait_for("moto_server to listen", Duration::from_secs(30), || {
            TcpStream::connect(("127.0.0.1", self.port)).is_ok()
        });
    }

    /// Kills the server (an object store outage). Its data is gone: moto keeps it in memory.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Creates a bucket (moto needs no signature).
    pub fn create_bucket(&self, bucket: &str) {
        let resp = crate::http::http_request(&self.addr(), "PUT", &format!("/{bucket}"), "")
            .expect("PUT bucket to moto");
        assert_eq!(resp.status, 200, "create bucket {bucket}: {}", resp.body);
    }

    /// `host:port` of the server, for raw HTTP requests (moto needs no signature).
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A store config for `s3://bucket/prefix` on this server.
    pub fn store_config(&self, bucket: &str, prefix: &str) -> StoreConfig {
        StoreConfig {
            endpoint: Some(self.endpoint.clone()),
            region: Some(REGION.into()),
            access_key_id: Some("test".into()),
            secret_access_key: Some("test".into()),
            allow_http: true,
            ..StoreConfig::new(format!("s3://{bucket}/{prefix}"))
        }
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        self.stop();
    }
}
