//! Running `strata serve` as a child process on free ports.

// Sends signals to the broker processes it starts (kill(2)).
#![allow(unsafe_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// How long a broker may take to print READY.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a SIGTERM'd broker may take to exit.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// Path of the `strata` binary: `$STRATA_BIN`, else `<target>/debug/strata` found from the test
/// executable (`<target>/debug/deps/<test>-<hash>`).
pub fn strata_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("STRATA_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable lives in <target>/<profile>/deps");
    dir.join(format!("strata{}", std::env::consts::EXE_SUFFIX))
}

/// How to start a broker.
#[derive(Clone, Debug, Default)]
pub struct BrokerOpts {
    /// Extra environment, e.g. `("STRATA_NUM_PARTITIONS", "3")`.
    pub env: Vec<(String, String)>,
    /// Contents of a config file passed with `--config`.
    pub config: Option<String>,
    /// `--advertised-kafka-addr`.
    pub advertised_kafka_addr: Option<String>,
    /// Run on this data dir instead of a fresh temporary one (kept by the caller).
    pub data_dir: Option<PathBuf>,
    /// `--node-id`.
    pub node_id: Option<u64>,
    /// Fixed listeners (`--kafka-addr`, `--admin-addr`, `--raft-addr`); port 0 when unset.
    pub kafka_addr: Option<String>,
    pub admin_addr: Option<String>,
    pub raft_addr: Option<String>,
    /// `--voters`.
    pub voters: Option<String>,
}

impl BrokerOpts {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets one `STRATA_<KEY>` environment variable.
    pub fn env(mut self, key: &str, value: impl ToString) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Tier settings that make a test quick: 100 ms task and retention ticks, small caches.
    pub fn quick_tiering(self) -> Self {
        self.env("STRATA_REMOTE_LOG_MANAGER_TASK_INTERVAL_MS", 100)
            .env("STRATA_LOG_RETENTION_CHECK_INTERVAL_MS", 100)
            .env("STRATA_REMOTE_CACHE_MEMORY_BYTES", 8 << 20)
            .env("STRATA_REMOTE_CACHE_DISK_BYTES", 32 << 20)
            .env("STRATA_REMOTE_CACHE_REPLAY_MEMORY_BYTES", 8 << 20)
            .env("STRATA_REMOTE_CACHE_REPLAY_DISK_BYTES", 32 << 20)
    }

    pub fn config(mut self, toml: &str) -> Self {
        self.config = Some(toml.to_string());
        self
    }

    pub fn advertised_kafka_addr(mut self, addr: &str) -> Self {
        self.advertised_kafka_addr = Some(addr.to_string());
        self
    }

    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// A cluster member: its id, fixed listeners (so restarts keep their addresses) and the
    /// voters.
    pub fn member(
        mut self,
        node_id: u64,
        kafka: &str,
        admin: &str,
        raft: &str,
        voters: &str,
    ) -> Self {
        self.node_id = Some(node_id);
        self.kafka_addr = Some(kafka.to_string());
        self.admin_addr = Some(admin.to_string());
        self.raft_addr = Some(raft.to_string());
        self.voters = Some(voters.to_string());
        self
    }
}

/// A started process whose READY line has not been read yet.
struct Pending {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr_done: mpsc::Receiver<()>,
}

/// Everything the broker printed, across restarts; shown when a test fails.
#[derive(Clone, Default)]
pub struct OutputLog(Arc<Mutex<Vec<u8>>>);

impl OutputLog {
    fn push(&self, prefix: &str, line: &[u8]) {
        let mut buf = self.0.lock().unwrap_or_else(|e| e.into_inner());
        buf.extend_from_slice(prefix.as_bytes());
        buf.extend_from_slice(line);
        if !line.ends_with(b"\n") {
            buf.push(b'\n');
        }
    }

    pub fn text(&self) -> String {
        let buf = self.0.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&buf).into_owned()
    }
}

/// A running `strata serve` process with its own data dir.
pub struct Broker {
    /// `127.0.0.1:PORT` of the Kafka listener (as printed in READY).
    pub kafka_addr: String,
    /// `127.0.0.1:PORT` of the admin HTTP listener.
    pub admin_addr: String,
    /// `127.0.0.1:PORT` of the metadata quorum's raft listener.
    pub raft_addr: String,
    /// Every Kafka listener's name and bound `127.0.0.1:PORT` (as printed in READY).
    pub listeners: Vec<(String, String)>,
    opts: BrokerOpts,
    data_dir: PathBuf,
    _temp: Option<TempDir>,
    child: Option<Child>,
    pending: Option<Pending>,
    log: OutputLog,
    generation: u32,
}

