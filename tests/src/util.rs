//! Waiting on conditions, deterministic pseudo-random data, unique names.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Polls `cond` until it returns true or `timeout` passes; returns whether it became true.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Like [`wait_until`] but panics with `what` on timeout.
pub fn wait_for(what: &str, timeout: Duration, cond: impl FnMut() -> bool) {
    assert!(
        wait_until(timeout, cond),
        "timed out after {timeout:?} waiting for {what}"
    );
}

/// Polls `f` until it returns `Some`, or panics with `what` after `timeout`.
pub fn wait_for_some<T>(what: &str, timeout: Duration, f: impl FnMut() -> Option<T>) -> T {
    poll_until(timeout, f, || {
        format!("timed out after {timeout:?} waiting for {what}")
    })
}

/// Polls `f` until it returns `Some`; after `timeout`, panics with what `report()` says then
/// (for waits whose failure needs the state at that moment, not just a name).
pub fn poll_until<T>(
    timeout: Duration,
    mut f: impl FnMut() -> Option<T>,
    report: impl FnOnce() -> String,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("{}", report());
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A value that must stay the same for a while (a group that has settled): feed it every
/// observation, `None` for "not valid now"; it returns the value once it has been unchanged
/// for `period`.
pub struct Steady<T> {
    period: Duration,
    since: Option<(Instant, T)>,
}

impl<T: PartialEq + Clone> Steady<T> {
    pub fn new(period: Duration) -> Self {
        Steady {
            period,
            since: None,
        }
    }

    pub fn observe(&mut self, now: Option<T>) -> Option<T> {
        match (&self.since, now) {
            (Some((t, prev)), Some(v)) if *prev == v => (t.elapsed() >= self.period).then_some(v),
            (_, Some(v)) => {
                self.since = Some((Instant::now(), v));
                None
            }
            (_, None) => {
                self.since = None;
                None
            }
        }
    }
}

/// Milliseconds since the epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// A topic name unique within this test process.
pub fn unique_topic(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// xorshift64*: reproducible test data without a crate.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64() as u8).collect()
    }

    /// Text from a small alphabet: compressible, but not trivially.
    pub fn text(&mut self, len: usize) -> Vec<u8> {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789 -_";
        (0..len)
            .map(|_| ALPHABET[self.below(ALPHABET.len() as u64) as usize])
            .collect()
    }
}

/// The workspace root: where `deploy/` and `scripts/` are.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// The Python of the test environment's virtualenv (kafka-python, confluent-kafka, pyiceberg):
/// `STRATA_VENV_PYTHON`, or where `.ci/run` puts it.
pub fn venv_python() -> String {
    std::env::var("STRATA_VENV_PYTHON").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        format!("{home}/.cache/strata-venv/bin/python")
    })
}

/// Joins `thread` if it ends within `timeout` (re-raising its panic); `None` if it is still
/// running then. A client library stuck in its teardown (librdkafka's destroy waiting on a
/// broker thread) must fail or let a test go on, never hang the suite.
pub fn join_within<T>(thread: std::thread::JoinHandle<T>, timeout: Duration) -> Option<T> {
    let deadline = Instant::now() + timeout;
    while !thread.is_finished() {
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    match thread.join() {
        Ok(v) => Some(v),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