impl Broker {
    /// Runs the `strata` CLI with `args` against this broker (`-b` its Kafka address).
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new(strata_bin())
            .args(args)
            .args(["-b", &self.kafka_addr])
            .env("RUST_BACKTRACE", "0")
            .output()
            .expect("run strata")
    }

    /// [`Broker::cli`] that must succeed: its stdout.
    pub fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "strata {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts a broker with default settings on a fresh temporary data dir.
    pub fn start_default() -> Broker {
        Self::start(BrokerOpts::new())
    }

    /// Starts a broker and waits for its READY line.
    pub fn start(opts: BrokerOpts) -> Broker {
        let mut broker = Self::launch(opts);
        broker.wait_ready();
        broker
    }

    /// Starts a broker without waiting for it to be ready (a cluster member waits for a
    /// quorum of its peers); call [`Broker::wait_ready`] next.
    pub fn launch(opts: BrokerOpts) -> Broker {
        let (temp, data_dir) = match &opts.data_dir {
            Some(dir) => (None, dir.clone()),
            None => {
                let temp = tempfile::Builder::new()
                    .prefix("strata-test-")
                    .tempdir()
                    .expect("create temp data dir");
                let dir = temp.path().join("data");
                std::fs::create_dir_all(&dir).expect("create data dir");
                (Some(temp), dir)
            }
        };
        let mut broker = Broker {
            kafka_addr: String::new(),
            admin_addr: String::new(),
            raft_addr: String::new(),
            listeners: Vec::new(),
            opts,
            data_dir,
            _temp: temp,
            child: None,
            pending: None,
            log: OutputLog::default(),
            generation: 0,
        };
        broker.spawn_process();
        broker
    }

    fn spawn(&mut self) {
        self.spawn_process();
        self.wait_ready();
    }

    fn spawn_process(&mut self) {
        assert!(
            self.child.is_none() && self.pending.is_none(),
            "broker is already running"
        );
        let bin = strata_bin();
        assert!(
            bin.exists(),
            "strata binary not found at {} (run `cargo build --workspace --all-targets` \
             first, or set STRATA_BIN)",
            bin.display()
        );
        self.generation += 1;
        let mut cmd = Command::new(&bin);
        let opts = &self.opts;
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args([
                "--kafka-addr",
                opts.kafka_addr.as_deref().unwrap_or("127.0.0.1:0"),
                "--admin-addr",
                opts.admin_addr.as_deref().unwrap_or("127.0.0.1:0"),
                "--raft-addr",
                opts.raft_addr.as_deref().unwrap_or("127.0.0.1:0"),
            ]);
        if let Some(id) = opts.node_id {
            cmd.args(["--node-id", &id.to_string()]);
        }
        if let Some(voters) = &opts.voters {
            cmd.args(["--voters", voters]);
        }
        if let Some(cfg) = &self.opts.config {
            let parent = self.data_dir.parent().unwrap_or(Path::new("/tmp"));
            let path = parent.join(format!("strata-{}.toml", self.generation));
            std::fs::write(&path, cfg).expect("write config file");
            cmd.arg("--config").arg(path);
        }
        if let Some(adv) = &self.opts.advertised_kafka_addr {
            cmd.args(["--advertised-kafka-addr", adv]);
        }
        // As in Kafka's own test clusters, a new group forms at once (not after the default
        // 3 s), unless a test asks for the initial rebalance delay with its own STRATA_ setting.
        cmd.env("STRATA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0");
        for (k, v) in &self.opts.env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");

        let generation = self.generation;
        self.log.push(
            "",
            format!(
                "===== strata serve (start #{generation}, pid {}) =====",
                child.id()
            )
            .as_bytes(),
        );
        let (tx, rx) = mpsc::channel::<String>();
        let log = self.log.clone();
        thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        log.push(&format!("[{generation} out] "), &line);
                        let _ = tx.send(String::from_utf8_lossy(&line).trim().to_string());
                    }
                }
            }
        });
        let log = self.log.clone();
        let (err_done_tx, err_done_rx) = mpsc::channel::<()>();
        thread::spawn(move || {
            let mut reader = BufReader::new(stderr);
            let mut line = Vec::new();
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => log.push(&format!("[{generation} err] "), &line),
                }
            }
            let _ = err_done_tx.send(());
        });
        self.pending = Some(Pending {
            child,
            lines: rx,
            stderr_done: err_done_rx,
        });
    }

    /// Waits for the READY line of a launched process.
    pub fn wait_ready(&mut self) {
        let Pending {
            mut child,
            lines: rx,
            stderr_done: err_done_rx,
        } = self.pending.take().expect("no process launched");
        let deadline = Instant::now() + READY_TIMEOUT;
        let ready = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix("READY ") {
                        break Ok(rest.to_string());
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    break Err(format!("no READY line within {READY_TIMEOUT:?}"))
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    break Err("stdout closed before READY (the process exited?)".to_string())
                }
            }
        };
        let ready = match ready {
            Ok(r) => r,
            Err(why) => {
                let _ = child.kill();
                let status = child.wait();
                let _ = err_done_rx.recv_timeout(Duration::from_secs(5));
                panic!(
                    "strata did not become ready: {why}; exit: {status:?}\n--- broker output ---\n{}",
                    self.log.text()
                );
            }
        };
        let mut kafka = None;
        let mut admin = None;
        let mut raft = None;
        let mut listeners = Vec::new();
        for field in ready.split_whitespace() {
            if let Some(v) = field.strip_prefix("listeners=") {
                listeners = (v.split(','))
                    .filter_map(|l| l.split_once('@'))
                    .map(|(n, a)| (n.to_string(), a.to_string()))
                    .collect();
            }
            if let Some(v) = field.strip_prefix("kafka=") {
                kafka = Some(v.to_string());
            } else if let Some(v) = field.strip_prefix("admin=") {
                admin = Some(v.to_string());
            } else if let Some(v) = field.strip_prefix("raft=") {
                raft = Some(v.to_string());
            }
        }
        let (Some(kafka), Some(admin), Some(raft)) = (kafka, admin, raft) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("malformed READY line: READY {ready}");
        };
        self.kafka_addr = kafka;
        self.admin_addr = admin;
        self.raft_addr = raft;
        self.listeners = listeners;
        self.child = Some(child);
    }

    /// The bound address of Kafka listener `name`.
    pub fn listener(&self, name: &str) -> &str {
        (self.listeners.iter())
            .find(|(n, _)| n == name)
            .map(|(_, a)| a.as_str())
            .unwrap_or_else(|| panic!("no listener {name} in {:?}", self.listeners))
    }

    /// The data directory (survives restarts).
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Everything the broker printed so far.
    pub fn output(&self) -> String {
        self.log.text()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("broker not running").id()
    }

    /// Resident memory of the process (VmRSS), in bytes.
    pub fn rss_bytes(&self) -> u64 {
        self.memory_status("VmRSS")
    }

    /// The most resident memory the process has had so far (VmHWM), in bytes.
    pub fn peak_rss_bytes(&self) -> u64 {
        self.memory_status("VmHWM")
    }

    /// A `kB` field of `/proc/PID/status`, in bytes.
    fn memory_status(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("read /proc/PID/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{field} in /proc/PID/status"))
            * 1024
    }

    /// This broker's `--node-id` (1 unless set).
    pub fn node_id(&self) -> u64 {
        self.opts.node_id.unwrap_or(1)
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Panics (with the broker's output) if the process has exited.
    pub fn assert_running(&mut self) {
        if let Some(c) = self.child.as_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                panic!(
                    "strata exited unexpectedly: {status}\n--- broker output ---\n{}",
                    self.log.text()
                );
            }
        } else {
            panic!("strata is not running");
        }
    }

    /// SIGKILL: a crash.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("broker not running");
        child.kill().expect("kill -9 strata");
        let _ = child.wait();
        self.log.push("", b"===== killed with SIGKILL =====");
    }

    /// Sends a signal and waits for the process to exit; returns its status.
    pub fn signal_and_wait(&mut self, signal: i32) -> ExitStatus {
        let child = self.child.take().expect("broker not running");
        let pid = child.id() as libc::pid_t;
        // SAFETY: plain kill(2) on our own child's pid, which has not been reaped yet.
        let rc = unsafe { libc::kill(pid, signal) };
        assert_eq!(rc, 0, "kill({pid}, {signal}) failed");
        self.reap(child, SHUTDOWN_TIMEOUT, &format!(" after signal {signal}"))
    }

    /// Waits for the process to exit on its own; panics (with its output) if it runs on
    /// for `within`.
    pub fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let child = self.child.take().expect("broker not running");
        self.reap(child, within, "")
    }

    /// Waits up to `within` for `child` to exit (`after`: what it exits after, for the log).
    fn reap(&mut self, mut child: Child, within: Duration, after: &str) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    self.log.push(
                        "",
                        format!("===== exited{after}: {status} =====").as_bytes(),
                    );
                    return status;
                }
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "strata did not exit within {within:?}{after}\n--- broker output ---\n{}",
                        self.log.text()
                    );
                }
                Err(e) => panic!("wait for strata: {e}"),
            }
        }
    }

    /// SIGTERM: a clean shutdown, which must exit with status 0.
    pub fn terminate(&mut self) {
        let status = self.signal_and_wait(libc::SIGTERM);
        assert!(
            status.success(),
            "strata exited with {status} after SIGTERM (expected 0)\n--- broker output ---\n{}",
            self.log.text()
        );
    }

    /// Starts the process again without waiting for READY (see [`Broker::launch`]).
    pub fn relaunch(&mut self) {
        self.spawn_process();
    }

    /// Starts the broker again on the same data dir (after `kill9` or `terminate`); the new
    /// process listens on new ports unless they were fixed.
    pub fn restart(&mut self) {
        if self.child.is_some() {
            self.terminate();
        }
        self.spawn();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(mut pending) = self.pending.take() {
            let _ = pending.child.kill();
            let _ = pending.child.wait();
        }
        if thread::panicking() {
            eprintln!(
                "--- strata output (data dir {}) ---\n{}--- end of strata output ---",
                self.data_dir.display(),
                self.log.text()
            );
        } else if self.log.text().contains("panicked at") {
            // A panic fails one request and the broker carries on, so a client may never
            // notice; a debug build's invariant checks panic too. Either is a bug.
            panic!(
                "strata panicked during the test (data dir {}):\n{}",
                self.data_dir.display(),
                self.log.text()
            );
        }
    }
}
